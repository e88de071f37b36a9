//! Fused inference attention: `aclnnFusedInferAttentionScoreV4`, with the base
//! `aclnnFusedInferAttentionScore` as the fallback when V4 is absent and the call needs nothing
//! only V4 has (the learnable sink, separate key/value antiquant).

use super::call::{attr, cptr, ia, missing, t, two_stage};
use crate::acl::error::{AclError, Result};
use crate::acl::ffi::names;
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
    let n = std::ptr::null();
    if let Some(f) = api.fia_v4 {
        return two_stage(rt, names::fia_v4, f.launch, |ws, ex| {
            // SAFETY: the arguments follow the V4 prototype in order; handles live for the
            // call, nulls only for optional inputs, the string NUL-terminated.
            unsafe {
                (f.workspace)(
                    a.query.as_ptr(),
                    a.key.as_ptr(),
                    a.value.as_ptr(),
                    t(a.pse_shift),
                    t(a.atten_mask),
                    ia(a.actual_seq_lengths),
                    ia(a.actual_seq_lengths_kv),
                    n,
                    n,
                    n,
                    n,
                    n,
                    t(a.antiquant_scale),
                    t(a.antiquant_offset),
                    t(a.block_table),
                    t(a.query_padding_size),
                    t(a.kv_padding_size),
                    t(a.key_antiquant_scale),
                    t(a.key_antiquant_offset),
                    t(a.value_antiquant_scale),
                    t(a.value_antiquant_offset),
                    n,
                    n,
                    std::ptr::null(),
                    n,
                    n,
                    n,
                    n,
                    t(a.learnable_sink),
                    a.num_heads,
                    a.scale_value,
                    a.pre_tokens,
                    a.next_tokens,
                    cptr(&layout),
                    a.num_key_value_heads,
                    a.sparse_mode,
                    a.inner_precise,
                    a.block_size,
                    a.antiquant_mode,
                    a.softmax_lse_flag,
                    a.key_antiquant_mode,
                    a.value_antiquant_mode,
                    0,
                    a.attention_out.as_ptr(),
                    t(a.softmax_lse),
                    ws,
                    ex,
                )
            }
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
        // SAFETY: the arguments follow the base prototype in order (see `FiaWs`).
        unsafe {
            (f.workspace)(
                a.query.as_ptr(),
                a.key.as_ptr(),
                a.value.as_ptr(),
                t(a.pse_shift),
                t(a.atten_mask),
                ia(a.actual_seq_lengths),
                ia(a.actual_seq_lengths_kv),
                n,
                n,
                n,
                n,
                n,
                t(a.antiquant_scale),
                t(a.antiquant_offset),
                t(a.block_table),
                t(a.query_padding_size),
                t(a.kv_padding_size),
                a.num_heads,
                a.scale_value,
                a.pre_tokens,
                a.next_tokens,
                cptr(&layout),
                a.num_key_value_heads,
                a.sparse_mode,
                a.inner_precise,
                a.block_size,
                a.antiquant_mode,
                a.softmax_lse_flag,
                a.attention_out.as_ptr(),
                t(a.softmax_lse),
                ws,
                ex,
            )
        }
    })
}
