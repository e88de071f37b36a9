//! The training loop of the `finetune` example, reusable and testable: packed varlen batches,
//! AdamW ([`crate::train::optim::FusedAdamW`]) with warmup + cosine decay and global gradient-norm
//! clipping ([`crate::train::optim::clip_global_norm`]), crash-consistent checkpoints
//! (see [`crate::run_state::published`]) that `--resume` verifies and continues exactly (model and
//! optimizer as Burn records, the step and loss curve in `state.json`, the batch stream
//! replayed from its seed). A step whose loss or gradient norm is not finite stops the run
//! before its optimizer step, the last published checkpoint kept.

use std::path::{Path, PathBuf};

use burn::module::{AutodiffModule, Module};
use burn::optim::{GradientsParams, Optimizer};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};

use crate::load::config::ModelConfig;
use crate::load::data::{concat_batches, PackedBatch, Packer};
use crate::model::hf_checkpoint::{hf_files, load_hf_with, LoadOptions};
use crate::model::transformer::{cross_entropy_fused, Transformer};
use crate::model::{lora, peft};
use crate::run_state::published::{publish, Published};
use crate::run_state::state::TrainState;
use crate::train::loss::masked_cross_entropy;
use crate::train::optim::{clip_global_norm, FusedAdamW};
use crate::train::recompute::{check as check_checkpointing, loss_and_grads, loss_and_grads_with};
use crate::train::schedule::WarmupCosine;
use crate::train::sync::GradientSync;
use crate::train::zero_resume::whole_record_from_shards;
use burn_ascend::{AttnError, TrainingBackend};

/// Where the model starts.
// Made once per run, so the config's size beside a path costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    /// Random weights of this shape.
    Fresh(ModelConfig),
    /// A Hugging Face style checkpoint folder.
    Checkpoint(PathBuf),
    /// Continue the run saved in the output folder.
    Resume,
}

/// Training settings.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// Length of the whole run: the learning-rate schedule spans it and a resumed run
    /// continues up to it.
    pub total_steps: usize,
    /// Stop after this step count even if `total_steps` is further (an interrupted run;
    /// `--resume` continues it exactly).
    pub stop_after: Option<usize>,
    /// Peak learning rate (after the warm-up, cosine to a tenth).
    pub lr: f64,
    /// Steps of linear warm-up to `lr`; `None`: 5 % of `total_steps` (at least 1), what a model
    /// trained from scratch here takes.
    pub warmup_steps: Option<usize>,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f32,
    /// Global gradient-norm clip (torch's `clip_grad_norm_`: every gradient scaled by
    /// `min(1, clip_norm / (‖g‖ + 1e-6))`, `‖g‖` over all parameters).
    pub clip_norm: f32,
    /// Seed of the initial weights and the batch stream.
    pub seed: u64,
    /// Output folder: `checkpoints/step-NNNNNN/`, `LATEST`, and the published checkpoint's
    /// `config.json`, `model.safetensors` and `loss.csv`.
    pub out: PathBuf,
    /// Save every this many steps (and at the end).
    pub save_every: usize,
}

/// One finished step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// 0-based step over the whole run (resumed steps included).
    pub step: usize,
    /// Steps of the whole run when this call ends.
    pub total_steps: usize,
    /// Mean next-token cross-entropy of the batch (nats per token).
    pub loss: f32,
    /// Learning rate used.
    pub lr: f64,
    /// Tokens in the batch.
    pub tokens: usize,
}

fn io(path: &Path, e: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {e}", path.display()))
}

/// Builds the model of `init` on `device`, with the resumed state when resuming.
pub fn init_model<B: AutodiffBackend + TrainingBackend>(
    init: &Init,
    out: &Path,
    device: &B::Device,
) -> Result<(Transformer<B>, TrainState), AttnError> {
    init_model_with(init, out, device, LoadOptions::default())
}

