//! Incremental (decode) attention: `aclnnIncreFlashAttentionV4`. The parameters and their
//! validation are the contract's ([`burn_ascend_contract::incre`]); the composite Burn path is
//! here.

pub mod composite;

pub use burn_ascend_contract::incre::*;
