//! The indexing and layout calls of the Burn backend.

use super::two_stage;
use crate::acl::error::Result;
use crate::acl::ffi::{IndexDimWs, OpFns};
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Scalar, Tensor, TensorList};

/// `out = self.index_select(dim, index)` (`aclnnIndexSelect`); `index` is 0-D/1-D INT32/INT64.
pub fn index_select(
    rt: &Runtime,
    a: &Tensor<'_>,
    dim: i64,
    index: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    index_dim(rt, op!(rt, index_select)?, (a, dim, index, out))
}

/// `out = self.gather(dim, index)` (`aclnnGather`); `out` has `index`'s shape.
pub fn gather(
    rt: &Runtime,
    a: &Tensor<'_>,
    dim: i64,
    index: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    index_dim(rt, op!(rt, gather)?, (a, dim, index, out))
}

/// `aclnnIndexSelect` / `aclnnGather`: one prototype, `(self, dim, index, out)`.
fn index_dim(
    rt: &Runtime,
    (name, f): (&str, OpFns<IndexDimWs>),
    (a, dim, index, out): (&Tensor<'_>, i64, &Tensor<'_>, &Tensor<'_>),
) -> Result<()> {
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype `(self, dim, index, out, ws, executor)`;
        // handles are live for the call.
        unsafe { (f.workspace)(a.as_ptr(), dim, index.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self` with `alpha·source` added at `index` along `dim` (`aclnnIndexAdd`).
pub fn index_add(
    rt: &Runtime,
    a: &Tensor<'_>,
    dim: i64,
    index: &Tensor<'_>,
    source: &Tensor<'_>,
    alpha: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, index_add)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnIndexAddGetWorkspaceSize's prototype; handles are
        // live for the call.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                dim,
                index.as_ptr(),
                source.as_ptr(),
                alpha.as_ptr(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `out = self` with `src` scattered and summed at `index` along `dim` (`aclnnScatterAdd`).
/// `src` and `out` must be contiguous (aclnnScatterAdd.md).
pub fn scatter_add(
    rt: &Runtime,
    a: &Tensor<'_>,
    dim: i64,
    index: &Tensor<'_>,
    src: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, scatter_add)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnScatterAddGetWorkspaceSize's prototype; handles
        // are live for the call.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                dim,
                index.as_ptr(),
                src.as_ptr(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `out = cat(tensors, dim)` (`aclnnCat`).
pub fn cat(rt: &Runtime, tensors: &TensorList<'_>, dim: i64, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, cat)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnCatGetWorkspaceSize's prototype; the list and
        // `out` are live for the call.
        unsafe { (f.workspace)(tensors.as_ptr(), dim, out.as_ptr(), ws, ex) }
    })
}

/// `self_ref ← src` (`aclnnInplaceCopy`): `self_ref` may be any (strided) view; `src`
/// broadcasts to its shape.
pub fn inplace_copy(rt: &Runtime, self_ref: &Tensor<'_>, src: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, inplace_copy)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnInplaceCopyGetWorkspaceSize's prototype; handles
        // are live for the call.
        unsafe { (f.workspace)(self_ref.as_ptr(), src.as_ptr(), ws, ex) }
    })
}

/// `out = self.repeat(repeats)` (`aclnnRepeat`, torch's `repeat`: tile per dim).
pub fn repeat(rt: &Runtime, a: &Tensor<'_>, repeats: &IntArray, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, repeat)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnRepeatGetWorkspaceSize's prototype; handles are
        // live for the call.
        unsafe { (f.workspace)(a.as_ptr(), repeats.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self.flip(dims)` (`aclnnFlip`).
pub fn flip(rt: &Runtime, a: &Tensor<'_>, dims: &IntArray, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, flip)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnFlipGetWorkspaceSize's prototype; handles are
        // live for the call.
        unsafe { (f.workspace)(a.as_ptr(), dims.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

// Declared last: it uses the `op!` and `op_enum!` macros above.
