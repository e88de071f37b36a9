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
