//! Finding CANN and filling [`AclApi`] from its shared libraries at run time (`libloading`).
//!
//! Search order for the toolkit root (spec §7): `$ASCEND_TOOLKIT_HOME`, then
//! `$ASCEND_HOME_PATH`, then `/usr/local/Ascend/ascend-toolkit/latest`; the libraries live in
//! `<root>/lib64`. The first root whose `lib64/libascendcl.so` exists is used. From it
//! `libascendcl.so`, `libnnopbase.so` and `libopapi.so` are required, `libopapi_transformer.so`
//! (newer split builds) is opened where present, and every symbol is resolved across all of
//! them in that order. Libraries stay loaded for the life of the process (the table is
//! `'static`), so the function pointers never dangle.
//!
//! CANN's libraries find their own dependencies through `LD_LIBRARY_PATH` (CANN's `set_env.sh`
//! sets it, and `ASCEND_OPP_PATH`, which aclnn needs to find its kernels).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use super::error::{AclError, Result};
use super::ffi::*;

/// The libraries, in symbol-resolution order; `true` = required.
pub const LIBRARIES: &[(&str, bool)] = &[
    ("libascendcl.so", true),
    ("libnnopbase.so", true),
    ("libopapi.so", true),
    ("libopapi_transformer.so", false),
];

/// The default toolkit root when no environment variable names one.
pub const DEFAULT_TOOLKIT: &str = "/usr/local/Ascend/ascend-toolkit/latest";

/// Candidate toolkit roots in search order, each with where it came from.
pub fn toolkit_candidates() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for var in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            out.push((format!("${var}"), PathBuf::from(v)));
        }
    }
    out.push(("default".into(), PathBuf::from(DEFAULT_TOOLKIT)));
    out
}

/// The library directory of a toolkit root.
pub fn lib_dir(root: &Path) -> PathBuf {
    root.join("lib64")
}

/// The loaded libraries and the table resolved from them.
struct Loaded {
    api: AclApi,
    dir: PathBuf,
    // Never unloaded: `api` points into these.
    _libs: Vec<Library>,
}

static CANN: OnceLock<Result<Loaded>> = OnceLock::new();

/// CANN's function table, loading the libraries on first use (once per process; the outcome,
/// success or failure, is cached).
pub fn cann() -> Result<&'static AclApi> {
    match CANN.get_or_init(load) {
        Ok(l) => Ok(&l.api),
        Err(e) => Err(e.clone()),
    }
}

/// The directory CANN was loaded from, if it was.
pub fn cann_dir() -> Option<&'static Path> {
    CANN.get()
        .and_then(|r| r.as_ref().ok())
        .map(|l| l.dir.as_path())
}

/// Whether CANN's loaded libraries export the symbol `name` (`None` when CANN is not loaded).
/// For reports (`burn-ascend selftest` lists which op versions exist): nothing is called
/// through it.
pub fn exports(name: &str) -> Option<bool> {
    let loaded = CANN.get()?.as_ref().ok()?;
    Some(loaded._libs.iter().any(|l| {
        // SAFETY: the symbol is only looked up, as an opaque address that is never
        // dereferenced or called; the library stays loaded.
        unsafe { l.get::<*const std::ffi::c_void>(name.as_bytes()) }.is_ok()
    }))
}

fn load() -> Result<Loaded> {
    let candidates = toolkit_candidates();
    let Some((_, root)) = candidates
        .iter()
        .find(|(_, root)| lib_dir(root).join(LIBRARIES[0].0).is_file())
    else {
        let tried: Vec<String> = candidates
            .iter()
            .map(|(from, root)| {
                format!("{} ({from})", lib_dir(root).join(LIBRARIES[0].0).display())
            })
            .collect();
        return Err(AclError::NotFound(format!(
            "Ascend CANN not found: tried {}; install CANN and source its set_env.sh, or set ASCEND_TOOLKIT_HOME",
            tried.join(", ")
        )));
    };
    let dir = lib_dir(root);
    let mut libs = Vec::new();
    for &(name, required) in LIBRARIES {
        let path = dir.join(name);
        if !path.is_file() {
            if required {
                return Err(AclError::NotFound(format!(
                    "Ascend CANN incomplete: {} not found (toolkit {})",
                    path.display(),
                    root.display()
                )));
            }
            continue;
        }
        // SAFETY: opening a library runs its initialisers; these are CANN's own libraries from
        // the toolkit directory the user pointed at (or the default install), which is exactly
        // what a CANN application links against.
        let lib = unsafe { Library::new(&path) }.map_err(|e| {
            AclError::NotFound(format!(
                "Ascend CANN: cannot open {}: {e} (is LD_LIBRARY_PATH set by CANN's set_env.sh?)",
                path.display()
            ))
        })?;
        libs.push(lib);
    }
    let api = resolve(&libs, &dir)?;
    Ok(Loaded {
        api,
        dir,
        _libs: libs,
    })
}

/// Looks a symbol up across `libs`, in order.
///
/// # Safety
/// `F` must be the exact `unsafe extern "C" fn` type of the C symbol `name`.
unsafe fn find<F: Copy>(libs: &[Library], name: &str) -> Option<F> {
    libs.iter().find_map(|l| {
        // SAFETY: the caller guarantees `F` is the symbol's type; the value is copied out of the
        // `Symbol` and the libraries are kept loaded for the life of the process.
        unsafe { l.get::<F>(name.as_bytes()).ok().map(|s| *s) }
    })
}

fn resolve(libs: &[Library], dir: &Path) -> Result<AclApi> {
    let missing = |name: &str| {
        AclError::NotFound(format!(
            "Ascend CANN: symbol {name} not found in {} ({})",
            dir.display(),
            LIBRARIES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    // Every entry of the table: required runtime functions, optional ops (both stages or none).
    macro_rules! resolve_table {
        (
            runtime { $($rf:ident: $rc:ident($rt:ty)),* }
            ops { $($(#[$a:meta])* $f:ident: $c:ident($w:ty)),* }
        ) => {
            AclApi {
                kind: ApiKind::Cann,
                $(
                    // SAFETY: `$rt` is written from the prototype of `$rc` in `ffi`.
                    $rf: unsafe { find::<$rt>(libs, stringify!($rc)) }
                        .ok_or_else(|| missing(stringify!($rc)))?,
                )*
                $(
                    $f: {
                        // SAFETY: `$w` is written from the prototype of `$c`GetWorkspaceSize and
                        // `AclnnLaunch` is the launch prototype shared by every aclnn op.
                        let (ws, launch) = unsafe {
                            (
                                find::<$w>(libs, concat!(stringify!($c), "GetWorkspaceSize")),
                                find::<AclnnLaunch>(libs, stringify!($c)),
                            )
                        };
                        match (ws, launch) {
                            (Some(workspace), Some(launch)) => Some(OpFns { workspace, launch }),
                            _ => None,
                        }
                    },
                )*
            }
        };
    }
    Ok(crate::acl_api_table!(resolve_table))
}