/// [`init_model`] with the options of loading a checkpoint.
pub fn init_model_with<B: AutodiffBackend + TrainingBackend>(
    init: &Init,
    out: &Path,
    device: &B::Device,
    opts: LoadOptions,
) -> Result<(Transformer<B>, TrainState), AttnError> {
    Ok(match init {
        Init::Fresh(config) => (Transformer::new(config, device)?, TrainState::default()),
        Init::Checkpoint(dir) => (load_hf_with(dir, device, opts)?, TrainState::default()),
        Init::Resume => {
            let saved = Published::open(out)?;
            let config = config_from_json(&saved.read("config.json")?, &saved.dir)?;
            let state = saved.train_state("checkpoint")?;
            let model = if saved.manifest.zero.is_some() {
                // A ZeRO run's: its master weights are in the ranks' shards, which the ZeRO
                // group reads after this; the verified export gives the whole model (any
                // frozen tensor included) its values until then.
                load_hf_with(&saved.dir, device, LoadOptions::default())?
            } else {
                let record = NamedMpkBytesRecorder::<FullPrecisionSettings>::new()
                    .load(saved.read("model.mpk")?, device)
                    .map_err(|e| io(&saved.dir.join("model.mpk"), e))?;
                Transformer::new(&config, device)?.load_record(record)
            };
            saved.tidy(out)?;
            (model, state)
        }
    })
}

fn config_from_json(bytes: &[u8], dir: &Path) -> Result<ModelConfig, AttnError> {
    let path = dir.join("config.json");
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| io(&path, e))?;
    ModelConfig::from_json(&v)
}

/// Where a run's batches come from: the packer's stream, one batch per step on one device;
/// with data parallelism over `size` ranks, each step takes `size` batches of the stream,
/// rank `r` training on the `r`-th ([`Batches::rank`]) and a single device checking the run
/// on all of them at once ([`Batches::global`]).
pub struct Batches<'a> {
    packer: &'a mut Packer,
    rank: Option<usize>,
    size: usize,
    /// Raw batches of the stream each rank takes per step (more than 1: a run resumed on
    /// fewer ranks keeping its global batch, [`Batches::keep_global`]).
    per_rank: usize,
}

impl<'a> Batches<'a> {
    /// One batch per step.
    pub fn single(packer: &'a mut Packer) -> Self {
        Self {
            packer,
            rank: None,
            size: 1,
            per_rank: 1,
        }
    }

    /// Rank `rank`'s batch of each step of `size` ranks.
    pub fn rank(packer: &'a mut Packer, rank: usize, size: usize) -> Self {
        Self {
            packer,
            rank: Some(rank),
            size: size.max(1),
            per_rank: 1,
        }
    }

    /// The whole global batch of each step of `size` ranks, as one batch.
    pub fn global(packer: &'a mut Packer, size: usize) -> Self {
        Self {
            packer,
            rank: None,
            size: size.max(1),
            per_rank: 1,
        }
    }

    /// Skips `raw` batches of the packer's stream (a resumed run's replay).
    pub fn skip(&mut self, raw: usize) {
        for _ in 0..raw {
            self.packer.next_batch();
        }
    }

    /// Each step's global batch stays `global` raw batches of the stream over this run's
    /// ranks: each rank takes `global / size` of them, concatenated (a ZeRO run resumed on a
    /// divisor of the rank count it started on). Other counts keep one batch per rank.
    /// Returns whether it does.
    pub fn keep_global(&mut self, global: usize) -> bool {
        if self.rank.is_some() && global > self.size && global.is_multiple_of(self.size) {
            self.per_rank = global / self.size;
        }
        self.per_rank > 1
    }

    /// Raw batches of the stream one step takes.
    pub fn per_step(&self) -> usize {
        self.size * self.per_rank
    }

    /// The next step's batch.
    pub fn next_batch(&mut self) -> PackedBatch {
        let k = self.per_rank;
        let parts: Vec<PackedBatch> = (0..self.size * k)
            .map(|_| self.packer.next_batch())
            .collect();
        match self.rank {
            Some(r) if k == 1 => parts.into_iter().nth(r).expect("rank < size"),
            Some(r) => concat_batches(&parts[r * k..(r + 1) * k]),
            None if parts.len() == 1 => parts.into_iter().next().expect("one"),
            None => concat_batches(&parts),
        }
    }
}

/// Trains `model` on `packer`'s batches from `state.step` up to `opts.total_steps` (or
/// `opts.stop_after`), calling `on_step` after each step. Saves to `opts.out` every `save_every`
/// steps and at the end. Returns the trained model and the whole run's loss curve.
pub fn train<B: AutodiffBackend + TrainingBackend>(
    model: Transformer<B>,
    state: TrainState,
    resume_optimizer: bool,
    packer: &mut Packer,
    opts: &TrainOptions,
    on_step: impl FnMut(&StepReport),
) -> Result<(Transformer<B>, TrainState), AttnError>
where
    B::InnerBackend: TrainingBackend,
{
    train_with(
        model,
        state,
        resume_optimizer,
        &mut Batches::single(packer),
        opts,
        None,
        on_step,
    )
}

