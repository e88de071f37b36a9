//! `finetune --zero K` end to end on two simulated devices: the run ends with the
//! data-parallel line, and the flag's bad uses are refused before any step. ZeRO's stages
//! themselves are tested in `model/tests/it/zero.rs`.

fn finetune(dir: &std::path::Path, extra: &[&str]) -> crate::model_examples::ExampleRun {
    let ckpt = dir.join("ckpt");
    if !ckpt.exists() {
        crate::model_examples::tiny_checkpoint(&ckpt);
    }
    let data = dir.join("data.txt");
    std::fs::write(
        &data,
        &burn_ascend_model::load::data::BUNDLED_CORPUS[..3000],
    )
    .unwrap();
    let out = dir.join("out");
    let mut args = vec![
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--seq-len",
        "16",
        "--batch-tokens",
        "32",
        "--no-samples",
    ];
    args.extend_from_slice(extra);
    crate::model_examples::run_example(
        "finetune",
        &args,
        &[],
        std::time::Duration::from_secs(120),
        false,
    )
}

#[test]
fn finetune_zero_on_two_simulated_devices_ends_with_the_data_parallel_line_and_refuses_bad_uses() {
    let tmp = tempfile::tempdir().unwrap();
    let r = finetune(
        tmp.path(),
        &[
            "--device",
            "sim",
            "--devices",
            "2",
            "--zero",
            "2",
            "--check-ddp",
            "--steps",
            "5",
        ],
    );
    assert!(r.ok(), "{}", r.tail());
    let last = r.stdout.lines().last().unwrap_or_default();
    eprintln!("{last}");
    let x: f32 = last
        .strip_prefix("finetune: data-parallel 2 devices (zero 2), max |Δloss| vs 1 device ")
        .unwrap_or_else(|| panic!("last line {last:?}"))
        .parse()
        .unwrap();
    // As plain data parallelism against one device: the same sums in another order.
    assert!(x < 1e-4, "{last}");
    assert!(r.stdout.contains("finetune: zero 2 over 2 devices (HCCL, simulated): per step 0 all-reduce(s), 3 reduce-scatter(s)"), "{}", r.stdout);
    // Every stage on 2 and 4 ranks through the command line, and ZeRO-3 with per-block
    // checkpointing (each block's weights gathered only while it runs): `BURN_ASCEND_LONG=1`.
    if std::env::var_os("BURN_ASCEND_LONG").is_some() {
        for n in ["2", "4"] {
            for (k, blocks) in [("1", false), ("2", false), ("3", false), ("3", true)] {
                let dir = tempfile::tempdir().unwrap();
                let mut extra = vec![
                    "--device",
                    "sim",
                    "--devices",
                    n,
                    "--zero",
                    k,
                    "--check-ddp",
                    "--steps",
                    "5",
                ];
                if blocks {
                    extra.extend(["--checkpointing", "block"]);
                }
                let r = finetune(dir.path(), &extra);
                assert!(r.ok(), "{}", r.tail());
                let last = r.stdout.lines().last().unwrap_or_default();
                eprintln!("{last}");
                let prefix = format!(
                    "finetune: data-parallel {n} devices (zero {k}), max |Δloss| vs 1 device "
                );
                let x: f32 = last.strip_prefix(&prefix).unwrap().parse().unwrap();
                assert!(x < 1e-4, "{last}");
            }
        }
    }
    // Bad uses: exit 2, one line naming the flag, before any step.
    for (extra, needle) in [
        (&["--device", "sim", "--zero", "1"][..], "invalid --zero: --zero 1 shards the training state over data-parallel ranks: it needs --devices N with N >= 2, got 1"),
        (&["--devices", "2", "--zero", "2"][..], "invalid --zero: --zero 2 needs --device sim|ascend"),
        (&["--device", "sim", "--cp", "2", "--zero", "3"][..], "unsupported: --zero with --cp"),
        (&["--device", "sim", "--devices", "2", "--zero", "4"][..], "--zero <K>"),
        // Per-block checkpointing with data parallelism: only as ZeRO-3's per-block gathering.
        (&["--device", "sim", "--devices", "2", "--zero", "2", "--checkpointing", "block"][..], "unsupported: --checkpointing with data or context parallelism (one device, or --checkpointing block with --devices N --zero 3"),
        (&["--device", "sim", "--devices", "2", "--zero", "3", "--checkpointing", "balanced"][..], "unsupported: --checkpointing with data or context parallelism"),
    ] {
        let r = finetune(tmp.path(), &[extra, &["--steps", "2"][..]].concat());
        assert_eq!(r.code(), Some(2), "{extra:?}: {}", r.tail());
        assert!(r.stderr.contains(needle), "{extra:?}: {}", r.tail());
        assert!(!r.stdout.contains("step "), "{extra:?} ran a step: {}", r.stdout);
    }
}
