//! Varlen (TND) flash attention with sinks: `aclnnFlashAttentionVarLenScoreV5` and
//! `aclnnFlashAttentionUnpaddingScoreGradV5`. The parameters and their validation are the
//! contract's ([`burn_ascend_contract::varlen`]); here are the Burn extension trait
//! [`VarlenBackend`] with the composite default ([`composite`]), its `NdArray` impl on the CPU
//! kernels ([`ndarray`]), its `Autodiff` impl with a fused backward ([`autodiff`]) and the
//! public functions ([`api`]).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

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

/// The varlen forward's inputs.
pub fn shapes<T: TensorMetadata>(i: &VarlenInputs<T>) -> VarlenShapes {
    let dims3 = |t: &T| t.shape().dims::<3>();
    VarlenShapes {
        query: dims3(&i.query),
        key: dims3(&i.key),
        value: dims3(&i.value),
        sink: i.sink.as_ref().map(|s| s.shape().dims::<1>()[0]),
        pse: i.pse.as_ref().map(|p| p.shape().to_vec()),
        atten_mask: i.atten_mask.as_ref().map(|m| m.shape().to_vec()),
        alibi_slopes: i.alibi_slopes.as_ref().map(|s| s.shape().to_vec()),
        drop_mask: i.drop_mask.as_ref().map(|m| m.shape().to_vec()),
    }
}

/// The varlen backward's extra inputs (the forward's are [`shapes`] of `i.inputs`).
pub fn bwd_shapes<T: TensorMetadata>(i: &VarlenGradInputs<T>) -> VarlenBwdShapes {
    let dims3 = |t: &T| t.shape().dims::<3>();
    VarlenBwdShapes {
        dy: dims3(&i.dy),
        attention_in: dims3(&i.attention_in),
        softmax_max: dims3(&i.softmax_max),
        softmax_sum: dims3(&i.softmax_sum),
    }
}
