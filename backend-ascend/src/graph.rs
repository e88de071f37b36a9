//! Captured graphs on an Ascend device (ACL graph capture, `aclmdlRI…`): [`capture`] runs a
//! closure of ordinary backend ops with the device's stream in capture mode — every launch,
//! device copy and memset it queues is **recorded, not run** — and returns a
//! [`CapturedGraph`] whose [`CapturedGraph::replay`] queues them all again, in order, as
//! **one** launch (`aclmdlRIExecuteAsync`).
//!
//! A replay reads and writes the very buffers the capture recorded, so a graph has fixed
//! inputs and outputs: the tensors the closure read (created before the capture) and the ones
//! it returned. Their contents change between replays by [`write_in_place`], a stream-ordered
//! upload **before** the replay (allowed: it is not inside a capture).
//!
//! The device's stream is the capturing thread's while the capture lasts: another thread's op
//! on the same device waits until the capture ends (so nothing of it is recorded into the
//! graph). An op the closure hands to another thread on the same device therefore waits for
//! the capture too — queue everything of a capture from the thread that captures. The wait
//! is where an op asks for the device's runtime: an op of another thread already past that
//! point when the capture begins is not held back, and CANN's rules then apply to it (an
//! upload is refused, a launch recorded into the graph) — keep other threads' work off a
//! device while it captures.
//!
//! Memory: a capture may not allocate from the device (`aclrtMalloc` is refused), so every
//! block the closure's ops take comes from the pool's free blocks — reserve them first
//! ([`crate::memory::reserve_small`]) — and the workspace must be big enough already
//! (`Runtime::reserve_workspace`). A block released during the capture serves the capture's
//! later requests (the recorded tasks run in order on one stream, at every replay), as a
//! CUDA graph's private pool does: the default model's captured training step holds 228.5 MiB
//! with that reuse, 364.4 MiB without (its eager step peaks at 88.8 MiB). The pool hands none
//! of the blocks the capture used to anyone else while the graph lives (the replay writes
//! them), and takes them back when it is dropped.
//!
//! Task groups: [`task_group`] inside a capture marks the launches of its closure as a group
//! whose host attributes (a learning rate, which `aclnnApplyAdamWV2` takes as a host float)
//! [`update_task_group`] replaces between replays by issuing the same calls again with the new
//! values (`aclmdlRICaptureTaskUpdateBegin` / `End`): recorded into the group, not run, so the
//! step stays one launch.
//!
//! What CANN refuses during a capture is refused here with a [`GraphError::Refused`] naming
//! the call: a synchronisation or read of device memory (`Backend::sync`, `into_data`), an
//! upload from host memory (`Tensor::from_data` inside the closure), an allocation beyond the
//! reserved blocks, a workspace beyond the reserved one. Backend ops report device failures
//! by panicking (Burn's ops return no `Result`); the capture catches that panic and returns it
//! as the error, with the stream out of capture mode and nothing recorded kept.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use burn_ascend_cann::acl::{is_capture_refusal, AclError, CaptureMode, ModelRi, TaskGroup};

use crate::device::{try_runtime, AscendDevice};
use crate::tensor::AscendTensor;

/// Why a capture, replay or input write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphError {
    /// The device's CANN has no graph capture (or the device cannot capture).
    Unsupported(String),
    /// A call the capture rules forbid was made inside the capture (status 107030 / 507903).
    Refused(String),
    /// Anything else (a device failure, a bad input write).
    Failed(String),
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported(m) => write!(f, "unsupported: {m}"),
            Self::Refused(m) => write!(f, "graph capture refused: {m}"),
            Self::Failed(m) => write!(f, "graph: {m}"),
        }
    }
}

impl std::error::Error for GraphError {}

fn from_acl(e: AclError) -> GraphError {
    match e {
        AclError::Unsupported(m) => GraphError::Unsupported(m),
        e if is_capture_refusal(&e) => GraphError::Refused(e.to_string()),
        e => GraphError::Failed(e.to_string()),
    }
}

/// A recorded graph of one device, replayable until dropped.
pub struct CapturedGraph {
    device: AscendDevice,
    id: u64,
    ri: ModelRi,
    tasks: usize,
}

impl fmt::Debug for CapturedGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapturedGraph")
            .field("device", &self.device)
            .field("id", &self.id)
            .finish()
    }
}

