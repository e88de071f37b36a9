//! Burn-free compute for burn-ascend: the f64 CPU reference and the fast CPU kernels. CANN's
//! bindings are the crate `burn-ascend-cann`.
//!
//! - [`reference`]: the CPU reference — plain loops with f64 accumulation. It is the oracle every
//!   other path is tested against, so it stays small and obviously correct.
//!
//! What they compute from — each op's problem description, layouts and modes, the element trait
//! and the dropout mask format — is the op vocabulary of `burn-ascend-contract`.
//!
//! Nothing here validates: callers (the `burn-ascend-contract` crate's specs) check every
//! constraint first
//! and return typed errors. The kernels index slices with bounds checks, so invalid input can
//! at worst panic, never cause undefined behaviour.

pub mod cpu;
pub mod reference;

// The element trait is the contract's; the kernels name it `crate::Element`.
use burn_ascend_contract::Element;
