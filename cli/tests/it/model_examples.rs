//! The `finetune` and `generate` examples as child processes: their sources are compiled into
//! this test binary (so `cargo test --test it` never runs a stale or missing example binary),
//! and a child process of this binary runs one of them on a given command line, exiting as the
//! example's `main` does (0, or 2 with one line on stderr; a panic exits 101 through the test
//! harness, an abort or a kill ends it by a signal).

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../../examples/finetune.rs"]
mod finetune;
#[allow(dead_code)]
#[path = "../../examples/generate.rs"]
mod generate;

/// Which example a child runs (set only in children).
const CHILD: &str = "BURN_ASCEND_EXAMPLE_CHILD";
/// Its arguments, separated by U+001F.
const ARGS: &str = "BURN_ASCEND_EXAMPLE_ARGS";

/// The entry point of the child processes; in the test process itself it returns at once.
#[test]
fn example_child_entry() {
    let Ok(which) = std::env::var(CHILD) else {
        return;
    };
    let args = std::env::var(ARGS).unwrap_or_default();
    let argv: Vec<std::ffi::OsString> = std::iter::once(which.clone())
        .chain(
            args.split('\u{1f}')
                .filter(|a| !a.is_empty())
                .map(String::from),
        )
        .map(Into::into)
        .collect();
    let result = match which.as_str() {
        "finetune" => finetune::run(argv),
        "generate" => generate::run(argv),
        other => Err(format!("no example {other}")),
    };
    if let Err(e) = result {
        eprintln!("{which}: {e}");
        std::process::exit(2);
    }
    std::process::exit(0);
}

/// How a child run ended.
#[derive(Debug)]
pub struct ExampleRun {
    /// `None` when it was still running at the time limit (then killed).
    pub status: Option<ExitStatus>,
    /// Whether the test killed it on the kill hook's line.
    pub killed_at_hook: bool,
    pub stdout: String,
    pub stderr: String,
    #[allow(dead_code)]
    pub elapsed: Duration,
}

impl ExampleRun {
    /// The exit code, `None` for a signal or a hang.
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// The signal that ended it, if any.
    pub fn signal(&self) -> Option<i32> {
        self.status.and_then(|s| s.signal())
    }

    /// Exited 0.
    pub fn ok(&self) -> bool {
        self.code() == Some(0)
    }

    /// The last lines of both streams, for failure messages.
    pub fn tail(&self) -> String {
        let tail = |s: &str| {
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(8)..].join("\n")
        };
        format!(
            "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status,
            tail(&self.stdout),
            tail(&self.stderr)
        )
    }
}

