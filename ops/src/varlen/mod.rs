//! Varlen (TND) flash attention with sinks: `aclnnFlashAttentionVarLenScoreV5` and
//! `aclnnFlashAttentionUnpaddingScoreGradV5`. The parameters and their validation are the
//! contract's ([`burn_ascend_contract::varlen`]); here are the Burn extension trait
//! [`VarlenBackend`] with the composite default ([`composite`]), its `NdArray` impl on the CPU
//! kernels ([`ndarray`]), its `Autodiff` impl with a fused backward ([`autodiff`]) and the
//! public functions ([`api`]).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

use crate::error::Result;

pub mod api;
pub mod autodiff;
pub mod composite;
pub mod ndarray;

/// The varlen carriers: the contract's one carrier per call, generic over the tensor kind —
/// here over `B`'s float primitives (`VarlenInputs<FloatTensor<B>>`), in the aclnn builder over
/// `&aclTensor` handles. `VarlenInputs::pse` is the differentiable external pse
/// (`[pseTotalLen]`, pseType 0/1).
pub use burn_ascend_contract::varlen::*;

/// Varlen flash attention as a Burn backend extension: default bodies are the composite (Burn
/// primitives, any backend); `NdArray` runs the CPU kernels, `Autodiff<B, C>` records one node
/// whose backward calls the inner backend's [`Self::varlen_bwd`].
pub trait VarlenBackend: Backend {
    /// `aclnnFlashAttentionVarLenScoreV5`. A pse given as a tensor ([`VarlenInputs::pse`])
    /// stays where it is; `Autodiff` makes it a parent of the node, so it receives `dpse`.
    fn varlen_fwd(
        inputs: VarlenInputs<FloatTensor<Self>>,
        spec: &VarlenSpec,
    ) -> Result<VarlenOutputs<FloatTensor<Self>>> {
        composite::varlen_fwd::<Self>(inputs, spec)
    }

    /// `aclnnFlashAttentionUnpaddingScoreGradV5`.
    fn varlen_bwd(
        inputs: VarlenGradInputs<FloatTensor<Self>>,
        spec: &VarlenSpec,
    ) -> Result<VarlenGrads<FloatTensor<Self>>> {
        composite::varlen_bwd::<Self>(inputs, spec)
    }
}

/// The shapes of the backward's `dq`, `dk` and `dv`: the query's `[Tq, N, D]`, the key's
/// `[Tkv, Nkv, D]` and the value's `[Tkv, Nkv, Dv]` (every backend allocates them so).
pub fn grad_shapes(dims: &VarlenDims) -> [[usize; 3]; 3] {
    let (tq, tkv) = (dims.t_q(), dims.t_kv());
    let (n, nkv, d) = (dims.head_num, dims.kv_head_num, dims.head_dim);
    [[tq, n, d], [tkv, nkv, d], [tkv, nkv, dims.value_dim]]
}
