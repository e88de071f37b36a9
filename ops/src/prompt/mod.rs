//! Prompt (prefill) attention: `aclnnPromptFlashAttention` (V1) and
//! `aclnnPromptFlashAttentionV3`.

pub mod composite;
mod spec;

pub use burn_ascend_kernels::reference::prompt::{PfaLayout, SparseMode as PfaSparseMode};
pub use spec::{
    parse_pfa_layout, PostQuantSpec, PromptDims, PromptMask, PromptPse, PromptShapes, PromptSpec,
    INT_MAX_TOKENS, MAX_GQA_RATIO, PFA_COMPRESSED_MASK, PFA_MAX_BATCH, PFA_MAX_BATCH_UNALIGNED,
    PFA_MAX_HEADS, PFA_MAX_HEAD_DIM, PFA_MAX_SEQ, PFA_TND_MAX_T,
};
pub(crate) use spec::{resolve_kv_heads, validate_post_quant};
