//! Comparisons, masks, casts, max/min reductions, activations, more unary math, clamp/pow by a
//! scalar and random fills on the device (the elementwise ops the models call most, which
//! otherwise took the host fallback):
//! - comparisons `aclnnEqTensor`/`NeTensor`/`GtTensor`/`GeTensor`/`LtTensor`/`LeTensor` and the
//!   `…Scalar` forms (broadcasting; out BOOL);
//! - `mask_where` → `aclnnSWhere(mask, value, tensor)`; `mask_fill` → `aclnnInplaceCopy` of the
//!   tensor into a fresh output, then `aclnnInplaceMaskedFillScalar` on it (CANN has no
//!   out-of-place masked fill by a scalar, and the input must not be written);
//! - `bool_not`/`and`/`or` → `aclnnLogicalNot`/`And`/`Or`;
//! - casts → `aclnnCast`;
//! - `max_dim`/`min_dim`/`max`/`min` → `aclnnAmax`/`aclnnAmin` (keepdim), `argmax`/`argmin` →
//!   `aclnnArgMax`/`aclnnArgMin`, `max_dim_with_indices` → `aclnnMaxDim`/`aclnnMinDim`;
//! - `gelu` → `aclnnGeluV2` with `approximate = 0` (the exact erf form Burn defines);
//! - `powf_scalar` → `aclnnPowTensorScalar`, `clamp*` → `aclnnClamp`/`ClampMin`/`ClampMax`;
//! - `float_random` → `aclnnInplaceUniform`/`Normal`/`Bernoulli` on a fresh tensor, with the
//!   process-wide `(seed, offset)` state of [`seed`] (the offset advances by the element count
//!   after each fill, so successive fills differ and a seed reproduces a sequence).
//!
//! Operands are passed as their views (no copy). Each function returns `None` where the device
//! path does not apply (a dtype with no aclDataType or outside the op's list, a non-native bool
//! store, rank > 8, shapes that do not broadcast) and the caller runs the counted host fallback.

use burn_ascend_cann::acl::names;
use std::sync::Mutex;

use burn_ascend_cann::acl::aclnn::{self, Compare};
use burn_ascend_cann::acl::{IntArray, Runtime, Scalar};
use burn_backend::{BoolStore, DType, Distribution, Scalar as BurnScalar, Shape};

use super::base;
use super::native::{broadcast, check_devices, launch};
use crate::device::AscendDevice;
use crate::element::{acl_dtype, is_acl_float};
use crate::tensor::{fail, AscendTensor};

const BOOL: DType = DType::Bool(BoolStore::Native);

fn rank_ok(t: &AscendTensor) -> bool {
    t.shape.num_dims() <= 8
}

/// A dtype aclnn's comparison / select / cast kernels take: f32, f16, bf16, f64, i8, i16,
/// i32, i64, u8 and native bool. Wider unsigned ints (u16/u32/u64) have an aclDataType but are
/// not in these kernels' dtype lists: they take the host fallback rather than a 161002.
fn acl_ok(d: DType) -> bool {
    matches!(
        d,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::F64
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::Bool(BoolStore::Native)
    )
}

/// A float or int dtype (not bool) with an aclDataType.
fn real(d: DType) -> bool {
    acl_ok(d) && !matches!(d, DType::Bool(_))
}

/// The aclScalar for `s` in the arithmetic of a tensor of dtype `d`: f32 for f32/f16/bf16
/// (as NdArray's `elem::<f32>()`), f64 for f64, i64 for ints and bool.
fn scalar_for(rt: &Runtime, name: &str, d: DType, s: BurnScalar) -> Scalar {
    let r = match d {
        DType::F64 => Scalar::f64(rt.api(), s.elem::<f64>()),
        d if d.is_float() => Scalar::f32(rt.api(), s.elem::<f32>()),
        _ => Scalar::i64(rt.api(), s.elem::<i64>()),
    };
    r.unwrap_or_else(|e| fail(name, e))
}

// ---- comparisons -------------------------------------------------------------------------------

