//! Every handle the dispatch layer creates is destroyed again (RAII), checked on the host
//! simulation's registries. The counts are process-wide and the other tests of this binary
//! run beside it, so the check runs alone in a child process of this binary
//! ([`in_own_process`]).

use burn_ascend_acl_sim as sim;
use burn_ascend_kernels::acl::host::{self, HostArg, IncreInputs, IncreKv};
use burn_ascend_kernels::acl::DataType;

/// Set in the child process that runs a test alone.
const CHILD: &str = "BURN_ASCEND_SIM_TEST_ALONE";

/// In the test process: re-runs test `name` of this binary alone in a child process, checks it
/// passed and returns `false`. In that child: returns `true` (run the test's body).
fn in_own_process(name: &str) -> bool {
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
        let q = vec![0u8; b * n * d * 4];
        let kv = vec![0u8; s * n * d * 4];
        let qd = [b, 1, n * d];
        let kd = [1usize, s, n * d];
        let one = |bytes| HostArg {
            dtype: DataType::Float,
            dims: &kd,
            bytes,
        };
        let x = IncreInputs {
            query: HostArg {
                dtype: DataType::Float,
                dims: &qd,
                bytes: &q,
            },
            kv: IncreKv::List {
                keys: vec![one(&kv), one(&kv)],
                values: vec![one(&kv), one(&kv)],
            },
            pse_shift: None,
            atten_mask: None,
            actual_seq_lengths: None,
            quant_scale2: None,
            quant_offset2: None,
            antiquant_scale: None,
            antiquant_offset: None,
            blocktable: None,
            kv_padding_size: Some(0),
            num_heads: n as i64,
            scale_value: 0.5,
            input_layout: "BSH",
            num_key_value_heads: 0,
            block_size: 0,
            inner_precise: 1,
        };
        host::incre(&rt, &x, DataType::Float).unwrap();
        // A failing call must not leak either.
        let mut bad = x.clone();
        bad.num_heads = 3;
        assert!(host::incre(&rt, &bad, DataType::Float).is_err());
        assert!(rt.workspace_bytes() > 0, "the workspace is cached");
    }
    assert_eq!(sim::live_handles(), before);
}
