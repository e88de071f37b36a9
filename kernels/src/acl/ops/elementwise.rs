//! The elementwise aclnn ops of issue 6: comparisons, masks, copy, logic, cast, max/min,
//! GeLU, pow/clamp by scalars and the random fills. One function per op (or per family of
//! ops with one prototype, selected by an enum), arguments in prototype order, via
//! [`two_stage`]. The unary ones (`aclnnRelu`, `aclnnSigmoid`, `aclnnNeg`, `aclnnReciprocal`,
//! `aclnnSin`, `aclnnCos`, `aclnnErf`) are variants of [`super::Unary`].

use super::{missing, two_stage};
use crate::acl::error::Result;
use crate::acl::ffi::{DataType, OpFns, ScalarWs};
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Scalar, Tensor};

/// An elementwise comparison (`aclnnXxTensor` / `aclnnXxScalar`), out BOOL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Compare {
    /// The tensor-tensor op's name.
    pub fn tensor_name(self) -> &'static str {
        match self {
            Self::Eq => "aclnnEqTensor",
            Self::Ne => "aclnnNeTensor",
            Self::Gt => "aclnnGtTensor",
            Self::Ge => "aclnnGeTensor",
            Self::Lt => "aclnnLtTensor",
            Self::Le => "aclnnLeTensor",
        }
    }

    /// The tensor-scalar op's name.
    pub fn scalar_name(self) -> &'static str {
        match self {
            Self::Eq => "aclnnEqScalar",
            Self::Ne => "aclnnNeScalar",
            Self::Gt => "aclnnGtScalar",
            Self::Ge => "aclnnGeScalar",
            Self::Lt => "aclnnLtScalar",
            Self::Le => "aclnnLeScalar",
        }
    }
}

