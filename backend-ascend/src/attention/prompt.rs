//! Prompt (prefill) attention on the device: `aclnnPromptFlashAttentionV3` (V1 when V3 is
//! absent and the call needs nothing only V3 has) over the query/key/value views as they are.
//! The dense mask and the pse are the caller's device tensors, made what the op takes on the
//! device (the 0/1 float mask compared with 0 into a BOOL tensor, the pse cast to the query's
//! dtype where it differs): nothing is uploaded from the host but CANN's compressed mask (a
//! runtime constant). An f32 call runs the composite on the native ops (counted as
//! [`PROMPT_COMPOSITE`]): CANN's PFA takes no FLOAT.

use burn_ascend_ops::backend::PromptInputs;
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::ndarray::cpu_prompt_fwd;
use burn_ascend_ops::prompt::composite::{self, shapes};
use burn_ascend_ops::prompt::PromptSpec;
use burn_backend::ops::FloatTensorOps;
use burn_backend::{BoolStore, DType, Scalar, Shape};

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
    let device = same_device(OP, &inputs.all())?;
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
    // The op's mask is BOOL (1 = masked) and its pse in the query's dtype: both made on the
    // device from the caller's tensors.
    let inputs = PromptInputs {
        atten_mask: inputs
            .atten_mask
            .map(|m| Ascend::float_not_equal_elem(m, Scalar::from(0.0f32), BoolStore::Native)),
        pse_shift: inputs.pse_shift.map(|p| {
            if p.dtype == dtype {
                p
            } else {
                Ascend::float_cast(p, dtype.into())
            }
        }),
        ..inputs
    };
    {
        let x = inputs.as_ref().map(|t| view_handle(t, OP));
        let o = view_handle(&out, OP);
        builders::prompt(&rt, spec, &x.as_ref(), &o).map_err(|e| device_error(OP, e))?;
    }
    Ok(out)
}
