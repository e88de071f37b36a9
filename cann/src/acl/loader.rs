//! Finding CANN and filling [`AclApi`] from its shared libraries at run time (`libloading`).
//!
//! Search order for the toolkit root (spec §7): `$ASCEND_TOOLKIT_HOME`, then
//! `$ASCEND_HOME_PATH`, then `/usr/local/Ascend/ascend-toolkit/latest`; the libraries live in
//! `<root>/lib64`. The first root whose `lib64/libascendcl.so` exists is used. From it
//! `libascendcl.so` and `libnnopbase.so` are required; the aclnn op libraries are found the
//! way torch_npu finds them ([`op_library_paths`], after op-plugin's
//! `op_plugin/utils/op_api_common.cpp`, `GetOpApiFuncAddr`): custom operator packages first,
//! then every `libopapi_*.so` (split CANN builds put the attention ops in
//! `libopapi_transformer.so` and the math / nn ops in `libopapi_math.so` / `libopapi_nn.so`),
//! then `libopapi.so`, then the older `libaclnn_*.so` feature libraries. Every symbol is
//! resolved across all of them in that order. Libraries stay loaded for the life of the process
//! (the table is `'static`), so the function pointers never dangle.
//!
//! CANN's libraries find their own dependencies through `LD_LIBRARY_PATH` (CANN's `set_env.sh`
//! sets it, and `ASCEND_OPP_PATH`, which aclnn needs to find its kernels).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use super::error::{AclError, Result};
use super::ffi::*;

/// The runtime libraries, opened first; both are required.
pub const LIBRARIES: &[&str] = &["libascendcl.so", "libnnopbase.so"];

/// The single-library op package of older CANN builds.
pub const OPAPI: &str = "libopapi.so";

/// The feature libraries torch_npu falls back to last (`GetOpApiFuncAddrFromFeatureLib`).
pub const FEATURE_LIBRARIES: &[&str] = &[
    "libaclnn_ops_infer.so",
    "libaclnn_ops_train.so",
    "libaclnn_math.so",
    "libaclnn_sparse.so",
    "libaclnn_fft.so",
    "libaclnn_rand.so",
];

/// A custom operator package's op library (`GetCustOpApiLibName`).
pub const CUSTOM_OPAPI: &str = "libcust_opapi.so";

/// The aclnn op libraries that exist, in torch_npu's lookup order: each
/// `$ASCEND_CUSTOM_OPP_PATH` entry's `op_api/lib/libcust_opapi.so`; the vendors listed by
/// `load_priority=` in `$ASCEND_OPP_PATH/vendors/config.ini` (`vendors/<v>/op_api/lib/…`);
/// every `libopapi_*.so` in `lib_dir` (sorted by name, for a reproducible order); `libopapi.so`;
/// the `libaclnn_*.so` feature libraries.
pub fn op_library_paths(
    lib_dir: &Path,
    custom_opp_path: Option<&str>,
    opp_path: Option<&Path>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in custom_opp_path
        .into_iter()
        .flat_map(|p| p.split(':'))
        .filter(|p| !p.is_empty())
    {
        out.push(Path::new(dir).join("op_api/lib").join(CUSTOM_OPAPI));
    }
    if let Some(opp) = opp_path {
        let vendors = opp.join("vendors");
        if let Ok(config) = std::fs::read_to_string(vendors.join("config.ini")) {
            let priority = config
                .lines()
                .find_map(|l| l.trim().strip_prefix("load_priority="))
                .unwrap_or("");
            for v in priority.split(',').map(str::trim).filter(|v| !v.is_empty()) {
                out.push(vendors.join(v).join("op_api/lib").join(CUSTOM_OPAPI));
            }
        }
    }
    let mut split: Vec<PathBuf> = std::fs::read_dir(lib_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libopapi_") && n.ends_with(".so"))
        })
        .collect();
    split.sort();
    out.extend(split);
    out.push(lib_dir.join(OPAPI));
    out.extend(FEATURE_LIBRARIES.iter().map(|n| lib_dir.join(n)));
    out.retain(|p| p.is_file());
    out
}

/// The default toolkit root when no environment variable names one.
pub const DEFAULT_TOOLKIT: &str = "/usr/local/Ascend/ascend-toolkit/latest";

/// Candidate toolkit roots in search order, each with where it came from.
pub fn toolkit_candidates() -> Vec<(String, PathBuf)> {
    toolkit_candidates_in(|var| std::env::var_os(var))
}

