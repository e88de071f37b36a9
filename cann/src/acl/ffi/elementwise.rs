//! Prototypes of the elementwise, comparison, mask, cast, reduction, activation and random
//! aclnn ops the Burn backend calls natively. Copied from CANN's `aclnnop/*.h` headers / the
//! `hicann/ops-math` and `hicann/ops-nn` docs; every integer has the header's width. Ops whose
//! prototype equals one already declared in [`super`] reuse it ([`super::BinaryWs`]
//! `(self, other, out)`, [`super::ScalarWs`] `(self, const aclScalar *other, out)`,
//! [`super::UnaryWs`] `(self, out)`); which op takes which is listed in [`super::table`].

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnSWhereGetWorkspaceSize(const aclTensor *condition, const aclTensor *self, const
    /// aclTensor *other, aclTensor *out, …)`: `out = condition ? self : other`, broadcasting.
    SWhereWs, SWhereParams(
        condition: T,
        self_: T,
        other: T,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnInplaceMaskedFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclTensor *mask,
    /// const aclScalar *value, …)`. CANN has no out-of-place `aclnnMaskedFillScalar`.
    InplaceMaskedFillScalarWs, InplaceMaskedFillScalarParams(
        self_ref: T,
        mask: T,
        value: *const AclScalar,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclScalar *value, …)`.
    InplaceFillScalarWs, InplaceFillScalarParams(
        self_ref: T,
        value: *const AclScalar,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnCastGetWorkspaceSize(const aclTensor *self, const aclDataType dtype, aclTensor *out,
    /// …)`.
    CastWs, CastParams(
        self_: T,
        dtype: i32,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnMaxDimGetWorkspaceSize` / `aclnnMinDimGetWorkspaceSize`: `(const aclTensor *self,
    /// int64_t dim, bool keepdim, aclTensor *out, aclTensor *indices, …)`.
    DimWithIndicesWs, DimWithIndicesParams(
        self_: T,
        dim: i64,
        keepdim: bool,
        out: T,
        indices: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnArgMaxGetWorkspaceSize` / `aclnnArgMinGetWorkspaceSize`: `(const aclTensor *self,
    /// int64_t dim, bool keepdim, aclTensor *out, …)`.
    ArgWs, ArgParams(
        self_: T,
        dim: i64,
        keepdim: bool,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnAmaxGetWorkspaceSize` / `aclnnAminGetWorkspaceSize`: `(const aclTensor *self,
    /// const aclIntArray *dim, bool keepDim, aclTensor *out, …)`.
    AmaxWs, AmaxParams(
        self_: T,
        dim: IA,
        keep_dim: bool,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y, …)`:
    /// `approximate` 0 is the exact erf form (Burn's `gelu`), 1 the tanh approximation. (Plain
    /// `aclnnGelu` has no such switch, so it is not used.)
    GeluV2Ws, GeluV2Params(
        x: T,
        approximate: i64,
        y: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnClampGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMin,
    /// const aclScalar *clipValueMax, aclTensor *out, …)`.
    ClampWs, ClampParams(
        self_: T,
        clip_value_min: *const AclScalar,
        clip_value_max: *const AclScalar,
        out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnInplaceUniformGetWorkspaceSize(const aclTensor *selfRef, double from, double to,
    /// uint64_t seed, uint64_t offset, …)`: fills `[from, to)`.
    InplaceUniformWs, InplaceUniformParams(
        self_ref: T,
        from: f64,
        to: f64,
        seed: u64,
        offset: u64,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnInplaceNormalGetWorkspaceSize(const aclTensor *selfRef, float mean, float std,
    /// int64_t seed, int64_t offset, …)`.
    InplaceNormalWs, InplaceNormalParams(
        self_ref: T,
        mean: f32,
        std: f32,
        seed: i64,
        offset: i64,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnInplaceBernoulliGetWorkspaceSize(const aclTensor *selfRef, const aclScalar *prob,
    /// int64_t seed, int64_t offset, …)`: fills 0/1 with `P(1) = prob`.
    InplaceBernoulliWs, InplaceBernoulliParams(
        self_ref: T,
        prob: *const AclScalar,
        seed: i64,
        offset: i64,
        workspace_size: Ws,
        executor: Ex,
    )
}
