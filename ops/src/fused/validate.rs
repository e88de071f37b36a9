//! Each fused call's tensors checked by the contract, written once for the composite, the CPU
//! kernels and a backend's own kernels: every function returns the shape of the call's leading
//! tensor (the one its output follows) with the dims the contract derived. Any tensor kind with
//! metadata works (a backend's float primitive, `Ascend`'s tensors).

use burn::tensor::TensorMetadata;

use super::{
    cross_entropy, rms_norm, rotary, swiglu, CrossEntropyDims, RmsNormDims, RotaryDims, RotaryMode,
    SwiGluDims,
};
use crate::error::Result;

fn dims<T: TensorMetadata>(t: &T) -> Vec<usize> {
    t.shape().to_vec()
}

/// RMSNorm's forward: `x`'s shape.
pub fn rms_norm_fwd<T: TensorMetadata>(
    x: &T,
    gamma: &T,
    epsilon: f64,
) -> Result<(Vec<usize>, RmsNormDims)> {
    let shape = dims(x);
    let d = rms_norm::validate_fwd(&shape, &dims(gamma), epsilon)?;
    Ok((shape, d))
}

/// RMSNorm's backward: `x`'s shape.
pub fn rms_norm_bwd<T: TensorMetadata>(
    dy: &T,
    x: &T,
    rstd: &T,
    gamma: &T,
) -> Result<(Vec<usize>, RmsNormDims)> {
    let shape = dims(x);
    let d = rms_norm::validate_bwd(&dims(dy), &shape, &dims(rstd), &dims(gamma))?;
    Ok((shape, d))
}

/// Rotary position embedding's forward: `x`'s shape.
pub fn rotary_fwd<T: TensorMetadata>(
    x: &T,
    cos: &T,
    sin: &T,
    mode: RotaryMode,
) -> Result<(Vec<usize>, RotaryDims)> {
    let shape = dims(x);
    let d = rotary::validate_fwd(&shape, &dims(cos), &dims(sin), mode)?;
    Ok((shape, d))
}

/// Rotary position embedding's backward: `dy`'s shape.
pub fn rotary_bwd<T: TensorMetadata>(
    dy: &T,
    cos: &T,
    sin: &T,
    mode: RotaryMode,
) -> Result<(Vec<usize>, RotaryDims)> {
    let shape = dims(dy);
    let d = rotary::validate_bwd(&shape, &dims(cos), &dims(sin), mode)?;
    Ok((shape, d))
}

/// SwiGLU's forward: `x`'s shape.
pub fn swiglu_fwd<T: TensorMetadata>(x: &T, dim: i64) -> Result<(Vec<usize>, SwiGluDims)> {
    let shape = dims(x);
    let d = swiglu::validate_fwd(&shape, dim)?;
    Ok((shape, d))
}

/// SwiGLU's backward: `x`'s shape.
pub fn swiglu_bwd<T: TensorMetadata>(dy: &T, x: &T, dim: i64) -> Result<(Vec<usize>, SwiGluDims)> {
    let shape = dims(x);
    let d = swiglu::validate_bwd(&dims(dy), &shape, dim)?;
    Ok((shape, d))
}

/// SwiGLU of the halves held apart: their one shape.
pub fn swiglu_pair_fwd<T: TensorMetadata>(gate: &T, up: &T) -> Result<Vec<usize>> {
    swiglu::validate_pair(&dims(gate), &dims(up))
}

/// Its backward: the same shape.
pub fn swiglu_pair_bwd<T: TensorMetadata>(dy: &T, gate: &T, up: &T) -> Result<Vec<usize>> {
    swiglu::validate_pair_bwd(&dims(dy), &dims(gate), &dims(up))
}

/// Cross-entropy's forward (the targets' values are checked where they are read): `input`'s
/// shape.
pub fn cross_entropy_fwd<T: TensorMetadata, I: TensorMetadata>(
    input: &T,
    target: &I,
    ignore_index: i64,
) -> Result<(Vec<usize>, CrossEntropyDims)> {
    let shape = dims(input);
    let d = cross_entropy::validate_fwd(&shape, &dims(target), ignore_index)?;
    Ok((shape, d))
}

/// Cross-entropy's backward (the targets' values are checked where they are read):
/// `log_prob`'s shape.
pub fn cross_entropy_bwd<T: TensorMetadata, I: TensorMetadata>(
    grad_loss: &T,
    log_prob: &T,
    target: &I,
    ignore_index: i64,
) -> Result<(Vec<usize>, CrossEntropyDims)> {
    let shape = dims(log_prob);
    let d = cross_entropy::validate_bwd(&dims(grad_loss), &shape, &dims(target), ignore_index)?;
    Ok((shape, d))
}
