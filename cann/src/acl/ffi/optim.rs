//! Prototypes of the optimizer ops (AdamW in one launch), from CANN's `aclnnop` headers as
//! `hicann/ops-nn` gives them (`optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md`, the header
//! `aclnn_apply_adam_w_v2.h`); every integer has the header's width, checked against the headers by
//! `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnApplyAdamWV2GetWorkspaceSize(aclTensor *varRef, aclTensor *mRef, aclTensor *vRef,
    /// aclTensor *maxGradNormOptionalRef, const aclTensor *grad, const aclTensor *step, float lr,
    /// float beta1, float beta2, float weightDecay, float eps, bool amsgrad, bool maximize, …)`:
    /// `varRef`, `mRef`, `vRef` (and `maxGradNormOptionalRef` with `amsgrad`) are updated in place;
    /// `step` is a one-element INT64 or FLOAT32 tensor.
    ApplyAdamWV2Ws, ApplyAdamWV2Params(
        var_ref: T,
        m_ref: T,
        v_ref: T,
        max_grad_norm_optional_ref: T,
        grad: T,
        step: T,
        lr: f32,
        beta1: f32,
        beta2: f32,
        weight_decay: f32,
        eps: f32,
        amsgrad: bool,
        maximize: bool,
        workspace_size: Ws,
        executor: Ex,
    )
}
