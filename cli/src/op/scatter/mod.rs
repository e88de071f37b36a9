//! `scatter`: CANN's paged KV cache scatter.

mod replay;
pub mod selftest;

pub use replay::{scatter, NAMES};