/// `out = self ∘ other` (`aclnnEqTensor` … `aclnnLeTensor`), broadcasting, out BOOL.
pub fn compare_tensor(
    rt: &Runtime,
    op: Compare,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    let e = &rt.api().elementwise;
    let f = match op {
        Compare::Eq => e.eq_tensor,
        Compare::Ne => e.ne_tensor,
        Compare::Gt => e.gt_tensor,
        Compare::Ge => e.ge_tensor,
        Compare::Lt => e.lt_tensor,
        Compare::Le => e.le_tensor,
    }
    .ok_or_else(|| missing(op.tensor_name()))?;
    two_stage(rt, op.tensor_name(), f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, other, out, workspaceSize, executor)`; handles
        // are live for the call.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self ∘ other` with a scalar `other` (`aclnnEqScalar` … `aclnnLeScalar`), out BOOL.
pub fn compare_scalar(
    rt: &Runtime,
    op: Compare,
    a: &Tensor<'_>,
    other: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let e = &rt.api().elementwise;
    let f = match op {
        Compare::Eq => e.eq_scalar,
        Compare::Ne => e.ne_scalar,
        Compare::Gt => e.gt_scalar,
        Compare::Ge => e.ge_scalar,
        Compare::Lt => e.lt_scalar,
        Compare::Le => e.le_scalar,
    };
    scalar_op(rt, op.scalar_name(), f, a, other, out)
}

fn scalar_op(
    rt: &Runtime,
    name: &str,
    f: Option<OpFns<ScalarWs>>,
    a: &Tensor<'_>,
    s: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let f = f.ok_or_else(|| missing(name))?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, const aclScalar *, out, workspaceSize,
        // executor)`; handles are live for the call.
        unsafe { (f.workspace)(a.as_ptr(), s.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = condition ? self : other` (`aclnnSWhere`), broadcasting.
pub fn s_where(
    rt: &Runtime,
    condition: &Tensor<'_>,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    let f = rt
        .api()
        .elementwise
        .s_where
        .ok_or_else(|| missing("aclnnSWhere"))?;
    two_stage(rt, "aclnnSWhere", f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnSWhereGetWorkspaceSize's prototype; handles live.
        unsafe {
            (f.workspace)(
                condition.as_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `self_ref[mask] = value` in place (`aclnnInplaceMaskedFillScalar`; mask broadcasts to it).
pub fn inplace_masked_fill_scalar(
    rt: &Runtime,
    self_ref: &Tensor<'_>,
    mask: &Tensor<'_>,
    value: &Scalar,
) -> Result<()> {
    const NAME: &str = "aclnnInplaceMaskedFillScalar";
    let f = rt
        .api()
        .elementwise
        .inplace_masked_fill_scalar
        .ok_or_else(|| missing(NAME))?;
    two_stage(rt, NAME, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype `(selfRef, mask, value, ws, executor)`;
        // handles are live; `self_ref` is a fresh output the caller owns.
        unsafe { (f.workspace)(self_ref.as_ptr(), mask.as_ptr(), value.as_ptr(), ws, ex) }
    })
}

/// `out = !self` (`aclnnLogicalNot`), out BOOL.
pub fn logical_not(rt: &Runtime, a: &Tensor<'_>, out: &Tensor<'_>) -> Result<()> {
    let f = rt
        .api()
        .elementwise
        .logical_not
        .ok_or_else(|| missing("aclnnLogicalNot"))?;
    two_stage(rt, "aclnnLogicalNot", f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, out, ws, executor)`; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self && other` (`aclnnLogicalAnd`, `and`) or `self || other` (`aclnnLogicalOr`).
pub fn logical(
    rt: &Runtime,
    and: bool,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    let e = &rt.api().elementwise;
    let (name, f) = if and {
        ("aclnnLogicalAnd", e.logical_and)
    } else {
        ("aclnnLogicalOr", e.logical_or)
    };
    let f = f.ok_or_else(|| missing(name))?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, other, out, ws, executor)`; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = (dtype) self` (`aclnnCast`); `dtype` is `out`'s.
pub fn cast(rt: &Runtime, a: &Tensor<'_>, dtype: DataType, out: &Tensor<'_>) -> Result<()> {
    let f = rt
        .api()
        .elementwise
        .cast
        .ok_or_else(|| missing("aclnnCast"))?;
    two_stage(rt, "aclnnCast", f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, aclDataType dtype, out, ws, executor)`.
        unsafe { (f.workspace)(a.as_ptr(), dtype.raw(), out.as_ptr(), ws, ex) }
    })
}

/// Max (`aclnnMaxDim`, `max`) or min (`aclnnMinDim`) over `dim` with the indices (INT64/32).
pub fn dim_with_indices(
    rt: &Runtime,
    max: bool,
    a: &Tensor<'_>,
    dim: i64,
    keepdim: bool,
    out: &Tensor<'_>,
    indices: &Tensor<'_>,
) -> Result<()> {
    let e = &rt.api().elementwise;
    let (name, f) = if max {
        ("aclnnMaxDim", e.max_dim)
    } else {
        ("aclnnMinDim", e.min_dim)
    };
    let f = f.ok_or_else(|| missing(name))?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, dim, keepdim, out, indices, ws, executor)`.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                dim,
                keepdim,
                out.as_ptr(),
                indices.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// Index of the max (`aclnnArgMax`, `max`) or min (`aclnnArgMin`) over `dim`.
pub fn arg(
    rt: &Runtime,
    max: bool,
    a: &Tensor<'_>,
    dim: i64,
    keepdim: bool,
    out: &Tensor<'_>,
) -> Result<()> {
    let e = &rt.api().elementwise;
    let (name, f) = if max {
        ("aclnnArgMax", e.arg_max)
    } else {
        ("aclnnArgMin", e.arg_min)
    };
    let f = f.ok_or_else(|| missing(name))?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, dim, keepdim, out, ws, executor)`.
        unsafe { (f.workspace)(a.as_ptr(), dim, keepdim, out.as_ptr(), ws, ex) }
    })
}

/// Max (`aclnnAmax`, `max`) or min (`aclnnAmin`) over `dims`.
pub fn amax(
    rt: &Runtime,
    max: bool,
    a: &Tensor<'_>,
    dims: &IntArray,
    keep_dim: bool,
    out: &Tensor<'_>,
) -> Result<()> {
    let e = &rt.api().elementwise;
    let (name, f) = if max {
        ("aclnnAmax", e.amax)
    } else {
        ("aclnnAmin", e.amin)
    };
    let f = f.ok_or_else(|| missing(name))?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, dim, keepDim, out, ws, executor)`.
        unsafe { (f.workspace)(a.as_ptr(), dims.as_ptr(), keep_dim, out.as_ptr(), ws, ex) }
    })
}

/// GeLU (`aclnnGeluV2`): `approximate` 0 = exact (erf), 1 = tanh.
pub fn gelu_v2(rt: &Runtime, x: &Tensor<'_>, approximate: i64, y: &Tensor<'_>) -> Result<()> {
    let f = rt
        .api()
        .elementwise
        .gelu_v2
        .ok_or_else(|| missing("aclnnGeluV2"))?;
    two_stage(rt, "aclnnGeluV2", f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(x, approximate, y, ws, executor)`.
        unsafe { (f.workspace)(x.as_ptr(), approximate, y.as_ptr(), ws, ex) }
    })
}

