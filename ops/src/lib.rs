//! The op contract of burn-ascend: CANN's attention operators as parameters, validation,
//! typed errors, a Burn backend extension trait with a composite default for every backend,
//! CPU kernels for `NdArray`, and a fused backward under `Autodiff`.
//!
//! Start with [`flash_attention_varlen`] (flash-attn shaped) or [`varlen_score`] (CANN shaped).

pub mod api;
pub mod autodiff;
pub mod backend;
pub mod error;
pub mod host;
pub mod ndarray;
pub mod varlen;

pub use api::{
    flash_attention_varlen, flash_spec, varlen_score, varlen_score_grad, FlashAttnOptions,
    VarlenAttention, VarlenAttentionGrads,
};
pub use backend::{AttentionBackend, VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs};
pub use burn_ascend_kernels::varlen::{
    cumulative_from_lengths, lengths_from_cumulative, PseType, SoftmaxLayout, SparseMode,
    VarlenAttrs,
};
pub use error::{AttnError, Result};
pub use varlen::{MaskSpec, PseSpec, VarlenSpec};
