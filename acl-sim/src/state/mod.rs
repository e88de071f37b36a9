//! The simulated runtime and nnopbase: device memory ([`memory`]: host allocations tracked by
//! address), streams, tensor / int-array / tensor-list / scalar handles ([`handles`]),
//! executors and the recent error message.
//!
//! Handles are opaque ids (never dereferenced): the C side only passes them back. Device
//! memory is `Box<[u8]>` owned by a registry keyed by address, so the simulation reads and
//! writes it through safe slices; only host pointers handed in by `aclrtMemcpy` are
//! dereferenced raw.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use burn_ascend_cann::acl::ffi::*;

pub(crate) mod capture;
pub(crate) mod faults;
pub(crate) mod handles;
pub(crate) mod memory;
pub(crate) mod streams;

pub use faults::{clear_faults, faults_fired, inject_fault, Fault, SIM_STREAM_FAULT_STATUS};
pub(crate) use handles::{c_str, int_array, required, scalar, tensor, tensor_list, SimTensor};
pub(crate) use memory::{device_range_ok, read_device, with_device_mut};
pub use memory::{memory_in_use, set_memory_limit};
pub use streams::{device_time, reset_device_time, set_stream_delay, SIM_HAZARD_STATUS};

/// A simulated failure: status and message.
#[derive(Debug)]
pub(crate) struct SimErr(pub AclStatus, pub String);

pub(crate) type SimResult<T> = Result<T, SimErr>;

