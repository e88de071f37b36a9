//! IntTensorOps: data movement and views native, the rest host fallbacks.

#![allow(unused_imports)]

use burn_backend::ops::IntTensorOps;
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

impl IntTensorOps<Self> for Ascend {
    fn int_from_data(data: TensorData, device: &AscendDevice) -> IntTensor<Self> {
        AscendTensor::from_data(data, device)
    }

    async fn int_into_data(tensor: IntTensor<Self>) -> Result<TensorData, ExecutionError> {
        tensor
            .try_to_data()
            .map_err(|reason| ExecutionError::WithContext { reason })
    }

    fn int_device(tensor: &IntTensor<Self>) -> AscendDevice {
        tensor.device()
    }

    fn int_to_device(tensor: IntTensor<Self>, device: &AscendDevice) -> IntTensor<Self> {
        base::to_device(tensor, device)
    }

    fn int_empty(shape: Shape, device: &AscendDevice, dtype: IntDType) -> IntTensor<Self> {
        AscendTensor::zeros(shape, dtype.into(), device)
    }

    fn int_zeros(shape: Shape, device: &AscendDevice, dtype: IntDType) -> IntTensor<Self> {
        AscendTensor::zeros(shape, dtype.into(), device)
    }

    fn int_ones(shape: Shape, device: &AscendDevice, dtype: IntDType) -> IntTensor<Self> {
        Self::int_full(shape, 1i64.into(), device, dtype)
    }

    fn int_full(
        shape: Shape,
        fill_value: Scalar,
        device: &AscendDevice,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        super::native_elementwise::full(shape.clone(), fill_value, dtype.into(), device)
            .unwrap_or_else(|| {
                AscendTensor::from_data(
                    TensorData::full_dtype(shape, fill_value, dtype.into()),
                    device,
                )
            })
    }

    fn int_reshape(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        base::reshape(tensor, shape)
    }

    fn int_swap_dims(tensor: IntTensor<Self>, dim1: usize, dim2: usize) -> IntTensor<Self> {
        base::swap_dims(tensor, dim1, dim2)
    }

    fn int_permute(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        base::permute(tensor, axes)
    }

    fn int_expand(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        base::expand(tensor, shape)
    }

    fn int_slice(tensor: IntTensor<Self>, slices: &[Slice]) -> IntTensor<Self> {
        match base::slice_view(&tensor, slices) {
            Some(v) => v,
            None => {
                let mut cx = Fallback::new("int_slice");
                let tensor = cx.arg(tensor);
                cx.ret(<Host as IntTensorOps<Host>>::int_slice(tensor, slices))
            }
        }
    }
    // ---- indexing and layout: native (tensor_ops/native_index.rs), host fallback otherwise ----

    fn int_select(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        native_index::select(&tensor, dim, &indices).unwrap_or_else(|| {
            let mut cx = Fallback::new("int_select");
            let (tensor, indices) = (cx.arg(tensor), cx.arg(indices));
            cx.ret(<Host as IntTensorOps<Host>>::int_select(
                tensor, dim, indices,
            ))
        })
    }

    fn int_gather(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        native_index::gather(dim, &tensor, &indices).unwrap_or_else(|| {
            let mut cx = Fallback::new("int_gather");
            let (tensor, indices) = (cx.arg(tensor), cx.arg(indices));
            cx.ret(<Host as IntTensorOps<Host>>::int_gather(
                dim, tensor, indices,
            ))
        })
    }

    fn int_slice_assign(
        tensor: IntTensor<Self>,
        slices: &[Slice],
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        native_index::slice_assign(&tensor, slices, &value).unwrap_or_else(|| {
            let mut cx = Fallback::new("int_slice_assign");
            let (tensor, value) = (cx.arg(tensor), cx.arg(value));
            cx.ret(<Host as IntTensorOps<Host>>::int_slice_assign(
                tensor, slices, value,
            ))
        })
    }

    fn int_cat(tensors: Vec<IntTensor<Self>>, dim: usize) -> IntTensor<Self> {
        native_index::cat(&tensors, dim).unwrap_or_else(|| {
            let mut cx = Fallback::new("int_cat");
            let tensors = cx.arg(tensors);
            cx.ret(<Host as IntTensorOps<Host>>::int_cat(tensors, dim))
        })
    }

