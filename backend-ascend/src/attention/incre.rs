//! Incremental (decode) attention on the device: `aclnnIncreFlashAttentionV4` over contiguous
//! KV, the tensor-list form or the paged caches with their block table. The mask, pse and
//! antiquant scales are the carrier's tensors, converted on the device to the dtypes the op
//! takes (the mask BOOL, the rest the query's); the spec's host-side inputs (block table,
//! `kvPaddingSize`) are uploaded for the call. An f32 call runs
//! the composite on the native ops (counted as [`INCRE_COMPOSITE`]): CANN's IFA takes no FLOAT.
//!
//! int8 KV reaches the Burn API as float tensors holding the int8 values (exact); with
//! an antiquant scale the key and value are cast to INT8 on the device (`aclnnCast`) and the
//! scale / offset cast to the query's dtype, so the op runs its own dequantisation. The cast reads
//! the KV once more per call: a cache kept in int8 Burn tensors would avoid it, but Burn's
//! float-tensor API for this op does not carry one.

use burn_ascend_cann::acl::aclnn::Compare;
use burn_ascend_ops::backend::IncreInputs;
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::incre::composite::{self, shapes};
use burn_ascend_ops::incre::IncreSpec;
use burn_ascend_ops::ndarray::cpu_incre_fwd;
use burn_backend::{BoolStore, DType, Shape};

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
    spec.validate(&shapes::<Ascend>(&inputs))?;
    if spec.post_quant.is_some() {
        return Err(AttnError::Unsupported(
            "int8 attentionOut (quantScale2) on the Burn API: use the host path \
             (burn-ascend run incre --device npu)"
                .into(),
        ));
    }
    let device = same_device(OP, &inputs.all())?;
    let dtype = inputs.query.dtype;
    let (keys, values) = inputs.kv.as_ref().into_lists();
    if !is_acl_float(dtype) || keys.iter().chain(&values).any(|t| t.dtype != dtype) {
        count(OP);
        return cpu_incre_fwd::<Ascend>(inputs, spec);
    }
    if dtype == DType::F32 {
        // CANN's IFA takes FLOAT16 / BFLOAT16 queries only (`incre_flash_attention_def.cpp`).
        count(INCRE_COMPOSITE);
        return composite::incre_fwd::<Ascend>(inputs, spec);
    }
    // int8 KV (antiquant) goes to the op as INT8, cast on the device; other KV as it is.
    let kv = match inputs.antiquant_scale {
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
    // The optional inputs in the dtypes the op takes, converted on the device: the mask BOOL
    // (non-zero = masked), pse and antiquant scales in the query's dtype.
    let (Some(atten_mask), Some(pse_shift), Some(antiquant_scale), Some(antiquant_offset)) = (
        on_device(&inputs.atten_mask, mask_to_bool),
        on_device(&inputs.pse_shift, |t| native_elementwise::cast(t, dtype)),
        on_device(&inputs.antiquant_scale, |t| {
            native_elementwise::cast(t, dtype)
        }),
        on_device(&inputs.antiquant_offset, |t| {
            native_elementwise::cast(t, dtype)
        }),
    ) else {
        count(OP);
        return cpu_incre_fwd::<Ascend>(inputs, spec);
    };
    let x = IncreInputs {
        query: inputs.query,
        kv,
        atten_mask,
        pse_shift,
        antiquant_scale,
        antiquant_offset,
    };
    let rt = runtime(&device);
    let out = AscendTensor::alloc(Shape::from(x.query.shape.to_vec()), dtype, &device);
    builders::incre(
        &rt,
        spec,
        x.as_ref().map(|t| view_handle(t, OP)),
        &view_handle(&out, OP),
    )
    .map_err(|e| device_error(OP, e))?;
    Ok(out)
}

/// An optional input through a device conversion: `Some(None)` when absent, `None` when the
/// conversion has no device kernel (the caller falls back).
pub(super) fn on_device(
    t: &Option<AscendTensor>,
    convert: impl Fn(&AscendTensor) -> Option<AscendTensor>,
) -> Option<Option<AscendTensor>> {
    match t {
        None => Some(None),
        Some(t) => convert(t).map(Some),
    }
}

/// A mask given as a float tensor holding 0/1 as the BOOL tensor the attention ops take
/// (non-zero = masked), on the device (`aclnnNeScalar`); `None` without a device kernel.
pub(super) fn mask_to_bool(mask: &AscendTensor) -> Option<AscendTensor> {
    native_elementwise::compare_scalar(
        Compare::Ne,
        mask,
        burn_backend::Scalar::Float(0.0),
        BoolStore::Native,
    )
}