/// The learning-rate schedule of a run of `opts` (its warm-up, by default over 5 % of the
/// steps, then cosine to a tenth of the peak), the eager, the captured and the
/// context-parallel loop alike.
pub(crate) fn schedule_of(opts: &TrainOptions) -> WarmupCosine {
    WarmupCosine {
        peak: opts.lr,
        floor: opts.lr / 10.0,
        warmup: opts
            .warmup_steps
            .unwrap_or(opts.total_steps / 20)
            .clamp(1, opts.total_steps.max(1)),
        total: opts.total_steps,
    }
}

/// The optimizer state (`optim.mpk`) of the checkpoint the model and `state` came from, with
/// its path; refused when that checkpoint is of another step, or sharded.
pub(crate) fn saved_optimizer(
    opts: &TrainOptions,
    state: &TrainState,
) -> Result<(Vec<u8>, std::path::PathBuf), AttnError> {
    whole_optimizer(&saved_checkpoint(opts, state)?)
}

/// The verified checkpoint the model and `state` came from; refused when it is of another step.
pub(crate) fn saved_checkpoint(
    opts: &TrainOptions,
    state: &TrainState,
) -> Result<Published, AttnError> {
    let saved = Published::open(&opts.out)?;
    if saved.step() != state.step {
        return Err(io(
            &saved.dir,
            format!(
                "saved at step {} but the run resumes at step {}",
                saved.step(),
                state.step
            ),
        ));
    }
    Ok(saved)
}

/// The whole optimizer record `optim.mpk` of `saved`, with its path. A ZeRO run's sharded
/// checkpoint has none: refused naming `--zero`, which resumes it on any rank count.
pub(crate) fn whole_optimizer(saved: &Published) -> Result<(Vec<u8>, PathBuf), AttnError> {
    if let Some(z) = &saved.manifest.zero {
        return Err(AttnError::invalid(
            "--zero",
            format!(
                "{} holds a ZeRO-sharded training state (stage {} over {} ranks, one shard per \
                 rank) and no whole optimizer record: resume it with --zero 1, 2 or 3 on any \
                 number of ranks, or with plain data parallelism, not with --cp or --graph",
                saved.dir.display(),
                z.stage,
                z.ranks
            ),
        ));
    }
    Ok((saved.read("optim.mpk")?, saved.dir.join("optim.mpk")))
}

