//! Fine-tune a small gpt-oss / Llama style transformer on packed variable-length batches with
//! learned attention sinks and alternating sliding-window / full causal layers, then sample
//! from it through the paged KV cache.
//!
//! `cargo run --release --example finetune [-- --steps N --data PATH --device cpu --resume
//!  --checkpoint HF_DIR --out DIR --batch-tokens N --seq-len N --lr X --seed N]`
//!
//! With no arguments: a ≈3.2 M-parameter byte-level model on the bundled Shakespeare text,
//! AdamW with warmup + cosine decay and gradient clipping, on CPU. Writes `runs/finetune/`:
//! `config.json` + `model.safetensors` (Hugging Face names), Burn records of the model and
//! the optimizer (`model.mpk`, `optim.mpk`, for `--resume`), `state.json`, `loss.csv` and
//! `loss.png`. The last line is `finetune: loss <first> -> <last> over <steps> steps` (first
//! step's loss, mean of the last ten steps).

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::backend::{Autodiff, NdArray};
use burn::module::{AutodiffModule, Module};
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::grad_clipping::GradientClippingConfig;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::model::checkpoint::{load_hf, save_hf};
use burn_ascend::model::data::{documents_from_text, load_documents, SplitMix, BUNDLED_CORPUS};
use burn_ascend::model::schedule::WarmupCosine;
use burn_ascend::model::{
    cross_entropy, sample, Generator, ModelConfig, Packer, Sampling, Tokenizer, Transformer,
};
use indicatif::{ProgressBar, ProgressStyle};

type Inner = NdArray;
type B = Autodiff<Inner>;

struct Args {
    steps: usize,
    device: String,
    data: Option<PathBuf>,
    resume: bool,
    checkpoint: Option<PathBuf>,
    out: PathBuf,
    batch_tokens: usize,
    seq_len: usize,
    lr: f64,
    seed: u64,
    samples: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        steps: 200,
        device: "cpu".into(),
        data: None,
        resume: false,
        checkpoint: None,
        out: PathBuf::from("runs/finetune"),
        batch_tokens: 1024,
        seq_len: 256,
        lr: 2e-3,
        seed: 42,
        samples: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let num = |v: String, name: &str| -> Result<f64, String> {
            v.parse().map_err(|_| format!("{name} takes a number, got '{v}'"))
        };
        match flag.as_str() {
            "--steps" => a.steps = num(value("--steps")?, "--steps")? as usize,
            "--device" => a.device = value("--device")?,
            "--data" => a.data = Some(value("--data")?.into()),
            "--resume" => a.resume = true,
            "--checkpoint" => a.checkpoint = Some(value("--checkpoint")?.into()),
            "--out" => a.out = value("--out")?.into(),
            "--batch-tokens" => {
                a.batch_tokens = num(value("--batch-tokens")?, "--batch-tokens")? as usize
            }
            "--seq-len" => a.seq_len = num(value("--seq-len")?, "--seq-len")? as usize,
            "--lr" => a.lr = num(value("--lr")?, "--lr")?,
            "--seed" => a.seed = num(value("--seed")?, "--seed")? as u64,
            "--no-samples" => a.samples = false,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown flag '{other}'\n{USAGE}")),
        }
    }
    Ok(a)
}

const USAGE: &str = "finetune [--steps N] [--device cpu|ascend|sim] [--data PATH(.txt|.jsonl)] \
[--resume] [--checkpoint HF_DIR] [--out DIR] [--batch-tokens N] [--seq-len N] [--lr X] \
[--seed N] [--no-samples]";

/// What `--resume` needs besides the Burn records.
#[derive(Debug, Default)]
struct TrainState {
    step: usize,
    losses: Vec<f32>,
    total_steps: usize,
}

impl TrainState {
    fn save(&self, dir: &Path) -> std::io::Result<()> {
        let v = serde_json::json!({
            "step": self.step,
            "total_steps": self.total_steps,
            "losses": self.losses,
        });
        std::fs::write(dir.join("state.json"), v.to_string())
    }

