//! What a tool on top of the backend measures a run with, so it need not reach into the layers
//! below (the model's profiler, `burn-ascend-model`'s `profile.rs`, uses it):
//!
//! - the host side of dispatch per op, CANN layer's opt-in profile ([`set_enabled`],
//!   [`snapshot`], [`reset`]), and the name the stream synchronisations have in it
//!   ([`SYNCHRONIZE_STREAM`]: their host time is the wait for the device);
//! - with the `sim` feature, the simulation's device clock and its Atlas A2 cost model
//!   ([`sim`]).

pub use burn_ascend_cann::acl::profile::{reset, set_enabled, snapshot};

/// The profile's entry of `aclrtSynchronizeStream`.
pub const SYNCHRONIZE_STREAM: &str = burn_ascend_cann::acl::ffi::names::synchronize_stream;

/// The host simulation's clocks: the CPU time its kernels took per task, the roofline time its
/// cost model gives each launch on an Atlas A2, and the switch that skips the kernels' arithmetic
/// (`finetune --dry-run`).
#[cfg(feature = "sim")]
pub mod sim {
    pub use burn_ascend_acl_sim::cost::atlas_a2;
    pub use burn_ascend_acl_sim::{
        device_time, modelled_device_time, reset_device_time, reset_modelled_device_time,
        set_compute, set_cost_model, ModelledOp,
    };
}
