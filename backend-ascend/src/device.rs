//! [`AscendDevice`]: which function table (CANN or the host simulation) and which device index,
//! and the per-thread [`Runtime`] (device context, stream, workspace cache) of each device.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use burn_ascend_kernels::acl::Runtime;
use burn_backend::{DeviceId, DeviceOps};

/// Where an [`AscendDevice`]'s aclnn calls go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AscendKind {
    /// The host simulation of the ACL ABI, crate `burn-ascend-acl-sim` (**not CANN**): device
    /// memory is host memory and each aclnn op runs the CPU kernels. One device (index 0).
    /// Needs this crate's `sim` feature; without it, opening the device fails with an error
    /// saying so.
    Simulation,
    /// A real NPU through CANN's libraries, opened at run time.
    Npu,
}

/// An Ascend device: [`AscendDevice::sim`] or [`AscendDevice::npu`].
///
/// `AscendDevice::default()` reads `$BURN_ASCEND_DEVICE`: `sim`, `npu` (device
/// `$ASCEND_DEVICE_ID`, else 0) or `npu:N`. Unset, it is `sim` with the `sim` feature and `npu`
/// without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AscendDevice {
    /// CANN or the simulation.
    pub kind: AscendKind,
    /// The device index (`aclrtSetDevice`).
    pub index: u32,
}

impl AscendDevice {
    /// The host simulation (not CANN). Opening it needs the `sim` feature.
    pub const fn sim() -> Self {
        Self {
            kind: AscendKind::Simulation,
            index: 0,
        }
    }

    /// NPU `index` through CANN.
    pub const fn npu(index: u32) -> Self {
        Self {
            kind: AscendKind::Npu,
            index,
        }
    }

    /// The device named by `$BURN_ASCEND_DEVICE` (see the type's docs).
    pub fn from_env() -> Result<Self, String> {
        let v = std::env::var("BURN_ASCEND_DEVICE").unwrap_or_default();
        let v = v.trim();
        let npu = || {
            burn_ascend_kernels::acl::default_device_id()
                .map(|d| Self::npu(d as u32))
                .map_err(|e| e.to_string())
        };
        match v {
            "" if cfg!(feature = "sim") => Ok(Self::sim()),
            "" => npu(),
            "sim" if cfg!(feature = "sim") => Ok(Self::sim()),
            "sim" => Err(SIM_MISSING.to_string()),
            "npu" => npu(),
            _ => match v.strip_prefix("npu:").map(str::parse::<u32>) {
                Some(Ok(i)) => Ok(Self::npu(i)),
                _ => Err(format!(
                    "BURN_ASCEND_DEVICE must be `sim`, `npu` or `npu:N`, got {v:?}"
                )),
            },
        }
    }
}

impl Default for AscendDevice {
    fn default() -> Self {
        Self::from_env().unwrap_or_else(|e| panic!("AscendDevice::default: {e}"))
    }
}

impl fmt::Display for AscendDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            AscendKind::Simulation => write!(f, "ascend-sim:{}", self.index),
            AscendKind::Npu => write!(f, "npu:{}", self.index),
        }
    }
}

impl burn_backend::Device for AscendDevice {
    fn from_id(device_id: DeviceId) -> Self {
        match device_id.type_id {
            0 => Self {
                kind: AscendKind::Simulation,
                index: u32::from(device_id.index_id),
            },
            _ => Self::npu(u32::from(device_id.index_id)),
        }
    }

    fn to_id(&self) -> DeviceId {
        DeviceId {
            type_id: match self.kind {
                AscendKind::Simulation => 0,
                AscendKind::Npu => 1,
            },
            index_id: u16::try_from(self.index).expect("device index fits u16"),
        }
    }
}

impl DeviceOps for AscendDevice {}

thread_local! {
    /// One runtime per device per thread: ACL binds the device context to the calling thread
    /// (`aclrtSetDevice`), so every thread that touches a device gets its own runtime (its own
    /// stream and workspace), created on first use. Dropped at thread exit.
    static RUNTIMES: RefCell<HashMap<AscendDevice, Rc<Runtime>>> = RefCell::new(HashMap::new());
}

/// Why the simulation cannot be opened in a build without the `sim` feature.
const SIM_MISSING: &str = "the host simulation of the ACL ABI is not compiled in: enable the `sim` feature of burn-ascend-backend (or burn-ascend)";

/// A runtime over the host simulation.
#[cfg(feature = "sim")]
fn sim_runtime() -> Result<Runtime, String> {
    burn_ascend_acl_sim::runtime().map_err(|e| e.to_string())
}

/// Without the `sim` feature: the error saying so.
#[cfg(not(feature = "sim"))]
fn sim_runtime() -> Result<Runtime, String> {
    Err(SIM_MISSING.to_string())
}

fn open(device: &AscendDevice) -> Result<Runtime, String> {
    let rt = match device.kind {
        AscendKind::Simulation => sim_runtime(),
        AscendKind::Npu => Runtime::npu(device.index as i32).map_err(|e| e.to_string()),
    };
    rt.map_err(|e| format!("cannot open Ascend device {device}: {e}"))
}

/// The calling thread's runtime for `device`, created (and the device bound to the thread) on
/// first use.
pub(crate) fn try_runtime(device: &AscendDevice) -> Result<Rc<Runtime>, String> {
    let cached = RUNTIMES
        .try_with(|m| m.borrow().get(device).cloned())
        .map_err(|_| "thread is exiting".to_string())?;
    if let Some(rt) = cached {
        return Ok(rt);
    }
    let rt = Rc::new(open(device)?);
    let _ = RUNTIMES.try_with(|m| m.borrow_mut().insert(*device, rt.clone()));
    Ok(rt)
}

/// As [`try_runtime`], panicking with the device and the reason (no device, CANN not found…).
pub(crate) fn runtime(device: &AscendDevice) -> Rc<Runtime> {
    try_runtime(device).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether `device` can be opened on this machine (a real NPU needs CANN and the device).
pub fn is_available(device: &AscendDevice) -> Result<(), String> {
    try_runtime(device).map(|_| ())
}
