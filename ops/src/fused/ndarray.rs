//! `NdArray` runs the one-pass CPU kernels on the tensors' host memory. Dtypes other than f32
//! are computed in f32 and written back in their own dtype.

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, TensorMetadata};

use burn_ascend_kernels::cpu::fused as cpu;

use super::{
    cross_entropy, validate, CrossEntropyOutputs, FusedBackend, RmsNormDims, RmsNormGrads,
    RmsNormOutputs, RotaryMode,
};
use crate::common::ndarray::ndarray_on_host;
use crate::error::{AttnError, Result};
use crate::host::{from_vec, host_f32, take_vec, to_vec};

ndarray_on_host! {
    FusedBackend {
        fn rms_norm_fwd(x: FloatTensor<Self>, gamma: FloatTensor<Self>, epsilon: f64)
            -> Result<RmsNormOutputs<Self>> => cpu_rms_norm_fwd;
        fn rms_norm_bwd(
            dy: FloatTensor<Self>,
            x: FloatTensor<Self>,
            rstd: FloatTensor<Self>,
            gamma: FloatTensor<Self>,
        ) -> Result<RmsNormGrads<Self>> => cpu_rms_norm_bwd;
        fn rotary_embedding_fwd(
            x: FloatTensor<Self>, cos: FloatTensor<Self>, sin: FloatTensor<Self>, mode: RotaryMode,
        ) -> Result<FloatTensor<Self>> => cpu_rotary_fwd;
        fn rotary_embedding_bwd(
            dy: FloatTensor<Self>, cos: FloatTensor<Self>, sin: FloatTensor<Self>, mode: RotaryMode,
        ) -> Result<FloatTensor<Self>> => cpu_rotary_bwd;
        fn swiglu_fwd(x: FloatTensor<Self>, dim: i64)
            -> Result<FloatTensor<Self>> => cpu_swiglu_fwd;
        fn swiglu_bwd(dy: FloatTensor<Self>, x: FloatTensor<Self>, dim: i64)
            -> Result<FloatTensor<Self>> => cpu_swiglu_bwd;
        fn swiglu_pair_fwd(gate: FloatTensor<Self>, up: FloatTensor<Self>)
            -> Result<FloatTensor<Self>> => cpu_swiglu_pair_fwd;
        fn swiglu_pair_bwd(dy: FloatTensor<Self>, gate: FloatTensor<Self>, up: FloatTensor<Self>)
            -> Result<(FloatTensor<Self>, FloatTensor<Self>)> => cpu_swiglu_pair_bwd;
        fn cross_entropy_fwd(
            input: FloatTensor<Self>,
            target: IntTensor<Self>,
            ignore_index: i64,
        ) -> Result<CrossEntropyOutputs<Self>> => cpu_cross_entropy_fwd;
        fn cross_entropy_bwd(
            grad_loss: FloatTensor<Self>,
            log_prob: FloatTensor<Self>,
            target: IntTensor<Self>,
            ignore_index: i64,
        ) -> Result<FloatTensor<Self>> => cpu_cross_entropy_bwd;
    }
}

/// `values` as a tensor of `shape` in `dtype` on `device`.
fn back<B: Backend>(
    values: Vec<f32>,
    shape: &[usize],
    dtype: DType,
    device: &B::Device,
) -> FloatTensor<B> {
    let t = from_vec::<B>(values, shape, device);
    if t.dtype() == dtype {
        t
    } else {
        B::float_cast(t, dtype.into())
    }
}

/// The int tensor's values on the host.
pub(crate) fn host_ints<B: Backend>(t: IntTensor<B>) -> Result<Vec<i64>> {
    let data = burn::tensor::try_read_sync(B::int_into_data(t))
        .ok_or_else(|| {
            AttnError::Unsupported("reading targets needs a synchronous backend".into())
        })?
        .map_err(|e| AttnError::invalid("target", format!("could not be read: {e:?}")))?;
    data.convert::<i64>()
        .into_vec::<i64>()
        .map_err(|e| AttnError::invalid("target", format!("{e:?}")))
}

