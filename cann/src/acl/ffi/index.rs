//! The prototypes of the indexing and layout ops.
//! Copied from the aclnn docs and headers named per prototype; every integer has the header's
//! width, checked against CANN's headers by `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor
    /// *index, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)` and
    /// `aclnnGatherGetWorkspaceSize(const aclTensor *self, const int64_t dim, const aclTensor
    /// *index, aclTensor *out, …)` (aclnn_index_select.h, aclnn_gather.h).
    IndexDimWs, IndexDimParams(
        self_: T,
        dim: i64,
        index: T,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnIndexAddGetWorkspaceSize(const aclTensor *self, const int64_t dim,
    /// const aclTensor *index, const aclTensor *source, const aclScalar *alpha, aclTensor *out,
    /// uint64_t *workspaceSize, aclOpExecutor **executor)` (aclnn_index_add.h).
    IndexAddWs, IndexAddParams(
        self_: T,
        dim: i64,
        index: T,
        source: T,
        alpha: *const AclScalar,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnScatterAddGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
    /// const aclTensor *src, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)`
    /// (aclnn_scatter_add.h).
    ScatterAddWs, ScatterAddParams(
        self_: T,
        dim: i64,
        index: T,
        src: T,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnCatGetWorkspaceSize(const aclTensorList *tensors, int64_t dim, aclTensor *out,
    /// uint64_t *workspaceSize, aclOpExecutor **executor)` (aclnn_cat.h).
    CatWs, CatParams(
        tensors: TL,
        dim: i64,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src,
    /// uint64_t *workspaceSize, aclOpExecutor **executor)` (aclnn_copy.h): `selfRef` (any view,
    /// strided) receives `src`, broadcast to its shape.
    InplaceCopyWs, InplaceCopyParams(
        self_ref: T,
        src: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnRepeatGetWorkspaceSize(const aclTensor *self, const aclIntArray *repeats,
    /// aclTensor *out, …)` and `aclnnFlipGetWorkspaceSize(const aclTensor *self,
    /// const aclIntArray *dims, aclTensor *out, …)` (aclnn_repeat.h, aclnn_flip.h).
    TensorIntArrayWs, TensorIntArrayParams(
        self_: T,
        array: IA,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}
