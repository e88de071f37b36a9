//! ZeRO's sharded checkpoints under a launch of one process per rank: each process writes its
//! own shard, the published checkpoint lists every shard, and a ZeRO-3 run saved by 4 processes
//! resumes on 2 — each reading only the ranges it owns — continuing the 4-process run's losses.

use std::path::Path;

use burn_ascend_model::run_state::published::Published;
use burn_ascend_model::run_state::shards::shard_file_name;
use burn_ascend_model::train::TrainState;

use crate::model_examples::ExampleRun;
use crate::model_torchrun::{all_ok, args, assert_close, launch, losses, run_alone, setup, LIMIT};

/// Per rank of `runs`: (sharded state held, whole, shard written, read at resume, VmHWM kB)
/// from its `finetune: rank R of N:` line.
fn memory(runs: &[ExampleRun]) -> Vec<[u64; 5]> {
    runs.iter()
        .enumerate()
        .map(|(r, run)| {
            let line = run
                .stderr
                .lines()
                .find(|l| l.starts_with(&format!("finetune: rank {r} of ")))
                .unwrap_or_else(|| panic!("rank {r}: no memory line:\n{}", run.stderr));
            let numbers: Vec<u64> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            // rank, N, held, whole, written, read, AdamW state, VmHWM.
            assert_eq!(numbers.len(), 8, "{line}");
            eprintln!("{line}");
            [numbers[2], numbers[3], numbers[4], numbers[5], numbers[7]]
        })
        .collect()
}

fn published(out: &Path) -> Published {
    Published::open(out).unwrap()
}

#[test]
fn zero_three_saved_by_four_processes_resumes_on_two_with_the_four_process_losses() {
    let tmp = tempfile::tempdir().unwrap();
    let (ckpt, data) = setup(tmp.path());
    let zero = ["--zero", "3", "--save-every", "2"];
    // The uninterrupted run on 4 processes.
    let whole = tmp.path().join("whole");
    let runs = launch(&args(&ckpt, &data, &whole, 4, &zero), 4, 4, &[]);
    all_ok(&runs);
    let want = losses(&whole);
    // The same run stopped after its step-2 checkpoint.
    let out = tmp.path().join("out");
    let cut = [&zero[..], &["--stop-after", "2"]].concat();
    let runs = launch(&args(&ckpt, &data, &out, 4, &cut), 4, 4, &[]);
    all_ok(&runs);
    let saved = published(&out);
    assert_eq!(saved.step(), 2);
    let layout = saved.manifest.zero.clone().expect("a sharded checkpoint");
    assert_eq!((layout.stage, layout.ranks, layout.adam_steps), (3, 4, 2));
    for r in 0..4 {
        let entry = &saved.manifest.files[&shard_file_name(r, 4)];
        assert!(entry.bytes > 0, "rank {r}'s shard");
    }
    // No whole optimizer record or model record: only the export of the weights.
    for whole_state in ["optim.mpk", "model.mpk"] {
        assert!(
            !saved.manifest.files.contains_key(whole_state),
            "{whole_state}"
        );
    }
    assert!(saved.manifest.files.contains_key("model.safetensors"));
    let saved_by_four = memory(&runs);
    // Resumed on 2 processes: each takes its ranges of the 4 shards and 2 of the 4 batches of
    // each global batch.
    let resume = [&zero[..], &["--resume"]].concat();
    let runs = launch(&args(&ckpt, &data, &out, 4, &resume), 2, 2, &[]);
    all_ok(&runs);
    let got = losses(&out);
    let gap = got[2..]
        .iter()
        .zip(&want[2..])
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    eprintln!("resumed on 2 vs 4 processes: {got:?} vs {want:?}, max |Δloss| {gap:.3e}");
    assert_close(&got[..2], &want[..2], 0.0, "the saved steps");
    assert_close(&got[2..], &want[2..], 1e-5, "resumed on 2 vs 4 processes");
    let resumed = published(&out);
    assert_eq!(resumed.step(), 4);
    assert_eq!(resumed.manifest.zero.as_ref().unwrap().ranks, 2);
    let state = TrainState::load(&resumed.dir).unwrap();
    assert_eq!(state.devices, 4, "the global batch is still 4 batches");
    // No process held, wrote or read the whole sharded state: a quarter (4 ranks) or a half
    // (2 ranks) of it, plus each unit's padding.
    let resumed_on_two = memory(&runs);
    for (ranks, rows) in [(4, &saved_by_four), (2, &resumed_on_two)] {
        for (r, &[held, whole, written, read, _]) in rows.iter().enumerate() {
            let share = whole / ranks;
            assert!(
                held >= share && held <= share + 4 * 3 * 4 * 8,
                "{ranks} ranks, rank {r}: held {held} B of {whole} B"
            );
            assert!(
                written <= held,
                "rank {r}: wrote {written} B, held {held} B"
            );
            assert!(read <= held, "rank {r}: read {read} B, held {held} B");
        }
    }
    for (r, row) in resumed_on_two.iter().enumerate() {
        assert!(row[3] > 0, "rank {r} of 2 read nothing at resume");
    }
    // Context parallelism has no use for the shards: refused naming --zero, nothing written.
    let mut a = args(
        &ckpt,
        &data,
        &out,
        6,
        &["--cp", "2", "--devices", "4", "--resume"],
    );
    let at = a.iter().position(|s| s == "sim").unwrap();
    a[at] = "cpu".into();
    let r = run_alone(&a);
    assert_eq!(r.code(), Some(2), "{}", r.tail());
    let line = r.stderr.trim().lines().last().unwrap_or_default();
    assert!(
        line.contains("invalid --zero") && line.contains("holds a ZeRO-sharded training state"),
        "{line}"
    );
    assert_eq!(published(&out).step(), 4);
}

