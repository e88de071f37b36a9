//! A memory plan for one training rank: bytes for the weights, gradients, optimizer
//! state, activations and workspace of a model config, a token count per rank, a rank count, a
//! compute precision, LoRA or a full fine-tune, a ZeRO stage and activation checkpointing —
//! and whether that fits one Atlas A2 / A3 NPU.
//!
//! The counts are this crate's implementation, tensor by tensor (see [`plan`]); the peak
//! follows how backward runs: it frees a layer's saved activations as it produces the layer's
//! gradients, both roughly linear in the layers done, so the peak is at one end of backward:
//! `weights + optimizer + max(activations + head workspace, gradients + update workspace)`.
//! With per-block activation checkpointing (`train/recompute.rs`) only the block inputs stay and
//! one block's activations live at a time, so the peak is the largest of the head's backward,
//! the last block's, block 0's (with the gradients) and the optimizer step (see [`plan`]).
//! Checked against the Ascend simulation's memory-pool peak in the tests, with and without
//! checkpointing.
//!
//! ZeRO (Rajbhandari et al., 2020, as DeepSpeed and MindSpeed's distributed optimizer define the
//! stages): stage 1 partitions the optimizer state over the ranks, stage 2 the gradients too, stage
//! 3 the trained weights too, counted as training runs it: without checkpointing the whole model is
//! gathered for the step (see [`crate::parallel::zero`]); with per-block checkpointing one part at
//! a time (a block's weights at each block's point, the head's at the head's). Training implements
//! the three stages (`finetune --zero K`, [`crate::parallel::zero`]); its per-rank AdamW state is
//! checked against the pool in the tests (the pool's bytes are the plan's up to its 512-byte
//! rounding), and [`measure_peak`] measures rank 0 of a data-parallel run on simulated ranks
//! (plain, ZeRO-K, ZeRO-3 with per-block checkpointing).

use burn::backend::autodiff::checkpoint::strategy::{CheckpointStrategy, NoCheckpointing};
use burn::backend::Autodiff;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::{FloatDType, Int, Tensor, TensorData};
use burn_ascend::backend::{memory_stats, reset_peak_stats, Ascend, AscendDevice};
use burn_ascend::AttnError;

use crate::load::config::{ModelConfig, MoeKind};
use crate::model::lora::{attach, freeze_base, LoraSettings, LoraTarget};
use crate::model::transformer::{cross_entropy_fused, Transformer};
use crate::parallel::ddp::materialize;
use crate::train::recompute::{loss_and_grads, loss_and_grads_with};

/// An Atlas A2 / A3 NPU's memory as Huawei specifies it: 64 GB of HBM per device (the Ascend
/// 910B of Huawei's Atlas 800T A2 training server; on an A3 each die of the 910C is one
/// device). Counted as 64 GiB, not a measured figure: the real usable size is a little lower
/// (the runtime reserves some), so a plan near the limit should be taken as not fitting.
pub const ATLAS_NPU_BYTES: u64 = 64 << 30;

/// What to plan for.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSpec {
    /// Tokens of one rank's packed batch.
    pub tokens_per_rank: usize,
    /// Longest sequence (the attention operators keep O(tokens) state, so it changes only the
    /// report).
    pub seq_len: usize,
    /// Data-parallel ranks.
    pub ranks: usize,
    /// Bytes per element of the compute dtype: 4 (f32) or 2 (bf16 / f16 mixed precision).
    pub compute_bytes: usize,
    /// LoRA rank and targets; `None`: every weight trains.
    pub lora: Option<(usize, Vec<LoraTarget>)>,
    /// ZeRO stage 0–3.
    pub zero: u8,
    /// Activation checkpointing per block (only each block's input kept).
    pub checkpointing: bool,
}

/// Bytes per rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryPlan {
    /// Parameters as stored (f32 master weights; a LoRA base's matrices bf16, its adapters f32).
    pub weights: u64,
    /// Gradients (f32; the adapters' only under LoRA).
    pub gradients: u64,
    /// AdamW's two f32 moments.
    pub optimizer: u64,
    /// Tensors kept for backward.
    pub activations: u64,
    /// The larger of the two ends of backward's transients: the loss head's at its start, the
    /// optimizer update's (and ZeRO-3's gathered layer) at its end; plus compute-dtype copies
    /// of the weights that backward keeps.
    pub workspace: u64,
    /// Highest total over the step (see the module docs).
    pub peak: u64,
}

