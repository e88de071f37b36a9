//! Graph capture as CANN models it (`aclmdlRICaptureBegin` … `aclmdlRICaptureEnd`,
//! `aclmdlRIExecuteAsync`, `aclmdlRIDestroy`, task groups and their updates).
//!
//! - **Recorded, not run.** While a stream captures, every task queued on it (an aclnn launch,
//!   an asynchronous device-to-device copy or memset, a collective) is appended to the
//!   capture's graph with its argument bindings (the job the first stage built, the device
//!   ranges it touches) instead of being queued: nothing runs, nothing is in flight.
//! - **Replayed in order, as one launch.** `aclmdlRIExecuteAsync` queues **one** task on its
//!   stream that runs the recorded tasks in the order they were recorded; the graph stays
//!   and replays again. A replay reads and writes the device memory the tasks were recorded
//!   with: its inputs are written into those buffers before the replay.
//! - **Refused during a capture** (status [`ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT`], and the
//!   capture is invalidated: its `aclmdlRICaptureEnd` fails with
//!   [`ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED`] naming the first refused call): synchronising
//!   the capturing stream (any mode); and, from every thread in the global mode or from the
//!   capturing thread in the thread-local mode, any `aclrtSynchronizeStream`, a synchronous
//!   `aclrtMemcpy` (a host read or write that would need the device idle) and `aclrtMalloc`
//!   (memory must come from what was reserved before the capture — a caching pool's segments,
//!   the runtime's workspace). An asynchronous copy from or to host memory on the capturing
//!   stream is refused in every mode: the graph would read or write that host buffer at every
//!   replay. The relaxed mode refuses nothing else.
//! - **Task groups.** `aclmdlRICaptureTaskGrpBegin` / `End` mark a range of the recorded tasks;
//!   between `aclmdlRICaptureTaskUpdateBegin(stream, group)` and `…UpdateEnd(stream)` the tasks
//!   queued on `stream` are recorded as the group's replacements (as many as it has, in
//!   order); the replacement itself is queued on `stream`, so replays queued before it run
//!   the old tasks and later ones the new.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use burn_ascend_cann::acl::ffi::*;

use super::streams::Span;
use super::{catch, guard, lock, next_id, Job, SimErr, SimResult};
use crate::cost::OpCost;

/// A task recorded into a graph: what the stream would have run.
pub(crate) struct Recorded {
    what: &'static str,
    spans: Vec<Span>,
    job: Job,
    compute: bool,
    /// An attention launch's `(query, key)` lengths per sequence, as its first stage decoded
    /// them (what its job attends).
    attended: Option<Vec<(usize, usize)>>,
    /// Its modelled cost (with the cost model on): counted when a replay runs it, not when
    /// it is recorded.
    cost: Option<OpCost>,
}

thread_local! {
    /// The attention lengths of the launch this thread is about to record
    /// ([`note_next_attended`]), taken by the next [`intercept`].
    static NEXT_ATTENDED: std::cell::RefCell<Option<Vec<(usize, usize)>>> =
        const { std::cell::RefCell::new(None) };
    /// The modelled cost of the task this thread is about to record ([`note_next_cost`]).
    static NEXT_COST: std::cell::Cell<Option<OpCost>> = const { std::cell::Cell::new(None) };
}

/// Attaches the modelled `cost` to the task the calling thread records next (a launch, copy or
/// memset on a recording stream, enqueued right after).
pub(crate) fn note_next_cost(cost: Option<OpCost>) {
    let _ = NEXT_COST.try_with(|c| c.set(cost));
}

/// Attaches `attended` to the task the calling thread records next (an aclnn launch on a
/// recording stream, from `state::launch`, which enqueues it right after).
pub(crate) fn note_next_attended(attended: Option<Vec<(usize, usize)>>) {
    let _ = NEXT_ATTENDED.try_with(|a| *a.borrow_mut() = attended);
}

/// A captured graph: its tasks in recording order (replaced in place by group updates).
struct Graph {
    tasks: Mutex<Vec<Recorded>>,
}

/// An active capture on one stream.
struct Capture {
    mode: CaptureMode,
    thread: ThreadId,
    graph: Arc<Graph>,
    /// The first refused call: `aclmdlRICaptureEnd` then fails with it.
    invalid: Option<String>,
    /// Where the open task group starts (an index of the graph's tasks).
    group_start: Option<usize>,
}

/// An active task-group update on one stream.
struct Update {
    graph: Arc<Graph>,
    range: std::ops::Range<usize>,
    tasks: Vec<Recorded>,
}

