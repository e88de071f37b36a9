//! Fine-tune a small gpt-oss / Llama style transformer on packed variable-length batches with
//! learned attention sinks and alternating sliding-window / full causal layers, then sample
//! from it through the paged KV cache.
//!
//! `cargo run --release --example finetune [-- --steps N --data PATH --device cpu --resume
//!  --checkpoint HF_DIR --out DIR --batch-tokens N --seq-len N --lr X --seed N
//!  --stop-after N --no-samples --profile]`
//!
//! With no arguments: a ≈3.0 M-parameter byte-level model on the bundled Shakespeare text,
//! AdamW with warmup + cosine decay and gradient clipping, on CPU. Writes `runs/finetune/`:
//! `config.json` + `model.safetensors` (Hugging Face names), Burn records of the model and
//! the optimizer (`model.mpk`, `optim.mpk`, for `--resume`), `state.json`, `loss.csv` and
//! `loss.png`. `--device sim` trains `Autodiff<Ascend>` on the host simulation of the ACL ABI,
//! `--device ascend` on a real NPU. On CPU the last line is `finetune: loss <first> -> <last>
//! over <steps> steps` (first step's loss, mean of the last ten steps); on `sim` / `ascend` it
//! is followed by `finetune: device <launches> launches, <syncs> syncs, <fallbacks> host
//! fallbacks per step` (means over the steps), and `--profile` prints the dispatch per op.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::backend::{Autodiff, NdArray};
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::FloatDType;
use burn_ascend::backend::{is_available, Ascend, AscendDevice};
use burn_ascend::model::data::{documents_from_text, load_documents, SplitMix, BUNDLED_CORPUS};
use burn_ascend::model::dispatch::{self, DispatchCounts};
use burn_ascend::model::train::{init_model, train, Init, TrainOptions};
use burn_ascend::model::{
    generate_batch, Generator, ModelConfig, Packer, Sampling, Tokenizer, Transformer,
};
use burn_ascend::AttentionBackend;
use indicatif::{ProgressBar, ProgressStyle};

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
    stop_after: Option<usize>,
    profile: bool,
    /// Mixed precision's compute dtype (`--dtype bf16|f16`; `None`: f32 throughout).
    dtype: Option<FloatDType>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        steps: 300,
        device: "cpu".into(),
        data: None,
        resume: false,
        checkpoint: None,
        out: PathBuf::from("runs/finetune"),
        batch_tokens: 1024,
        seq_len: 256,
        lr: 3e-3,
        seed: 42,
        samples: true,
        stop_after: None,
        profile: false,
        dtype: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let num = |v: String, name: &str| -> Result<f64, String> {
            v.parse()
                .map_err(|_| format!("{name} takes a number, got '{v}'"))
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
            "--profile" => a.profile = true,
            "--dtype" => {
                a.dtype = match value("--dtype")?.as_str() {
                    "f32" => None,
                    "bf16" => Some(FloatDType::BF16),
                    "f16" => Some(FloatDType::F16),
                    other => {
                        return Err(format!("--dtype must be f32, bf16 or f16, got '{other}'"))
                    }
                }
            }
            "--stop-after" => {
                a.stop_after = Some(num(value("--stop-after")?, "--stop-after")? as usize)
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown flag '{other}'\n{USAGE}")),
        }
    }
    Ok(a)
}

const USAGE: &str = "finetune [--steps N] [--device cpu|ascend|sim] [--data PATH(.txt|.jsonl)] \
[--resume] [--checkpoint HF_DIR] [--out DIR] [--batch-tokens N] [--seq-len N] [--lr X] \
[--seed N] [--no-samples] [--stop-after N] [--profile] [--dtype f32|bf16|f16]
  --dtype bf16|f16 (sim, ascend): mixed precision, f32 master weights and optimizer state,
    the blocks, attention and output head computing in that dtype
  --profile (sim, ascend): a per-op table of the dispatch (calls, host µs, device ms) per step
  --steps is the whole run's length (the schedule spans it); --resume continues the run in --out
  up to it; --stop-after N stops early (an interrupted run that --resume completes).";

