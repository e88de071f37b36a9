//! AdamW composed of Burn primitives, for any backend: what `aclnnApplyAdamWV2` replaces,
//! validated like the aclnn call, computed in the parameter's dtype.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, Tensor, TensorMetadata, TensorPrimitive};

use super::{validate_adamw, AdamWHyper, AdamWTensors};
use crate::error::Result;

fn flat<B: Backend>(p: FloatTensor<B>, n: usize) -> Tensor<B, 1> {
    Tensor::from_primitive(TensorPrimitive::Float(B::float_reshape(
        p,
        Shape::from(vec![n]),
    )))
}

fn shaped<B: Backend>(t: Tensor<B, 1>, shape: &[usize]) -> FloatTensor<B> {
    B::float_reshape(t.into_primitive().tensor(), Shape::from(shape.to_vec()))
}

/// One AdamW step, composed (see [`super::OptimBackend::adamw_step`]).
pub fn adamw_step<B: Backend>(
    state: AdamWTensors<B>,
    grad: FloatTensor<B>,
    step: u64,
    h: &AdamWHyper,
) -> Result<AdamWTensors<B>> {
    let shape = state.var.shape().to_vec();
    let n = validate_adamw(
        &shape,
        &state.m.shape().to_vec(),
        &state.v.shape().to_vec(),
        &grad.shape().to_vec(),
        step,
        h,
    )?;
    let (var, m, v, g) = (
        flat::<B>(state.var, n),
        flat::<B>(state.m, n),
        flat::<B>(state.v, n),
        flat::<B>(grad, n),
    );
    let t = step.min(i32::MAX as u64) as i32;
    let bc1 = 1.0 - (h.beta1 as f64).powi(t);
    let bc2 = 1.0 - (h.beta2 as f64).powi(t);
    let m = m.mul_scalar(h.beta1) + g.clone().mul_scalar(1.0 - h.beta1);
    let v = v.mul_scalar(h.beta2) + g.square().mul_scalar(1.0 - h.beta2);
    let update = m.clone().div_scalar(bc1) / (v.clone().div_scalar(bc2).sqrt().add_scalar(h.eps));
    let var = var.mul_scalar(1.0 - h.lr as f64 * h.weight_decay as f64) - update.mul_scalar(h.lr);
    Ok(AdamWTensors {
        var: shaped(var, &shape),
        m: shaped(m, &shape),
        v: shaped(v, &shape),
    })
}

/// Elements concatenated into one buffer before squaring and summing: few launches (one
/// concatenation, one square, one sum per group) with the extra memory bounded (64 MiB of f32
/// per group).
const SQUARES_GROUP_ELEMS: usize = 16 << 20;

/// The sum of squares of every element of `tensors` (see
/// [`super::OptimBackend::squares_sum`]): flattened, concatenated in groups of about
/// [`SQUARES_GROUP_ELEMS`] elements, each group squared and summed in f32.
pub fn squares_sum<B: Backend>(tensors: Vec<FloatTensor<B>>) -> Option<FloatTensor<B>> {
    let mut sums: Vec<Tensor<B, 1>> = Vec::new();
    let mut group: Vec<Tensor<B, 1>> = Vec::new();
    let mut elems = 0;
    let flush = |group: &mut Vec<Tensor<B, 1>>, sums: &mut Vec<Tensor<B, 1>>| {
        let g = std::mem::take(group);
        let flat = match g.len() {
            0 => return,
            1 => g.into_iter().next().expect("one"),
            _ => Tensor::cat(g, 0),
        };
        let flat = match flat.dtype() {
            burn::tensor::DType::F32 => flat,
            _ => flat.cast(burn::tensor::DType::F32),
        };
        sums.push(flat.square().sum());
    };
    for t in tensors {
        let n = t.shape().num_elements();
        group.push(flat::<B>(t, n));
        elems += n;
        if elems >= SQUARES_GROUP_ELEMS {
            flush(&mut group, &mut sums);
            elems = 0;
        }
    }
    flush(&mut group, &mut sums);
    match sums.len() {
        0 => None,
        1 => sums.pop().map(|t| t.into_primitive().tensor()),
        _ => Some(Tensor::cat(sums, 0).sum().into_primitive().tensor()),
    }
}

/// `tensor` times the `[1]` `factor`, one broadcast multiplication (see
/// [`super::OptimBackend::scale_by`]).
pub fn scale_by<B: Backend>(tensor: FloatTensor<B>, factor: FloatTensor<B>) -> FloatTensor<B> {
    let rank = tensor.shape().num_dims();
    B::float_mul(tensor, B::float_reshape(factor, Shape::from(vec![1; rank])))
}
