//! Prototypes of the elementwise, comparison, mask, cast, reduction, activation and random
//! aclnn ops the Burn backend calls (issue 6), and [`ElementwiseApi`], their part of the
//! function table. Copied from CANN's `aclnnop/*.h` headers / the `hicann/ops-math` and
//! `hicann/ops-nn` docs; every integer has the header's width. Ops whose prototype equals one
//! already declared in [`super`] reuse it:
//! - `(self, other, out)` ([`BinaryWs`]): `aclnnEqTensor`, `aclnnNeTensor`, `aclnnGtTensor`,
//!   `aclnnGeTensor`, `aclnnLtTensor`, `aclnnLeTensor`, `aclnnLogicalAnd`, `aclnnLogicalOr`;
//! - `(self, const aclScalar *other, out)` ([`ScalarWs`]): `aclnnEqScalar`, `aclnnNeScalar`,
//!   `aclnnGtScalar`, `aclnnGeScalar`, `aclnnLtScalar`, `aclnnLeScalar`,
//!   `aclnnClampMin(self, clipValueMin, out)`, `aclnnClampMax(self, clipValueMax, out)`,
//!   `aclnnPowTensorScalar(self, exponent, out)`;
//! - `(self, out)` ([`UnaryWs`]): `aclnnRelu`, `aclnnSigmoid`, `aclnnNeg`,
//!   `aclnnReciprocal`, `aclnnSin`, `aclnnCos`, `aclnnErf`, `aclnnLogicalNot`.

use super::{AclIntArray, AclOpExecutor};
use super::{AclScalar, AclStatus, AclTensor, BinaryWs, OpFns, ScalarWs, UnaryWs};

type T = *const AclTensor;
type Ws = *mut u64;
type Ex = *mut *mut AclOpExecutor;

