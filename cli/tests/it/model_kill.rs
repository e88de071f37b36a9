//! The kill test: a real `finetune` child process is SIGKILLed before, between and after each file
//! operation of its checkpoint saves (found by the counting hook of
//! `burn_ascend_model::run_state::durable`), then `--resume`d (or, when it had published nothing
//! yet, started again); every run must end with the uninterrupted run's loss curve and a checkpoint
//! bit-identical to its (every file's size and CRC-32 in the manifests equal), the step it resumed
//! from being that of a complete checkpoint.
//!
//! The run: a 1-layer, hidden-16 byte model from a seeded checkpoint, 2 steps of 32 tokens,
//! a save after each step. `cargo test` kills it at every one of its file operations (about
//! 60 kill points); `BURN_ASCEND_LONG=1` runs 4 steps (about 120).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::model_examples::{run_example, tiny_checkpoint, ExampleRun};
use burn_ascend_model::run_state::durable::{COUNT_FILE_OPS, KILL_AT_FILE_OP};
use burn_ascend_model::run_state::published::{Published, CHECKPOINTS};

const LIMIT: Duration = Duration::from_secs(60);

fn finetune_args(start: &Path, data: &Path, out: &Path, steps: usize, resume: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "--checkpoint",
        start.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        &steps.to_string(),
        "--save-every",
        "1",
        "--batch-tokens",
        "32",
        "--seq-len",
        "16",
        "--seed",
        "7",
        "--no-samples",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if resume {
        a.push("--resume".into());
    }
    a
}

fn run(args: &[String], env: &[(&str, &str)], kill: bool) -> ExampleRun {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_example("finetune", &args, env, LIMIT, kill)
}

/// The step range `finetune` announces (`steps <from>..<to>`).
fn start_step(r: &ExampleRun) -> usize {
    let line = r.stdout.lines().find(|l| l.contains(" steps ")).unwrap();
    let range = line.rsplit(" steps ").next().unwrap();
    range.split("..").next().unwrap().parse().unwrap()
}

/// The folder's entries (recursively, names relative to `dir`), sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_finetune_killed_at_any_file_operation_of_its_saves_resumes_to_the_uninterrupted_run() {
    let long = std::env::var_os("BURN_ASCEND_LONG").is_some();
    let steps = if long { 4 } else { 2 };
    let started = Instant::now();
    // In memory where the system has a tmpfs: a SIGKILL leaves the page cache as it was, so
    // the test needs no disk, and 2 × 60 runs of 30 fsyncs each would wait on one.
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let start = tmp.path().join("start");
    tiny_checkpoint(&start);
    let data = tmp.path().join("data.txt");
    std::fs::write(
        &data,
        &burn_ascend_model::load::data::BUNDLED_CORPUS[..3000],
    )
    .unwrap();

    // The uninterrupted run, listing its file operations.
    let reference_out = tmp.path().join("reference");
    let reference = run(
        &finetune_args(&start, &data, &reference_out, steps, false),
        &[(COUNT_FILE_OPS, "1")],
        false,
    );
    assert!(reference.ok(), "{}", reference.tail());
    let ops = reference
        .stderr
        .lines()
        .filter(|l| l.starts_with("burn-ascend: file op "))
        .count();
    assert!(ops >= 25 * steps, "only {ops} file operations listed");
    let reference_csv = std::fs::read_to_string(reference_out.join("loss.csv")).unwrap();
    assert_eq!(reference_csv.lines().count(), steps + 1, "{reference_csv}");
    let reference_ckpt = Published::open(&reference_out).unwrap();
    assert_eq!(reference_ckpt.step(), steps);
    let reference_listing = listing(&reference_out);

    // Kill point k: stopped before file op k (k = ops + 1: after the last one, the run ends).
    let mut last_published = 0;
    let mut resumed_from = vec![0usize; steps + 1];
    for k in 1..=ops + 1 {
        let out = tmp.path().join(format!("k{k}"));
        let at = k.to_string();
        let killed = run(
            &finetune_args(&start, &data, &out, steps, false),
            &[(KILL_AT_FILE_OP, &at)],
            true,
        );
        if k <= ops {
            assert!(
                killed.killed_at_hook && killed.signal() == Some(9),
                "kill point {k}: not stopped at the hook\n{}",
                killed.tail()
            );
        } else {
            assert!(killed.ok(), "kill point {k}:\n{}", killed.tail());
        }
        // What is published is a whole checkpoint, and publication only moves forward.
        let published = match Published::open(&out) {
            Ok(p) => p.step(),
            Err(e) => {
                assert!(
                    e.to_string().contains("no published checkpoint"),
                    "kill point {k}: {e}"
                );
                0
            }
        };
        assert!(
            published >= last_published,
            "kill point {k}: published step went back from {last_published} to {published}"
        );
        last_published = published;
        // Continue it.
        let again = if published == 0 {
            // Nothing published: the user starts over in the same folder.
            run(
                &finetune_args(&start, &data, &out, steps, false),
                &[],
                false,
            )
        } else {
            run(&finetune_args(&start, &data, &out, steps, true), &[], false)
        };
        if published == steps {
            // The run was complete: --resume refuses to do nothing, naming the flag to change.
            assert_eq!(again.code(), Some(2), "kill point {k}:\n{}", again.tail());
            assert!(
                again.stderr.contains("pass a larger --steps"),
                "kill point {k}:\n{}",
                again.tail()
            );
        } else {
            assert!(again.ok(), "kill point {k}:\n{}", again.tail());
            assert_eq!(start_step(&again), published, "kill point {k}");
        }
        resumed_from[published] += 1;
        let csv = std::fs::read_to_string(out.join("loss.csv")).unwrap();
        assert_eq!(csv, reference_csv, "kill point {k}: another loss curve");
        // Bit-identical files; Burn's records hold the parameters' ids, random per process,
        // so `model.mpk` and `optim.mpk` are compared through what they produce: the weights
        // of the next steps.
        let ckpt = Published::open(&out).unwrap();
        assert_eq!(ckpt.step(), steps);
        for (name, entry) in &reference_ckpt.manifest.files {
            if !name.ends_with(".mpk") {
                assert_eq!(
                    ckpt.manifest.files.get(name),
                    Some(entry),
                    "kill point {k}: {name} differs from the uninterrupted run's"
                );
            }
        }
        // No leftovers: the same files as the uninterrupted run, the last two checkpoints.
        let mut names = listing(&out);
        names.retain(|n| n != "loss.png");
        let mut expected = reference_listing.clone();
        expected.retain(|n| n != "loss.png");
        assert_eq!(names, expected, "kill point {k}");
        std::fs::remove_dir_all(&out).unwrap();
    }
    let dirs = std::fs::read_dir(reference_out.join(CHECKPOINTS))
        .unwrap()
        .count();
    assert_eq!(dirs, 2.min(steps), "the last two checkpoints are kept");
    eprintln!(
        "kill test: {} kill points over {ops} file operations of {steps} saves; resumed from \
         step 0..={steps}: {resumed_from:?}; {:.1} s",
        ops + 1,
        started.elapsed().as_secs_f64()
    );
    assert!(resumed_from.iter().all(|&n| n > 0), "{resumed_from:?}");
}

