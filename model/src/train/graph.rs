//! A **captured training step** on one Ascend device (`finetune --graph`): after
//! [`WARMUP_STEPS`] eager steps, one whole step of fixed shapes — forward, backward, the
//! global gradient-norm clip and the fused AdamW update (`aclnnApplyAdamWV2` in place over
//! every parameter and its moments) — is captured once into an ACL graph
//! (`burn_ascend::backend::graph`) and every later step is **one** launch: its replay.
//!
//! A replay reads and writes the buffers the capture recorded, so everything a step takes from the
//! host lives in persistent device tensors written in place before the replay (stream-ordered
//! uploads, outside the capture): the token ids, the targets (with chat data the loss's per-target
//! weights) and AdamW's step count (a FLOAT32 `[1]` tensor). The parameters and the moments are
//! updated in place ([`burn_ascend::backend::adamw_step_in_place`]), so the replay's forward reads
//! what the previous replay's update wrote. The learning rate of the schedule is a host float
//! attribute of `aclnnApplyAdamWV2`, baked into the recorded launches: the optimizer's launches
//! form a task group whose calls are re-issued with the new rate before a replay whose rate changed
//! (`aclmdlRICaptureTaskUpdateBegin` / `End`: recorded into the graph, not run). The loss and the
//! squared gradient norm come back in one read after the replay.
//!
//! Fixed shapes: the varlen attention's sequence lengths are host arrays baked into the
//! recorded launches (CANN tiles from them on the host), so the packer must make every batch
//! of the same rows ([`Packer::with_fixed_rows`], `--pack fixed`); a batch of other
//! `cu_seqlens` is refused. RoPE's tables of those rows are uploaded once, before the capture.
//!
//! What the eager loop ([`crate::train::eager::train_with`]) does and this one does not: data or
//! context parallelism, ZeRO, block checkpointing, LoRA dropout (a replay would reuse the
//! captured mask), MoE models (the router's expert groups are sized on the host) — refused as
//! `unsupported`. LoRA without dropout trains: the frozen base has no gradient and no
//! optimizer state, and the captured update steps the adapters only. Chat data trains: the
//! loss's per-target weights (the assistant mask) are an input written in place per batch. One
//! difference in kind: the eager step checks the loss and gradient norm for finiteness
//! **before** its optimizer step; a replay updates the weights in the same launch, so a
//! non-finite step stops the run after an update of the weights in memory — the last
//! published checkpoint on disk stays the last good one either way.
//!
//! Why a few eager steps first: AdamW's moments exist after the first step (the capture
//! updates them in place), and the pool then caches every block a step takes — a capture may
//! not call `aclrtMalloc`, so its allocations come from those and from reserved small blocks.

use std::path::Path;
use std::time::{Duration, Instant};

use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamWState, AdaptiveMomentumState, GradientsParams, Optimizer};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};
use burn_ascend::backend::graph::{
    capture, reserve_workspace, task_group, update_task_group, write_in_place, CapturedGraph,
    GraphError,
};
use burn_ascend::backend::{
    adamw_step_in_place, memory_stats, record_large_requests, reserve_large, reserve_small,
    reset_peak_stats, take_large_requests, Ascend, AscendTensor,
};
use burn_ascend::cann::acl::{thread_launches, TaskGroup};
use burn_ascend::{AdamWHyper, AttnError};

use crate::load::data::{PackedBatch, Packer};
use crate::model::lora;
use crate::model::rope::Rope;
use crate::model::transformer::{cross_entropy_fused, packed_positions, Transformer};
use crate::run_state::state::TrainState;
use crate::train::eager::{save, saved_optimizer, schedule_of, StepReport, TrainOptions};
use crate::train::loss::{loss_weights, masked_cross_entropy, weighted_cross_entropy};
use crate::train::optim::{clip_global_norm, FusedAdamW};

type Ad = Autodiff<Ascend>;
type Adaptor = OptimizerAdaptor<FusedAdamW<Ad>, Transformer<Ad>, Ad>;

/// Eager steps before the capture (at least one: AdamW's moments, the pool's cached blocks).
pub const WARMUP_STEPS: usize = 1;
/// Workspace reserved before the capture (the simulation's ops ask for 1 KiB each; CANN's
/// training kernels for far less than this at the sizes `--graph` trains).
const WORKSPACE_BYTES: usize = 64 << 20;
/// Small-block reserve of the first capture attempt, doubled while a capture is refused for
/// want of memory, up to [`MAX_RESERVE_BYTES`].
const FIRST_RESERVE_BYTES: usize = 8 << 20;
const MAX_RESERVE_BYTES: usize = 1 << 30;