/// The file operations (`BURN_ASCEND_COUNT_FILE_OPS`) of `stderr` that touch `name`: (op
/// number, what).
fn ops_on(stderr: &str, name: &str) -> Vec<(usize, String)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("burn-ascend: file op "))
        .filter(|l| l.ends_with(name))
        .map(|l| {
            let mut w = l.split_whitespace();
            let n = w.next().unwrap().parse().unwrap();
            (n, w.next().unwrap().to_string())
        })
        .collect()
}

#[test]
fn a_rank_killed_mid_save_leaves_the_previous_checkpoint_published_and_the_restart_continues() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};

    use crate::model_examples::{finish_example, spawn_example};
    use crate::model_torchrun::{free_port, torchrun_vars};

    let tmp = tempfile::tempdir().unwrap();
    let (ckpt, data) = setup(tmp.path());
    let zero = ["--zero", "2", "--save-every", "2", "--resume"];
    // The uninterrupted run, rank 1 listing its file operations.
    let whole = tmp.path().join("whole");
    let a = args(&ckpt, &data, &whole, 4, &zero);
    let runs = launch(&a, 2, 2, &[("BURN_ASCEND_COUNT_FILE_OPS", "1")]);
    all_ok(&runs);
    let want = losses(&whole);
    // Rank 1's only file operations: its shard of each save, written then fsynced.
    let shard = shard_file_name(1, 2);
    let ops = ops_on(&runs[1].stderr, &shard);
    let kinds: Vec<&str> = ops.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(kinds, ["write", "fsync", "write", "fsync"], "{ops:?}");
    // Rank 1 dies just before fsyncing its shard of the second save (the file written, not
    // durable); rank 0 has written its own files and waits for rank 1's word.
    let out = tmp.path().join("out");
    let a = args(&ckpt, &data, &out, 4, &zero);
    let argv: Vec<&str> = a.iter().map(String::as_str).collect();
    let port = free_port();
    let kill_at = ops[3].0.to_string();
    let mut children: Vec<_> = (0..2)
        .map(|r| {
            let mut vars = torchrun_vars(r, 2, 2, port);
            if r == 1 {
                vars.push(("BURN_ASCEND_KILL_AT_FILE_OP".into(), kill_at.clone()));
            }
            let env: Vec<(&str, &str)> =
                vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            spawn_example("finetune", &argv, &env)
        })
        .collect();
    let mut rank1 = children.pop().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let err = rank1.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.starts_with("burn-ascend: stopped before file op") {
                let _ = tx.send(line);
            }
        }
    });
    let line = rx
        .recv_timeout(LIMIT)
        .expect("rank 1 reached the kill hook");
    assert!(line.contains("fsync") && line.contains(&shard), "{line}");
    rank1.kill().unwrap();
    let _ = rank1.wait();
    let killed_at = Instant::now();
    let r0 = finish_example(children.pop().unwrap(), LIMIT);
    assert_eq!(r0.code(), Some(2), "{}", r0.tail());
    assert!(!r0.stderr.contains("panicked"), "{}", r0.stderr);
    let last = r0.stderr.trim().lines().last().unwrap();
    assert!(last.contains("rank 1"), "{last}");
    assert!(killed_at.elapsed() < Duration::from_secs(60));
    // Nothing half-published: LATEST still names the first save, whole; the second's folder
    // has no manifest.
    let saved = published(&out);
    assert_eq!(saved.step(), 2);
    let second = saved.dir.parent().unwrap().join("step-000004");
    assert!(second.join(shard_file_name(0, 2)).exists());
    assert!(!second.join("manifest.json").exists());
    // The same command line (torchrun's restart) resumes it and ends with the uninterrupted
    // run's losses.
    let runs = launch(&a, 2, 2, &[]);
    all_ok(&runs);
    assert_close(&losses(&out), &want, 1e-6, "restarted vs uninterrupted");
    assert_eq!(published(&out).step(), 4);
}

