//! The op contract of burn-ascend: CANN's attention operators as parameters, validation,
//! typed errors, and per op (one folder each: [`varlen`], [`prompt`], [`incre`], [`scatter`],
//! [`fia`], [`fused`], [`linear`](mod@linear), [`grouped_matmul`](mod@grouped_matmul), [`optim`]) a Burn backend
//! extension trait with a composite default for every backend, CPU kernels for `NdArray`, an
//! `Autodiff` impl (a fused backward, or forward-only for the inference ops) and the public
//! functions. [`backend`] bundles the traits: [`AttentionBackend`] (the attention ops) and
//! [`TrainingBackend`] (with the fused ops, the grouped matmul, the MoE router and the optimizer
//! step);
//! [`common`] holds what several ops share.
//!
//! Start with [`flash_attention_varlen`] (flash-attn shaped) or [`varlen_score`] (CANN shaped).
//! Inference ops: [`prompt_flash_attention`] (PFA V1/V3), [`incre_flash_attention`] (IFA V4,
//! contiguous / tensor-list / paged KV, int8 KV via antiquant), [`scatter_pa_kv_cache`]
//! (`aclnnScatterPaKvCache`), [`fused_infer_attention`] (FIA V4: prefill and decode with a
//! learnable sink and the softmax LSE) and the [`PagedKvCache`] manager built on them. Under
//! `Autodiff` these run forward-only (their outputs are constants).

pub mod backend;
pub mod common;
pub use burn_ascend_contract::error;
pub mod fia;
pub mod fused;
pub mod grouped_matmul;
pub mod host;
pub mod incre;
pub mod linear;
pub mod moe_gating;
pub mod optim;
pub mod paged_cache;
pub mod prompt;
pub mod scatter;
pub mod varlen;
pub mod view;

/// The test hooks of the varlen `Autodiff` node, at the path tests name them by.
pub mod autodiff {
    #[cfg(any(test, feature = "test-hooks"))]
    pub use crate::varlen::autodiff::test_hooks;
}

pub use backend::{
    AttentionBackend, FiaBackend, FiaInputs, FiaKv, FiaOutputs, IncreBackend, IncreInputs, IncreKv,
    PromptBackend, PromptInputs, ScatterBackend, ScatterInputs, ScatterOutputs, TrainingBackend,
    VarlenBackend, VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs,
};
pub use burn_ascend_contract::varlen::{
    cumulative_from_lengths, lengths_from_cumulative, PseType, SoftmaxLayout, SparseMode,
    VarlenAttrs,
};
pub use error::{AttnError, Result};
pub use fia::api::{fused_infer_attention, fused_infer_attention_with, FiaKvFromTensors};
pub use fia::FiaSpec;
pub use fused::api::{cross_entropy_loss, rms_norm, rotary_embedding, swiglu, swiglu_pair};
pub use fused::{FusedBackend, RotaryMode};
pub use grouped_matmul::{
    grouped_matmul, grouped_matmul_k, GroupedMatmulBackend, GroupedMatmulSpec,
};
pub use incre::api::{incre_flash_attention, incre_flash_attention_with, IncreKvFromTensors};
pub use incre::{IfaLayout, IncreSpec};
pub use linear::api::linear;
pub use linear::{LinearBackend, WeightLayout};
pub use moe_gating::{moe_gating_top_k_softmax, GatingOrder, MoeGatingBackend};
pub use optim::{AdamWHyper, AdamWTensors, OptimBackend};
pub use paged_cache::{AttendOptions, AttendPath, PagedKvCache, SeqId};
pub use prompt::api::{prompt_flash_attention, prompt_flash_attention_with};
pub use prompt::{PfaLayout, PromptMaskKind, PromptSpec};
pub use scatter::api::scatter_pa_kv_cache;
pub use scatter::ScatterSpec;
pub use varlen::api::{
    dropout_mask, flash_attention_varlen, flash_spec, varlen_score, varlen_score_grad,
    varlen_score_grad_with, varlen_score_with, varlen_score_with_alibi, varlen_score_with_dropout,
    varlen_score_with_mask, varlen_score_with_pse, FlashAttnOptions, VarlenAttention,
    VarlenAttentionGrads,
};
pub use varlen::{MaskSpec, VarlenSpec};
pub use view::api::reshape;
pub use view::ViewBackend;