/// `aclnnSWhereGetWorkspaceSize(const aclTensor *condition, const aclTensor *self,
/// const aclTensor *other, aclTensor *out, …)`: `out = condition ? self : other`, broadcasting.
pub type SWhereWs = unsafe extern "C" fn(
    condition: T,
    self_: T,
    other: T,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnInplaceMaskedFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclTensor *mask,
/// const aclScalar *value, …)`. CANN has no out-of-place `aclnnMaskedFillScalar`.
pub type InplaceMaskedFillScalarWs = unsafe extern "C" fn(
    self_ref: T,
    mask: T,
    value: *const AclScalar,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnCastGetWorkspaceSize(const aclTensor *self, const aclDataType dtype, aclTensor *out,
/// …)`.
pub type CastWs = unsafe extern "C" fn(
    self_: T,
    dtype: i32,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnMaxDimGetWorkspaceSize` / `aclnnMinDimGetWorkspaceSize`: `(const aclTensor *self,
/// int64_t dim, bool keepdim, aclTensor *out, aclTensor *indices, …)`.
pub type DimWithIndicesWs = unsafe extern "C" fn(
    self_: T,
    dim: i64,
    keepdim: bool,
    out: T,
    indices: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnArgMaxGetWorkspaceSize` / `aclnnArgMinGetWorkspaceSize`: `(const aclTensor *self,
/// int64_t dim, bool keepdim, aclTensor *out, …)`.
pub type ArgWs = unsafe extern "C" fn(
    self_: T,
    dim: i64,
    keepdim: bool,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnAmaxGetWorkspaceSize` / `aclnnAminGetWorkspaceSize`: `(const aclTensor *self,
/// const aclIntArray *dim, bool keepDim, aclTensor *out, …)`.
pub type AmaxWs = unsafe extern "C" fn(
    self_: T,
    dim: *const AclIntArray,
    keep_dim: bool,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y, …)`:
/// `approximate` 0 is the exact erf form (Burn's `gelu`), 1 the tanh approximation. (Plain
/// `aclnnGelu` has no such switch, so it is not used.)
pub type GeluV2Ws = unsafe extern "C" fn(
    x: T,
    approximate: i64,
    y: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnClampGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMin,
/// const aclScalar *clipValueMax, aclTensor *out, …)`.
pub type ClampWs = unsafe extern "C" fn(
    self_: T,
    clip_value_min: *const AclScalar,
    clip_value_max: *const AclScalar,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnInplaceUniformGetWorkspaceSize(const aclTensor *selfRef, double from, double to,
/// uint64_t seed, uint64_t offset, …)`: fills `[from, to)`.
pub type InplaceUniformWs = unsafe extern "C" fn(
    self_ref: T,
    from: f64,
    to: f64,
    seed: u64,
    offset: u64,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnInplaceNormalGetWorkspaceSize(const aclTensor *selfRef, float mean, float std,
/// int64_t seed, int64_t offset, …)`.
pub type InplaceNormalWs = unsafe extern "C" fn(
    self_ref: T,
    mean: f32,
    std: f32,
    seed: i64,
    offset: i64,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnInplaceBernoulliGetWorkspaceSize(const aclTensor *selfRef, const aclScalar *prob,
/// int64_t seed, int64_t offset, …)`: fills 0/1 with `P(1) = prob`.
pub type InplaceBernoulliWs = unsafe extern "C" fn(
    self_ref: T,
    prob: *const AclScalar,
    seed: i64,
    offset: i64,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// The elementwise part of [`super::AclApi`]: each op optional, as the others.
#[derive(Clone, Copy)]
pub struct ElementwiseApi {
    pub eq_tensor: Option<OpFns<BinaryWs>>,
    pub ne_tensor: Option<OpFns<BinaryWs>>,
    pub gt_tensor: Option<OpFns<BinaryWs>>,
    pub ge_tensor: Option<OpFns<BinaryWs>>,
    pub lt_tensor: Option<OpFns<BinaryWs>>,
    pub le_tensor: Option<OpFns<BinaryWs>>,
    pub eq_scalar: Option<OpFns<ScalarWs>>,
    pub ne_scalar: Option<OpFns<ScalarWs>>,
    pub gt_scalar: Option<OpFns<ScalarWs>>,
    pub ge_scalar: Option<OpFns<ScalarWs>>,
    pub lt_scalar: Option<OpFns<ScalarWs>>,
    pub le_scalar: Option<OpFns<ScalarWs>>,
    pub s_where: Option<OpFns<SWhereWs>>,
    pub inplace_masked_fill_scalar: Option<OpFns<InplaceMaskedFillScalarWs>>,
    pub logical_not: Option<OpFns<UnaryWs>>,
    pub logical_and: Option<OpFns<BinaryWs>>,
    pub logical_or: Option<OpFns<BinaryWs>>,
    pub cast: Option<OpFns<CastWs>>,
    pub max_dim: Option<OpFns<DimWithIndicesWs>>,
    pub min_dim: Option<OpFns<DimWithIndicesWs>>,
    pub arg_max: Option<OpFns<ArgWs>>,
    pub arg_min: Option<OpFns<ArgWs>>,
    pub amax: Option<OpFns<AmaxWs>>,
    pub amin: Option<OpFns<AmaxWs>>,
    pub relu: Option<OpFns<UnaryWs>>,
    pub gelu_v2: Option<OpFns<GeluV2Ws>>,
    pub sigmoid: Option<OpFns<UnaryWs>>,
    pub neg: Option<OpFns<UnaryWs>>,
    pub reciprocal: Option<OpFns<UnaryWs>>,
    pub sin: Option<OpFns<UnaryWs>>,
    pub cos: Option<OpFns<UnaryWs>>,
    pub erf: Option<OpFns<UnaryWs>>,
    pub pow_tensor_scalar: Option<OpFns<ScalarWs>>,
    pub clamp: Option<OpFns<ClampWs>>,
    pub clamp_min: Option<OpFns<ScalarWs>>,
    pub clamp_max: Option<OpFns<ScalarWs>>,
    pub inplace_uniform: Option<OpFns<InplaceUniformWs>>,
    pub inplace_normal: Option<OpFns<InplaceNormalWs>>,
    pub inplace_bernoulli: Option<OpFns<InplaceBernoulliWs>>,
}

impl ElementwiseApi {
    /// `(aclnn name, present)` for each op of the table.
    pub fn presence(&self) -> Vec<(&'static str, bool)> {
        vec![
            ("aclnnEqTensor", self.eq_tensor.is_some()),
            ("aclnnNeTensor", self.ne_tensor.is_some()),
            ("aclnnGtTensor", self.gt_tensor.is_some()),
            ("aclnnGeTensor", self.ge_tensor.is_some()),
            ("aclnnLtTensor", self.lt_tensor.is_some()),
            ("aclnnLeTensor", self.le_tensor.is_some()),
            ("aclnnEqScalar", self.eq_scalar.is_some()),
            ("aclnnNeScalar", self.ne_scalar.is_some()),
            ("aclnnGtScalar", self.gt_scalar.is_some()),
            ("aclnnGeScalar", self.ge_scalar.is_some()),
            ("aclnnLtScalar", self.lt_scalar.is_some()),
            ("aclnnLeScalar", self.le_scalar.is_some()),
            ("aclnnSWhere", self.s_where.is_some()),
            (
                "aclnnInplaceMaskedFillScalar",
                self.inplace_masked_fill_scalar.is_some(),
            ),
            ("aclnnLogicalNot", self.logical_not.is_some()),
            ("aclnnLogicalAnd", self.logical_and.is_some()),
            ("aclnnLogicalOr", self.logical_or.is_some()),
            ("aclnnCast", self.cast.is_some()),
            ("aclnnMaxDim", self.max_dim.is_some()),
            ("aclnnMinDim", self.min_dim.is_some()),
            ("aclnnArgMax", self.arg_max.is_some()),
            ("aclnnArgMin", self.arg_min.is_some()),
            ("aclnnAmax", self.amax.is_some()),
            ("aclnnAmin", self.amin.is_some()),
            ("aclnnRelu", self.relu.is_some()),
            ("aclnnGeluV2", self.gelu_v2.is_some()),
            ("aclnnSigmoid", self.sigmoid.is_some()),
            ("aclnnNeg", self.neg.is_some()),
            ("aclnnReciprocal", self.reciprocal.is_some()),
            ("aclnnSin", self.sin.is_some()),
            ("aclnnCos", self.cos.is_some()),
            ("aclnnErf", self.erf.is_some()),
            ("aclnnPowTensorScalar", self.pow_tensor_scalar.is_some()),
            ("aclnnClamp", self.clamp.is_some()),
            ("aclnnClampMin", self.clamp_min.is_some()),
            ("aclnnClampMax", self.clamp_max.is_some()),
            ("aclnnInplaceUniform", self.inplace_uniform.is_some()),
            ("aclnnInplaceNormal", self.inplace_normal.is_some()),
            ("aclnnInplaceBernoulli", self.inplace_bernoulli.is_some()),
        ]
    }
}

impl std::fmt::Debug for ElementwiseApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let present: Vec<&str> = self
            .presence()
            .into_iter()
            .filter_map(|(n, p)| p.then_some(n))
            .collect();
        f.debug_struct("ElementwiseApi")
            .field("present", &present)
            .finish()
    }
}
