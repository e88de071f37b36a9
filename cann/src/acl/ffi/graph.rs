//! ACL graph capture (`acl/acl_rt.h`, "aclmdlRI"): a stream in capture mode records the tasks
//! queued on it instead of running them, and `aclmdlRICaptureEnd` returns them as a model
//! runtime instance that `aclmdlRIExecuteAsync` replays as one launch. Task groups mark tasks
//! of a capture whose parameters may be replaced between replays (`aclmdlRICaptureTaskGrpBegin`
//! / `End`, then `aclmdlRICaptureTaskUpdateBegin` / `End` around the re-issued calls): how
//! vllm-ascend updates FIA's `actual_seq_lengths` per decode step.
//!
//! These functions are **optional** in the table (the `graph { … }` section): a CANN without
//! them still loads, and their use fails with an `unsupported: …` error.

use std::ffi::{c_int, c_void};

use super::{AclStatus, AclrtStream};

/// `aclmdlRI` (`typedef void *aclmdlRI`): a captured model's runtime instance.
pub type AclmdlRI = *mut c_void;
/// `aclrtTaskGrp` (`typedef void *aclrtTaskGrp`, `acl_base_rt.h`): a captured task group.
pub type AclrtTaskGrp = *mut c_void;

/// `aclmdlRICaptureMode`: which calls are refused while a capture is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum CaptureMode {
    /// `ACL_MODEL_RI_CAPTURE_MODE_GLOBAL`: unsafe calls (synchronisations, synchronous copies,
    /// allocations) are refused on every thread while any stream captures in this mode.
    Global = 0,
    /// `ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL`: refused on the capturing thread only.
    ThreadLocal = 1,
    /// `ACL_MODEL_RI_CAPTURE_MODE_RELAXED`: nothing refused (the caller guarantees safety).
    Relaxed = 2,
}

impl CaptureMode {
    /// The enum value as passed through the C ABI.
    pub fn raw(self) -> c_int {
        self as c_int
    }

    /// Decodes a raw `aclmdlRICaptureMode`.
    pub fn from_raw(v: c_int) -> Option<Self> {
        Some(match v {
            0 => Self::Global,
            1 => Self::ThreadLocal,
            2 => Self::Relaxed,
            _ => return None,
        })
    }
}

/// `aclmdlRICaptureStatus::ACL_MODEL_RI_CAPTURE_STATUS_NONE`.
pub const ACL_MODEL_RI_CAPTURE_STATUS_NONE: c_int = 0;
/// `aclmdlRICaptureStatus::ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE`.
pub const ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE: c_int = 1;
/// `aclmdlRICaptureStatus::ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED`.
pub const ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED: c_int = 2;

/// `ACL_ERROR_RT_STREAM_CAPTURED` (`rt_error_codes.h`): the stream is already capturing.
pub const ACL_ERROR_RT_STREAM_CAPTURED: AclStatus = 107_027;
/// `ACL_ERROR_RT_STREAM_NOT_CAPTURED`: the stream is not in capture status.
pub const ACL_ERROR_RT_STREAM_NOT_CAPTURED: AclStatus = 107_029;
/// `ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT`: "stream is captured, not support current oper" —
/// a synchronisation, host read or allocation during a capture.
pub const ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT: AclStatus = 107_030;
/// `ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED`: the capture was invalidated by a refused call.
pub const ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED: AclStatus = 507_903;

c_prototype! {
    /// `aclError aclmdlRICaptureBegin(aclrtStream stream, aclmdlRICaptureMode mode)`.
    AclmdlRICaptureBegin, AclmdlRICaptureBeginParams(
        stream: AclrtStream,
        mode: c_int,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclmdlRICaptureGetInfo(aclrtStream stream, aclmdlRICaptureStatus *status,
    /// aclmdlRI *modelRI)`.
    AclmdlRICaptureGetInfo, AclmdlRICaptureGetInfoParams(
        stream: AclrtStream,
        status: *mut c_int,
        model_ri: *mut AclmdlRI,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI *modelRI)`.
    AclmdlRICaptureEnd, AclmdlRICaptureEndParams(
        stream: AclrtStream,
        model_ri: *mut AclmdlRI,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream)`.
    AclmdlRIExecuteAsync, AclmdlRIExecuteAsyncParams(
        model_ri: AclmdlRI,
        stream: AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclmdlRIDestroy(aclmdlRI modelRI)`.
    AclmdlRIDestroy, AclmdlRIDestroyParams(
        model_ri: AclmdlRI,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclmdlRICaptureTaskGrpEnd(aclrtStream stream, aclrtTaskGrp *handle)`.
    AclmdlRICaptureTaskGrpEnd, AclmdlRICaptureTaskGrpEndParams(
        stream: AclrtStream,
        handle: *mut AclrtTaskGrp,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclmdlRICaptureTaskUpdateBegin(aclrtStream stream, aclrtTaskGrp handle)`.
    AclmdlRICaptureTaskUpdateBegin, AclmdlRICaptureTaskUpdateBeginParams(
        stream: AclrtStream,
        handle: AclrtTaskGrp,
    ) -> AclStatus
}
