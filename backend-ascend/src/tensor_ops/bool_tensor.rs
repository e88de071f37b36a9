//! BoolTensorOps: data movement and views native, the rest host fallbacks.

#![allow(unused_imports)]

use burn_backend::ops::BoolTensorOps;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor};
use burn_backend::{
    BoolDType, Distribution, ExecutionError, FloatDType, IntDType, Scalar, Shape, Slice, TensorData,
};

use super::base;
use super::native_elementwise as ne;
use super::native_index;
use crate::device::AscendDevice;
use crate::fallback::{Fallback, Host};
use crate::tensor::AscendTensor;
use crate::Ascend;
use burn_ascend_cann::acl::aclnn::Compare;
use burn_backend::BoolStore;

impl BoolTensorOps<Self> for Ascend {
    fn bool_from_data(data: TensorData, device: &AscendDevice) -> BoolTensor<Self> {
        AscendTensor::from_data(data, device)
    }

    async fn bool_into_data(tensor: BoolTensor<Self>) -> Result<TensorData, ExecutionError> {
        tensor
            .try_to_data()
            .map_err(|reason| ExecutionError::WithContext { reason })
    }

    fn bool_device(tensor: &BoolTensor<Self>) -> AscendDevice {
        tensor.device()
    }

    fn bool_to_device(tensor: BoolTensor<Self>, device: &AscendDevice) -> BoolTensor<Self> {
        base::to_device(tensor, device)
    }

    fn bool_empty(shape: Shape, device: &AscendDevice, dtype: BoolDType) -> BoolTensor<Self> {
        AscendTensor::zeros(shape, dtype.into(), device)
    }

    fn bool_reshape(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> {
        base::reshape(tensor, shape)
    }

    fn bool_swap_dims(tensor: BoolTensor<Self>, dim1: usize, dim2: usize) -> BoolTensor<Self> {
        base::swap_dims(tensor, dim1, dim2)
    }

    fn bool_permute(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> {
        base::permute(tensor, axes)
    }

    fn bool_expand(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> {
        base::expand(tensor, shape)
    }

    fn bool_slice(tensor: BoolTensor<Self>, slices: &[Slice]) -> BoolTensor<Self> {
        match base::slice_view(&tensor, slices) {
            Some(v) => v,
            None => {
                let mut cx = Fallback::new("bool_slice");
                let tensor = cx.arg(tensor);
                cx.ret(<Host as BoolTensorOps<Host>>::bool_slice(tensor, slices))
            }
        }
    }
    // ---- indexing and layout: native (tensor_ops/native_index.rs), host fallback otherwise ----

    fn bool_select(
        tensor: BoolTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> BoolTensor<Self> {
        native_index::select(&tensor, dim, &indices).unwrap_or_else(|| {
            let mut cx = Fallback::new("bool_select");
            let (tensor, indices) = (cx.arg(tensor), cx.arg(indices));
            cx.ret(<Host as BoolTensorOps<Host>>::bool_select(
                tensor, dim, indices,
            ))
        })
    }

    fn bool_gather(
        dim: usize,
        tensor: BoolTensor<Self>,
        indices: IntTensor<Self>,
    ) -> BoolTensor<Self> {
        native_index::gather(dim, &tensor, &indices).unwrap_or_else(|| {
            let mut cx = Fallback::new("bool_gather");
            let (tensor, indices) = (cx.arg(tensor), cx.arg(indices));
            cx.ret(<Host as BoolTensorOps<Host>>::bool_gather(
                dim, tensor, indices,
            ))
        })
    }

    fn bool_slice_assign(
        tensor: BoolTensor<Self>,
        slices: &[Slice],
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        native_index::slice_assign(&tensor, slices, &value).unwrap_or_else(|| {
            let mut cx = Fallback::new("bool_slice_assign");
            let (tensor, value) = (cx.arg(tensor), cx.arg(value));
            cx.ret(<Host as BoolTensorOps<Host>>::bool_slice_assign(
                tensor, slices, value,
            ))
        })
    }

    fn bool_cat(tensors: Vec<BoolTensor<Self>>, dim: usize) -> BoolTensor<Self> {
        native_index::cat(&tensors, dim).unwrap_or_else(|| {
            let mut cx = Fallback::new("bool_cat");
            let tensors = cx.arg(tensors);
            cx.ret(<Host as BoolTensorOps<Host>>::bool_cat(tensors, dim))
        })
    }

    fn bool_repeat_dim(tensor: BoolTensor<Self>, dim: usize, times: usize) -> BoolTensor<Self> {
        native_index::repeat_dim(&tensor, dim, times).unwrap_or_else(|| {
            let mut cx = Fallback::new("bool_repeat_dim");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as BoolTensorOps<Host>>::bool_repeat_dim(
                tensor, dim, times,
            ))
        })
    }

    fn bool_flip(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> {
        native_index::flip(&tensor, axes).unwrap_or_else(|| {
            let mut cx = Fallback::new("bool_flip");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as BoolTensorOps<Host>>::bool_flip(tensor, axes))
        })
    }

    fn bool_not(tensor: BoolTensor<Self>) -> BoolTensor<Self> {
        if let Some(t) = ne::bool_not(&tensor) {
            return t;
        }
        let mut cx = Fallback::new("bool_not");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as BoolTensorOps<Host>>::bool_not(tensor))
    }

    fn bool_and(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        if let Some(t) = ne::bool_logical(true, &lhs, &rhs) {
            return t;
        }
        let mut cx = Fallback::new("bool_and");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as BoolTensorOps<Host>>::bool_and(lhs, rhs))
    }

    fn bool_or(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        if let Some(t) = ne::bool_logical(false, &lhs, &rhs) {
            return t;
        }
        let mut cx = Fallback::new("bool_or");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as BoolTensorOps<Host>>::bool_or(lhs, rhs))
    }

    fn bool_equal(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Eq, &lhs, &rhs, BoolStore::Native) {
            return t;
        }
        let mut cx = Fallback::new("bool_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as BoolTensorOps<Host>>::bool_equal(lhs, rhs))
    }

    fn bool_into_int(tensor: BoolTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> {
        if let Some(t) = ne::cast(&tensor, out_dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("bool_into_int");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as BoolTensorOps<Host>>::bool_into_int(
            tensor, out_dtype,
        ))
    }

    fn bool_into_float(tensor: BoolTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        if let Some(t) = ne::cast(&tensor, out_dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("bool_into_float");
        let tensor = cx.arg(tensor);
        let out_dtype = cx.float_dtype(out_dtype);
        cx.ret(<Host as BoolTensorOps<Host>>::bool_into_float(
            tensor, out_dtype,
        ))
    }

    // Every other method Burn requires: host fallbacks generated by tools/gen_fallbacks.py
    // into `tensor_ops/generated/bool_fallbacks.rs`.
    super::generated::bool_fallbacks!();
}
