//! The grouped matmul of a mixture of experts (`aclnnGroupedMatmulV4`, torch_npu's
//! `npu_grouped_matmul`): the [`GroupedMatmulBackend`] extension trait with its composite
//! default ([`composite`]), the `Autodiff` node with a fused backward ([`autodiff`]) and the
//! public function [`grouped_matmul`]. The contract (spec, validation, group-list semantics)
//! is `burn_ascend_contract::grouped_matmul`, re-exported here; the design notes are
//! `docs/moe.md`.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorMetadata, TensorPrimitive};

pub use burn_ascend_contract::grouped_matmul::*;

use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;
use crate::host::acl_dtype;

pub mod autodiff;
pub mod composite;

/// `aclnnGroupedMatmulV4` as a Burn backend extension. Every backend runs the composite; a
/// backend with the kernel overrides [`Self::grouped_matmul`] (`Ascend`), and `Autodiff`
/// records one node whose backward is two more grouped matmuls.
pub trait GroupedMatmulBackend: Backend {
    /// One grouped matmul with logical shapes (see the contract): groupType 0 takes
    /// `x [M, K]`, `weight [g, K, N]`, optional `bias [g, N]` and returns `[M, N]`;
    /// groupType 2 takes `x [M, K]`, `weight [K, N]`, no bias, and returns `[g, M, N]`.
    /// The output has x's dtype. Validates before any tensor operation.
    fn grouped_matmul(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        spec: &GroupedMatmulSpec,
    ) -> Result<FloatTensor<Self>> {
        composite::grouped_matmul::<Self>(x, weight, bias, spec)
    }
}

// `NdArray` runs the composite.
ndarray_on_host! { GroupedMatmulBackend {} }

/// The shapes and dtypes of a call, for the contract.
pub fn shapes<B: Backend>(
    x: &FloatTensor<B>,
    weight: &FloatTensor<B>,
    bias: Option<&FloatTensor<B>>,
) -> GroupedMatmulShapes {
    GroupedMatmulShapes {
        x: x.shape().to_vec(),
        weight: weight.shape().to_vec(),
        bias: bias.map(|b| b.shape().to_vec()),
        dtypes: [
            acl_dtype(x.dtype()),
            acl_dtype(weight.dtype()),
            bias.and_then(|b| acl_dtype(b.dtype())),
        ],
    }
}

/// `aclnnGroupedMatmulV4` with groupType 0: the rows of `x [M, K]` (sorted by group) times
/// their group's `weight [g, K, N]` plus its `bias [g, N]`, `[M, N]`. Under `Autodiff`
/// gradients reach x, weight and bias through one fused backward.
pub fn grouped_matmul<B: GroupedMatmulBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 3>,
    bias: Option<Tensor<B, 2>>,
    spec: &GroupedMatmulSpec,
) -> Result<Tensor<B, 2>> {
    let out = B::grouped_matmul(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.map(|b| b.into_primitive().tensor()),
        &spec.with_group_type(GroupType::M),
    )?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

/// `aclnnGroupedMatmulV4` with groupType 2: `out_i = x[:, K_i] · weight[K_i, :]` for `x [M, K]`,
/// `weight [K, N]`, `[g, M, N]` (the weight gradient of [`grouped_matmul`]).
pub fn grouped_matmul_k<B: GroupedMatmulBackend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    spec: &GroupedMatmulSpec,
) -> Result<Tensor<B, 3>> {
    let out = B::grouped_matmul(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        None,
        &spec.with_group_type(GroupType::K),
    )?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}
