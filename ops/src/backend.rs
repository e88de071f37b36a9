//! The Burn extension traits as bundles. Each op defines its own trait in its folder (with the
//! composite as its default bodies, its `NdArray` and `Autodiff` impls beside it);
//! [`AttentionBackend`] is every attention op's trait at once and [`TrainingBackend`] adds what
//! a training loop calls (the linear layers, the fused transformer ops, the grouped matmul,
//! the MoE router, the optimizer step).
//! Both are implemented for every backend that implements their parts, so a backend implements
//! the per-op traits only.

pub use crate::fia::{FiaBackend, FiaInputs, FiaKv, FiaOutputs};
pub use crate::fused::FusedBackend;
pub use crate::grouped_matmul::GroupedMatmulBackend;
pub use crate::incre::{IncreBackend, IncreInputs, IncreKv};
pub use crate::linear::LinearBackend;
pub use crate::moe_gating::MoeGatingBackend;
pub use crate::optim::OptimBackend;
pub use crate::prompt::{PromptBackend, PromptInputs};
pub use crate::scatter::{ScatterBackend, ScatterInputs, ScatterOutputs};
pub use crate::varlen::{
    VarlenBackend, VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs,
};
pub use crate::view::ViewBackend;

/// CANN's attention operators as a Burn backend extension: one trait per op, as a bundle.
pub trait AttentionBackend:
    VarlenBackend + PromptBackend + IncreBackend + FiaBackend + ScatterBackend
{
}

impl<B> AttentionBackend for B where
    B: VarlenBackend + PromptBackend + IncreBackend + FiaBackend + ScatterBackend
{
}

/// What the example model's training needs of a backend: the attention ops, the linear layers,
/// the fused transformer ops, the grouped matmul of its experts, their router and the AdamW
/// step.
pub trait TrainingBackend:
    AttentionBackend
    + LinearBackend
    + FusedBackend
    + GroupedMatmulBackend
    + MoeGatingBackend
    + OptimBackend
{
}

impl<B> TrainingBackend for B where
    B: AttentionBackend
        + LinearBackend
        + FusedBackend
        + GroupedMatmulBackend
        + MoeGatingBackend
        + OptimBackend
{
}
