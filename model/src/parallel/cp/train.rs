//! Context-parallel training: one thread per rank, each with its own replica of the model
//! (on its own device), the step's packed batch split by [`CpLayout`](super::CpLayout). Rank
//! `r`'s loss is the sum of its tokens' cross-entropies over the step's token count, so the
//! sum over ranks is the single-device mean loss, and the sum over ranks of each replicated
//! parameter's gradient (one flat all-reduce per step: embeddings, projections, norms, sinks)
//! is its single-device gradient. Every rank then takes the same AdamW step.

use std::collections::HashMap;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::{GradientsParams, Optimizer};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::activation::log_softmax;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, FloatDType, Int, Tensor, TensorData};
use burn_ascend::{AttnError, TrainingBackend};

use super::forward::{forward_rank, RankStep};
use super::gather::{Comm, CpBackend};
use crate::load::data::{PackedBatch, Packer};
use crate::model::transformer::Transformer;
use crate::run_state::state::TrainState;
use crate::train::eager::{StepReport, TrainOptions};

/// Sum of the next-token cross-entropies of `logits [T_r, V]` against `targets [T_r]`,
/// divided by the step's token count `total`.
pub fn partial_cross_entropy<B: Backend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    total: usize,
) -> Tensor<B, 1> {
    let t = targets.dims()[0];
    let logp = log_softmax(logits, 1);
    logp.gather(1, targets.reshape([t, 1]))
        .sum()
        .neg()
        .div_scalar(total as f64)
}

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

struct Collect<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    items: Vec<(ParamId, Vec<usize>, Tensor<Inner<B>, 1>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<Inner<B>, D>(param.id) {
            let dims = g.dims().to_vec();
            let n: usize = dims.iter().product();
            self.items.push((param.id, dims, g.reshape([n])));
        }
    }
}

struct Restore<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    by_id: HashMap<ParamId, (Vec<usize>, Tensor<Inner<B>, 1>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Restore<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some((dims, t)) = self.by_id.remove(&param.id) {
            let shape: [usize; D] = std::array::from_fn(|i| dims[i]);
            self.grads
                .register::<Inner<B>, D>(param.id, t.reshape(shape));
        }
    }
}

/// Every gradient of `grads` summed over the ranks of `comm` and multiplied by `scale` (one
/// flat all-reduce, in f32).
pub fn sum_gradients<B: AutodiffBackend>(
    model: &Transformer<B>,
    mut grads: GradientsParams,
    comm: &Comm<Inner<B>>,
    scale: f64,
) -> Result<GradientsParams, AttnError> {
    let mut c = Collect::<B> {
        grads: &mut grads,
        items: Vec::new(),
    };
    model.visit(&mut c);
    let items = c.items;
    if items.is_empty() {
        return Ok(grads);
    }
    let dtypes: Vec<_> = items.iter().map(|(_, _, t)| t.dtype()).collect();
    let flat = Tensor::cat(
        items
            .iter()
            .map(|(_, _, t)| t.clone().cast(FloatDType::F32))
            .collect(),
        0,
    );
    let mut sum = comm.all_reduce_sum(flat)?;
    if scale != 1.0 {
        sum = sum.mul_scalar(scale);
    }
    let mut by_id = HashMap::new();
    let mut off = 0;
    for ((id, dims, t), dt) in items.into_iter().zip(dtypes) {
        let n = t.dims()[0];
        by_id.insert(id, (dims, sum.clone().slice(off..off + n).cast(dt)));
        off += n;
    }
    model.visit(&mut Restore::<B> {
        grads: &mut grads,
        by_id,
    });
    Ok(grads)
}

/// One rank's loss (already summed over ranks is the step's mean loss) of `batch`, with
/// rank `rank`'s `step` share.
pub fn rank_loss<B: CpBackend + TrainingBackend>(
    model: &Transformer<B>,
    batch: &PackedBatch,
    step: &RankStep,
    comm: &Comm<Inner<B>>,
) -> Result<Tensor<B, 1>, AttnError> {
    if batch.loss_mask.is_some() {
        // Chat data's assistant-only loss divides by the kept tokens of the whole step, which
        // the ranks would have to agree on first; not built.
        return Err(AttnError::Unsupported(
            "--cp with chat data (a loss on the assistant's tokens only)".into(),
        ));
    }
    let device = model.embed_tokens.weight.val().device();
    let mine = step.tokens();
    let pick = |v: &[i64]| -> Tensor<B, 1, Int> {
        let data: Vec<i64> = mine.iter().map(|&g| v[g]).collect();
        Tensor::from_data(TensorData::new(data, [mine.len()]), &device)
    };
    let logits = forward_rank(model, pick(&batch.tokens), step, comm)?;
    Ok(partial_cross_entropy(
        logits,
        pick(&batch.targets),
        batch.tokens.len(),
    ))
}

/// What every rank of a run shares.
pub(super) struct Run<'a> {
    /// Per data-parallel rank, its batch of each step.
    pub(super) batches: Vec<Vec<PackedBatch>>,
    pub(super) first_step: usize,
    pub(super) resume_optimizer: bool,
    pub(super) opts: &'a TrainOptions,
}