/// What a graph-trained run did on the device.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GraphTrainStats {
    /// Eager steps (the warm-up).
    pub eager_steps: u64,
    /// Steps run as a replay.
    pub replayed_steps: u64,
    /// Kernel launches the replayed steps queued (replays and anything else), without the
    /// input uploads.
    pub launches: u64,
    /// Host-to-device copies of the replayed steps' inputs.
    pub uploads: u64,
    /// Task-group updates of the optimizer's learning rate.
    pub lr_updates: u64,
    /// Tasks recorded in the graph (known on the simulation).
    pub recorded_tasks: usize,
    /// Device bytes the capture took from the pool and the graph holds while it lives (its
    /// temporaries, reused within the capture, and its outputs).
    pub graph_bytes: usize,
    /// Device bytes the last eager warm-up step allocated at its peak beyond what it started
    /// with (its temporaries, gradients and outputs): what `graph_bytes` compares with.
    pub eager_step_bytes: usize,
    /// Host time issuing the replayed steps (input writes, learning-rate update, replay;
    /// not the wait for the loss).
    pub host: Duration,
}

impl GraphTrainStats {
    /// Launches per replayed step (1 when each is one replay).
    pub fn launches_per_step(&self) -> f64 {
        self.launches as f64 / self.replayed_steps.max(1) as f64
    }

    /// Host µs per replayed step spent issuing it.
    pub fn host_us_per_step(&self) -> f64 {
        self.host.as_secs_f64() * 1e6 / self.replayed_steps.max(1) as f64
    }
}

fn graph_err(call: &str, e: GraphError) -> AttnError {
    match e {
        GraphError::Unsupported(m) => AttnError::Unsupported(m),
        GraphError::Refused(m) => AttnError::Device {
            op: "training graph".into(),
            call: call.into(),
            status: Some(burn_ascend::cann::acl::ffi::ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT),
            message: m,
        },
        GraphError::Failed(m) => AttnError::Device {
            op: "training graph".into(),
            call: call.into(),
            status: None,
            message: m,
        },
    }
}

fn unsupported(what: &str) -> AttnError {
    AttnError::Unsupported(format!("--graph with {what}"))
}

/// The primitive of an `Autodiff<Ascend>` float tensor (its inner tensor's buffer).
fn float_prim<const D: usize>(t: Tensor<Ad, D>) -> AscendTensor {
    match t.inner().into_primitive() {
        TensorPrimitive::Float(p) => p,
        TensorPrimitive::QFloat(_) => unreachable!("training parameters are not quantized"),
    }
}

fn inner_prim<const D: usize>(t: Tensor<Ascend, D>) -> AscendTensor {
    match t.into_primitive() {
        TensorPrimitive::Float(p) => p,
        TensorPrimitive::QFloat(_) => unreachable!("AdamW's moments are not quantized"),
    }
}

/// One parameter's persistent optimizer operands.
struct Slot {
    id: ParamId,
    var: AscendTensor,
    m: AscendTensor,
    v: AscendTensor,
}

/// The trainable parameters of `model` (all, or LoRA's adapters) with their moments from `records`
/// (every one has stepped once: the warm-up), in the model's visiting order; and AdamW's step count
/// `t` so far.
fn slots(
    model: &Transformer<Ad>,
    records: &<Adaptor as Optimizer<Transformer<Ad>, Ad>>::Record,
) -> Result<(Vec<Slot>, usize), AttnError> {
    struct Collect<'a> {
        records: &'a <Adaptor as Optimizer<Transformer<Ad>, Ad>>::Record,
        slots: Vec<Slot>,
        times: Vec<usize>,
        missing: usize,
    }
    impl ModuleVisitor<Ad> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
            if !param.is_require_grad() {
                // Frozen (LoRA's base): no gradient, no optimizer state, not updated.
                return;
            }
            let Some(record) = self.records.get(&param.id) else {
                self.missing += 1;
                return;
            };
            let state: AdamWState<Ascend, D> = record.clone().into_state();
            self.times.push(state.momentum.time);
            self.slots.push(Slot {
                id: param.id,
                var: float_prim(param.val()),
                m: inner_prim(state.momentum.moment_1),
                v: inner_prim(state.momentum.moment_2),
            });
        }
    }
    let mut c = Collect {
        records,
        slots: Vec::new(),
        times: Vec::new(),
        missing: 0,
    };
    model.visit(&mut c);
    let t = c.times.first().copied().unwrap_or(0);
    if c.missing > 0 || c.times.iter().any(|&x| x != t) || t == 0 {
        return Err(unsupported(
            "parameters without AdamW state after the warm-up (a frozen parameter, or one \
             without a gradient)",
        ));
    }
    Ok((c.slots, t))
}

