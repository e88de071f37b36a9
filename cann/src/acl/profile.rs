//! An opt-in per-op profile of the host side of dispatch: for each aclnn op (both stages), each
//! queued copy and each synchronisation, the calls and the host time they took; the backend's
//! host fallbacks add theirs. Off by default (one relaxed atomic load per call); `finetune
//! --profile` turns it on around the training steps and prints [`snapshot`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(false);
static TABLE: Mutex<Option<HashMap<String, (u64, Duration)>>> = Mutex::new(None);

/// Turns the profile on or off (process-wide).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether the profile is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Adds one call of `what` that took `host` on the host.
pub fn record(what: &str, host: Duration) {
    let mut g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let e = g
        .get_or_insert_with(HashMap::new)
        .entry(what.to_string())
        .or_default();
    e.0 += 1;
    e.1 += host;
}

/// Times `f` as one call of `what` when the profile is on.
pub fn timed<R>(what: &str, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    record(what, t.elapsed());
    r
}

/// The profile so far: `(what, calls, host time)`, most host time first.
pub fn snapshot() -> Vec<(String, u64, Duration)> {
    let g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<(String, u64, Duration)> = g
        .iter()
        .flatten()
        .map(|(k, &(n, d))| (k.clone(), n, d))
        .collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    v
}

/// Clears the profile.
pub fn reset() {
    *TABLE.lock().unwrap_or_else(|e| e.into_inner()) = None;
}
