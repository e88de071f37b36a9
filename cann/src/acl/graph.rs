//! Graph capture over [`Runtime`]'s stream (`aclmdlRI…`, see [`super::ffi::graph`]): the
//! tasks queued between [`Runtime::capture_begin`] and [`Runtime::capture_end`] are recorded,
//! not run, and come back as a [`ModelRi`] (RAII: `aclmdlRIDestroy` on drop) that
//! [`ModelRi::execute`] replays on the stream as **one** launch. Task groups
//! ([`Runtime::task_group_begin`] / [`Runtime::task_group_end`]) mark recorded tasks whose
//! parameters [`Runtime::task_update_begin`] / [`Runtime::task_update_end`] replace between
//! replays (the calls made in between are recorded into the group, not run).
//!
//! While a capture is active the runtime refuses, before calling into C, what CANN refuses
//! ([`ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT`]): a stream synchronisation (and so every host
//! read of device memory), an upload from host memory (its staging buffer would be read at
//! every replay, long after it was freed) and a workspace larger than the one reserved before
//! the capture (its allocation would be an `aclrtMalloc`). Allocations go through
//! `aclrtMalloc`, which CANN refuses itself in the global and thread-local modes.
//!
//! The functions are optional in the table: a CANN without them gives `unsupported: …`.

use std::ffi::c_void;

use super::error::{AclError, Result};
use super::ffi::*;
use super::runtime::Runtime;
use super::tensor::check;

/// The function `f` of the table, or the `unsupported` error naming it.
pub(crate) fn graph_fn<F: Copy>(f: Option<F>, name: &str) -> Result<F> {
    f.ok_or_else(|| {
        let where_ = super::loader::cann_dir()
            .map(|d| format!(" in {}", d.display()))
            .unwrap_or_default();
        AclError::Unsupported(format!(
            "graph capture: {name} is not available{where_} (CANN 8.0 or later exports the \
             aclmdlRI capture functions from libascendcl.so)"
        ))
    })
}

/// The error of a call refused because a capture is active (`call` names it, `why` says what
/// to do instead), with CANN's status for it.
pub fn capture_refusal(call: &str, why: &str) -> AclError {
    AclError::Status {
        call: call.to_string(),
        status: ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
        message: format!("refused during graph capture: {why}"),
    }
}

/// A captured graph (`aclmdlRI`), destroyed on drop.
pub struct ModelRi {
    api: &'static AclApi,
    raw: AclmdlRI,
}

// SAFETY: an `aclmdlRI` is a handle of the device context, usable from any thread that binds
// the device (as `Runtime`'s stream, see its `Send`); the handle is only passed back to ACL.
unsafe impl Send for ModelRi {}
// SAFETY: see `Send`; `execute` takes `&self` and ACL serialises executions on the stream.
unsafe impl Sync for ModelRi {}

impl ModelRi {
    /// The raw handle.
    pub fn as_ptr(&self) -> AclmdlRI {
        self.raw
    }

    /// `aclmdlRIExecuteAsync` on `rt`'s stream: the recorded tasks run in order, as one
    /// launch; the host does not wait.
    pub fn execute(&self, rt: &Runtime) -> Result<()> {
        let f = graph_fn(self.api.ri_execute_async, names::ri_execute_async)?;
        if rt.order().capturing() {
            return Err(capture_refusal(
                names::ri_execute_async,
                "a graph cannot be replayed inside another capture here",
            ));
        }
        // SAFETY: `raw` came from `aclmdlRICaptureEnd` and is destroyed only on drop; the
        // stream is live.
        let st = unsafe { f(self.raw, rt.stream().as_ptr()) };
        check(self.api, st, names::ri_execute_async)?;
        rt.order().note_launch();
        Ok(())
    }
}

impl Drop for ModelRi {
    fn drop(&mut self) {
        if let Some(destroy) = self.api.ri_destroy {
            // SAFETY: created by `aclmdlRICaptureEnd`, destroyed once.
            let _ = unsafe { destroy(self.raw) };
        }
    }
}

/// A task group of a capture (`aclrtTaskGrp`), to update between replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskGroup(usize);

impl TaskGroup {
    /// The raw handle.
    pub fn as_ptr(self) -> AclrtTaskGrp {
        self.0 as *mut c_void
    }
}

impl Runtime {
    /// Whether the graph-capture functions exist in this runtime's table.
    pub fn graph_capture_available(&self) -> bool {
        let a = self.api();
        a.capture_begin.is_some()
            && a.capture_end.is_some()
            && a.ri_execute_async.is_some()
            && a.ri_destroy.is_some()
    }

