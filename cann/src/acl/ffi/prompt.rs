//! The prototypes of prompt flash attention (V3 and V1, its fallback).
//! Copied from the aclnn docs and headers named per prototype; every integer has the header's
//! width, checked against CANN's headers by `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnPromptFlashAttentionV3GetWorkspaceSize` (aclnnPromptFlashAttentionV3.md).
    PfaV3Ws, PfaV3Params(
        query: T,
        key: T,
        value: T,
        pse_shift: T,
        atten_mask: T,
        actual_seq_lengths: IA,
        actual_seq_lengths_kv: IA,
        deq_scale1: T,
        quant_scale1: T,
        deq_scale2: T,
        quant_scale2: T,
        quant_offset2: T,
        num_heads: i64,
        scale_value: f64,
        pre_tokens: i64,
        next_tokens: i64,
        input_layout: *mut c_char,
        num_key_value_heads: i64,
        sparse_mode: i64,
        inner_precise: i64,
        attention_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnPromptFlashAttentionGetWorkspaceSize` (seed 001, "V1").
    PfaV1Ws, PfaV1Params(
        query: T,
        key: T,
        value: T,
        pse_shift: T,
        atten_mask: T,
        actual_seq_lengths: IA,
        num_heads: i64,
        scale_value: f64,
        pre_tokens: i64,
        next_tokens: i64,
        input_layout: *mut c_char,
        num_key_value_heads: i64,
        attention_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

// V1 is V3 less the KV lengths and the quantisation (none given), the sparse mode (0) and
// innerPrecise (1).
narrower_prototype!(
    PfaV1Params,
    PfaV3Params,
    [
        query, key, value, pse_shift, atten_mask, actual_seq_lengths, num_heads, scale_value,
        pre_tokens, next_tokens, input_layout, num_key_value_heads, attention_out,
        workspace_size, executor,
    ],
    [
        actual_seq_lengths_kv: std::ptr::null(),
        deq_scale1: std::ptr::null(),
        quant_scale1: std::ptr::null(),
        deq_scale2: std::ptr::null(),
        quant_scale2: std::ptr::null(),
        quant_offset2: std::ptr::null(),
        sparse_mode: 0,
        inner_precise: 1,
    ]
);