/// The gradients of `slots` in `grads`, in the same order.
fn grads_of(
    model: &Transformer<Ad>,
    grads: &GradientsParams,
    n: usize,
) -> Result<Vec<AscendTensor>, AttnError> {
    struct Collect<'a> {
        grads: &'a GradientsParams,
        out: Vec<Option<AscendTensor>>,
    }
    impl ModuleVisitor<Ad> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
            // The trainable parameters, as `slots` visits them.
            if param.is_require_grad() {
                self.out
                    .push(self.grads.get::<Ascend, D>(param.id).map(inner_prim));
            }
        }
    }
    let mut c = Collect {
        grads,
        out: Vec::with_capacity(n),
    };
    model.visit(&mut c);
    c.out
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .filter(|g| g.len() == n)
        .ok_or_else(|| unsupported("a parameter that gets no gradient"))
}

/// The optimizer's launches over every slot at learning rate `lr`.
fn adamw_all(
    slots: &[Slot],
    grads: &[AscendTensor],
    step: &AscendTensor,
    hyper: &AdamWHyper,
) -> Result<(), AttnError> {
    for (s, g) in slots.iter().zip(grads) {
        adamw_step_in_place(&s.var, &s.m, &s.v, g, step, hyper)?;
    }
    Ok(())
}

/// A captured training step: the graph, its persistent inputs and its output.
struct TrainGraph {
    graph: CapturedGraph,
    cu_seqlens: Vec<i64>,
    tokens: AscendTensor,
    targets: AscendTensor,
    /// The loss's per-target weights (chat data's assistant mask), `None` for plain text.
    weights: Option<AscendTensor>,
    /// AdamW's 0-based step count `t − 1` (FLOAT32 `[1]`).
    step: AscendTensor,
    slots: Vec<Slot>,
    /// The gradients the update reads (buffers of the graph).
    grads: Vec<AscendTensor>,
    group: TaskGroup,
    /// The learning rate the optimizer's recorded launches hold.
    lr: f64,
    /// `[loss, squared gradient norm]`.
    readout: Tensor<Ascend, 1>,
    /// AdamW's step count after the warm-up.
    t0: usize,
    /// The run's step at which the graph first replays.
    first_step: usize,
}

