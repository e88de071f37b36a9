//! Serve several prompts at once through the paged KV cache: each prompt is prefilled, then all
//! sequences decode together on the paged cache. A model with sinks or sliding windows runs
//! fused inference attention (`aclnnFusedInferAttentionScoreV4`: sinks as its
//! `learnableSink`, windows as masks) for both; one whose sinks FIA cannot take (head dim not
//! 64 or 128, or a CANN without V4) runs prompt / incremental attention with the sinks on a
//! placeholder token's `pseShift`. The run prints which (`generate: attention …`).
//!
//! `cargo run --release --example generate [-- --checkpoint DIR --prompt TEXT… --greedy
//!  --max-new N --top-p P --temperature T --seed N --block-size N --device cpu|sim|ascend
//!  --check --attend-path fused|prompt-incre --chat --graph --dtype f32|bf16|f16]`
//!
//! `--prompt` (repeatable) replaces the built-in prompts; `--greedy` decodes every prompt
//! greedily (otherwise even prompts are greedy, odd ones top-p). A sequence stops at the
//! checkpoint's end-of-sequence token (`eos_token_id` of `generation_config.json`, else of
//! `config.json`, as transformers' `generate`). `--chat` wraps each prompt as a user's message
//! in the checkpoint's chat template (`chat_template.jinja` or `tokenizer_config.json`'s
//! `chat_template`) with the assistant's generation prompt, and also stops at the tokenizer's
//! `eos_token` (an instruct model's end of turn).
//!
//! `--attend-path` forces one of the two paths (to compare them).
//!
//! `--graph` (Ascend devices only; refused on `--device cpu`, naming the flag) decodes through
//! a captured ACL graph: the decode step of the batch is captured once and replayed per token
//! as one launch, its inputs (token ids, positions, cache slots, block table, window masks)
//! written into the graph's device buffers and each layer's attention re-issued with the
//! sequences' cached lengths (a task-group update, recorded, not run) before each replay; it
//! prints `generate: decode launches per token <x>` (1 when every step is a replay) with the
//! uploads and attention updates per token, and produces the tokens of the eager path. It
//! needs `--dtype bf16` (or `f16`): CANN's fused inference attention takes no f32 query, so an
//! f32 model is refused with `--graph`.
//!
//! `--dtype bf16|f16` (sim, ascend) keeps the KV caches and attention in that dtype, the
//! projections in the model's, as served on an NPU; with the default f32, prompt, incremental
//! and fused inference attention run the backend's counted composite on the device (CANN's ops
//! take no f32).
//!
//! Loads `runs/finetune` (written by the `finetune` example) unless `--checkpoint` names
//! another folder (ours or a Hugging Face `llama`, `qwen2`, `qwen3` or `mistral` one, with
//! `tokenizer.json` when it has one). `--check` recomputes every full sequence in one packed varlen forward and prints
//! `generate: cached vs full max |Δlogit| <x>`; it fails above 1e-3. `--device sim` serves on
//! the `Ascend` backend over the host simulation of the ACL ABI (prompt attention, the cache
//! scatter and paged incremental attention dispatched as aclnn calls), `--device ascend` on a
//! real NPU.

use burn::backend::NdArray;
use burn_ascend::backend::{is_available, Ascend, AscendDevice};
use burn_ascend::{AttendPath, TrainingBackend};
// The command line (clap; in the library so that the tests parse it): `--help` for the flags.
use burn_ascend_cli::args::{ComputeDtype, ExampleDevice, GenerateArgs as Args};
use burn_ascend_model::load::budget;
use burn_ascend_model::load::chat::instruct::{chat_stop_ids, prompt_ids};
use burn_ascend_model::load::config::eos_token_ids;
use burn_ascend_model::load::data::SplitMix;
use burn_ascend_model::model::hf_checkpoint::{load_hf_with, LoadOptions};
use burn_ascend_model::model::peft::load_adapter;
use burn_ascend_model::profile as dispatch;
use burn_ascend_model::{
    generate_batch_graph, generate_batch_until, max_logit_gap, sample, ChatTemplate, GenerationRun,
    Generator, GraphDecodeStats, Sampling, Tokenizer,
};
use clap::Parser;

/// Why `--graph` refuses an f32 model.
const GRAPH_F32: &str = "unsupported: --graph with an f32 model: CANN's fused inference \
                         attention takes FLOAT16/BFLOAT16 (use --dtype bf16)";

