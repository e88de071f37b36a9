//! burn-ascend-backend's integration tests, one binary: a module per suite.
//!
//! The suites share one process, and the backend keeps process-wide state: the host-fallback
//! counters, the caching memory pool and the simulated device memory behind it, and the
//! random generator of the device's fills. A test that reads that state (fallback counts
//! before and after, memory statistics, a seeded replay) holds [`exclusive`]; every other test
//! that runs anything on a device holds [`shared`]. So a counted fallback, an allocation or a
//! random fill never lands between another test's two readings, whatever the thread count.
//! (Tests that only compute on `NdArray` or on constants hold neither.)

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod asynchrony;
mod attention;
mod burn_attention;
mod device_inputs;
mod devices;
mod fallback_dtypes;
mod faults;
mod fia_sink;
mod grouped_matmul;
mod infer_dtypes;
mod memory_pool;
mod moe_gating;
mod native_elementwise;
mod native_index;
mod serving;
mod tensor_ops;

static PROCESS_STATE: RwLock<()> = RwLock::new(());

/// For a test that runs ops on a device and reads no process-wide state: runs alongside other
/// `shared` tests, never alongside an [`exclusive`] one.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    PROCESS_STATE.read().unwrap_or_else(PoisonError::into_inner)
}

/// For a test that reads process-wide state: no other device test runs meanwhile. (A failed
/// test's poisoned lock is taken over: the next test still runs.)
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    PROCESS_STATE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
}