fn main() {
    if let Err(e) = run() {
        eprintln!("finetune: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    match args.device.as_str() {
        "cpu" if args.dtype.is_some() => {
            Err("--dtype bf16|f16 needs --device sim|ascend (NdArray computes in f32 only)".into())
        }
        "cpu" => run_on::<Autodiff<NdArray>>(args, Default::default(), None),
        // The Ascend backend on the host simulation of the ACL ABI (not CANN; slow: its
        // kernels are the CPU reference's).
        "sim" => run_on::<Autodiff<Ascend>>(args, AscendDevice::sim(), Some(AscendDevice::sim())),
        "ascend" => {
            let index =
                burn_ascend::kernels::acl::default_device_id().map_err(|e| e.to_string())?;
            let device = AscendDevice::npu(index as u32);
            is_available(&device)?;
            run_on::<Autodiff<Ascend>>(args, device, Some(device))
        }
        other => Err(format!("unknown device '{other}' (cpu, ascend, sim)")),
    }
}

/// `ascend`: the same device as `device` when it is an `Ascend` one, for the dispatch counters
/// (launches, synchronisations, host fallbacks per step) and `--profile`.
fn run_on<B: AutodiffBackend + AttentionBackend>(
    args: Args,
    device: B::Device,
    ascend: Option<AscendDevice>,
) -> Result<(), String>
where
    B::InnerBackend: AttentionBackend,
{
    B::seed(&device, args.seed);

    let tokenizer = match &args.checkpoint {
        Some(dir) if dir.join("tokenizer.json").exists() => {
            Tokenizer::from_file(&dir.join("tokenizer.json")).map_err(|e| e.to_string())?
        }
        _ => Tokenizer::Bytes,
    };
    let init = if args.resume {
        Init::Resume
    } else if let Some(dir) = &args.checkpoint {
        Init::Checkpoint(dir.clone())
    } else {
        Init::Fresh(ModelConfig::small_byte_model())
    };
    let (model, state) = init_model::<B>(&init, &args.out, &device).map_err(|e| e.to_string())?;
    let model = model.with_compute_dtype(args.dtype);
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
    let mut packer = Packer::new(
        &docs,
        &tokenizer,
        args.batch_tokens,
        args.seq_len,
        args.seed,
    )
    .map_err(|e| e.to_string())?;
    println!(
        "finetune: {} parameters, {} documents ({} tokens), {} tokens per batch, steps {}..{}",
        config.num_params(),
        docs.len(),
        packer.corpus_tokens(),
        args.batch_tokens,
        state.step,
        args.steps
    );
    if state.step >= args.steps {
        return Err(format!(
            "the run in {} already did {} steps; pass a larger --steps to continue it",
            args.out.display(),
            state.step
        ));
    }
    let todo = args.stop_after.unwrap_or(args.steps).min(args.steps) - state.step.min(args.steps);
    let bar = ProgressBar::new(todo as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise} < {eta_precise}] {msg}",
        )
        .expect("template"),
    );
    let started = Instant::now();
    let mut tokens_seen = 0usize;
    let opts = TrainOptions {
        total_steps: args.steps,
        stop_after: args.stop_after,
        lr: args.lr,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: args.seed,
        out: args.out.clone(),
        save_every: 100,
    };
    if args.profile && ascend.is_some() {
        dispatch::start_profile();
    }
    // Counts after each step; a step's delta spans a checkpoint save when one ran before it
    // (every `save_every` steps), and such steps are left out of the means.
    let mut last_counts = ascend.as_ref().map(DispatchCounts::now);
    let mut step_counts: Vec<DispatchCounts> = Vec::new();
    let last_step = args.stop_after.unwrap_or(args.steps).min(args.steps);
    let mut profile = None;
    let (model, state) = train(model, state, args.resume, &mut packer, &opts, |r| {
        if let (Some(dev), Some(last)) = (ascend.as_ref(), last_counts.as_mut()) {
            let now = DispatchCounts::now(dev);
            if r.step == 0 || r.step % opts.save_every.max(1) != 0 {
                step_counts.push(now.since(*last));
            }
            *last = now;
            if args.profile && r.step + 1 == last_step {
                // Before the final checkpoint save, which is not a training step.
                profile = Some(dispatch::stop_profile(dev));
            }
        }
        tokens_seen += r.tokens;
        bar.set_message(format!(
            "loss {:.3}  lr {:.2e}  {:.0} tok/s",
            r.loss,
            r.lr,
            tokens_seen as f64 / started.elapsed().as_secs_f64().max(1e-9)
        ));
        bar.inc(1);
        // Without a terminal the bar is hidden: print a line every 25 steps instead.
        if bar.is_hidden() && (r.step % 25 == 0 || r.step + 1 == r.total_steps) {
            println!(
                "step {:4}/{}  loss {:.4}  lr {:.2e}  {:.0} tok/s",
                r.step + 1,
                r.total_steps,
                r.loss,
                r.lr,
                tokens_seen as f64 / started.elapsed().as_secs_f64().max(1e-9)
            );
        }
    })
    .map_err(|e| e.to_string())?;
    bar.finish();
    let profile = profile.map(|p| dispatch::format_profile(&p, step_counts.len()));
    plot_losses(&state.losses, &args.out.join("loss.png"))?;
    println!(
        "finetune: {:.0} tokens/s, checkpoint in {} (config.json, model.safetensors, model.mpk, \
         optim.mpk, state.json, loss.csv, loss.png)",
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
    if let Some(table) = profile {
        print!("{table}");
    }
    if ascend.is_some() {
        let mean = DispatchCounts::mean(&step_counts);
        let by_op: Vec<String> = burn_ascend::backend::fallback_counts()
            .iter()
            .map(|(op, n)| format!("{op} ×{n}"))
            .collect();
        println!(
            "{}; host fallbacks in the whole run: {}",
            mean.detail(),
            if by_op.is_empty() {
                "none".to_string()
            } else {
                by_op.join(", ")
            }
        );
        println!("{}", mean.line());
    }
    Ok(())
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

/// Continues a few prompts together through the paged KV cache, greedy and nucleus sampling.
fn print_samples<Bk: burn_ascend::AttentionBackend>(
    model: Transformer<Bk>,
    tokenizer: &Tokenizer,
    seed: u64,
) -> Result<(), String> {
    let device = model.embed_tokens.weight.val().device();
    let mut gen = Generator::new(model, 64, 16, &device).map_err(|e| e.to_string())?;
    let prompts = [
        "ROMEO:\n",
        "First Citizen:\nWe are",
        "KING RICHARD II:\nNow",
    ];
    let ids: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| tokenizer.encode(p))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let nucleus = Sampling::TopP {
        top_p: 0.9,
        temperature: 0.8,
    };
    let sampling = [Sampling::Greedy, nucleus, nucleus];
    let run = generate_batch(&mut gen, &ids, 120, &sampling, &mut SplitMix(seed))
        .map_err(|e| e.to_string())?;
    for (i, (prompt, out)) in prompts.iter().zip(&run.generated).enumerate() {
        println!(
            "--- sample {} ({:?}) ---\n{prompt}{}",
            i + 1,
            sampling[i],
            tokenizer.decode(out)
        );
    }
    gen.clear().map_err(|e| e.to_string())
}