/// Largest cached-vs-full logit difference `--check` accepts (f32 accumulation over a few
/// layers; the two paths sum in different orders).
const CHECK_TOLERANCE: f32 = 1e-3;

/// mimalloc, keeping the memory a step frees for the next one (see
/// `burn_ascend_cli::host_alloc`); not in the test binary that includes this file.
#[cfg(not(test))]
#[global_allocator]
static GLOBAL: burn_ascend_cli::host_alloc::CountingAlloc =
    burn_ascend_cli::host_alloc::CountingAlloc;

fn main() {
    #[cfg(not(test))]
    burn_ascend_cli::host_alloc::keep_freed_memory();
    if let Err(e) = run(std::env::args_os()) {
        eprintln!("generate: {e}");
        std::process::exit(2);
    }
}

/// The example on the command line `argv` (its first item the program name); the
/// integration tests run it in a child process through this.
pub fn run(argv: impl IntoIterator<Item = std::ffi::OsString>) -> Result<(), String> {
    let args = Args::parse_from(argv);
    burn_ascend_cli::release::apply_to_example(args.cann_release.as_deref(), args.device)?;
    if args.graph && args.device == ExampleDevice::Cpu {
        return Err(
            "unsupported: --graph captures the decode step as an ACL graph, which only \
                    the Ascend backend has (use --device sim or --device ascend)"
                .into(),
        );
    }
    if args.device == ExampleDevice::Cpu && args.dtype != ComputeDtype::F32 {
        return Err(format!(
            "unsupported: --dtype {:?} on --device cpu (half-precision attention is served on \
             --device sim or ascend)",
            args.dtype
        )
        .to_lowercase());
    }
    if args.graph && args.dtype == ComputeDtype::F32 {
        // The captured decode calls FIA itself; an f32 model's eager decode attends through
        // the composite instead, which a graph cannot replay with new masks.
        return Err(GRAPH_F32.into());
    }
    if !args.checkpoint.join("config.json").exists() {
        return Err(format!(
            "no checkpoint in {} (run `cargo run --release --example finetune` first, or pass \
             --checkpoint DIR)",
            args.checkpoint.display()
        ));
    }
    match args.device {
        ExampleDevice::Cpu if args.profile => {
            Err("--profile needs --device sim|ascend (it profiles the aclnn dispatch)".into())
        }
        // Driven from a rayon worker: see `on_worker` (a prompt's prefill 11–18 % faster).
        ExampleDevice::Cpu => burn_ascend::kernels::cpu::on_worker(|| {
            run_on::<NdArray>(args, Default::default(), None)
        }),
        ExampleDevice::Sim => {
            run_on::<Ascend>(args, AscendDevice::sim(), Some(AscendDevice::sim()))
        }
        ExampleDevice::Ascend => {
            let index = burn_ascend_cann::acl::default_device_id().map_err(|e| e.to_string())?;
            let device = AscendDevice::npu(index as u32);
            is_available(&device)?;
            run_on::<Ascend>(args, device, Some(device))
        }
    }
}