#[test]
fn resume_refuses_a_truncated_mixed_or_mislabelled_checkpoint_naming_the_file() {
    use burn_ascend_model::run_state::published::publish;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let files = |step: usize| -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("model.safetensors", vec![step as u8; 64]),
            ("optim.mpk", vec![7; 32]),
            ("state.json", format!("{{\"step\":{step}}}").into_bytes()),
        ]
    };
    let err = |out: &Path| Published::open(out).unwrap_err().to_string();
    assert!(err(out).contains("no published checkpoint"), "{}", err(out));
    publish(out, 1, &files(1)).unwrap();
    publish(out, 2, &files(2)).unwrap();
    let saved = Published::open(out).unwrap();
    assert_eq!(saved.step(), 2);
    assert_eq!(saved.read("model.safetensors").unwrap(), vec![2u8; 64]);
    // The last two are kept, the exports are the published files.
    publish(out, 3, &files(3)).unwrap();
    let mut dirs: Vec<String> = std::fs::read_dir(out.join(CHECKPOINTS))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs, ["step-000002", "step-000003"]);
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        vec![3u8; 64]
    );
    let dir = out.join(CHECKPOINTS).join("step-000003");
    let step2 = out.join(CHECKPOINTS).join("step-000002");
    let intact = std::fs::read(dir.join("model.safetensors")).unwrap();
    // Truncated.
    std::fs::write(dir.join("model.safetensors"), &intact[..40]).unwrap();
    let e = err(out);
    assert!(
        e.contains("step-000003/model.safetensors: 40 bytes but manifest.json says 64"),
        "{e}"
    );
    // Mixed: the file of another save, same size.
    std::fs::copy(
        step2.join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    let e = err(out);
    assert!(
        e.contains("model.safetensors: CRC-32") && e.contains("from another save"),
        "{e}"
    );
    std::fs::write(dir.join("model.safetensors"), &intact).unwrap();
    Published::open(out).unwrap();
    // A file the manifest does not list.
    std::fs::write(dir.join("model.mpk"), b"stray").unwrap();
    let e = err(out);
    assert!(e.contains("model.mpk: not listed in manifest.json"), "{e}");
    std::fs::remove_file(dir.join("model.mpk")).unwrap();
    // A missing file.
    std::fs::remove_file(dir.join("optim.mpk")).unwrap();
    let e = err(out);
    assert!(e.contains("step-000003/optim.mpk"), "{e}");
    std::fs::write(dir.join("optim.mpk"), vec![7; 32]).unwrap();
    // A manifest of another step, of another version, missing.
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        manifest.replace("\"step\": 3", "\"step\": 2"),
    )
    .unwrap();
    let e = err(out);
    assert!(
        e.contains("manifest.json: step 2 but the folder is that of step 3"),
        "{e}"
    );
    std::fs::write(
        dir.join("manifest.json"),
        manifest.replace("\"version\": 1", "\"version\": 9"),
    )
    .unwrap();
    let e = err(out);
    assert!(
        e.contains("manifest.json: format") && e.contains("version 9"),
        "{e}"
    );
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    let e = err(out);
    assert!(e.contains("step-000003/manifest.json"), "{e}");
    // A run started over in the folder: its first save unpublishes and replaces the old run.
    publish(out, 1, &files(1)).unwrap();
    let saved = Published::open(out).unwrap();
    assert_eq!(saved.step(), 1);
    assert_eq!(saved.read("model.safetensors").unwrap(), vec![1u8; 64]);
    let mut dirs: Vec<String> = std::fs::read_dir(out.join(CHECKPOINTS))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs, ["step-000001"]);
    // A pointer that names no checkpoint.
    std::fs::write(out.join("LATEST"), "../elsewhere").unwrap();
    let e = err(out);
    assert!(e.contains("LATEST: must name a checkpoint"), "{e}");
}
