//! The prototype of incremental flash attention (V4).
//! Copied from the aclnn docs and headers named per prototype; every integer has the header's
//! width, checked against CANN's headers by `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnIncreFlashAttentionV4GetWorkspaceSize` (seed 000).
    IfaV4Ws, IfaV4Params(
        query: T,
        key: TL,
        value: TL,
        pse_shift: T,
        atten_mask: T,
        actual_seq_lengths: IA,
        dequant_scale1: T,
        quant_scale1: T,
        dequant_scale2: T,
        quant_scale2: T,
        quant_offset2: T,
        antiquant_scale: T,
        antiquant_offset: T,
        blocktable: T,
        kv_padding_size: T,
        num_heads: i64,
        scale_value: f64,
        input_layout: *mut c_char,
        num_key_value_heads: i64,
        block_size: i64,
        inner_precise: i64,
        attention_out: T,
        workspace_size: Ws,
        executor: Ex,
    )
}
