//! Training: the eager loop ([`eager`]) and the loop replayed from a captured graph
//! ([`graph`]), the fused AdamW ([`optim`]), the learning-rate schedule ([`schedule`]), the
//! masked losses ([`loss`]), per-block activation recomputation ([`recompute`]) and what the
//! loop asks of a data-parallel group ([`sync`]; the strategies are [`crate::parallel`]'s).

pub mod eager;
pub mod graph;
pub mod loss;
pub mod optim;
pub mod recompute;
pub mod schedule;
pub mod sync;
pub mod zero_layout;
pub mod zero_resume;

pub use crate::run_state::state::TrainState;
pub use eager::{
    init_model, init_model_with, train, train_with, Batches, Init, StepReport, TrainOptions,
};
pub use loss::{loss_weights, masked_cross_entropy, weighted_cross_entropy};
pub use sync::GradientSync;