/// One rank's communicators: its context-parallel group and, in a 2-D layout, its
/// data-parallel group (the ranks holding the same chunks of other batches).
pub struct RankComms<B: Backend> {
    /// The context-parallel group (its size is the CP degree).
    pub cp: Comm<B>,
    /// The data-parallel group, `None` for one data-parallel rank.
    pub dp: Option<Comm<B>>,
}

/// Makes a rank leave its groups when its thread ends without finishing (an error, or a
/// panic in a backward collective), so its peers fail instead of waiting for it.
struct LeaveUnlessDone<B: Backend> {
    comms: Vec<Comm<B>>,
    done: bool,
}

impl<B: Backend> Drop for LeaveUnlessDone<B> {
    fn drop(&mut self) {
        if !self.done {
            for c in &self.comms {
                c.leave();
            }
        }
    }
}

/// One rank's part of [`train_context_parallel`].
pub(super) fn train_rank<B: CpBackend + TrainingBackend>(
    model: Transformer<B>,
    run: &Run<'_>,
    comms: RankComms<Inner<B>>,
    writer: Option<TrainState>,
    on_step: impl FnMut(&StepReport, f32),
) -> Result<Transformer<B>, AttnError> {
    let mut guard = LeaveUnlessDone {
        comms: std::iter::once(comms.cp.clone())
            .chain(comms.dp.clone())
            .collect(),
        done: false,
    };
    let out = train_rank_steps(model, run, comms, writer, on_step);
    guard.done = out.is_ok();
    out
}

fn train_rank_steps<B: CpBackend + TrainingBackend>(
    mut model: Transformer<B>,
    run: &Run<'_>,
    comms: RankComms<Inner<B>>,
    mut writer: Option<TrainState>,
    mut on_step: impl FnMut(&StepReport, f32),
) -> Result<Transformer<B>, AttnError> {
    let opts = run.opts;
    let device = model.embed_tokens.weight.val().device();
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
    let total_steps = opts.total_steps;
    let schedule = crate::train::eager::schedule_of(opts);
    let mut optim =
        crate::train::optim::FusedAdamW::<B>::new(opts.weight_decay)?.init::<Transformer<B>>();
    if run.resume_optimizer {
        // The optimizer state of the published checkpoint the model came from (verified).
        let saved = crate::run_state::published::Published::open(&opts.out)?;
        let (bytes, path) = crate::train::eager::whole_optimizer(&saved)?;
        let record = recorder
            .load(bytes, &device)
            .map_err(|e| AttnError::invalid("checkpoint", format!("{}: {e}", path.display())))?;
        optim = optim.load_record(record);
    }
    let cp = &comms.cp;
    let dp_size = comms.dp.as_ref().map_or(1, |d| d.size());
    let batches = &run.batches[comms.dp.as_ref().map_or(0, |d| d.rank())];
    let end = run.first_step + batches.len();
    for (i, batch) in batches.iter().enumerate() {
        let step = run.first_step + i;
        let share = RankStep::new(&model, &batch.cu_seqlens, cp.size(), cp.rank())?;
        let loss = rank_loss(&model, batch, &share, cp)?;
        let mut total = cp.all_reduce_sum(loss.clone().inner())?;
        if let Some(dp) = &comms.dp {
            total = dp.all_reduce_sum(total)?.div_scalar(dp_size as f64);
        }
        let loss_value: f32 = total.into_scalar().elem();
        if !loss_value.is_finite() {
            return Err(AttnError::invalid(
                "lr",
                format!("the loss became {loss_value} at step {step}; lower the learning rate"),
            ));
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let mut grads = sum_gradients(&model, grads, cp, 1.0)?;
        if let Some(dp) = &comms.dp {
            // Data parallelism averages: the loss is the mean over the global batch.
            grads = sum_gradients(&model, grads, dp, 1.0 / dp_size as f64)?;
        }
        // The global norm clip of the summed gradients: the same on every rank.
        let (grads, _) = crate::train::optim::clip_global_norm(&model, grads, opts.clip_norm);
        let lr = schedule.lr(step);
        model = optim.step(lr, model, grads);
        let report = StepReport {
            step,
            total_steps,
            loss: loss_value,
            lr,
            tokens: batch.tokens.len() * dp_size,
        };
        on_step(&report, loss_value);
        let checkpoint = step + 1 == end || (step + 1).is_multiple_of(opts.save_every.max(1));
        if let Some(state) = writer.as_mut() {
            state.losses.push(loss_value);
            state.step = step + 1;
            state.devices = dp_size;
            if checkpoint {
                std::fs::create_dir_all(&opts.out).map_err(|e| {
                    AttnError::invalid("checkpoint", format!("{}: {e}", opts.out.display()))
                })?;
                crate::train::eager::save(&model, &optim, state, &opts.out, &recorder)?;
            }
        }
    }
    Ok(model)
}

/// Trains `models` (one replica per rank, equal values, each on its own device, none sharing
/// a graph node with another: see [`replicate`]) over `comms`, one thread per rank. Rank `k`
/// is data-parallel rank `k / N` and context-parallel rank `k mod N` of a CP degree `N`
/// (`comms[k].cp`); with data parallelism over `M` groups (`comms[k].dp`), step `s` of
/// data-parallel rank `i` is the packer's batch `s·M + i`, as `--devices M` alone trains, else
/// the packer's next batch, as one device does. Each batch is split across its CP group.
/// Rank 0 reports each step and writes the checkpoints: the model is the single-device one
/// and `state.json` records the data-parallel ranks only, so checkpoints do not depend on the
/// CP degree. Returns rank 0's model and the run's state.
pub fn train_context_parallel<B: CpBackend + TrainingBackend>(
    models: Vec<Transformer<B>>,
    comms: Vec<RankComms<Inner<B>>>,
    mut state: TrainState,
    resume_optimizer: bool,
    packer: &mut Packer,
    opts: &TrainOptions,
    mut on_step: impl FnMut(&StepReport),
) -> Result<(Transformer<B>, TrainState), AttnError>
where
    Transformer<B>: Send,
{
    let Some(first) = comms.first() else {
        return Err(AttnError::invalid("--cp", "needs at least one rank"));
    };
    let (cp, dp) = (first.cp.size(), first.dp.as_ref().map_or(1, |d| d.size()));
    if models.len() != comms.len() || cp * dp != comms.len() {
        return Err(AttnError::invalid(
            "--cp",
            format!(
                "{} model replicas for {} ranks of {cp} × {dp} (context × data parallel)",
                models.len(),
                comms.len()
            ),
        ));
    }
    let (run, end) = plan_run(&state, cp, dp, packer, opts, resume_optimizer)?;
    let mut losses = Vec::new();
    let model0 = std::thread::scope(|s| {
        let mut ranks = models.into_iter().zip(comms);
        let (model0, comm0) = ranks.next().expect("at least one rank");
        let handles: Vec<_> = ranks
            .map(|(model, comm)| {
                let run = &run;
                s.spawn(move || train_rank(model, run, comm, None, |_, _| {}).map(drop))
            })
            .collect();
        let r0 = train_rank(model0, &run, comm0, Some(state.clone()), |r, l| {
            losses.push(l);
            on_step(r);
        });
        let mut failures = Vec::new();
        if let Err(e) = &r0 {
            failures.push(format!("rank 0: {e}"));
        }
        for (i, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(format!("rank {}: {e}", i + 1)),
                Err(_) => failures.push(format!("rank {}: panicked", i + 1)),
            }
        }
        match r0 {
            Ok(m) if failures.is_empty() => Ok(m),
            _ => Err(AttnError::Device {
                op: "context-parallel".into(),
                call: "train".into(),
                status: None,
                message: failures.join("; "),
            }),
        }
    })?;
    state.losses.extend(losses);
    state.step = end;
    state.devices = dp;
    Ok((model0, state))
}