/// `lhs ∘ rhs` → bool, or `None`.
pub(crate) fn compare(
    op: Compare,
    lhs: &AscendTensor,
    rhs: &AscendTensor,
    out: BoolStore,
) -> Option<AscendTensor> {
    let name = op.tensor_name();
    check_devices(name, lhs, rhs);
    if out != BoolStore::Native
        || lhs.dtype != rhs.dtype
        || !acl_ok(lhs.dtype)
        || !rank_ok(lhs)
        || !rank_ok(rhs)
    {
        return None;
    }
    let shape = broadcast(&lhs.shape, &rhs.shape)?;
    let device = lhs.device();
    let o = AscendTensor::alloc(Shape::from(shape), BOOL, &device);
    launch(name, &device, [lhs, rhs, &o], |rt, [a, b, o]| {
        aclnn::compare_tensor(rt, op, a, b, o)
    });
    Some(o)
}

/// `lhs ∘ rhs` with a scalar `rhs` → bool, or `None`.
pub(crate) fn compare_scalar(
    op: Compare,
    lhs: &AscendTensor,
    rhs: BurnScalar,
    out: BoolStore,
) -> Option<AscendTensor> {
    let name = op.scalar_name();
    if out != BoolStore::Native || !real(lhs.dtype) || !rank_ok(lhs) {
        return None;
    }
    let device = lhs.device();
    let o = AscendTensor::alloc(lhs.shape.clone(), BOOL, &device);
    launch(name, &device, [lhs, &o], |rt, [a, o]| {
        let s = scalar_for(rt, name, lhs.dtype, rhs);
        aclnn::compare_scalar(rt, op, a, &s, o)
    });
    Some(o)
}

// ---- masks and logic ---------------------------------------------------------------------------

/// `mask ? value : tensor` (Burn's `mask_where`), or `None`.
pub(crate) fn mask_where(
    tensor: &AscendTensor,
    mask: &AscendTensor,
    value: &AscendTensor,
) -> Option<AscendTensor> {
    const NAME: &str = names::s_where;
    check_devices(NAME, tensor, mask);
    check_devices(NAME, tensor, value);
    if mask.dtype != BOOL
        || tensor.dtype != value.dtype
        || !acl_ok(tensor.dtype)
        || ![tensor, mask, value].into_iter().all(rank_ok)
    {
        return None;
    }
    let shape = broadcast(&broadcast(&tensor.shape, &mask.shape)?, &value.shape)?;
    let device = tensor.device();
    let o = AscendTensor::alloc(Shape::from(shape), tensor.dtype, &device);
    launch(
        NAME,
        &device,
        [mask, value, tensor, &o],
        |rt, [c, s, t, o]| aclnn::s_where(rt, c, s, t, o),
    );
    Some(o)
}

/// `tensor` with `value` where `mask` (Burn's `mask_fill`), or `None`.
pub(crate) fn mask_fill(
    tensor: &AscendTensor,
    mask: &AscendTensor,
    value: BurnScalar,
) -> Option<AscendTensor> {
    const NAME: &str = names::inplace_masked_fill_scalar;
    check_devices(NAME, tensor, mask);
    if mask.dtype != BOOL || !real(tensor.dtype) || !rank_ok(tensor) || !rank_ok(mask) {
        return None;
    }
    let shape = broadcast(&tensor.shape, &mask.shape)?;
    let device = tensor.device();
    let o = AscendTensor::alloc(Shape::from(shape), tensor.dtype, &device);
    launch(NAME, &device, [tensor, mask, &o], |rt, [t, m, o]| {
        aclnn::inplace_copy(rt, o, t).unwrap_or_else(|e| fail(names::inplace_copy, e));
        let v = scalar_for(rt, NAME, tensor.dtype, value);
        aclnn::inplace_masked_fill_scalar(rt, o, m, &v)
    });
    Some(o)
}

/// A new tensor of `shape` filled with `value` on the device (`aclnnInplaceFillScalar`; no
/// upload), for the dtypes the fill takes, or `None` (the caller uploads instead).
pub(crate) fn full(
    shape: Shape,
    value: BurnScalar,
    dtype: DType,
    device: &AscendDevice,
) -> Option<AscendTensor> {
    const NAME: &str = names::inplace_fill_scalar;
    if !real(dtype) || shape.num_dims() > 8 || shape.num_dims() == 0 {
        return None;
    }
    let o = AscendTensor::alloc_for(NAME, shape, dtype, device);
    if o.numel() == 0 {
        return Some(o);
    }
    launch(NAME, device, [&o], |rt, [o]| {
        let v = scalar_for(rt, NAME, dtype, value);
        aclnn::inplace_fill_scalar(rt, o, &v)
    });
    Some(o)
}

