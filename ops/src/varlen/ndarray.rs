//! `NdArray` runs the varlen forward and backward on the fast tiled CPU kernels
//! ([`cpu_varlen_fwd`], [`cpu_varlen_bwd`]) instead of the composite; other backends' host
//! fallbacks call the same functions.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use burn_ascend_contract::varlen::{check_alibi_compressed_values, AttenMask, DenseMask, Pse};
use burn_ascend_kernels::cpu;

use super::{
    grad_shapes, VarlenBackend, VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs,
    VarlenSpec,
};
use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;
use crate::host::{from_vec, host_f32, to_vec};

ndarray_on_host! {
    VarlenBackend {
        fn varlen_fwd(inputs: VarlenInputs<FloatTensor<Self>>, spec: &VarlenSpec)
            -> Result<VarlenOutputs<FloatTensor<Self>>> => cpu_varlen_fwd;
        fn varlen_bwd(inputs: VarlenGradInputs<FloatTensor<Self>>, spec: &VarlenSpec)
            -> Result<VarlenGrads<FloatTensor<Self>>> => cpu_varlen_bwd;
    }
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
    let dims = spec.validate_fwd(&crate::varlen::shapes(&inputs))?;
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
        &host_f32::<B>(&inputs.query),
        &host_f32::<B>(&inputs.key),
        &host_f32::<B>(&inputs.value),
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
    let dims = spec.validate_bwd(
        &crate::varlen::shapes(&inputs.inputs),
        &crate::varlen::bwd_shapes(&inputs),
    )?;
    let device = B::float_device(&inputs.dy);
    let fwd = inputs.inputs;
    let sink = fwd.sink.map(to_vec::<B>);
    let pse = host_pse::<B>(fwd.pse, fwd.alibi_slopes)?;
    let mask = fwd.atten_mask.map(mask_bytes::<B>);
    let drop = host_drop_mask::<B>(spec, fwd.drop_mask)?;
    let [dq_shape, dk_shape, dv_shape] = grad_shapes(&dims);
    let n = dims.head_num;
    let mut p = spec.problem(dims, sink.as_deref());
    p.pse = pse.view(n);
    p.drop_mask = drop.as_deref();
    if let Some(mask) = &mask {
        p.atten_mask = dense_mask(mask)?;
    }
    let g = cpu::varlen_bwd(
        &p,
        &host_f32::<B>(&fwd.query),
        &host_f32::<B>(&fwd.key),
        &host_f32::<B>(&fwd.value),
        &host_f32::<B>(&inputs.dy),
        &host_f32::<B>(&inputs.attention_in),
        &host_f32::<B>(&inputs.softmax_max),
        &host_f32::<B>(&inputs.softmax_sum),
    );
    Ok(VarlenGrads {
        dq: from_vec::<B>(g.dq, &dq_shape, &device),
        dk: from_vec::<B>(g.dk, &dk_shape, &device),
        dv: from_vec::<B>(g.dv, &dv_shape, &device),
        dpse: g.dpse.map(|x| {
            let len = x.len();
            from_vec::<B>(x, &[len], &device)
        }),
        dsink: g.dsink.map(|s| from_vec::<B>(s, &[n], &device)),
    })
}
