//! Graph capture on the simulation (`aclmdlRICaptureBegin` … `aclmdlRIExecuteAsync`), through
//! the runtime's safe layer: a capture records the tasks instead of running them, a replay
//! runs them in order as one launch (and again at the next replay), a task-group update
//! replaces a recorded call's parameters, and every call the capture rules forbid is refused
//! with CANN's status (107030), the capture then invalidated (507903).

use burn_ascend_cann::acl::ffi::{
    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
    ACL_MEMCPY_DEVICE_TO_HOST, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
    ACL_MODEL_RI_CAPTURE_STATUS_NONE,
};
use burn_ascend_cann::acl::{
    aclnn, AclError, CaptureMode, DataType, DeviceTensor, Runtime, Scalar, TensorDesc,
};

fn up(rt: &Runtime, v: &[f32]) -> DeviceTensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(
        TensorDesc::contiguous(&[v.len()], DataType::Float).unwrap(),
        &bytes,
    )
    .unwrap()
}

fn floats(t: &DeviceTensor) -> Vec<f32> {
    t.download()
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A runtime whose workspace is reserved (growing it inside a capture is refused).
fn runtime() -> Runtime {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    rt.reserve_workspace(1 << 16).unwrap();
    rt
}

fn status(e: &AclError) -> Option<i32> {
    e.status()
}

#[test]
fn captured_tasks_are_recorded_not_run_and_each_replay_runs_them_in_order_as_one_launch() {
    let rt = runtime();
    let x = up(&rt, &[1., 2., 3.]);
    let y = up(&rt, &[0., 0., 0.]);
    rt.synchronize().unwrap();
    let (xh, yh) = (x.handle().unwrap(), y.handle().unwrap());
    let (two, one) = (
        Scalar::f32(rt.api(), 2.0).unwrap(),
        Scalar::f32(rt.api(), 1.0).unwrap(),
    );
    rt.capture_begin(CaptureMode::ThreadLocal).unwrap();
    assert_eq!(
        rt.capture_status().unwrap(),
        ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE
    );
    // y = 2·x, then x = y + 1: the order matters.
    aclnn::muls(&rt, &xh, &two, &yh).unwrap();
    aclnn::adds(&rt, &yh, &one, &one, &xh).unwrap();
    let graph = rt.capture_end().unwrap();
    assert_eq!(
        rt.capture_status().unwrap(),
        ACL_MODEL_RI_CAPTURE_STATUS_NONE
    );
    assert_eq!(
        burn_ascend_acl_sim::graph_tasks(graph.as_ptr()).unwrap(),
        ["aclnnMuls", "aclnnAdds"]
    );
    // Recorded, not run.
    assert_eq!(floats(&x), [1., 2., 3.]);
    assert_eq!(floats(&y), [0., 0., 0.]);
    let before = rt.counters().launches;
    graph.execute(&rt).unwrap();
    assert_eq!(rt.counters().launches - before, 1, "a replay is one launch");
    assert_eq!(floats(&y), [2., 4., 6.]);
    assert_eq!(floats(&x), [3., 5., 7.]);
    // The graph stays: a second replay runs the same tasks on the new values.
    graph.execute(&rt).unwrap();
    assert_eq!(floats(&x), [7., 11., 15.]);
}

#[test]
fn a_task_group_update_replaces_the_recorded_calls_parameters_for_later_replays() {
    let rt = runtime();
    let x = up(&rt, &[1., 2.]);
    let y = up(&rt, &[0., 0.]);
    rt.synchronize().unwrap();
    let (xh, yh) = (x.handle().unwrap(), y.handle().unwrap());
    let (two, three) = (
        Scalar::f32(rt.api(), 2.0).unwrap(),
        Scalar::f32(rt.api(), 3.0).unwrap(),
    );
    rt.capture_begin(CaptureMode::ThreadLocal).unwrap();
    rt.task_group_begin().unwrap();
    aclnn::muls(&rt, &xh, &two, &yh).unwrap();
    let group = rt.task_group_end().unwrap();
    let graph = rt.capture_end().unwrap();
    graph.execute(&rt).unwrap();
    assert_eq!(floats(&y), [2., 4.]);
    // The re-issued call replaces the group's task instead of running.
    rt.task_update_begin(group).unwrap();
    aclnn::muls(&rt, &xh, &three, &yh).unwrap();
    rt.task_update_end().unwrap();
    assert_eq!(floats(&y), [2., 4.], "an update runs nothing");
    graph.execute(&rt).unwrap();
    assert_eq!(floats(&y), [3., 6.]);
    // An update must replace every task of the group.
    rt.task_update_begin(group).unwrap();
    let e = rt.task_update_end().unwrap_err();
    assert!(e.to_string().contains("1 tasks but 0 were issued"), "{e}");
}

#[test]
fn synchronising_reading_uploading_allocating_and_growing_the_workspace_are_refused_in_a_capture() {
    let rt = runtime();
    let x = up(&rt, &[1., 2.]);
    rt.synchronize().unwrap();
    let refused = |e: AclError, what: &str| {
        assert_eq!(
            status(&e),
            Some(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT),
            "{what}: {e}"
        );
        assert!(e.to_string().contains("capture"), "{what}: {e}");
    };
    // The runtime refuses before calling into C: the capture stays valid.
    rt.capture_begin(CaptureMode::ThreadLocal).unwrap();
    refused(rt.synchronize().unwrap_err(), "synchronize");
    refused(x.download().unwrap_err(), "host read");
    refused(x.buf.overwrite(&[0; 8]).unwrap_err(), "upload");
    let e = rt.with_workspace(1 << 30, |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("workspace"), "{e}");
    refused(e, "workspace");
    rt.capture_end().unwrap();

    // The simulation refuses as CANN does and invalidates the capture: an allocation (the
    // pool's reserved memory is all a capture may use) ...
    rt.capture_begin(CaptureMode::ThreadLocal).unwrap();
    let e = rt.alloc(64).map(drop).unwrap_err();
    refused(e.clone(), "aclrtMalloc");
    assert!(e.to_string().contains("aclrtMalloc"), "{e}");
    let e = rt.capture_end().map(drop).unwrap_err();
    assert_eq!(
        status(&e),
        Some(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED),
        "{e}"
    );
    assert!(e.to_string().contains("aclrtMalloc"), "{e}");

    // ... a synchronisation of the capturing stream and a synchronous host read, called
    // straight through the table.
    let api = rt.api();
    rt.capture_begin(CaptureMode::Relaxed).unwrap();
    // SAFETY: the runtime's live stream.
    let st = unsafe { (api.synchronize_stream)(rt.stream().as_ptr()) };
    assert_eq!(st, ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    assert!(rt.capture_end().is_err());
    rt.capture_begin(CaptureMode::ThreadLocal).unwrap();
    let mut host = [0u8; 8];
    // SAFETY: `host` holds 8 bytes; `x` is a live 8-byte device buffer.
    let st = unsafe {
        (api.memcpy)(
            host.as_mut_ptr().cast(),
            8,
            x.buf.as_ptr(),
            8,
            ACL_MEMCPY_DEVICE_TO_HOST,
        )
    };
    assert_eq!(st, ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    let e = rt.capture_end().map(drop).unwrap_err();
    assert!(e.to_string().contains("aclrtMemcpy"), "{e}");
    // Out of the capture everything works again.
    assert_eq!(floats(&x), [1., 2.]);
}

#[test]
fn a_cann_without_the_capture_functions_gives_an_unsupported_error_not_a_load_failure() {
    let api = burn_ascend_acl_sim::api_without_ops(&["aclmdlRICaptureBegin"]);
    let rt = Runtime::with_api(api, 0).unwrap();
    assert!(!rt.graph_capture_available());
    let e = rt.capture_begin(CaptureMode::Global).unwrap_err();
    assert!(
        matches!(&e, AclError::Unsupported(m) if m.contains("aclmdlRICaptureBegin")),
        "{e}"
    );
    assert!(e.to_string().starts_with("unsupported: "), "{e}");
}
