//! The `selftest` command: the device chosen (never the simulation by itself), every case and
//! probe run with progress on stderr, the report written and its summary printed.

use std::time::Instant;

use super::report::{Report, Status};
use super::{model, probes};
use crate::args::SelftestArgs;
use crate::{CliError, Device};

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
    crate::release::apply(o.cann_release.as_deref(), device)?;
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
    let mut cases = super::op_cases(device, inject_error);
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
    let mut probes = vec![probes::entry_points(device, &env)];
    probes.extend(super::op_probes(device));
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
