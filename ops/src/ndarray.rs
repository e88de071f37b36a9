//! `NdArray` runs the CPU kernels (the fast tiled varlen kernels and the flash-decoding
//! incremental attention; the reference for prompt and scatter) on the tensors' host memory
//! instead of the composite.

use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

use burn_ascend_kernels::cpu;

use burn::tensor::TensorMetadata;
use burn_ascend_contract::fia::FiaHostValues;
use burn_ascend_contract::incre::{IncreHostValues, KvInput};
use burn_ascend_contract::varlen::{check_alibi_compressed_values, AttenMask, DenseMask, Pse};
use burn_ascend_kernels::reference::prompt::prompt_flash_attention;

use crate::backend::{
    AttentionBackend, FiaInputs, FiaOutputs, IncreInputs, IncreKv, PromptInputs, ScatterInputs,
    ScatterOutputs, VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs,
};
use crate::error::Result;
use crate::fia::FiaSpec;
use crate::host::{from_vec, to_vec};
use crate::incre::IncreSpec;
use crate::prompt::PromptSpec;
use crate::scatter::{scatter_host, ScatterSpec};
use crate::varlen::composite::{bwd_shapes, shapes};
use crate::varlen::VarlenSpec;
use burn_ascend_contract::DataType;

impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> AttentionBackend
    for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>>,
    NdArrayTensor: From<SharedArray<I>>,
{
    fn varlen_fwd(
        inputs: VarlenInputs<FloatTensor<Self>>,
        spec: &VarlenSpec,
    ) -> Result<VarlenOutputs<FloatTensor<Self>>> {
        cpu_varlen_fwd::<Self>(inputs, spec)
    }

    fn varlen_bwd(
        inputs: VarlenGradInputs<FloatTensor<Self>>,
        spec: &VarlenSpec,
    ) -> Result<VarlenGrads<FloatTensor<Self>>> {
        cpu_varlen_bwd::<Self>(inputs, spec)
    }

    fn prompt_fwd(
        inputs: PromptInputs<FloatTensor<Self>>,
        spec: &PromptSpec,
    ) -> Result<FloatTensor<Self>> {
        cpu_prompt_fwd::<Self>(inputs, spec)
    }

    fn incre_fwd(
        inputs: IncreInputs<FloatTensor<Self>>,
        spec: &IncreSpec,
    ) -> Result<FloatTensor<Self>> {
        cpu_incre_fwd::<Self>(inputs, spec)
    }

    fn fia_fwd(
        inputs: FiaInputs<FloatTensor<Self>>,
        spec: &FiaSpec,
    ) -> Result<FiaOutputs<FloatTensor<Self>>> {
        cpu_fia_fwd::<Self>(inputs, spec)
    }

    fn scatter_kv(
        inputs: ScatterInputs<FloatTensor<Self>>,
        spec: &ScatterSpec,
    ) -> Result<ScatterOutputs<FloatTensor<Self>>> {
        cpu_scatter_kv::<Self>(inputs, spec)
    }
}

/// Prompt attention on host memory through the CPU reference, for any backend.
pub fn cpu_prompt_fwd<B: Backend>(
    inputs: PromptInputs<FloatTensor<B>>,
    spec: &PromptSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&crate::prompt::composite::shapes(&inputs))?;
    crate::prompt::composite::unsupported_on_burn(spec)?;
    let device = B::float_device(&inputs.query);
    let shape = |t: &FloatTensor<B>| t.shape().to_vec();
    let mask = inputs.atten_mask.map(|m| {
        let s = shape(&m);
        let bytes: Vec<u8> = to_vec::<B>(m).iter().map(|&x| u8::from(x != 0.0)).collect();
        (bytes, s)
    });
    let pse = inputs.pse_shift.map(|p| (shape(&p), to_vec::<B>(p)));
    let (q, k, v) = (
        to_vec::<B>(inputs.query),
        to_vec::<B>(inputs.key),
        to_vec::<B>(inputs.value),
    );
    let args = spec.args(
        &dims,
        &q,
        &k,
        &v,
        mask.as_ref().map(|(d, s)| (&d[..], &s[..])),
        pse.as_ref().map(|(s, d)| (&d[..], &s[..])),
    )?;
    let out = prompt_flash_attention(&args);
    let out = out.into_iter().map(|x| x as f32).collect();
    Ok(from_vec::<B>(out, &dims.out_shape(), &device))
}