    fn int_repeat_dim(tensor: IntTensor<Self>, dim: usize, times: usize) -> IntTensor<Self> {
        native_index::repeat_dim(&tensor, dim, times).unwrap_or_else(|| {
            let mut cx = Fallback::new("int_repeat_dim");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as IntTensorOps<Host>>::int_repeat_dim(
                tensor, dim, times,
            ))
        })
    }

    fn int_flip(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        native_index::flip(&tensor, axes).unwrap_or_else(|| {
            let mut cx = Fallback::new("int_flip");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as IntTensorOps<Host>>::int_flip(tensor, axes))
        })
    }

    fn int_scatter_add(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        native_index::scatter_add(dim, &tensor, &indices, &value).unwrap_or_else(|| {
            let mut cx = Fallback::new("int_scatter_add");
            let (tensor, indices, value) = (cx.arg(tensor), cx.arg(indices), cx.arg(value));
            cx.ret(<Host as IntTensorOps<Host>>::int_scatter_add(
                dim, tensor, indices, value,
            ))
        })
    }

    fn int_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Eq, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_equal(lhs, rhs, out_dtype))
    }

    fn int_equal_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Eq, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_equal_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_equal_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_not_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Ne, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_not_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_not_equal(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_not_equal_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Ne, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_not_equal_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_not_equal_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_greater(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Gt, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_greater");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_greater(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_greater_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Gt, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_greater_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_greater_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_greater_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Ge, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_greater_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_greater_equal(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_greater_equal_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Ge, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_greater_equal_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_greater_equal_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_lower(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Lt, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_lower");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_lower(lhs, rhs, out_dtype))
    }

    fn int_lower_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Lt, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_lower_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_lower_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_lower_equal(
        lhs: IntTensor<Self>,
        rhs: IntTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Le, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_lower_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_lower_equal(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_lower_equal_elem(
        lhs: IntTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Le, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("int_lower_equal_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_lower_equal_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn int_mask_where(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        if let Some(t) = ne::mask_where(&tensor, &mask, &value) {
            return t;
        }
        let mut cx = Fallback::new("int_mask_where");
        let tensor = cx.arg(tensor);
        let mask = cx.arg(mask);
        let value = cx.arg(value);
        cx.ret(<Host as IntTensorOps<Host>>::int_mask_where(
            tensor, mask, value,
        ))
    }

    fn int_mask_fill(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> IntTensor<Self> {
        if let Some(t) = ne::mask_fill(&tensor, &mask, value) {
            return t;
        }
        let mut cx = Fallback::new("int_mask_fill");
        let tensor = cx.arg(tensor);
        let mask = cx.arg(mask);
        cx.ret(<Host as IntTensorOps<Host>>::int_mask_fill(
            tensor, mask, value,
        ))
    }

    fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        if let Some(t) = ne::cast(&tensor, out_dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("int_into_float");
        let tensor = cx.arg(tensor);
        let out_dtype = cx.float_dtype(out_dtype);
        cx.ret(<Host as IntTensorOps<Host>>::int_into_float(
            tensor, out_dtype,
        ))
    }

    fn int_cast(tensor: IntTensor<Self>, dtype: IntDType) -> IntTensor<Self> {
        if let Some(t) = ne::cast(&tensor, dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("int_cast");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as IntTensorOps<Host>>::int_cast(tensor, dtype))
    }

    fn int_add(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        if let Some(t) = ne::int_binary(ne::IntBinary::Add, &lhs, &rhs) {
            return t;
        }
        let mut cx = Fallback::new("int_add");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_add(lhs, rhs))
    }

    fn int_sub(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        if let Some(t) = ne::int_binary(ne::IntBinary::Sub, &lhs, &rhs) {
            return t;
        }
        let mut cx = Fallback::new("int_sub");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_sub(lhs, rhs))
    }

    fn int_mul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        if let Some(t) = ne::int_binary(ne::IntBinary::Mul, &lhs, &rhs) {
            return t;
        }
        let mut cx = Fallback::new("int_mul");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_mul(lhs, rhs))
    }

    fn int_add_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        if let Some(t) = ne::int_scalar(&lhs, rhs, Some(1)) {
            return t;
        }
        let mut cx = Fallback::new("int_add_scalar");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_add_scalar(lhs, rhs))
    }

    fn int_sub_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        if let Some(t) = ne::int_scalar(&lhs, rhs, Some(-1)) {
            return t;
        }
        let mut cx = Fallback::new("int_sub_scalar");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_sub_scalar(lhs, rhs))
    }

    fn int_mul_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> {
        if let Some(t) = ne::int_scalar(&lhs, rhs, None) {
            return t;
        }
        let mut cx = Fallback::new("int_mul_scalar");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as IntTensorOps<Host>>::int_mul_scalar(lhs, rhs))
    }

    // Every other method Burn requires: host fallbacks generated by tools/gen_fallbacks.py
    // into `tensor_ops/generated/int_fallbacks.rs`.
    super::generated::int_fallbacks!();
}