static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Whether this thread runs a capture's closure (its panics become the capture's error).
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
static QUIET_HOOK: std::sync::Once = std::sync::Once::new();

/// A backend op's failure inside a capture panics (Burn's ops return no `Result`) and
/// [`capture`] returns it as its error: the message is not printed as well, by a panic hook
/// that skips the threads running a capture's closure and hands every other panic to the hook
/// that was there (a capture refused for want of reserved memory and retried with more would
/// otherwise print a panic per attempt).
fn quiet_panics_inside_captures() {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.try_with(std::cell::Cell::get).unwrap_or(false) {
                previous(info);
            }
        }));
    });
}

/// Captures the ops `f` queues on `device` into a graph; returns it with `f`'s result (the
/// graph's outputs: keep them, the replay writes them). `f` must not read device memory,
/// upload host data or allocate beyond the reserved blocks (see the module docs).
pub fn capture<R>(
    device: &AscendDevice,
    f: impl FnOnce() -> R,
) -> Result<(CapturedGraph, R), GraphError> {
    let rt = try_runtime(device).map_err(GraphError::Failed)?;
    if !rt.graph_capture_available() {
        return Err(GraphError::Unsupported(format!(
            "graph capture on {device}: this CANN has no aclmdlRICaptureBegin / \
             aclmdlRICaptureEnd / aclmdlRIExecuteAsync / aclmdlRIDestroy"
        )));
    }
    // The stream is this thread's until the capture ends: other threads' ops on the device
    // wait (they would be recorded into this graph otherwise).
    let _claim = crate::device::claim_for_capture(device).map_err(GraphError::Refused)?;
    // Work queued before the capture is not part of it; wait for it so that the pool's free
    // blocks are free on the device too.
    rt.synchronize().map_err(from_acl)?;
    let id = NEXT_GRAPH.fetch_add(1, Ordering::Relaxed);
    // Thread-local: other threads of the process (other devices, tests) may still allocate.
    rt.capture_begin(CaptureMode::ThreadLocal)
        .map_err(from_acl)?;
    crate::memory::begin_graph(device, id);
    quiet_panics_inside_captures();
    let _ = QUIET.try_with(|q| q.set(true));
    let out = catch_unwind(AssertUnwindSafe(f));
    let _ = QUIET.try_with(|q| q.set(false));
    crate::memory::end_capture(device);
    let ended = rt.capture_end();
    match (out, ended) {
        (Ok(out), Ok(ri)) => {
            let tasks = tasks_of(&ri);
            Ok((
                CapturedGraph {
                    device: *device,
                    id,
                    ri,
                    tasks,
                },
                out,
            ))
        }
        (Ok(_), Err(e)) => {
            crate::memory::release_graph(device, id);
            Err(from_acl(e))
        }
        (Err(panic), ended) => {
            crate::memory::release_graph(device, id);
            drop(ended);
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the captured closure panicked".into());
            if msg.contains("107030") || msg.contains("refused during graph capture") {
                Err(GraphError::Refused(msg))
            } else {
                Err(GraphError::Failed(msg))
            }
        }
    }
}

#[cfg(feature = "sim")]
fn tasks_of(ri: &ModelRi) -> usize {
    burn_ascend_acl_sim::graph_tasks(ri.as_ptr()).map_or(0, |t| t.len())
}

#[cfg(not(feature = "sim"))]
fn tasks_of(_ri: &ModelRi) -> usize {
    0
}

impl CapturedGraph {
    /// Queues the recorded tasks on the device's stream, in order, as one launch; the host
    /// does not wait.
    pub fn replay(&self) -> Result<(), GraphError> {
        let rt = try_runtime(&self.device).map_err(GraphError::Failed)?;
        self.ri.execute(&rt).map_err(from_acl)
    }

    /// The device.
    pub fn device(&self) -> AscendDevice {
        self.device
    }

    /// How many tasks were recorded (known on the simulation; 0 on CANN, which does not say).
    pub fn recorded_tasks(&self) -> usize {
        self.tasks
    }

