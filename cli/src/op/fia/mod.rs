//! `fia`: CANN's fused inference attention.

mod replay;
pub mod selftest;

pub use replay::{fia, NAMES};