/// [`toolkit_candidates`] for a given environment (`env(name)` is the variable's value), so
/// the search order can be tested without touching the process's environment: torch_npu's
/// order, `$ASCEND_TOOLKIT_HOME`, then `$ASCEND_HOME_PATH`, then [`DEFAULT_TOOLKIT`]; an
/// empty variable counts as unset.
pub fn toolkit_candidates_in(
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for var in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
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
    /// The libraries opened, in symbol-resolution order.
    paths: Vec<PathBuf>,
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

/// The libraries CANN was loaded from, in symbol-resolution order (empty when not loaded).
pub fn loaded_libraries() -> &'static [PathBuf] {
    CANN.get()
        .and_then(|r| r.as_ref().ok())
        .map_or(&[], |l| l.paths.as_slice())
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
        .find(|(_, root)| lib_dir(root).join(LIBRARIES[0]).is_file())
    else {
        let tried: Vec<String> = candidates
            .iter()
            .map(|(from, root)| format!("{} ({from})", lib_dir(root).join(LIBRARIES[0]).display()))
            .collect();
        return Err(AclError::NotFound(format!(
            "Ascend CANN not found: tried {}; install CANN and source its set_env.sh, or set ASCEND_TOOLKIT_HOME",
            tried.join(", ")
        )));
    };
    let dir = lib_dir(root);
    let mut paths: Vec<PathBuf> = LIBRARIES.iter().map(|n| dir.join(n)).collect();
    if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
        return Err(AclError::NotFound(format!(
            "Ascend CANN incomplete: {} not found (toolkit {})",
            missing.display(),
            root.display()
        )));
    }
    let custom = std::env::var("ASCEND_CUSTOM_OPP_PATH").ok();
    let opp = std::env::var_os("ASCEND_OPP_PATH").map(PathBuf::from);
    let ops = op_library_paths(&dir, custom.as_deref(), opp.as_deref());
    if ops.is_empty() {
        return Err(AclError::NotFound(format!(
            "Ascend CANN incomplete: no aclnn op library (libopapi.so, libopapi_*.so or \
             libaclnn_*.so) in {}",
            dir.display()
        )));
    }
    paths.extend(ops);
    let mut libs = Vec::new();
    for path in &paths {
        // SAFETY: opening a library runs its initialisers; these are CANN's own libraries from
        // the toolkit directory the user pointed at (or the default install), or the custom
        // operator packages CANN's own environment variables name, which is exactly what a CANN
        // application (torch_npu included) loads.
        let lib = unsafe { Library::new(path) }.map_err(|e| {
            AclError::NotFound(format!(
                "Ascend CANN: cannot open {}: {e} (is LD_LIBRARY_PATH set by CANN's set_env.sh?)",
                path.display()
            ))
        })?;
        libs.push(lib);
    }
    let api = resolve(&libs, &paths)?;
    Ok(Loaded {
        api,
        dir,
        paths,
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

fn resolve(libs: &[Library], paths: &[PathBuf]) -> Result<AclApi> {
    let missing = |name: &str| {
        AclError::NotFound(format!(
            "Ascend CANN: symbol {name} not found in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    // Every entry of the table: required runtime functions, optional ops (both stages or none).
    macro_rules! resolve_table {
        (
            runtime { $($rf:ident: $rc:ident($rp:ty)),* }
            graph { $($gf:ident: $gc:ident($gp:ty)),* }
            ops { $($(#[$a:meta])* $f:ident: $c:ident($p:ty)),* }
        ) => {
            AclApi {
                kind: ApiKind::Cann,
                $(
                    // SAFETY: `$rp`'s function type is written from the prototype of `$rc` in
                    // `ffi`.
                    $rf: unsafe { find::<<$rp as Prototype>::FnPtr>(libs, stringify!($rc)) }
                        .ok_or_else(|| missing(stringify!($rc)))?,
                )*
                $(
                    // SAFETY: `$gp`'s function type is written from the prototype of `$gc` in
                    // `ffi::graph`; absent (an older CANN) it stays `None`.
                    $gf: unsafe { find::<<$gp as Prototype>::FnPtr>(libs, stringify!($gc)) },
                )*
                $(
                    $f: {
                        // SAFETY: `$p`'s function type is written from the prototype of
                        // `$c`GetWorkspaceSize and
                        // `AclnnLaunch` is the launch prototype shared by every aclnn op.
                        let (ws, launch) = unsafe {
                            (
                                find::<<$p as Prototype>::FnPtr>(libs, concat!(stringify!($c), "GetWorkspaceSize")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_libraries_are_found_in_torch_npus_order() {
        let root = std::env::temp_dir().join(format!("burn-ascend-loader-{}", std::process::id()));
        let lib64 = root.join("lib64");
        let custom = root.join("custom");
        let opp = root.join("opp");
        let vendor = opp.join("vendors/acme/op_api/lib");
        for d in [&lib64, &custom.join("op_api/lib"), &vendor] {
            std::fs::create_dir_all(d).unwrap();
        }
        for f in [
            lib64.join("libopapi_transformer.so"),
            lib64.join("libopapi_math.so"),
            lib64.join("libopapi.so"),
            lib64.join("libopapi_nn.so.bak"),
            lib64.join("libaclnn_math.so"),
            custom.join("op_api/lib/libcust_opapi.so"),
            vendor.join("libcust_opapi.so"),
        ] {
            std::fs::write(f, b"").unwrap();
        }
        std::fs::write(
            opp.join("vendors/config.ini"),
            "# vendors\nload_priority=acme,missing\n",
        )
        .unwrap();
        let found = op_library_paths(&lib64, custom.to_str(), Some(&opp));
        let names: Vec<String> = found
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "custom/op_api/lib/libcust_opapi.so",
                "opp/vendors/acme/op_api/lib/libcust_opapi.so",
                "lib64/libopapi_math.so",
                "lib64/libopapi_transformer.so",
                "lib64/libopapi.so",
                "lib64/libaclnn_math.so",
            ]
        );
        // A split build without libopapi.so still has its op libraries.
        std::fs::remove_file(lib64.join("libopapi.so")).unwrap();
        assert_eq!(op_library_paths(&lib64, None, None).len(), 3);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
