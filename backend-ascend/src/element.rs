//! Element types: which Burn dtypes map to which `aclDataType`.

use burn_backend::DType;

pub use burn_ascend_ops::host::acl_dtype;

/// Whether aclnn's float kernels (and the simulation's) take this dtype.
pub fn is_acl_float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}