pub(crate) fn invalid<T>(msg: impl Into<String>) -> SimResult<T> {
    Err(SimErr(ACLNN_ERR_PARAM_INVALID, msg.into()))
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // `try_with`: a call failing while the thread's locals are destroyed (a thread-local
    // runtime dropped at thread exit) runs outside `catch_unwind`; `with` would panic there.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

thread_local! {
    /// How many [`guard`]s the calling thread is inside: while > 0 a panic is caught and
    /// reported as a status, so the process-wide hook must not print it.
    static GUARD_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Where the last panic caught inside a [`guard`] happened (the quiet hook records it so
    /// the error message keeps it).
    static CAUGHT_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per process, a panic hook that stays quiet for panics a [`guard`] will
/// catch (recording their location) and defers to the previous hook for every other panic:
/// a caught kernel panic must not print a backtrace before the caller's one-line error.
/// Per-thread by depth, not a hook swap, so concurrent callers cannot restore each other's
/// hooks.
fn install_quiet_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARD_DEPTH.with(|d| d.get()) > 0 {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()));
                CAUGHT_AT.with(|c| *c.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, turning a panic into an internal error (561000) carrying its message and
/// location; the panic prints nothing (see [`install_quiet_hook`]). Used by [`guard`] and by
/// the streams' workers, which run the tasks.
pub(crate) fn catch(f: impl FnOnce() -> SimResult<()>) -> SimResult<()> {
    install_quiet_hook();
    GUARD_DEPTH.with(|d| d.set(d.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    GUARD_DEPTH.with(|d| d.set(d.get() - 1));
    match result {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("panic");
            let at = CAUGHT_AT
                .with(|c| c.borrow_mut().take())
                .map_or_else(String::new, |at| format!(" (at {at})"));
            Err(SimErr(
                ACLNN_ERR_INNER,
                format!("internal error: {what}{at}"),
            ))
        }
    }
}

/// Runs `f`, turning its error or a panic into a status and a recent-error message; a panic
/// prints nothing (see [`install_quiet_hook`]), its message and location go into the error.
pub(crate) fn guard(f: impl FnOnce() -> SimResult<()>) -> AclStatus {
    match catch(f) {
        Ok(()) => ACL_SUCCESS,
        Err(SimErr(st, msg)) => {
            // What a failed first stage decoded belongs to no executor.
            let _ = TOUCHED.try_with(|t| t.borrow_mut().clear());
            crate::cost::discard();
            set_error(&format!("[simulation] {msg}"));
            st
        }
    }
}

thread_local! {
    /// The device ranges of the `aclTensor`s decoded on this thread since the last executor
    /// was made: the memory the next executor's launch touches (see [`streams`]).
    static TOUCHED: RefCell<Vec<streams::Span>> = const { RefCell::new(Vec::new()) };
}

/// Records that the call being simulated touches `[addr, addr + len)`.
pub(crate) fn note_touched(addr: usize, len: usize) {
    if len > 0 {
        let _ = TOUCHED.try_with(|t| t.borrow_mut().push((addr, addr + len)));
    }
}

fn take_touched() -> Vec<streams::Span> {
    TOUCHED
        .try_with(|t| std::mem::take(&mut *t.borrow_mut()))
        .unwrap_or_default()
}

/// As [`guard`] for functions returning a handle (null on failure).
fn guard_ptr<T>(f: impl FnOnce() -> SimResult<usize>) -> *mut T {
    let mut out = 0usize;
    let st = guard(|| {
        out = f()?;
        Ok(())
    });
    if st == ACL_SUCCESS {
        out as *mut T
    } else {
        std::ptr::null_mut()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0x5100);

/// A fresh opaque handle value (non-null, never dereferenced).
pub(crate) fn next_id() -> usize {
    NEXT_ID.fetch_add(16, Ordering::Relaxed)
}

thread_local! {
    static COMPUTE: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Turns the simulated kernels on or off for the launches **the calling thread** queues (each
/// task remembers the setting it was queued under). Off, launches still validate and consume executors
/// but write nothing: what remains is the host-side cost of a dispatch. Queued memsets and
/// device-to-device copies are device work too and are skipped alike; copies to or from the
/// host still run.
pub fn set_compute(on: bool) {
    COMPUTE.with(|c| c.set(on));
}

pub(crate) fn compute_enabled() -> bool {
    COMPUTE.with(|c| c.get())
}

thread_local! {
    /// Successful launches per op C name, on the calling thread (launches run on it).
    static LAUNCHES: std::cell::RefCell<HashMap<&'static str, usize>> =
        std::cell::RefCell::new(HashMap::new());
}

/// How many times `op` (its C name, e.g. `aclnnFlashAttentionUnpaddingScoreGrad`) was launched
/// successfully on the calling thread, so tests can tell which entry point a call took.
pub fn launches(op: &str) -> usize {
    LAUNCHES.with(|l| l.borrow().get(op).copied().unwrap_or(0))
}

/// Counts a successful launch of `op` on the calling thread.
pub(crate) fn note_launch(op: &'static str) {
    LAUNCHES.with(|l| *l.borrow_mut().entry(op).or_insert(0) += 1);
}

// ---- runtime -----------------------------------------------------------------------------

// The configuration file is not read: the simulation has nothing to configure.
runtime_fn!(acl_init, |_params| { ACL_SUCCESS });

runtime_fn!(acl_finalize, |_params| { ACL_SUCCESS });

/// Simulated devices: `u32::MAX` until first read, then `$BURN_ASCEND_SIM_DEVICES` or 1.
static DEVICES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// Makes the simulation report `count` devices (`aclrtGetDeviceCount`; indices
/// `0..count`, at least 1), each with its own streams. The initial value is
/// `$BURN_ASCEND_SIM_DEVICES`, else 1. Devices share one host memory pool (and
/// [`set_memory_limit`]'s one cap).
pub fn set_device_count(count: u32) {
    DEVICES.store(count.max(1), Ordering::SeqCst);
}

/// The number of simulated devices (see [`set_device_count`]).
pub fn device_count() -> u32 {
    let n = DEVICES.load(Ordering::SeqCst);
    if n != u32::MAX {
        return n;
    }
    let n = std::env::var("BURN_ASCEND_SIM_DEVICES")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1);
    let _ = DEVICES.compare_exchange(u32::MAX, n, Ordering::SeqCst, Ordering::SeqCst);
    DEVICES.load(Ordering::SeqCst)
}

thread_local! {
    /// The device `aclrtSetDevice` bound to this thread (HCCL's collectives check it).
    static CURRENT_DEVICE: std::cell::Cell<Option<i32>> = const { std::cell::Cell::new(None) };
}

/// The device bound to the calling thread (0 when none was: ACL's default context).
pub(crate) fn current_device() -> i32 {
    CURRENT_DEVICE.with(|d| d.get()).unwrap_or(0)
}

fn check_device(call: &str, device: i32) -> SimResult<()> {
    let count = device_count();
    if device < 0 || device as u32 >= count {
        return Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!(
                "{call}: the simulation has {count} device(s) (0..{count}; set_device_count or \
                 BURN_ASCEND_SIM_DEVICES), got {device}"
            ),
        ));
    }
    Ok(())
}

runtime_fn!(set_device, |p| {
    guard(|| {
        check_device("aclrtSetDevice", p.device_id)?;
        CURRENT_DEVICE.with(|d| d.set(Some(p.device_id)));
        Ok(())
    })
});

runtime_fn!(reset_device, |p| {
    guard(|| check_device("aclrtResetDevice", p.device_id))
});

runtime_fn!(get_device_count, |p| {
    guard(|| {
        if p.count.is_null() {
            return Err(SimErr(ACL_ERROR_INVALID_PARAM, "count is null".into()));
        }
        // SAFETY: non-null out-pointer per the prototype.
        unsafe { *p.count = device_count() };
        Ok(())
    })
});

runtime_fn!(create_stream, |p| {
    guard(|| {
        if p.stream.is_null() {
            return Err(SimErr(ACL_ERROR_INVALID_PARAM, "stream is null".into()));
        }
        let id = streams::create();
        // SAFETY: non-null out-pointer per the prototype.
        unsafe { *p.stream = id as AclrtStream };
        Ok(())
    })
});

pub(crate) fn stream_ok(stream: AclrtStream) -> bool {
    streams::get(stream).is_some()
}

runtime_fn!(destroy_stream, |p| { guard(|| streams::destroy(p.stream)) });

runtime_fn!(synchronize_stream, |p| {
    guard(|| {
        capture::check_unsafe_call("aclrtSynchronizeStream", Some(p.stream as usize))?;
        // The stream's tasks are over either way (a failed task ends the wait too).
        streams::synchronize(p.stream)?;
        if let Some((st, msg)) = faults::sync_fault() {
            return Err(SimErr(st, msg));
        }
        Ok(())
    })
});

/// The ACL interface version the simulation reports: 0.0.0, which no CANN release has, so a
/// report can never mistake the simulation for a CANN install.
pub const SIM_ACL_VERSION: (i32, i32, i32) = (0, 0, 0);

runtime_fn!(get_version, |params| {
    let AclrtGetVersionParams {
        major,
        minor,
        patch,
    } = params;
    guard(|| {
        if major.is_null() || minor.is_null() || patch.is_null() {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                "aclrtGetVersion: majorVersion, minorVersion and patchVersion must not be null"
                    .into(),
            ));
        }
        let (a, b, c) = SIM_ACL_VERSION;
        // SAFETY: non-null out-pointers per the prototype.
        unsafe {
            *major = a;
            *minor = b;
            *patch = c;
        }
        Ok(())
    })
});

runtime_fn!(get_recent_err_msg, |_params| {
    // The pointer stays valid until the next failure on this thread replaces the string.
    LAST_ERROR.with(|e| e.borrow().as_ptr())
});

// ---- executors ---------------------------------------------------------------------------

pub(crate) type Job = Box<dyn FnMut() -> SimResult<()> + Send>;

struct Executor {
    op: &'static str,
    workspace: u64,
    job: Job,
    /// The device ranges of the tensors the first stage decoded.
    spans: Vec<streams::Span>,
    /// Its modelled cost, when the cost model is on.
    cost: Option<crate::cost::OpCost>,
    /// An attention op's `(query, key)` lengths per sequence.
    attended: Option<Vec<(usize, usize)>>,
}

static EXECUTORS: Mutex<Option<HashMap<usize, Executor>>> = Mutex::new(None);

/// The first stage's tail: records an executor for `op` needing `workspace` bytes and writes
/// the out-parameters.
///
/// # Safety
/// Non-null `ws` / `ex` must be writable out-pointers.
pub(crate) unsafe fn new_executor(
    op: &'static str,
    workspace: u64,
    job: Job,
    ws: *mut u64,
    ex: *mut *mut AclOpExecutor,
) -> SimResult<()> {
    if ws.is_null() || ex.is_null() {
        return Err(SimErr(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}GetWorkspaceSize: workspaceSize or executor out-pointer is null"),
        ));
    }
    let id = next_id();
    lock(&EXECUTORS).get_or_insert_with(HashMap::new).insert(
        id,
        Executor {
            op,
            workspace,
            job,
            spans: take_touched(),
            cost: crate::cost::take(op),
            attended: crate::cost::take_attended(),
        },
    );
    // SAFETY: the caller's contract (checked non-null above).
    unsafe {
        *ws = workspace;
        *ex = id as *mut AclOpExecutor;
    }
    Ok(())
}

/// The second stage of every simulated op: checks the two-stage order, the workspace and the
/// stream, then runs the job (unless compute is off).
pub(crate) fn launch(
    op: &'static str,
    workspace: *mut c_void,
    size: u64,
    executor: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    guard(|| {
        let Some(e) = lock(&EXECUTORS)
            .as_mut()
            .and_then(|m| m.remove(&(executor as usize)))
        else {
            return invalid(format!(
                "{op}: executor {executor:p} was not produced by {op}GetWorkspaceSize or was already launched (call GetWorkspaceSize, then launch once)"
            ));
        };
        if e.op != op {
            return invalid(format!(
                "{op}: executor belongs to {}GetWorkspaceSize",
                e.op
            ));
        }
        if size < e.workspace {
            return invalid(format!(
                "{op}: workspaceSize {size} is smaller than the {} bytes GetWorkspaceSize asked for",
                e.workspace
            ));
        }
        if e.workspace > 0 && !device_range_ok(workspace as usize, e.workspace as usize) {
            return invalid(format!(
                "{op}: workspace {workspace:p} is not a device allocation of {} bytes",
                e.workspace
            ));
        }
        if !stream_ok(stream) {
            return invalid(format!("{op}: {stream:p} is not a live stream"));
        }
        if let Some((st, msg)) = faults::launch_fault(op) {
            return Err(SimErr(st, msg));
        }
        let mut spans = e.spans;
        if e.workspace > 0 {
            spans.push((workspace as usize, workspace as usize + size as usize));
        }
        // A task recorded into a graph is not a launch; the graph's replay is one.
        let recorded = capture::recording(stream as usize);
        if recorded {
            capture::note_next_attended(e.attended);
            capture::note_next_cost(e.cost);
        }
        streams::enqueue(stream, op, spans, e.job, compute_enabled())?;
        if !recorded {
            if let Some(cost) = e.cost {
                crate::cost::record(op, cost);
            }
            note_launch(op);
        }
        Ok(())
    })
}

/// Puts `job` on `stream` as a task named `what` (an aclnn op, a memcpy, a collective),
/// touching the tensors decoded on this thread since the last executor (see [`streams`]):
/// every piece of device work goes through here or [`streams::enqueue`], so the stream's
/// ordering rules apply to all of it. The job runs later, on the stream's worker; its failure
/// is reported by the stream's next synchronisation.
pub(crate) fn enqueue(stream: AclrtStream, what: &'static str, job: Job) -> SimResult<()> {
    // Collectives are not in the cost model.
    crate::cost::discard();
    streams::enqueue(stream, what, take_touched(), job, compute_enabled())
}

/// Counts of live simulated objects (for leak tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveHandles {
    pub allocations: usize,
    pub tensors: usize,
    pub int_arrays: usize,
    pub tensor_lists: usize,
    pub executors: usize,
    pub streams: usize,
}

