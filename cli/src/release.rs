//! Which CANN release's rules a command follows where they differ by release
//! (`--cann-release`; [`CannRelease`] lists them and what differs).
//!
//! On `sim` the flag sets the release the simulation pretends to be (else its environment
//! variable, else the newest read). On `reference` and `cpu` a given release's rules are
//! followed; without one, a call that some known release accepts runs, with a note naming the
//! releases that refuse it ([`check_on_host`]) — a dumped call may come from any of them. On
//! `npu` the release is the installed CANN's, so the flag is refused there.

use std::sync::Mutex;

use burn_ascend::contract::CannRelease;
use burn_ascend::AttnError;

use crate::args::ExampleDevice;
use crate::replay::note;
use crate::{CliError, Device};

/// The flag's name, as errors name it.
pub const FLAG: &str = "--cann-release";

/// The release the command was told to follow on the host devices (None: any known).
static REQUESTED: Mutex<Option<CannRelease>> = Mutex::new(None);

/// Reads `--cann-release` for a command on `device` and applies it: an unknown name is a typed
/// error naming the flag and the releases known; on `sim` it is the release the simulation
/// pretends to be (an unknown name in the simulation's environment variable is refused here,
/// before anything runs); with `npu` the flag is refused.
pub fn apply(flag: Option<&str>, device: Device) -> Result<(), CliError> {
    let release = flag.map(|f| CannRelease::parse(f, FLAG)).transpose()?;
    if device == Device::Npu && release.is_some() {
        return Err(AttnError::invalid(
            FLAG,
            "names the release the simulation and the host devices follow; on npu it is the \
             installed CANN's (its version file)",
        )
        .into());
    }
    if device == Device::Sim {
        set_sim(release)?;
    }
    *REQUESTED.lock().unwrap_or_else(|e| e.into_inner()) = release;
    Ok(())
}

/// `--cann-release` of the examples: on `sim` the release the simulation pretends to be; with
/// `cpu` (nothing there differs by release) or `ascend` (the installed CANN's) it is refused.
pub fn apply_to_example(flag: Option<&str>, device: ExampleDevice) -> Result<(), String> {
    let Some(flag) = flag else {
        return Ok(());
    };
    if device != ExampleDevice::Sim {
        return Err(AttnError::invalid(
            FLAG,
            "applies to --device sim only (ascend runs the installed CANN's release)",
        )
        .to_string());
    }
    apply(Some(flag), Device::Sim).map_err(|e| e.to_string())
}

#[cfg(feature = "sim")]
fn set_sim(release: Option<CannRelease>) -> Result<(), CliError> {
    burn_ascend_acl_sim::set_process_cann_release(release);
    burn_ascend_acl_sim::cann_release()?;
    Ok(())
}

#[cfg(not(feature = "sim"))]
fn set_sim(_: Option<CannRelease>) -> Result<(), CliError> {
    Ok(())
}

/// The release `--cann-release` named, if any.
pub fn requested() -> Option<CannRelease> {
    *REQUESTED.lock().unwrap_or_else(|e| e.into_inner())
}

/// A rule that differs by release, on `reference` / `cpu`: `check` against the requested
/// release; without one, `Ok` when some known release accepts the call — with a note on stderr
/// naming those that refuse it and the first one's reason — and the newest release's refusal
/// when none does.
pub fn check_on_host(
    op: &str,
    check: impl Fn(CannRelease) -> Result<(), AttnError>,
) -> Result<(), AttnError> {
    if let Some(r) = requested() {
        return check(r);
    }
    let mut refusals = Vec::new();
    let mut accepting = Vec::new();
    for r in CannRelease::KNOWN {
        match check(r) {
            Ok(()) => accepting.push(r.name()),
            Err(e) => refusals.push((r, e)),
        }
    }
    if accepting.is_empty() {
        let (_, newest) = refusals.pop().expect("KNOWN is not empty");
        return Err(newest);
    }
    if let Some((_, first)) = refusals.first() {
        let names: Vec<&str> = refusals.iter().map(|(r, _)| r.name()).collect();
        note(
            op,
            format!(
                "run as CANN {} run it; CANN {} refuse it ({first}); {FLAG} follows one release",
                accepting.join(", "),
                names.join(", ")
            ),
        );
    }
    Ok(())
}
