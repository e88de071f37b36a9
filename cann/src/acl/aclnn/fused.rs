//! The fused transformer ops (one call each where a composite would take several): `aclnnRmsNorm`,
//! `aclnnRmsNormGrad`, `aclnnRotaryPositionEmbedding`, `aclnnRotaryPositionEmbeddingGrad`,
//! `aclnnSwiGlu`, `aclnnSwiGluGrad`, `aclnnCrossEntropyLoss` and `aclnnCrossEntropyLossGrad`, one
//! function each, arguments in prototype order, via [`two_stage`].

use super::call::{attr, cptr, t, two_stage};
use crate::acl::error::Result;
use crate::acl::runtime::Runtime;
use crate::acl::tensor::Tensor;

/// `aclnnRmsNorm`: `yOut = x · rstdOut · gamma`, `rstdOut = 1 / sqrt(mean(x²) + epsilon)`.
pub fn rms_norm(
    rt: &Runtime,
    x: &Tensor<'_>,
    gamma: &Tensor<'_>,
    epsilon: f64,
    y_out: &Tensor<'_>,
    rstd_out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, rms_norm)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(x, gamma, epsilon, yOut, rstdOut, workspaceSize,
        // executor)`; handles are live for the call.
        unsafe {
            (f.workspace)(
                x.as_ptr(),
                gamma.as_ptr(),
                epsilon,
                y_out.as_ptr(),
                rstd_out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `aclnnRmsNormGrad`: `dxOut` and `dgammaOut` from `dy`, `x`, the forward's `rstd` and
/// `gamma`.
pub fn rms_norm_grad(
    rt: &Runtime,
    dy: &Tensor<'_>,
    x: &Tensor<'_>,
    rstd: &Tensor<'_>,
    gamma: &Tensor<'_>,
    dx_out: &Tensor<'_>,
    dgamma_out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, rms_norm_grad)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(dy, x, rstd, gamma, dxOut, dgammaOut, workspaceSize,
        // executor)`; handles are live for the call.
        unsafe {
            (f.workspace)(
                dy.as_ptr(),
                x.as_ptr(),
                rstd.as_ptr(),
                gamma.as_ptr(),
                dx_out.as_ptr(),
                dgamma_out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `aclnnRotaryPositionEmbedding`: `out = x·cos + rotate(x)·sin` (`mode` 0 half, 1 interleave).
pub fn rotary_position_embedding(
    rt: &Runtime,
    x: &Tensor<'_>,
    cos: &Tensor<'_>,
    sin: &Tensor<'_>,
    mode: i64,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, rotary_position_embedding)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(x, cos, sin, mode, out, workspaceSize, executor)`;
        // handles are live for the call.
        unsafe {
            (f.workspace)(
                x.as_ptr(),
                cos.as_ptr(),
                sin.as_ptr(),
                mode,
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// Arguments of `aclnnRotaryPositionEmbeddingGrad`, in prototype order.
pub struct RotaryPositionEmbeddingGradArgs<'a> {
    pub dy: &'a Tensor<'a>,
    pub cos: &'a Tensor<'a>,
    pub sin: &'a Tensor<'a>,
    /// The forward's `x`; `None` computes `dxOut` only.
    pub x_optional: Option<&'a Tensor<'a>>,
    pub mode: i64,
    pub dx_out: &'a Tensor<'a>,
    /// Shaped as `cos` with `x_optional`, empty (e.g. `[1, 1, 1, 0]`) without.
    pub dcos_out: &'a Tensor<'a>,
    /// As `dcos_out`.
    pub dsin_out: &'a Tensor<'a>,
}

/// `aclnnRotaryPositionEmbeddingGrad`: `dxOut` (and `dcosOut` / `dsinOut` given `xOptional`).
pub fn rotary_position_embedding_grad(
    rt: &Runtime,
    a: &RotaryPositionEmbeddingGradArgs<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, rotary_position_embedding_grad)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnRotaryPositionEmbeddingGradGetWorkspaceSize's
        // prototype; handles are live for the call.
        unsafe {
            (f.workspace)(
                a.dy.as_ptr(),
                a.cos.as_ptr(),
                a.sin.as_ptr(),
                t(a.x_optional),
                a.mode,
                a.dx_out.as_ptr(),
                a.dcos_out.as_ptr(),
                a.dsin_out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `aclnnSwiGlu`: `out = silu(A) · B`, `A`, `B` the halves of `x` along `dim_optional`.
pub fn swi_glu(rt: &Runtime, x: &Tensor<'_>, dim_optional: i64, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, swi_glu)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(x, dimOptional, out, workspaceSize, executor)`.
        unsafe { (f.workspace)(x.as_ptr(), dim_optional, out.as_ptr(), ws, ex) }
    })
}

/// `aclnnSwiGluGrad`: `out` (shaped as `x`) from `yGrad` and `x`.
pub fn swi_glu_grad(
    rt: &Runtime,
    y_grad: &Tensor<'_>,
    x: &Tensor<'_>,
    dim_optional: i64,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, swi_glu_grad)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow `(yGrad, x, dimOptional, out, workspaceSize, executor)`.
        unsafe {
            (f.workspace)(
                y_grad.as_ptr(),
                x.as_ptr(),
                dim_optional,
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// Arguments of `aclnnCrossEntropyLoss`, in prototype order.
pub struct CrossEntropyLossArgs<'a> {
    pub input: &'a Tensor<'a>,
    pub target: &'a Tensor<'a>,
    pub weight_optional: Option<&'a Tensor<'a>>,
    /// `"mean"`, `"sum"` or `"none"`.
    pub reduction_optional: &'a str,
    pub ignore_index: i64,
    pub label_smoothing: f64,
    pub lse_square_scale_for_zloss: f64,
    pub return_zloss: bool,
    pub loss_out: &'a Tensor<'a>,
    pub log_prob_out: &'a Tensor<'a>,
    pub zloss_out: &'a Tensor<'a>,
    pub lse_for_zloss_out: &'a Tensor<'a>,
}

/// `aclnnCrossEntropyLoss`: the loss and the log-softmax in one pass.
pub fn cross_entropy_loss(rt: &Runtime, a: &CrossEntropyLossArgs<'_>) -> Result<()> {
    let (name, f) = op!(rt, cross_entropy_loss)?;
    let reduction = attr("reductionOptional", a.reduction_optional)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnCrossEntropyLossGetWorkspaceSize's prototype;
        // handles and the attribute string are live for the call.
        unsafe {
            (f.workspace)(
                a.input.as_ptr(),
                a.target.as_ptr(),
                t(a.weight_optional),
                cptr(&reduction),
                a.ignore_index,
                a.label_smoothing,
                a.lse_square_scale_for_zloss,
                a.return_zloss,
                a.loss_out.as_ptr(),
                a.log_prob_out.as_ptr(),
                a.zloss_out.as_ptr(),
                a.lse_for_zloss_out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// Arguments of `aclnnCrossEntropyLossGrad`, in prototype order.
pub struct CrossEntropyLossGradArgs<'a> {
    pub grad_loss: &'a Tensor<'a>,
    pub log_prob: &'a Tensor<'a>,
    pub target: &'a Tensor<'a>,
    pub weight_optional: Option<&'a Tensor<'a>>,
    pub grad_zloss_optional: Option<&'a Tensor<'a>>,
    pub lse_for_zloss_optional: Option<&'a Tensor<'a>>,
    /// `"mean"`, `"sum"` or `"none"`.
    pub reduction_optional: &'a str,
    pub ignore_index: i64,
    pub label_smoothing: f64,
    pub lse_square_scale_for_zloss: f64,
    pub out: &'a Tensor<'a>,
}

/// `aclnnCrossEntropyLossGrad`: the input's gradient from `logProb` in one pass.
pub fn cross_entropy_loss_grad(rt: &Runtime, a: &CrossEntropyLossGradArgs<'_>) -> Result<()> {
    let (name, f) = op!(rt, cross_entropy_loss_grad)?;
    let reduction = attr("reductionOptional", a.reduction_optional)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnCrossEntropyLossGradGetWorkspaceSize's prototype;
        // handles and the attribute string are live for the call.
        unsafe {
            (f.workspace)(
                a.grad_loss.as_ptr(),
                a.log_prob.as_ptr(),
                a.target.as_ptr(),
                t(a.weight_optional),
                t(a.grad_zloss_optional),
                t(a.lse_for_zloss_optional),
                cptr(&reduction),
                a.ignore_index,
                a.label_smoothing,
                a.lse_square_scale_for_zloss,
                a.out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}