    fn load(dir: &Path) -> Result<Self, String> {
        let path = dir.join("state.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("--resume: {}: {e}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        Ok(Self {
            step: v["step"].as_u64().unwrap_or(0) as usize,
            total_steps: v["total_steps"].as_u64().unwrap_or(0) as usize,
            losses: v["losses"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_f64()).map(|x| x as f32).collect())
                .unwrap_or_default(),
        })
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("finetune: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    match args.device.as_str() {
        "cpu" => {}
        "ascend" | "sim" => {
            return Err(format!(
                "unsupported: --device {} needs the Ascend Burn backend, which is not built yet \
                 (the attention ops alone run through aclnn via `burn-ascend run --device sim|npu`)",
                args.device
            ))
        }
        other => return Err(format!("unknown device '{other}' (cpu, ascend, sim)")),
    }
    let device = Default::default();
    B::seed(&device, args.seed);
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();

    // Tokenizer and model: resumed, from a Hugging Face checkpoint, or fresh.
    let hf_dir = args.checkpoint.clone();
    let tokenizer = match &hf_dir {
        Some(dir) if dir.join("tokenizer.json").exists() => {
            Tokenizer::from_file(&dir.join("tokenizer.json")).map_err(|e| e.to_string())?
        }
        _ => Tokenizer::Bytes,
    };
    let mut state = TrainState::default();
    let mut model: Transformer<B> = if args.resume {
        state = TrainState::load(&args.out)?;
        let config = burn_ascend::model::checkpoint::load_config(&args.out)
            .map_err(|e| format!("--resume: {e}"))?;
        Transformer::new(&config, &device)
            .map_err(|e| e.to_string())?
            .load_file(args.out.join("model"), &recorder, &device)
            .map_err(|e| format!("--resume: {e}"))?
    } else if let Some(dir) = &hf_dir {
        load_hf(dir, &device).map_err(|e| e.to_string())?
    } else {
        Transformer::new(&ModelConfig::small_byte_model(), &device).map_err(|e| e.to_string())?
    };
    let config = model.config.clone();
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(format!(
            "tokenizer has {} tokens but the model's vocab_size is {}",
            tokenizer.vocab_size(),
            config.vocab_size
        ));
    }

    let docs = match &args.data {
        Some(p) => load_documents(p).map_err(|e| e.to_string())?,
        None => documents_from_text(BUNDLED_CORPUS),
    };
    let mut packer = Packer::new(&docs, &tokenizer, args.batch_tokens, args.seq_len, args.seed)
        .map_err(|e| e.to_string())?;
    // Replay the batch stream so a resumed run sees the batches it would have seen.
    for _ in 0..state.step {
        packer.next_batch();
    }
    let total_steps = state.step + args.steps;
    state.total_steps = total_steps;
    let schedule = WarmupCosine {
        peak: args.lr,
        floor: args.lr / 10.0,
        warmup: (total_steps / 20).max(1),
        total: total_steps,
    };
    let mut optim = AdamWConfig::new()
        .with_weight_decay(0.1)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
        .init::<B, Transformer<B>>();
    if args.resume {
        let record = recorder
            .load(args.out.join("optim"), &device)
            .map_err(|e| format!("--resume: optimizer state: {e}"))?;
        optim = optim.load_record(record);
    }

    println!(
        "finetune: {} parameters, {} documents ({} tokens), {} tokens per batch, steps {}..{}",
        config.num_params(),
        docs.len(),
        packer.corpus_tokens(),
        args.batch_tokens,
        state.step,
        total_steps
    );
    let bar = ProgressBar::new(args.steps as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise} < {eta_precise}] {msg}",
        )
        .expect("template"),
    );
    let started = Instant::now();
    let mut tokens_seen = 0usize;
    let mut csv = String::new();
    let first_run_step = state.step;
    for step in state.step..total_steps {
        let batch = packer.next_batch();
        let t = batch.tokens.len();
        let tokens = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.tokens, [t]), &device);
        let targets =
            Tensor::<B, 1, Int>::from_data(TensorData::new(batch.targets, [t]), &device);
        let logits = model
            .forward_packed(tokens, &batch.cu_seqlens)
            .map_err(|e| e.to_string())?;
        let loss = cross_entropy(logits, targets);
        let loss_value: f32 = loss.clone().into_scalar();
        if !loss_value.is_finite() {
            return Err(format!("loss became {loss_value} at step {step}"));
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let lr = schedule.lr(step);
        model = optim.step(lr, model, grads);
        state.losses.push(loss_value);
        state.step = step + 1;
        tokens_seen += t;
        let elapsed = started.elapsed().as_secs_f64();
        csv.push_str(&format!("{step},{loss_value},{lr},{t}\n"));
        bar.set_message(format!(
            "loss {loss_value:.3}  lr {lr:.2e}  {:.0} tok/s",
            tokens_seen as f64 / elapsed.max(1e-9)
        ));
        bar.inc(1);
        if (step + 1) % 100 == 0 && step + 1 < total_steps {
            save(&model, &optim, &state, &args.out, &recorder, &csv, first_run_step)?;
            csv.clear();
        }
    }
    bar.finish();
    save(&model, &optim, &state, &args.out, &recorder, &csv, first_run_step)?;
    plot_losses(&state.losses, &args.out.join("loss.png"))?;
    println!(
        "finetune: {:.0} tokens/s, checkpoint in {}",
        tokens_seen as f64 / started.elapsed().as_secs_f64().max(1e-9),
        args.out.display()
    );

    if args.samples {
        print_samples(model.valid(), &tokenizer, args.seed)?;
    }
    let first = state.losses.first().copied().unwrap_or(f32::NAN);
    let tail = &state.losses[state.losses.len().saturating_sub(10)..];
    let last = tail.iter().sum::<f32>() / tail.len().max(1) as f32;
    println!(
        "finetune: loss {first:.4} -> {last:.4} over {} steps",
        state.losses.len()
    );
    Ok(())
}

