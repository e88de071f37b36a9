//! `NdArray` runs fused inference attention on the CPU kernels ([`cpu_fia_fwd`]) instead of
//! the composite; other backends' host fallbacks call the same function.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

use burn_ascend_contract::fia::FiaHostValues;
use burn_ascend_kernels::cpu;

use super::{FiaBackend, FiaInputs, FiaOutputs, FiaSpec};
use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;
use crate::host::{from_vec, to_vec};

ndarray_on_host! {
    FiaBackend {
        fn fia_fwd(inputs: FiaInputs<FloatTensor<Self>>, spec: &FiaSpec)
            -> Result<FiaOutputs<FloatTensor<Self>>> => cpu_fia_fwd;
    }
}

/// FIA on the host: decode on the flash-decoding kernel, prefill on the tiled varlen forward,
/// the f64 reference for the fields neither models ([`cpu::fia`]).
pub fn cpu_fia_fwd<B: Backend>(
    inputs: FiaInputs<FloatTensor<B>>,
    spec: &FiaSpec,
) -> Result<FiaOutputs<FloatTensor<B>>> {
    let dims = spec.validate(&crate::fia::shapes::<B>(&inputs))?;
    let device = B::float_device(&inputs.query);
    // Every tensor's host values (the mask's 0/1 floats as bytes, non-zero = masked).
    let x = inputs.map(to_vec::<B>);
    let (k, v) = x.kv.as_ref().into_pair();
    let mask: Option<Vec<u8>> = x
        .atten_mask
        .as_ref()
        .map(|m| m.iter().map(|&x| u8::from(x != 0.0)).collect());
    let host = FiaHostValues {
        atten_mask: mask.as_deref(),
        pse_shift: x.pse_shift.as_deref(),
        antiquant_scale: x.antiquant_scale.as_deref(),
        antiquant_offset: x.antiquant_offset.as_deref(),
        key_antiquant_scale: x.key_antiquant_scale.as_deref(),
        key_antiquant_offset: x.key_antiquant_offset.as_deref(),
        value_antiquant_scale: x.value_antiquant_scale.as_deref(),
        value_antiquant_offset: x.value_antiquant_offset.as_deref(),
        learnable_sink: x.learnable_sink.as_deref(),
    };
    let out = cpu::fia::fused_infer_attention(&spec.args(&dims, &x.query, k, v, host));
    Ok(FiaOutputs {
        attention_out: from_vec::<B>(out.attention_out, &dims.out_shape(), &device),
        softmax_lse: spec
            .softmax_lse_flag
            .then(|| from_vec::<B>(out.softmax_lse, &dims.lse_shape(), &device)),
    })
}
