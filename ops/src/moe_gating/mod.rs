//! A mixture of experts' router in one op (`aclnnMoeGatingTopKSoftmaxV2`, torch_npu's
//! `npu_moe_gating_top_k_softmax_v2`): the [`MoeGatingBackend`] extension trait with its
//! composite default ([`composite`]), the `Autodiff` node whose backward is composed of the
//! inner backend's ops ([`autodiff`]) and the public function [`moe_gating_top_k_softmax`]. The
//! contract (the order of softmax and top-k, the rules) is `burn_ascend_contract::moe_gating`,
//! re-exported here; the design notes are `docs/moe.md`.

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorPrimitive};

pub use burn_ascend_contract::moe_gating::*;

use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;

pub mod autodiff;
pub mod composite;

/// `aclnnMoeGatingTopKSoftmaxV2` (no finished rows) as a Burn backend extension. Every
/// backend runs the composite; a backend with the kernel overrides
/// [`Self::moe_gating_top_k_softmax`] (`Ascend`), and `Autodiff` records one node whose
/// backward is composed of the inner backend's ops.
pub trait MoeGatingBackend: Backend {
    /// The router of `x [T, E]` (router logits): `(y, expert_idx)`, both `[T, k]`, `y` in
    /// `x`'s dtype, the experts best first (ties to the lower index). [`GatingOrder`] says
    /// whether `y` is the top k of the softmax over all experts or the softmax over the top k
    /// logits. Validates before any tensor operation.
    fn moe_gating_top_k_softmax(
        x: FloatTensor<Self>,
        k: usize,
        order: GatingOrder,
    ) -> Result<(FloatTensor<Self>, IntTensor<Self>)> {
        composite::moe_gating_top_k_softmax::<Self>(x, k, order)
    }
}

// `NdArray` runs the composite.
ndarray_on_host! { MoeGatingBackend {} }

/// `aclnnMoeGatingTopKSoftmaxV2` on router logits `x [T, E]`: the routing weights `[T, k]`
/// (in `x`'s dtype) and the experts `[T, k]`, best first. Under `Autodiff` the weights'
/// gradient reaches `x` through the selected entries (and, after a softmax over all experts,
/// through that softmax).
pub fn moe_gating_top_k_softmax<B: MoeGatingBackend>(
    x: Tensor<B, 2>,
    k: usize,
    order: GatingOrder,
) -> Result<(Tensor<B, 2>, Tensor<B, 2, Int>)> {
    let (y, idx) = B::moe_gating_top_k_softmax(x.into_primitive().tensor(), k, order)?;
    Ok((
        Tensor::from_primitive(TensorPrimitive::Float(y)),
        Tensor::from_primitive(idx),
    ))
}