/// Active captures by stream handle value.
static CAPTURES: Mutex<Option<HashMap<usize, Capture>>> = Mutex::new(None);
/// Active task-group updates by stream handle value.
static UPDATES: Mutex<Option<HashMap<usize, Update>>> = Mutex::new(None);
/// Captured graphs by `aclmdlRI` handle value.
static GRAPHS: Mutex<Option<HashMap<usize, Arc<Graph>>>> = Mutex::new(None);
/// Task groups by `aclrtTaskGrp` handle value: their graph and range of tasks.
type GroupEntry = (Arc<Graph>, std::ops::Range<usize>);
static GROUPS: Mutex<Option<HashMap<usize, GroupEntry>>> = Mutex::new(None);

fn refusal(msg: String) -> SimErr {
    SimErr(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, msg)
}

/// Records the task instead of queueing it when `stream` captures or updates a task group;
/// otherwise hands it back.
pub(crate) fn intercept(
    stream: usize,
    what: &'static str,
    spans: Vec<Span>,
    job: Job,
    compute: bool,
) -> Option<(Vec<Span>, Job)> {
    let attended = NEXT_ATTENDED
        .try_with(|a| a.borrow_mut().take())
        .ok()
        .flatten();
    let cost = NEXT_COST.try_with(|c| c.take()).ok().flatten();
    let task = Recorded {
        what,
        spans,
        job,
        compute,
        attended,
        cost,
    };
    if let Some(c) = lock(&CAPTURES).as_mut().and_then(|m| m.get_mut(&stream)) {
        lock(&c.graph.tasks).push(task);
        return None;
    }
    if let Some(u) = lock(&UPDATES).as_mut().and_then(|m| m.get_mut(&stream)) {
        u.tasks.push(task);
        return None;
    }
    Some((task.spans, task.job))
}

/// Whether `stream`'s tasks are recorded (a capture or a task-group update is active).
pub(crate) fn recording(stream: usize) -> bool {
    lock(&CAPTURES)
        .as_ref()
        .is_some_and(|m| m.contains_key(&stream))
        || lock(&UPDATES)
            .as_ref()
            .is_some_and(|m| m.contains_key(&stream))
}

/// Refuses `call` (an unsafe call: a synchronisation, a synchronous copy, an allocation) when
/// a capture forbids it to the calling thread, invalidating that capture; `stream`: the stream
/// the call waits for, refused whenever it captures.
pub(crate) fn check_unsafe_call(call: &str, stream: Option<usize>) -> SimResult<()> {
    let me = std::thread::current().id();
    let mut g = lock(&CAPTURES);
    let Some(m) = g.as_mut() else { return Ok(()) };
    for (&id, c) in m.iter_mut() {
        let forbids = Some(id) == stream
            || match c.mode {
                CaptureMode::Global => true,
                CaptureMode::ThreadLocal => c.thread == me,
                CaptureMode::Relaxed => false,
            };
        if forbids {
            let msg = format!(
                "{call} during the graph capture of stream {id:#x} ({:?} mode): the stream's \
                 tasks are recorded, not run, so the host cannot wait for them, read their \
                 results or allocate device memory (reserve memory before the capture; read \
                 results after replaying the graph)",
                c.mode
            );
            c.invalid.get_or_insert_with(|| msg.clone());
            return Err(refusal(msg));
        }
    }
    Ok(())
}

/// Refuses an asynchronous copy between host memory and the device on a recording stream.
pub(crate) fn check_host_copy(call: &str, stream: usize) -> SimResult<()> {
    if !recording(stream) {
        return Ok(());
    }
    let msg = format!(
        "{call} with host memory on stream {stream:#x}, which is recording a graph: every replay \
         would read or write that host buffer again (write a graph's inputs into device \
         buffers before replaying it)"
    );
    if let Some(c) = lock(&CAPTURES).as_mut().and_then(|m| m.get_mut(&stream)) {
        c.invalid.get_or_insert_with(|| msg.clone());
    }
    Err(refusal(msg))
}

fn stream_arg(call: &str, stream: AclrtStream) -> SimResult<usize> {
    if super::stream_ok(stream) {
        Ok(stream as usize)
    } else {
        Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("{call}: {stream:p} is not a live stream"),
        ))
    }
}

