//! FloatTensorOps: data movement and views native, the rest host fallbacks.

#![allow(unused_imports)]

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor};
use burn_backend::{
    BoolDType, Distribution, ExecutionError, FloatDType, IntDType, Scalar, Shape, Slice, TensorData,
};

use super::base;
use super::native::{self, Binary};
use super::native_elementwise as ne;
use super::native_index;
use crate::device::AscendDevice;
use crate::fallback::{Fallback, Host};
use crate::tensor::AscendTensor;
use crate::Ascend;
use burn_ascend_cann::acl::aclnn::Compare;
use burn_ascend_cann::acl::aclnn::Unary;

impl FloatTensorOps<Self> for Ascend {
    fn float_from_data(data: TensorData, device: &AscendDevice) -> FloatTensor<Self> {
        AscendTensor::from_data(data, device)
    }

    async fn float_into_data(tensor: FloatTensor<Self>) -> Result<TensorData, ExecutionError> {
        tensor
            .try_to_data()
            .map_err(|reason| ExecutionError::WithContext { reason })
    }

    fn float_device(tensor: &FloatTensor<Self>) -> AscendDevice {
        tensor.device()
    }

    fn float_to_device(tensor: FloatTensor<Self>, device: &AscendDevice) -> FloatTensor<Self> {
        base::to_device(tensor, device)
    }

    fn float_empty(shape: Shape, device: &AscendDevice, dtype: FloatDType) -> FloatTensor<Self> {
        AscendTensor::zeros(shape, dtype.into(), device)
    }

    fn float_zeros(shape: Shape, device: &AscendDevice, dtype: FloatDType) -> FloatTensor<Self> {
        AscendTensor::zeros(shape, dtype.into(), device)
    }

    fn float_ones(shape: Shape, device: &AscendDevice, dtype: FloatDType) -> FloatTensor<Self> {
        Self::float_full(shape, 1.0f64.into(), device, dtype)
    }

    fn float_full(
        shape: Shape,
        fill_value: Scalar,
        device: &AscendDevice,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        super::native_elementwise::full(shape.clone(), fill_value, dtype.into(), device)
            .unwrap_or_else(|| {
                AscendTensor::from_data(
                    TensorData::full_dtype(shape, fill_value, dtype.into()),
                    device,
                )
            })
    }

    fn float_reshape(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        base::reshape(tensor, shape)
    }

    fn float_swap_dims(tensor: FloatTensor<Self>, dim1: usize, dim2: usize) -> FloatTensor<Self> {
        base::swap_dims(tensor, dim1, dim2)
    }