impl MemoryPlan {
    /// Whether the peak fits one Atlas A2 / A3 NPU.
    pub fn fits_atlas(&self) -> bool {
        self.peak <= ATLAS_NPU_BYTES
    }
}

/// Parameter counts by how they are stored.
struct Counts {
    /// The blocks' projection matrices, experts and router, and the output head.
    matrices: u64,
    /// Embedding table, norms, biases, sinks.
    other: u64,
}

fn counts(c: &ModelConfig) -> Counts {
    let total = c.num_params() as u64;
    let (h, v) = (c.hidden_size as u64, c.vocab_size as u64);
    let (n, nkv, d) = (
        c.num_attention_heads as u64,
        c.num_key_value_heads as u64,
        c.head_dim as u64,
    );
    let i = c.intermediate_size as u64;
    let attn = 2 * h * n * d + 2 * h * nkv * d;
    let sparse = c.num_sparse_layers() as u64;
    let experts = c.moe.as_ref().map_or(0, |m| {
        m.num_local_experts as u64 * (3 * h * m.moe_intermediate_size as u64 + h)
    });
    let mlp = sparse * experts + (c.num_hidden_layers as u64 - sparse) * 3 * h * i;
    let head = if c.tie_word_embeddings { 0 } else { v * h };
    let matrices = c.num_hidden_layers as u64 * attn + mlp + head;
    Counts {
        matrices,
        other: total - matrices,
    }
}

/// `(in, out)` of `t`'s projection.
fn dims(c: &ModelConfig, t: LoraTarget) -> (u64, u64) {
    let (h, i) = (c.hidden_size as u64, c.intermediate_size as u64);
    let (q, kv) = (
        (c.num_attention_heads * c.head_dim) as u64,
        (c.num_key_value_heads * c.head_dim) as u64,
    );
    match t {
        LoraTarget::QProj => (h, q),
        LoraTarget::KProj | LoraTarget::VProj => (h, kv),
        LoraTarget::OProj => (q, h),
        LoraTarget::GateProj | LoraTarget::UpProj => (h, i),
        LoraTarget::DownProj => (i, h),
    }
}

