//! Float ops that run aclnn kernels: elementwise add/sub/mul/div (`aclnnAdd`, `aclnnSub`,
//! `aclnnMul`, `aclnnDiv`, broadcasting), matmul (`aclnnMatmul`, batch dims broadcast),
//! add/sub/mul by a scalar (`aclnnAdds`, `aclnnMuls`), exp/log/sqrt/abs/tanh and sum/mean
//! over dims (`aclnnReduceSum`, `aclnnMean`).
//! Operands are passed as their views (strides, offset, stride 0 for broadcast dims): no copy.
//! Calls the device path does not take (dtypes other than f32/f16/bf16, mixed dtypes, rank < 2
//! for matmul, rank > 8) return `None` and the caller runs the counted host fallback.

use burn_ascend_cann::acl::aclnn::{self, Unary};
use burn_ascend_cann::acl::names;
use burn_ascend_cann::acl::{self as acl, IntArray, Runtime, Scalar, Tensor as AclTensorHandle};
use burn_backend::{Shape, TensorMetadata};

use crate::device::{runtime, AscendDevice};
use crate::element::is_acl_float;
use crate::tensor::{fail, AscendTensor};

/// An elementwise binary op.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Binary {
    Add,
    Sub,
    Mul,
    Div,
}

impl Binary {
    fn name(self) -> &'static str {
        match self {
            Self::Add => names::add,
            Self::Sub => names::sub,
            Self::Mul => names::mul,
            Self::Div => names::div,
        }
    }
}

pub(crate) use burn_ascend_contract::broadcast::broadcast_shapes as broadcast;

/// Gets `device`'s runtime and queues the launches in `f` on its stream (no wait: a failure of
/// the kernel itself surfaces at the next synchronisation); an error becomes the op's panic.
pub(crate) fn run(_name: &str, device: &AscendDevice, f: impl FnOnce(&Runtime)) {
    let rt = runtime(device);
    f(&rt);
}

