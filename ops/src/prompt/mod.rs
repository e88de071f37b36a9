//! Prompt (prefill) attention: `aclnnPromptFlashAttention` (V1) and
//! `aclnnPromptFlashAttentionV3`. The parameters and their validation are the contract's
//! ([`burn_ascend_contract::prompt`]); the composite Burn path is here.

pub mod composite;

pub use burn_ascend_contract::prompt::*;