/// The plan of `spec` for `c`.
pub fn plan(c: &ModelConfig, spec: &PlanSpec) -> MemoryPlan {
    let k = counts(c);
    let ranks = spec.ranks.max(1) as u64;
    let e = spec.compute_bytes as u64;
    let t = spec.tokens_per_rank as u64;
    let layers = c.num_hidden_layers as u64;
    let (h, v, i) = (
        c.hidden_size as u64,
        c.vocab_size as u64,
        c.intermediate_size as u64,
    );
    let (q, kv, heads) = (
        (c.num_attention_heads * c.head_dim) as u64,
        (c.num_key_value_heads * c.head_dim) as u64,
        c.num_attention_heads as u64,
    );
    let by_zero = |bytes: u64, from_stage: u8| {
        if spec.zero >= from_stage {
            bytes.div_ceil(ranks)
        } else {
            bytes
        }
    };
    let attention_adapted = spec.lora.as_ref().is_none_or(|(_, s)| {
        s.iter()
            .any(|t| matches!(t, LoraTarget::QProj | LoraTarget::KProj | LoraTarget::VProj))
    });
    let (weights, trained, weight_copies) = match &spec.lora {
        None => {
            // f32 master weights; under mixed precision each matrix's compute-dtype copy is
            // kept by its matmul for backward.
            let copies = if e < 4 { e * k.matrices } else { 0 };
            (4 * (k.matrices + k.other), k.matrices + k.other, copies)
        }
        Some((r, targets)) => {
            let adapters: u64 = targets
                .iter()
                .map(|&tg| {
                    let (a, b) = dims(c, tg);
                    *r as u64 * (a + b)
                })
                .sum::<u64>()
                * layers;
            // The frozen matrices in bf16; cast to f32 for f32 compute, and those copies are
            // kept by the matmuls whose input requires a gradient (all but layer 0's q/k/v).
            // Without a q/k/v adapter nothing before layer 0's o_proj requires a gradient,
            // so its o_proj keeps no copy either.
            let attn0 = if attention_adapted {
                h * (q + 2 * kv)
            } else {
                2 * h * (q + kv)
            };
            let copies = if e == 4 { 4 * (k.matrices - attn0) } else { 0 };
            (
                2 * k.matrices + 4 * k.other + 4 * adapters,
                adapters,
                copies,
            )
        }
    };
    // ZeRO-3 shards what trains; a LoRA run's frozen base stays whole on every rank.
    let weights = weights - 4 * trained + by_zero(4 * trained, 3);
    let gradients = by_zero(4 * trained, 2);
    let optimizer = by_zero(8 * trained, 1);
    let full = spec.lora.is_none();
    let lora_has = |ts: &[LoraTarget]| {
        spec.lora
            .as_ref()
            .is_some_and(|(_, s)| ts.iter().any(|t| s.contains(t)))
    };
    // Per block and token, the bytes backward keeps (see the module docs for the rule: an op
    // keeps an input only when the gradient of another input needs it, so frozen weights
    // keep fewer):
    // - the residual stream at the block's input and middle (f32) and one f32 `rstd` per
    //   token, which the fused RMSNorm keeps (it recomputes the normalised input in its
    //   backward), and the norms' outputs in the compute dtype where a trained matrix (or an
    //   adapter) reads them;
    // - attention's q and k after RoPE, v, its output, and its softmax max and sum
    //   (`[T, N, 8]` f32 each, CANN's layout);
    // - the fused SwiGLU's input (gate and up side by side, `2i`), and its output where
    //   down_proj trains;
    // - each adapter's rank-r intermediate.
    let adapter_rank = spec
        .lora
        .as_ref()
        .map_or(0, |(r, ts)| (*r * ts.len()) as u64);
    let norm_outputs = if full {
        2
    } else {
        use LoraTarget::*;
        lora_has(&[QProj, KProj, VProj]) as u64 + lora_has(&[GateProj, UpProj]) as u64
    };
    let mlp_product = full || lora_has(&[LoraTarget::DownProj]);
    let mlp_per_token = match &c.moe {
        // gpt-oss's experts (moe.rs), per routed token: the gathered input and the weighted
        // output (h each; the input only where the experts train), gate and up before and
        // after the clamp, the sigmoid, (up + 1), the GLU and their product (i each; the
        // product only where the experts train); Qwen3-MoE's the same without the clamps and
        // (up + 1): gate, up, the sigmoid, the SiLU and the product. Taken on every layer
        // (an upper bound where some are dense). Not measured: the pool check is on dense
        // models.
        Some(m) => {
            let i = m.moe_intermediate_size as u64;
            let per = match (m.kind, full) {
                (MoeKind::GptOss, true) => 7 * i + 2 * h,
                (MoeKind::GptOss, false) => 6 * i + h,
                (MoeKind::Qwen3 { .. }, true) => 5 * i + 2 * h,
                (MoeKind::Qwen3 { .. }, false) => 4 * i + h,
            };
            e * m.num_experts_per_tok as u64 * per
        }
        None => e * (2 + mlp_product as u64) * i,
    };
    let per_token = 4 * (2 * h + 2)
        + e * norm_outputs * h
        + e * (2 * q + 2 * kv)
        + 2 * 8 * 4 * heads
        + mlp_per_token
        + e * adapter_rank;
    let block = t * per_token;
    // Without a q/k/v adapter, layer 0's attention runs on tensors that require no gradient:
    // it keeps neither its inputs nor the residual stream at the block's input.
    let untracked0 = if attention_adapted {
        0
    } else {
        t * (4 * h + e * (2 * q + 2 * kv) + 2 * 8 * 4 * heads)
    };
    // The final norm's input and rstd (f32), with a trained head its output (compute dtype),
    // and the fused cross-entropy's log-softmax (f32, `aclnnCrossEntropyLoss`'s `logProb`).
    let head = t * (4 * (h + 1) + if full { e * h } else { 0 } + 4 * v);
    // Backward's start: the fused cross-entropy's one `[T, V]` f32 gradient of the logits; its
    // end: AdamW's new moments and parameter beside the old ones for the largest trained
    // tensor.
    let largest = if full { v * h } else { 0 };
    let start = 4 * t * v;
    // ZeRO-3's gathered weights (f32, what trains): with per-block checkpointing one part's
    // at a time (a block's, or the head's while it runs), otherwise the whole model's from
    // the step's forward to its update (`crate::parallel::zero`).
    let zero3 = spec.zero >= 3;
    let trained_head = if full {
        v * h * (!c.tie_word_embeddings as u64) + h
    } else {
        0
    };
    let trained_embedding = if full { v * h } else { 0 };
    let trained_layer = (trained - trained_head - trained_embedding) / layers.max(1);
    let gathered = if zero3 { 4 * trained_layer } else { 0 };
    let gathered_head = if zero3 {
        4 * (trained_head + trained_embedding * c.tie_word_embeddings as u64)
    } else {
        0
    };
    let whole = if zero3 { 4 * trained } else { 0 };
    let end = 3 * 4 * largest;
    let (activations, workspace, peak) = if spec.checkpointing {
        // Per-block checkpointing (`train/recompute.rs`): the forward pass keeps each block's
        // input (f32 residual stream) and the last block's output; backward runs the head
        // first, then one block at a time from the last, each recomputed with its
        // activations, and frees each input as it goes while the gradients accumulate. So
        // the peak is at one of three points: the head's backward (every input kept, the
        // head's activations and the logits' gradient); the last block's (every input but
        // the head's, the block's activations and the largest transient of its backward, the
        // fused SwiGLU's input gradient `[T, 2i]` f32 per routed expert, plus `dy`); block
        // 0's (all the gradients, one input and `dy`, the block's activations); or the
        // optimizer step at the end. Weights cast to the compute dtype live only while their
        // block (or the head) runs: one block's or the head's.
        let input = t * 4 * h;
        let head_matrix = if c.tie_word_embeddings { 0 } else { v * h };
        let layer_matrices = (k.matrices - head_matrix) / layers.max(1);
        let (block_copies, head_copies) = match (&spec.lora, e) {
            (None, 4) | (Some(_), 2) => (0, 0),
            (None, _) => (e * layer_matrices, e * v * h),
            (Some(_), _) => (4 * layer_matrices, 4 * head_matrix),
        };
        // The head's gradients, reduce-scattered right after its backward under ZeRO-3.
        let head_grads = by_zero(if full { 4 * (v * h + h) } else { 0 }, 3);
        let routed = c.moe.as_ref().map_or(1, |m| m.num_experts_per_tok as u64);
        let transient = 4 * t * 2 * i * routed;
        let at_head = (layers + 1) * input + head + start + head_copies + gathered_head;
        let at_last_block =
            layers * input + input + block + head_grads + transient + block_copies + gathered;
        let at_block0 = 2 * input + block + gradients + block_copies + gathered;
        let peak = weights
            + optimizer
            + at_head
                .max(at_last_block)
                .max(at_block0)
                .max(gradients + end);
        (
            layers * input + (input + head).max(block + input),
            start.max(transient).max(end)
                + head_copies.max(block_copies)
                + gathered.max(gathered_head),
            peak,
        )
    } else {
        let activations = layers * block + head - untracked0;
        (
            activations,
            start.max(end) + weight_copies + whole,
            // The master slices are views of the gathered units while they are whole.
            weights - by_zero(4 * trained, 3) * zero3 as u64
                + whole
                + optimizer
                + weight_copies
                + (activations + start).max(gradients + end),
        )
    };
    MemoryPlan {
        weights,
        gradients,
        optimizer,
        activations,
        workspace,
        peak,
    }
}

