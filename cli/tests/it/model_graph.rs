//! `generate --graph` end to end on the simulation: the example prints one launch per token
//! and the eager text, and `--graph` off an Ascend device or with an f32 model is refused
//! naming it. Decoding through a captured graph itself is tested in
//! `model/tests/it/generate_graph.rs`.

use std::time::Duration;

use crate::model_examples::{run_example, tiny_checkpoint};

#[test]
fn generate_graph_on_the_simulation_prints_one_launch_per_token_and_the_eager_text() {
    let dir = std::env::temp_dir().join(format!("burn-ascend-graph-{}", std::process::id()));
    tiny_checkpoint(&dir);
    let c = dir.to_str().unwrap();
    let limit = Duration::from_secs(120);
    let args = [
        "--checkpoint",
        c,
        "--device",
        "sim",
        "--greedy",
        "--max-new",
        "6",
        "--dtype",
        "bf16",
    ];
    let eager = run_example("generate", &args, &[], limit, false);
    let graph_args: Vec<&str> = args.iter().copied().chain(["--graph"]).collect();
    let graph = run_example("generate", &graph_args, &[], limit, false);
    assert!(
        eager.ok() && graph.ok(),
        "{}\n{}",
        eager.stderr,
        graph.stderr
    );
    assert!(
        graph
            .stdout
            .contains("generate: decode launches per token 1 "),
        "{}",
        graph.stdout
    );
    // Uploads: ids, cos, sin, slots, table (no window: no mask). Updates: the tiny
    // checkpoint's one layer, re-issued for the 4 of the 5 decode steps after the capture's.
    assert!(
        graph
            .stdout
            .contains("plus 5.0 input uploads and 0.8 attention task-group updates per token"),
        "{}",
        graph.stdout
    );
    let text = |out: &str| -> String {
        out.lines()
            .filter(|l| !l.starts_with("generate: "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(text(&graph.stdout), text(&eager.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `generate` with `args` exits 2 with one line holding every one of `needles`.
fn assert_generate_refuses(args: &[&str], needles: &[&str]) {
    let r = run_example("generate", args, &[], Duration::from_secs(60), false);
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    for needle in needles {
        assert!(r.stderr.contains(needle), "{needle:?} not in {}", r.stderr);
    }
}

#[test]
fn generate_graph_of_an_f32_model_is_refused_naming_the_dtype_fia_takes() {
    assert_generate_refuses(
        &["--device", "sim", "--graph"],
        &[
            "unsupported: --graph with an f32 model: CANN's fused inference attention takes \
           FLOAT16/BFLOAT16 (use --dtype bf16)",
        ],
    );
}

#[test]
fn generate_graph_on_the_cpu_is_refused_naming_the_flag() {
    assert_generate_refuses(
        &["--device", "cpu", "--graph"],
        &["unsupported: --graph", "Ascend"],
    );
}

#[test]
fn generate_half_precision_attention_on_the_cpu_is_refused_naming_the_flag() {
    assert_generate_refuses(
        &["--device", "cpu", "--dtype", "bf16"],
        &["unsupported: --dtype", "--device cpu"],
    );
}
