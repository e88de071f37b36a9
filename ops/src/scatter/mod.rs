//! KV cache scatter: `aclnnScatterPaKvCache`. The parameters and their validation are the
//! contract's ([`burn_ascend_contract::scatter`]); the composite Burn path is here.

pub mod composite;

pub use burn_ascend_contract::scatter::*;
pub use composite::{scatter_checked, scatter_host};