impl TrainGraph {
    /// Captures the step of `model` (whose optimizer `optim` has stepped) on batches shaped
    /// like `batch`, its optimizer at learning rate `lr`; `large`: the large blocks an eager
    /// step took (reserved first: the capture keeps every block it takes).
    fn capture(
        model: &Transformer<Ad>,
        optim: &Adaptor,
        batch: &PackedBatch,
        (lr, clip_norm, first_step): (f64, f32, usize),
        large: &[usize],
    ) -> Result<Self, AttnError> {
        let device = model.embed_tokens.weight.val().device();
        let (slots, t0) = slots(model, &optim.to_record())?;
        let t = batch.tokens.len();
        let int =
            |v: &[i64]| Tensor::<Ad, 1, Int>::from_data(TensorData::new(v.to_vec(), [t]), &device);
        let (tokens, targets) = (int(&batch.tokens), int(&batch.targets));
        // Chat data: the loss's per-target weights, an input rewritten per batch like the
        // targets.
        let weights = batch
            .loss_mask
            .as_deref()
            .map(|m| Tensor::<Ad, 1>::from_data(TensorData::new(loss_weights(m), [t]), &device));
        let (cos, sin, shape) =
            Rope::<Ad>::tables(&packed_positions(&batch.cu_seqlens), &model.config);
        let rope = Rope::from_tables(
            Tensor::from_data(TensorData::new(cos, shape), &device),
            Tensor::from_data(TensorData::new(sin, shape), &device),
        );
        let step = AscendTensor::from_data(TensorData::new(vec![0f32], [1]), &device);
        let hyper = optim.optim().hyper_at(lr);
        reserve_workspace(&device, WORKSPACE_BYTES).map_err(|e| graph_err("reserve", e))?;
        let cu = batch.cu_seqlens.clone();
        let body = || -> Result<_, AttnError> {
            let logits = model.forward_packed_rope(tokens.clone(), &cu, &rope, |_, _| {})?;
            let loss = match &weights {
                None => cross_entropy_fused(logits, targets.clone())?,
                Some(w) => weighted_cross_entropy(logits, targets.clone(), w.clone()),
            };
            let loss_inner = loss.clone().inner();
            let grads = GradientsParams::from_grads(loss.backward(), model);
            let (grads, squares) = clip_global_norm(model, grads, clip_norm);
            let squares = squares.ok_or_else(|| unsupported("a model without gradients"))?;
            let readout = Tensor::cat(vec![loss_inner.reshape([1]), squares], 0);
            let grads = grads_of(model, &grads, slots.len())?;
            let (group, done) = task_group(&device, || adamw_all(&slots, &grads, &step, &hyper))
                .map_err(|e| graph_err("task group", e))?;
            done?;
            Ok((readout, grads, group))
        };
        // An op's own error inside the capture (an `AttnError`, not a panic) says more than
        // the capture's end, which then fails as invalidated: kept to report it.
        let failed = std::cell::RefCell::new(None);
        let mut reserve = FIRST_RESERVE_BYTES;
        let (graph, out) = loop {
            reserve_small(&device, reserve)
                .map_err(|e| graph_err("reserve", GraphError::Failed(e)))?;
            // Again on each retry: a refused capture may have wanted more large blocks too.
            reserve_large(&device, large)
                .map_err(|e| graph_err("reserve", GraphError::Failed(e)))?;
            let attempt = capture(&device, || {
                body().inspect_err(|e| {
                    *failed.borrow_mut() = Some(e.clone());
                })
            });
            let failure = failed.borrow_mut().take();
            match attempt {
                Ok(done) => break done,
                Err(GraphError::Refused(m))
                    if m.contains("aclrtMalloc") && reserve < MAX_RESERVE_BYTES =>
                {
                    reserve *= 2;
                }
                Err(e) => return Err(failure.unwrap_or_else(|| graph_err("capture", e))),
            }
        };
        let (readout, grads, group) = out?;
        let prim_int = |t: Tensor<Ad, 1, Int>| t.inner().into_primitive();
        Ok(Self {
            graph,
            cu_seqlens: batch.cu_seqlens.clone(),
            tokens: prim_int(tokens),
            targets: prim_int(targets),
            weights: weights.map(float_prim),
            step,
            slots,
            grads,
            group,
            lr,
            readout,
            t0,
            first_step,
        })
    }

    /// AdamW's step count `t` of the run's step `step` (1-based, as Burn's records hold it).
    fn time(&self, step: usize) -> usize {
        self.t0 + 1 + (step - self.first_step)
    }

    /// The run's step `step` on `batch` at learning rate `lr`: inputs written, the
    /// optimizer's rate updated when it changed, one replay, then `[loss, squared norm]`.
    fn step(
        &mut self,
        optim: &Adaptor,
        batch: &PackedBatch,
        step: usize,
        lr: f64,
        stats: &mut GraphTrainStats,
    ) -> Result<(f32, f32), AttnError> {
        if batch.cu_seqlens != self.cu_seqlens {
            return Err(AttnError::invalid(
                "cu_seqlens",
                format!(
                    "the captured step has rows {:?}, this batch {:?} (--graph needs --pack \
                     fixed)",
                    self.cu_seqlens, batch.cu_seqlens
                ),
            ));
        }
        let device = self.tokens.device();
        let started = Instant::now();
        let before = thread_launches();
        let err = |e| graph_err("write_in_place", e);
        write_in_place(&self.tokens, &le(&batch.tokens)).map_err(err)?;
        write_in_place(&self.targets, &le(&batch.targets)).map_err(err)?;
        match (&self.weights, batch.loss_mask.as_deref()) {
            (Some(w), Some(mask)) => {
                let bytes: Vec<u8> = loss_weights(mask)
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect();
                write_in_place(w, &bytes).map_err(err)?;
            }
            (None, None) => {}
            _ => {
                return Err(AttnError::invalid(
                    "loss_mask",
                    "the captured step and this batch differ in having a loss mask (chat data)",
                ))
            }
        }
        // The kernel's 0-based count (see backend-ascend/src/optim.rs).
        let t = (self.time(step) - 1) as f32;
        write_in_place(&self.step, &t.to_le_bytes()).map_err(err)?;
        if lr != self.lr {
            let hyper = optim.optim().hyper_at(lr);
            let (slots, grads, s) = (&self.slots, &self.grads, &self.step);
            update_task_group(&device, self.group, || adamw_all(slots, grads, s, &hyper))
                .map_err(|e| graph_err("task update", e))??;
            self.lr = lr;
            stats.lr_updates += 1;
        }
        self.graph.replay().map_err(|e| graph_err("replay", e))?;
        let after = thread_launches();
        stats.host += started.elapsed();
        stats.replayed_steps += 1;
        stats.uploads += after.1 - before.1;
        stats.launches += after.0 - before.0 - (after.1 - before.1);
        let both = self
            .readout
            .clone()
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .map_err(|e| AttnError::invalid("lr", format!("{e:?}")))?;
        Ok((both[0], both[1]))
    }

