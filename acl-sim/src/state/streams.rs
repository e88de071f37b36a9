//! Simulated streams, **asynchronous** as an NPU's are: each stream is a worker thread that
//! runs its tasks (aclnn launches, `aclrtMemcpyAsync` / `aclrtMemsetAsync`, collectives) in
//! the order they were put on it, later than the call that queued them — after an optional
//! delay per task ([`set_stream_delay`], `$BURN_ASCEND_SIM_STREAM_DELAY_US`), so a caller that
//! forgets a wait reads stale memory here as it would on hardware.
//!
//! Reading stale memory is not left to chance: the simulation also **detects** every host
//! access that a missing wait would make racy, whether or not the worker has got there yet.
//! A task is *in flight* from the call that queues it until its stream is synchronised
//! (`aclrtSynchronizeStream`: only then may the host assume it finished), and it touches the
//! device ranges of every `aclTensor` its first stage decoded, its workspace, and a memcpy's
//! source and destination. Then:
//! - a synchronous `aclrtMemcpy` whose device range overlaps an in-flight task fails
//!   ([`SIM_HAZARD_STATUS`], naming the task and its stream): the host would read a result not
//!   yet written, or overwrite an input not yet read;
//! - `aclrtFree` / `aclrtFreeHost` of memory an in-flight task touches does not free it: the
//!   memory is quarantined until the stream is synchronised, and that synchronisation fails
//!   with the hazard (the call itself returns success, as CANN's would, and a `Drop` cannot
//!   report it anyway). CANN documents no implicit wait in `aclrtFree`; the simulation refuses
//!   rather than guess;
//! - a task queued on one stream that touches memory in flight on **another** stream fails at
//!   once: nothing orders the two streams (no events are modelled), so that is a race.
//!
//! A task that fails while running (an index out of range, a kernel panic) makes the stream's
//! next synchronisation fail with its status and message, as a device fault surfaces on an
//! NPU; the tasks queued after it still run.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use burn_ascend_cann::acl::ffi::*;

use super::{catch, lock, next_id, Job, SimErr, SimResult};

/// The status of a detected hazard: 507899, `ACL_ERROR_RT_INTERNAL_ERROR` of CANN's
/// `rt_error_codes.h` (what a corrupted task usually surfaces as). Its message always starts
/// with `hazard:`.
pub const SIM_HAZARD_STATUS: AclStatus = 507_899;

/// A device (or pinned host) byte range `[start, end)`.
pub(crate) type Span = (usize, usize);

fn overlaps(a: Span, b: Span) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// A queued task's record while it is in flight.
struct InFlight {
    what: &'static str,
    spans: Vec<Span>,
}

struct Task {
    what: &'static str,
    job: Job,
    compute: bool,
    delay: Duration,
}

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    /// A task is running on the worker.
    running: bool,
    /// The worker should exit once the queue is empty.
    closing: bool,
    /// The first failure since the last synchronisation: reported by it.
    sticky: Option<SimErr>,
    /// Tasks queued since the last synchronisation.
    in_flight: Vec<InFlight>,
    /// Allocations freed while in flight (device or host, by start address): freed for real
    /// at the next synchronisation.
    quarantine: Vec<(usize, bool)>,
}

