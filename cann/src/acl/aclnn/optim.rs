//! The optimizer ops (the whole AdamW update in one launch): `aclnnApplyAdamWV2`, arguments in
//! prototype order, via [`two_stage`].

use super::call::{t, two_stage};
use crate::acl::error::Result;
use crate::acl::runtime::Runtime;
use crate::acl::tensor::Tensor;

/// Arguments of `aclnnApplyAdamWV2`, in prototype order.
pub struct ApplyAdamWV2Args<'a> {
    /// The parameter, updated in place.
    pub var_ref: &'a Tensor<'a>,
    /// The first moment, updated in place.
    pub m_ref: &'a Tensor<'a>,
    /// The second moment, updated in place.
    pub v_ref: &'a Tensor<'a>,
    /// AMSGrad's running maximum of `v` (required with `amsgrad`).
    pub max_grad_norm_optional_ref: Option<&'a Tensor<'a>>,
    pub grad: &'a Tensor<'a>,
    /// One element, INT64 or FLOAT32: the 1-based step.
    pub step: &'a Tensor<'a>,
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub weight_decay: f32,
    pub eps: f32,
    pub amsgrad: bool,
    pub maximize: bool,
}

/// `aclnnApplyAdamWV2`: one AdamW step of `varRef`, `mRef`, `vRef` in place.
pub fn apply_adam_w_v2(rt: &Runtime, a: &ApplyAdamWV2Args<'_>) -> Result<()> {
    let (name, f) = op!(rt, apply_adam_w_v2)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnApplyAdamWV2GetWorkspaceSize's prototype; handles
        // are live for the call.
        unsafe {
            (f.workspace)(
                a.var_ref.as_ptr(),
                a.m_ref.as_ptr(),
                a.v_ref.as_ptr(),
                t(a.max_grad_norm_optional_ref),
                a.grad.as_ptr(),
                a.step.as_ptr(),
                a.lr,
                a.beta1,
                a.beta2,
                a.weight_decay,
                a.eps,
                a.amsgrad,
                a.maximize,
                ws,
                ex,
            )
        }
    })
}
