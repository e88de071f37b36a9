//! The arithmetic, matmul, unary math and reduction calls of the Burn backend.

use super::call::entry;
use super::two_stage;
use crate::acl::error::Result;
use crate::acl::ffi::{BinaryAlphaWs, BinaryWs, DataType, OpFns, ScalarWs, UnaryWs};
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Scalar, Tensor};

/// `out = self + alpha·other` (`aclnnAdd`), broadcasting.
pub fn add(
    rt: &Runtime,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    alpha: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    binary_alpha(rt, op!(rt, add)?, (a, b, alpha, out))
}

/// `out = self - alpha·other` (`aclnnSub`), broadcasting.
pub fn sub(
    rt: &Runtime,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    alpha: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    binary_alpha(rt, op!(rt, sub)?, (a, b, alpha, out))
}

/// `aclnnAdd` / `aclnnSub`: one prototype, `(self, other, alpha, out)`.
fn binary_alpha(
    rt: &Runtime,
    (name, f): (&str, OpFns<BinaryAlphaWs>),
    (a, b, alpha, out): (&Tensor<'_>, &Tensor<'_>, &Scalar, &Tensor<'_>),
) -> Result<()> {
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype `(self, other, alpha, out, ws, executor)`;
        // handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), alpha.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self * other` (`aclnnMul`), broadcasting.
pub fn mul(rt: &Runtime, a: &Tensor<'_>, b: &Tensor<'_>, out: &Tensor<'_>) -> Result<()> {
    binary(rt, op!(rt, mul)?, a, b, out)
}

/// `out = self / other` (`aclnnDiv`), broadcasting.
pub fn div(rt: &Runtime, a: &Tensor<'_>, b: &Tensor<'_>, out: &Tensor<'_>) -> Result<()> {
    binary(rt, op!(rt, div)?, a, b, out)
}

/// `aclnnMul` / `aclnnDiv`: one prototype, `(self, other, out)`.
fn binary(
    rt: &Runtime,
    (name, f): (&str, OpFns<BinaryWs>),
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype `(self, other, out, ws, executor)`;
        // handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self @ mat2` (`aclnnMatmul`), batch dims broadcast. `cube_math_type`: 0 keeps the
/// dtype, 1 allows fp32→fp16, 2 fp32→hf32, 3 fp16/bf16 in fp32 (aclnn's `cubeMathType`).
pub fn matmul(
    rt: &Runtime,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    out: &Tensor<'_>,
    cube_math_type: i8,
) -> Result<()> {
    let (name, f) = op!(rt, matmul)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnMatmulGetWorkspaceSize's prototype; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), out.as_ptr(), cube_math_type, ws, ex) }
    })
}

/// `out = self + alpha·other` with a scalar `other` (`aclnnAdds`).
pub fn adds(
    rt: &Runtime,
    a: &Tensor<'_>,
    other: &Scalar,
    alpha: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, adds)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnAddsGetWorkspaceSize's prototype; handles are live.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                other.as_ptr(),
                alpha.as_ptr(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `out = self · other` with a scalar `other` (`aclnnMuls`).
pub fn muls(rt: &Runtime, a: &Tensor<'_>, other: &Scalar, out: &Tensor<'_>) -> Result<()> {
    tensor_scalar(rt, op!(rt, muls)?, a, other, out)
}

/// `out = self / other` with a scalar `other` (`aclnnDivs`).
pub fn divs(rt: &Runtime, a: &Tensor<'_>, other: &Scalar, out: &Tensor<'_>) -> Result<()> {
    tensor_scalar(rt, op!(rt, divs)?, a, other, out)
}

/// `aclnnMuls` / `aclnnDivs`: one prototype, `(self, other: scalar, out)`.
fn tensor_scalar(
    rt: &Runtime,
    (name, f): (&str, OpFns<ScalarWs>),
    a: &Tensor<'_>,
    other: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype `(self, other, out, ws, executor)`;
        // handles are live.
        unsafe { (f.workspace)(a.as_ptr(), other.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

op_enum! {
    /// The unary elementwise ops wired here.
    pub enum Unary(UnaryWs) {
        Exp => exp,
        Log => log,
        Sqrt => sqrt,
        Abs => abs,
        Tanh => tanh,
        Relu => relu,
        Sigmoid => sigmoid,
        Neg => neg,
        Reciprocal => reciprocal,
        Sin => sin,
        Cos => cos,
        Erf => erf,
    }
}

/// `out = op(self)` elementwise.
pub fn unary(rt: &Runtime, op: Unary, a: &Tensor<'_>, out: &Tensor<'_>) -> Result<()> {
    let f = entry(op.entry(rt.api()), op.name())?;
    two_stage(rt, op.name(), f.launch, |ws, ex| {
        // SAFETY: the arguments follow the unary prototype `(self, out, ws, executor)`.
        unsafe { (f.workspace)(a.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// Sum (`aclnnReduceSum`) or mean (`aclnnMean`) over `dims`, in `dtype`.
pub fn reduce(
    rt: &Runtime,
    mean: bool,
    a: &Tensor<'_>,
    dims: &IntArray,
    keep_dim: bool,
    dtype: DataType,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = if mean {
        op!(rt, mean)?
    } else {
        op!(rt, reduce_sum)?
    };
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the reduce prototype; handles are live.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                dims.as_ptr(),
                keep_dim,
                dtype.raw(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}
