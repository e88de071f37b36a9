//! `prompt`: CANN's prompt flash attention.

mod replay;
pub mod selftest;

pub use replay::{prompt, NAMES};
