//! `incre`: CANN's incremental flash attention.

mod replay;
pub mod selftest;

pub use replay::{incre, NAMES};
