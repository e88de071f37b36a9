//! The prototype of `aclnnGroupedMatmulV4` (ops-transformer
//! `gmm/grouped_matmul/op_host/op_api/aclnn_grouped_matmul_v4.h`, the version torch_npu's
//! `npu_grouped_matmul` and MindSpeed's `npu_gmm` call); every integer has the header's width.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnGroupedMatmulV4GetWorkspaceSize(const aclTensorList *x, const aclTensorList *weight,
    /// const aclTensorList *biasOptional, const aclTensorList *scaleOptional,
    /// const aclTensorList *offsetOptional, const aclTensorList *antiquantScaleOptional,
    /// const aclTensorList *antiquantOffsetOptional, const aclTensorList *perTokenScaleOptional,
    /// const aclTensor *groupListOptional, const aclTensorList *activationInputOptional,
    /// const aclTensorList *activationQuantScaleOptional,
    /// const aclTensorList *activationQuantOffsetOptional, int64_t splitItem, int64_t groupType,
    /// int64_t groupListType, int64_t actType, aclTensorList *out,
    /// aclTensorList *activationFeatureOutOptional, aclTensorList *dynQuantScaleOutOptional,
    /// uint64_t *workspaceSize, aclOpExecutor **executor)`.
    GroupedMatmulV4Ws, GroupedMatmulV4Params(
        x: TL,
        weight: TL,
        bias: TL,
        scale: TL,
        offset: TL,
        antiquant_scale: TL,
        antiquant_offset: TL,
        per_token_scale: TL,
        group_list: T,
        activation_input: TL,
        activation_quant_scale: TL,
        activation_quant_offset: TL,
        split_item: i64,
        group_type: i64,
        group_list_type: i64,
        act_type: i64,
        out: TL,
        activation_feature_out: TL,
        dyn_quant_scale_out: TL,
        workspace_size: Ws,
        executor: Ex,
    )
}
