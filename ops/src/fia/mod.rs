//! Fused inference attention: `aclnnFusedInferAttentionScoreV4` (FIA). The parameters and
//! their validation are the contract's ([`burn_ascend_contract::fia`]); the composite Burn path
//! is here. FIA is an inference op: under `Autodiff` it runs forward-only (constant outputs).

pub mod composite;

pub use burn_ascend_contract::fia::*;