/// [`train`] over any [`Batches`], as one rank of data-parallel training when `sync` is
/// given: rank 0's parameters are broadcast first, the reported loss is the mean over ranks,
/// the gradients are averaged before each optimizer step, and only rank 0 writes checkpoints.
pub fn train_with<B: AutodiffBackend + TrainingBackend>(
    mut model: Transformer<B>,
    mut state: TrainState,
    resume_optimizer: bool,
    batches: &mut Batches<'_>,
    opts: &TrainOptions,
    mut sync: Option<&mut dyn GradientSync<B>>,
    mut on_step: impl FnMut(&StepReport),
) -> Result<(Transformer<B>, TrainState), AttnError>
where
    B::InnerBackend: TrainingBackend,
{
    if model.config.attention_dropout > 0.0 {
        // transformers applies it to the attention probabilities in training; our attention
        // ops run without it, so training would silently compute another objective.
        return Err(AttnError::Unsupported(format!(
            "attention_dropout {} in training (only 0)",
            model.config.attention_dropout
        )));
    }
    if model
        .config
        .moe
        .as_ref()
        .is_some_and(|m| m.output_router_logits)
    {
        // GptOssForCausalLM adds router_aux_loss_coef × the router's load-balancing loss to
        // the training loss when output_router_logits; ours has no such term.
        return Err(AttnError::Unsupported(
            "output_router_logits true in training (the router's auxiliary load-balancing loss is not implemented)"
                .into(),
        ));
    }
    // ZeRO-3 with per-block checkpointing: each part's weights gathered only while it runs.
    let per_block = model.checkpoint_blocks
        && sync
            .as_deref_mut()
            .and_then(|s| s.sharded())
            .is_some_and(|z| z.per_block().is_some());
    if model.checkpoint_blocks && sync.is_some() && !per_block {
        return Err(AttnError::Unsupported(
            "--checkpointing with data parallelism other than --zero 3 (per-block \
             checkpointing trains on one device, or shards the weights per block with ZeRO-3)"
                .into(),
        ));
    }
    if model.checkpoint_blocks {
        check_checkpointing(&model)?;
    }
    let device = model.embed_tokens.weight.val().device();
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
    let ranks = sync.as_deref().map_or(1, |s| s.size());
    let writer = sync.as_deref().is_none_or(|s| s.rank() == 0);
    // ZeRO reads the whole optimizer state and takes its slice: any rank count resumes.
    let sharded = sync.as_deref_mut().is_some_and(|s| s.sharded().is_some());
    if state.step > 0 && state.devices.max(1) != ranks && !sharded {
        return Err(AttnError::invalid(
            "--devices",
            format!(
                "the run in {} trained on {} device(s); resume it with the same number \
                 (--devices N, or WORLD_SIZE processes under torchrun), got {ranks} (or with \
                 --zero K, which shards its whole checkpoint over any number)",
                opts.out.display(),
                state.devices.max(1)
            ),
        ));
    }
    // Replay the batch stream so a resumed run sees the batches it would have seen (each
    // step of the run so far took `devices` batches: one per rank it ran on).
    batches.skip(state.step * state.devices.max(1));
    state.devices = if sharded && state.step > 0 && batches.keep_global(state.devices.max(1)) {
        // ZeRO on fewer ranks: each rank takes several of the global batch's batches, so the
        // run continues as it would have on its first rank count (and records that count).
        batches.per_step()
    } else {
        ranks
    };
    let total_steps = opts.total_steps;
    let end = opts.stop_after.unwrap_or(total_steps).min(total_steps);
    let schedule = schedule_of(opts);
    let mut optim = FusedAdamW::<B>::new(opts.weight_decay)?.init::<Transformer<B>>();
    if resume_optimizer {
        let saved = saved_checkpoint(opts, &state)?;
        match sync.as_deref_mut().and_then(|s| s.sharded()) {
            // A sharded checkpoint: this rank's ranges only.
            Some(z) if saved.manifest.zero.is_some() => z.load_sharded(&model, &saved)?,
            // A whole one (a replicated run's, or a ZeRO run's of the whole-state format):
            // every rank reads the record and keeps its slice.
            Some(z) => {
                let (bytes, path) = whole_optimizer(&saved)?;
                z.load_optimizer(&model, &bytes, &path)?
            }
            // A replicated run resuming a ZeRO run's checkpoint: the whole state assembled
            // from the shards (a replicated run holds all of it anyway).
            None if saved.manifest.zero.is_some() => {
                optim = optim.load_record(whole_record_from_shards(&model, &saved)?);
            }
            None => {
                let (bytes, path) = whole_optimizer(&saved)?;
                let record = recorder.load(bytes, &device).map_err(|e| io(&path, e))?;
                optim = optim.load_record(record);
            }
        }
    }
    if writer {
        std::fs::create_dir_all(&opts.out).map_err(|e| io(&opts.out, e))?;
    }
    if let Some(s) = sync.as_deref_mut() {
        model = s.broadcast_model(model)?;
    }
    for step in state.step..end {
        if let Some(z) = sync.as_deref_mut().and_then(|s| s.sharded()) {
            model = match z.per_block().filter(|_| per_block) {
                // ZeRO-3 with per-block checkpointing: gathered part by part in the chain.
                Some(b) => b.begin(model)?,
                // ZeRO-3: the weights gathered for the step.
                None => z.whole(model)?,
            };
        }
        let batch = batches.next_batch();
        let t = batch.tokens.len();
        let tokens = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.tokens, [t]), &device);
        let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.targets, [t]), &device);
        // A non-finite loss or gradient stops the run before the optimizer step: the last
        // published checkpoint stays the last good one.
        let not_finite_loss = |loss: f32| {
            AttnError::invalid(
                "lr",
                format!(
                    "the loss became {loss} at step {step}; lower the learning rate (the last \
                     good checkpoint is kept)"
                ),
            )
        };
        let mut sharded_norm = None;
        let (loss_inner, ranks_loss, mut grads) = if per_block {
            let mask = batch.loss_mask.as_deref();
            let s = sync.as_deref_mut().expect("per-block sharding has a group");
            let b = s
                .sharded()
                .and_then(|z| z.per_block())
                .expect("checked above");
            let (loss, grads) =
                loss_and_grads_with(&model, tokens, &batch.cu_seqlens, targets, mask, b.hooks())?;
            sharded_norm = Some(b.finish()?);
            let l = s.average_loss(Tensor::from_inner(loss.clone()))?;
            if !l.is_finite() {
                return Err(not_finite_loss(l));
            }
            (loss, Some(l), grads)
        } else if model.checkpoint_blocks {
            let mask = batch.loss_mask.as_deref();
            let (loss, grads) = loss_and_grads(&model, tokens, &batch.cu_seqlens, targets, mask)?;
            (loss, None, grads)
        } else {
            let logits = model.forward_packed(tokens, &batch.cu_seqlens)?;
            let loss = match &batch.loss_mask {
                None => cross_entropy_fused(logits, targets)?,
                Some(mask) => masked_cross_entropy(logits, targets, mask),
            };
            // Data-parallel: the mean loss over ranks, read before the backward pass.
            let ranks_loss = match sync.as_deref_mut() {
                Some(s) => Some(s.average_loss(loss.clone())?),
                None => None,
            };
            if let Some(l) = ranks_loss.filter(|l| !l.is_finite()) {
                return Err(not_finite_loss(l));
            }
            let loss_inner = loss.clone().inner();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            (loss_inner, ranks_loss, grads)
        };
        if let (Some(s), false) = (sync.as_deref_mut(), per_block) {
            match s.sharded() {
                // ZeRO: the gradients reduced into this rank's shard, the norm from the shards.
                Some(z) => sharded_norm = Some(z.reduce(&model, std::mem::take(&mut grads))?),
                None => grads = s.average_gradients(&model, grads)?,
            }
        }
        // The global norm clip, on the device; its squared norm is the finiteness check's.
        let (grads, squares) = clip_global_norm(&model, grads, opts.clip_norm);
        // One device: the loss and the gradients' squared norm in one read, the step's one
        // wait for the device.
        let (loss_value, norm) = match (ranks_loss, squares) {
            (Some(l), Some(sq)) => match sq.try_into_scalar() {
                Ok(v) => (l, v.elem::<f32>().sqrt()),
                // A collective queued before the read failed (a peer lost, a mismatch): the
                // group's typed error names it; else the read's own, on one line.
                Err(e) => {
                    if let Some(s) = sync.as_deref_mut() {
                        s.wait()?;
                    }
                    return Err(AttnError::Device {
                        op: "train".into(),
                        call: "reading the gradient norm".into(),
                        status: None,
                        message: e.to_string().replace('\n', " "),
                    });
                }
            },
            (Some(l), None) => (l, sharded_norm.unwrap_or(0.0)),
            (None, Some(sq)) => {
                let both = Tensor::cat(vec![loss_inner.reshape([1]), sq], 0)
                    .into_data()
                    .convert::<f32>()
                    .to_vec::<f32>()
                    .map_err(|e| AttnError::invalid("lr", format!("{e:?}")))?;
                (both[0], both[1].sqrt())
            }
            (None, None) => (loss_inner.into_scalar().elem(), 0.0),
        };
        if !loss_value.is_finite() {
            return Err(not_finite_loss(loss_value));
        }
        if !norm.is_finite() {
            return Err(AttnError::invalid(
                "lr",
                format!(
                    "the gradient norm became {norm} at step {step} (loss {loss_value}); lower \
                     the learning rate (the last good checkpoint is kept)"
                ),
            ));
        }
        let lr = schedule.lr(step);
        model = match sync.as_deref_mut().and_then(|s| s.sharded()) {
            Some(z) => z.step(lr, model)?,
            None => optim.step(lr, model, grads),
        };
        state.losses.push(loss_value);
        state.step = step + 1;
        on_step(&StepReport {
            step,
            total_steps,
            loss: loss_value,
            lr,
            tokens: t * ranks,
        });
        let checkpoint = state.step == end || state.step.is_multiple_of(opts.save_every.max(1));
        if let (Some(s), true) = (sync.as_deref_mut(), checkpoint) {
            s.wait()?;
        }
        // ZeRO: each rank writes its shard of the sharded state; the weights are gathered
        // for rank 0's Hugging Face export, which publishes once every shard is durable.
        if let (Some(z), true) = (sync.as_deref_mut().and_then(|s| s.sharded()), checkpoint) {
            model = z.whole(model)?;
            let files = writer
                .then(|| checkpoint_files(&model, None, &state, &recorder))
                .transpose()?;
            z.publish_sharded(&opts.out, state.step, files)?;
        } else if writer && checkpoint {
            save(&model, &optim, &state, &opts.out, &recorder)?;
        }
    }
    if let Some(z) = sync.and_then(|s| s.sharded()) {
        model = z.whole(model)?;
    }
    Ok((model, state))
}