/// RMSNorm's forward through the CPU kernel, for any backend.
pub fn cpu_rms_norm_fwd<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    epsilon: f64,
) -> Result<RmsNormOutputs<B>> {
    let (shape, d) = validate::rms_norm_fwd(&x, &gamma, epsilon)?;
    let (device, dt) = (B::float_device(&x), x.dtype());
    let (y, rstd) = cpu::rms_norm_fwd(&host_f32::<B>(&x), &host_f32::<B>(&gamma), d.cols, epsilon);
    Ok(RmsNormOutputs {
        y: back::<B>(y, &shape, dt, &device),
        rstd: back::<B>(rstd, &RmsNormDims::rstd_shape(&shape), DType::F32, &device),
    })
}

/// RMSNorm's backward through the CPU kernel, for any backend.
pub fn cpu_rms_norm_bwd<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    rstd: FloatTensor<B>,
    gamma: FloatTensor<B>,
) -> Result<RmsNormGrads<B>> {
    let (shape, d) = validate::rms_norm_bwd(&dy, &x, &rstd, &gamma)?;
    let gshape = gamma.shape().to_vec();
    let (device, dt, gdt) = (B::float_device(&x), x.dtype(), gamma.dtype());
    let (dx, dgamma) = cpu::rms_norm_bwd(
        &host_f32::<B>(&dy),
        &host_f32::<B>(&x),
        &host_f32::<B>(&rstd),
        &host_f32::<B>(&gamma),
        d.cols,
    );
    Ok(RmsNormGrads {
        dx: back::<B>(dx, &shape, dt, &device),
        dgamma: back::<B>(dgamma, &gshape, gdt, &device),
    })
}

/// `cos` / `sin` as f32 values after rounding to `dt` (the tables take `x`'s dtype first, as on
/// the device); read in place when already in `dt`.
fn table<B: Backend>(t: &FloatTensor<B>, dt: DType) -> std::borrow::Cow<'_, [f32]> {
    if t.dtype() == dt {
        host_f32::<B>(t)
    } else {
        to_vec::<B>(B::float_cast(t.clone(), dt.into())).into()
    }
}

/// Rotary position embedding's forward through the CPU kernel, for any backend.
pub fn cpu_rotary_fwd<B: Backend>(
    x: FloatTensor<B>,
    cos: FloatTensor<B>,
    sin: FloatTensor<B>,
    mode: RotaryMode,
) -> Result<FloatTensor<B>> {
    let (shape, d) = validate::rotary_fwd(&x, &cos, &sin, mode)?;
    let (device, dt) = (B::float_device(&x), x.dtype());
    let (cos, sin) = (table::<B>(&cos, dt), table::<B>(&sin, dt));
    let y = cpu::rotary_fwd(&host_f32::<B>(&x), &cos, &sin, &d, mode);
    Ok(back::<B>(y, &shape, dt, &device))
}

/// Rotary position embedding's backward (`dx`) through the CPU kernel, for any backend.
pub fn cpu_rotary_bwd<B: Backend>(
    dy: FloatTensor<B>,
    cos: FloatTensor<B>,
    sin: FloatTensor<B>,
    mode: RotaryMode,
) -> Result<FloatTensor<B>> {
    let (shape, d) = validate::rotary_bwd(&dy, &cos, &sin, mode)?;
    let (device, dt) = (B::float_device(&dy), dy.dtype());
    let (cos, sin) = (table::<B>(&cos, dt), table::<B>(&sin, dt));
    let dx = cpu::rotary_bwd(&host_f32::<B>(&dy), &cos, &sin, &d, mode);
    Ok(back::<B>(dx, &shape, dt, &device))
}

/// SwiGLU's forward through the CPU kernel, for any backend.
pub fn cpu_swiglu_fwd<B: Backend>(x: FloatTensor<B>, dim: i64) -> Result<FloatTensor<B>> {
    let (shape, d) = validate::swiglu_fwd(&x, dim)?;
    let (device, dt) = (B::float_device(&x), x.dtype());
    let y = cpu::swiglu_fwd(&host_f32::<B>(&x), d.outer, d.half, d.inner);
    Ok(back::<B>(y, &d.out_shape(&shape), dt, &device))
}