fn save<O: Optimizer<Transformer<B>, B>>(
    model: &Transformer<B>,
    optim: &O,
    state: &TrainState,
    dir: &Path,
    recorder: &NamedMpkFileRecorder<FullPrecisionSettings>,
    csv: &str,
    first_run_step: usize,
) -> Result<(), String> {
    save_hf(&model.valid(), dir).map_err(|e| e.to_string())?;
    model
        .clone()
        .save_file(dir.join("model"), recorder)
        .map_err(|e| format!("saving model record: {e}"))?;
    recorder
        .record(optim.to_record(), dir.join("optim"))
        .map_err(|e| format!("saving optimizer record: {e}"))?;
    state.save(dir).map_err(|e| e.to_string())?;
    // loss.csv: rewritten from the full curve on a fresh run's first save, appended after.
    let path = dir.join("loss.csv");
    let fresh = first_run_step == 0 && !csv.is_empty() && csv.starts_with("0,");
    let mut text = if fresh || !path.exists() {
        "step,loss,lr,tokens\n".to_string()
    } else {
        std::fs::read_to_string(&path).map_err(|e| e.to_string())?
    };
    text.push_str(csv);
    std::fs::write(&path, text).map_err(|e| e.to_string())
}

/// The loss curve as a PNG (axis labels when a system font is found).
fn plot_losses(losses: &[f32], path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let font = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/System/Library/Fonts/Supplemental/Arial.ttf",
    ]
    .iter()
    .find_map(|p| std::fs::read(p).ok())
    .is_some_and(|bytes| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into()))
            .is_ok()
    });
    let err = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let max = losses.iter().copied().fold(0.0f32, f32::max).max(1e-3);
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if font {
        builder
            .caption("finetune: training loss", ("sans-serif", 24))
            .x_label_area_size(40)
            .y_label_area_size(50);
    }
    let mut chart = builder
        .build_cartesian_2d(0..losses.len().max(1), 0f32..max * 1.05)
        .map_err(|e| err(&e))?;
    let mut mesh = chart.configure_mesh();
    if font {
        mesh.x_desc("step").y_desc("loss (nats/token)");
    } else {
        mesh.disable_x_axis().disable_y_axis();
    }
    mesh.draw().map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(
            losses.iter().enumerate().map(|(i, &l)| (i, l)),
            &BLUE,
        ))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Continues a few prompts through the paged KV cache, greedy and nucleus sampling.
fn print_samples<Bk: burn_ascend::AttentionBackend>(
    model: Transformer<Bk>,
    tokenizer: &Tokenizer,
    seed: u64,
) -> Result<(), String>
where
    Bk: Backend,
{
    let device = model.embed_tokens.weight.val().device();
    let mut gen = Generator::new(model, 64, 16, &device).map_err(|e| e.to_string())?;
    let mut rng = SplitMix(seed);
    let prompts = ["ROMEO:\n", "First Citizen:\nWe are", "KING RICHARD II:\nNow"];
    for (i, prompt) in prompts.iter().enumerate() {
        let sampling = if i == 0 {
            Sampling::Greedy
        } else {
            Sampling::TopP {
                top_p: 0.9,
                temperature: 0.8,
            }
        };
        let ids = tokenizer.encode(prompt).map_err(|e| e.to_string())?;
        let (seq, mut logits) = gen.add(&ids).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for _ in 0..120 {
            let next = sample(&logits, sampling, &mut rng);
            out.push(next);
            logits = gen
                .step(&[seq], &[next])
                .map_err(|e| e.to_string())?
                .remove(0);
        }
        println!(
            "--- sample {} ({sampling:?}) ---\n{prompt}{}",
            i + 1,
            tokenizer.decode(&out)
        );
    }
    gen.clear().map_err(|e| e.to_string())
}
