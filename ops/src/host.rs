//! Moving float tensors between a backend and host `Vec<f32>` (for the CPU kernels and for the
//! host-built masks and biases of the composite).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, TensorData, TensorMetadata};

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