/// The memory pool's peak of allocated bytes on `device` (an `Ascend` device: the simulation
/// or an NPU) over the second of two training steps of `spec` on a randomly initialised model
/// of `c` — after the first step, so AdamW's state exists, as in every later step. The token
/// ids are arbitrary (memory does not depend on them); sequences of `seq_len` tokens.
/// With `spec.ranks > 1` or a ZeRO stage, the ranks run as threads on devices
/// `device.index ..` and rank 0's peak is returned; per-block checkpointing
/// (`spec.checkpointing`, [`crate::train::recompute`]) on one rank or with ZeRO-3 only, as
/// training allows.
pub fn measure_peak(
    c: &ModelConfig,
    spec: &PlanSpec,
    device: &AscendDevice,
) -> Result<u64, AttnError> {
    if spec.ranks > 1 || spec.zero > 0 {
        if spec.checkpointing && spec.zero != 3 {
            return Err(AttnError::Unsupported(
                "measuring per-block checkpointing with data parallelism other than ZeRO-3 \
                 (training refuses it)"
                    .into(),
            ));
        }
        return measure_ranks(c, spec, device);
    }
    measure_peak_with::<NoCheckpointing>(c, spec, device)
}

fn compute_dtype(spec: &PlanSpec) -> Result<Option<FloatDType>, AttnError> {
    match spec.compute_bytes {
        4 => Ok(None),
        2 => Ok(Some(FloatDType::BF16)),
        b => Err(AttnError::invalid(
            "--dtype",
            format!("compute bytes must be 4 or 2, got {b}"),
        )),
    }
}

