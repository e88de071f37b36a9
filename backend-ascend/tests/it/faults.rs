//! Device faults injected into the simulation ([`sim::inject_fault`]) on the Burn-level
//! attention ops of `Ascend`: an aclnn launch failing at execute and a stream error after it
//! come back as [`AttnError::Device`] naming the op, the C call and the status (no panic);
//! an allocation failing inside an op is retried by the pool or reported with its status; and
//! afterwards the pool's statistics and the simulation's live handles are back at their
//! baseline. Holds [`crate::exclusive`]: both are process-wide (the faults are per thread).

use burn_ascend_ops::IncreKvFromTensors;
use std::panic::{catch_unwind, AssertUnwindSafe};

use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_ascend_acl_sim as sim;
use burn_ascend_backend::{empty_cache, memory_stats, Ascend, AscendDevice};
use burn_ascend_cann::acl::ffi::{ACLNN_ERR_RUNTIME_ERROR, ACL_ERROR_RT_MEMORY_ALLOCATION};
use burn_ascend_ops::prompt::{PfaLayout, PromptSpec};
use burn_ascend_ops::{
    incre_flash_attention, prompt_flash_attention, scatter_pa_kv_cache, AttnError, IfaLayout,
    IncreKv, IncreSpec, ScatterSpec,
};

fn dev() -> AscendDevice {
    AscendDevice::sim()
}

/// FLOAT16 inputs: CANN's (and the simulation's) PFA, IFA and scatter take no FLOAT, and these
/// tests inject faults into the aclnn launches.
fn t<const K: usize>(n: usize, s: [usize; K]) -> Tensor<Ascend, K> {
    let v: Vec<f32> = (0..n).map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5).collect();
    Tensor::<Ascend, K>::from_data(TensorData::new(v, s), &dev()).cast(FloatDType::F16)
}

/// `x` read back as f32 values.
fn read<const K: usize>(x: Tensor<Ascend, K>) -> Vec<f32> {
    x.cast(FloatDType::F32).into_data().to_vec().unwrap()
}

/// The three serving ops, by their aclnn C names, each run once on fresh inputs; returns the
/// op's result with the output read back (so every launch and synchronisation happened).
fn run(op: &str) -> Result<Vec<f32>, AttnError> {
    let (b, s, n, d) = (2, 3, 2, 8);
    match op {
        "aclnnPromptFlashAttentionV3" => {
            let q = t::<4>(b * s * n * d, [b, s, n, d]);
            let spec = PromptSpec::new(n, 0.3, PfaLayout::Bsnd);
            prompt_flash_attention(q.clone(), q.clone(), q, &spec).map(read)
        }
        "aclnnIncreFlashAttentionV4" => {
            let q = t::<4>(b * n * d, [b, 1, n, d]);
            let k = t::<4>(b * s * n * d, [b, s, n, d]);
            let spec = IncreSpec::new(n, 0.3, IfaLayout::Bsnd);
            incre_flash_attention(q, IncreKv::contiguous(k.clone(), k), &spec).map(read)
        }
        _ => {
            let key = t::<3>(s * n * d, [s, n, d]);
            let cache = t::<4>(2 * 16 * n * d, [2, 16, n, d]);
            let spec = ScatterSpec::new(vec![3, 17, 0]);
            scatter_pa_kv_cache(key, None, cache, None, &spec).map(|(c, _)| read(c))
        }
    }
}

const OPS: [&str; 3] = [
    "aclnnPromptFlashAttentionV3",
    "aclnnIncreFlashAttentionV4",
    "aclnnScatterPaKvCache",
];

/// The pool's allocated bytes and the simulation's live objects, the pool's cache emptied.
fn baseline() -> (usize, sim::LiveHandles) {
    empty_cache(&dev());
    (memory_stats(&dev()).allocated_bytes, sim::live_handles())
}

#[test]
fn a_launch_failing_at_execute_is_a_typed_device_error_naming_the_op_and_status() {
    let _lock = crate::exclusive();
    for op in OPS {
        let want = run(op).unwrap();
        let before = baseline();
        sim::inject_fault(sim::Fault::Launch {
            op: Some(op.into()),
            after: 0,
        });
        let got = catch_unwind(AssertUnwindSafe(|| run(op)));
        sim::clear_faults();
        let err = got
            .unwrap_or_else(|_| panic!("{op}: a failing launch panicked"))
            .expect_err("the launch failed");
        match &err {
            AttnError::Device { call, status, .. } => {
                assert_eq!(call, op, "{err}");
                assert_eq!(*status, Some(ACLNN_ERR_RUNTIME_ERROR), "{err}");
            }
            other => panic!("{op}: expected a device error, got {other}"),
        }
        assert!(err.to_string().contains("361001"), "{err}");
        assert_eq!(baseline(), before, "{op}: a failed launch leaked");
        assert_eq!(run(op).unwrap(), want, "{op}: the fault fires once");
    }
}

