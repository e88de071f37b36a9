//! The simulated streams are asynchronous and strict about it: a task runs later, on the
//! stream's worker; a host access to memory a queued task uses, a free of such memory, or its
//! use from another stream is reported; an asynchronous copy needs page-locked host memory.

use std::ffi::c_void;
use std::time::Duration;

use burn_ascend_acl_sim as sim;
use burn_ascend_cann::acl::ffi::{
    ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_SUCCESS,
};
use burn_ascend_cann::acl::tensor::recent_error;
use burn_ascend_cann::acl::{aclnn, DataType, DeviceTensor, Runtime, TensorDesc};

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn up(rt: &Runtime, v: &[f32]) -> DeviceTensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(
        TensorDesc::contiguous(&[v.len()], DataType::Float).unwrap(),
        &bytes,
    )
    .unwrap()
}

/// `out = a · a`, queued.
fn square(rt: &Runtime, a: &DeviceTensor, out: &DeviceTensor) {
    aclnn::mul(
        rt,
        &a.handle().unwrap(),
        &a.handle().unwrap(),
        &out.handle().unwrap(),
    )
    .unwrap();
}

/// A synchronous copy of the whole buffer to the host, raw (no wait of its own).
fn raw_read(rt: &Runtime, t: &DeviceTensor) -> Result<Vec<f32>, String> {
    let mut out = vec![0u8; t.buf.len()];
    // SAFETY: `out` is a host buffer of `t.buf.len()` bytes; the source is a live allocation
    // of that size.
    let st = unsafe {
        (rt.api().memcpy)(
            out.as_mut_ptr().cast(),
            out.len(),
            t.buf.as_ptr(),
            out.len(),
            ACL_MEMCPY_DEVICE_TO_HOST,
        )
    };
    if st == ACL_SUCCESS {
        Ok(floats(&out))
    } else {
        Err(recent_error(rt.api()))
    }
}

#[test]
fn a_host_read_of_a_queued_result_before_the_stream_is_synchronised_is_a_hazard() {
    let rt = sim::runtime().unwrap();
    let a = up(&rt, &[1., 2., 3.]);
    let out = up(&rt, &[0.; 3]);
    square(&rt, &a, &out);
    let err = raw_read(&rt, &out).unwrap_err();
    assert!(
        err.contains("hazard") && err.contains("aclnnMul") && err.contains("aclrtMemcpy"),
        "{err}"
    );
    rt.synchronize().unwrap();
    assert_eq!(raw_read(&rt, &out).unwrap(), [1., 4., 9.]);
}

#[test]
fn a_simulated_op_may_not_read_tensor_data_in_its_first_stage() {
    // CANN's tiling sees shapes only; a first-stage read would race the queued upload (the
    // IFA kvPaddingSize read did, until it moved into the launch).
    let rt = sim::runtime().unwrap();
    let a = up(&rt, &[1., 2., 3.]);
    rt.synchronize().unwrap();
    let h = a.handle().unwrap();
    let (st, msg) = sim::first_stage_read_for_tests(h.as_ptr());
    assert_eq!(st, burn_ascend_cann::acl::ffi::ACLNN_ERR_INNER, "{msg}");
    assert!(msg.contains("outside a launch"), "{msg}");
}

#[test]
fn a_slow_stream_runs_its_tasks_in_order_after_the_call_returned() {
    sim::set_stream_delay(Duration::from_millis(20));
    let rt = sim::runtime().unwrap();
    let a = up(&rt, &[1., 2., 3.]);
    let b = up(&rt, &[0.; 3]);
    let c = up(&rt, &[0.; 3]);
    let started = std::time::Instant::now();
    square(&rt, &a, &b); // b = a²
    square(&rt, &b, &c); // c = a⁴: needs the first task's result
    let queued_in = started.elapsed();
    rt.synchronize().unwrap();
    let ran_in = started.elapsed();
    sim::set_stream_delay(Duration::ZERO);
    assert!(
        queued_in < Duration::from_millis(20) && ran_in >= Duration::from_millis(40),
        "queued in {queued_in:?}, ran in {ran_in:?}"
    );
    assert_eq!(raw_read(&rt, &c).unwrap(), [1., 16., 81.]);
}

#[test]
fn memory_in_flight_on_one_stream_used_from_another_is_refused() {
    let rt1 = sim::runtime().unwrap();
    let rt2 = sim::runtime().unwrap();
    let a = up(&rt1, &[1., 2.]);
    let out = up(&rt1, &[0.; 2]);
    rt1.synchronize().unwrap();
    square(&rt1, &a, &out);
    let other = up(&rt2, &[0.; 2]);
    rt2.synchronize().unwrap();
    let err = aclnn::mul(
        &rt2,
        &out.handle().unwrap(),
        &out.handle().unwrap(),
        &other.handle().unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("hazard") && err.contains("other stream"),
        "{err}"
    );
    rt1.synchronize().unwrap();
    // Once the first stream has been synchronised the memory is free for any stream.
    aclnn::mul(
        &rt2,
        &out.handle().unwrap(),
        &out.handle().unwrap(),
        &other.handle().unwrap(),
    )
    .unwrap();
    rt2.synchronize().unwrap();
    assert_eq!(raw_read(&rt2, &other).unwrap(), [1., 16.]);
}

#[test]
fn an_asynchronous_copy_takes_only_page_locked_host_memory() {
    let rt = sim::runtime().unwrap();
    let out = up(&rt, &[0.; 2]);
    rt.synchronize().unwrap();
    let host: Vec<u8> = [5f32, 6.].iter().flat_map(|x| x.to_le_bytes()).collect();
    // SAFETY: the call is expected to refuse the pageable source; all pointers are valid.
    let st = unsafe {
        (rt.api().memcpy_async)(
            out.buf.as_ptr(),
            8,
            host.as_ptr().cast(),
            8,
            ACL_MEMCPY_HOST_TO_DEVICE,
            rt.stream().as_ptr(),
        )
    };
    assert_ne!(st, ACL_SUCCESS);
    assert!(recent_error(rt.api()).contains("aclrtMallocHost"));
    let mut pinned: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer; then an 8-byte page-locked buffer is written and copied.
    unsafe {
        assert_eq!((rt.api().malloc_host)(&mut pinned, 8), ACL_SUCCESS);
        std::ptr::copy_nonoverlapping(host.as_ptr(), pinned.cast::<u8>(), 8);
        let st = (rt.api().memcpy_async)(
            out.buf.as_ptr(),
            8,
            pinned,
            8,
            ACL_MEMCPY_HOST_TO_DEVICE,
            rt.stream().as_ptr(),
        );
        assert_eq!(st, ACL_SUCCESS);
        rt.synchronize().unwrap();
        assert_eq!((rt.api().free_host)(pinned), ACL_SUCCESS);
    }
    assert_eq!(raw_read(&rt, &out).unwrap(), [5., 6.]);
}

#[test]
fn the_runtime_counts_launches_synchronisations_and_copied_bytes() {
    let rt = sim::runtime().unwrap();
    let a = up(&rt, &[1., 2., 3., 4.]);
    let out = up(&rt, &[0.; 4]);
    let before = rt.counters();
    square(&rt, &a, &out);
    square(&rt, &out, &out);
    let got = floats(&out.download().unwrap());
    let after = rt.counters();
    assert_eq!(got, [1., 16., 81., 256.]);
    assert_eq!(after.launches - before.launches, 2);
    assert_eq!(after.synchronizations - before.synchronizations, 1);
    assert_eq!(after.d2h_bytes - before.d2h_bytes, 16);
}