/// A randomly initialised model of `c` as `spec` trains it (LoRA attached, compute dtype).
fn spec_model<C: CheckpointStrategy>(
    c: &ModelConfig,
    spec: &PlanSpec,
    device: &AscendDevice,
    dtype: Option<FloatDType>,
) -> Result<Transformer<Autodiff<Ascend, C>>, AttnError> {
    let model = Transformer::<Autodiff<Ascend, C>>::new(c, device)?;
    materialize(&model);
    let model = match &spec.lora {
        None => model,
        Some((rank, targets)) => {
            let s = LoraSettings {
                rank: *rank,
                alpha: 2.0 * *rank as f64,
                dropout: 0.0,
                targets: targets.clone(),
                base_model: String::new(),
            };
            freeze_base(attach(model, &s, 0, device)?)
        }
    };
    Ok(model.with_compute_dtype(dtype))
}

type Batch<B> = (Tensor<B, 1, Int>, Vec<i64>, Tensor<B, 1, Int>);

/// Tokens, `cu_seqlens` and targets of one rank's batch of `spec`: arbitrary ids (memory does
/// not depend on them) in sequences of `seq_len`.
fn spec_batch<B: burn::tensor::backend::Backend>(
    c: &ModelConfig,
    spec: &PlanSpec,
    device: &B::Device,
) -> Batch<B> {
    let t = spec.tokens_per_rank;
    let seq = spec.seq_len.clamp(1, t.max(1));
    let mut cu: Vec<i64> = (0..t).step_by(seq).map(|s| s as i64).collect();
    cu.push(t as i64);
    let ids: Vec<i64> = (0..t as i64)
        .map(|i| (i * 31 + 7) % c.vocab_size as i64)
        .collect();
    let targets = ids.iter().map(|i| (i + 1) % c.vocab_size as i64).collect();
    (
        Tensor::from_data(TensorData::new(ids, [t]), device),
        cu,
        Tensor::from_data(TensorData::new(targets, [t]), device),
    )
}

/// [`measure_peak`] of data parallelism over `spec.ranks` ranks (plain, ZeRO-`spec.zero`, and
/// ZeRO-3 with per-block checkpointing, [`crate::parallel::zero::BlockSharding`]), rank `r` on
/// device `device.index + r` of `device`'s kind (one thread each, as `finetune --devices N` runs
/// them): rank 0's pool peak over the second step, as [`crate::train::eager`] runs a step.
fn measure_ranks(
    c: &ModelConfig,
    spec: &PlanSpec,
    device: &AscendDevice,
) -> Result<u64, AttnError> {
    use burn_ascend::backend::collective::{simulate_devices, ProcessGroup};
    let n = spec.ranks;
    let dtype = compute_dtype(spec)?;
    if device.kind == burn_ascend::backend::AscendKind::Simulation {
        simulate_devices(device.index + n as u32);
    }
    let devices: Vec<AscendDevice> = (0..n as u32)
        .map(|r| AscendDevice {
            kind: device.kind,
            index: device.index + r,
        })
        .collect();
    let groups = ProcessGroup::local(&devices).map_err(crate::parallel::ddp::hccl)?;
    std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .zip(devices)
            .map(|(group, d)| s.spawn(move || rank_peak(c, spec, group, d, dtype)))
            .collect();
        let mut peaks = Vec::with_capacity(n);
        let mut failures = Vec::new();
        for (r, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(p)) => peaks.push(p),
                Ok(Err(e)) => failures.push(format!("rank {r}: {e}")),
                Err(_) => failures.push(format!("rank {r}: panicked")),
            }
        }
        if failures.is_empty() {
            Ok(peaks[0])
        } else {
            Err(AttnError::Device {
                op: "plan".into(),
                call: "measure_peak".into(),
                status: None,
                message: failures.join("; "),
            })
        }
    })
}

