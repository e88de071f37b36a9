//! `NdArray` runs incremental attention on the fast CPU decode kernel ([`cpu_incre_fwd`])
//! instead of the composite; other backends' host fallbacks call the same function.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use burn_ascend_contract::incre::{IncreHostValues, KvInput};
use burn_ascend_kernels::cpu;

use super::{IncreBackend, IncreInputs, IncreKv, IncreSpec, KvDims};
use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;
use crate::host::{from_vec, host_f32, to_vec};

ndarray_on_host! {
    IncreBackend {
        fn incre_fwd(inputs: IncreInputs<FloatTensor<Self>>, spec: &IncreSpec)
            -> Result<FloatTensor<Self>> => cpu_incre_fwd;
    }
}

/// Incremental attention on host memory through the fast CPU decode kernel
/// ([`cpu::incre_flash_attention`]), for any backend.
pub fn cpu_incre_fwd<B: Backend>(
    inputs: IncreInputs<FloatTensor<B>>,
    spec: &IncreSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&crate::incre::shapes::<B>(&inputs))?;
    if spec.post_quant.is_some() {
        return Err(crate::error::AttnError::Unsupported(
            "int8 attentionOut (quantScale2) on the Burn API: use the host path (burn-ascend run incre)"
                .into(),
        ));
    }
    let device = B::float_device(&inputs.query);
    let q_shape = inputs.query.shape().to_vec();
    let q = to_vec::<B>(inputs.query);
    // The optional inputs' host values (the mask's 0/1 floats as bytes, non-zero = masked).
    let mask: Option<Vec<u8>> = inputs
        .atten_mask
        .map(|m| to_vec::<B>(m).iter().map(|&x| u8::from(x != 0.0)).collect());
    let pse = inputs.pse_shift.map(to_vec::<B>);
    let aq_scale = inputs.antiquant_scale.map(to_vec::<B>);
    let aq_offset = inputs.antiquant_offset.map(to_vec::<B>);
    let host = IncreHostValues {
        atten_mask: mask.as_deref(),
        pse_shift: pse.as_deref(),
        antiquant_scale: aq_scale.as_deref(),
        antiquant_offset: aq_offset.as_deref(),
    };
    let out = match inputs.kv {
        IncreKv::Contiguous { key, value } => {
            let kv_seq = match &dims.kv {
                KvDims::Contiguous { kv_seq } => *kv_seq,
                _ => unreachable!("validated"),
            };
            let (k, v) = (to_vec::<B>(key), to_vec::<B>(value));
            let kv = KvInput::Contiguous {
                key: &k,
                value: &v,
                kv_seq,
            };
            cpu::incre_flash_attention(&spec.args(&dims, &q, kv, host))
        }
        IncreKv::List { key, value } => {
            let k: Vec<Vec<f32>> = key.into_iter().map(to_vec::<B>).collect();
            let v: Vec<Vec<f32>> = value.into_iter().map(to_vec::<B>).collect();
            let (kr, vr): (Vec<&[f32]>, Vec<&[f32]>) = (
                k.iter().map(Vec::as_slice).collect(),
                v.iter().map(Vec::as_slice).collect(),
            );
            let kv = KvInput::TensorList {
                key: &kr,
                value: &vr,
            };
            cpu::incre_flash_attention(&spec.args(&dims, &q, kv, host))
        }
        IncreKv::Paged {
            key_cache,
            value_cache,
        } => {
            // The caches read where they lie: a decode step reads each once.
            let (k, v) = (host_f32::<B>(&key_cache), host_f32::<B>(&value_cache));
            cpu::incre_flash_attention(&spec.args(&dims, &q, spec.paged(&dims, &k, &v)?, host))
        }
    };
    Ok(from_vec::<B>(out, &q_shape, &device))
}
