//! Prompt (prefill) attention: `aclnnPromptFlashAttention` (V1) and
//! `aclnnPromptFlashAttentionV3`. The parameters and their validation are the contract's
//! ([`burn_ascend_contract::prompt`]); here are the Burn extension trait [`PromptBackend`] with
//! the composite default ([`composite`]), its `NdArray` impl on the CPU reference
//! ([`ndarray`]), its forward-only `Autodiff` impl and the public functions ([`api`]).

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use crate::error::Result;

pub mod api;
pub mod composite;
pub mod ndarray;

/// The carrier (`PromptInputs<FloatTensor<B>>` here, over `&aclTensor` handles in the aclnn
/// builder), the spec and its validation.
pub use burn_ascend_contract::prompt::*;

/// Prompt attention as a Burn backend extension (the default body is the composite).
pub trait PromptBackend: Backend {
    /// `aclnnPromptFlashAttentionV3` (V1 is the spec with V3's extras at their defaults):
    /// `attentionOut` in the output layout.
    fn prompt_fwd(
        inputs: PromptInputs<FloatTensor<Self>>,
        spec: &PromptSpec,
    ) -> Result<FloatTensor<Self>> {
        composite::prompt_fwd::<Self>(inputs, spec)
    }
}

impl<B: PromptBackend, C: CheckpointStrategy> PromptBackend for Autodiff<B, C> {
    /// Forward-only: runs on the inner backend and returns a constant (no gradient flows
    /// through prompt attention; it is an inference op).
    fn prompt_fwd(
        inputs: PromptInputs<FloatTensor<Self>>,
        spec: &PromptSpec,
    ) -> Result<FloatTensor<Self>> {
        let i = <Self as AutodiffBackend>::inner;
        let out = B::prompt_fwd(inputs.map(i), spec)?;
        Ok(<Self as AutodiffBackend>::from_inner(out))
    }
}

/// Prompt attention's tensors.
pub fn shapes<T: TensorMetadata>(i: &PromptInputs<T>) -> PromptShapes {
    PromptShapes {
        query: i.query.shape().to_vec(),
        key: i.key.shape().to_vec(),
        value: i.value.shape().to_vec(),
        atten_mask: i.atten_mask.as_ref().map(|t| t.shape().to_vec()),
        pse_shift: i.pse_shift.as_ref().map(|t| t.shape().to_vec()),
    }
}
