//! [`AscendDevice`]: which function table (CANN or the host simulation) and which device index,
//! and the [`Runtime`] (device context, stream, workspace cache) each device has, shared by all
//! threads.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;

use burn_ascend_cann::acl::Runtime;
use burn_backend::{DeviceId, DeviceOps};

/// Where an [`AscendDevice`]'s aclnn calls go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AscendKind {
    /// The host simulation of the ACL ABI, crate `burn-ascend-acl-sim` (**not CANN**): device
    /// memory is host memory and each aclnn op runs the CPU kernels. Device 0, and `1..N`
    /// when the simulation is asked for N devices (`collective::simulate_devices`).
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
            burn_ascend_cann::acl::default_device_id()
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

/// One runtime per device, **shared by every thread** (one stream per device): ACL binds a
/// device's context per thread, so each thread binds it (`aclrtSetDevice`, see [`BOUND`])
/// before its first call and again whenever it comes back from another device; launches from all threads go to the device's one stream in
/// the order they are issued (the runtime's launch lock), so a tensor one thread produced is
/// ready for any op another thread queues after receiving it, and a block freed by any thread
/// is reusable at once by later work (the pool's stream-ordered reuse, `crate::memory`).
/// Opened on first use, kept for the process.
static RUNTIMES: Mutex<Option<HashMap<AscendDevice, Arc<Runtime>>>> = Mutex::new(None);

thread_local! {
    /// The device whose context is current on this thread (`aclrtSetDevice`). ACL keeps one
    /// current context per thread, so a thread that uses a second device (data parallelism
    /// sets replicas up from one thread) binds it again when it switches back.
    static BOUND: Cell<Option<AscendDevice>> = const { Cell::new(None) };
}

/// Why the simulation cannot be opened in a build without the `sim` feature.
const SIM_MISSING: &str = "the host simulation of the ACL ABI is not compiled in: enable the `sim` feature of burn-ascend-backend (or burn-ascend)";

/// A runtime over the host simulation.
#[cfg(feature = "sim")]
fn sim_runtime(index: u32) -> Result<Runtime, String> {
    burn_ascend_acl_sim::runtime_on(index as i32).map_err(|e| e.to_string())
}

/// Without the `sim` feature: the error saying so.
#[cfg(not(feature = "sim"))]
fn sim_runtime(_index: u32) -> Result<Runtime, String> {
    Err(SIM_MISSING.to_string())
}

fn open(device: &AscendDevice) -> Result<Runtime, String> {
    let rt = match device.kind {
        AscendKind::Simulation => sim_runtime(device.index),
        AscendKind::Npu => Runtime::npu(device.index as i32).map_err(|e| e.to_string()),
    };
    rt.map_err(|e| format!("cannot open Ascend device {device}: {e}"))
}

/// The devices whose stream a thread is capturing into a graph (`crate::graph::capture`), with
/// that thread. While it captures, the device's one stream is that thread's alone — every task
/// queued on it is recorded into the graph, and an upload to it is refused — so any other
/// thread that asks for the device's runtime waits in [`try_runtime`] until the capture ends.
static CAPTURING: Mutex<Vec<(AscendDevice, ThreadId)>> = Mutex::new(Vec::new());
/// Signalled when a capture ends.
static CAPTURE_ENDED: Condvar = Condvar::new();
/// How many captures are active (the fast path of [`try_runtime`] when none is).
static CAPTURES_ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// The device's stream reserved for the calling thread's graph capture; released on drop.
pub(crate) struct CaptureClaim {
    device: AscendDevice,
}

/// Reserves `device`'s stream for the calling thread's capture, first waiting for another
/// thread's capture of it to end; refuses a capture inside the thread's own capture.
pub(crate) fn claim_for_capture(device: &AscendDevice) -> Result<CaptureClaim, String> {
    let me = std::thread::current().id();
    let mut g = CAPTURING.lock().unwrap_or_else(|e| e.into_inner());
    if g.contains(&(*device, me)) {
        return Err(format!(
            "a capture of {device} inside this thread's capture of it (captures do not nest)"
        ));
    }
    while g.iter().any(|(d, _)| d == device) {
        g = CAPTURE_ENDED.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    g.push((*device, me));
    CAPTURES_ACTIVE.fetch_add(1, Ordering::SeqCst);
    Ok(CaptureClaim { device: *device })
}

impl Drop for CaptureClaim {
    fn drop(&mut self) {
        let mut g = CAPTURING.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(d, _)| *d != self.device);
        CAPTURES_ACTIVE.fetch_sub(1, Ordering::SeqCst);
        CAPTURE_ENDED.notify_all();
    }
}

/// Waits while another thread captures `device`'s stream.
fn wait_for_other_captures(device: &AscendDevice) {
    if CAPTURES_ACTIVE.load(Ordering::SeqCst) == 0 {
        return;
    }
    let me = std::thread::current().id();
    let mut g = CAPTURING.lock().unwrap_or_else(|e| e.into_inner());
    while g.iter().any(|(d, t)| d == device && *t != me) {
        g = CAPTURE_ENDED.wait(g).unwrap_or_else(|e| e.into_inner());
    }
}

/// The runtime of `device`, opened on first use, with the device bound to the calling
/// thread. While another thread captures the device's stream into a graph, waits for the
/// capture to end (the stream is that thread's until then).
pub(crate) fn try_runtime(device: &AscendDevice) -> Result<Arc<Runtime>, String> {
    wait_for_other_captures(device);
    let rt = {
        let mut g = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
        let map = g.get_or_insert_with(HashMap::new);
        match map.get(device) {
            Some(rt) => rt.clone(),
            None => {
                // Opening binds the device to this thread.
                let rt = Arc::new(open(device)?);
                map.insert(*device, rt.clone());
                let _ = BOUND.try_with(|b| b.set(Some(*device)));
                return Ok(rt);
            }
        }
    };
    let bound = BOUND
        .try_with(|b| b.get() == Some(*device))
        .map_err(|_| "thread is exiting".to_string())?;
    if !bound {
        rt.bind_current_thread()
            .map_err(|e| format!("cannot bind Ascend device {device} to this thread: {e}"))?;
        let _ = BOUND.try_with(|b| b.set(Some(*device)));
    }
    Ok(rt)
}

/// As [`try_runtime`], panicking with the device and the reason (no device, CANN not found…).
pub(crate) fn runtime(device: &AscendDevice) -> Arc<Runtime> {
    try_runtime(device).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until everything queued on `device` has run (its stream synchronised), panicking with
/// the failure a queued task reported. `Backend::sync`.
pub fn synchronize(device: &AscendDevice) {
    runtime(device)
        .synchronize()
        .unwrap_or_else(|e| panic!("Ascend {device}: a queued operation failed: {e}"));
}

/// What `device`'s runtime did so far: aclnn launches and queued copies, synchronisations, and
/// bytes copied each way (all threads together).
pub fn device_counters(device: &AscendDevice) -> burn_ascend_cann::acl::RuntimeCounters {
    try_runtime(device)
        .map(|rt| rt.counters())
        .unwrap_or_default()
}

/// Whether `device` can be opened on this machine (a real NPU needs CANN and the device).
pub fn is_available(device: &AscendDevice) -> Result<(), String> {
    try_runtime(device).map(|_| ())
}