/// `!t` for a native bool tensor, or `None`.
pub(crate) fn bool_not(t: &AscendTensor) -> Option<AscendTensor> {
    const NAME: &str = names::logical_not;
    if t.dtype != BOOL || !rank_ok(t) {
        return None;
    }
    let device = t.device();
    let o = AscendTensor::alloc(t.shape.clone(), BOOL, &device);
    launch(NAME, &device, [t, &o], |rt, [a, o]| {
        aclnn::logical_not(rt, a, o)
    });
    Some(o)
}

/// `lhs && rhs` (`and`) or `lhs || rhs` for native bool tensors, or `None`.
pub(crate) fn bool_logical(
    and: bool,
    lhs: &AscendTensor,
    rhs: &AscendTensor,
) -> Option<AscendTensor> {
    let name = if and {
        names::logical_and
    } else {
        names::logical_or
    };
    check_devices(name, lhs, rhs);
    if lhs.dtype != BOOL || rhs.dtype != BOOL || !rank_ok(lhs) || !rank_ok(rhs) {
        return None;
    }
    let shape = broadcast(&lhs.shape, &rhs.shape)?;
    let device = lhs.device();
    let o = AscendTensor::alloc(Shape::from(shape), BOOL, &device);
    launch(name, &device, [lhs, rhs, &o], |rt, [a, b, o]| {
        aclnn::logical(rt, and, a, b, o)
    });
    Some(o)
}

// ---- cast ------------------------------------------------------------------------------------

/// `t` converted to `to` (`aclnnCast`), or `None`. The same tensor when the dtype already is
/// `to` (tensors are immutable).
pub(crate) fn cast(t: &AscendTensor, to: DType) -> Option<AscendTensor> {
    const NAME: &str = names::cast;
    if !acl_ok(t.dtype) || !acl_ok(to) || !rank_ok(t) {
        return None;
    }
    let dt = acl_dtype(to)?;
    if t.dtype == to {
        return Some(t.clone());
    }
    let device = t.device();
    let o = AscendTensor::alloc(t.shape.clone(), to, &device);
    launch(NAME, &device, [t, &o], |rt, [a, o]| {
        aclnn::cast(rt, a, dt, o)
    });
    Some(o)
}

// ---- max / min ---------------------------------------------------------------------------------

/// Max (`max`) or min of `t` over `dims`, kept as size 1 (`aclnnAmax`/`aclnnAmin`), or `None`.
pub(crate) fn amax(t: &AscendTensor, dims: &[usize], max: bool) -> Option<AscendTensor> {
    let name = if max { names::amax } else { names::amin };
    if !real(t.dtype) || !rank_ok(t) || t.shape.num_dims() == 0 || t.numel() == 0 {
        return None;
    }
    let mut shape: Vec<usize> = t.shape.iter().copied().collect();
    for &d in dims {
        shape[d] = 1;
    }
    let device = t.device();
    let o = AscendTensor::alloc(Shape::from(shape), t.dtype, &device);
    launch(name, &device, [t, &o], |rt, [a, o]| {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let dims = IntArray::new(rt.api(), &dims).unwrap_or_else(|e| fail(name, e));
        aclnn::amax(rt, max, a, &dims, true, o)
    });
    Some(o)
}

/// Max (`max`) or min of all of `t`, shape `[1]`, or `None`.
pub(crate) fn amax_all(t: &AscendTensor, max: bool) -> Option<AscendTensor> {
    let all: Vec<usize> = (0..t.shape.num_dims()).collect();
    amax(t, &all, max).map(|o| base::reshape(o, Shape::new([1])))
}

fn index_dtype(d: DType) -> bool {
    matches!(d, DType::I64 | DType::I32)
}

/// Index of the max (`max`) or min along `dim`, kept as size 1 (`aclnnArgMax`/`ArgMin`).
pub(crate) fn arg(t: &AscendTensor, dim: usize, max: bool, out: DType) -> Option<AscendTensor> {
    let name = if max { names::arg_max } else { names::arg_min };
    if !is_acl_float(t.dtype) || !index_dtype(out) || !rank_ok(t) || t.numel() == 0 {
        return None;
    }
    let mut shape: Vec<usize> = t.shape.iter().copied().collect();
    shape[dim] = 1;
    let device = t.device();
    let o = AscendTensor::alloc(Shape::from(shape), out, &device);
    launch(name, &device, [t, &o], |rt, [a, o]| {
        aclnn::arg(rt, max, a, dim as i64, true, o)
    });
    Some(o)
}

