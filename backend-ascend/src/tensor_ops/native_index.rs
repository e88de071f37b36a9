//! Indexing and layout ops that run aclnn kernels: select (`aclnnIndexSelect`), select_add
//! (`aclnnIndexAdd`, embedding backward), gather (`aclnnGather`), scatter_add
//! (`aclnnScatterAdd`), cat (`aclnnCat` over an `aclTensorList`), contiguous copies and
//! slice_assign (`aclnnInplaceCopy` into a strided view), repeat_dim (`aclnnRepeat`) and flip
//! (`aclnnFlip`).
//!
//! Operands are passed as their views (strides, offset, stride 0 for expanded dims): no copy,
//! except that `aclnnScatterAdd` takes only a contiguous `src`. Outputs are fresh contiguous
//! tensors written before the op returns (so their storage is never shared while written).
//! Calls the device path does not take (dtypes without an `aclDataType`, index dtypes other
//! than i32/i64, rank 0 or > 8, negative slice steps, int/bool adds) return `None` and the
//! caller runs the counted host fallback. Every op synchronises its stream before returning,
//! which is what lets the memory pool reuse blocks at once (`crate::memory`).

use burn_ascend_cann::acl::aclnn;
use burn_ascend_cann::acl::names;
use burn_ascend_cann::acl::{
    self as acl, IntArray, Runtime, Scalar, Tensor as AclTensorHandle, TensorList,
};
use burn_backend::{DType, Shape, Slice};

use super::base;
use super::native::{check_devices, launch, run};
use crate::element::{acl_dtype, is_acl_float};
use crate::tensor::{fail, AscendTensor};

/// A dtype aclnn has a type for, at a rank the descriptors take (1..=8).
fn movable(t: &AscendTensor) -> bool {
    acl_dtype(t.dtype).is_some() && (1..=8).contains(&t.shape.num_dims())
}

fn is_index(t: &AscendTensor) -> bool {
    matches!(t.dtype, DType::I64 | DType::I32)
}

