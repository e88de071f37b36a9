//! `burn-ascend bench`: the JSON report's shape on the tiny `--smoke` case set (every code
//! path of the bench, in well under a second; no timing is asserted).
//!
//! The smoke run goes through the `burn-ascend` binary, whose counting `#[global_allocator]`
//! measures the peak-memory figures: in a process of its own, so the other tests' allocations
//! and frees in this binary do not move them.

use std::process::Command;

use burn_ascend_cli::{self as cli, CliError};

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn smoke_run_writes_the_issue_s_json_keys() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("bench.json");
    let path_s = path.to_str().expect("utf-8 path");
    let out = Command::new(env!("CARGO_BIN_EXE_burn-ascend"))
        .args(["bench", "--smoke", "--json", path_s])
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "bench runs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the report")).expect("json");

    let top: Vec<&str> = doc
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        top,
        [
            "cases",
            "copy_gbps",
            "dispatch",
            "read_gbps",
            "sgemm_gflops"
        ]
    );
    assert!(doc["sgemm_gflops"].as_f64().is_some_and(|x| x > 0.0));
    assert!(doc["copy_gbps"].as_f64().is_some_and(|x| x > 0.0));
    assert!(doc["read_gbps"].as_f64().is_some_and(|x| x > 0.0));

    let cases = doc["cases"].as_array().expect("cases");
    let kinds: Vec<&str> = cases
        .iter()
        .map(|c| c["kind"].as_str().expect("kind"))
        .collect();
    // fwd and fwd+bwd for (full, causal) × the smoke head dim, then f32 and int8 decode.
    assert_eq!(
        kinds,
        [
            "varlen-fwd",
            "varlen-fwdbwd",
            "varlen-fwd",
            "varlen-fwdbwd",
            "decode",
            "decode"
        ]
    );
    let mut keys = vec![
        "name",
        "kind",
        "causal",
        "tokens",
        "heads",
        "kv_heads",
        "head_dim",
        "gflops",
        "fraction_of_sgemm",
        "fraction_of_copy_bandwidth",
        "fraction_of_read_bandwidth",
        "read_gbps_adjacent",
        "fraction_of_adjacent_read_bandwidth",
        "speedup_vs_composite",
        "peak_extra_bytes",
        "composite_peak_extra_bytes",
    ];
    keys.sort_unstable();
    for c in cases {
        let mut got: Vec<&str> = c
            .as_object()
            .expect("case object")
            .keys()
            .map(String::as_str)
            .collect();
        got.sort_unstable();
        assert_eq!(got, keys, "{c}");
        for k in ["gflops", "fraction_of_sgemm", "speedup_vs_composite"] {
            assert!(c[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {c}");
        }
        for k in ["peak_extra_bytes", "composite_peak_extra_bytes"] {
            assert!(c[k].as_u64().is_some_and(|x| x > 0), "{k} in {c}");
        }
        let decode = c["kind"] == "decode";
        for k in [
            "fraction_of_copy_bandwidth",
            "fraction_of_read_bandwidth",
            "read_gbps_adjacent",
            "fraction_of_adjacent_read_bandwidth",
        ] {
            assert_eq!(c[k].as_f64().is_some_and(|x| x > 0.0), decode, "{k} in {c}");
        }
        if decode {
            // The run's read figure is the best probe of the run, those paired with the
            // decode repetitions included: never below a case's own adjacent probes, so
            // the run's fraction is never above the adjacent one.
            let adjacent = c["read_gbps_adjacent"].as_f64().unwrap();
            let run = doc["read_gbps"].as_f64().unwrap();
            assert!(run >= adjacent, "read_gbps {run} < adjacent {adjacent}");
            let (f, fa) = (
                c["fraction_of_read_bandwidth"].as_f64().unwrap(),
                c["fraction_of_adjacent_read_bandwidth"].as_f64().unwrap(),
            );
            assert!(f <= fa * (1.0 + 1e-12), "{f} > {fa}");
        }
        assert_eq!(
            c["causal"].as_bool(),
            Some(c["name"].as_str().unwrap().contains("causal"))
        );
    }
    // A `finetune` step on `Autodiff<Ascend>` waits for the device once, for the loss read, and
    // runs nothing on the host. The fused ops and the fused AdamW cut the launches of a step of
    // the default model at least 3× from the 3 247.7 before them
    // (≤ 1 082; about 500 when this was written), each a few host µs (no bound on the µs: a
    // timing, and this is an unoptimised build on shared cores).
    let d = &doc["dispatch"];
    assert_eq!(d["syncs_per_step"].as_f64(), Some(1.0), "{d}");
    assert_eq!(d["fallbacks_per_step"].as_f64(), Some(0.0), "{d}");
    assert!(
        d["launches_per_step"]
            .as_f64()
            .is_some_and(|x| (100.0..=1082.0).contains(&x)),
        "{d}"
    );
    assert!(
        d["host_us_per_launch"].as_f64().is_some_and(|x| x > 0.0),
        "{d}"
    );
    // The smoke decode shape: B = 2, KV length 64 → 128 cached tokens.
    assert_eq!(cases[4]["tokens"], 128);
    assert_eq!(cases[0]["tokens"], 32);
}

#[test]
fn bad_bench_arguments_are_usage_errors() {
    for bad in [
        &["bench", "--json"][..],
        &["bench", "--nope"],
        &["bench", "--filter"],
    ] {
        match cli::main_with_args(&args(bad)) {
            Err(e @ CliError::Usage(_)) => assert_eq!(e.exit_code(), 2),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}
