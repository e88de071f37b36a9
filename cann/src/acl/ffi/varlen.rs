//! The prototypes of the varlen flash attention ops: the forward (`aclnnFlashAttentionVarLenScore`
//! and its V5) and the backward (`aclnnFlashAttentionUnpaddingScoreGrad` and its V5). Copied from
//! the aclnn docs and headers named per prototype; every integer has the header's width, checked
//! against CANN's headers by `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnFlashAttentionVarLenScoreV5GetWorkspaceSize` (aclnnFlashAttentionVarLenScoreV5.md).
    VarlenFwdV5Ws, VarlenFwdV5Params(
        query: T,
        query_rope: T,
        key: T,
        key_rope: T,
        value: T,
        real_shift: T,
        drop_mask: T,
        padding_mask: T,
        atten_mask: T,
        sink: T,
        prefix: IA,
        actual_seq_q_len: IA,
        actual_seq_kv_len: IA,
        q_start_idx: IA,
        kv_start_idx: IA,
        scale_value: f64,
        keep_prob: f64,
        pre_tokens: i64,
        next_tokens: i64,
        head_num: i64,
        input_layout: *mut c_char,
        inner_precise: i64,
        sparse_mode: i64,
        pse_type: i64,
        softmax_out_layout: *mut c_char,
        softmax_max_out: T,
        softmax_sum_out: T,
        softmax_out_out: T,
        attention_out_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnFlashAttentionVarLenScoreGetWorkspaceSize` (seed 003): no rope, sink, start indices,
    /// pseType or softmax layout.
    VarlenFwdBaseWs, VarlenFwdBaseParams(
        query: T,
        key: T,
        value: T,
        real_shift: T,
        drop_mask: T,
        padding_mask: T,
        atten_mask: T,
        prefix: IA,
        actual_seq_q_len: IA,
        actual_seq_kv_len: IA,
        scale_value: f64,
        keep_prob: f64,
        pre_tokens: i64,
        next_tokens: i64,
        head_num: i64,
        input_layout: *mut c_char,
        inner_precise: i64,
        sparse_mode: i64,
        softmax_max_out: T,
        softmax_sum_out: T,
        softmax_out_out: T,
        attention_out_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnFlashAttentionUnpaddingScoreGradV5GetWorkspaceSize` (seed 002).
    VarlenGradV5Ws, VarlenGradV5Params(
        query: T,
        query_rope: T,
        key: T,
        key_rope: T,
        value: T,
        dy: T,
        pse_shift: T,
        drop_mask: T,
        padding_mask: T,
        atten_mask: T,
        softmax_max: T,
        softmax_sum: T,
        softmax_in: T,
        attention_in: T,
        sink_in: T,
        prefix: IA,
        actual_seq_q_len: IA,
        actual_seq_kv_len: IA,
        q_start_idx: IA,
        kv_start_idx: IA,
        scale_value: f64,
        keep_prob: f64,
        pre_tokens: i64,
        next_tokens: i64,
        head_num: i64,
        input_layout: *mut c_char,
        inner_precise: i64,
        sparse_mode: i64,
        pse_type: i64,
        softmax_in_layout: *mut c_char,
        dq_out: T,
        dq_rope_out: T,
        dk_out: T,
        dk_rope_out: T,
        dv_out: T,
        dpse_out: T,
        dsink_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

aclnn_prototype! {
    /// `aclnnFlashAttentionUnpaddingScoreGradGetWorkspaceSize` (ops-transformer
    /// `flash_attention_score_grad/op_api/aclnn_flash_attention_score_grad.h`): the no-sink
    /// backward torch_npu calls (op-plugin `FlashAttentionKernelNpuOpApi.cpp`).
    VarlenGradBaseWs, VarlenGradBaseParams(
        query: T,
        key: T,
        value: T,
        dy: T,
        pse_shift: T,
        drop_mask: T,
        padding_mask: T,
        atten_mask: T,
        softmax_max: T,
        softmax_sum: T,
        softmax_in: T,
        attention_in: T,
        prefix: IA,
        actual_seq_q_len: IA,
        actual_seq_kv_len: IA,
        scale_value: f64,
        keep_prob: f64,
        pre_tokens: i64,
        next_tokens: i64,
        head_num: i64,
        input_layout: *mut c_char,
        inner_precise: i64,
        sparse_mode: i64,
        dq_out: T,
        dk_out: T,
        dv_out: T,
        dpse_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}

// The base ops' prototypes are the V5 ones less rope, sink, start indices, pse type and
// softmax layout, which a base call does not give (pse type 1).
narrower_prototype!(
    VarlenFwdBaseParams,
    VarlenFwdV5Params,
    [
        query, key, value, real_shift, drop_mask, padding_mask, atten_mask, prefix,
        actual_seq_q_len, actual_seq_kv_len, scale_value, keep_prob, pre_tokens, next_tokens,
        head_num, input_layout, inner_precise, sparse_mode, softmax_max_out, softmax_sum_out,
        softmax_out_out, attention_out_out, workspace_size, executor,
    ],
    [
        query_rope: std::ptr::null(),
        key_rope: std::ptr::null(),
        sink: std::ptr::null(),
        q_start_idx: std::ptr::null(),
        kv_start_idx: std::ptr::null(),
        pse_type: 1,
        softmax_out_layout: std::ptr::null_mut(),
    ]
);

narrower_prototype!(
    VarlenGradBaseParams,
    VarlenGradV5Params,
    [
        query, key, value, dy, pse_shift, drop_mask, padding_mask, atten_mask, softmax_max,
        softmax_sum, softmax_in, attention_in, prefix, actual_seq_q_len, actual_seq_kv_len,
        scale_value, keep_prob, pre_tokens, next_tokens, head_num, input_layout, inner_precise,
        sparse_mode, dq_out, dk_out, dv_out, dpse_out, workspace_size, executor,
    ],
    [
        query_rope: std::ptr::null(),
        key_rope: std::ptr::null(),
        sink_in: std::ptr::null(),
        q_start_idx: std::ptr::null(),
        kv_start_idx: std::ptr::null(),
        pse_type: 1,
        softmax_in_layout: std::ptr::null_mut(),
        dq_rope_out: std::ptr::null(),
        dk_rope_out: std::ptr::null(),
        dsink_out: std::ptr::null(),
    ]
);