    fn float_permute(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> {
        base::permute(tensor, axes)
    }

    fn float_expand(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        base::expand(tensor, shape)
    }

    fn float_slice(tensor: FloatTensor<Self>, slices: &[Slice]) -> FloatTensor<Self> {
        match base::slice_view(&tensor, slices) {
            Some(v) => v,
            None => {
                let mut cx = Fallback::new("float_slice");
                let tensor = cx.arg(tensor);
                cx.ret(<Host as FloatTensorOps<Host>>::float_slice(tensor, slices))
            }
        }
    }

    fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        native::matmul(&lhs, &rhs).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_matmul");
            let (lhs, rhs) = (cx.arg(lhs), cx.arg(rhs));
            cx.ret(<Host as FloatTensorOps<Host>>::float_matmul(lhs, rhs))
        })
    }

    fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        native::binary(Binary::Add, &lhs, &rhs).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_add");
            let (lhs, rhs) = (cx.arg(lhs), cx.arg(rhs));
            cx.ret(<Host as FloatTensorOps<Host>>::float_add(lhs, rhs))
        })
    }

    fn float_sub(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        native::binary(Binary::Sub, &lhs, &rhs).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_sub");
            let (lhs, rhs) = (cx.arg(lhs), cx.arg(rhs));
            cx.ret(<Host as FloatTensorOps<Host>>::float_sub(lhs, rhs))
        })
    }

    fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        native::binary(Binary::Mul, &lhs, &rhs).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_mul");
            let (lhs, rhs) = (cx.arg(lhs), cx.arg(rhs));
            cx.ret(<Host as FloatTensorOps<Host>>::float_mul(lhs, rhs))
        })
    }

    fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        native::binary(Binary::Div, &lhs, &rhs).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_div");
            let (lhs, rhs) = (cx.arg(lhs), cx.arg(rhs));
            cx.ret(<Host as FloatTensorOps<Host>>::float_div(lhs, rhs))
        })
    }

    fn float_add_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        native::scalar(&lhs, rhs.elem::<f32>(), Some(1.0)).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_add_scalar");
            let lhs = cx.arg(lhs);
            cx.ret(<Host as FloatTensorOps<Host>>::float_add_scalar(lhs, rhs))
        })
    }

    fn float_sub_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        native::scalar(&lhs, rhs.elem::<f32>(), Some(-1.0)).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_sub_scalar");
            let lhs = cx.arg(lhs);
            cx.ret(<Host as FloatTensorOps<Host>>::float_sub_scalar(lhs, rhs))
        })
    }

    fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        native::scalar(&lhs, rhs.elem::<f32>(), None).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_mul_scalar");
            let lhs = cx.arg(lhs);
            cx.ret(<Host as FloatTensorOps<Host>>::float_mul_scalar(lhs, rhs))
        })
    }

    fn float_div_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        native::div_scalar(&lhs, rhs.elem::<f32>()).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_div_scalar");
            let lhs = cx.arg(lhs);
            cx.ret(<Host as FloatTensorOps<Host>>::float_div_scalar(lhs, rhs))
        })
    }

    fn float_exp(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        native::unary(Unary::Exp, &tensor).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_exp");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_exp(tensor))
        })
    }

    fn float_log(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        native::unary(Unary::Log, &tensor).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_log");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_log(tensor))
        })
    }

    fn float_sqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        native::unary(Unary::Sqrt, &tensor).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_sqrt");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_sqrt(tensor))
        })
    }

    fn float_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        native::unary(Unary::Abs, &tensor).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_abs");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_abs(tensor))
        })
    }

    fn float_tanh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        native::unary(Unary::Tanh, &tensor).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_tanh");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_tanh(tensor))
        })
    }

    fn float_sum_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        native::reduce(&tensor, &[dim], false).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_sum_dim");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_sum_dim(tensor, dim))
        })
    }

    fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        native::reduce(&tensor, &[dim], true).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_mean_dim");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_mean_dim(tensor, dim))
        })
    }

    /// One `aclnnMean` over every dim, not Burn's default `sum / n`: the device accumulates in
    /// f32, so the mean of f16 values whose sum exceeds f16's range stays finite.
    fn float_mean(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let all: Vec<usize> = (0..tensor.shape.num_dims()).collect();
        match native::reduce(&tensor, &all, true) {
            Some(t) => base::reshape(t, Shape::new([1])),
            None => {
                let mut cx = Fallback::new("float_mean");
                let tensor = cx.arg(tensor);
                cx.ret(<Host as FloatTensorOps<Host>>::float_mean(tensor))
            }
        }
    }

    fn float_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let all: Vec<usize> = (0..tensor.shape.num_dims()).collect();
        match native::reduce(&tensor, &all, false) {
            Some(t) => base::reshape(t, Shape::new([1])),
            None => {
                let mut cx = Fallback::new("float_sum");
                let tensor = cx.arg(tensor);
                cx.ret(<Host as FloatTensorOps<Host>>::float_sum(tensor))
            }
        }
    }

    // ---- indexing and layout: native (tensor_ops/native_index.rs), host fallback otherwise ----

    fn float_select(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        native_index::select(&tensor, dim, &indices).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_select");
            let (tensor, indices) = (cx.arg(tensor), cx.arg(indices));
            cx.ret(<Host as FloatTensorOps<Host>>::float_select(
                tensor, dim, indices,
            ))
        })
    }

    fn float_gather(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        native_index::gather(dim, &tensor, &indices).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_gather");
            let (tensor, indices) = (cx.arg(tensor), cx.arg(indices));
            cx.ret(<Host as FloatTensorOps<Host>>::float_gather(
                dim, tensor, indices,
            ))
        })
    }

    fn float_slice_assign(
        tensor: FloatTensor<Self>,
        slices: &[Slice],
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        native_index::slice_assign(&tensor, slices, &value).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_slice_assign");
            let (tensor, value) = (cx.arg(tensor), cx.arg(value));
            cx.ret(<Host as FloatTensorOps<Host>>::float_slice_assign(
                tensor, slices, value,
            ))
        })
    }

    fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self> {
        native_index::cat(&tensors, dim).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_cat");
            let tensors = cx.arg(tensors);
            cx.ret(<Host as FloatTensorOps<Host>>::float_cat(tensors, dim))
        })
    }

    fn float_repeat_dim(tensor: FloatTensor<Self>, dim: usize, times: usize) -> FloatTensor<Self> {
        native_index::repeat_dim(&tensor, dim, times).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_repeat_dim");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_repeat_dim(
                tensor, dim, times,
            ))
        })
    }

    fn float_flip(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> {
        native_index::flip(&tensor, axes).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_flip");
            let tensor = cx.arg(tensor);
            cx.ret(<Host as FloatTensorOps<Host>>::float_flip(tensor, axes))
        })
    }

    fn float_select_add(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        native_index::select_add(&tensor, dim, &indices, &value).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_select_add");
            let (tensor, indices, value) = (cx.arg(tensor), cx.arg(indices), cx.arg(value));
            cx.ret(<Host as FloatTensorOps<Host>>::float_select_add(
                tensor, dim, indices, value,
            ))
        })
    }

    fn float_scatter_add(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        native_index::scatter_add(dim, &tensor, &indices, &value).unwrap_or_else(|| {
            let mut cx = Fallback::new("float_scatter_add");
            let (tensor, indices, value) = (cx.arg(tensor), cx.arg(indices), cx.arg(value));
            cx.ret(<Host as FloatTensorOps<Host>>::float_scatter_add(
                dim, tensor, indices, value,
            ))
        })
    }

    fn float_equal(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Eq, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_equal(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_equal_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Eq, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_equal_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_equal_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_not_equal(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Ne, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_not_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_not_equal(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_not_equal_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Ne, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_not_equal_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_not_equal_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_greater(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Gt, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_greater");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_greater(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_greater_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Gt, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_greater_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_greater_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_greater_equal(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Ge, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_greater_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_greater_equal(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_greater_equal_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Ge, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_greater_equal_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_greater_equal_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_lower(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Lt, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_lower");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_lower(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_lower_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Lt, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_lower_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_lower_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_lower_equal(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare(Compare::Le, &lhs, &rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_lower_equal");
        let lhs = cx.arg(lhs);
        let rhs = cx.arg(rhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_lower_equal(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_lower_equal_elem(
        lhs: FloatTensor<Self>,
        rhs: Scalar,
        out_dtype: BoolDType,
    ) -> BoolTensor<Self> {
        if let Some(t) = ne::compare_scalar(Compare::Le, &lhs, rhs, out_dtype) {
            return t;
        }
        let mut cx = Fallback::new("float_lower_equal_elem");
        let lhs = cx.arg(lhs);
        cx.ret(<Host as FloatTensorOps<Host>>::float_lower_equal_elem(
            lhs, rhs, out_dtype,
        ))
    }

    fn float_mask_where(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        if let Some(t) = ne::mask_where(&tensor, &mask, &value) {
            return t;
        }
        let mut cx = Fallback::new("float_mask_where");
        let tensor = cx.arg(tensor);
        let mask = cx.arg(mask);
        let value = cx.arg(value);
        cx.ret(<Host as FloatTensorOps<Host>>::float_mask_where(
            tensor, mask, value,
        ))
    }

    fn float_mask_fill(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> FloatTensor<Self> {
        if let Some(t) = ne::mask_fill(&tensor, &mask, value) {
            return t;
        }
        let mut cx = Fallback::new("float_mask_fill");
        let tensor = cx.arg(tensor);
        let mask = cx.arg(mask);
        cx.ret(<Host as FloatTensorOps<Host>>::float_mask_fill(
            tensor, mask, value,
        ))
    }

    fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        if let Some(t) = ne::cast(&tensor, dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("float_cast");
        let tensor = cx.arg(tensor);
        let dtype = cx.float_dtype(dtype);
        cx.ret(<Host as FloatTensorOps<Host>>::float_cast(tensor, dtype))
    }

    fn float_into_int(tensor: FloatTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> {
        if let Some(t) = ne::cast(&tensor, out_dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("float_into_int");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_into_int(
            tensor, out_dtype,
        ))
    }

    fn float_max(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = ne::amax_all(&tensor, true) {
            return t;
        }
        let mut cx = Fallback::new("float_max");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_max(tensor))
    }

    fn float_min(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = ne::amax_all(&tensor, false) {
            return t;
        }
        let mut cx = Fallback::new("float_min");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_min(tensor))
    }

    fn float_max_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        if let Some(t) = ne::amax(&tensor, &[dim], true) {
            return t;
        }
        let mut cx = Fallback::new("float_max_dim");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_max_dim(tensor, dim))
    }

    fn float_min_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        if let Some(t) = ne::amax(&tensor, &[dim], false) {
            return t;
        }
        let mut cx = Fallback::new("float_min_dim");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_min_dim(tensor, dim))
    }

    fn float_argmax(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> {
        if let Some(t) = ne::arg(&tensor, dim, true, out_dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("float_argmax");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_argmax(
            tensor, dim, out_dtype,
        ))
    }

    fn float_argmin(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> {
        if let Some(t) = ne::arg(&tensor, dim, false, out_dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("float_argmin");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_argmin(
            tensor, dim, out_dtype,
        ))
    }

    fn float_max_dim_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        if let Some(t) = ne::with_indices(&tensor, dim, true, indices_dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("float_max_dim_with_indices");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_max_dim_with_indices(
            tensor,
            dim,
            indices_dtype,
        ))
    }

    fn float_min_dim_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        if let Some(t) = ne::with_indices(&tensor, dim, false, indices_dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("float_min_dim_with_indices");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_min_dim_with_indices(
            tensor,
            dim,
            indices_dtype,
        ))
    }

    fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = native::unary(Unary::Neg, &tensor) {
            return t;
        }
        let mut cx = Fallback::new("float_neg");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_neg(tensor))
    }

    fn float_recip(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = native::unary(Unary::Reciprocal, &tensor) {
            return t;
        }
        let mut cx = Fallback::new("float_recip");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_recip(tensor))
    }

    fn float_sin(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = native::unary(Unary::Sin, &tensor) {
            return t;
        }
        let mut cx = Fallback::new("float_sin");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_sin(tensor))
    }

    fn float_cos(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = native::unary(Unary::Cos, &tensor) {
            return t;
        }
        let mut cx = Fallback::new("float_cos");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_cos(tensor))
    }

    fn float_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if let Some(t) = native::unary(Unary::Erf, &tensor) {
            return t;
        }
        let mut cx = Fallback::new("float_erf");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_erf(tensor))
    }

    fn float_powf_scalar_impl(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self> {
        if let Some(t) = ne::powf_scalar(&tensor, value) {
            return t;
        }
        let mut cx = Fallback::new("float_powf_scalar_impl");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_powf_scalar_impl(
            tensor, value,
        ))
    }

    fn float_clamp(tensor: FloatTensor<Self>, min: Scalar, max: Scalar) -> FloatTensor<Self> {
        if let Some(t) = ne::clamp(&tensor, Some(min), Some(max)) {
            return t;
        }
        let mut cx = Fallback::new("float_clamp");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_clamp(
            tensor, min, max,
        ))
    }

    fn float_clamp_min(tensor: FloatTensor<Self>, min: Scalar) -> FloatTensor<Self> {
        if let Some(t) = ne::clamp(&tensor, Some(min), None) {
            return t;
        }
        let mut cx = Fallback::new("float_clamp_min");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_clamp_min(tensor, min))
    }

    fn float_clamp_max(tensor: FloatTensor<Self>, max: Scalar) -> FloatTensor<Self> {
        if let Some(t) = ne::clamp(&tensor, None, Some(max)) {
            return t;
        }
        let mut cx = Fallback::new("float_clamp_max");
        let tensor = cx.arg(tensor);
        cx.ret(<Host as FloatTensorOps<Host>>::float_clamp_max(tensor, max))
    }

    fn float_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        if let Some(t) = ne::random(shape.clone(), distribution, device, dtype.into()) {
            return t;
        }
        let mut cx = Fallback::new("float_random");
        let device = cx.device(device);
        let dtype = cx.float_dtype(dtype);
        cx.ret(<Host as FloatTensorOps<Host>>::float_random(
            shape,
            distribution,
            device,
            dtype,
        ))
    }

    // Every other method Burn requires: host fallbacks generated by tools/gen_fallbacks.py
    // into `tensor_ops/generated/float_fallbacks.rs`.
    super::generated::float_fallbacks!();
}
