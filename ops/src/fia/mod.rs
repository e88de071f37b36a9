//! Fused inference attention: `aclnnFusedInferAttentionScoreV4` (FIA). The parameters and
//! their validation are the contract's ([`burn_ascend_contract::fia`]); here are the Burn
//! extension trait [`FiaBackend`] with the composite default ([`composite`]), its `NdArray`
//! impl on the CPU kernels ([`ndarray`]), its `Autodiff` impl and the public functions
//! ([`api`]). FIA is an inference op: under `Autodiff` it runs forward-only (constant outputs).

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use crate::error::Result;

pub mod api;
pub mod composite;
pub mod ndarray;

/// The carriers (`FiaInputs<FloatTensor<B>>` here, over `aclTensor` handles in the aclnn
/// builder), the spec and its validation.
pub use burn_ascend_contract::fia::*;

/// Fused inference attention as a Burn backend extension (the default body is the composite).
pub trait FiaBackend: Backend {
    /// `aclnnFusedInferAttentionScoreV4`: `attentionOut` and, with `softmaxLseFlag`,
    /// `softmaxLse`. An inference op (forward-only under `Autodiff`).
    fn fia_fwd(
        inputs: FiaInputs<FloatTensor<Self>>,
        spec: &FiaSpec,
    ) -> Result<FiaOutputs<FloatTensor<Self>>> {
        composite::fia_fwd::<Self>(inputs, spec)
    }

    /// Whether FIA takes a `learnableSink` on `device` (`aclnnFusedInferAttentionScoreV4`):
    /// serving falls back to the placeholder-token path
    /// ([`crate::AttendPath::PromptIncre`]) where it does not. Every backend's composite does;
    /// an Ascend device only on a CANN that exports V4.
    fn fia_sink_available(_device: &Self::Device) -> bool {
        true
    }
}

impl<B: FiaBackend, C: CheckpointStrategy> FiaBackend for Autodiff<B, C> {
    fn fia_sink_available(device: &Self::Device) -> bool {
        B::fia_sink_available(device)
    }

    /// Forward-only (constant outputs): FIA has no backward in CANN.
    fn fia_fwd(
        inputs: FiaInputs<FloatTensor<Self>>,
        spec: &FiaSpec,
    ) -> Result<FiaOutputs<FloatTensor<Self>>> {
        let i = <Self as AutodiffBackend>::inner;
        let c = <Self as AutodiffBackend>::from_inner;
        Ok(B::fia_fwd(inputs.map(i), spec)?.map(c))
    }
}

/// Fused inference attention's tensors. int8 KV travels as float tensors holding the int8
/// values, so `kv_int8` is "an antiquant is given".
pub fn shapes<B: Backend>(i: &FiaInputs<FloatTensor<B>>) -> FiaShapes {
    i.shapes(|t: &FloatTensor<B>| t.shape().to_vec(), i.quantised())
}
