//! `burn-ascend selftest [--device npu|sim] [--report PATH]`: the acceptance run for a machine
//! with an Atlas A2/A3 NPU.
//!
//! It prints what CANN was found (package and ACL versions, libraries, which aclnn entry points
//! resolved), then runs a fixed suite of small cases on the device against the CPU reference:
//! every attention op of the CLI (varlen forward and backward with and without a sink, prompt,
//! incremental contiguous and paged, the cache scatter in each of its modes), each through the
//! same bundle path as `burn-ascend run` (so through the public ops API on the `Ascend`
//! backend, the path users train on), a representative set of the `Ascend` backend's native
//! Burn ops against `NdArray`, and end-to-end cases on the example model ([`model`]: a training
//! step's gradients and 20 steps on `Autodiff<Ascend>`, FIA serving, a data-parallel step). Each case
//! states its tolerance; each is timed. Then it runs the probes only hardware can answer
//! ([`probes`]). It writes `PATH.md` and `PATH.json` (default `selftest-report.{md,json}`) and
//! exits 0 only when every case passed; probes inform, they never fail the run.
//!
//! **Tolerances.** A case passes when, for every output tensor, `max |got − ref| ≤ rel ·
//! max(1, max |ref|)`, with `rel` per dtype and per kind of op (`harness::Tolerance`): the reference
//! runs on the same rounded inputs, so `rel` bounds the device's own rounding and summation
//! order, not the inputs' rounding. Integer and copy results (scatter, index ops, int8) must be
//! exact. The JSON's `max_abs_err` / `tol` are those of the output tensor closest to failing.
//!
//! **Device choice.** Without `--device`, the NPU when CANN loads and a device opens; otherwise
//! it stops with the reason and points at `--device sim`: it never falls back to the simulation
//! by itself, so a report from an Atlas can never silently be a simulation run.

pub(crate) mod backend_harness;
mod command;
pub(crate) mod harness;
mod model;
mod native;
mod probes;
mod report;

pub use command::{main, run};
pub use report::{CaseResult, Probe, Report, Status};

use crate::op::{BACKEND_SELFTESTS, SELFTEST_OPS};
use crate::Device;

/// Every op's cases, in the op table's order, then the backend's native ops and the ops checked
/// as Burn ops. With `inject`, the first case's device result is perturbed (the run must then
/// fail).
fn op_cases(device: Device, mut inject: bool) -> Vec<CaseResult> {
    let mut cases: Vec<CaseResult> = (SELFTEST_OPS.iter())
        .flat_map(|op| (op.cases)(device, std::mem::take(&mut inject)))
        .collect();
    let backend: Vec<fn() -> Vec<backend_harness::BackendCase>> =
        std::iter::once(native::cases as _)
            .chain(BACKEND_SELFTESTS.iter().copied())
            .collect();
    cases.extend(backend_harness::run_all(device, &backend));
    cases
}

/// The ops' probes only hardware can answer, in the op table's order.
fn op_probes(device: Device) -> Vec<Probe> {
    SELFTEST_OPS
        .iter()
        .flat_map(|op| (op.probes)(device))
        .collect()
}
