//! The CANN release a runtime runs, whose rules the backend follows where they differ by
//! release: FIA's `learnableSink` dtype, and whether the varlen backward's `dsinkOut` is taken
//! from CANN ([`burn_ascend_contract::DsinkPostStep::right_at_every_size`]) or computed here.

use std::path::Path;
use std::sync::OnceLock;

use burn_ascend_cann::acl::{loader, Runtime};
use burn_ascend_contract::{AttnError, CannRelease};

/// The release of the CANN installed under `lib64` (where CANN was loaded from): the ops
/// package's `version=` (`ascend_ops_install.info`, the one that ships the attention ops),
/// else the toolkit's, as `selftest` reads them.
fn release_of_install(lib64: &Path) -> Option<CannRelease> {
    let root = lib64.parent()?;
    let arch = root.join(format!("{}-linux", std::env::consts::ARCH));
    ["ascend_ops_install.info", "ascend_toolkit_install.info"]
        .iter()
        .find_map(|f| {
            let text = std::fs::read_to_string(arch.join(f)).ok()?;
            let v = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("version="))?;
            CannRelease::from_package_version(v)
        })
}

/// The CANN release `rt` runs: on the simulation (ACL version 0.0.0, which no CANN has) the
/// release it pretends to be (an unknown name in its environment variable is the error); on
/// CANN the installed package's; when that cannot be read, 8.5.0, whose rules are the safe
/// ones: a BFLOAT16 sink, which every release takes outside 9.x's TND split-fuse path, and the
/// backend's own dsink.
pub fn cann_release(rt: &Runtime) -> Result<CannRelease, AttnError> {
    #[cfg(feature = "sim")]
    if rt.acl_version().ok() == Some(burn_ascend_acl_sim::SIM_ACL_VERSION) {
        return burn_ascend_acl_sim::cann_release();
    }
    #[cfg(not(feature = "sim"))]
    let _ = rt;
    static INSTALLED: OnceLock<Option<CannRelease>> = OnceLock::new();
    Ok(INSTALLED
        .get_or_init(|| loader::cann_dir().and_then(release_of_install))
        .unwrap_or(CannRelease::V8_5_0))
}