    /// The recorded attention launches as the next replay runs them (task-group updates
    /// queued so far included once the stream reached them): each one's `(query length, key
    /// length)` per sequence. A simulation facility (`burn_ascend_acl_sim::graph_attention`);
    /// `None` on CANN, which does not say.
    pub fn recorded_attention(&self) -> Option<Vec<Vec<(usize, usize)>>> {
        #[cfg(feature = "sim")]
        {
            burn_ascend_acl_sim::graph_attention(self.ri.as_ptr())
        }
        #[cfg(not(feature = "sim"))]
        {
            None
        }
    }
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        crate::memory::release_graph(&self.device, self.id);
    }
}

/// Grows `device`'s cached aclnn workspace to at least `bytes` now, so that the ops a capture
/// records find it big enough (growing it inside a capture is refused).
pub fn reserve_workspace(device: &AscendDevice, bytes: usize) -> Result<(), GraphError> {
    let rt = try_runtime(device).map_err(GraphError::Failed)?;
    rt.reserve_workspace(bytes).map_err(from_acl)
}

/// Writes `bytes` over the whole of `t`'s elements, queued on the device's stream after every
/// use of `t` queued so far (a replay included) and before every later one: how a graph's
/// inputs change between replays. `t` must be contiguous and `bytes` exactly its elements in
/// its dtype. Not allowed inside a capture.
pub fn write_in_place(t: &AscendTensor, bytes: &[u8]) -> Result<(), GraphError> {
    let want = t.numel() * t.dtype.size();
    if !t.is_contiguous() || bytes.len() != want {
        return Err(GraphError::Failed(format!(
            "write_in_place: {} bytes for a {}contiguous tensor of shape {:?} and dtype {:?} \
             ({want} bytes)",
            bytes.len(),
            if t.is_contiguous() { "" } else { "non-" },
            t.shape,
            t.dtype
        )));
    }
    // Binds the device to this thread for the copy.
    try_runtime(&t.device()).map_err(GraphError::Failed)?;
    t.overwrite(bytes).map_err(from_acl)
}

/// The message of a caught panic.
fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "the closure panicked".into())
}

/// Inside a [`capture`] of `device`: the launches `f` queues form a task group
/// (`aclmdlRICaptureTaskGrpBegin` / `End`) whose calls [`update_task_group`] may re-issue with
/// other host attributes between replays. Outside a capture the runtime refuses it.
pub fn task_group<R>(
    device: &AscendDevice,
    f: impl FnOnce() -> R,
) -> Result<(TaskGroup, R), GraphError> {
    let rt = try_runtime(device).map_err(GraphError::Failed)?;
    if !rt.order().capturing() {
        return Err(GraphError::Failed(format!(
            "task_group on {device}: only inside a capture (aclmdlRICaptureTaskGrpBegin needs a \
             capturing stream)"
        )));
    }
    rt.task_group_begin().map_err(from_acl)?;
    let out = f();
    let group = rt.task_group_end().map_err(from_acl)?;
    Ok((group, out))
}

/// Replaces the tasks of `group` (of a live graph of `device`) by the launches `f` queues —
/// as many as the group holds, in order, typically the same calls with new host attributes
/// (`aclmdlRICaptureTaskUpdateBegin` / `End`). They are recorded, not run; the replacement is
/// stream-ordered (a replay queued before it runs the old tasks). `f` must not upload, read
/// or allocate: uploads and reads are refused as in a capture, and so is any allocation from
/// the device's pool (a block taken for a recorded task would be handed out again once its
/// tensor dropped) — a re-issued call writes the buffers its captured call was bound to.
pub fn update_task_group<R>(
    device: &AscendDevice,
    group: TaskGroup,
    f: impl FnOnce() -> R,
) -> Result<R, GraphError> {
    let rt = try_runtime(device).map_err(GraphError::Failed)?;
    if rt.order().capturing() {
        return Err(GraphError::Refused(format!(
            "update_task_group on {device}: the stream is capturing (update a group between \
             replays, after its capture ended)"
        )));
    }
    rt.task_update_begin(group).map_err(from_acl)?;
    crate::memory::set_updating(device, true);
    let out = catch_unwind(AssertUnwindSafe(f));
    crate::memory::set_updating(device, false);
    // Ends the update either way, so that the stream leaves update mode.
    let ended = rt.task_update_end();
    match out {
        Ok(out) => ended.map(|()| out).map_err(from_acl),
        Err(panic) => Err(GraphError::Failed(format!(
            "update of a task group: {}",
            panic_message(panic)
        ))),
    }
}
