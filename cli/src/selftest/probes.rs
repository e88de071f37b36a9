//! What CANN was found, and which attention entry points it has (the ops' own probes, only
//! hardware can answer them, are in `crate::op::<op>::selftest`). A probe reports what it saw;
//! it never fails the run.

use std::path::Path;

use super::report::Probe;
use crate::device::acl_runtime;
use crate::{CliError, Device};
use burn_ascend_cann::acl::ffi::names;
use burn_ascend_cann::acl::loader;

/// What the device is.
pub struct Environment {
    pub device: String,
    pub cann_version: String,
    pub acl_version: String,
    pub libraries: Vec<String>,
    pub entry_points: Vec<(String, bool)>,
}

/// The device, CANN's versions, libraries and the function table's entry points.
pub fn environment(device: Device) -> Result<Environment, CliError> {
    let rt = acl_runtime(device)?;
    let acl_version = match rt.acl_version() {
        Ok((a, b, c)) => format!("{a}.{b}.{c}"),
        Err(e) => format!("unknown ({e})"),
    };
    let entry_points = rt
        .api()
        .presence()
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect();
    Ok(match device {
        Device::Npu => {
            let dir = loader::cann_dir();
            Environment {
                device: format!("npu:{} (CANN)", rt.device()),
                cann_version: dir.map_or_else(
                    || "unknown (CANN directory not known)".into(),
                    cann_package_version,
                ),
                acl_version,
                libraries: dir.map(libraries).unwrap_or_default(),
                entry_points,
            }
        }
        _ => Environment {
            device: "sim (the host simulation of the ACL ABI, not CANN)".into(),
            // The release whose rules it follows (FIA's sink dtype, the dsink post step).
            cann_version: format!(
                "none: the simulation follows CANN {}'s rules (it is not CANN)",
                burn_ascend::backend::release::cann_release(&rt)?
            ),
            acl_version,
            libraries: Vec::new(),
            entry_points,
        },
    })
}

/// The `version=` line of an install-info file.
fn info_version(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.trim()
            .strip_prefix("version=")
            .map(|v| v.trim().to_string())
    })
}

/// CANN's package version from `<root>/<arch>-linux/ascend_toolkit_install.info` (what CANN's
/// install guide reads), with the ops package's `ascend_ops_install.info` where present;
/// `lib64` is the directory CANN was loaded from.
fn cann_package_version(lib64: &Path) -> String {
    let root = lib64.parent().unwrap_or(lib64);
    let arch = root.join(format!("{}-linux", std::env::consts::ARCH));
    let toolkit = info_version(&arch.join("ascend_toolkit_install.info"));
    let ops = info_version(&arch.join("ascend_ops_install.info"));
    match (toolkit, ops) {
        (Some(t), Some(o)) => format!("{t} (toolkit), ops {o}"),
        (Some(t), None) => format!("{t} (toolkit)"),
        (None, Some(o)) => format!("unknown toolkit, ops {o}"),
        (None, None) => format!(
            "unknown (no version= in {}/ascend_toolkit_install.info)",
            arch.display()
        ),
    }
}

/// The CANN libraries in `lib64` (ACL, nnopbase, the op API libraries, aclnn and custom-op
/// libraries), those this build opens marked.
fn libraries(lib64: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(lib64) else {
        return vec![format!("{} (unreadable)", lib64.display())];
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n.ends_with(".so")
                && [
                    "libascendcl",
                    "libnnopbase",
                    "libopapi",
                    "libaclnn",
                    "libcust_opapi",
                ]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .collect();
    names.sort();
    let opened = loader::loaded_libraries();
    let mut out: Vec<String> = names
        .into_iter()
        .map(|n| {
            let path = lib64.join(&n);
            let mark = if opened.contains(&path) {
                " (opened)"
            } else {
                ""
            };
            format!("{}{mark}", path.display())
        })
        .collect();
    // Custom operator packages live outside lib64.
    out.extend(
        opened
            .iter()
            .filter(|p| !p.starts_with(lib64))
            .map(|p| format!("{} (opened)", p.display())),
    );
    out
}

/// The attention entry points a CANN release may have, newest first per op: each op as the
/// table names it (`ffi::names`, the one place aclnn names are spelled) with the versions to
/// look for, 1 being the unversioned name. Versions this build does not call are asked for too:
/// the answer tells which CANN release is installed.
const ATTENTION_ENTRY_POINTS: &[(&str, &[u8])] = &[
    (names::varlen_fwd_base, &[5, 4, 3, 2, 1]),
    (names::varlen_grad_base, &[5, 4, 3, 2, 1]),
    (names::pfa_v1, &[3, 2, 1]),
    (names::ifa_v4, &[4, 3, 2, 1]),
    (names::fia_base, &[3, 2]),
    (names::scatter_pa_kv_cache, &[1]),
];

/// `name` without its trailing `V<n>`, if it has one.
fn unversioned(name: &str) -> &str {
    let digits = name.trim_end_matches(|c: char| c.is_ascii_digit());
    match digits.strip_suffix('V') {
        Some(stem) if digits.len() < name.len() => stem,
        _ => name,
    }
}

/// [`ATTENTION_ENTRY_POINTS`] as C names, in its order.
fn attention_entry_points() -> Vec<String> {
    let mut out = Vec::new();
    for &(name, versions) in ATTENTION_ENTRY_POINTS {
        let stem = unversioned(name);
        for &v in versions {
            out.push(if v == 1 {
                stem.to_string()
            } else {
                format!("{stem}V{v}")
            });
        }
    }
    out
}

/// Which attention entry points exist: on the NPU both stages looked up in CANN's libraries
/// (including versions this build does not call), on the simulation its table.
fn entry_points_probe(device: Device, env: &Environment) -> String {
    let (mut present, mut absent) = (Vec::new(), Vec::new());
    for name in attention_entry_points() {
        let found = match device {
            Device::Npu => {
                loader::exports(&name).unwrap_or(false)
                    && loader::exports(&format!("{name}GetWorkspaceSize")).unwrap_or(false)
            }
            _ => env.entry_points.iter().any(|(n, p)| *n == name && *p),
        };
        if found {
            present.push(name);
        } else {
            absent.push(name);
        }
    }
    format!(
        "present: {}; absent: {}",
        present.join(", "),
        if absent.is_empty() {
            "none".into()
        } else {
            absent.join(", ")
        }
    )
}

/// The probe of which attention entry points exist.
pub fn entry_points(device: Device, env: &Environment) -> Probe {
    Probe {
        name: "attention entry points".into(),
        result: entry_points_probe(device, env),
    }
}