/// Max (`max`) or min along `dim` and its index, both kept as size 1 (`aclnnMaxDim`/`MinDim`).
pub(crate) fn with_indices(
    t: &AscendTensor,
    dim: usize,
    max: bool,
    index: DType,
) -> Option<(AscendTensor, AscendTensor)> {
    let name = if max { names::max_dim } else { names::min_dim };
    if !real(t.dtype) || !index_dtype(index) || !rank_ok(t) || t.numel() == 0 {
        return None;
    }
    let mut shape: Vec<usize> = t.shape.iter().copied().collect();
    shape[dim] = 1;
    let device = t.device();
    let v = AscendTensor::alloc(Shape::from(shape.clone()), t.dtype, &device);
    let i = AscendTensor::alloc(Shape::from(shape), index, &device);
    launch(name, &device, [t, &v, &i], |rt, [a, v, i]| {
        aclnn::dim_with_indices(rt, max, a, dim as i64, true, v, i)
    });
    Some((v, i))
}

// ---- activations, pow, clamp ------------------------------------------------------------------

/// GeLU, exact (erf) form (`aclnnGeluV2`, approximate 0), or `None`.
pub(crate) fn gelu(t: &AscendTensor) -> Option<AscendTensor> {
    const NAME: &str = names::gelu_v2;
    if !is_acl_float(t.dtype) || !rank_ok(t) {
        return None;
    }
    let device = t.device();
    let o = AscendTensor::alloc(t.shape.clone(), t.dtype, &device);
    launch(NAME, &device, [t, &o], |rt, [a, o]| {
        aclnn::gelu_v2(rt, a, 0, o)
    });
    Some(o)
}

/// `t ^ exponent` (`aclnnPowTensorScalar`), or `None`.
pub(crate) fn powf_scalar(t: &AscendTensor, exponent: BurnScalar) -> Option<AscendTensor> {
    const NAME: &str = names::pow_tensor_scalar;
    if !is_acl_float(t.dtype) || !rank_ok(t) {
        return None;
    }
    let device = t.device();
    let o = AscendTensor::alloc(t.shape.clone(), t.dtype, &device);
    launch(NAME, &device, [t, &o], |rt, [a, o]| {
        let e = scalar_for(rt, NAME, t.dtype, exponent);
        aclnn::pow_tensor_scalar(rt, a, &e, o)
    });
    Some(o)
}

/// `t` clamped to `[min, max]` (either bound optional, not both), or `None`.
pub(crate) fn clamp(
    t: &AscendTensor,
    min: Option<BurnScalar>,
    max: Option<BurnScalar>,
) -> Option<AscendTensor> {
    let name = match (min.is_some(), max.is_some()) {
        (true, true) => names::clamp,
        (true, false) => names::clamp_min,
        (false, true) => names::clamp_max,
        (false, false) => return None,
    };
    if !is_acl_float(t.dtype) || !rank_ok(t) {
        return None;
    }
    let device = t.device();
    let o = AscendTensor::alloc(t.shape.clone(), t.dtype, &device);
    launch(name, &device, [t, &o], |rt, [a, o]| {
        let lo = min.map(|s| scalar_for(rt, name, t.dtype, s));
        let hi = max.map(|s| scalar_for(rt, name, t.dtype, s));
        aclnn::clamp(rt, a, lo.as_ref(), hi.as_ref(), o)
    });
    Some(o)
}

// ---- random ------------------------------------------------------------------------------------

/// `(seed, offset)` of the device random fills.
static RNG: Mutex<Option<(u64, u64)>> = Mutex::new(None);

/// Seeds the device random fills (`Backend::seed`): the same seed replays the same sequence.
pub(crate) fn seed(seed: u64) {
    *RNG.lock().unwrap_or_else(|e| e.into_inner()) = Some((seed, 0));
}

/// The `(seed, offset)` for a fill of `n` elements; advances the offset past them. Unseeded,
/// the seed comes from the process's hash randomisation (different per run, as NdArray's).
fn next_key(n: u64) -> (u64, u64) {
    let mut g = RNG.lock().unwrap_or_else(|e| e.into_inner());
    let (s, off) = *g.get_or_insert_with(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        (h.finish(), 0)
    });
    // Philox draws 4 values per counter on CANN: keep offsets aligned to 4.
    *g = Some((s, off.wrapping_add(n.div_ceil(4) * 4)));
    (s, off)
}

