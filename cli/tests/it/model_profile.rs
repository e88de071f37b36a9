//! `finetune --profile` and `generate --profile` on the simulation: the dispatch table, the
//! modelled Atlas A2 time of the top ops and the per-step line `… per step <L> launches, host
//! <H> µs, modelled device <D> µs (Atlas A2 roofline), host / device <R>`; `--dry-run` (the
//! kernels off) issues the launches of the real step and writes nothing. The examples run as
//! child processes (see `model_examples`).

use std::path::Path;
use std::time::Duration;

use crate::model_examples::{run_example, tiny_checkpoint, ExampleRun};

const LIMIT: Duration = Duration::from_secs(120);

/// `(launches, host µs, modelled device µs, ratio)` of the `<what>: per step …` line.
fn step_line(r: &ExampleRun, what: &str) -> (f64, f64, f64, f64) {
    let prefix = format!("{what}: per step ");
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}…` line:\n{}", r.stdout));
    let nums: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.parse().ok())
        .collect();
    // launches, host, device, "2" of "A2", ratio.
    assert_eq!(nums.len(), 5, "{line}");
    (nums[0], nums[1], nums[2], nums[4])
}

/// The counters line's launches per step.
fn counted_launches(r: &ExampleRun) -> f64 {
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("finetune: device "))
        .unwrap_or_else(|| panic!("no counters line:\n{}", r.stdout));
    line["finetune: device ".len()..]
        .split(' ')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap()
}

fn finetune(ckpt: &Path, out: &Path, steps: &str, extra: &[&str]) -> ExampleRun {
    let data = ckpt.join("corpus.txt");
    std::fs::write(
        &data,
        &burn_ascend_model::load::data::BUNDLED_CORPUS[..3000],
    )
    .unwrap();
    let config = ckpt.join("config.json");
    let mut args = vec![
        "--device",
        "sim",
        "--profile",
        "--out",
        out.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--steps",
        steps,
        "--seq-len",
        "16",
        "--batch-tokens",
        "32",
        "--no-samples",
        "--model-config",
        config.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run_example("finetune", &args, &[], LIMIT, false)
}

#[test]
fn finetune_profile_on_sim_prints_the_modelled_device_time_and_a_dry_run_matches_its_launches() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("tiny");
    tiny_checkpoint(&ckpt);
    let real = finetune(&ckpt, &dir.path().join("real"), "2", &[]);
    assert!(real.ok(), "{}", real.tail());
    let dry_out = dir.path().join("dry");
    let dry = finetune(&ckpt, &dry_out, "2", &["--dry-run"]);
    assert!(dry.ok(), "{}", dry.tail());
    for r in [&real, &dry] {
        assert!(r.stdout.contains("calls/step"), "{}", r.stdout);
        assert!(
            r.stdout.contains("modelled device (Atlas A2 roofline)"),
            "{}",
            r.stdout
        );
        assert!(r.stdout.contains("aclnnMatmul"), "{}", r.stdout);
        let (launches, host, device, ratio) = step_line(r, "finetune");
        assert!(
            launches > 10.0 && host > 0.0 && device > 0.0,
            "{}",
            r.stdout
        );
        // The ratio is host / device as printed (to their rounding).
        assert!(
            (ratio - host / device).abs() <= 0.01 * ratio + 0.002,
            "{}",
            r.stdout
        );
        // The cost model counts what the dispatch counters count.
        assert!(
            (launches - counted_launches(r)).abs() <= 0.11,
            "{}",
            r.stdout
        );
    }
    // The dry step issues the real step's launches but for the loss's `cat` (its loss is
    // not read), and writes nothing.
    let (real_l, dry_l) = (counted_launches(&real), counted_launches(&dry));
    assert!(
        (real_l - dry_l).abs() <= 2.0,
        "real {real_l} vs dry {dry_l} launches per step"
    );
    assert!(!dry_out.exists());
    assert!(dry
        .stdout
        .contains("finetune: dry run (2 steps, kernels off)"));
}

#[test]
fn generate_profile_on_sim_prints_the_decode_steps_modelled_time_eager_and_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("tiny");
    tiny_checkpoint(&ckpt);
    let profile = |extra: &[&str]| {
        let base = [
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--device",
            "sim",
            "--greedy",
            "--max-new",
            "4",
            "--prompt",
            "To be",
            "--prompt",
            "or not",
            "--profile",
        ];
        let r = run_example("generate", &[&base[..], extra].concat(), &[], LIMIT, false);
        assert!(r.ok(), "{extra:?}: {}", r.tail());
        r
    };
    let eager = profile(&[]);
    assert!(
        eager
            .stdout
            .contains("generate: profile of 3 decode steps of 2 sequences"),
        "{}",
        eager.stdout
    );
    let (eager_launches, host, device, _) = step_line(&eager, "generate");
    assert!(
        eager_launches > 1.0 && host > 0.0 && device > 0.0,
        "{}",
        eager.stdout
    );
    // With --graph the first decode step captures; the profile covers the two replayed
    // ones: a few launches each (the replay and its inputs' uploads), and the modelled time
    // of the tasks the replay runs (attention included), not of the uploads alone.
    let graph = profile(&["--graph", "--dtype", "bf16"]);
    assert!(
        graph
            .stdout
            .contains("generate: profile of 2 replayed decode steps of 2 sequences"),
        "{}",
        graph.stdout
    );
    let (launches, host, device, _) = step_line(&graph, "generate");
    assert!(
        launches < eager_launches / 4.0 && host > 0.0 && device > 0.0,
        "eager {eager_launches} launches per step\n{}",
        graph.stdout
    );
    assert!(
        graph.stdout.contains("aclnnFusedInferAttentionScore"),
        "{}",
        graph.stdout
    );
    // Too few tokens to replay a step is refused naming the flag.
    let args = [
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--device",
        "sim",
        "--max-new",
        "2",
        "--profile",
        "--graph",
        "--dtype",
        "bf16",
    ];
    let short = run_example("generate", &args, &[], LIMIT, false);
    assert_eq!(short.code(), Some(2), "{}", short.tail());
    assert!(
        short.stderr.contains("invalid --max-new"),
        "{}",
        short.tail()
    );
}

#[test]
fn dry_run_and_model_config_refuse_bad_uses_naming_the_flag_before_any_step() {
    let dir = tempfile::tempdir().unwrap();
    let bad_json = dir.path().join("bad.json");
    std::fs::write(&bad_json, b"{ not json").unwrap();
    let missing = dir.path().join("missing.json");
    let out = dir.path().join("out");
    let (bad_json, missing, out) = (
        bad_json.to_str().unwrap(),
        missing.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    for (extra, needle) in [
        (
            &["--device", "cpu", "--profile", "--dry-run"][..],
            "--dry-run needs --device sim",
        ),
        (
            &[
                "--device",
                "sim",
                "--profile",
                "--dry-run",
                "--devices",
                "2",
            ][..],
            "unsupported: --dry-run with --devices",
        ),
        (
            &[
                "--device",
                "sim",
                "--profile",
                "--dry-run",
                "--checkpointing",
            ][..],
            "unsupported: --dry-run with --resume, --merge-lora or --checkpointing",
        ),
        (&["--model-config", missing][..], "--model-config "),
        (&["--model-config", bad_json][..], "--model-config "),
    ] {
        let args = [extra, &["--steps", "1", "--no-samples", "--out", out][..]].concat();
        let r = run_example("finetune", &args, &[], LIMIT, false);
        assert_eq!(r.code(), Some(2), "{extra:?}: {}", r.tail());
        assert!(r.stderr.contains(needle), "{extra:?}: {}", r.tail());
        assert!(
            !r.stdout.contains("step "),
            "{extra:?} ran a step: {}",
            r.stdout
        );
        assert!(
            !Path::new(out).join("LATEST").exists(),
            "{extra:?} wrote a checkpoint"
        );
    }
}

#[test]
fn finetune_graph_profile_means_cover_the_replayed_steps_not_the_warm_up_and_the_capture() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("tiny");
    tiny_checkpoint(&ckpt);
    let graph = ["--graph", "--pack", "fixed"];
    let r = finetune(&ckpt, &dir.path().join("graph"), "4", &graph);
    assert!(r.ok(), "{}", r.tail());
    assert!(
        r.stdout.contains("finetune: training launches per step 1"),
        "{}",
        r.stdout
    );
    // The two replayed steps measured: a replay and the inputs' uploads each (the eager
    // warm-up step alone issues hundreds of launches, so a mean counting it would be far
    // above 10).
    let (launches, host, device, _) = step_line(&r, "finetune");
    assert!(launches <= 5.0, "{}", r.stdout);
    assert!(
        (launches - counted_launches(&r)).abs() <= 0.11,
        "{}",
        r.stdout
    );
    // The replay runs the recorded step on the device: its modelled time is the step's
    // (the matmuls of the recorded step are in the table), not the uploads' alone.
    assert!(r.stdout.contains("aclnnMatmul"), "{}", r.stdout);
    // (Without them the uploads alone model 0.016 µs per step here.)
    assert!(host > 0.0 && device > 0.1, "{}", r.stdout);
    // Too few steps to replay one is refused naming the flag.
    let short = finetune(&ckpt, &dir.path().join("short"), "2", &graph);
    assert!(!short.ok());
    assert!(short.stderr.contains("invalid --steps"), "{}", short.tail());
}
