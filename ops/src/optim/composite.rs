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
