//! The fused ops composed of Burn primitives, for any backend: what they replace, validated
//! like the fused calls. RMSNorm's statistics in f32 (as Burn's `RmsNorm` and transformers
//! compute them), the result in `x`'s dtype.

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{activation, DType, Int, Shape, Tensor, TensorPrimitive};

use super::{
    cross_entropy, validate, CrossEntropyOutputs, FusedBackend, RmsNormDims, RmsNormGrads,
    RmsNormOutputs, RotaryMode,
};
use crate::error::Result;

fn tensor<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// `t` reshaped to `shape` (any rank).
fn shaped<B: Backend, const D: usize>(t: Tensor<B, D>, shape: Vec<usize>) -> FloatTensor<B> {
    B::float_reshape(prim(t), Shape::from(shape))
}

/// RMSNorm's forward, composed.
pub fn rms_norm_fwd<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    epsilon: f64,
) -> Result<RmsNormOutputs<B>> {
    let (shape, d) = validate::rms_norm_fwd(&x, &gamma, epsilon)?;
    let x = tensor::<B, 2>(x).reshape([d.rows, d.cols]);
    let dt = x.dtype();
    let x32 = x.cast(DType::F32);
    let rstd = (x32.clone().square().mean_dim(1) + epsilon).sqrt().recip();
    let g = tensor::<B, 1>(gamma).cast(DType::F32).reshape([1, d.cols]);
    let y = (x32 * rstd.clone() * g).cast(dt);
    Ok(RmsNormOutputs {
        y: shaped(y, shape.clone()),
        rstd: shaped(rstd, RmsNormDims::rstd_shape(&shape)),
    })
}

/// RMSNorm's backward, composed.
pub fn rms_norm_bwd<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    rstd: FloatTensor<B>,
    gamma: FloatTensor<B>,
) -> Result<RmsNormGrads<B>> {
    let (shape, d) = validate::rms_norm_bwd(&dy, &x, &rstd, &gamma)?;
    let (x, gamma) = (tensor::<B, 2>(x), tensor::<B, 1>(gamma));
    let (dt, gdt) = (x.dtype(), gamma.dtype());
    let x = x.reshape([d.rows, d.cols]).cast(DType::F32);
    let dy = tensor::<B, 2>(dy)
        .reshape([d.rows, d.cols])
        .cast(DType::F32);
    let s = tensor::<B, 2>(rstd).reshape([d.rows, 1]).cast(DType::F32);
    let g = gamma.cast(DType::F32).reshape([1, d.cols]);
    let dyg = dy.clone() * g;
    let mean = (dyg.clone() * x.clone()).mean_dim(1);
    let dx = s.clone() * (dyg - x.clone() * s.clone().square() * mean);
    let dgamma = (dy * x * s).sum_dim(0).reshape([d.cols]);
    Ok(RmsNormGrads {
        dx: shaped(dx.cast(dt), shape),
        dgamma: prim(dgamma.cast(gdt)),
    })
}

/// SwiGLU's forward, composed.
pub fn swiglu_fwd<B: Backend>(x: FloatTensor<B>, dim: i64) -> Result<FloatTensor<B>> {
    let (shape, d) = validate::swiglu_fwd(&x, dim)?;
    let x = tensor::<B, 3>(x).reshape([d.outer, 2 * d.half, d.inner]);
    let a = x.clone().narrow(1, 0, d.half);
    let b = x.narrow(1, d.half, d.half);
    Ok(shaped(activation::silu(a) * b, d.out_shape(&shape)))
}

/// SwiGLU's backward, composed.
pub fn swiglu_bwd<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    dim: i64,
) -> Result<FloatTensor<B>> {
    let (shape, d) = validate::swiglu_bwd(&dy, &x, dim)?;
    let x = tensor::<B, 3>(x).reshape([d.outer, 2 * d.half, d.inner]);
    let dy = tensor::<B, 3>(dy).reshape([d.outer, d.half, d.inner]);
    let a = x.clone().narrow(1, 0, d.half);
    let b = x.narrow(1, d.half, d.half);
    let s = activation::sigmoid(a.clone());
    let da = dy.clone() * b * (s.clone() + s.clone() * (s.clone().neg() + 1.0) * a.clone());
    let db = dy * a * s;
    Ok(shaped(Tensor::cat(vec![da, db], 1), shape))
}

/// SwiGLU of the halves held apart: their concatenation along the last dimension through the
/// backend's own SwiGLU (on a device, `aclnnSwiGlu`).
pub fn swiglu_pair_fwd<B: FusedBackend>(
    gate: FloatTensor<B>,
    up: FloatTensor<B>,
) -> Result<FloatTensor<B>> {
    let shape = validate::swiglu_pair_fwd(&gate, &up)?;
    let last = shape.len() - 1;
    B::swiglu_fwd(B::float_cat(vec![gate, up], last), -1)
}

/// Its backward: the backend's SwiGLU backward on the concatenation, split in the halves.
pub fn swiglu_pair_bwd<B: FusedBackend>(
    dy: FloatTensor<B>,
    gate: FloatTensor<B>,
    up: FloatTensor<B>,
) -> Result<(FloatTensor<B>, FloatTensor<B>)> {
    let shape = validate::swiglu_pair_bwd(&dy, &gate, &up)?;
    let last = shape.len() - 1;
    let dx = B::swiglu_bwd(dy, B::float_cat(vec![gate, up], last), -1)?;
    let n = shape[last];
    let dx = tensor::<B, 2>(dx).reshape([shape[..last].iter().product::<usize>(), 2 * n]);
    let half = |start: usize| shaped(dx.clone().narrow(1, start, n), shape.clone());
    Ok((half(0), half(n)))
}

