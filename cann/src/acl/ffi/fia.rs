//! The prototypes of fused inference attention (V4 and the base op, its fallback).
//! Copied from the aclnn docs and headers named per prototype; every integer has the header's
//! width, checked against CANN's headers by `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnFusedInferAttentionScoreV4GetWorkspaceSize`
    /// (`shared/reference/aclnnFusedInferAttentionScoreV4.md`).
    FiaV4Ws, FiaV4Params(
        query: T,
        key: TL,
        value: TL,
        pse_shift: T,
        atten_mask: T,
        actual_seq_lengths: IA,
        actual_seq_lengths_kv: IA,
        deq_scale1: T,
        quant_scale1: T,
        deq_scale2: T,
        quant_scale2: T,
        quant_offset2: T,
        antiquant_scale: T,
        antiquant_offset: T,
        block_table: T,
        query_padding_size: T,
        kv_padding_size: T,
        key_antiquant_scale: T,
        key_antiquant_offset: T,
        value_antiquant_scale: T,
        value_antiquant_offset: T,
        key_shared_prefix: T,
        value_shared_prefix: T,
        actual_shared_prefix_len: IA,
        query_rope: T,
        key_rope: T,
        key_rope_antiquant_scale: T,
        dequant_scale_query: T,
        learnable_sink: T,
        num_heads: i64,
        scale_value: f64,
        pre_tokens: i64,
        next_tokens: i64,
        input_layout: *mut c_char,
        num_key_value_heads: i64,
        sparse_mode: i64,
        inner_precise: i64,
        block_size: i64,
        antiquant_mode: i64,
        softmax_lse_flag: bool,
        key_antiquant_mode: i64,
        value_antiquant_mode: i64,
        query_quant_mode: i64,
        attention_out: T,
        softmax_lse: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnFusedInferAttentionScoreGetWorkspaceSize` (the base op: no separate key/value
    /// antiquant, shared prefix, rope or sink; prototype from ops-transformer
    /// `attention/fused_infer_attention_score/op_host/op_api/aclnn_fused_infer_attention_score.cpp`).
    FiaWs, FiaParams(
        query: T,
        key: TL,
        value: TL,
        pse_shift: T,
        atten_mask: T,
        actual_seq_lengths: IA,
        actual_seq_lengths_kv: IA,
        deq_scale1: T,
        quant_scale1: T,
        deq_scale2: T,
        quant_scale2: T,
        quant_offset2: T,
        antiquant_scale: T,
        antiquant_offset: T,
        block_table: T,
        query_padding_size: T,
        kv_padding_size: T,
        num_heads: i64,
        scale_value: f64,
        pre_tokens: i64,
        next_tokens: i64,
        input_layout: *mut c_char,
        num_key_value_heads: i64,
        sparse_mode: i64,
        inner_precise: i64,
        block_size: i64,
        antiquant_mode: i64,
        softmax_lse_flag: bool,
        attention_out: T,
        softmax_lse: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

// The base op is V4 less separate key/value antiquant (modes 0), shared prefix, rope, query
// quantisation (mode 0) and the learnable sink: none given.
narrower_prototype!(
    FiaParams,
    FiaV4Params,
    [
        query, key, value, pse_shift, atten_mask, actual_seq_lengths, actual_seq_lengths_kv,
        deq_scale1, quant_scale1, deq_scale2, quant_scale2, quant_offset2, antiquant_scale,
        antiquant_offset, block_table, query_padding_size, kv_padding_size, num_heads,
        scale_value, pre_tokens, next_tokens, input_layout, num_key_value_heads, sparse_mode,
        inner_precise, block_size, antiquant_mode, softmax_lse_flag, attention_out, softmax_lse,
        workspace_size, executor,
    ],
    [
        key_antiquant_scale: std::ptr::null(),
        key_antiquant_offset: std::ptr::null(),
        value_antiquant_scale: std::ptr::null(),
        value_antiquant_offset: std::ptr::null(),
        key_shared_prefix: std::ptr::null(),
        value_shared_prefix: std::ptr::null(),
        actual_shared_prefix_len: std::ptr::null(),
        query_rope: std::ptr::null(),
        key_rope: std::ptr::null(),
        key_rope_antiquant_scale: std::ptr::null(),
        dequant_scale_query: std::ptr::null(),
        learnable_sink: std::ptr::null(),
        key_antiquant_mode: 0,
        value_antiquant_mode: 0,
        query_quant_mode: 0,
    ]
);