/// Publishes the checkpoint of `state.step` in `out` (see [`crate::run_state::published`]): the
/// weights in Hugging Face's layout, the model and optimizer as Burn records, the loss curve
/// and `state.json`.
pub(crate) fn save<B: AutodiffBackend + TrainingBackend, O: Optimizer<Transformer<B>, B>>(
    model: &Transformer<B>,
    optim: &O,
    state: &TrainState,
    out: &Path,
    recorder: &NamedMpkBytesRecorder<FullPrecisionSettings>,
) -> Result<(), AttnError> {
    let optim_bytes = recorder
        .record(optim.to_record(), ())
        .map_err(|e| io(Path::new("optim.mpk"), e))?;
    save_with(model, optim_bytes, state, out, recorder)
}

/// [`save`] with the optimizer record's bytes.
fn save_with<B: AutodiffBackend + TrainingBackend>(
    model: &Transformer<B>,
    optim_bytes: Vec<u8>,
    state: &TrainState,
    out: &Path,
    recorder: &NamedMpkBytesRecorder<FullPrecisionSettings>,
) -> Result<(), AttnError> {
    publish(
        out,
        state.step,
        &checkpoint_files(model, Some(optim_bytes), state, recorder)?,
    )
}

/// The whole files of a checkpoint: the weights in Hugging Face's layout (a LoRA run: its
/// adapters), the loss curve, `state.json`, and with `optim_bytes` (a run whose state is
/// whole) the model and optimizer as Burn records; without it (ZeRO: the master weights and
/// moments are in the ranks' shards) neither record.
fn checkpoint_files<B: AutodiffBackend + TrainingBackend>(
    model: &Transformer<B>,
    optim_bytes: Option<Vec<u8>>,
    state: &TrainState,
    recorder: &NamedMpkBytesRecorder<FullPrecisionSettings>,
) -> Result<Vec<(&'static str, Vec<u8>)>, AttnError> {
    let mut files = if lora::settings(model).is_some() {
        // LoRA: only the adapters, in PEFT's format (the frozen base is the checkpoint the
        // run started from, named in adapter_config.json).
        peft::adapter_files(&model.valid())?
    } else {
        let mut files = hf_files(&model.valid())?;
        if optim_bytes.is_some() {
            let model_bytes = recorder
                .record(model.clone().into_record(), ())
                .map_err(|e| io(Path::new("model.mpk"), e))?;
            files.push(("model.mpk", model_bytes));
        }
        files
    };
    if let Some(bytes) = optim_bytes {
        files.push(("optim.mpk", bytes));
    }
    let mut csv = String::from("step,loss\n");
    for (i, l) in state.losses.iter().enumerate() {
        csv.push_str(&format!("{i},{l}\n"));
    }
    files.push(("loss.csv", csv.into_bytes()));
    files.push(("state.json", state.to_json()?));
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(total_steps: usize, warmup_steps: Option<usize>) -> TrainOptions {
        TrainOptions {
            total_steps,
            stop_after: None,
            lr: 1e-3,
            warmup_steps,
            weight_decay: 0.0,
            clip_norm: 1.0,
            seed: 0,
            out: PathBuf::new(),
            save_every: 1,
        }
    }

    #[test]
    fn the_warm_up_is_the_runs_own_else_five_percent_of_the_steps() {
        // 4 warm-up steps: 1/4, 2/4, 3/4 of the peak, then the peak.
        let s = schedule_of(&opts(20, Some(4)));
        for (step, want) in [(0, 2.5e-4), (1, 5e-4), (2, 7.5e-4), (3, 1e-3)] {
            assert!(
                (s.lr(step) - want).abs() < 1e-15,
                "step {step}: {}",
                s.lr(step)
            );
        }
        // Default: 5 % of 100 steps = 5.
        let s = schedule_of(&opts(100, None));
        assert_eq!(s.warmup, 5);
        assert!((s.lr(0) - 2e-4).abs() < 1e-15);
        // At least one step, at most the run.
        assert_eq!(schedule_of(&opts(10, None)).warmup, 1);
        assert_eq!(schedule_of(&opts(10, Some(0))).warmup, 1);
        assert_eq!(schedule_of(&opts(10, Some(50))).warmup, 10);
    }
}