runtime_fn!(capture_begin, |p| {
    let mode = p.mode;
    guard(|| {
        const CALL: &str = names::capture_begin;
        let id = stream_arg(CALL, p.stream)?;
        let Some(mode) = CaptureMode::from_raw(mode) else {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: mode {mode} is not an aclmdlRICaptureMode (0, 1 or 2)"),
            ));
        };
        if recording(id) {
            return Err(SimErr(
                ACL_ERROR_RT_STREAM_CAPTURED,
                format!("{CALL}: stream {id:#x} is already capturing or updating a task group"),
            ));
        }
        lock(&CAPTURES).get_or_insert_with(HashMap::new).insert(
            id,
            Capture {
                mode,
                thread: std::thread::current().id(),
                graph: Arc::new(Graph {
                    tasks: Mutex::new(Vec::new()),
                }),
                invalid: None,
                group_start: None,
            },
        );
        Ok(())
    })
});

runtime_fn!(capture_get_info, |p| {
    guard(|| {
        let id = stream_arg(names::capture_get_info, p.stream)?;
        if p.status.is_null() {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{}: status is null", names::capture_get_info),
            ));
        }
        let st = match lock(&CAPTURES).as_ref().and_then(|m| m.get(&id)) {
            None => ACL_MODEL_RI_CAPTURE_STATUS_NONE,
            Some(c) if c.invalid.is_some() => ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
            Some(_) => ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
        };
        // SAFETY: non-null out-pointers per the prototype (`modelRI` may be null: not asked).
        unsafe {
            *p.status = st;
            if !p.model_ri.is_null() {
                *p.model_ri = std::ptr::null_mut();
            }
        }
        Ok(())
    })
});

runtime_fn!(capture_end, |p| {
    guard(|| {
        const CALL: &str = names::capture_end;
        let id = stream_arg(CALL, p.stream)?;
        if p.model_ri.is_null() {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: modelRI is null"),
            ));
        }
        let Some(c) = lock(&CAPTURES).as_mut().and_then(|m| m.remove(&id)) else {
            return Err(SimErr(
                ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                format!("{CALL}: stream {id:#x} is not capturing"),
            ));
        };
        if let Some(why) = c.invalid {
            return Err(SimErr(
                ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                format!("{CALL}: the capture was invalidated by a refused call: {why}"),
            ));
        }
        if c.group_start.is_some() {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: a task group is still open (call aclmdlRICaptureTaskGrpEnd)"),
            ));
        }
        let ri = next_id();
        lock(&GRAPHS)
            .get_or_insert_with(HashMap::new)
            .insert(ri, c.graph);
        // SAFETY: non-null out-pointer per the prototype.
        unsafe { *p.model_ri = ri as AclmdlRI };
        Ok(())
    })
});

runtime_fn!(ri_execute_async, |p| {
    let model_ri = p.model_ri;
    guard(|| {
        const CALL: &str = names::ri_execute_async;
        let Some(graph) = lock(&GRAPHS)
            .as_ref()
            .and_then(|m| m.get(&(model_ri as usize)).cloned())
        else {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: {model_ri:p} is not a live model runtime instance"),
            ));
        };
        let (spans, costs): (Vec<Span>, Vec<_>) = {
            let tasks = lock(&graph.tasks);
            let spans = tasks.iter().flat_map(|t| t.spans.iter().copied()).collect();
            let costs: Vec<_> = tasks
                .iter()
                .filter_map(|t| Some((t.what, t.cost?)))
                .collect();
            (spans, costs)
        };
        let job: Job = Box::new(move || {
            let mut tasks = lock(&graph.tasks);
            for t in tasks.iter_mut().filter(|t| t.compute) {
                let what = t.what;
                catch(|| (t.job)()).map_err(|SimErr(st, msg)| {
                    SimErr(st, format!("{CALL}: recorded task {what}: {msg}"))
                })?;
            }
            Ok(())
        });
        super::streams::enqueue(p.stream, CALL, spans, job, super::compute_enabled())?;
        super::note_launch(CALL);
        if crate::cost::cost_model_enabled() {
            // The replay is the host's one launch; the device runs every recorded task.
            crate::cost::record(CALL, OpCost::default());
            for (what, cost) in costs {
                crate::cost::record_replayed(what, cost);
            }
        }
        Ok(())
    })
});

runtime_fn!(ri_destroy, |p| {
    let model_ri = p.model_ri;
    guard(|| {
        let Some(graph) = lock(&GRAPHS)
            .as_mut()
            .and_then(|m| m.remove(&(model_ri as usize)))
        else {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!(
                    "{}: {model_ri:p} is not a live model runtime instance",
                    names::ri_destroy
                ),
            ));
        };
        if let Some(m) = lock(&GROUPS).as_mut() {
            m.retain(|_, (g, _)| !Arc::ptr_eq(g, &graph));
        }
        Ok(())
    })
});

