//! `finetune --checkpointing` (per-block activation recomputation,
//! `model/src/train/recompute.rs`) end to end: the example trains the same losses with and
//! without it and refuses what it cannot do. The library's tests of the recomputation are
//! `model/tests/it/recompute.rs`.

/// `finetune --checkpointing` (bare: per block) trains the same loss curve as without, bit for
/// bit; `--checkpointing block` is the same flag spelled out; what it cannot do is refused
/// before any step with exit 2 and one line naming the flag.
#[test]
fn finetune_checkpointing_trains_the_same_losses_and_refuses_what_it_cannot_do() {
    use crate::model_examples::{run_example, tiny_checkpoint, ExampleRun};
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("start");
    tiny_checkpoint(&ckpt);
    let data = tmp.path().join("data.txt");
    std::fs::write(
        &data,
        &burn_ascend_model::load::data::BUNDLED_CORPUS[..3000],
    )
    .unwrap();
    let run = |name: &str, extra: &[&str]| -> (ExampleRun, std::path::PathBuf) {
        let out = tmp.path().join(name);
        let mut args = vec![
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--steps",
            "3",
            "--seq-len",
            "16",
            "--batch-tokens",
            "48",
            "--no-samples",
        ];
        args.extend_from_slice(extra);
        let r = run_example(
            "finetune",
            &args,
            &[],
            std::time::Duration::from_secs(60),
            false,
        );
        (r, out)
    };
    let losses = |out: &std::path::Path| std::fs::read_to_string(out.join("loss.csv")).unwrap();
    let (plain, plain_out) = run("plain", &[]);
    assert!(plain.ok(), "{}", plain.tail());
    for (name, flag) in [
        ("block", &["--checkpointing"][..]),
        ("spelled", &["--checkpointing", "block"]),
    ] {
        let (r, out) = run(name, flag);
        assert!(r.ok(), "{name}: {}", r.tail());
        assert_eq!(losses(&out), losses(&plain_out), "{name}");
    }
    for (extra, needle) in [
        (&["--checkpointing", "sometimes"][..], "--checkpointing"),
        (
            &["--checkpointing", "--device", "sim", "--devices", "2"],
            "--checkpointing",
        ),
        (
            &[
                "--checkpointing",
                "--lora-rank",
                "2",
                "--lora-dropout",
                "0.1",
            ],
            "--lora-dropout",
        ),
    ] {
        let (r, out) = run("refused", extra);
        assert_eq!(r.code(), Some(2), "{extra:?}: {}", r.tail());
        assert!(r.stderr.contains(needle), "{extra:?}: {}", r.tail());
        assert!(!out.join("loss.csv").exists(), "{extra:?}");
    }
}