/// A tensor of `shape` filled from `distribution` on the device, or `None` (non-float dtype,
/// rank > 8).
pub(crate) fn random(
    shape: Shape,
    distribution: Distribution,
    device: &AscendDevice,
    dtype: DType,
) -> Option<AscendTensor> {
    if !is_acl_float(dtype) || shape.num_dims() > 8 {
        return None;
    }
    let o = AscendTensor::alloc(shape, dtype, device);
    if o.numel() == 0 {
        return Some(o);
    }
    let (s, off) = next_key(o.numel() as u64);
    let name = match distribution {
        Distribution::Default | Distribution::Uniform(..) => names::inplace_uniform,
        Distribution::Normal(..) => names::inplace_normal,
        Distribution::Bernoulli(_) => names::inplace_bernoulli,
    };
    launch(name, device, [&o], |rt, [o]| match distribution {
        Distribution::Default => aclnn::inplace_uniform(rt, o, 0.0, 1.0, s, off),
        Distribution::Uniform(lo, hi) => aclnn::inplace_uniform(rt, o, lo, hi, s, off),
        Distribution::Normal(mean, std) => {
            aclnn::inplace_normal(rt, o, mean as f32, std as f32, s as i64, off as i64)
        }
        Distribution::Bernoulli(p) => {
            let p = Scalar::f64(rt.api(), p).unwrap_or_else(|e| fail(name, e));
            aclnn::inplace_bernoulli(rt, o, &p, s as i64, off as i64)
        }
    });
    Some(o)
}

// ---- int arithmetic ------------------------------------------------------------------------------

fn int_dtype(d: DType) -> bool {
    matches!(d, DType::I64 | DType::I32)
}

/// An int elementwise op on the device: `aclnnAdd`/`aclnnSub` (alpha 1) and `aclnnMul` with
/// INT64/INT32 operands of one dtype, broadcasting (wrapping on overflow, as NdArray in release).
#[derive(Clone, Copy, Debug)]
pub(crate) enum IntBinary {
    Add,
    Sub,
    Mul,
}

/// `lhs ∘ rhs` for i64/i32 tensors of one dtype, or `None`.
pub(crate) fn int_binary(
    op: IntBinary,
    lhs: &AscendTensor,
    rhs: &AscendTensor,
) -> Option<AscendTensor> {
    let name = match op {
        IntBinary::Add => names::add,
        IntBinary::Sub => names::sub,
        IntBinary::Mul => names::mul,
    };
    check_devices(name, lhs, rhs);
    if lhs.dtype != rhs.dtype || !int_dtype(lhs.dtype) || !rank_ok(lhs) || !rank_ok(rhs) {
        return None;
    }
    let shape = broadcast(&lhs.shape, &rhs.shape)?;
    let device = lhs.device();
    let o = AscendTensor::alloc(Shape::from(shape), lhs.dtype, &device);
    launch(name, &device, [lhs, rhs, &o], |rt, [a, b, o]| {
        // An integral alpha: CANN refuses a float alpha for integer operands.
        let one = Scalar::i64(rt.api(), 1).unwrap_or_else(|e| fail(name, e));
        match op {
            IntBinary::Add => aclnn::add(rt, a, b, &one, o),
            IntBinary::Sub => aclnn::sub(rt, a, b, &one, o),
            IntBinary::Mul => aclnn::mul(rt, a, b, o),
        }
    });
    Some(o)
}

/// `t + alpha·s` (`aclnnAdds`, `alpha` Some) or `t · s` (`aclnnMuls`) for an i64/i32 tensor.
pub(crate) fn int_scalar(
    t: &AscendTensor,
    s: BurnScalar,
    alpha: Option<i64>,
) -> Option<AscendTensor> {
    let name = if alpha.is_some() {
        names::adds
    } else {
        names::muls
    };
    if !int_dtype(t.dtype) || !rank_ok(t) {
        return None;
    }
    let device = t.device();
    let o = AscendTensor::alloc(t.shape.clone(), t.dtype, &device);
    launch(name, &device, [t, &o], |rt, [a, o]| {
        let sc = |v| Scalar::i64(rt.api(), v).unwrap_or_else(|e| fail(name, e));
        let other = sc(s.elem::<i64>());
        match alpha {
            Some(al) => aclnn::adds(rt, a, &other, &sc(al), o),
            None => aclnn::muls(rt, a, &other, o),
        }
    });
    Some(o)
}
