//! The fused transformer ops of a training step as a Burn backend extension: RMSNorm, rotary
//! position embedding, SwiGLU and softmax cross-entropy, each a forward and a backward method
//! whose default bodies are the composite (Burn primitives, any backend). `NdArray` runs the
//! one-pass CPU kernels
//! ([`burn_ascend_kernels::cpu::fused`]), `Autodiff<B, C>` records one node per op whose
//! backward calls the inner backend's fused backward, and the `Ascend` backend calls
//! `aclnnRmsNorm(Grad)`, `aclnnRotaryPositionEmbedding(Grad)`, `aclnnSwiGlu(Grad)` and
//! `aclnnCrossEntropyLoss(Grad)`.
//!
//! [`crate::TrainingBackend`] bundles this trait with the attention ops, the grouped matmul and
//! the optimizer step for the example model's training.

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};

use crate::error::Result;

pub mod api;
mod autodiff;
pub mod composite;
pub mod ndarray;
pub mod validate;

pub use burn_ascend_contract::fused::{
    cross_entropy, rms_norm, rotary, swiglu, CrossEntropyDims, RmsNormDims, RotaryDims, RotaryMode,
    SwiGluDims,
};

/// `ignoreIndex` of torch's `cross_entropy` (and CANN's docs' example): no valid class.
pub const DEFAULT_IGNORE_INDEX: i64 = -100;

/// Outputs of the RMSNorm forward.
#[derive(Debug, Clone)]
pub struct RmsNormOutputs<B: Backend> {
    /// `yOut`, shaped and typed as `x`.
    pub y: FloatTensor<B>,
    /// `rstdOut`: `1 / sqrt(mean(x²) + epsilon)`, f32, `x`'s shape with the last dimension 1.
    pub rstd: FloatTensor<B>,
}

/// Outputs of the RMSNorm backward.
#[derive(Debug, Clone)]
pub struct RmsNormGrads<B: Backend> {
    /// `dxOut`, shaped and typed as `x`.
    pub dx: FloatTensor<B>,
    /// `dgammaOut`, shaped and typed as `gamma`.
    pub dgamma: FloatTensor<B>,
}

/// Outputs of the cross-entropy forward.
#[derive(Debug, Clone)]
pub struct CrossEntropyOutputs<B: Backend> {
    /// `lossOut` `[1]`: the mean over the rows whose target is not `ignoreIndex`.
    pub loss: FloatTensor<B>,
    /// `logProbOut` `[N, C]`: the log-softmax, what the backward reads.
    pub log_prob: FloatTensor<B>,
}

/// The fused transformer ops as a Burn backend extension (see the [module docs](self)).
pub trait FusedBackend: Backend {
    /// `aclnnRmsNorm` over the last dimension (`gamma` `[x.last]`).
    fn rms_norm_fwd(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
    ) -> Result<RmsNormOutputs<Self>> {
        composite::rms_norm_fwd::<Self>(x, gamma, epsilon)
    }

    /// `aclnnRmsNormGrad` from the forward's `rstd`.
    fn rms_norm_bwd(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> Result<RmsNormGrads<Self>> {
        composite::rms_norm_bwd::<Self>(dy, x, rstd, gamma)
    }

    /// `aclnnRotaryPositionEmbedding`: `y = x·cos + rotate(x)·sin`, `x` 4-D, `cos` / `sin`
    /// broadcast over its leading dimensions (see [`rotary`]), in `x`'s dtype (other dtypes of
    /// the tables are cast to it first, as torch_npu's `npu_rotary_mul` does).
    fn rotary_embedding_fwd(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        mode: RotaryMode,
    ) -> Result<FloatTensor<Self>> {
        composite::rotary_fwd::<Self>(x, cos, sin, mode)
    }

    /// `aclnnRotaryPositionEmbeddingGrad` without `xOptional`: `dx` only (the tables are
    /// constants: `dcosOut` / `dsinOut` are not computed).
    fn rotary_embedding_bwd(
        dy: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        mode: RotaryMode,
    ) -> Result<FloatTensor<Self>> {
        composite::rotary_bwd::<Self>(dy, cos, sin, mode)
    }

    /// `aclnnSwiGlu`: `silu(A) · B` of `x`'s halves along `dim` (the first half the gate).
    fn swiglu_fwd(x: FloatTensor<Self>, dim: i64) -> Result<FloatTensor<Self>> {
        composite::swiglu_fwd::<Self>(x, dim)
    }

    /// `aclnnSwiGluGrad`: `dx` shaped as `x`.
    fn swiglu_bwd(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        dim: i64,
    ) -> Result<FloatTensor<Self>> {
        composite::swiglu_bwd::<Self>(dy, x, dim)
    }

    /// SwiGLU of the gate and up projections held apart, one shape: `silu(gate) · up`, what
    /// [`Self::swiglu_fwd`] computes from their concatenation along the last dimension, without
    /// building it. By default the concatenation and `aclnnSwiGlu` (one device call); the CPU
    /// reads both where they lie.
    fn swiglu_pair_fwd(
        gate: FloatTensor<Self>,
        up: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>> {
        composite::swiglu_pair_fwd::<Self>(gate, up)
    }

    /// The backward of [`Self::swiglu_pair_fwd`]: `(dgate, dup)`, by default
    /// `aclnnSwiGluGrad` on the concatenation, split.
    fn swiglu_pair_bwd(
        dy: FloatTensor<Self>,
        gate: FloatTensor<Self>,
        up: FloatTensor<Self>,
    ) -> Result<(FloatTensor<Self>, FloatTensor<Self>)> {
        composite::swiglu_pair_bwd::<Self>(dy, gate, up)
    }

    /// `aclnnCrossEntropyLoss` with the mean reduction: the loss and the log-softmax.
    fn cross_entropy_fwd(
        input: FloatTensor<Self>,
        target: IntTensor<Self>,
        ignore_index: i64,
    ) -> Result<CrossEntropyOutputs<Self>> {
        composite::cross_entropy_fwd::<Self>(input, target, ignore_index)
    }

    /// `aclnnCrossEntropyLossGrad`: the gradient of the input in one pass over `logProb`.
    fn cross_entropy_bwd(
        grad_loss: FloatTensor<Self>,
        log_prob: FloatTensor<Self>,
        target: IntTensor<Self>,
        ignore_index: i64,
    ) -> Result<FloatTensor<Self>> {
        composite::cross_entropy_bwd::<Self>(grad_loss, log_prob, target, ignore_index)
    }
}
