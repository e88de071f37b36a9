//! `NdArray` runs the cache scatter on the CPU reference ([`cpu_scatter_kv`]) instead of the
//! composite; other backends' host fallbacks call the same function.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

use burn_ascend_contract::DataType;

use super::{composite, scatter_host, ScatterBackend, ScatterInputs, ScatterOutputs, ScatterSpec};
use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;
use crate::host::{from_vec, take_vec, to_vec};

ndarray_on_host! {
    ScatterBackend {
        fn scatter_kv(inputs: ScatterInputs<FloatTensor<Self>>, spec: &ScatterSpec)
            -> Result<ScatterOutputs<FloatTensor<Self>>> => cpu_scatter_kv;
    }
}

/// The cache scatter on host memory through the CPU reference (f32 caches; other dtypes take
/// the composite so that PA_NZ's `32 / sizeof(dtype)` stays the caches').
pub fn cpu_scatter_kv<B: Backend>(
    inputs: ScatterInputs<FloatTensor<B>>,
    spec: &ScatterSpec,
) -> Result<ScatterOutputs<FloatTensor<B>>> {
    let call = crate::scatter::shapes(&inputs);
    let dims = spec.validate(&call)?;
    if call.dtypes.iter().flatten().any(|&d| d != DataType::Float) {
        return composite::scatter_kv::<B>(inputs, spec);
    }
    let device = B::float_device(&inputs.key);
    let kc_shape = call.key_cache.clone();
    let key = to_vec::<B>(inputs.key);
    let value = inputs.value.map(to_vec::<B>);
    // The caches' own buffers when nothing else holds them (the paged cache hands them over):
    // a decode step then writes its token's slots where they lie instead of copying the cache.
    let mut kc = take_vec::<B>(inputs.key_cache);
    let vc_shape = call.value_cache.clone();
    let mut vc = inputs.value_cache.map(take_vec::<B>);
    scatter_host(
        spec,
        &dims,
        &key,
        value.as_deref(),
        &mut kc,
        vc.as_deref_mut(),
    )?;
    Ok(ScatterOutputs {
        key_cache: from_vec::<B>(kc, &kc_shape, &device),
        value_cache: vc.map(|v| from_vec::<B>(v, &vc_shape.expect("present"), &device)),
    })
}
