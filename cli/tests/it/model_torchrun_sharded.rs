//! ZeRO's sharded checkpoints under a launch of one process per rank: each process writes its
//! own shard, the published checkpoint lists every shard, and a ZeRO-3 run saved by 4 processes
//! resumes on 2 — each reading only the ranges it owns — continuing the 4-process run's losses.

use std::path::Path;

use burn_ascend_model::run_state::published::Published;
use burn_ascend_model::run_state::shards::shard_file_name;
use burn_ascend_model::train::TrainState;

use crate::model_examples::ExampleRun;
use crate::model_torchrun::{all_ok, args, assert_close, launch, losses, setup};

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
}
