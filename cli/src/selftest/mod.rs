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
//! max(1, max |ref|)`, with `rel` per dtype and per kind of op (`attention::Tolerance`): the reference
//! runs on the same rounded inputs, so `rel` bounds the device's own rounding and summation
//! order, not the inputs' rounding. Integer and copy results (scatter, index ops, int8) must be
//! exact. The JSON's `max_abs_err` / `tol` are those of the output tensor closest to failing.
//!
//! **Device choice.** Without `--device`, the NPU when CANN loads and a device opens; otherwise
//! it stops with the reason and points at `--device sim`: it never falls back to the simulation
//! by itself, so a report from an Atlas can never silently be a simulation run.

mod attention;
mod fia;
mod fused;
mod model;
mod native;
mod probes;
mod report;

use std::time::Instant;

use super::args::SelftestArgs;
use super::{CliError, Device};
pub use report::{CaseResult, Probe, Report, Status};

/// The NPU when CANN loads and device `$ASCEND_DEVICE_ID` (else 0) opens; else the reason,
/// never the simulation.
fn default_device() -> Result<Device, CliError> {
    let id = burn_ascend_cann::acl::default_device_id()?;
    match burn_ascend_cann::acl::Runtime::npu(id) {
        Ok(_) => Ok(Device::Npu),
        Err(e) => Err(CliError::Device(format!(
            "selftest: no usable NPU ({e}); on a machine without one, `burn-ascend selftest --device sim` checks this build against the host simulation (not CANN)"
        ))),
    }
}

/// `selftest …`, its command line parsed.
pub fn main(o: &SelftestArgs) -> Result<(), CliError> {
    let device = match o.device {
        Some(d) => d.into(),
        None => default_device()?,
    };
    device.ensure_available()?;
    let report = run(device, o.inject_error)?;
    let (md, json) = report.paths(&o.report);
    report.write(&md, &json)?;
    println!("{}", report.summary());
    println!("report: {} and {}", md.display(), json.display());
    let failed = report.failed();
    if failed == 0 {
        Ok(())
    } else {
        Err(CliError::Selftest(format!(
            "{failed} of {} cases failed (first: {}); see {}",
            report.cases.len(),
            report.first_failure().unwrap_or_default(),
            md.display()
        )))
    }
}

/// Runs the whole selftest on `device` (printing progress to stderr) and returns the report.
pub fn run(device: Device, inject_error: bool) -> Result<Report, CliError> {
    let start = Instant::now();
    let env = probes::environment(device)?;
    eprintln!("selftest on {}: CANN {}", env.device, env.cann_version);
    for l in &env.libraries {
        eprintln!("  library {l}");
    }
    let mut cases = attention::run_all(device, inject_error);
    cases.extend(fia::run_all(device));
    cases.extend(native::run_all(device));
    let (model_cases, model_probes) = model::run_all(device);
    cases.extend(model_cases);
    for c in &cases {
        if c.status != Status::Pass {
            eprintln!(
                "  FAIL {} {} {}: {}",
                c.op,
                c.name,
                c.dtype,
                c.note.as_deref().unwrap_or("")
            );
        }
    }
    let mut probes = probes::run_all(device, &env);
    probes.extend(model_probes);
    for p in &probes {
        eprintln!("  probe {}: {}", p.name, p.result);
    }
    Ok(Report {
        device: env.device,
        cann_version: env.cann_version,
        acl_version: env.acl_version,
        libraries: env.libraries,
        entry_points: env.entry_points,
        cases,
        probes,
        seconds: start.elapsed().as_secs_f64(),
    })
}
