//! `varlen-fwd` / `varlen-bwd`: CANN's varlen flash attention, forward and backward.

mod replay;
pub mod selftest;

pub use replay::{backward, forward, BWD_NAMES, FWD_NAMES};