/// A fresh output of `shape` and `t`'s dtype on `t`'s device, written by one kernel call
/// over `inputs` and the output (as [`launch`]); an empty output is returned as it is, with
/// no call (there is nothing to write).
fn written<const N: usize>(
    name: &str,
    t: &AscendTensor,
    shape: Shape,
    inputs: [&AscendTensor; N],
    call: impl FnOnce(&Runtime, [&AclTensorHandle<'_>; N], &AclTensorHandle<'_>) -> acl::Result<()>,
) -> AscendTensor {
    let device = t.device();
    let out = AscendTensor::alloc_for(name, shape, t.dtype, &device);
    if out.numel() > 0 {
        run(name, &device, |rt| {
            let descs = inputs.map(|t| t.desc(name));
            let handles: [AclTensorHandle<'_>; N] =
                std::array::from_fn(|i| inputs[i].handle(&descs[i], name));
            let od = out.desc(name);
            let o = out.handle(&od, name);
            call(rt, handles.each_ref(), &o).unwrap_or_else(|e| fail(name, e));
        });
    }
    out
}

/// `dst ← src` (`aclnnInplaceCopy`), `dst` a view of a fresh, unshared output; `src`
/// broadcasts to `dst`'s shape.
fn copy_into(dst: &AscendTensor, src: &AscendTensor) {
    const NAME: &str = names::inplace_copy;
    if dst.numel() == 0 {
        return;
    }
    launch(NAME, &dst.device(), [dst, src], |rt, [d, s]| {
        aclnn::inplace_copy(rt, d, s)
    });
}

/// A contiguous copy of `t` on the device (`aclnnInplaceCopy` from its view), or `None`.
pub(crate) fn contiguous(t: &AscendTensor) -> Option<AscendTensor> {
    if !movable(t) {
        return None;
    }
    let out = AscendTensor::alloc_for(names::inplace_copy, t.shape.clone(), t.dtype, &t.device());
    copy_into(&out, t);
    Some(out)
}

/// `tensor.select(dim, indices)` (`aclnnIndexSelect`), or `None`.
pub(crate) fn select(t: &AscendTensor, dim: usize, indices: &AscendTensor) -> Option<AscendTensor> {
    const NAME: &str = names::index_select;
    check_devices(NAME, t, indices);
    if !movable(t) || !is_index(indices) || indices.shape.num_dims() != 1 {
        return None;
    }
    let mut shape = t.shape.iter().copied().collect::<Vec<usize>>();
    shape[dim] = indices.numel();
    Some(written(
        NAME,
        t,
        Shape::from(shape),
        [t, indices],
        |rt, [a, i], o| aclnn::index_select(rt, a, dim as i64, i, o),
    ))
}

/// `tensor` with the rows of `value` added at `indices` along `dim`, duplicates accumulating
/// (`aclnnIndexAdd`, alpha 1); float dtypes only, else `None`.
pub(crate) fn select_add(
    t: &AscendTensor,
    dim: usize,
    indices: &AscendTensor,
    value: &AscendTensor,
) -> Option<AscendTensor> {
    const NAME: &str = names::index_add;
    check_devices(NAME, t, indices);
    check_devices(NAME, t, value);
    if !is_acl_float(t.dtype)
        || t.dtype != value.dtype
        || !movable(t)
        || !is_index(indices)
        || indices.shape.num_dims() != 1
        || value.shape.num_dims() != t.shape.num_dims()
        || (0..t.shape.num_dims()).any(|d| {
            let want = if d == dim {
                indices.numel()
            } else {
                t.shape[d]
            };
            value.shape[d] != want
        })
    {
        return None;
    }
    let shape = t.shape.clone();
    Some(written(
        NAME,
        t,
        shape,
        [t, indices, value],
        |rt, [a, i, v], o| {
            let one = Scalar::f32(rt.api(), 1.0).unwrap_or_else(|e| fail(NAME, e));
            aclnn::index_add(rt, a, dim as i64, i, v, &one, o)
        },
    ))
}

/// `tensor.gather(dim, indices)` (`aclnnGather`; the output has the indices' shape), or `None`.
pub(crate) fn gather(dim: usize, t: &AscendTensor, indices: &AscendTensor) -> Option<AscendTensor> {
    const NAME: &str = names::gather;
    check_devices(NAME, t, indices);
    let r = t.shape.num_dims();
    // aclnnGather: index of self's rank, no larger than self off `dim`.
    if !movable(t)
        || !is_index(indices)
        || indices.shape.num_dims() != r
        || (0..r).any(|d| d != dim && indices.shape[d] > t.shape[d])
    {
        return None;
    }
    Some(written(
        NAME,
        t,
        indices.shape.clone(),
        [t, indices],
        |rt, [a, i], o| aclnn::gather(rt, a, dim as i64, i, o),
    ))
}

/// `tensor` with `value` scattered and summed at `indices` along `dim` (`aclnnScatterAdd`);
/// f32/f16/bf16/i32/i64, else `None`. `value` is made contiguous first (the op's `src` must
/// be).
pub(crate) fn scatter_add(
    dim: usize,
    t: &AscendTensor,
    indices: &AscendTensor,
    value: &AscendTensor,
) -> Option<AscendTensor> {
    const NAME: &str = names::scatter_add;
    check_devices(NAME, t, indices);
    check_devices(NAME, t, value);
    let addable = is_acl_float(t.dtype) || matches!(t.dtype, DType::I32 | DType::I64);
    let r = t.shape.num_dims();
    if !addable
        || t.dtype != value.dtype
        || !movable(t)
        || !is_index(indices)
        || indices.shape.num_dims() != r
        || value.shape.num_dims() != r
        // aclnnScatterAdd: index no larger than src, nor than self off `dim`.
        || (0..r).any(|d| {
            indices.shape[d] > value.shape[d] || (d != dim && indices.shape[d] > t.shape[d])
        })
    {
        return None;
    }
    let value = if value.is_contiguous() {
        value.clone()
    } else {
        contiguous(value)?
    };
    let shape = t.shape.clone();
    Some(written(
        NAME,
        t,
        shape,
        [t, indices, &value],
        |rt, [a, i, v], o| aclnn::scatter_add(rt, a, dim as i64, i, v, o),
    ))
}

/// `cat(tensors, dim)` (`aclnnCat` over an `aclTensorList` of the inputs' views), or `None`.
pub(crate) fn cat(tensors: &[AscendTensor], dim: usize) -> Option<AscendTensor> {
    const NAME: &str = names::cat;
    let first = tensors.first()?;
    for t in tensors {
        check_devices(NAME, first, t);
    }
    let r = first.shape.num_dims();
    if tensors.iter().any(|t| {
        !movable(t)
            || t.dtype != first.dtype
            || t.shape.num_dims() != r
            || (0..r).any(|d| d != dim && t.shape[d] != first.shape[d])
    }) {
        return None;
    }
    let mut shape = first.shape.iter().copied().collect::<Vec<usize>>();
    shape[dim] = tensors.iter().map(|t| t.shape[dim]).sum();
    let device = first.device();
    let out = AscendTensor::alloc_for(NAME, Shape::from(shape), first.dtype, &device);
    if out.numel() == 0 {
        return Some(out);
    }
    run(NAME, &device, |rt| {
        let descs: Vec<_> = tensors.iter().map(|t| t.desc(NAME)).collect();
        let handles = tensors
            .iter()
            .zip(&descs)
            .map(|(t, d)| t.handle(d, NAME))
            .collect();
        let list = TensorList::new(rt.api(), handles).unwrap_or_else(|e| fail(NAME, e));
        let od = out.desc(NAME);
        let o = out.handle(&od, NAME);
        aclnn::cat(rt, &list, dim as i64, &o).unwrap_or_else(|e| fail(NAME, e));
    });
    Some(out)
}

/// `tensor` with the region `slices` describes replaced by `value`: a contiguous copy of
/// `tensor`, then `aclnnInplaceCopy` of `value` into the strided view of the copy. Positive
/// steps only, else `None`.
pub(crate) fn slice_assign(
    t: &AscendTensor,
    slices: &[Slice],
    value: &AscendTensor,
) -> Option<AscendTensor> {
    check_devices(names::inplace_copy, t, value);
    if !movable(t) || t.dtype != value.dtype || slices.iter().any(|s| s.step <= 0) {
        return None;
    }
    if base::slice_view(t, slices)?.shape != value.shape {
        return None;
    }
    let out = contiguous(t)?;
    let view = base::slice_view(&out, slices)?;
    copy_into(&view, value);
    drop(view);
    Some(out)
}

/// `tensor.repeat_dim(dim, times)` (`aclnnRepeat` with 1 on every other dim), or `None`.
pub(crate) fn repeat_dim(t: &AscendTensor, dim: usize, times: usize) -> Option<AscendTensor> {
    const NAME: &str = names::repeat;
    if !movable(t) {
        return None;
    }
    let mut shape = t.shape.iter().copied().collect::<Vec<usize>>();
    shape[dim] *= times;
    Some(written(NAME, t, Shape::from(shape), [t], |rt, [a], o| {
        let mut reps = vec![1i64; t.shape.num_dims()];
        reps[dim] = times as i64;
        let reps = IntArray::new(rt.api(), &reps).unwrap_or_else(|e| fail(NAME, e));
        aclnn::repeat(rt, a, &reps, o)
    }))
}

/// `tensor.flip(axes)` (`aclnnFlip`), or `None`.
pub(crate) fn flip(t: &AscendTensor, axes: &[usize]) -> Option<AscendTensor> {
    const NAME: &str = names::flip;
    if !movable(t) {
        return None;
    }
    let shape = t.shape.clone();
    Some(written(NAME, t, shape, [t], |rt, [a], o| {
        let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let axes = IntArray::new(rt.api(), &axes).unwrap_or_else(|e| fail(NAME, e));
        aclnn::flip(rt, a, &axes, o)
    }))
}
