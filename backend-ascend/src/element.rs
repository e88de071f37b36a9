//! Element types: which Burn dtypes map to which `aclDataType`.

use burn_ascend_kernels::acl::DataType;
use burn_backend::BoolStore;
use burn_backend::DType;

/// The `aclDataType` of a Burn dtype; `None` for dtypes aclnn has no type for (quantized,
/// `Flex32`, non-native bool stores).
pub fn acl_dtype(dtype: DType) -> Option<DataType> {
    Some(match dtype {
        DType::F64 => DataType::Double,
        DType::F32 => DataType::Float,
        DType::F16 => DataType::Float16,
        DType::BF16 => DataType::Bf16,
        DType::I64 => DataType::Int64,
        DType::I32 => DataType::Int32,
        DType::I16 => DataType::Int16,
        DType::I8 => DataType::Int8,
        DType::U64 => DataType::Uint64,
        DType::U32 => DataType::Uint32,
        DType::U16 => DataType::Uint16,
        DType::U8 => DataType::Uint8,
        DType::Bool(BoolStore::Native) => DataType::Bool,
        _ => return None,
    })
}

/// Whether aclnn's float kernels (and the simulation's) take this dtype.
pub fn is_acl_float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}