fn rank_peak(
    c: &ModelConfig,
    spec: &PlanSpec,
    group: burn_ascend::backend::collective::ProcessGroup,
    device: AscendDevice,
    dtype: Option<FloatDType>,
) -> Result<u64, AttnError> {
    use crate::parallel::ddp::{DataParallel, DEFAULT_BUCKET_BYTES};
    use crate::parallel::zero::Zero;
    use crate::train::sync::{GradientSync, ShardedOptimizer, ZeroStage};
    type Ad = Autodiff<Ascend>;
    // The sync is made first: a rank that fails drops its communicator, so the others' next
    // collective fails instead of waiting.
    let (mut zero, mut dp) = match ZeroStage::from_flag(spec.zero)? {
        Some(stage) => (Some(Zero::new(group, stage, 0.1, 1.0)?), None),
        None => (None, Some(DataParallel::new(group, DEFAULT_BUCKET_BYTES))),
    };
    let mut optim = crate::train::optim::FusedAdamW::<Ad>::new(0.1)?.init::<Transformer<Ad>>();
    let model = spec_model::<NoCheckpointing>(c, spec, &device, dtype)?;
    let (tokens, cu, targets) = spec_batch::<Ad>(c, spec, &device);
    let sync: &mut dyn GradientSync<Ad> = match (zero.as_mut(), dp.as_mut()) {
        (Some(z), _) => z,
        (None, Some(d)) => d,
        (None, None) => unreachable!("one of the two is made above"),
    };
    let mut model = sync.broadcast_model(model)?;
    let mut peak = 0;
    for step in 0..2 {
        if step == 1 {
            reset_peak_stats(&device);
        }
        let per_block = zero
            .as_mut()
            .and_then(|z| z.per_block())
            .filter(|_| spec.checkpointing);
        if let Some(blocks) = per_block {
            // ZeRO-3 with per-block checkpointing as training runs it.
            model = blocks.begin(model)?;
            loss_and_grads_with(
                &model,
                tokens.clone(),
                &cu,
                targets.clone(),
                None,
                blocks.hooks(),
            )?;
            blocks.finish()?;
        } else {
            if let Some(z) = zero.as_mut() {
                model = z.whole(model)?;
            }
            let logits = model.forward_packed(tokens.clone(), &cu)?;
            let loss = cross_entropy_fused(logits, targets.clone())?;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            match zero.as_mut() {
                Some(z) => {
                    z.reduce(&model, grads)?;
                }
                None => {
                    let dp = dp.as_mut().expect("plain data parallelism");
                    let grads = dp.average_gradients(&model, grads)?;
                    model = optim.step(1e-4, model, grads);
                }
            }
        }
        if let Some(z) = zero.as_mut() {
            model = z.step(1e-4, model)?;
            z.wait()?;
        } else if let Some(dp) = dp.as_mut() {
            dp.wait()?;
        }
        peak = memory_stats(&device).peak_allocated_bytes as u64;
    }
    Ok(peak)
}

/// [`measure_peak`] under Burn's checkpointing strategy `C` (`BalancedCheckpointing`:
/// backward recomputes the memory-bound ops' outputs instead of keeping them; whole-model, not
/// per block).
pub fn measure_peak_with<C: CheckpointStrategy>(
    c: &ModelConfig,
    spec: &PlanSpec,
    device: &AscendDevice,
) -> Result<u64, AttnError> {
    type Ad<C> = Autodiff<Ascend, C>;
    if spec.ranks > 1 || spec.zero > 0 {
        return Err(AttnError::Unsupported(
            "measuring several ranks or ZeRO under a Burn checkpointing strategy (one rank, \
             stage 0 only; data parallelism and ZeRO through measure_peak)"
                .into(),
        ));
    }
    let dtype = compute_dtype(spec)?;
    let mut model = spec_model::<C>(c, spec, device, dtype)?;
    let (tokens, cu, targets) = spec_batch::<Ad<C>>(c, spec, device);
    // The optimizer training uses.
    let mut optim =
        crate::train::optim::FusedAdamW::<Ad<C>>::new(0.1)?.init::<Transformer<Ad<C>>>();
    let mut peak = 0;
    for step in 0..2 {
        if step == 1 {
            reset_peak_stats(device);
        }
        let grads = if spec.checkpointing {
            // Per-block checkpointing as training runs it.
            loss_and_grads(&model, tokens.clone(), &cu, targets.clone(), None)?.1
        } else {
            let logits = model.forward_packed(tokens.clone(), &cu)?;
            // The loss as training computes it (the fused cross-entropy).
            let loss = cross_entropy_fused(logits, targets.clone())?;
            GradientsParams::from_grads(loss.backward(), &model)
        };
        model = optim.step(1e-4, model, grads);
        peak = memory_stats(device).peak_allocated_bytes as u64;
    }
    Ok(peak)
}
