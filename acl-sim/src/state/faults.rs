//! Fault injection (tests only ask for it): make the next `aclrtMalloc`, a chosen aclnn launch
//! or `aclrtSynchronizeStream` fail the way CANN reports such failures, so that callers'
//! error paths (typed errors, released handles and pool blocks) can be exercised without an
//! NPU. Faults are armed **for the calling thread** (the simulation runs every call on the
//! caller's thread, as [`super::set_compute`]), fire once and disarm.

use std::cell::RefCell;

use burn_ascend_cann::acl::ffi::{
    AclStatus, ACLNN_ERR_RUNTIME_ERROR, ACL_ERROR_RT_MEMORY_ALLOCATION,
};

/// The status a failed stream synchronisation returns: 507015, `ACL_ERROR_RT_AICORE_EXCEPTION`
/// of CANN's `rt_error_codes.h` (a kernel fault reported at the next synchronisation), the
/// usual way a device-side fault surfaces on an NPU.
pub const SIM_STREAM_FAULT_STATUS: AclStatus = 507_015;

/// A fault to inject (see [`inject_fault`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `aclrtMalloc` fails with 207001 (`ACL_ERROR_RT_MEMORY_ALLOCATION`) after `after` more
    /// successful allocations on this thread.
    Malloc { after: usize },
    /// An aclnn launch (the execute stage) fails with 361001 (`ACLNN_ERR_RUNTIME_ERROR`) after
    /// `after` more launches on this thread that match `op` (a C name such as
    /// `aclnnScatterPaKvCache`; `None`: any op). The executor is consumed, nothing is written.
    Launch { op: Option<String>, after: usize },
    /// `aclrtSynchronizeStream` fails with [`SIM_STREAM_FAULT_STATUS`] after `after` more
    /// successful synchronisations on this thread.
    Synchronize { after: usize },
}

#[derive(Default)]
struct Armed {
    malloc: Option<usize>,
    launch: Option<(Option<String>, usize)>,
    sync: Option<usize>,
    fired: usize,
}

thread_local! {
    static ARMED: RefCell<Armed> = RefCell::new(Armed::default());
}

/// Arms `fault` on the calling thread (replacing an armed fault of the same kind).
pub fn inject_fault(fault: Fault) {
    ARMED.with(|a| {
        let mut a = a.borrow_mut();
        match fault {
            Fault::Malloc { after } => a.malloc = Some(after),
            Fault::Launch { op, after } => a.launch = Some((op, after)),
            Fault::Synchronize { after } => a.sync = Some(after),
        }
    });
}

/// Disarms every fault of the calling thread.
pub fn clear_faults() {
    ARMED.with(|a| {
        let fired = a.borrow().fired;
        *a.borrow_mut() = Armed {
            fired,
            ..Armed::default()
        }
    });
}

/// How many injected faults fired on the calling thread so far.
pub fn faults_fired() -> usize {
    ARMED.with(|a| a.borrow().fired)
}

/// Counts down an armed counter: `true` when it reaches the call that must fail (and disarms).
fn count_down(slot: &mut Option<usize>) -> bool {
    match slot {
        Some(0) => {
            *slot = None;
            true
        }
        Some(n) => {
            *n -= 1;
            false
        }
        None => false,
    }
}

// The checks below run in every `aclrtMalloc` / launch / synchronisation, including those a
// thread-local runtime makes while the thread's locals are destroyed: `try_with` (no fault
// then) instead of `with`, which would panic there — outside any `catch_unwind`, so an abort.

pub(crate) fn malloc_fault(size: usize) -> Option<(AclStatus, String)> {
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            count_down(&mut a.malloc).then(|| {
                a.fired += 1;
                (
                    ACL_ERROR_RT_MEMORY_ALLOCATION,
                    format!(
                    "aclrtMalloc: out of device memory ({size} bytes requested; injected fault)"
                ),
                )
            })
        })
        .ok()
        .flatten()
}

pub(crate) fn launch_fault(op: &str) -> Option<(AclStatus, String)> {
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            let hit = match &mut a.launch {
                Some((want, n)) if want.as_deref().is_none_or(|w| w == op) => {
                    if *n == 0 {
                        a.launch = None;
                        true
                    } else {
                        *n -= 1;
                        false
                    }
                }
                _ => false,
            };
            hit.then(|| {
                a.fired += 1;
                (
                    ACLNN_ERR_RUNTIME_ERROR,
                    format!("{op}: the kernel failed at execute (injected fault)"),
                )
            })
        })
        .ok()
        .flatten()
}

pub(crate) fn sync_fault() -> Option<(AclStatus, String)> {
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            count_down(&mut a.sync).then(|| {
                a.fired += 1;
                (
                    SIM_STREAM_FAULT_STATUS,
                    "aclrtSynchronizeStream: a task on the stream failed (injected fault)"
                        .to_string(),
                )
            })
        })
        .ok()
        .flatten()
}
