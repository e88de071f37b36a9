//! KV cache scatter: `aclnnScatterPaKvCache`. The parameters and their validation are the
//! contract's ([`burn_ascend_contract::scatter`]); here are the Burn extension trait
//! [`ScatterBackend`] with the composite default ([`composite`]), its `NdArray` impl on the CPU
//! reference ([`ndarray`]), its forward-only `Autodiff` impl and the public function ([`api`]).

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use crate::error::Result;
use crate::host::acl_dtype;

pub mod api;
pub mod composite;
pub mod ndarray;

/// The carriers (`ScatterInputs<FloatTensor<B>>` here, over `&aclTensor` handles in the aclnn
/// builder), the spec and its validation.
pub use burn_ascend_contract::scatter::*;
pub use composite::{scatter_checked, scatter_host};

/// The cache scatter as a Burn backend extension (the default body is the composite).
pub trait ScatterBackend: Backend {
    /// `aclnnScatterPaKvCache`, functional: returns the updated caches. Validates everything
    /// before writing; on error nothing was written.
    fn scatter_kv(
        inputs: ScatterInputs<FloatTensor<Self>>,
        spec: &ScatterSpec,
    ) -> Result<ScatterOutputs<FloatTensor<Self>>> {
        composite::scatter_kv::<Self>(inputs, spec)
    }
}

impl<B: ScatterBackend, C: CheckpointStrategy> ScatterBackend for Autodiff<B, C> {
    /// Forward-only: the updated caches are constants.
    fn scatter_kv(
        inputs: ScatterInputs<FloatTensor<Self>>,
        spec: &ScatterSpec,
    ) -> Result<ScatterOutputs<FloatTensor<Self>>> {
        let i = <Self as AutodiffBackend>::inner;
        let c = <Self as AutodiffBackend>::from_inner;
        Ok(B::scatter_kv(inputs.map(i), spec)?.map(c))
    }
}

/// The cache scatter's tensors, with their dtypes.
pub fn shapes<T: TensorMetadata>(i: &ScatterInputs<T>) -> ScatterShapes {
    let d = |t: &T| t.shape().to_vec();
    ScatterShapes {
        key: d(&i.key),
        value: i.value.as_ref().map(d),
        key_cache: d(&i.key_cache),
        value_cache: i.value_cache.as_ref().map(d),
        dtypes: [
            acl_dtype(i.key.dtype()),
            i.value.as_ref().and_then(|t| acl_dtype(t.dtype())),
            acl_dtype(i.key_cache.dtype()),
            i.value_cache.as_ref().and_then(|t| acl_dtype(t.dtype())),
        ],
    }
}
