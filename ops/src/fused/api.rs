//! The fused ops on Burn tensors: what the model calls.

use burn::tensor::{Int, Tensor, TensorPrimitive};

use super::{FusedBackend, RotaryMode, DEFAULT_IGNORE_INDEX};
use crate::error::Result;

/// RMSNorm over the last dimension: `x / sqrt(mean(x²) + epsilon) · gamma` (`aclnnRmsNorm`),
/// differentiable in `x` and `gamma` through one fused backward (`aclnnRmsNormGrad`).
pub fn rms_norm<B: FusedBackend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    epsilon: f64,
) -> Result<Tensor<B, D>> {
    let out = B::rms_norm_fwd(
        x.into_primitive().tensor(),
        gamma.into_primitive().tensor(),
        epsilon,
    )?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out.y)))
}

/// Rotary position embedding `y = x·cos + rotate(x)·sin` (`aclnnRotaryPositionEmbedding`,
/// backward `aclnnRotaryPositionEmbeddingGrad`): `x` `[B, S, N, D]` (or BNSD / SBND), `cos` and
/// `sin` broadcast over its leading dimensions (`[1, S, 1, D]` for BSND), full width (`D`,
/// HF's `cat(freqs, freqs)` for half mode). Differentiable in `x`; the tables are constants
/// (a tracked `cos` or `sin` is refused under `Autodiff`).
pub fn rotary_embedding<B: FusedBackend>(
    x: Tensor<B, 4>,
    cos: Tensor<B, 4>,
    sin: Tensor<B, 4>,
    mode: RotaryMode,
) -> Result<Tensor<B, 4>> {
    let y = B::rotary_embedding_fwd(
        x.into_primitive().tensor(),
        cos.into_primitive().tensor(),
        sin.into_primitive().tensor(),
        mode,
    )?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(y)))
}

/// SwiGLU of `x`'s two halves along `dim`, the first half the gate: `silu(A) · B`
/// (`aclnnSwiGlu`, backward `aclnnSwiGluGrad`). `dim` as the aclnn's `dimOptional` (negative
/// counts from the end).
pub fn swiglu<B: FusedBackend, const D: usize>(x: Tensor<B, D>, dim: i64) -> Result<Tensor<B, D>> {
    let y = B::swiglu_fwd(x.into_primitive().tensor(), dim)?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(y)))
}

/// SwiGLU of the gate and up projections held apart, one shape: `silu(gate) · up` —
/// [`swiglu`] of their concatenation along the last dimension without building it (on a
/// device backend the default makes it and calls `aclnnSwiGlu`; the CPU reads both where they
/// lie). Differentiable in both through one node under `Autodiff`.
pub fn swiglu_pair<B: FusedBackend, const D: usize>(
    gate: Tensor<B, D>,
    up: Tensor<B, D>,
) -> Result<Tensor<B, D>> {
    let y = B::swiglu_pair_fwd(gate.into_primitive().tensor(), up.into_primitive().tensor())?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(y)))
}

/// Mean softmax cross-entropy of `logits [N, C]` against class indices `targets [N]` (torch's
/// `cross_entropy` with its defaults; `aclnnCrossEntropyLoss`), `[1]`; its gradient is one
/// pass over the saved log-softmax (`aclnnCrossEntropyLossGrad`).
pub fn cross_entropy_loss<B: FusedBackend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
) -> Result<Tensor<B, 1>> {
    let out = B::cross_entropy_fwd(
        logits.into_primitive().tensor(),
        targets.into_primitive(),
        DEFAULT_IGNORE_INDEX,
    )?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out.loss)))
}
