//! Moving float tensors between a backend and host `Vec<f32>` (for the CPU kernels and for the
//! host-built masks and biases of the composite).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{BoolStore, DType, Shape, TensorData, TensorMetadata};
use burn_ascend_contract::DataType;

/// The tensor's values as f32, row-major.
pub fn to_vec<B: Backend>(t: FloatTensor<B>) -> Vec<f32> {
    let t = match ndarray_f32::<B>(t) {
        Ok(v) => return v,
        Err(t) => t,
    };
    let data = burn::tensor::try_read_sync(B::float_into_data(t))
        .expect("reading a tensor back to the host needs a synchronous backend")
        .expect("reading a tensor back to the host failed");
    data.convert::<f32>().into_vec::<f32>().expect("f32 data")
}

/// An f32 `NdArray` tensor's values read straight from its array: Burn's `into_data` copies an
/// array that autodiff also holds, or a strided view (a head split of a projection), one
/// element at a time through a dynamic-rank iterator, which made these reads half of a CPU
/// training step. Here a contiguous array is one `memcpy` and a strided one a copy per
/// innermost row. Any other tensor comes back unchanged.
fn ndarray_f32<B: Backend>(t: FloatTensor<B>) -> std::result::Result<Vec<f32>, FloatTensor<B>> {
    use burn::backend::ndarray::NdArrayTensor;
    use std::any::Any;
    let any: Box<dyn Any> = Box::new(t);
    let nd = match any.downcast::<NdArrayTensor>() {
        Ok(nd) => *nd,
        Err(any) => return Err(*any.downcast::<FloatTensor<B>>().expect("the same value")),
    };
    let NdArrayTensor::F32(storage) = nd else {
        let back: Box<dyn Any> = Box::new(nd);
        return Err(*back.downcast::<FloatTensor<B>>().expect("the same value"));
    };
    let view = storage.view();
    if let Some(slice) = view.as_slice() {
        return Ok(slice.to_vec());
    }
    let mut out = Vec::with_capacity(view.len());
    if view.ndim() == 0 {
        out.extend(view.iter().copied());
        return Ok(out);
    }
    for row in view.rows() {
        match row.as_slice() {
            Some(r) => out.extend_from_slice(r),
            None => out.extend(row.iter().copied()),
        }
    }
    Ok(out)
}

/// The tensor's f32 values, row-major, borrowed from its array when it is an `NdArray` f32
/// array in standard layout (an activation autodiff keeps for the backward is read where it
/// lies), else read with [`to_vec`].
pub fn host_f32<B: Backend>(t: &FloatTensor<B>) -> std::borrow::Cow<'_, [f32]> {
    use burn::backend::ndarray::NdArrayTensor;
    use std::any::Any;
    let any: &dyn Any = t;
    if let Some(NdArrayTensor::F32(storage)) = any.downcast_ref::<NdArrayTensor>() {
        if let Some(slice) = storage.view().to_slice() {
            return std::borrow::Cow::Borrowed(slice);
        }
    }
    std::borrow::Cow::Owned(to_vec::<B>(t.clone()))
}

/// `t` reshaped to `shape` (same element count), without a copy when it is an `NdArray` f32
/// array in standard layout: Burn's `NdArray` reshape copies every array (a view reshaped,
/// then made owned), which for a decode step's paged caches was a copy of every layer's
/// whole cache per token. Any other tensor takes the backend's reshape.
pub fn reshape<B: Backend>(t: FloatTensor<B>, shape: &[usize]) -> FloatTensor<B> {
    use burn::backend::ndarray::NdArrayTensor;
    use std::any::Any;
    let any: Box<dyn Any> = Box::new(t);
    let nd = match any.downcast::<NdArrayTensor>() {
        Ok(nd) => *nd,
        Err(any) => {
            let t = *any.downcast::<FloatTensor<B>>().expect("the same value");
            return B::float_reshape(t, Shape::from(shape.to_vec()));
        }
    };
    let back = |nd: NdArrayTensor| -> FloatTensor<B> {
        let any: Box<dyn Any> = Box::new(nd);
        *any.downcast::<FloatTensor<B>>().expect("the same value")
    };
    let NdArrayTensor::F32(storage) = nd else {
        return B::float_reshape(back(nd), Shape::from(shape.to_vec()));
    };
    let shared = storage.into_shared();
    if !shared.is_standard_layout() {
        return B::float_reshape(
            back(NdArrayTensor::from(shared)),
            Shape::from(shape.to_vec()),
        );
    }
    match shared.into_shape_with_order(shape.to_vec()) {
        Ok(r) => back(NdArrayTensor::from(r)),
        Err(e) => panic!("reshape to {shape:?}: {e}"),
    }
}

/// The tensor's f32 values as an owned vector, without a copy when it is an `NdArray` f32 array
/// that nothing else holds, in row-major order with no offset (an optimizer's parameter and
/// moments between steps): the vector then is the array's own buffer, and [`from_vec`] hands
/// it back as the new tensor's, so an in-place update costs no copy either way. Any other
/// tensor is read with [`to_vec`].
pub fn take_vec<B: Backend>(t: FloatTensor<B>) -> Vec<f32> {
    use burn::backend::ndarray::NdArrayTensor;
    use std::any::Any;
    let any: Box<dyn Any> = Box::new(t);
    let nd = match any.downcast::<NdArrayTensor>() {
        Ok(nd) => *nd,
        Err(any) => return to_vec::<B>(*any.downcast::<FloatTensor<B>>().expect("the same value")),
    };
    let NdArrayTensor::F32(storage) = nd else {
        let back: Box<dyn Any> = Box::new(nd);
        return to_vec::<B>(*back.downcast::<FloatTensor<B>>().expect("the same value"));
    };
    let shared = storage.into_shared();
    if !shared.is_standard_layout() || !shared.is_unique() {
        let back: Box<dyn Any> = Box::new(NdArrayTensor::from(shared));
        return to_vec::<B>(*back.downcast::<FloatTensor<B>>().expect("the same value"));
    }
    match shared.into_owned().into_raw_vec_and_offset() {
        (v, Some(0) | None) => v,
        (v, Some(offset)) => v[offset..].to_vec(),
    }
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
