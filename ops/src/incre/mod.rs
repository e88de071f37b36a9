//! Incremental (decode) attention: `aclnnIncreFlashAttentionV4`. The parameters and their
//! validation are the contract's ([`burn_ascend_contract::incre`]); here are the Burn extension
//! trait [`IncreBackend`] with the composite default ([`composite`]), its `NdArray` impl on the
//! flash-decoding CPU kernel ([`ndarray`]), its forward-only `Autodiff` impl and the public
//! functions ([`api`]).

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use crate::error::Result;

pub mod api;
pub mod composite;
pub mod ndarray;

/// The carriers (`IncreInputs<FloatTensor<B>>` here, over `aclTensor` handles in the aclnn
/// builder, which makes the op's tensor lists from `IncreKv`), the spec and its validation.
pub use burn_ascend_contract::incre::*;

/// Incremental attention as a Burn backend extension (the default body is the composite).
pub trait IncreBackend: Backend {
    /// `aclnnIncreFlashAttentionV4`: `attentionOut` with the query's shape.
    fn incre_fwd(
        inputs: IncreInputs<FloatTensor<Self>>,
        spec: &IncreSpec,
    ) -> Result<FloatTensor<Self>> {
        composite::incre_fwd::<Self>(inputs, spec)
    }
}

impl<B: IncreBackend, C: CheckpointStrategy> IncreBackend for Autodiff<B, C> {
    /// Forward-only (a constant output): an inference op.
    fn incre_fwd(
        inputs: IncreInputs<FloatTensor<Self>>,
        spec: &IncreSpec,
    ) -> Result<FloatTensor<Self>> {
        let i = <Self as AutodiffBackend>::inner;
        let out = B::incre_fwd(inputs.map(i), spec)?;
        Ok(<Self as AutodiffBackend>::from_inner(out))
    }
}

/// Incremental attention's tensors. In the Burn API int8 KV travels as float tensors holding
/// the int8 values, so `kv_int8` is "antiquantScale is given".
pub fn shapes<B: Backend>(i: &IncreInputs<FloatTensor<B>>) -> IncreShapes {
    i.shapes(
        |t: &FloatTensor<B>| t.shape().to_vec(),
        i.antiquant_scale.is_some(),
    )
}
