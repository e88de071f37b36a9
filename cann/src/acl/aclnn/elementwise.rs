//! The elementwise aclnn ops the Burn backend runs natively: comparisons, masks, copy, logic, cast,
//! max/min, GeLU, pow/clamp by scalars and the random fills. One function per op (or per family of
//! ops with one prototype, selected by an enum), arguments in prototype order, via [`two_stage`].
//! The unary ones (`aclnnRelu`, `aclnnSigmoid`, `aclnnNeg`, `aclnnReciprocal`, `aclnnSin`,
//! `aclnnCos`, `aclnnErf`) are variants of [`super::Unary`].

use super::call::{entry, two_stage};
use crate::acl::error::Result;
use crate::acl::ffi::{names, BinaryWs, DataType, OpFns, ScalarWs};
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Scalar, Tensor};

op_enum! {
    /// [`Compare`]'s tensor-tensor ops.
    enum CompareTensor(BinaryWs) {
        Eq => eq_tensor,
        Ne => ne_tensor,
        Gt => gt_tensor,
        Ge => ge_tensor,
        Lt => lt_tensor,
        Le => le_tensor,
    }
}

op_enum! {
    /// [`Compare`]'s tensor-scalar ops.
    enum CompareScalar(ScalarWs) {
        Eq => eq_scalar,
        Ne => ne_scalar,
        Gt => gt_scalar,
        Ge => ge_scalar,
        Lt => lt_scalar,
        Le => le_scalar,
    }
}

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
    fn tensor(self) -> CompareTensor {
        match self {
            Self::Eq => CompareTensor::Eq,
            Self::Ne => CompareTensor::Ne,
            Self::Gt => CompareTensor::Gt,
            Self::Ge => CompareTensor::Ge,
            Self::Lt => CompareTensor::Lt,
            Self::Le => CompareTensor::Le,
        }
    }

    fn scalar(self) -> CompareScalar {
        match self {
            Self::Eq => CompareScalar::Eq,
            Self::Ne => CompareScalar::Ne,
            Self::Gt => CompareScalar::Gt,
            Self::Ge => CompareScalar::Ge,
            Self::Lt => CompareScalar::Lt,
            Self::Le => CompareScalar::Le,
        }
    }

    /// The tensor-tensor op's name.
    pub fn tensor_name(self) -> &'static str {
        self.tensor().name()
    }

    /// The tensor-scalar op's name.
    pub fn scalar_name(self) -> &'static str {
        self.scalar().name()
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
    let f = entry(op.tensor().entry(rt.api()), op.tensor_name())?;
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
    let f = op.scalar().entry(rt.api());
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
    let f = entry(f, name)?;
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
    let (name, f) = op!(rt, s_where)?;
    two_stage(rt, name, f.launch, |ws, ex| {
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
    let (name, f) = op!(rt, inplace_masked_fill_scalar)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype `(selfRef, mask, value, ws, executor)`;
        // handles are live; `self_ref` is a fresh output the caller owns.
        unsafe { (f.workspace)(self_ref.as_ptr(), mask.as_ptr(), value.as_ptr(), ws, ex) }
    })
}

/// `self_ref[..] = value` in place (`aclnnInplaceFillScalar`).
pub fn inplace_fill_scalar(rt: &Runtime, self_ref: &Tensor<'_>, value: &Scalar) -> Result<()> {
    let (name, f) = op!(rt, inplace_fill_scalar)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype `(selfRef, value, ws, executor)`; handles
        // are live; `self_ref` is a fresh output the caller owns.
        unsafe { (f.workspace)(self_ref.as_ptr(), value.as_ptr(), ws, ex) }
    })
}

/// `out = !self` (`aclnnLogicalNot`), out BOOL.
pub fn logical_not(rt: &Runtime, a: &Tensor<'_>, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, logical_not)?;
    two_stage(rt, name, f.launch, |ws, ex| {
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
    let (name, f) = if and {
        op!(rt, logical_and)?
    } else {
        op!(rt, logical_or)?
    };
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, other, out, ws, executor)`; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = (dtype) self` (`aclnnCast`); `dtype` is `out`'s.
pub fn cast(rt: &Runtime, a: &Tensor<'_>, dtype: DataType, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, cast)?;
    two_stage(rt, name, f.launch, |ws, ex| {
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
    let (name, f) = if max {
        op!(rt, max_dim)?
    } else {
        op!(rt, min_dim)?
    };
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
    let (name, f) = if max {
        op!(rt, arg_max)?
    } else {
        op!(rt, arg_min)?
    };
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
    let (name, f) = if max { op!(rt, amax)? } else { op!(rt, amin)? };
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(self, dim, keepDim, out, ws, executor)`.
        unsafe { (f.workspace)(a.as_ptr(), dims.as_ptr(), keep_dim, out.as_ptr(), ws, ex) }
    })
}

/// GeLU (`aclnnGeluV2`): `approximate` 0 = exact (erf), 1 = tanh.
pub fn gelu_v2(rt: &Runtime, x: &Tensor<'_>, approximate: i64, y: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, gelu_v2)?;
    two_stage(rt, name, f.launch, |ws, ex| {
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
    let f = rt.api().pow_tensor_scalar;
    scalar_op(rt, names::pow_tensor_scalar, f, a, exponent, out)
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
    let e = rt.api();
    match (min, max) {
        (Some(lo), Some(hi)) => {
            let (name, f) = op!(rt, clamp)?;
            two_stage(rt, name, f.launch, |ws, ex| {
                // SAFETY: the arguments follow `(self, clipValueMin, clipValueMax, out, ws,
                // executor)`; handles are live.
                unsafe { (f.workspace)(a.as_ptr(), lo.as_ptr(), hi.as_ptr(), out.as_ptr(), ws, ex) }
            })
        }
        (Some(lo), None) => scalar_op(rt, names::clamp_min, e.clamp_min, a, lo, out),
        (None, Some(hi)) => scalar_op(rt, names::clamp_max, e.clamp_max, a, hi, out),
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
    let (name, f) = op!(rt, inplace_uniform)?;
    two_stage(rt, name, f.launch, |ws, ex| {
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
    let (name, f) = op!(rt, inplace_normal)?;
    two_stage(rt, name, f.launch, |ws, ex| {
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
    let (name, f) = op!(rt, inplace_bernoulli)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(selfRef, prob, seed, offset, ws, executor)`.
        unsafe { (f.workspace)(self_ref.as_ptr(), prob.as_ptr(), seed, offset, ws, ex) }
    })
}