pub(crate) struct SimStream {
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// Live streams by handle value (0: the default stream, used for a null `aclrtStream`).
static STREAMS: Mutex<Option<HashMap<usize, Arc<SimStream>>>> = Mutex::new(None);

/// Nanoseconds a worker waits before running each task.
static DELAY_NS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Delays every task of every stream by `delay` before it runs (0: as soon as the worker gets
/// to it). The initial value is `$BURN_ASCEND_SIM_STREAM_DELAY_US` (µs), else 0.
pub fn set_stream_delay(delay: Duration) {
    DELAY_NS.store(
        delay.as_nanos().min(u64::MAX as u128 - 1) as u64,
        Ordering::Relaxed,
    );
}

fn stream_delay() -> Duration {
    let mut ns = DELAY_NS.load(Ordering::Relaxed);
    if ns == u64::MAX {
        ns = std::env::var("BURN_ASCEND_SIM_STREAM_DELAY_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(0, |us| us.saturating_mul(1000));
        DELAY_NS.store(ns, Ordering::Relaxed);
    }
    Duration::from_nanos(ns)
}

/// Time the workers spent running each kind of task: `(calls, time)` by task name.
static DEVICE_TIME: Mutex<Option<HashMap<&'static str, (u64, Duration)>>> = Mutex::new(None);

fn note_device_time(what: &'static str, t: Duration) {
    let mut g = lock(&DEVICE_TIME);
    let e = g.get_or_insert_with(HashMap::new).entry(what).or_default();
    e.0 += 1;
    e.1 += t;
}

/// The simulated device's time per task name (an aclnn op's C name, `aclrtMemcpyAsync`, …):
/// `(name, tasks run, time the stream workers spent running them)`, since the last
/// [`reset_device_time`]. The simulation's stand-in for a device profile: CPU time of the
/// simulated kernels, not NPU time.
pub fn device_time() -> Vec<(&'static str, u64, Duration)> {
    let mut v: Vec<_> = lock(&DEVICE_TIME)
        .iter()
        .flatten()
        .map(|(k, &(n, d))| (*k, n, d))
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.2));
    v
}

/// Clears [`device_time`].
pub fn reset_device_time() {
    *lock(&DEVICE_TIME) = None;
}

fn spawn(id: usize) -> Arc<SimStream> {
    let s = Arc::new(SimStream {
        queue: Mutex::new(Queue::default()),
        changed: Condvar::new(),
    });
    let w = s.clone();
    std::thread::Builder::new()
        .name(format!("acl-sim-stream-{id:#x}"))
        .spawn(move || worker(&w))
        .expect("spawn a simulated stream's worker thread");
    s
}

thread_local! {
    /// This thread is a stream's worker (the only place a simulated kernel runs).
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is a stream's worker, i.e. runs a queued task: a tensor's data
/// may be read or written only there (`SimTensor::read` / `write`), never in a first stage.
pub(crate) fn on_worker() -> bool {
    ON_WORKER.with(std::cell::Cell::get)
}

fn worker(s: &SimStream) {
    ON_WORKER.with(|w| w.set(true));
    loop {
        let task = {
            let mut q = lock(&s.queue);
            loop {
                if let Some(t) = q.tasks.pop_front() {
                    q.running = true;
                    break t;
                }
                if q.closing {
                    return;
                }
                q = s.changed.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        if !task.delay.is_zero() {
            std::thread::sleep(task.delay);
        }
        let ran = std::time::Instant::now();
        let result = if task.compute {
            catch(task.job)
        } else {
            Ok(())
        };
        note_device_time(task.what, ran.elapsed());
        let mut q = lock(&s.queue);
        q.running = false;
        if let Err(SimErr(st, msg)) = result {
            if q.sticky.is_none() {
                let msg = if msg.starts_with(task.what) {
                    msg
                } else {
                    format!("{}: {msg}", task.what)
                };
                q.sticky = Some(SimErr(st, format!("a task failed on the stream: {msg}")));
            }
        }
        s.changed.notify_all();
    }
}

/// Creates a stream (its worker starts at once); returns its handle value.
pub(crate) fn create() -> usize {
    let id = next_id();
    let s = spawn(id);
    lock(&STREAMS)
        .get_or_insert_with(HashMap::new)
        .insert(id, s);
    id
}

/// The stream behind a handle (null: the default stream, created on first use).
pub(crate) fn get(stream: AclrtStream) -> Option<Arc<SimStream>> {
    let id = stream as usize;
    let mut g = lock(&STREAMS);
    let m = g.get_or_insert_with(HashMap::new);
    if id == 0 {
        return Some(m.entry(0).or_insert_with(|| spawn(0)).clone());
    }
    m.get(&id).cloned()
}

pub(crate) fn live_count() -> usize {
    lock(&STREAMS)
        .as_ref()
        .map_or(0, |m| m.keys().filter(|&&k| k != 0).count())
}

/// Waits for the stream's tasks, then closes its worker.
pub(crate) fn destroy(stream: AclrtStream) -> SimResult<()> {
    let removed = lock(&STREAMS)
        .as_mut()
        .and_then(|m| m.remove(&(stream as usize)));
    let Some(s) = removed.filter(|_| !stream.is_null()) else {
        return Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("aclrtDestroyStream: {stream:p} is not a live stream"),
        ));
    };
    // aclrtDestroyStream waits for the stream's tasks; their failures are dropped with it.
    let _ = drain(&s);
    lock(&s.queue).closing = true;
    s.changed.notify_all();
    Ok(())
}

/// Waits until the stream has run everything queued, ends the in-flight records, frees the
/// quarantined memory and returns the first failure since the last synchronisation.
fn drain(s: &SimStream) -> SimResult<()> {
    let (sticky, quarantine) = {
        let mut q = lock(&s.queue);
        while !q.tasks.is_empty() || q.running {
            q = s.changed.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        q.in_flight.clear();
        (q.sticky.take(), std::mem::take(&mut q.quarantine))
    };
    for (addr, host) in quarantine {
        let _ = if host {
            super::memory::free_host_now(addr)
        } else {
            super::memory::free_now(addr)
        };
    }
    sticky.map_or(Ok(()), Err)
}

/// `aclrtSynchronizeStream`.
pub(crate) fn synchronize(stream: AclrtStream) -> SimResult<()> {
    let Some(s) = get(stream) else {
        return Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("aclrtSynchronizeStream: {stream:p} is not a live stream"),
        ));
    };
    drain(&s)
}

/// Queues `job` on `stream` as the task `what`, touching `spans`. Fails at once (nothing
/// queued) when a span is in flight on another stream.
pub(crate) fn enqueue(
    stream: AclrtStream,
    what: &'static str,
    spans: Vec<Span>,
    job: Job,
    compute: bool,
) -> SimResult<()> {
    let Some(s) = get(stream) else {
        return Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("{what}: {stream:p} is not a live stream"),
        ));
    };
    // A capturing stream records the task instead (`super::capture`).
    let Some((spans, job)) = super::capture::intercept(stream as usize, what, spans, job, compute)
    else {
        return Ok(());
    };
    if let Some((other, task)) = in_flight_elsewhere(&s, &spans) {
        return Err(SimErr(
            SIM_HAZARD_STATUS,
            format!(
                "hazard: {what} on stream {stream:p} touches memory that {task} still uses on stream {other:#x}, \
                 with nothing ordering the two streams (synchronise the other stream first)"
            ),
        ));
    }
    let mut q = lock(&s.queue);
    q.in_flight.push(InFlight { what, spans });
    q.tasks.push_back(Task {
        what,
        job,
        compute,
        delay: stream_delay(),
    });
    drop(q);
    s.changed.notify_all();
    Ok(())
}