/// Runs example `which` (`finetune` or `generate`) on `args` in a child process with the
/// extra environment `env`, killed after `limit`; with `kill_on_hook`, SIGKILLed as soon as it
/// prints the kill hook's line (see `burn_ascend_model::run_state::durable`).
pub fn run_example(
    which: &str,
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
    kill_on_hook: bool,
) -> ExampleRun {
    let mut cmd = example_command(which, args, env);
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = child.stderr.take().unwrap();
    let (hook_tx, hook_rx) = mpsc::channel();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.starts_with("burn-ascend: stopped before file op") {
                let _ = hook_tx.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let mut killed_at_hook = false;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if kill_on_hook && hook_rx.try_recv().is_ok() {
            // SIGKILL, as a crash or the OOM killer would end it.
            child.kill().unwrap();
            killed_at_hook = true;
            break Some(child.wait().unwrap());
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    ExampleRun {
        status,
        killed_at_hook,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        elapsed: start.elapsed(),
    }
}

/// Runs example `which` in a child process with the extra environment `env`; the test
/// decides when to wait for it (several at once: one process per rank).
pub fn spawn_example(which: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    example_command(which, args, env).spawn().unwrap()
}

/// Collects a child of [`spawn_example`], killed after `limit`.
pub fn finish_example(mut child: std::process::Child, limit: Duration) -> ExampleRun {
    let start = Instant::now();
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    ExampleRun {
        status,
        killed_at_hook: false,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        elapsed: start.elapsed(),
    }
}

/// The command running example `which` on `args` with the extra environment `env`.
fn example_command(which: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "model_examples::example_child_entry",
        "--exact",
        "--test-threads=1",
        "--nocapture",
        "-q",
    ])
    .env(CHILD, which)
    .env(ARGS, args.join("\u{1f}"))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// A tiny Llama-style model (hidden 16, 1 layer, byte vocabulary) saved as a Hugging Face
/// checkpoint in `dir`, from a fixed seed so that every run of the test starts from the same
/// weights.
pub fn tiny_checkpoint(dir: &Path) {
    use burn::backend::NdArray;
    use burn::module::{Module, Param};
    use burn::tensor::{Tensor, TensorData};
    use burn_ascend_model::load::config::{LayerType, RopeScaling};
    use burn_ascend_model::{ModelConfig, Transformer};
    let c = ModelConfig {
        vocab_size: 256,
        hidden_size: 16,
        intermediate_size: 24,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        head_dim: 8,
        sliding_window: None,
        layer_types: vec![LayerType::Full],
        attention_sinks: false,
        attention_bias: false,
        attention_output_bias: false,
        mlp_bias: false,
        qk_norm: false,
        rope_theta: 10_000.0,
        rope_scaling: RopeScaling::Default,
        rms_norm_eps: 1e-5,
        tie_word_embeddings: true,
        attention_dropout: 0.0,
        moe: None,
    };
    let device = Default::default();
    let model = Transformer::<NdArray>::new(&c, &device).unwrap();
    // Replace Burn's random initialisation (its global generator is shared with the other
    // tests) by a seeded one.
    let mut rng = crate::common::Rng(0x5eed);
    let model = model.map(&mut Reinit(&mut rng));
    burn_ascend_model::model::hf_checkpoint::save_hf(&model, dir).unwrap();

    struct Reinit<'a>(&'a mut crate::common::Rng);
    impl<B: burn::tensor::backend::Backend> burn::module::ModuleMapper<B> for Reinit<'_> {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, t, mapper) = p.consume();
            let shape = t.dims();
            let n: usize = shape.iter().product();
            let v = self.0.vec_f32(n, 0.3);
            let t = Tensor::from_data(TensorData::new(v, shape), &t.device());
            Param::from_mapped_value(id, t, mapper)
        }
    }
}

/// Rewrites the f32 tensor `name` of `dir/model.safetensors` through `edit`.
pub fn patch_tensor(dir: &Path, name: &str, edit: impl FnOnce(&mut Vec<f32>)) {
    use safetensors::{tensor::TensorView, Dtype, SafeTensors};
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec()))
        .collect();
    let t = tensors.iter_mut().find(|t| t.0 == name).unwrap();
    let mut values: Vec<f32> =
        t.2.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
    edit(&mut values);
    t.2 = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// Rewrites `dir/config.json` through `edit`.
pub fn patch_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

/// The example's first step's learning rate, as it prints it (`step    1/N  loss …  lr X`).
fn first_lr(run: &ExampleRun) -> String {
    let line = run
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("step    1/"))
        .unwrap_or_else(|| panic!("no first step line: {}", run.tail()));
    line.split("lr ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `finetune --checkpoint` (a pretrained model) trains at a fine-tune's learning rate unless
/// `--lr` is given: 2e-5 full, 2e-4 LoRA, warmed up linearly over 10 % of the steps (the first
/// of 20 steps at half the peak); from scratch the toy's 3e-3.
#[test]
fn finetune_from_a_checkpoint_starts_at_a_fine_tunes_learning_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("start");
    tiny_checkpoint(&ckpt);
    let data = tmp.path().join("data.txt");
    std::fs::write(
        &data,
        &burn_ascend_model::load::data::BUNDLED_CORPUS[..3000],
    )
    .unwrap();
    let run = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let mut args = vec![
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
        let r = run_example("finetune", &args, &[], Duration::from_secs(120), false);
        assert!(r.ok(), "{name}: {}", r.tail());
        first_lr(&r)
    };
    let c = ckpt.to_str().unwrap();
    for (name, extra, want) in [
        ("full", &["--checkpoint", c, "--steps", "3"][..], "2.00e-5"),
        (
            "lora",
            &["--checkpoint", c, "--steps", "20", "--lora-rank", "2"],
            "1.00e-4",
        ),
        (
            "given",
            &["--checkpoint", c, "--steps", "3", "--lr", "1e-3"],
            "1.00e-3",
        ),
        (
            "scratch",
            &[
                "--steps",
                "3",
                "--model-config",
                &format!("{c}/config.json"),
            ],
            "3.00e-3",
        ),
    ] {
        assert_eq!(run(name, extra), want, "{name}");
    }
}
