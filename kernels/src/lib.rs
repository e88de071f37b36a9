//! Burn-free compute for burn-ascend: the f64 CPU reference and the fast CPU kernels. CANN's
//! bindings are the crate `burn-ascend-cann`.
//!
//! - [`varlen`]: the plain-data description of a varlen (TND) flash-attention problem, shared by
//!   every implementation (reference, fast CPU kernels, Ascend dispatch).
//! - [`reference`]: the CPU reference — plain loops with f64 accumulation. It is the oracle every
//!   other path is tested against, so it stays small and obviously correct.
//! - [`dropout`]: CANN's bit-packed dropout mask and a seeded generator for it.
//!
//! Nothing here validates: callers (the `burn-ascend-contract` crate's specs) check every
//! constraint first
//! and return typed errors. The kernels index slices with bounds checks, so invalid input can
//! at worst panic, never cause undefined behaviour.

pub mod cpu;
pub mod dropout;
pub mod element;
pub mod reference;
pub mod varlen;

pub use element::Element;