fn in_flight_elsewhere(this: &Arc<SimStream>, spans: &[Span]) -> Option<(usize, &'static str)> {
    let streams: Vec<(usize, Arc<SimStream>)> = lock(&STREAMS)
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
        .unwrap_or_default();
    for (id, s) in streams {
        if Arc::ptr_eq(&s, this) {
            continue;
        }
        let q = lock(&s.queue);
        for f in &q.in_flight {
            if f.spans
                .iter()
                .any(|a| spans.iter().any(|b| overlaps(*a, *b)))
            {
                return Some((id, f.what));
            }
        }
    }
    None
}

/// The in-flight task (stream, name) touching `span`, if any.
pub(crate) fn in_flight(span: Span) -> Option<(usize, &'static str)> {
    let streams: Vec<(usize, Arc<SimStream>)> = lock(&STREAMS)
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
        .unwrap_or_default();
    for (id, s) in streams {
        let q = lock(&s.queue);
        // The latest such task: the one the access races last.
        if let Some(f) = q
            .in_flight
            .iter()
            .rev()
            .find(|f| f.spans.iter().any(|a| overlaps(*a, span)))
        {
            return Some((id, f.what));
        }
    }
    None
}

/// The hazard error of a synchronous host access `call` to `span`, if a task in flight
/// touches it.
pub(crate) fn check_host_access(span: Span, call: &str) -> SimResult<()> {
    match in_flight(span) {
        None => Ok(()),
        Some((stream, task)) => Err(SimErr(
            SIM_HAZARD_STATUS,
            format!(
                "hazard: {call} accesses {} bytes at {:#x} that {task}, queued on stream {stream:#x}, \
                 may still use: synchronise the stream first (on an NPU the host would see a stale \
                 or half-written buffer)",
                span.1 - span.0,
                span.0
            ),
        )),
    }
}

/// Defers the free of the allocation at `addr` (`host`: pinned host memory) that an in-flight
/// task touches: quarantined until that task's stream is synchronised, which then fails with
/// the hazard. Returns `false` (the caller frees now) when no task touches it.
pub(crate) fn quarantine_if_in_flight(addr: usize, len: usize, host: bool, call: &str) -> bool {
    let span = (addr, addr + len.max(1));
    let Some((id, task)) = in_flight(span) else {
        return false;
    };
    let Some(s) = lock(&STREAMS).as_ref().and_then(|m| m.get(&id).cloned()) else {
        return false;
    };
    let mut q = lock(&s.queue);
    q.quarantine.push((addr, host));
    if q.sticky.is_none() {
        q.sticky = Some(SimErr(
            SIM_HAZARD_STATUS,
            format!(
                "hazard: {call} freed {len} bytes at {addr:#x} while {task}, queued on this stream, \
                 could still use them (free after synchronising; the simulation kept the memory \
                 until this synchronisation)"
            ),
        ));
    }
    true
}