/// Launches are asynchronous: a stream error (a kernel fault reported at synchronisation)
/// reaches the caller at the next read, as an `ExecutionError` from `try_into_data` naming the
/// synchronisation and the status, and nothing leaks.
#[test]
fn a_stream_error_after_the_launch_is_the_next_reads_execution_error_and_leaks_nothing() {
    let _lock = crate::exclusive();
    for op in OPS {
        run(op).unwrap();
        let before = baseline();
        sim::inject_fault(sim::Fault::Synchronize { after: 0 });
        let key = t::<3>(3 * 2 * 8, [3, 2, 8]);
        let got = catch_unwind(AssertUnwindSafe(|| {
            let out = key.clone() * 2.0;
            out.try_into_data()
        }));
        sim::clear_faults();
        let err = got
            .unwrap_or_else(|_| panic!("{op}: a stream error panicked"))
            .expect_err("the stream failed")
            .to_string();
        assert!(
            err.contains("aclrtSynchronizeStream")
                && err.contains(&sim::SIM_STREAM_FAULT_STATUS.to_string()),
            "{op}: {err}"
        );
        drop(key);
        assert_eq!(baseline(), before, "{op}: a stream error leaked");
    }
}

#[test]
fn an_allocation_failing_inside_an_op_is_retried_or_reported_with_its_status_and_leaks_nothing() {
    let _lock = crate::exclusive();
    for op in OPS {
        let want = run(op).unwrap();
        let before = baseline();
        let mut exercised = 0;
        for after in 0..64 {
            let fired = sim::faults_fired();
            sim::inject_fault(sim::Fault::Malloc { after });
            let got = catch_unwind(AssertUnwindSafe(|| run(op)));
            sim::clear_faults();
            if sim::faults_fired() == fired {
                break; // the op needs fewer allocations than that
            }
            exercised += 1;
            match got {
                // The pool empties its cache and retries once: a single failure is absorbed.
                Ok(Ok(out)) => assert_eq!(out, want, "{op}: allocation {after}"),
                // The call builder's own allocations (workspace, host data) report the status.
                Ok(Err(e)) => assert!(
                    matches!(&e, AttnError::Device { status: Some(st), .. } if *st == ACL_ERROR_RT_MEMORY_ALLOCATION),
                    "{op}: allocation {after}: {e}"
                ),
                // A Burn tensor's allocation cannot return an error: its panic names the status.
                Err(p) => {
                    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
                    assert!(msg.contains("207001"), "{op}: allocation {after}: {msg}");
                }
            }
            // Known gap (reported): a failed workspace allocation leaves the executor of
            // `GetWorkspaceSize` unlaunched (see acl-sim's faults tests); all else is back.
            let (bytes, live) = baseline();
            let live = sim::LiveHandles {
                executors: before.1.executors,
                ..live
            };
            assert_eq!(
                (bytes, live),
                before,
                "{op}: allocation {after} failing leaked"
            );
        }
        assert!(exercised > 0, "{op}: no allocation was exercised");
    }
}

#[test]
fn a_failed_device_append_returns_its_blocks_and_the_paged_cache_then_refuses_instead_of_serving_empty_caches(
) {
    let _lock = crate::exclusive();
    let (n, d, bs, blocks) = (2, 8, 16, 4);
    let mut cache = burn_ascend_ops::PagedKvCache::<Ascend>::new(blocks, bs, n, n, d, 0.3, &dev())
        .unwrap()
        .with_dtype(DType::F16)
        .unwrap();
    let (a, b) = (cache.add_sequence(), cache.add_sequence());
    cache
        .append(
            a,
            t::<3>(20 * n * d, [20, n, d]),
            t::<3>(20 * n * d, [20, n, d]),
        )
        .unwrap();
    // b shares a's partly filled second block: its append copies it first (copy-on-write).
    let b = {
        cache.free(b).unwrap();
        cache.fork(a).unwrap()
    };
    let free_before = cache.free_blocks();
    sim::inject_fault(sim::Fault::Launch {
        op: Some("aclnnScatterPaKvCache".into()),
        after: 0,
    });
    let got = catch_unwind(AssertUnwindSafe(|| {
        cache.append(
            b,
            t::<3>(17 * n * d, [17, n, d]),
            t::<3>(17 * n * d, [17, n, d]),
        )
    }));
    sim::clear_faults();
    let err = got.expect("no panic").expect_err("the scatter failed");
    assert!(matches!(err, AttnError::Device { .. }), "{err}");
    assert_eq!(
        cache.free_blocks(),
        free_before,
        "the failed append's blocks are returned"
    );
    // The caches went into the failed call: later calls say so instead of serving zeros.
    let q = t::<4>(n * d, [1, 1, n, d]);
    let again = cache.attend(&[a], q).unwrap_err();
    assert!(again.to_string().contains("lost"), "{again}");
    let again = cache
        .append(a, t::<3>(n * d, [1, n, d]), t::<3>(n * d, [1, n, d]))
        .unwrap_err();
    assert!(again.to_string().contains("lost"), "{again}");
    cache.free(a).unwrap();
    cache.free(b).unwrap();
    assert_eq!(
        cache.free_blocks(),
        blocks,
        "every block is free at the end"
    );
}