runtime_fn!(task_grp_begin, |p| {
    guard(|| {
        const CALL: &str = names::task_grp_begin;
        let id = stream_arg(CALL, p.stream)?;
        let mut g = lock(&CAPTURES);
        let Some(c) = g.as_mut().and_then(|m| m.get_mut(&id)) else {
            return Err(SimErr(
                ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                format!("{CALL}: stream {id:#x} is not capturing"),
            ));
        };
        if c.group_start.is_some() {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: a task group is already open on stream {id:#x}"),
            ));
        }
        c.group_start = Some(lock(&c.graph.tasks).len());
        Ok(())
    })
});

runtime_fn!(task_grp_end, |p| {
    guard(|| {
        const CALL: &str = names::task_grp_end;
        let id = stream_arg(CALL, p.stream)?;
        if p.handle.is_null() {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: handle is null"),
            ));
        }
        let mut g = lock(&CAPTURES);
        let Some(c) = g.as_mut().and_then(|m| m.get_mut(&id)) else {
            return Err(SimErr(
                ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                format!("{CALL}: stream {id:#x} is not capturing"),
            ));
        };
        let Some(start) = c.group_start.take() else {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: no task group is open (call aclmdlRICaptureTaskGrpBegin)"),
            ));
        };
        let end = lock(&c.graph.tasks).len();
        let h = next_id();
        lock(&GROUPS)
            .get_or_insert_with(HashMap::new)
            .insert(h, (c.graph.clone(), start..end));
        // SAFETY: non-null out-pointer per the prototype.
        unsafe { *p.handle = h as AclrtTaskGrp };
        Ok(())
    })
});

runtime_fn!(task_update_begin, |p| {
    let handle = p.handle;
    guard(|| {
        const CALL: &str = names::task_update_begin;
        let id = stream_arg(CALL, p.stream)?;
        if recording(id) {
            return Err(SimErr(
                ACL_ERROR_RT_STREAM_CAPTURED,
                format!("{CALL}: stream {id:#x} is capturing or already updating"),
            ));
        }
        let Some((graph, range)) = lock(&GROUPS)
            .as_ref()
            .and_then(|m| m.get(&(handle as usize)).cloned())
        else {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: {handle:p} is not a task group of a live graph"),
            ));
        };
        lock(&UPDATES).get_or_insert_with(HashMap::new).insert(
            id,
            Update {
                graph,
                range,
                tasks: Vec::new(),
            },
        );
        Ok(())
    })
});

runtime_fn!(task_update_end, |p| {
    guard(|| {
        const CALL: &str = names::task_update_end;
        let id = stream_arg(CALL, p.stream)?;
        let Some(u) = lock(&UPDATES).as_mut().and_then(|m| m.remove(&id)) else {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("{CALL}: no task-group update is active on stream {id:#x}"),
            ));
        };
        if u.tasks.len() != u.range.len() {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!(
                    "{CALL}: the group has {} tasks but {} were issued to replace them",
                    u.range.len(),
                    u.tasks.len()
                ),
            ));
        }
        // Stream-ordered: replays queued before this run the old tasks.
        let mut pending = Some((u.graph, u.range, u.tasks));
        let job: Job = Box::new(move || {
            if let Some((graph, range, new)) = pending.take() {
                let mut tasks = lock(&graph.tasks);
                for (slot, t) in tasks[range].iter_mut().zip(new) {
                    *slot = t;
                }
            }
            Ok(())
        });
        super::streams::enqueue(p.stream, CALL, Vec::new(), job, true)
    })
});

/// Recorded tasks of the graph `model_ri`, by name, in order (for tests).
pub fn graph_tasks(model_ri: AclmdlRI) -> Option<Vec<&'static str>> {
    let g = lock(&GRAPHS).as_ref()?.get(&(model_ri as usize))?.clone();
    let names = lock(&g.tasks).iter().map(|t| t.what).collect();
    Some(names)
}

/// The attention tasks of the graph `model_ri` as a replay queued now would run them (group
/// updates applied once the stream reached them): each one's `(query length, key length)`
/// per sequence, in recording order — a simulation facility for tests (which keys a replayed
/// paged decode reads: FIA's `actualSeqLengthsKv`, baked into each recorded call).
pub fn graph_attention(model_ri: AclmdlRI) -> Option<Vec<Vec<(usize, usize)>>> {
    let g = lock(&GRAPHS).as_ref()?.get(&(model_ri as usize))?.clone();
    let seqs = lock(&g.tasks)
        .iter()
        .filter_map(|t| t.attended.clone())
        .collect();
    Some(seqs)
}