/// Queues one kernel call on `device` over `tensors` (the inputs, then the outputs): each is
/// described from its view and handed to `call` as an `aclTensor` handle, in the same order.
/// Nearly every device path here is this one step after choosing its output; an error of the
/// call becomes the op's panic naming `name`.
pub(crate) fn launch<const N: usize>(
    name: &str,
    device: &AscendDevice,
    tensors: [&AscendTensor; N],
    call: impl FnOnce(&Runtime, [&AclTensorHandle<'_>; N]) -> acl::Result<()>,
) {
    run(name, device, |rt| {
        let descs = tensors.map(|t| t.desc(name));
        let handles: [AclTensorHandle<'_>; N] =
            std::array::from_fn(|i| tensors[i].handle(&descs[i], name));
        call(rt, handles.each_ref()).unwrap_or_else(|e| fail(name, e));
    });
}

fn eligible(a: &AscendTensor, b: &AscendTensor) -> bool {
    is_acl_float(a.dtype)
        && a.dtype == b.dtype
        && a.shape.num_dims() <= 8
        && b.shape.num_dims() <= 8
}

pub(crate) fn check_devices(op: &str, a: &AscendTensor, b: &AscendTensor) {
    if a.device() != b.device() {
        panic!(
            "{op}: tensors on different devices ({} and {}); move them with `to_device` first",
            a.device(),
            b.device()
        );
    }
}

/// `lhs ∘ rhs` on the device, or `None` (see the module docs).
pub(crate) fn binary(op: Binary, lhs: &AscendTensor, rhs: &AscendTensor) -> Option<AscendTensor> {
    check_devices(op.name(), lhs, rhs);
    if !eligible(lhs, rhs) {
        return None;
    }
    let shape = broadcast(&lhs.shape, &rhs.shape)?;
    let device = lhs.device();
    let rt = runtime(&device);
    let out = AscendTensor::alloc(Shape::from(shape), lhs.dtype, &device);
    let name = op.name();
    {
        let (ad, bd, od) = (lhs.desc(name), rhs.desc(name), out.desc(name));
        let (a, b, o) = (
            lhs.handle(&ad, name),
            rhs.handle(&bd, name),
            out.handle(&od, name),
        );
        let res = match op {
            Binary::Add | Binary::Sub => {
                let one = Scalar::f32(rt.api(), 1.0).unwrap_or_else(|e| fail(name, e));
                if matches!(op, Binary::Add) {
                    aclnn::add(&rt, &a, &b, &one, &o)
                } else {
                    aclnn::sub(&rt, &a, &b, &one, &o)
                }
            }
            Binary::Mul => aclnn::mul(&rt, &a, &b, &o),
            Binary::Div => aclnn::div(&rt, &a, &b, &o),
        };
        res.unwrap_or_else(|e| fail(name, e));
    }
    Some(out)
}

/// `lhs @ rhs` on the device, or `None` (see the module docs).
pub(crate) fn matmul(lhs: &AscendTensor, rhs: &AscendTensor) -> Option<AscendTensor> {
    const NAME: &str = names::matmul;
    check_devices(NAME, lhs, rhs);
    let (ra, rb) = (lhs.shape.num_dims(), rhs.shape.num_dims());
    if !eligible(lhs, rhs) || ra < 2 || rb < 2 {
        return None;
    }
    let (m, k) = (lhs.shape[ra - 2], lhs.shape[ra - 1]);
    let (k2, n) = (rhs.shape[rb - 2], rhs.shape[rb - 1]);
    assert_eq!(
        k,
        k2,
        "matmul: inner dims differ: {:?} @ {:?}",
        lhs.shape(),
        rhs.shape()
    );
    let mut shape = broadcast(&lhs.shape[..ra - 2], &rhs.shape[..rb - 2])?;
    shape.extend([m, n]);
    let device = lhs.device();
    let rt = runtime(&device);
    let out = AscendTensor::alloc(Shape::from(shape), lhs.dtype, &device);
    {
        let (ad, bd, od) = (lhs.desc(NAME), rhs.desc(NAME), out.desc(NAME));
        let (a, b, o) = (
            lhs.handle(&ad, NAME),
            rhs.handle(&bd, NAME),
            out.handle(&od, NAME),
        );
        // cubeMathType 0 (KEEP_DTYPE): no silent down-conversion of f32.
        aclnn::matmul(&rt, &a, &b, &o, 0).unwrap_or_else(|e| fail(NAME, e));
    }
    Some(out)
}

/// A unary float op on the device, or `None` for non-float dtypes.
pub(crate) fn unary(op: Unary, t: &AscendTensor) -> Option<AscendTensor> {
    if !is_acl_float(t.dtype) || t.shape.num_dims() > 8 {
        return None;
    }
    let name = op.name();
    let device = t.device();
    let rt = runtime(&device);
    let out = AscendTensor::alloc(t.shape.clone(), t.dtype, &device);
    {
        let (ad, od) = (t.desc(name), out.desc(name));
        let (a, o) = (t.handle(&ad, name), out.handle(&od, name));
        aclnn::unary(&rt, op, &a, &o).unwrap_or_else(|e| fail(name, e));
    }
    Some(out)
}

/// `t + alpha·s` (`aclnnAdds`) or `t · s` (`aclnnMuls`, `alpha = None`) on the device.
pub(crate) fn scalar(t: &AscendTensor, s: f32, alpha: Option<f32>) -> Option<AscendTensor> {
    if !is_acl_float(t.dtype) || t.shape.num_dims() > 8 {
        return None;
    }
    let name = if alpha.is_some() {
        names::adds
    } else {
        names::muls
    };
    let device = t.device();
    let rt = runtime(&device);
    let out = AscendTensor::alloc(t.shape.clone(), t.dtype, &device);
    {
        let (ad, od) = (t.desc(name), out.desc(name));
        let (a, o) = (t.handle(&ad, name), out.handle(&od, name));
        let sc = |v| Scalar::f32(rt.api(), v).unwrap_or_else(|e| fail(name, e));
        let other = sc(s);
        match alpha {
            Some(al) => aclnn::adds(&rt, &a, &other, &sc(al), &o),
            None => aclnn::muls(&rt, &a, &other, &o),
        }
        .unwrap_or_else(|e| fail(name, e));
    }
    Some(out)
}

/// `t / s` on the device (`aclnnDivs`: a true division, so `x / 3` is not `x · (1/3)`).
pub(crate) fn div_scalar(t: &AscendTensor, s: f32) -> Option<AscendTensor> {
    if !is_acl_float(t.dtype) || t.shape.num_dims() > 8 {
        return None;
    }
    let name = names::divs;
    let device = t.device();
    let rt = runtime(&device);
    let out = AscendTensor::alloc(t.shape.clone(), t.dtype, &device);
    {
        let (ad, od) = (t.desc(name), out.desc(name));
        let (a, o) = (t.handle(&ad, name), out.handle(&od, name));
        let other = Scalar::f32(rt.api(), s).unwrap_or_else(|e| fail(name, e));
        aclnn::divs(&rt, &a, &other, &o).unwrap_or_else(|e| fail(name, e));
    }
    Some(out)
}

/// Sum or mean over `dims`, keeping them as size 1 (Burn's `sum_dim`/`mean_dim`; `sum` passes
/// every dim and reshapes to `[1]`).
pub(crate) fn reduce(t: &AscendTensor, dims: &[usize], mean: bool) -> Option<AscendTensor> {
    if !is_acl_float(t.dtype) || t.shape.num_dims() > 8 {
        return None;
    }
    let name = if mean { names::mean } else { names::reduce_sum };
    let device = t.device();
    let rt = runtime(&device);
    let mut shape: Vec<usize> = t.shape.iter().copied().collect();
    for &d in dims {
        shape[d] = 1;
    }
    let out = AscendTensor::alloc(Shape::from(shape), t.dtype, &device);
    {
        let (ad, od) = (t.desc(name), out.desc(name));
        let (a, o) = (t.handle(&ad, name), out.handle(&od, name));
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let dims = IntArray::new(rt.api(), &dims).unwrap_or_else(|e| fail(name, e));
        let dt = t.acl_dtype(name);
        aclnn::reduce(&rt, mean, &a, &dims, true, dt, &o).unwrap_or_else(|e| fail(name, e));
    }
    Some(out)
}