/// Incremental attention on host memory through the fast CPU decode kernel
/// ([`cpu::incre_flash_attention`]), for any backend.
pub fn cpu_incre_fwd<B: Backend>(
    inputs: IncreInputs<FloatTensor<B>>,
    spec: &IncreSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&crate::incre::composite::shapes::<B>(&inputs))?;
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
                crate::incre::KvDims::Contiguous { kv_seq } => *kv_seq,
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
            let (k, v) = (to_vec::<B>(key_cache), to_vec::<B>(value_cache));
            cpu::incre_flash_attention(&spec.args(&dims, &q, spec.paged(&dims, &k, &v)?, host))
        }
    };
    Ok(from_vec::<B>(out, &q_shape, &device))
}

/// FIA on the host: decode on the flash-decoding kernel, prefill on the tiled varlen forward,
/// the f64 reference for the fields neither models ([`cpu::fia`]).
pub fn cpu_fia_fwd<B: Backend>(
    inputs: FiaInputs<FloatTensor<B>>,
    spec: &FiaSpec,
) -> Result<FiaOutputs<FloatTensor<B>>> {
    let dims = spec.validate(&crate::fia::composite::shapes::<B>(&inputs))?;
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

/// The cache scatter on host memory through the CPU reference (f32 caches; other dtypes take
/// the composite so that PA_NZ's `32 / sizeof(dtype)` stays the caches').
pub fn cpu_scatter_kv<B: Backend>(
    inputs: ScatterInputs<FloatTensor<B>>,
    spec: &ScatterSpec,
) -> Result<ScatterOutputs<FloatTensor<B>>> {
    let shapes = crate::scatter::composite::shapes(&inputs);
    let dims = spec.validate(&shapes)?;
    if shapes
        .dtypes
        .iter()
        .flatten()
        .any(|&d| d != DataType::Float)
    {
        return crate::scatter::composite::scatter_kv::<B>(inputs, spec);
    }
    let device = B::float_device(&inputs.key);
    let kc_shape = shapes.key_cache.clone();
    let key = to_vec::<B>(inputs.key);
    let value = inputs.value.map(to_vec::<B>);
    let mut kc = to_vec::<B>(inputs.key_cache);
    let vc_shape = shapes.value_cache.clone();
    let mut vc = inputs.value_cache.map(to_vec::<B>);
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

/// An explicit mask tensor on the host: its bytes (non-zero = masked) and its shape.
fn mask_bytes<B: Backend>(m: FloatTensor<B>) -> (Vec<u8>, Vec<usize>) {
    let shape = m.shape().to_vec();
    let bytes = to_vec::<B>(m).iter().map(|&x| u8::from(x != 0.0)).collect();
    (bytes, shape)
}

/// The kernels' view of [`mask_bytes`].
fn dense_mask((bytes, shape): &(Vec<u8>, Vec<usize>)) -> Result<AttenMask<'_>> {
    DenseMask::from_shape(bytes, shape)
        .map(AttenMask::Dense)
        .ok_or_else(|| {
            crate::error::AttnError::invalid(
                "attenMask",
                format!(
                    "shape must be [maxSq, maxSkv] or [B|1, N|1, maxSq, maxSkv], got {shape:?}"
                ),
            )
        })
}

/// A varlen call's `realShift` on the host: the pse tensor's values and shape, or the ALiBi
/// slopes' values.
struct HostPse {
    pse: Option<(Vec<f32>, Vec<usize>)>,
    slopes: Option<Vec<f32>>,
}

impl HostPse {
    fn view(&self, head_num: usize) -> Pse<'_> {
        Pse::of_tensor(
            self.pse.as_ref().map(|(v, s)| (&v[..], &s[..])),
            self.slopes.as_deref(),
            head_num,
        )
    }
}

/// The call's pse or slopes read to the host; an ALiBi-compressed pse's content rule is checked
/// here, where its values are ([`check_alibi_compressed_values`]).
fn host_pse<B: Backend>(
    pse: Option<FloatTensor<B>>,
    slopes: Option<FloatTensor<B>>,
) -> Result<HostPse> {
    let pse = pse.map(|t| {
        let shape = t.shape().to_vec();
        (to_vec::<B>(t), shape)
    });
    if let Some((values, shape)) = pse.as_ref().filter(|(_, s)| s.len() == 4) {
        check_alibi_compressed_values(values, shape)?;
    }
    Ok(HostPse {
        pse,
        slopes: slopes.map(to_vec::<B>),
    })
}