/// SwiGLU's backward through the CPU kernel, for any backend.
pub fn cpu_swiglu_bwd<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    dim: i64,
) -> Result<FloatTensor<B>> {
    let (shape, d) = validate::swiglu_bwd(&dy, &x, dim)?;
    let (device, dt) = (B::float_device(&x), x.dtype());
    let dx = cpu::swiglu_bwd(
        &host_f32::<B>(&dy),
        &host_f32::<B>(&x),
        d.outer,
        d.half,
        d.inner,
    );
    Ok(back::<B>(dx, &shape, dt, &device))
}

/// SwiGLU of the halves held apart through the CPU kernel, for any backend: f32 inputs read
/// where they lie.
pub fn cpu_swiglu_pair_fwd<B: Backend>(
    gate: FloatTensor<B>,
    up: FloatTensor<B>,
) -> Result<FloatTensor<B>> {
    let shape = validate::swiglu_pair_fwd(&gate, &up)?;
    let (device, dt) = (B::float_device(&gate), gate.dtype());
    let y = cpu::swiglu_pair_fwd(&host_f32::<B>(&gate), &host_f32::<B>(&up));
    Ok(back::<B>(y, &shape, dt, &device))
}

/// Its backward through the CPU kernel, for any backend.
pub fn cpu_swiglu_pair_bwd<B: Backend>(
    dy: FloatTensor<B>,
    gate: FloatTensor<B>,
    up: FloatTensor<B>,
) -> Result<(FloatTensor<B>, FloatTensor<B>)> {
    let shape = validate::swiglu_pair_bwd(&dy, &gate, &up)?;
    let (device, dt) = (B::float_device(&gate), gate.dtype());
    let (da, db) = cpu::swiglu_pair_bwd(
        &host_f32::<B>(&dy),
        &host_f32::<B>(&gate),
        &host_f32::<B>(&up),
    );
    Ok((
        back::<B>(da, &shape, dt, &device),
        back::<B>(db, &shape, dt, &device),
    ))
}

/// Cross-entropy's forward through the CPU kernel, for any backend.
pub fn cpu_cross_entropy_fwd<B: Backend>(
    input: FloatTensor<B>,
    target: IntTensor<B>,
    ignore_index: i64,
) -> Result<CrossEntropyOutputs<B>> {
    let (shape, d) = validate::cross_entropy_fwd(&input, &target, ignore_index)?;
    let t = host_ints::<B>(target)?;
    cross_entropy::validate_targets(&t, d.c, ignore_index)?;
    let (device, dt) = (B::float_device(&input), input.dtype());
    // The logits' own buffer becomes logProb when nothing else holds them (a head's output).
    let mut lp = take_vec::<B>(input);
    let loss = cpu::cross_entropy_fwd_in_place(&mut lp, &t, d.c, ignore_index);
    Ok(CrossEntropyOutputs {
        loss: back::<B>(vec![loss], &[1], dt, &device),
        log_prob: back::<B>(lp, &shape, dt, &device),
    })
}

/// Cross-entropy's backward through the CPU kernel, for any backend.
pub fn cpu_cross_entropy_bwd<B: Backend>(
    grad_loss: FloatTensor<B>,
    log_prob: FloatTensor<B>,
    target: IntTensor<B>,
    ignore_index: i64,
) -> Result<FloatTensor<B>> {
    let (shape, d) = validate::cross_entropy_bwd(&grad_loss, &log_prob, &target, ignore_index)?;
    let t = host_ints::<B>(target)?;
    cross_entropy::validate_targets(&t, d.c, ignore_index)?;
    let (device, dt) = (B::float_device(&log_prob), log_prob.dtype());
    let g = to_vec::<B>(grad_loss)[0];
    // logProb's buffer becomes dx when the forward's node held the only reference.
    let mut dx = take_vec::<B>(log_prob);
    cpu::cross_entropy_bwd_in_place(g, &mut dx, &t, d.c, ignore_index);
    Ok(back::<B>(dx, &shape, dt, &device))
}
