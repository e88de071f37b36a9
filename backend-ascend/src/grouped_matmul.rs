//! The grouped matmul of a mixture of experts on Ascend (`burn_ascend_ops::GroupedMatmulBackend`):
//! `aclnnGroupedMatmulV4` with single-tensor x, weight, bias and out (splitItem 3), the group
//! list uploaded as INT64 `[g]` with groupListType as the spec says, as torch_npu's
//! `npu_grouped_matmul` calls it. Under `Autodiff<Ascend>` the ops crate's backward calls this
//! twice more (dx with groupType 0 on the transposed weights, dW with groupType 2), so training
//! runs on the op too.
//!
//! Layouts as the op takes them (aclnnGroupedMatmulV4.md): with groupType 0, x row-major and the
//! weight row-major or transposed in its last two dims (the backward's `Wᵀ` view passes as
//! it is); with groupType 2, x the transposed view of a row-major `[K, M]` buffer and the
//! weight row-major. Other views are copied into that layout on the device first. The bias is
//! cast to the dtype the A2 / A3 table wants (FLOAT16 with FLOAT16 x, FLOAT32 otherwise).
//!
//! Dtypes aclnn has no grouped matmul for (f64, the gradient checks' dtype) and a CANN without
//! `aclnnGroupedMatmulV4` take the composite on the backend's own ops, counted as the host
//! fallback `grouped_matmul` ([`crate::fallback_counts`]).

use burn_ascend_cann::acl::{aclnn, TensorList};
use burn_ascend_ops::error::Result;
use burn_ascend_ops::grouped_matmul::{
    composite, shapes, GroupType, GroupedMatmulBackend, GroupedMatmulSpec, SPLIT_ITEM,
};
use burn_backend::ops::FloatTensorOps;
use burn_backend::{DType, FloatDType, Shape, TensorData};

use crate::device::{runtime, try_runtime};
use crate::fallback::count;
use crate::tensor::{device_error, fail, same_device, AscendTensor};
use crate::tensor_ops::native_index;
use crate::Ascend;

/// Label of the call in error messages and the fallback counter.
const OP: &str = "grouped_matmul";

/// `t` as a contiguous copy on the device (or through the host when no device copy applies).
fn contiguous(t: &AscendTensor) -> AscendTensor {
    native_index::contiguous(t).unwrap_or_else(|| AscendTensor::from_data(t.to_data(), &t.device()))
}

/// Whether the last two dims of `t` are row-major with no gaps (leading dims packed too).
fn packed(t: &AscendTensor) -> bool {
    t.is_contiguous()
}

/// groupType 0's weight: packed, or the swap of the last two dims of a packed tensor.
fn weight_m(w: AscendTensor) -> AscendTensor {
    let s = &w.shape;
    let (k, n) = (s[1], s[2]);
    let transposed = w.strides == [k * n, 1, k];
    if packed(&w) || transposed {
        w
    } else {
        contiguous(&w)
    }
}

/// groupType 2's x `[M, K]`: the transposed view of a row-major `[K, M]` buffer.
fn x_k(x: AscendTensor) -> AscendTensor {
    let (m, k) = (x.shape[0], x.shape[1]);
    if x.strides == [1, m] {
        return x;
    }
    let swapped = x.view(
        Shape::from(vec![k, m]),
        vec![x.strides[1], x.strides[0]],
        x.offset,
    );
    let buffer = contiguous(&swapped);
    buffer.view(Shape::from(vec![m, k]), vec![1, m], 0)
}

fn native_dtype(dt: DType) -> bool {
    matches!(dt, DType::F16 | DType::BF16 | DType::F32)
}

impl GroupedMatmulBackend for Ascend {
    fn grouped_matmul(
        x: AscendTensor,
        weight: AscendTensor,
        bias: Option<AscendTensor>,
        spec: &GroupedMatmulSpec,
    ) -> Result<AscendTensor> {
        let dims = spec.validate(&shapes::<Ascend>(&x, &weight, bias.as_ref()))?;
        let mut tensors = vec![&x, &weight];
        tensors.extend(bias.as_ref());
        let device = same_device(OP, &tensors)?;
        let dt = x.dtype;
        let out_shape = match spec.group_type {
            GroupType::M => vec![dims.m, dims.n],
            GroupType::K => vec![dims.sizes.len(), dims.m, dims.n],
        };
        // Nothing to compute (no rows, or an empty reduction): the composite's zeros / bias,
        // no launch and no fallback.
        if out_shape.contains(&0) || dims.k == 0 {
            return composite::grouped_matmul::<Ascend>(x, weight, bias, spec);
        }
        let available = try_runtime(&device).is_ok_and(|rt| rt.api().grouped_matmul_v4.is_some());
        if !native_dtype(dt) || !available {
            count(OP);
            return composite::grouped_matmul::<Ascend>(x, weight, bias, spec);
        }
        let (x, weight) = match spec.group_type {
            GroupType::M => (
                if packed(&x) { x } else { contiguous(&x) },
                weight_m(weight),
            ),
            GroupType::K => (
                x_k(x),
                if packed(&weight) {
                    weight
                } else {
                    contiguous(&weight)
                },
            ),
        };
        let bias = bias.map(|b| {
            let want = if dt == DType::F16 {
                FloatDType::F16
            } else {
                FloatDType::F32
            };
            let b = if b.dtype == DType::from(want) {
                b
            } else {
                Ascend::float_cast(b, want)
            };
            if packed(&b) {
                b
            } else {
                contiguous(&b)
            }
        });
        let group_list = AscendTensor::from_data(
            TensorData::new(spec.group_list.clone(), [spec.group_list.len()]),
            &device,
        );
        let out = AscendTensor::alloc(Shape::from(out_shape), dt, &device);
        let rt = runtime(&device);
        let api = rt.api();
        {
            fn list<'a>(
                api: &'static burn_ascend_cann::acl::AclApi,
                t: &'a AscendTensor,
            ) -> TensorList<'a> {
                let d = t.desc(OP);
                TensorList::new(api, vec![t.handle(&d, OP)]).unwrap_or_else(|e| fail(OP, e))
            }
            let (xl, wl, ol) = (list(api, &x), list(api, &weight), list(api, &out));
            let bl = bias.as_ref().map(|b| list(api, b));
            let gd = group_list.desc(OP);
            let gh = group_list.handle(&gd, OP);
            aclnn::grouped_matmul_v4(
                &rt,
                &aclnn::GroupedMatmulArgs {
                    x: &xl,
                    weight: &wl,
                    bias: bl.as_ref(),
                    group_list: Some(&gh),
                    split_item: SPLIT_ITEM,
                    group_type: spec.group_type.as_attr(),
                    group_list_type: spec.group_list_type.as_attr(),
                    out: &ol,
                },
            )
            .map_err(|e| device_error(OP, e))?;
        }
        Ok(out)
    }
}
