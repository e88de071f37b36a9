//! Incremental (decode) attention on the device: `aclnnIncreFlashAttentionV4` over contiguous
//! KV, the tensor-list form or the paged caches with their block table. The spec's host-side
//! inputs (mask, pse, block table, `kvPaddingSize`) are uploaded for the call. An f32 call runs
//! the composite on the native ops (counted as [`INCRE_COMPOSITE`]): CANN's IFA takes no FLOAT.
//!
//! int8 KV reaches the Burn API as float tensors holding the int8 values (exact); with
//! `antiquant` the key and value are cast to INT8 on the device (`aclnnCast`) and the scale /
//! offset uploaded in the query's dtype, so the op runs its own dequantisation. The cast reads
//! the KV once more per call: a cache kept in int8 Burn tensors would avoid it, but Burn's
//! float-tensor API for this op does not carry one.

use burn_ascend_ops::backend::IncreInputs;
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::incre::composite::{self, shapes};
use burn_ascend_ops::incre::IncreSpec;
use burn_ascend_ops::ndarray::cpu_incre_fwd;
use burn_backend::{DType, Shape};

use super::{builders, same_device, view_handle, INCRE_COMPOSITE};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::ops::native_elementwise;
use crate::tensor::{device_error, AscendTensor};
use crate::Ascend;

/// Label of the call in error messages.
const OP: &str = "incre_fwd";

pub(super) fn incre_fwd(
    inputs: IncreInputs<AscendTensor>,
    spec: &IncreSpec,
) -> Result<AscendTensor> {
    spec.validate(&shapes::<Ascend>(&inputs, spec))?;
    if spec.post_quant.is_some() {
        return Err(AttnError::Unsupported(
            "int8 attentionOut (quantScale2) on the Burn API: use the host path \
             (burn-ascend run incre --device npu)"
                .into(),
        ));
    }
    let device = same_device(OP, &inputs.all())?;
    let dtype = inputs.query.dtype;
    if !is_acl_float(dtype) || inputs.all().iter().any(|t| t.dtype != dtype) {
        count(OP);
        return cpu_incre_fwd::<Ascend>(inputs, spec);
    }
    if dtype == DType::F32 {
        // CANN's IFA takes FLOAT16 / BFLOAT16 queries only (`incre_flash_attention_def.cpp`).
        count(INCRE_COMPOSITE);
        return composite::incre_fwd::<Ascend>(inputs, spec);
    }
    // int8 KV (antiquant) goes to the op as INT8, cast on the device; other KV as it is.
    let kv = match spec.antiquant {
        None => inputs.kv.clone(),
        Some(_) => {
            let cast = inputs
                .kv
                .as_ref()
                .map(|t| native_elementwise::cast(t, DType::I8));
            let (k, v) = cast.as_ref().into_lists();
            if k.iter().chain(&v).any(|t| t.is_none()) {
                count(OP);
                return cpu_incre_fwd::<Ascend>(inputs, spec);
            }
            cast.map(|t| t.expect("every cast succeeded (checked above)"))
        }
    };
    let x = IncreInputs {
        query: inputs.query,
        kv,
    };
    let rt = runtime(&device);
    let out = AscendTensor::alloc(Shape::from(x.query.shape.to_vec()), dtype, &device);
    builders::incre(
        &rt,
        spec,
        x.query.acl_dtype(OP),
        x.as_ref().map(|t| view_handle(t, OP)),
        &view_handle(&out, OP),
    )
    .map_err(|e| device_error(OP, e))?;
    Ok(out)
}