/// `out = self ^ exponent` (`aclnnPowTensorScalar`).
pub fn pow_tensor_scalar(
    rt: &Runtime,
    a: &Tensor<'_>,
    exponent: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let f = rt.api().elementwise.pow_tensor_scalar;
    scalar_op(rt, "aclnnPowTensorScalar", f, a, exponent, out)
}

/// Clamp to `[min, max]` (`aclnnClamp`), to `[min, ∞)` (`aclnnClampMin`, `max = None`) or to
/// `(-∞, max]` (`aclnnClampMax`, `min = None`). At least one bound is required.
pub fn clamp(
    rt: &Runtime,
    a: &Tensor<'_>,
    min: Option<&Scalar>,
    max: Option<&Scalar>,
    out: &Tensor<'_>,
) -> Result<()> {
    let e = &rt.api().elementwise;
    match (min, max) {
        (Some(lo), Some(hi)) => {
            let f = e.clamp.ok_or_else(|| missing("aclnnClamp"))?;
            two_stage(rt, "aclnnClamp", f.launch, |ws, ex| {
                // SAFETY: the arguments follow `(self, clipValueMin, clipValueMax, out, ws,
                // executor)`; handles are live.
                unsafe { (f.workspace)(a.as_ptr(), lo.as_ptr(), hi.as_ptr(), out.as_ptr(), ws, ex) }
            })
        }
        (Some(lo), None) => scalar_op(rt, "aclnnClampMin", e.clamp_min, a, lo, out),
        (None, Some(hi)) => scalar_op(rt, "aclnnClampMax", e.clamp_max, a, hi, out),
        (None, None) => Err(crate::acl::AclError::invalid(
            "clamp",
            "at least one of min and max is required",
        )),
    }
}

/// Fills `self_ref` from U[from, to) (`aclnnInplaceUniform`).
pub fn inplace_uniform(
    rt: &Runtime,
    self_ref: &Tensor<'_>,
    from: f64,
    to: f64,
    seed: u64,
    offset: u64,
) -> Result<()> {
    let f = rt
        .api()
        .elementwise
        .inplace_uniform
        .ok_or_else(|| missing("aclnnInplaceUniform"))?;
    two_stage(rt, "aclnnInplaceUniform", f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(selfRef, from, to, seed, offset, ws, executor)`.
        unsafe { (f.workspace)(self_ref.as_ptr(), from, to, seed, offset, ws, ex) }
    })
}

/// Fills `self_ref` from N(mean, std²) (`aclnnInplaceNormal`).
pub fn inplace_normal(
    rt: &Runtime,
    self_ref: &Tensor<'_>,
    mean: f32,
    std: f32,
    seed: i64,
    offset: i64,
) -> Result<()> {
    let f = rt
        .api()
        .elementwise
        .inplace_normal
        .ok_or_else(|| missing("aclnnInplaceNormal"))?;
    two_stage(rt, "aclnnInplaceNormal", f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(selfRef, mean, std, seed, offset, ws, executor)`.
        unsafe { (f.workspace)(self_ref.as_ptr(), mean, std, seed, offset, ws, ex) }
    })
}

/// Fills `self_ref` with 0/1, `P(1) = prob` (`aclnnInplaceBernoulli`).
pub fn inplace_bernoulli(
    rt: &Runtime,
    self_ref: &Tensor<'_>,
    prob: &Scalar,
    seed: i64,
    offset: i64,
) -> Result<()> {
    let f = rt
        .api()
        .elementwise
        .inplace_bernoulli
        .ok_or_else(|| missing("aclnnInplaceBernoulli"))?;
    two_stage(rt, "aclnnInplaceBernoulli", f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(selfRef, prob, seed, offset, ws, executor)`.
        unsafe { (f.workspace)(self_ref.as_ptr(), prob.as_ptr(), seed, offset, ws, ex) }
    })
}
