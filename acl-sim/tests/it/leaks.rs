//! Every handle the dispatch layer creates is destroyed again (RAII), checked on the host
//! simulation's registries. The counts are process-wide and the other tests of this binary
//! run beside it, so the check runs alone in a child process of this binary
//! ([`in_own_process`]).

use burn_ascend_acl_sim as sim;
use burn_ascend_backend::attention::builders;
use burn_ascend_cann::acl::{AclError, DataType, Runtime, TensorDesc};
use burn_ascend_contract::incre::{IfaLayout, IncreInputs, IncreKv, IncreSpec};

/// Set in the child process that runs a test alone.
const CHILD: &str = "BURN_ASCEND_SIM_TEST_ALONE";

/// In the test process: re-runs test `name` of this binary alone in a child process, checks it
/// passed and returns `false`. In that child: returns `true` (run the test's body).
pub(crate) fn in_own_process(name: &str) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} in its own process:\n{log}");
    assert!(log.contains("1 passed"), "{name} did not run:\n{log}");
    false
}

#[test]
fn dispatch_leaves_no_live_handles_behind() {
    if !in_own_process("leaks::dispatch_leaves_no_live_handles_behind") {
        return;
    }
    let before = sim::live_handles();
    {
        let rt = burn_ascend_acl_sim::runtime().unwrap();
        // Incremental attention with the tensor-list form: lists own their tensors.
        let (b, n, d, s) = (2usize, 2usize, 8usize, 3usize);
        // FLOAT16: CANN's IFA takes no FLOAT query.
        let incre = |rt: &Runtime, spec: &IncreSpec| -> Result<(), AclError> {
            let f16s = |dims: &[usize]| {
                rt.zeros(TensorDesc::contiguous(dims, DataType::Float16).unwrap())
                    .unwrap()
            };
            let (q, o) = (f16s(&[b, 1, n * d]), f16s(&[b, 1, n * d]));
            let kv = [f16s(&[1, s, n * d]), f16s(&[1, s, n * d])];
            let list = || kv.iter().map(|t| t.handle().unwrap()).collect::<Vec<_>>();
            let launched = builders::incre(
                rt,
                spec,
                IncreInputs::new(
                    q.handle()?,
                    IncreKv::List {
                        key: list(),
                        value: list(),
                    },
                ),
                &o.handle()?,
            );
            launched
        };
        let mut spec = IncreSpec::new(n, 0.5, IfaLayout::Bsh);
        spec.kv_padding_size = Some(0);
        incre(&rt, &spec).unwrap();
        // A failing call must not leak either.
        spec.num_heads = 3;
        assert!(incre(&rt, &spec).is_err());
        assert!(rt.workspace_bytes() > 0, "the workspace is cached");
    }
    assert_eq!(sim::live_handles(), before);
}

/// Launches are asynchronous on an NPU: a workspace replaced by a larger one may still be in use
/// by a queued kernel, so the runtime frees it only after synchronising the stream (the
/// simulation refuses to free a workspace whose launch was not synchronised yet).
#[test]
fn a_replaced_workspace_is_freed_only_after_the_stream_is_synchronised() {
    if !in_own_process("leaks::a_replaced_workspace_is_freed_only_after_the_stream_is_synchronised")
    {
        return;
    }
    use burn_ascend_cann::acl::aclnn;
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let f32s = |dims: &[usize]| {
        rt.zeros(TensorDesc::contiguous(dims, DataType::Float).unwrap())
            .unwrap()
    };
    let (a, out) = (f32s(&[4]), f32s(&[4]));
    // One launch (the simulation asks for a 4 KiB workspace), not synchronised.
    aclnn::mul(
        &rt,
        &a.handle().unwrap(),
        &a.handle().unwrap(),
        &out.handle().unwrap(),
    )
    .unwrap();
    let small = rt.workspace_bytes();
    assert!(small > 0);
    let before = sim::memory_in_use();
    // A larger request replaces the cached workspace while that launch may still run.
    rt.with_workspace(1 << 20, |_| Ok(())).unwrap();
    assert_eq!(
        sim::memory_in_use(),
        before + (1 << 20),
        "the old workspace must stay allocated until the stream is synchronised"
    );
    rt.synchronize().unwrap();
    assert_eq!(
        sim::memory_in_use(),
        before + (1 << 20) - small,
        "synchronising frees the retired workspace"
    );
    assert_eq!(rt.workspace_bytes(), 1 << 20);
}

/// The simulation's own check: memory freed while a queued launch still uses it is kept until
/// the stream is synchronised, and that synchronisation reports the hazard.
#[test]
fn freeing_memory_an_unsynchronised_launch_uses_is_reported_at_the_next_synchronisation() {
    if !in_own_process(
        "leaks::freeing_memory_an_unsynchronised_launch_uses_is_reported_at_the_next_synchronisation",
    ) {
        return;
    }
    use burn_ascend_cann::acl::aclnn;
    use burn_ascend_cann::acl::DeviceTensor;
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    // Not stream-ordered: its drop frees at once.
    let t = DeviceTensor::alloc(
        rt.api(),
        TensorDesc::contiguous(&[4], DataType::Float).unwrap(),
    )
    .unwrap();
    aclnn::mul(
        &rt,
        &t.handle().unwrap(),
        &t.handle().unwrap(),
        &t.handle().unwrap(),
    )
    .unwrap();
    let before = sim::memory_in_use();
    drop(t);
    assert_eq!(
        sim::memory_in_use(),
        before,
        "the simulation keeps memory a queued launch uses"
    );
    let err = rt.synchronize().unwrap_err().to_string();
    assert!(
        err.contains("hazard") && err.contains("aclnnMul") && err.contains("aclrtFree"),
        "{err}"
    );
    assert!(
        sim::memory_in_use() < before,
        "freed after the synchronisation"
    );
    rt.synchronize().unwrap();
}
