//! `NdArray`: a view of the same memory when the array is in standard layout (any other array,
//! and other element types, take Burn's reshape, which copies).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Shape;

use super::ViewBackend;
use crate::common::ndarray::ndarray_on_host;

ndarray_on_host! {
    ViewBackend {
        fn reshape_view(t: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> => host_reshape;
    }
}

fn host_reshape<B: Backend>(t: FloatTensor<B>, shape: Shape) -> FloatTensor<B> {
    crate::host::reshape::<B>(t, shape.as_slice())
}