/// The targets on the host, checked against `[0, c)` and `ignoreIndex` (a synchronisation on
/// an asynchronous backend; the fused backends check on their side).
fn host_targets<B: Backend>(
    target: &IntTensor<B>,
    c: usize,
    ignore_index: i64,
) -> Result<Vec<i64>> {
    let t: Tensor<B, 1, Int> = Tensor::from_primitive(target.clone());
    let v = t
        .into_data()
        .convert::<i64>()
        .into_vec::<i64>()
        .map_err(|e| crate::error::AttnError::invalid("target", format!("{e:?}")))?;
    cross_entropy::validate_targets(&v, c, ignore_index)?;
    Ok(v)
}

/// `(one-hot of the targets, the rows' 0/1 mask, the unmasked count)`, `[n, c]`, `[n, 1]`.
fn onehot_mask<B: Backend>(
    target: IntTensor<B>,
    n: usize,
    c: usize,
    ignore_index: i64,
    dt: DType,
) -> Result<(Tensor<B, 2>, Tensor<B, 2>, usize)> {
    let host = host_targets::<B>(&target, c, ignore_index)?;
    let count = host.iter().filter(|&&t| t != ignore_index).count();
    let t: Tensor<B, 2, Int> = Tensor::<B, 1, Int>::from_primitive(target).reshape([n, 1]);
    let device = t.device();
    let classes = Tensor::<B, 1, Int>::arange(0..c as i64, &device)
        .reshape([1, c])
        .expand([n, c]);
    let onehot = classes.equal(t.clone().expand([n, c])).float().cast(dt);
    let mask = t.not_equal_elem(ignore_index).float().cast(dt);
    Ok((onehot, mask, count))
}

/// Cross-entropy's forward, composed.
pub fn cross_entropy_fwd<B: Backend>(
    input: FloatTensor<B>,
    target: IntTensor<B>,
    ignore_index: i64,
) -> Result<CrossEntropyOutputs<B>> {
    let (_, d) = validate::cross_entropy_fwd(&input, &target, ignore_index)?;
    let x = tensor::<B, 2>(input);
    let dt = x.dtype();
    let (onehot, mask, count) = onehot_mask::<B>(target, d.n, d.c, ignore_index, dt)?;
    let log_prob = activation::log_softmax(x, 1);
    let picked = (log_prob.clone() * onehot).sum_dim(1) * mask;
    let loss = picked.sum().neg() / count as f64;
    Ok(CrossEntropyOutputs {
        loss: prim(loss),
        log_prob: prim(log_prob),
    })
}

/// Cross-entropy's backward, composed.
pub fn cross_entropy_bwd<B: Backend>(
    grad_loss: FloatTensor<B>,
    log_prob: FloatTensor<B>,
    target: IntTensor<B>,
    ignore_index: i64,
) -> Result<FloatTensor<B>> {
    let (_, d) = validate::cross_entropy_bwd(&grad_loss, &log_prob, &target, ignore_index)?;
    let lp = tensor::<B, 2>(log_prob);
    let dt = lp.dtype();
    let (onehot, mask, count) = onehot_mask::<B>(target, d.n, d.c, ignore_index, dt)?;
    let g = tensor::<B, 1>(grad_loss).reshape([1, 1]).cast(dt) / count as f64;
    Ok(prim((lp.exp() - onehot) * mask * g))
}

/// `rotate(x)`: half `cat(-x2, x1)`, interleave `stack(-x_odd, x_even)` (its transpose is
/// `-rotate`, the rotation being skew).
fn rotate<B: Backend>(x: Tensor<B, 4>, mode: RotaryMode) -> Tensor<B, 4> {
    let [a, b, c, d] = x.dims();
    match mode {
        RotaryMode::Half => {
            let x1 = x.clone().narrow(3, 0, d / 2);
            let x2 = x.narrow(3, d / 2, d / 2);
            Tensor::cat(vec![x2.neg(), x1], 3)
        }
        RotaryMode::Interleave => {
            let p = x.reshape([a, b, c, d / 2, 2]);
            let x1 = p.clone().narrow(4, 0, 1);
            let x2 = p.narrow(4, 1, 1);
            Tensor::cat(vec![x2.neg(), x1], 4).reshape([a, b, c, d])
        }
    }
}

/// `cos` / `sin` in `x`'s dtype, broadcast to `x`'s shape.
fn table<B: Backend>(t: FloatTensor<B>, like: &Tensor<B, 4>) -> Tensor<B, 4> {
    tensor::<B, 4>(t).cast(like.dtype()).expand(like.dims())
}

/// Rotary position embedding's forward, composed: `x·cos + rotate(x)·sin`.
pub fn rotary_fwd<B: Backend>(
    x: FloatTensor<B>,
    cos: FloatTensor<B>,
    sin: FloatTensor<B>,
    mode: RotaryMode,
) -> Result<FloatTensor<B>> {
    validate::rotary_fwd(&x, &cos, &sin, mode)?;
    let x = tensor::<B, 4>(x);
    let (cos, sin) = (table::<B>(cos, &x), table::<B>(sin, &x));
    Ok(prim(x.clone() * cos + rotate(x, mode) * sin))
}

/// Rotary position embedding's backward, composed: `dx = dy·cos − rotate(dy·sin)`.
pub fn rotary_bwd<B: Backend>(
    dy: FloatTensor<B>,
    cos: FloatTensor<B>,
    sin: FloatTensor<B>,
    mode: RotaryMode,
) -> Result<FloatTensor<B>> {
    validate::rotary_bwd(&dy, &cos, &sin, mode)?;
    let dy = tensor::<B, 4>(dy);
    let (cos, sin) = (table::<B>(cos, &dy), table::<B>(sin, &dy));
    Ok(prim(dy.clone() * cos - rotate(dy * sin, mode)))
}