/// A `dropMask` tensor's bytes on the host, when the call drops (`keepProb < 1`; the kernels
/// ignore the mask otherwise): each value must be a byte, 0..=255, checked here where the
/// values are.
fn host_drop_mask<B: Backend>(
    spec: &VarlenSpec,
    mask: Option<FloatTensor<B>>,
) -> Result<Option<Vec<u8>>> {
    let Some(mask) = mask.filter(|_| spec.attrs.keep_prob < 1.0) else {
        return Ok(None);
    };
    to_vec::<B>(mask)
        .into_iter()
        .enumerate()
        .map(|(e, x)| match x {
            _ if (0.0..=255.0).contains(&x) && x.fract() == 0.0 => Ok(x as u8),
            _ => Err(crate::error::AttnError::invalid(
                "dropMask",
                format!("must hold byte values 0..=255 (bit-packed keep bits), got {x} at {e}"),
            )),
        })
        .collect::<Result<Vec<u8>>>()
        .map(Some)
}

/// The varlen forward on host memory through the CPU kernels, for any backend.
pub fn cpu_varlen_fwd<B: Backend>(
    inputs: VarlenInputs<FloatTensor<B>>,
    spec: &VarlenSpec,
) -> Result<VarlenOutputs<FloatTensor<B>>> {
    let dims = spec.validate_fwd(&shapes(&inputs))?;
    let device = B::float_device(&inputs.query);
    let sink = inputs.sink.map(to_vec::<B>);
    // The host kernels read a pse tensor from host memory (NdArray's own, or the fallback's).
    let pse = host_pse::<B>(inputs.pse, inputs.alibi_slopes)?;
    let mask = inputs.atten_mask.map(mask_bytes::<B>);
    let drop = host_drop_mask::<B>(spec, inputs.drop_mask)?;
    let (t, n, dv) = (dims.t_q(), dims.head_num, dims.value_dim);
    let mut p = spec.problem(dims, sink.as_deref());
    p.pse = pse.view(n);
    p.drop_mask = drop.as_deref();
    if let Some(mask) = &mask {
        p.atten_mask = dense_mask(mask)?;
    }
    let out = cpu::varlen_fwd(
        &p,
        &to_vec::<B>(inputs.query),
        &to_vec::<B>(inputs.key),
        &to_vec::<B>(inputs.value),
    );
    Ok(VarlenOutputs {
        attention_out: from_vec::<B>(out.attention_out, &[t, n, dv], &device),
        softmax_max: from_vec::<B>(out.softmax_max, &[t, n, 8], &device),
        softmax_sum: from_vec::<B>(out.softmax_sum, &[t, n, 8], &device),
    })
}

/// The varlen backward on host memory through the CPU kernels, for any backend.
pub fn cpu_varlen_bwd<B: Backend>(
    inputs: VarlenGradInputs<FloatTensor<B>>,
    spec: &VarlenSpec,
) -> Result<VarlenGrads<FloatTensor<B>>> {
    let dims = spec.validate_bwd(&shapes(&inputs.inputs), &bwd_shapes(&inputs))?;
    let device = B::float_device(&inputs.dy);
    let VarlenGradInputs {
        inputs: fwd,
        dy,
        attention_in,
        softmax_max,
        softmax_sum,
    } = inputs;
    let sink = fwd.sink.map(to_vec::<B>);
    let pse = host_pse::<B>(fwd.pse, fwd.alibi_slopes)?;
    let mask = fwd.atten_mask.map(mask_bytes::<B>);
    let drop = host_drop_mask::<B>(spec, fwd.drop_mask)?;
    let (tq, tkv, n, nkv, d, dv) = (
        dims.t_q(),
        dims.t_kv(),
        dims.head_num,
        dims.kv_head_num,
        dims.head_dim,
        dims.value_dim,
    );
    let mut p = spec.problem(dims, sink.as_deref());
    p.pse = pse.view(n);
    p.drop_mask = drop.as_deref();
    if let Some(mask) = &mask {
        p.atten_mask = dense_mask(mask)?;
    }
    let g = cpu::varlen_bwd(
        &p,
        &to_vec::<B>(fwd.query),
        &to_vec::<B>(fwd.key),
        &to_vec::<B>(fwd.value),
        &to_vec::<B>(dy),
        &to_vec::<B>(attention_in),
        &to_vec::<B>(softmax_max),
        &to_vec::<B>(softmax_sum),
    );
    Ok(VarlenGrads {
        dq: from_vec::<B>(g.dq, &[tq, n, d], &device),
        dk: from_vec::<B>(g.dk, &[tkv, nkv, d], &device),
        dv: from_vec::<B>(g.dv, &[tkv, nkv, dv], &device),
        dpse: g.dpse.map(|x| {
            let len = x.len();
            from_vec::<B>(x, &[len], &device)
        }),
        dsink: g.dsink.map(|s| from_vec::<B>(s, &[n], &device)),
    })
}
