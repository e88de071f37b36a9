//! Varlen (TND) flash attention with sinks: `aclnnFlashAttentionVarLenScoreV5` and
//! `aclnnFlashAttentionUnpaddingScoreGradV5`.

pub mod composite;
mod spec;

pub use spec::{
    compressed_mask, MaskSpec, PseSpec, VarlenBwdShapes, VarlenShapes, VarlenSpec, COMPRESSED_MASK,
    COMPRESSED_PREFIX_MASK, MAX_BATCH, MAX_BATCH_WITH_PREFIX, MAX_HEAD_DIM, MAX_HEAD_NUM,
};
