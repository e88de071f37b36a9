//! Moving float tensors between a backend and host `Vec<f32>` (for the CPU kernels and for the
//! host-built masks and biases of the composite).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{BoolStore, DType, Shape, TensorData, TensorMetadata};
use burn_ascend_contract::DataType;

/// The tensor's values as f32, row-major.
pub fn to_vec<B: Backend>(t: FloatTensor<B>) -> Vec<f32> {
    let data = burn::tensor::try_read_sync(B::float_into_data(t))
        .expect("reading a tensor back to the host needs a synchronous backend")
        .expect("reading a tensor back to the host failed");
    data.convert::<f32>().into_vec::<f32>().expect("f32 data")
}

/// A float tensor from f32 values.
pub fn from_vec<B: Backend>(
    values: Vec<f32>,
    shape: &[usize],
    device: &B::Device,
) -> FloatTensor<B> {
    B::float_from_data(TensorData::new(values, Shape::from(shape.to_vec())), device)
}

/// The shape of a rank-`D` tensor.
pub fn dims<B: Backend, const D: usize>(t: &FloatTensor<B>) -> [usize; D] {
    t.shape().dims::<D>()
}

/// The `aclDataType` of a Burn dtype (the contract's element vocabulary); `None` for dtypes
/// aclnn has no type for (quantized, `Flex32`, non-native bool stores).
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
