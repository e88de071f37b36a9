//! The CANN release the simulation pretends to be: the rules that differ by release (FIA's
//! `learnableSink` dtype, the varlen backward's dsink post step) follow it.
//!
//! In order: this thread's choice ([`set_cann_release`], for tests), the process's
//! ([`set_process_cann_release`], what the command line's `--cann-release` sets), the
//! environment variable [`CANN_RELEASE_ENV`], else the newest release the project has read
//! ([`CannRelease::NEWEST`]). An unknown name in the variable is a typed error naming it and the
//! releases known.

use std::cell::Cell;
use std::sync::Mutex;

use burn_ascend_contract::{AttnError, CannRelease};

/// The environment variable naming the CANN release the simulation pretends to be (`9.1.0`,
/// `8.5`, …; see [`CannRelease::parse`]).
pub const CANN_RELEASE_ENV: &str = "BURN_ASCEND_CANN_RELEASE";

thread_local! {
    /// This thread's release (None: the process's).
    static THREAD: Cell<Option<CannRelease>> = const { Cell::new(None) };
}

/// The process's release (None: the environment's).
static PROCESS: Mutex<Option<CannRelease>> = Mutex::new(None);

/// The CANN release the simulation pretends to be on this thread (see the module's order); an
/// unknown name in [`CANN_RELEASE_ENV`] is an error naming the variable.
pub fn cann_release() -> Result<CannRelease, AttnError> {
    if let Some(r) = THREAD.with(Cell::get) {
        return Ok(r);
    }
    if let Some(r) = *PROCESS.lock().unwrap_or_else(|e| e.into_inner()) {
        return Ok(r);
    }
    match std::env::var(CANN_RELEASE_ENV) {
        Ok(name) => CannRelease::parse(&name, CANN_RELEASE_ENV),
        Err(_) => Ok(CannRelease::NEWEST),
    }
}

/// Makes this thread's simulation pretend to be CANN `release` (`None`: back to the process's),
/// and forgets [`crate::last_learnable_sink_dtype`] (so a test sees only what its own calls
/// sent). Per thread, so parallel tests do not see each other's.
pub fn set_cann_release(release: Option<CannRelease>) {
    THREAD.with(|c| c.set(release));
    crate::fia::forget_last_sink_dtype();
}

/// Makes every thread of the process without its own choice pretend to be CANN `release`
/// (`None`: back to the environment's) — the command line's `--cann-release`.
pub fn set_process_cann_release(release: Option<CannRelease>) {
    *PROCESS.lock().unwrap_or_else(|e| e.into_inner()) = release;
}
