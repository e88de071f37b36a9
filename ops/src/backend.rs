//! The Burn extension trait: the attention ops as backend methods whose default bodies are the
//! composite (built from Burn primitives), so every Burn backend runs them. A backend with
//! its own kernels overrides the methods: `NdArray` runs the CPU kernels, `Autodiff<B, C>`
//! records one node with a fused backward.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

use crate::error::Result;
use crate::varlen::{composite, VarlenSpec};

/// Differentiable inputs of the varlen forward.
#[derive(Debug, Clone)]
pub struct VarlenInputs<B: Backend> {
    /// `query` `[Tq, N, D]`.
    pub query: FloatTensor<B>,
    /// `key` `[Tkv, Nkv, D]`.
    pub key: FloatTensor<B>,
    /// `value` `[Tkv, Nkv, Dv]`.
    pub value: FloatTensor<B>,
    /// `sink` `[N]` (f32 logits, unscaled).
    pub sink: Option<FloatTensor<B>>,
}

/// Outputs of the varlen forward.
#[derive(Debug, Clone)]
pub struct VarlenOutputs<B: Backend> {
    /// `attentionOut` `[Tq, N, Dv]`.
    pub attention_out: FloatTensor<B>,
    /// `softmaxMax` `[Tq, N, 8]` in the spec's `softmaxOutLayout`.
    pub softmax_max: FloatTensor<B>,
    /// `softmaxSum` `[Tq, N, 8]`.
    pub softmax_sum: FloatTensor<B>,
}

/// Inputs of the varlen backward: the forward's inputs, its outputs and `dy`.
#[derive(Debug, Clone)]
pub struct VarlenGradInputs<B: Backend> {
    /// The forward's inputs.
    pub inputs: VarlenInputs<B>,
    /// `dy` `[Tq, N, Dv]`.
    pub dy: FloatTensor<B>,
    /// `attentionIn`: the forward's `attentionOut`.
    pub attention_in: FloatTensor<B>,
    /// The forward's `softmaxMax`.
    pub softmax_max: FloatTensor<B>,
    /// The forward's `softmaxSum`.
    pub softmax_sum: FloatTensor<B>,
}

/// Outputs of the varlen backward.
#[derive(Debug, Clone)]
pub struct VarlenGrads<B: Backend> {
    /// `dqOut`.
    pub dq: FloatTensor<B>,
    /// `dkOut`.
    pub dk: FloatTensor<B>,
    /// `dvOut`.
    pub dv: FloatTensor<B>,
    /// `dsinkOut`, when a sink was given.
    pub dsink: Option<FloatTensor<B>>,
}

/// CANN's attention operators as a Burn backend extension.
pub trait AttentionBackend: Backend {
    /// `aclnnFlashAttentionVarLenScoreV5`.
    fn varlen_fwd(inputs: VarlenInputs<Self>, spec: &VarlenSpec) -> Result<VarlenOutputs<Self>> {
        composite::varlen_fwd::<Self>(inputs, spec)
    }

    /// `aclnnFlashAttentionUnpaddingScoreGradV5`.
    fn varlen_bwd(inputs: VarlenGradInputs<Self>, spec: &VarlenSpec) -> Result<VarlenGrads<Self>> {
        composite::varlen_bwd::<Self>(inputs, spec)
    }
}
