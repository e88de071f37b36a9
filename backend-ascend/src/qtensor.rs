//! The quantized tensor primitive. Quantized tensors have no aclnn path here: they live on the
//! host (NdArray's representation) tagged with their Ascend device, and every quantized op is a
//! counted host fallback.

use burn_backend::quantization::QuantScheme;
use burn_backend::{DType, QTensorPrimitive, Shape, TensorMetadata};
use burn_ndarray::NdArrayQTensor;

use crate::device::AscendDevice;

/// A quantized tensor (host-resident, see the module docs).
#[derive(Clone, Debug)]
pub struct AscendQTensor {
    pub(crate) host: NdArrayQTensor,
    pub(crate) device: AscendDevice,
}

impl TensorMetadata for AscendQTensor {
    fn dtype(&self) -> DType {
        self.host.dtype()
    }

    fn shape(&self) -> Shape {
        self.host.shape()
    }
}

impl QTensorPrimitive for AscendQTensor {
    fn scheme(&self) -> &QuantScheme {
        &self.host.scheme
    }
}
