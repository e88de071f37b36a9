//! Context parallelism: one step's packed sequences split across ranks, exact —
//! learned sinks, sliding windows and packing included — by the all-gather-KV scheme.
//!
//! - [`plan`]: which tokens each rank owns (a head and a tail chunk of every long sequence,
//!   short ones whole) and, per window, which keys each rank sends and how each query piece
//!   reads its keys — host index arithmetic, the same on every rank;
//! - [`gather`]: the all-gather of keys and values as an `Autodiff` node whose backward
//!   reduce-scatters dK and dV;
//! - [`comm`]: the collectives over any backend — on the host in rank order (the
//!   single-process emulation on `NdArray`, ranks as threads) or over HCCL on Ascend devices
//!   (simulated or real);
//! - [`forward`]: one rank's forward of the transformer;
//! - [`train`]: context-parallel training (losses and gradients summed over ranks);
//! - [`process`]: one rank of it in this process, one process per rank (torchrun).
//!
//! Why here and not in `ops/`: the scheme needs no new attention op — each rank's attention is
//! one call of the varlen op (`flash_attention_varlen`) whose "sequences" are the rank's query
//! chunks against their gathered keys, bottom-right aligned (CANN's sparse modes 3 / 4 with
//! `Sq ≤ Skv`) — and the split is a property of the model's packed batch (positions, windows
//! per layer, the loss), so it lives with the model.
//!
//! Why the sink needs nothing special: every query row lives on exactly one rank and attends
//! over all its keys in one varlen call, so its softmax denominator holds `exp(sink)` exactly
//! once; the sink is a replicated parameter whose gradient is summed over ranks with the
//! others.

pub mod comm;
pub mod forward;
pub mod gather;
pub mod plan;
pub mod process;
pub mod train;

pub use comm::{CpComm, HcclComm, HostComm};
pub use forward::{forward_rank, RankStep};
pub use gather::{Comm, CpBackend};
pub use plan::{CpLayout, KeyPlan, Piece};
pub use process::{share_weights, train_context_parallel_rank};
pub use train::{
    partial_cross_entropy, rank_loss, replicate, sum_gradients, train_context_parallel, RankComms,
};
