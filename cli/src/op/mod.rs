//! The ops, one folder each: `replay.rs` reads a bundle and runs the op on a device
//! (`burn-ascend run`; the op's module docs are there), `selftest.rs` holds its acceptance cases
//! and the probes only hardware can answer (`burn-ascend selftest`). What several ops' replays
//! read alike is in [`bundle_checks`]; the selftest's harnesses are in `crate::selftest`.

pub mod bundle_checks;

/// `varlen-fwd` / `varlen-bwd`: CANN's varlen flash attention, forward and backward.
pub mod varlen {
    pub mod replay;
    pub mod selftest;
}

/// `prompt`: CANN's prompt flash attention.
pub mod prompt {
    pub mod replay;
    pub mod selftest;
}

/// `incre`: CANN's incremental flash attention.
pub mod incre {
    pub mod replay;
    pub mod selftest;
}

/// `scatter`: CANN's paged KV cache scatter.
pub mod scatter {
    pub mod replay;
    pub mod selftest;
}

/// `fia`: CANN's fused inference attention.
pub mod fia {
    pub mod replay;
    pub mod selftest;
}

/// The fused transformer ops (RMSNorm, SwiGLU, rotary position embedding, softmax
/// cross-entropy): no bundle replay, the selftest's cases only.
pub mod fused {
    pub mod selftest;
}

/// The MoE router (`aclnnMoeGatingTopKSoftmaxV2`): no bundle replay, the selftest's cases only.
pub mod moe_gating {
    pub mod selftest;
}

use crate::replay::ReplayOp;
use crate::selftest::backend_harness::BackendCase;
use crate::selftest::{CaseResult, Probe};
use crate::Device;

/// The ops `run` knows, in the order its "unknown op" error and `run --help` list them.
pub const OPS: &[ReplayOp] = &[
    ReplayOp::new(
        "varlen-fwd",
        varlen::replay::FWD_NAMES,
        varlen::replay::FWD_HELP,
        varlen::replay::forward,
    ),
    ReplayOp::new(
        "varlen-bwd",
        varlen::replay::BWD_NAMES,
        varlen::replay::BWD_HELP,
        varlen::replay::backward,
    ),
    ReplayOp::new(
        "prompt",
        prompt::replay::NAMES,
        prompt::replay::HELP,
        prompt::replay::prompt,
    ),
    ReplayOp::new(
        "incre",
        incre::replay::NAMES,
        incre::replay::HELP,
        incre::replay::incre,
    ),
    ReplayOp::new(
        "fia",
        fia::replay::NAMES,
        fia::replay::HELP,
        fia::replay::fia,
    ),
    ReplayOp::new(
        "scatter",
        scatter::replay::NAMES,
        scatter::replay::HELP,
        scatter::replay::scatter,
    ),
];

/// An op's part of `burn-ascend selftest`: its cases on a device against the reference, and the
/// probes only hardware can answer.
pub struct SelftestOp {
    /// The op's cases, in report order; with `true`, the first case's device result is
    /// perturbed (the run must then fail).
    pub cases: fn(Device, bool) -> Vec<CaseResult>,
    /// The op's probes, in report order.
    pub probes: fn(Device) -> Vec<Probe>,
}

/// For an op with cases only.
fn no_probes(_: Device) -> Vec<Probe> {
    Vec::new()
}

/// The ops `selftest` runs through their bundles (the path of `run`), in report order.
pub const SELFTEST_OPS: &[SelftestOp] = &[
    SelftestOp {
        cases: varlen::selftest::cases,
        probes: varlen::selftest::probes,
    },
    SelftestOp {
        cases: prompt::selftest::cases,
        probes: no_probes,
    },
    SelftestOp {
        cases: incre::selftest::cases,
        probes: no_probes,
    },
    SelftestOp {
        cases: scatter::selftest::cases,
        probes: scatter::selftest::probes,
    },
    SelftestOp {
        cases: fia::selftest::cases,
        probes: fia::selftest::probes,
    },
];

/// The ops `selftest` checks as Burn ops on the `Ascend` backend against `NdArray`, in report
/// order (after the backend's native ops).
pub const BACKEND_SELFTESTS: &[fn() -> Vec<BackendCase>] =
    &[fused::selftest::cases, moe_gating::selftest::cases];