#[test]
fn lora_under_zero_saves_the_adapters_shards_and_resumes_on_another_world_size() {
    let tmp = tempfile::tempdir().unwrap();
    let (ckpt, data) = setup(tmp.path());
    let flags = ["--lora-rank", "2", "--zero", "2", "--save-every", "2"];
    let whole = tmp.path().join("whole");
    let runs = launch(&args(&ckpt, &data, &whole, 4, &flags), 2, 2, &[]);
    all_ok(&runs);
    let out = tmp.path().join("out");
    let cut = [&flags[..], &["--stop-after", "2"]].concat();
    all_ok(&launch(&args(&ckpt, &data, &out, 4, &cut), 2, 2, &[]));
    let saved = published(&out);
    // The adapters' export and one shard per rank of the adapters' master weights and moments.
    assert!(saved
        .manifest
        .files
        .contains_key("adapter_model.safetensors"));
    let layout = saved.manifest.zero.clone().unwrap();
    assert_eq!(layout.ranks, 2);
    assert!(layout.units.iter().all(|u| u.name.starts_with("layers.")));
    // Resumed on 4 processes: a count the 2-rank global batch cannot be split over, so each
    // rank takes one batch (4 per step from now on) — it continues, from the exact state.
    let resume = [&flags[..], &["--resume"]].concat();
    all_ok(&launch(&args(&ckpt, &data, &out, 4, &resume), 4, 4, &[]));
    let got = losses(&out);
    assert_close(&got[..2], &losses(&whole)[..2], 0.0, "the saved steps");
    assert!(got[2..].iter().all(|l| l.is_finite()), "{got:?}");
    assert_eq!(published(&out).manifest.zero.unwrap().ranks, 4);
    // On the saved count it continues the uninterrupted run exactly.
    let again = tmp.path().join("again");
    all_ok(&launch(&args(&ckpt, &data, &again, 4, &cut), 2, 2, &[]));
    all_ok(&launch(&args(&ckpt, &data, &again, 4, &resume), 2, 2, &[]));
    assert_close(
        &losses(&again),
        &losses(&whole),
        1e-6,
        "LoRA resumed vs uninterrupted",
    );
}

#[test]
fn threads_of_one_process_shard_their_checkpoint_too_and_per_block_zero_three_reshards_four_to_two()
{
    let tmp = tempfile::tempdir().unwrap();
    let (ckpt, data) = setup(tmp.path());
    let run = |out: &Path, devices: &str, extra: &[&str]| {
        let flags = [
            &[
                "--devices",
                devices,
                "--zero",
                "3",
                "--checkpointing",
                "block",
            ][..],
            &["--save-every", "2"],
            extra,
        ]
        .concat();
        let a = args(&ckpt, &data, out, 4, &flags);
        let r = run_alone(&a);
        assert!(r.ok(), "{}", r.tail());
    };
    let whole = tmp.path().join("whole");
    run(&whole, "4", &[]);
    let out = tmp.path().join("out");
    run(&out, "4", &["--stop-after", "2"]);
    let saved = published(&out);
    let layout = saved.manifest.zero.clone().unwrap();
    assert_eq!((layout.stage, layout.ranks), (3, 4));
    run(&out, "2", &["--resume"]);
    let (got, want) = (losses(&out), losses(&whole));
    assert_close(&got[..2], &want[..2], 0.0, "the saved steps");
    assert_close(&got[2..], &want[2..], 1e-5, "2 threads resumed vs 4");
    assert_eq!(published(&out).manifest.zero.unwrap().ranks, 2);
}
