//! Finding CANN's `libhccl.so` and filling [`HcclApi`] from it at run time (`libloading`).
//!
//! HCCL ships in the same toolkit `lib64/` as the ACL runtime, and it calls the runtime the
//! process already uses, so it is opened only after [`crate::acl::loader::cann`] succeeded,
//! from the directory that one was loaded from (the same search: `$ASCEND_TOOLKIT_HOME`,
//! `$ASCEND_HOME_PATH`, `/usr/local/Ascend/ascend-toolkit/latest`). The library stays loaded for
//! the life of the process (the table is `'static`).

use std::path::PathBuf;
use std::sync::OnceLock;

use libloading::Library;

use super::error::HcclError;
use super::ffi::*;
use crate::prototype::Prototype;

/// The library's file name.
pub const LIBRARY: &str = "libhccl.so";

struct Loaded {
    api: HcclApi,
    _lib: Library,
}

static HCCL: OnceLock<Result<Loaded, HcclError>> = OnceLock::new();

/// CANN's HCCL table, loading `libhccl.so` on first use (once per process; the outcome is
/// cached). Without CANN it fails with the ACL loader's message naming every path tried.
pub fn hccl() -> Result<&'static HcclApi, HcclError> {
    match HCCL.get_or_init(load) {
        Ok(l) => Ok(&l.api),
        Err(e) => Err(e.clone()),
    }
}

fn load() -> Result<Loaded, HcclError> {
    crate::acl::loader::cann().map_err(|e| HcclError::NotFound(e.to_string()))?;
    let dir = crate::acl::loader::cann_dir()
        .map(PathBuf::from)
        .ok_or_else(|| HcclError::NotFound("Ascend CANN: no toolkit directory".into()))?;
    let path = dir.join(LIBRARY);
    if !path.is_file() {
        return Err(HcclError::NotFound(format!(
            "Ascend CANN incomplete: {} not found (HCCL ships with the toolkit)",
            path.display()
        )));
    }
    // SAFETY: opening the library runs its initialisers; it is CANN's own HCCL from the
    // toolkit directory the ACL runtime was loaded from, as torch_npu loads it.
    let lib = unsafe { Library::new(&path) }.map_err(|e| {
        HcclError::NotFound(format!(
            "Ascend CANN: cannot open {}: {e} (is LD_LIBRARY_PATH set by CANN's set_env.sh?)",
            path.display()
        ))
    })?;
    macro_rules! resolve {
        (fns { $($f:ident: $c:ident($p:ty)),* }) => {
            HcclApi {
                kind: crate::acl::ApiKind::Cann,
                $(
                    // SAFETY: `$p`'s function type is written from the prototype of `$c` in
                    // `hccl.h`; the
                    // pointer is copied out of the symbol and the library is never unloaded.
                    $f: unsafe { lib.get::<<$p as Prototype>::FnPtr>(stringify!($c).as_bytes()) }
                        .map(|s| *s)
                        .map_err(|e| {
                            HcclError::NotFound(format!(
                                "Ascend CANN: symbol {} not found in {}: {e}",
                                stringify!($c),
                                path.display()
                            ))
                        })?,
                )*
            }
        };
    }
    let api = crate::hccl_api_table!(resolve);
    Ok(Loaded { api, _lib: lib })
}
