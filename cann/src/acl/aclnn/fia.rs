//! Fused inference attention: `aclnnFusedInferAttentionScoreV4`, with the base
//! `aclnnFusedInferAttentionScore` as the fallback when V4 is absent and the call needs nothing
//! only V4 has (the learnable sink, separate key/value antiquant).

use std::ptr::null;

use super::call::{attr, cptr, ia, missing, t, two_stage};
use crate::acl::error::{AclError, Result};
use crate::acl::ffi::{names, FiaV4Params, Prototype};
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Tensor, TensorList};

/// Arguments of `aclnnFusedInferAttentionScoreV4`, in prototype order. The inputs this build
/// never passes (quantisation of the query and output, shared prefix, rope) are sent as null;
/// `queryQuantMode` as 0.
pub struct FiaArgs<'a> {
    pub query: &'a Tensor<'a>,
    pub key: &'a TensorList<'a>,
    pub value: &'a TensorList<'a>,
    pub pse_shift: Option<&'a Tensor<'a>>,
    pub atten_mask: Option<&'a Tensor<'a>>,
    pub actual_seq_lengths: Option<&'a IntArray>,
    pub actual_seq_lengths_kv: Option<&'a IntArray>,
    pub antiquant_scale: Option<&'a Tensor<'a>>,
    pub antiquant_offset: Option<&'a Tensor<'a>>,
    pub block_table: Option<&'a Tensor<'a>>,
    pub query_padding_size: Option<&'a Tensor<'a>>,
    pub kv_padding_size: Option<&'a Tensor<'a>>,
    pub key_antiquant_scale: Option<&'a Tensor<'a>>,
    pub key_antiquant_offset: Option<&'a Tensor<'a>>,
    pub value_antiquant_scale: Option<&'a Tensor<'a>>,
    pub value_antiquant_offset: Option<&'a Tensor<'a>>,
    pub learnable_sink: Option<&'a Tensor<'a>>,
    pub num_heads: i64,
    pub scale_value: f64,
    pub pre_tokens: i64,
    pub next_tokens: i64,
    pub input_layout: &'a str,
    pub num_key_value_heads: i64,
    pub sparse_mode: i64,
    pub inner_precise: i64,
    pub block_size: i64,
    pub antiquant_mode: i64,
    pub softmax_lse_flag: bool,
    pub key_antiquant_mode: i64,
    pub value_antiquant_mode: i64,
    pub attention_out: &'a Tensor<'a>,
    pub softmax_lse: Option<&'a Tensor<'a>>,
}

/// Fused inference attention: V4, or the base op when V4 is absent and the call has no sink
/// and no separate key/value antiquant.
pub fn fused_infer_attention_score_v4(rt: &Runtime, a: &FiaArgs<'_>) -> Result<()> {
    let api = rt.api();
    let layout = attr("inputLayout", a.input_layout)?;
    let v4 = |workspace_size, executor| FiaV4Params {
        query: a.query.as_ptr(),
        key: a.key.as_ptr(),
        value: a.value.as_ptr(),
        pse_shift: t(a.pse_shift),
        atten_mask: t(a.atten_mask),
        actual_seq_lengths: ia(a.actual_seq_lengths),
        actual_seq_lengths_kv: ia(a.actual_seq_lengths_kv),
        deq_scale1: null(),
        quant_scale1: null(),
        deq_scale2: null(),
        quant_scale2: null(),
        quant_offset2: null(),
        antiquant_scale: t(a.antiquant_scale),
        antiquant_offset: t(a.antiquant_offset),
        block_table: t(a.block_table),
        query_padding_size: t(a.query_padding_size),
        kv_padding_size: t(a.kv_padding_size),
        key_antiquant_scale: t(a.key_antiquant_scale),
        key_antiquant_offset: t(a.key_antiquant_offset),
        value_antiquant_scale: t(a.value_antiquant_scale),
        value_antiquant_offset: t(a.value_antiquant_offset),
        key_shared_prefix: null(),
        value_shared_prefix: null(),
        actual_shared_prefix_len: null(),
        query_rope: null(),
        key_rope: null(),
        key_rope_antiquant_scale: null(),
        dequant_scale_query: null(),
        learnable_sink: t(a.learnable_sink),
        num_heads: a.num_heads,
        scale_value: a.scale_value,
        pre_tokens: a.pre_tokens,
        next_tokens: a.next_tokens,
        input_layout: cptr(&layout),
        num_key_value_heads: a.num_key_value_heads,
        sparse_mode: a.sparse_mode,
        inner_precise: a.inner_precise,
        block_size: a.block_size,
        antiquant_mode: a.antiquant_mode,
        softmax_lse_flag: a.softmax_lse_flag,
        key_antiquant_mode: a.key_antiquant_mode,
        value_antiquant_mode: a.value_antiquant_mode,
        query_quant_mode: 0,
        attention_out: a.attention_out.as_ptr(),
        softmax_lse: t(a.softmax_lse),
        workspace_size,
        executor,
    };
    if let Some(f) = api.fia_v4 {
        return two_stage(rt, names::fia_v4, f.launch, |ws, ex| {
            // SAFETY: the arguments follow the V4 prototype; handles live for the call, nulls
            // only for optional inputs, the string NUL-terminated.
            unsafe { v4(ws, ex).call(f.workspace) }
        });
    }
    let Some(f) = api.fia_base else {
        return Err(missing(&format!(
            "{} (and {})",
            names::fia_v4,
            names::fia_base
        )));
    };
    let separate = [
        a.key_antiquant_scale,
        a.key_antiquant_offset,
        a.value_antiquant_scale,
        a.value_antiquant_offset,
    ];
    if a.learnable_sink.is_some() || separate.iter().any(Option::is_some) {
        return Err(AclError::Unsupported(format!(
            "learnableSink and keyAntiquantScale/valueAntiquantScale need {}, which this CANN lacks",
            names::fia_v4
        )));
    }
    two_stage(rt, names::fia_base, f.launch, |ws, ex| {
        // SAFETY: as for V4; the call gives nothing the base op lacks (checked above), so
        // narrowing the arguments to its prototype (see `FiaWs`) drops none that were set.
        unsafe { v4(ws, ex).to_narrow().call(f.workspace) }
    })
}