    /// `aclmdlRICaptureBegin` on this runtime's stream: from now on the tasks queued on it are
    /// recorded, not run. The runtime refuses synchronisations, uploads and workspace growth
    /// until [`Self::capture_end`] (see the module docs).
    pub fn capture_begin(&self, mode: CaptureMode) -> Result<()> {
        let f = graph_fn(self.api().capture_begin, names::capture_begin)?;
        // Both ends of the capture need the table (a table with Begin but no End would leave
        // the stream capturing for good).
        graph_fn(self.api().capture_end, names::capture_end)?;
        // SAFETY: the stream is live; the mode is a valid `aclmdlRICaptureMode`.
        let st = unsafe { f(self.stream().as_ptr(), mode.raw()) };
        check(self.api(), st, names::capture_begin)?;
        self.order().set_capturing(true);
        Ok(())
    }

    /// `aclmdlRICaptureEnd`: the recorded tasks as a graph. After a refused call the capture
    /// is invalidated and this fails (the stream is out of capture mode either way).
    pub fn capture_end(&self) -> Result<ModelRi> {
        let f = graph_fn(self.api().capture_end, names::capture_end)?;
        let mut raw: AclmdlRI = std::ptr::null_mut();
        // SAFETY: the stream is live; `raw` is a valid out-pointer.
        let st = unsafe { f(self.stream().as_ptr(), &mut raw) };
        self.order().set_capturing(false);
        check(self.api(), st, names::capture_end)?;
        Ok(ModelRi {
            api: self.api(),
            raw,
        })
    }

    /// `aclmdlRICaptureGetInfo`: whether this runtime's stream is capturing
    /// (`ACL_MODEL_RI_CAPTURE_STATUS_*`).
    pub fn capture_status(&self) -> Result<i32> {
        let f = graph_fn(self.api().capture_get_info, names::capture_get_info)?;
        let mut status = 0;
        let mut raw: AclmdlRI = std::ptr::null_mut();
        // SAFETY: the stream is live; both out-pointers are valid.
        let st = unsafe { f(self.stream().as_ptr(), &mut status, &mut raw) };
        check(self.api(), st, names::capture_get_info)?;
        Ok(status)
    }

    /// `aclmdlRICaptureTaskGrpBegin`: the tasks recorded from now until
    /// [`Self::task_group_end`] form a group.
    pub fn task_group_begin(&self) -> Result<()> {
        let f = graph_fn(self.api().task_grp_begin, names::task_grp_begin)?;
        // SAFETY: the stream is live.
        let st = unsafe { f(self.stream().as_ptr()) };
        check(self.api(), st, names::task_grp_begin)
    }

    /// `aclmdlRICaptureTaskGrpEnd`: the group's handle.
    pub fn task_group_end(&self) -> Result<TaskGroup> {
        let f = graph_fn(self.api().task_grp_end, names::task_grp_end)?;
        let mut h: AclrtTaskGrp = std::ptr::null_mut();
        // SAFETY: the stream is live; `h` is a valid out-pointer.
        let st = unsafe { f(self.stream().as_ptr(), &mut h) };
        check(self.api(), st, names::task_grp_end)?;
        Ok(TaskGroup(h as usize))
    }

    /// `aclmdlRICaptureTaskUpdateBegin`: the launches queued on this runtime's stream until
    /// [`Self::task_update_end`] replace the tasks of `group`, in order, instead of running.
    pub fn task_update_begin(&self, group: TaskGroup) -> Result<()> {
        let f = graph_fn(self.api().task_update_begin, names::task_update_begin)?;
        // SAFETY: the stream is live; the handle came from `aclmdlRICaptureTaskGrpEnd`.
        let st = unsafe { f(self.stream().as_ptr(), group.as_ptr()) };
        check(self.api(), st, names::task_update_begin)?;
        self.order().set_updating(true);
        Ok(())
    }

    /// `aclmdlRICaptureTaskUpdateEnd`: the group's tasks are replaced (fails when the calls made
    /// since [`Self::task_update_begin`] were not as many as the group's tasks).
    pub fn task_update_end(&self) -> Result<()> {
        let f = graph_fn(self.api().task_update_end, names::task_update_end)?;
        // SAFETY: the stream is live.
        let st = unsafe { f(self.stream().as_ptr()) };
        self.order().set_updating(false);
        check(self.api(), st, names::task_update_end)
    }
}

/// Whether `e` is CANN's refusal of a call during a capture.
pub fn is_capture_refusal(e: &AclError) -> bool {
    matches!(
        e.status(),
        Some(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT) | Some(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED)
    )
}
