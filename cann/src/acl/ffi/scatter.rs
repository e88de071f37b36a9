//! The prototype of the paged KV cache scatter.
//! Copied from the aclnn docs and headers named per prototype; every integer has the header's
//! width, checked against CANN's headers by `tools/abi-check`.

use super::prototype::*;

aclnn_prototype! {
    /// `aclnnScatterPaKvCacheGetWorkspaceSize` (seed 004). The caches are in-place ("Ref").
    ScatterPaKvCacheWs, ScatterPaKvCacheParams(
        key: T,
        key_cache_ref: T,
        slot_mapping: T,
        value: T,
        value_cache_ref: T,
        compress_lens: T,
        compress_seq_offset: T,
        seq_lens: T,
        cache_mode: *mut c_char,
        scatter_mode: *mut c_char,
        strides: IA,
        offsets: IA,
        workspace_size: Ws,
        executor: Ex,
    )
}
