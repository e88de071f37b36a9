//! The ops, one folder each: `replay.rs` reads a bundle and runs the op on a device (`burn-ascend
//! run`), `selftest.rs` holds its acceptance cases and the probes only hardware can answer
//! (`burn-ascend selftest`). What several ops' replays read alike is in [`bundle_checks`]; the
//! selftest's harness is in `crate::selftest`.

pub mod bundle_checks;
pub mod fia;
pub mod fused;
pub mod incre;
pub mod prompt;
pub mod scatter;
pub mod varlen;

use crate::replay::ReplayOp;

/// The ops `run` knows, in the order its "unknown op" error lists them.
pub const OPS: &[ReplayOp] = &[
    ReplayOp::new("varlen-fwd", varlen::FWD_NAMES, varlen::forward),
    ReplayOp::new("varlen-bwd", varlen::BWD_NAMES, varlen::backward),
    ReplayOp::new("prompt", prompt::NAMES, prompt::prompt),
    ReplayOp::new("incre", incre::NAMES, incre::incre),
    ReplayOp::new("fia", fia::NAMES, fia::fia),
    ReplayOp::new("scatter", scatter::NAMES, scatter::scatter),
];