/// The run from `state` on, and the step it ends at: per data-parallel rank its batch of each
/// step still to train (the packer's stream past the steps `state` did), each refused now if
/// the CP degree `cp` cannot split it.
pub(super) fn plan_run<'a>(
    state: &TrainState,
    cp: usize,
    dp: usize,
    packer: &mut Packer,
    opts: &'a TrainOptions,
    resume_optimizer: bool,
) -> Result<(Run<'a>, usize), AttnError> {
    if state.step > 0 && state.devices.max(1) != dp {
        return Err(AttnError::invalid(
            "--devices",
            format!(
                "the run in {} trained on {} data-parallel rank(s); resume it with the same number, got {dp}",
                opts.out.display(),
                state.devices.max(1)
            ),
        ));
    }
    for _ in 0..state.step * dp {
        packer.next_batch();
    }
    let end = opts
        .stop_after
        .unwrap_or(opts.total_steps)
        .min(opts.total_steps);
    let mut batches: Vec<Vec<PackedBatch>> = vec![Vec::new(); dp];
    for _ in state.step..end {
        for b in batches.iter_mut() {
            b.push(packer.next_batch());
        }
    }
    // Refuse a split the tokens cannot take before any rank starts.
    for b in batches.iter().flatten() {
        super::plan::CpLayout::new(&b.cu_seqlens, cp)?;
    }
    let run = Run {
        batches,
        first_step: state.step,
        resume_optimizer,
        opts,
    };
    Ok((run, end))
}

/// `n` replicas of `model` with equal values, replica `r` on `devices[r]`, each a fresh set of
/// graph leaves (Burn's `fork`): ranks must not share autodiff nodes, or their graphs would
/// merge and one rank's backward would wait on another's.
pub fn replicate<B: AutodiffBackend>(
    model: &Transformer<B>,
    devices: &[B::Device],
) -> Vec<Transformer<B>> {
    crate::parallel::ddp::materialize(model);
    devices.iter().map(|d| model.clone().fork(d)).collect()
}
