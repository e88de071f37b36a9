//! A mixture of experts' router on Ascend (`burn_ascend_ops::MoeGatingBackend`):
//! `aclnnMoeGatingTopKSoftmaxV2` without `finishedOptional` (every row routed), as torch_npu's
//! `npu_moe_gating_top_k_softmax_v2` calls it: `yOut` in `x`'s dtype, `expertIdxOut` INT32,
//! cast on the device to the backend's INT64 indices; with renorm 0 no softmax output
//! (`outputSoftmaxResultFlag` false: the `Autodiff` backward recomputes it from `x`). Under
//! `Autodiff<Ascend>` the ops crate's backward runs on the backend's own ops.
//!
//! Dtypes the op does not take (f64, the gradient checks' dtype) and a CANN without the op take
//! the composite on the backend's own ops, counted as the host fallback `moe_gating`
//! ([`crate::fallback_counts`]).

use burn_ascend_cann::acl::aclnn;
use burn_ascend_ops::error::Result;
use burn_ascend_ops::moe_gating::{composite, validate, GatingOrder, MoeGatingBackend};
use burn_backend::ops::IntTensorOps;
use burn_backend::{DType, IntDType, Shape};

use crate::device::{runtime, try_runtime};
use crate::fallback::count;
use crate::tensor::{device_error, AscendTensor};
use crate::Ascend;

/// Label of the call in error messages and the fallback counter.
const OP: &str = "moe_gating";

impl MoeGatingBackend for Ascend {
    fn moe_gating_top_k_softmax(
        x: AscendTensor,
        k: usize,
        order: GatingOrder,
    ) -> Result<(AscendTensor, AscendTensor)> {
        let d = validate(&x.shape, k as i64, None)?;
        let device = x.device();
        let native = matches!(x.dtype, DType::F16 | DType::BF16 | DType::F32);
        let available =
            try_runtime(&device).is_ok_and(|rt| rt.api().moe_gating_top_k_softmax_v2.is_some());
        if x.shape.len() != 2 || d.rows == 0 || !native || !available {
            if d.rows > 0 && x.shape.len() == 2 {
                count(OP);
            }
            return composite::moe_gating_top_k_softmax::<Ascend>(x, k, order);
        }
        let out = Shape::from(vec![d.rows, d.k]);
        let y = AscendTensor::alloc(out.clone(), x.dtype, &device);
        let idx = AscendTensor::alloc(out, DType::I32, &device);
        let rt = runtime(&device);
        {
            let (xd, yd, id) = (x.desc(OP), y.desc(OP), idx.desc(OP));
            aclnn::moe_gating_top_k_softmax_v2(
                &rt,
                &aclnn::MoeGatingArgs {
                    x: &x.handle(&xd, OP),
                    k: k as i64,
                    renorm: order.as_attr(),
                    output_softmax_result_flag: false,
                    y_out: &y.handle(&yd, OP),
                    expert_idx_out: &idx.handle(&id, OP),
                    softmax_result_out: None,
                },
            )
            .map_err(|e| device_error(OP, e))?;
        }
        Ok((y, Ascend::int_cast(idx, IntDType::I64)))
    }
}