    /// The optimizer's records with AdamW's step count `t` of the steps done (the moments
    /// are the graph's buffers, updated in place).
    fn records(
        &self,
        model: &Transformer<Ad>,
        t: usize,
    ) -> <Adaptor as Optimizer<Transformer<Ad>, Ad>>::Record {
        struct Build<'a> {
            slots: std::collections::HashMap<ParamId, &'a Slot>,
            t: usize,
            out: <Adaptor as Optimizer<Transformer<Ad>, Ad>>::Record,
        }
        impl ModuleVisitor<Ad> for Build<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
                if let Some(s) = self.slots.get(&param.id) {
                    let f = |p: &AscendTensor| {
                        Tensor::<Ascend, D>::from_primitive(TensorPrimitive::Float(p.clone()))
                    };
                    let state = AdamWState {
                        momentum: AdaptiveMomentumState {
                            time: self.t,
                            moment_1: f(&s.m),
                            moment_2: f(&s.v),
                            max_moment_2: None,
                        },
                    };
                    self.out
                        .insert(s.id, burn::optim::record::AdaptorRecord::from_state(state));
                }
            }
        }
        let mut b = Build {
            slots: self.slots.iter().map(|s| (s.id, s)).collect(),
            t,
            out: Default::default(),
        };
        model.visit(&mut b);
        b.out
    }
}

