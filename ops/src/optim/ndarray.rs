//! `NdArray` runs AdamW as the one-pass CPU kernel, on all cores, on the tensors' own buffers
//! when nothing else holds them (the parameter and its moments between steps: updated in
//! place, no copy), else on host copies (in f32, written back in the parameter's dtype): one
//! read and one write of each instead of the composite's dozen temporaries.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use burn_ascend_kernels::cpu::optim as cpu;

use super::{validate_adamw, AdamWHyper, AdamWTensors, OptimBackend};
use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;
use crate::host::{from_vec, host_f32, take_vec};

ndarray_on_host! {
    OptimBackend {
        fn adamw_step(
            state: AdamWTensors<Self>, grad: FloatTensor<Self>, step: u64, hyper: &AdamWHyper,
        ) -> Result<AdamWTensors<Self>> => cpu_adamw_step;
        fn squares_sum(tensors: Vec<FloatTensor<Self>>) -> Option<FloatTensor<Self>>
            => cpu_squares_sum;
        fn scale_by(tensor: FloatTensor<Self>, factor: FloatTensor<Self>) -> FloatTensor<Self>
            => cpu_scale_by;
    }
}

/// The sum of squares through the CPU kernel, for any backend: f32 tensors read where they
/// lie, each summed in f64 in fixed chunks (the same sum for any thread count), the total in
/// the tensors' order.
pub fn cpu_squares_sum<B: Backend>(tensors: Vec<FloatTensor<B>>) -> Option<FloatTensor<B>> {
    let device = B::float_device(tensors.first()?);
    let total: f64 = tensors
        .iter()
        .map(|t| cpu::squares_sum(&host_f32::<B>(t)))
        .sum();
    Some(from_vec::<B>(vec![total as f32], &[1], &device))
}

/// `tensor` times the `[1]` `factor` through the CPU kernel, for any backend: in place when the
/// tensor is an f32 array owned alone (a clip's gradient), else on a host copy; the result in
/// the tensor's dtype.
pub fn cpu_scale_by<B: Backend>(tensor: FloatTensor<B>, factor: FloatTensor<B>) -> FloatTensor<B> {
    let s = host_f32::<B>(&factor)[0];
    let (shape, dtype, device) = (
        tensor.shape().to_vec(),
        tensor.dtype(),
        B::float_device(&tensor),
    );
    let mut v = take_vec::<B>(tensor);
    cpu::scale(&mut v, s);
    B::float_cast(from_vec::<B>(v, &shape, &device), dtype.into())
}

/// The CPU kernel on any backend's tensors, read to the host and written back (NdArray's path
/// and a backend's host fallback).
pub fn cpu_adamw_step<B: Backend>(
    state: AdamWTensors<B>,
    grad: FloatTensor<B>,
    step: u64,
    hyper: &AdamWHyper,
) -> Result<AdamWTensors<B>> {
    let shape = state.var.shape().to_vec();
    validate_adamw(
        &shape,
        &state.m.shape().to_vec(),
        &state.v.shape().to_vec(),
        &grad.shape().to_vec(),
        step,
        hyper,
    )?;
    let dtype = state.var.dtype();
    let device = B::float_device(&state.var);
    let (mut var, mut m, mut v) = (
        take_vec::<B>(state.var),
        take_vec::<B>(state.m),
        take_vec::<B>(state.v),
    );
    // The gradient is only read: in place where it lies (no copy of every gradient per step).
    cpu::adamw(&mut var, &mut m, &mut v, &host_f32::<B>(&grad), step, hyper);
    let back = |x: Vec<f32>| B::float_cast(from_vec::<B>(x, &shape, &device), dtype.into());
    Ok(AdamWTensors {
        var: back(var),
        m: back(m),
        v: back(v),
    })
}