/// The live simulated objects right now (process-wide).
pub fn live_handles() -> LiveHandles {
    LiveHandles {
        allocations: lock(&memory::MEM).len(),
        tensors: lock(&handles::TENSORS).as_ref().map_or(0, HashMap::len),
        int_arrays: lock(&handles::INT_ARRAYS).as_ref().map_or(0, HashMap::len),
        tensor_lists: lock(&handles::LISTS).as_ref().map_or(0, HashMap::len),
        executors: lock(&EXECUTORS).as_ref().map_or(0, HashMap::len),
        streams: streams::live_count(),
    }
}

/// Runs `f` under [`guard`] and returns the status and the recent-error message: the hook
/// the guard's own tests call (a panic must become a status and a message, quietly).
pub fn guarded_for_tests(f: impl FnOnce()) -> (AclStatus, String) {
    let st = guard(|| {
        f();
        Ok(())
    });
    let msg = LAST_ERROR.with(|e| e.borrow().to_string_lossy().into_owned());
    (st, msg)
}

/// Reads the data of the `aclTensor` `t` the way a first stage would (outside any launch) and
/// returns the status and message: the hook that proves the simulation refuses it.
pub fn first_stage_read_for_tests(t: *const AclTensor) -> (AclStatus, String) {
    let st = guard(|| {
        let t = required(t as _, "self")?;
        t.read("self").map(drop)
    });
    let msg = LAST_ERROR.with(|e| e.borrow().to_string_lossy().into_owned());
    (st, msg)
}
