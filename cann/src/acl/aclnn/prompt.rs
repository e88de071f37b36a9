//! Prompt flash attention: `aclnnPromptFlashAttentionV3`, V1 its fallback.

use super::call::{attr, cptr, ia, missing, t};
use super::two_stage;
use crate::acl::error::{AclError, Result};
use crate::acl::ffi::{names, PfaV3Params, Prototype};
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Tensor};

/// Arguments of `aclnnPromptFlashAttentionV3`, in prototype order.
pub struct PromptArgs<'a> {
    pub query: &'a Tensor<'a>,
    pub key: &'a Tensor<'a>,
    pub value: &'a Tensor<'a>,
    pub pse_shift: Option<&'a Tensor<'a>>,
    pub atten_mask: Option<&'a Tensor<'a>>,
    pub actual_seq_lengths: Option<&'a IntArray>,
    pub actual_seq_lengths_kv: Option<&'a IntArray>,
    pub deq_scale1: Option<&'a Tensor<'a>>,
    pub quant_scale1: Option<&'a Tensor<'a>>,
    pub deq_scale2: Option<&'a Tensor<'a>>,
    pub quant_scale2: Option<&'a Tensor<'a>>,
    pub quant_offset2: Option<&'a Tensor<'a>>,
    pub num_heads: i64,
    pub scale_value: f64,
    pub pre_tokens: i64,
    pub next_tokens: i64,
    pub input_layout: &'a str,
    pub num_key_value_heads: i64,
    pub sparse_mode: i64,
    pub inner_precise: i64,
    pub attention_out: &'a Tensor<'a>,
}

/// Prompt attention: `aclnnPromptFlashAttentionV3`, or `aclnnPromptFlashAttention` (V1) when
/// V3 is absent and the call needs nothing only V3 has (KV lengths, quantisation, a sparse
/// mode, innerPrecise other than 1).
pub fn prompt(rt: &Runtime, a: &PromptArgs<'_>) -> Result<()> {
    let api = rt.api();
    let layout = attr("inputLayout", a.input_layout)?;
    let v3 = |workspace_size, executor| PfaV3Params {
        query: a.query.as_ptr(),
        key: a.key.as_ptr(),
        value: a.value.as_ptr(),
        pse_shift: t(a.pse_shift),
        atten_mask: t(a.atten_mask),
        actual_seq_lengths: ia(a.actual_seq_lengths),
        actual_seq_lengths_kv: ia(a.actual_seq_lengths_kv),
        deq_scale1: t(a.deq_scale1),
        quant_scale1: t(a.quant_scale1),
        deq_scale2: t(a.deq_scale2),
        quant_scale2: t(a.quant_scale2),
        quant_offset2: t(a.quant_offset2),
        num_heads: a.num_heads,
        scale_value: a.scale_value,
        pre_tokens: a.pre_tokens,
        next_tokens: a.next_tokens,
        input_layout: cptr(&layout),
        num_key_value_heads: a.num_key_value_heads,
        sparse_mode: a.sparse_mode,
        inner_precise: a.inner_precise,
        attention_out: a.attention_out.as_ptr(),
        workspace_size,
        executor,
    };
    if let Some(f) = api.pfa_v3 {
        return two_stage(rt, names::pfa_v3, f.launch, |ws, ex| {
            // SAFETY: the arguments follow the V3 prototype; handles live for the call, nulls
            // only for optional inputs, the string NUL-terminated.
            unsafe { v3(ws, ex).call(f.workspace) }
        });
    }
    let Some(f) = api.pfa_v1 else {
        return Err(missing(&format!(
            "{} (and {})",
            names::pfa_v3,
            names::pfa_v1
        )));
    };
    let quant = [
        a.deq_scale1,
        a.quant_scale1,
        a.deq_scale2,
        a.quant_scale2,
        a.quant_offset2,
    ];
    if a.actual_seq_lengths_kv.is_some()
        || quant.iter().any(Option::is_some)
        || a.sparse_mode != 0
        || a.inner_precise != 1
    {
        return Err(AclError::Unsupported(format!(
            "actualSeqLengthsKv, quantisation, sparseMode != 0 and innerPrecise != 1 need {}, which this CANN lacks",
            names::pfa_v3
        )));
    }
    two_stage(rt, names::pfa_v1, f.launch, |ws, ex| {
        // SAFETY: as for V3; the call gives nothing V1 lacks (checked above), so narrowing the
        // arguments to the V1 prototype (seed 001) drops none that were set.
        unsafe { v3(ws, ex).to_narrow().call(f.workspace) }
    })
}
