//! Quantized ops: host-resident tensors (see [`crate::qtensor`]), every op a host fallback.

#![allow(unused_imports)]

use burn_backend::ops::QTensorOps;
use burn_backend::quantization::{QuantScheme, QuantizationParametersPrimitive};
use burn_backend::tensor::{Device, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{ExecutionError, FloatDType, Shape, Slice, TensorData};

use crate::device::AscendDevice;
use crate::fallback::{block_on, Fallback, Host};
use crate::Ascend;

impl QTensorOps<Self> for Ascend {
    fn q_device(tensor: &QuantizedTensor<Self>) -> AscendDevice {
        tensor.device
    }

    fn q_to_device(
        mut tensor: QuantizedTensor<Self>,
        device: &AscendDevice,
    ) -> QuantizedTensor<Self> {
        tensor.device = *device;
        tensor
    }

    async fn q_into_data(tensor: QuantizedTensor<Self>) -> Result<TensorData, ExecutionError> {
        block_on(<Host as QTensorOps<Host>>::q_into_data(tensor.host))
    }
    // ---- GENERATED host fallbacks (tools/gen_fallbacks.py): do not edit below ----
    fn q_from_data(data: TensorData, device: &Device<Self>) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("q_from_data");
        let device = cx.device(device);
        cx.ret(<Host as QTensorOps<Host>>::q_from_data(data, device))
    }

    fn quantize(
        tensor: FloatTensor<Self>,
        scheme: &QuantScheme,
        qparams: QuantizationParametersPrimitive<Self>,
    ) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("quantize");
        let tensor = cx.arg(tensor);
        let qparams = cx.arg(qparams);
        cx.ret(<Host as QTensorOps<Host>>::quantize(
            tensor, scheme, qparams,
        ))
    }

    fn dequantize(tensor: QuantizedTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        let mut cx = Fallback::new("dequantize");
        let tensor = cx.arg(tensor);
        let dtype = cx.float_dtype(dtype);
        cx.ret(<Host as QTensorOps<Host>>::dequantize(tensor, dtype))
    }

    fn q_reshape(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("q_reshape");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as QTensorOps<Host>>::q_reshape(tensor, shape))
    }

    fn q_expand(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("q_expand");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as QTensorOps<Host>>::q_expand(tensor, shape))
    }

    fn q_swap_dims(
        tensor: QuantizedTensor<Self>,
        dim1: usize,
        dim2: usize,
    ) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("q_swap_dims");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as QTensorOps<Host>>::q_swap_dims(tensor, dim1, dim2))
    }

    fn q_permute(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("q_permute");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as QTensorOps<Host>>::q_permute(tensor, axes))
    }

    fn q_flip(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("q_flip");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as QTensorOps<Host>>::q_flip(tensor, axes))
    }

    fn q_select(
        tensor: QuantizedTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("q_select");
        let tensor = cx.arg(tensor);
        let indices = cx.arg(indices);
        cx.ret(<Host as QTensorOps<Host>>::q_select(tensor, dim, indices))
    }

    fn q_slice(tensor: QuantizedTensor<Self>, slices: &[Slice]) -> QuantizedTensor<Self> {
        let mut cx = Fallback::new("q_slice");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as QTensorOps<Host>>::q_slice(tensor, slices))
    }
}
