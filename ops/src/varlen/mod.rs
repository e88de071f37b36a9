//! Varlen (TND) flash attention with sinks: `aclnnFlashAttentionVarLenScoreV5` and
//! `aclnnFlashAttentionUnpaddingScoreGradV5`. The parameters and their validation are the
//! contract's ([`burn_ascend_contract::varlen`]); the composite Burn path is here.

pub mod composite;

pub use burn_ascend_contract::varlen::*;
