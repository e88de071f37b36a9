//! The prototype of `aclnnMoeGatingTopKSoftmaxV2` (ops-transformer
//! `moe/moe_gating_top_k_softmax_v2/docs/aclnnMoeGatingTopKSoftmaxV2.md`, what torch_npu's
//! `npu_moe_gating_top_k_softmax_v2` calls); every integer has the header's width.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnMoeGatingTopKSoftmaxV2GetWorkspaceSize(const aclTensor *x,
    /// const aclTensor *finishedOptional, int64_t k, int64_t renorm,
    /// bool outputSoftmaxResultFlag, const aclTensor *yOut, const aclTensor *expertIdxOut,
    /// const aclTensor *softmaxResultOutOptional, uint64_t *workspaceSize,
    /// aclOpExecutor **executor)`.
    MoeGatingTopKSoftmaxV2Ws, MoeGatingTopKSoftmaxV2Params(
        x: T,
        finished: T,
        k: i64,
        renorm: i64,
        output_softmax_result_flag: bool,
        y_out: T,
        expert_idx_out: T,
        softmax_result_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}
