//! Prompt (prefill) attention on the device: `aclnnPromptFlashAttentionV3` (V1 when V3 is
//! absent and the call needs nothing only V3 has) over the query/key/value views as they are.
//! The spec's host-side inputs (mask, pse) are uploaded for the call. An f32 call runs the
//! composite on the native ops (counted as [`PROMPT_COMPOSITE`]): CANN's PFA takes no FLOAT.

use burn_ascend_ops::backend::PromptInputs;
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::ndarray::cpu_prompt_fwd;
use burn_ascend_ops::prompt::composite::{self, shapes};
use burn_ascend_ops::prompt::PromptSpec;
use burn_backend::{DType, Shape};

use super::{builders, same_device, view_handle, PROMPT_COMPOSITE};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{device_error, AscendTensor};
use crate::Ascend;

/// Label of the call in error messages.
const OP: &str = "prompt_fwd";

pub(super) fn prompt_fwd(
    inputs: PromptInputs<AscendTensor>,
    spec: &PromptSpec,
) -> Result<AscendTensor> {
    let dims = spec.validate(&shapes(&inputs))?;
    if spec.post_quant.is_some() {
        return Err(AttnError::Unsupported(
            "int8 attentionOut (quantScale2) on the Burn API: Burn float tensors cannot hold it; \
             use the host path (burn-ascend run prompt --device npu)"
                .into(),
        ));
    }
    let (q, k, v) = (&inputs.query, &inputs.key, &inputs.value);
    let device = same_device(OP, &[q, k, v])?;
    let dtype = q.dtype;
    if !is_acl_float(dtype) || k.dtype != dtype || v.dtype != dtype {
        count(OP);
        return cpu_prompt_fwd::<Ascend>(inputs, spec);
    }
    if dtype == DType::F32 {
        // CANN's PFA takes no FLOAT query (`prompt_flash_attention_def.cpp`): the composite on
        // the native ops gives the f32 answer.
        count(PROMPT_COMPOSITE);
        return composite::prompt_fwd::<Ascend>(inputs, spec);
    }
    let rt = runtime(&device);
    let out = AscendTensor::alloc(Shape::from(dims.out_shape()), dtype, &device);
    {
        let x = inputs.as_ref().map(|t| view_handle(t, OP));
        let o = view_handle(&out, OP);
        builders::prompt(&rt, spec, q.acl_dtype(OP), &x.as_ref(), &o)
            .map_err(|e| device_error(OP, e))?;
    }
    Ok(out)
}
