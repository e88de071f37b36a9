//! The prototypes of the arithmetic, matmul, unary math and reduction ops; ops of one shape share
//! one prototype (which op takes which is listed in [`super::table`]). Copied from the aclnn docs
//! and headers named per prototype; every integer has the header's width, checked against CANN's
//! headers by `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnAddGetWorkspaceSize` / `aclnnSubGetWorkspaceSize`: `(const aclTensor *self,
    /// const aclTensor *other, const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize,
    /// aclOpExecutor **executor)`; `out = self ± alpha·other`, broadcasting.
    BinaryAlphaWs, BinaryAlphaParams(
        self_: T,
        other: T,
        alpha: *const AclScalar,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnMulGetWorkspaceSize` / `aclnnDivGetWorkspaceSize`: `(const aclTensor *self,
    /// const aclTensor *other, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)`.
    BinaryWs, BinaryParams(
        self_: T,
        other: T,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
    /// int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)`; batch dims
    /// broadcast.
    MatmulWs, MatmulParams(
        self_: T,
        mat2: T,
        out: T,
        cube_math_type: i8,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// A unary elementwise op, e.g. `aclnnExpGetWorkspaceSize(const aclTensor *self,
    /// aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)`.
    UnaryWs, UnaryParams(
        self_: T,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnAddsGetWorkspaceSize` / `aclnnSubsGetWorkspaceSize`: `(const aclTensor *self,
    /// const aclScalar *other, const aclScalar *alpha, aclTensor *out, …)`.
    ScalarAlphaWs, ScalarAlphaParams(
        self_: T,
        other: *const AclScalar,
        alpha: *const AclScalar,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnMulsGetWorkspaceSize` / `aclnnDivsGetWorkspaceSize`: `(const aclTensor *self,
    /// const aclScalar *other, aclTensor *out, …)`.
    ScalarWs, ScalarParams(
        self_: T,
        other: *const AclScalar,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnReduceSumGetWorkspaceSize` / `aclnnMeanGetWorkspaceSize`: `(const aclTensor *self,
    /// const aclIntArray *dim, bool keepDim, aclDataType dtype, aclTensor *out, …)`.
    ReduceWs, ReduceParams(
        self_: T,
        dim: IA,
        keep_dim: bool,
        dtype: i32,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}