fn le(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Refuses what a captured step cannot train, naming it (`unsupported: --graph with …`).
pub fn check(model: &Transformer<Ad>, packer: &Packer) -> Result<(), AttnError> {
    if let Some(s) = lora::settings(model).filter(|s| s.dropout > 0.0) {
        // A replay repeats the captured launches, the dropout draw with its seed included.
        return Err(AttnError::Unsupported(format!(
            "--graph with --lora-dropout {} (a replayed step would reuse the captured dropout \
             mask at every step; use --lora-dropout 0)",
            s.dropout
        )));
    }
    if model.checkpoint_blocks {
        return Err(unsupported("--checkpointing"));
    }
    if model.config.moe.is_some() {
        return Err(unsupported(
            "a mixture-of-experts model (the router's expert groups are sized on the host)",
        ));
    }
    if model.config.attention_dropout > 0.0 {
        return Err(AttnError::Unsupported(format!(
            "attention_dropout {} in training (only 0)",
            model.config.attention_dropout
        )));
    }
    if !packer.fixed_rows() {
        return Err(AttnError::invalid(
            "--graph",
            "needs batches of fixed shape: pass --pack fixed (the varlen attention's sequence \
             lengths are baked into the captured launches)",
        ));
    }
    Ok(())
}

/// [`crate::train::eager::train`] on one Ascend device with every step after the first
/// [`WARMUP_STEPS`] of this call replayed from one captured graph (see the module docs);
/// `packer` must make fixed rows. Returns the model, the state and what the device did.
pub fn train_graph(
    mut model: Transformer<Ad>,
    mut state: TrainState,
    resume_optimizer: bool,
    packer: &mut Packer,
    opts: &TrainOptions,
    mut on_step: impl FnMut(&StepReport),
) -> Result<(Transformer<Ad>, TrainState, GraphTrainStats), AttnError> {
    check(&model, packer)?;
    if state.devices > 1 {
        return Err(AttnError::invalid(
            "--devices",
            format!(
                "the run in {} trained on {} devices; --graph trains on one",
                opts.out.display(),
                state.devices
            ),
        ));
    }
    let device = model.embed_tokens.weight.val().device();
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
    for _ in 0..state.step {
        packer.next_batch();
    }
    state.devices = 1;
    let total_steps = opts.total_steps;
    let end = opts.stop_after.unwrap_or(total_steps).min(total_steps);
    let schedule = schedule_of(opts);
    let mut optim: Adaptor = FusedAdamW::<Ad>::new(opts.weight_decay)?.init();
    if resume_optimizer {
        let (bytes, path) = saved_optimizer(opts, &state)?;
        let record = recorder.load(bytes, &device).map_err(|e| io(&path, e))?;
        optim = optim.load_record(record);
    }
    std::fs::create_dir_all(&opts.out).map_err(|e| io(&opts.out, e))?;
    let mut stats = GraphTrainStats::default();
    let mut graph: Option<TrainGraph> = None;
    let first = state.step;
    for step in first..end {
        let batch = packer.next_batch();
        let t = batch.tokens.len();
        let lr = schedule.lr(step);
        if graph.is_none() && step >= first + WARMUP_STEPS {
            let large = take_large_requests(&device);
            let held = memory_stats(&device).allocated_bytes;
            let g =
                TrainGraph::capture(&model, &optim, &batch, (lr, opts.clip_norm, step), &large)?;
            stats.recorded_tasks = g.graph.recorded_tasks();
            stats.graph_bytes = memory_stats(&device).allocated_bytes.saturating_sub(held);
            graph = Some(g);
        }
        let (loss, squares) = match graph.as_mut() {
            Some(g) => g.step(&optim, &batch, step, lr, &mut stats)?,
            None => {
                let last_warmup = step + 1 == first + WARMUP_STEPS;
                let held = memory_stats(&device).allocated_bytes;
                if last_warmup {
                    // The last warm-up step: its large blocks are what the capture needs.
                    record_large_requests(&device);
                    reset_peak_stats(&device);
                }
                let (l, sq);
                (model, l, sq) = eager_step(model, &mut optim, &batch, step, lr, opts)?;
                if last_warmup {
                    stats.eager_step_bytes = memory_stats(&device)
                        .peak_allocated_bytes
                        .saturating_sub(held);
                }
                stats.eager_steps += 1;
                (l, sq)
            }
        };
        let norm = squares.sqrt();
        if !loss.is_finite() || !norm.is_finite() {
            return Err(AttnError::invalid(
                "lr",
                format!(
                    "the loss became {loss} (gradient norm {norm}) at step {step}; lower the \
                     learning rate (the last good checkpoint is kept)"
                ),
            ));
        }
        state.losses.push(loss);
        state.step = step + 1;
        on_step(&StepReport {
            step,
            total_steps,
            loss,
            lr,
            tokens: t,
        });
        if state.step == end || state.step.is_multiple_of(opts.save_every.max(1)) {
            if let Some(g) = &graph {
                // The moments are the graph's, updated in place; the step count is the host's.
                optim = optim.load_record(g.records(&model, g.time(step)));
            }
            save(&model, &optim, &state, &opts.out, &recorder)?;
        }
    }
    // A run too short to capture leaves the recording on: stop it.
    take_large_requests(&device);
    Ok((model, state, stats))
}

/// One eager step (the warm-up): [`crate::train::eager::train_with`]'s single-device step.
fn eager_step(
    model: Transformer<Ad>,
    optim: &mut Adaptor,
    batch: &PackedBatch,
    step: usize,
    lr: f64,
    opts: &TrainOptions,
) -> Result<(Transformer<Ad>, f32, f32), AttnError> {
    let device = model.embed_tokens.weight.val().device();
    let t = batch.tokens.len();
    let int =
        |v: &[i64]| Tensor::<Ad, 1, Int>::from_data(TensorData::new(v.to_vec(), [t]), &device);
    let logits = model.forward_packed(int(&batch.tokens), &batch.cu_seqlens)?;
    let loss = match batch.loss_mask.as_deref() {
        None => cross_entropy_fused(logits, int(&batch.targets))?,
        Some(mask) => masked_cross_entropy(logits, int(&batch.targets), mask),
    };
    let loss_inner = loss.clone().inner();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let (grads, squares) = clip_global_norm(&model, grads, opts.clip_norm);
    let squares = squares.ok_or_else(|| unsupported("a model without gradients"))?;
    let both = Tensor::cat(vec![loss_inner.reshape([1]), squares], 0)
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| AttnError::invalid("lr", format!("{e:?}")))?;
    if !both[0].is_finite() || !both[1].is_finite() {
        return Err(AttnError::invalid(
            "lr",
            format!(
                "the loss became {} (squared gradient norm {}) at step {step}; lower the learning \
                 rate (the last good checkpoint is kept)",
                both[0], both[1]
            ),
        ));
    }
    Ok((optim.step(lr, model, grads), both[0], both[1]))
}

fn io(path: &Path, e: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {e}", path.display()))
}
