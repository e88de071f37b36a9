//! Prompt (prefill) attention on the device: `aclnnPromptFlashAttentionV3` (V1 when V3 is
//! absent and the call needs nothing only V3 has) over the query/key/value views as they are.
//! The dense mask and the pse are the caller's device tensors, made what the op takes on the
//! device (the 0/1 float mask compared with 0 into a BOOL tensor, the pse cast to the query's
//! dtype where it differs): nothing is uploaded from the host but CANN's compressed mask (a
//! runtime constant). An f32 call runs the composite on the native ops (counted as
//! [`PROMPT_COMPOSITE`]): CANN's PFA takes no FLOAT.
//!
//! The builder half ([`prompt`]) knows no Burn: the validated spec plus aclnn handles in, one
//! aclnn call out; the op-replay CLI's `--device sim|npu` calls it too.

use burn_ascend_cann::acl::{aclnn, Result as AclResult, Runtime, Tensor};
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::prompt::ndarray::cpu_prompt_fwd;
use burn_ascend_ops::prompt::{composite, PromptBackend, PromptInputs, PromptMaskKind, PromptSpec};
use burn_backend::ops::FloatTensorOps;
use burn_backend::{BoolStore, Scalar, Shape};

use super::common::{
    compressed_prompt_mask, dtype_path, handle_of, ints, post_quant, same_device, view_handle,
    DtypePath,
};
use crate::device::runtime;
use crate::tensor::{device_error, AscendTensor};
use crate::Ascend;

/// The counter (in [`crate::fallback_counts`]) of f32 calls that ran the ops crate's composite
/// on this backend's native ops because CANN's op takes no FLOAT query / key (the same holds of
/// [`super::INCRE_COMPOSITE`], [`super::FIA_COMPOSITE`] and [`super::SCATTER_COMPOSITE`]).
pub const PROMPT_COMPOSITE: &str = "prompt_composite";

/// Label of the call in error messages.
const OP: &str = "prompt_fwd";

impl PromptBackend for Ascend {
    fn prompt_fwd(inputs: PromptInputs<AscendTensor>, spec: &PromptSpec) -> Result<AscendTensor> {
        let dims = spec.validate(&burn_ascend_ops::prompt::shapes(&inputs))?;
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
        match dtype_path(dtype, [k, v], OP, PROMPT_COMPOSITE) {
            DtypePath::Host => return cpu_prompt_fwd::<Ascend>(inputs, spec),
            // CANN's PFA takes no FLOAT query (`prompt_flash_attention_def.cpp`): the composite
            // on the native ops gives the f32 answer.
            DtypePath::Composite => return composite::prompt_fwd::<Ascend>(inputs, spec),
            DtypePath::Kernel => {}
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
            prompt(&rt, spec, &x.as_ref(), &o).map_err(|e| device_error(OP, e))?;
        }
        Ok(out)
    }
}

/// `aclnnPromptFlashAttentionV3` (or V1) for a validated spec: query/key/value in the
/// query's float dtype (`pseShift` too), `attention_out` in it as well, or INT8 with
/// `quantScale2`. The dense `attenMask` is the caller's device tensor in a mask dtype (BOOL,
/// INT8 or UINT8); CANN's compressed mask (sparse modes 2–4) is a runtime constant.
pub fn prompt(
    rt: &Runtime,
    spec: &PromptSpec,
    x: &PromptInputs<&Tensor<'_>>,
    attention_out: &Tensor<'_>,
) -> AclResult<()> {
    let compressed = match spec.atten_mask {
        PromptMaskKind::Compressed => Some(compressed_prompt_mask(rt)?),
        PromptMaskKind::None | PromptMaskKind::Dense => None,
    };
    let (qs2, qo2) = post_quant(rt, spec.post_quant.as_ref())?;
    {
        let compressed = handle_of(&compressed)?;
        let mask = x.atten_mask.or(compressed.as_ref());
        let (qs2, qo2) = (handle_of(&qs2)?, handle_of(&qo2)?);
        let asl = ints(rt, spec.actual_seq_lengths.as_deref())?;
        let asl_kv = ints(rt, spec.actual_seq_lengths_kv.as_deref())?;
        aclnn::prompt(
            rt,
            &aclnn::PromptArgs {
                query: x.query,
                key: x.key,
                value: x.value,
                pse_shift: x.pse_shift,
                atten_mask: mask,
                actual_seq_lengths: asl.as_ref(),
                actual_seq_lengths_kv: asl_kv.as_ref(),
                deq_scale1: None,
                quant_scale1: None,
                deq_scale2: None,
                quant_scale2: qs2.as_ref(),
                quant_offset2: qo2.as_ref(),
                num_heads: spec.num_heads as i64,
                scale_value: spec.scale_value,
                pre_tokens: spec.pre_tokens,
                next_tokens: spec.next_tokens,
                input_layout: spec.input_layout.as_attr(),
                num_key_value_heads: spec.num_key_value_heads as i64,
                sparse_mode: spec.sparse_mode,
                inner_precise: spec.inner_precise,
                attention_out,
            },
        )?;
    }
    Ok(())
}