/// `x` with as many decimals as it needs (1, not 1.00; 1.25).
fn fmt_rate(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `--graph`: the decode steps replayed from a captured graph. Graph capture is ACL's, so only
/// the `Ascend` backend has it; any other backend is refused naming the flag.
fn decode_graph<B: TrainingBackend>(
    gen: &mut Generator<B>,
    ids: &[Vec<u32>],
    max_new: usize,
    sampling: &[Sampling],
    rng: &mut SplitMix,
    stop: &[u32],
) -> Result<(GenerationRun, GraphDecodeStats), String> {
    let gen: &mut dyn std::any::Any = gen;
    let Some(gen) = gen.downcast_mut::<Generator<Ascend>>() else {
        return Err(
            "unsupported: --graph captures the decode step as an ACL graph, which only \
                    the Ascend backend has (use --device sim or --device ascend)"
                .into(),
        );
    };
    generate_batch_graph(gen, ids, max_new, sampling, rng, stop).map_err(|e| e.to_string())
}

/// `--profile`: the prompts prefilled again (not profiled), then `max_new − 1` greedy decode
/// steps of the whole batch profiled (with `--graph`, the first one captures the graph and
/// the profile covers the `max_new − 2` replayed ones): the dispatch table per step and, on the simulation, the
/// modelled Atlas A2 time of the top ops with the `generate: per step …` line.
fn profile_decode<B: TrainingBackend>(
    gen: &mut Generator<B>,
    prompts: &[Vec<u32>],
    max_new: usize,
    ascend: &AscendDevice,
    graph: bool,
) -> Result<String, String> {
    let steps = max_new.saturating_sub(1);
    if steps == 0 || (graph && steps < 2) {
        return Err(format!(
            "invalid --max-new: --profile needs at least {} (one {}decode step)",
            if graph { 3 } else { 2 },
            if graph { "replayed " } else { "" }
        ));
    }
    let e = |e: burn_ascend::contract::AttnError| e.to_string();
    gen.clear().map_err(e)?;
    let mut rng = SplitMix(0);
    let greedy = |l: &[f32], rng: &mut SplitMix| sample(l, Sampling::Greedy, rng);
    let mut seqs = Vec::new();
    let mut tokens = Vec::new();
    for p in prompts {
        let (seq, logits) = gen.add(p).map_err(e)?;
        seqs.push(seq);
        tokens.push(greedy(&logits, &mut rng));
    }
    if graph {
        // The first decode step captures the graph (recorded, then replayed): outside the
        // profile, which then covers the replayed steps a long generation is made of.
        let gen: &mut dyn std::any::Any = gen;
        let gen = gen
            .downcast_mut::<Generator<Ascend>>()
            .ok_or("unsupported: --graph --profile on a backend without graph capture")?;
        let (mut g, mut stats) = (None, GraphDecodeStats::default());
        let mut step = |tokens: &[u32], left: usize| {
            gen.step_graph(&mut g, &mut stats, &seqs, tokens, left)
                .map_err(e)
        };
        let logits = step(&tokens, steps)?;
        tokens = logits.iter().map(|l| greedy(l, &mut rng)).collect();
        dispatch::start_profile();
        for i in 1..steps {
            let logits = step(&tokens, steps - i)?;
            tokens = logits.iter().map(|l| greedy(l, &mut rng)).collect();
        }
    } else {
        dispatch::start_profile();
        for _ in 0..steps {
            let logits = gen.step(&seqs, &tokens).map_err(e)?;
            tokens = logits.iter().map(|l| greedy(l, &mut rng)).collect();
        }
    }
    let p = dispatch::stop_profile(ascend);
    let steps = if graph { steps - 1 } else { steps };
    Ok(format!(
        "generate: profile of {steps} {}decode steps of {} sequences\n{}{}",
        if graph { "replayed " } else { "" },
        prompts.len(),
        dispatch::format_profile(&p, steps),
        dispatch::format_modelled(&p, steps, 12, "generate")
    ))
}

fn run_on<B: TrainingBackend>(
    args: Args,
    device: B::Device,
    ascend: Option<AscendDevice>,
) -> Result<(), String> {
    let (dir, max_new, block_size) = (&args.checkpoint, args.max_new, args.block_size);
    let (top_p, temperature) = (args.top_p, args.temperature);
    let load = LoadOptions {
        allow_non_finite_weights: args.allow_non_finite_weights,
        strict: args.strict,
    };
    let mut model = load_hf_with::<B>(dir, &device, load).map_err(|e| e.to_string())?;
    if let Some(adapter) = &args.adapter {
        model = load_adapter(model, adapter, &device).map_err(|e| e.to_string())?;
    }
    let tokenizer = if dir.join("tokenizer.json").exists() {
        Tokenizer::from_file(&dir.join("tokenizer.json")).map_err(|e| e.to_string())?
    } else {
        Tokenizer::Bytes
    };
    let builtin = [
        "ROMEO:\n",
        "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n",
        "KING RICHARD II:\nOld John of Gaunt, time-honour'd Lancaster,\n",
        "MENENIUS:\nWhy, masters, my good friends, mine honest neighbours,\nWill you undo yourselves?\n\nFirst Citizen:\n",
    ];
    let prompts: Vec<String> = if args.prompts.is_empty() {
        builtin.iter().map(|p| p.to_string()).collect()
    } else {
        args.prompts.clone()
    };
    // --chat: each prompt as a user's message in the checkpoint's chat template.
    let template = args
        .chat
        .then(|| ChatTemplate::from_dir(dir))
        .transpose()
        .map_err(|e| e.to_string())?;
    let stop = match &template {
        Some(t) => chat_stop_ids(dir, t, &tokenizer),
        None => eos_token_ids(dir),
    }
    .map_err(|e| e.to_string())?;
    let ids: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| match &template {
            Some(t) => prompt_ids(t, &tokenizer, p),
            None => tokenizer.encode(p),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    // A byte-level prompt for a checkpoint with a smaller vocabulary (and no tokenizer.json)
    // would index past the embedding.
    let vocab = model.config.vocab_size;
    if let Some(&bad) = ids.iter().flatten().find(|&&t| t as usize >= vocab) {
        return Err(format!(
            "prompt token {bad} is outside the model's vocab_size {vocab} (does the checkpoint \
             need its tokenizer.json?)"
        ));
    }
    let sampling: Vec<Sampling> = (0..prompts.len())
        .map(|i| {
            if args.greedy || i % 2 == 0 {
                Sampling::Greedy
            } else {
                Sampling::TopP { top_p, temperature }
            }
        })
        .collect();
    let budget = args.memory_budget.unwrap_or_else(budget::default_budget);
    let longest_prompt = ids.iter().map(Vec::len).max().unwrap_or(0);
    let blocks = budget::serving_blocks(
        &model.config,
        longest_prompt,
        prompts.len(),
        max_new,
        block_size,
        budget,
    )
    .map_err(|e| e.to_string())?;
    let mut gen = Generator::new(model, blocks, block_size, &device).map_err(|e| e.to_string())?;
    if let Some(dt) = args.dtype.float_dtype() {
        gen = gen.with_attention_dtype(dt).map_err(|e| e.to_string())?;
    }
    if let Some(path) = args.attend_path {
        gen = gen
            .with_attend_path(path.into())
            .map_err(|e| e.to_string())?;
    }
    let c = &gen.model().config;
    let windows = (0..c.num_hidden_layers).any(|l| c.layer_window(l).is_some());
    let sinks = c.attention_sinks;
    println!(
        "generate: attention {}",
        match (sinks || windows, gen.attend_path()) {
            (false, _) => "prompt (prefill) / incremental (decode)",
            (true, AttendPath::Fused) => "fused inference attention V4 (prefill and decode)",
            (true, AttendPath::PromptIncre) if sinks => {
                "prompt / incremental, sinks on a placeholder token"
            }
            (true, AttendPath::PromptIncre) => "prompt / incremental, windows as masks",
        }
    );
    let mut rng = SplitMix(args.seed);
    let run = if args.graph {
        let (run, stats) = decode_graph::<B>(&mut gen, &ids, max_new, &sampling, &mut rng, &stop)?;
        println!(
            "generate: decode launches per token {} ({} steps, {} graph capture(s), {} recorded \
             tasks; plus {:.1} input uploads and {:.1} attention task-group updates per token)",
            fmt_rate(stats.launches_per_token()),
            stats.steps,
            stats.captures,
            stats.recorded_tasks,
            stats.uploads as f64 / stats.steps.max(1) as f64,
            stats.updates_per_token()
        );
        run
    } else {
        generate_batch_until(&mut gen, &ids, max_new, &sampling, &mut rng, &stop)
            .map_err(|e| e.to_string())?
    };
    for (i, (p, g)) in prompts.iter().zip(&run.generated).enumerate() {
        println!(
            "--- sequence {} ({:?}, prompt {} tokens) ---\n{p}{}",
            i + 1,
            sampling[i],
            ids[i].len(),
            // Without its end-of-sequence token, which transformers' decode would also skip.
            tokenizer.decode(match g.last() {
                Some(t) if stop.contains(t) => &g[..g.len() - 1],
                _ => g,
            })
        );
    }
    println!(
        "generate: prefill {:.0} tokens/s, decode {:.0} tokens/s ({} sequences, block size {block_size})",
        run.prefill_tokens_per_sec(),
        run.decode_tokens_per_sec(),
        prompts.len()
    );
    if args.check {
        let gap = max_logit_gap(gen.model(), &run).map_err(|e| e.to_string())?;
        println!("generate: cached vs full max |Δlogit| {gap:.3e}");
        if gap.is_nan() || gap > CHECK_TOLERANCE {
            return Err(format!(
                "cached decoding differs from the full recomputation by {gap:e} (> {CHECK_TOLERANCE:e})"
            ));
        }
    }
    if let (true, Some(dev)) = (args.profile, ascend.as_ref()) {
        print!(
            "{}",
            profile_decode(&mut gen, &ids, max_new, dev, args.graph)?
        );
    }
    gen.clear().map_err(|e| e.to_string())
}
