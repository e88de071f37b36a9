//! `burn-ascend bench --model HF_DIR`: a real checkpoint on the CPU (`NdArray`, f32) — prefill,
//! greedy decode of one sequence, a full fine-tune step and a LoRA step — each as tokens/s and
//! as a fraction of its physical limit measured in the same run: decode against the machine's
//! read bandwidth (every weight byte is read once per token, so the limit is read GB/s ÷ the
//! bytes a step reads), prefill and training against the same-run sgemm (FLOPs ÷ sgemm
//! GFLOP/s). The workloads are those of `tools/torch_baseline.py`, which measures PyTorch +
//! transformers on the same folder for the comparison.

use std::path::Path;
use std::time::Instant;

use burn::backend::{Autodiff, NdArray};
use burn::module::Module;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::{Int, Tensor, TensorData};
use serde::Serialize;

use super::bench_timing::{Flusher, ReadProbe};
use super::CliError;
use burn_ascend::kernels::cpu;
use burn_ascend_model::model::hf_checkpoint::{load_hf_with, LoadOptions};
use burn_ascend_model::model::lora::{attach, freeze_base, LoraSettings, LoraTarget};
use burn_ascend_model::serve::generate::Generator;
use burn_ascend_model::train::optim::{clip_global_norm, FusedAdamW};
use burn_ascend_model::{cross_entropy_fused, ModelConfig, Transformer};

type Cpu = NdArray<f32>;
type Train = Autodiff<Cpu>;

/// The counts of one run (`tools/torch_baseline.py`'s defaults; `--quick` and the hidden
/// `--smoke` shrink them).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ModelPlan {
    /// Prompt tokens of the prefill.
    pub prompt_tokens: usize,
    /// Timed prefills (the best counts), after one warm-up.
    pub prefill_runs: usize,
    /// New tokens of the decode (the prefill yields the first, each step one more).
    pub decode_tokens: usize,
    /// Timed decodes (the best counts), after one warm-up.
    pub decode_runs: usize,
    /// Sequences per training batch.
    pub batch: usize,
    /// Tokens per sequence of a training batch.
    pub seq: usize,
    /// Timed training steps of each kind (the best counts), after one warm-up step.
    pub train_steps: usize,
    /// Side of the sgemm that is the compute limit.
    pub sgemm_n: usize,
    /// f32 elements of the read probe (twice that flushed before each read).
    pub read_len: usize,
}

impl ModelPlan {
    /// The plan of `quick` / `smoke`.
    pub fn of(quick: bool, smoke: bool) -> Self {
        if smoke {
            return Self {
                prompt_tokens: 8,
                prefill_runs: 1,
                decode_tokens: 3,
                decode_runs: 1,
                batch: 2,
                seq: 16,
                train_steps: 1,
                sgemm_n: 64,
                read_len: 1 << 16,
            };
        }
        Self {
            prompt_tokens: 72,
            prefill_runs: if quick { 3 } else { 10 },
            decode_tokens: if quick { 32 } else { 128 },
            decode_runs: if quick { 1 } else { 3 },
            batch: 4,
            seq: 256,
            train_steps: if quick { 2 } else { 5 },
            sgemm_n: 2048,
            read_len: 64 << 20,
        }
    }
}

/// What a forward pass of the model costs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ModelCost {
    /// Parameters.
    pub parameters: usize,
    /// Elements of the matrices every token multiplies by (the projections and the head).
    pub matmul_parameters: usize,
    /// Bytes of the parameters a decode step reads (all but the embedding table when the
    /// head is not tied to it: one row of it per token).
    pub decode_weight_bytes: usize,
}

impl ModelCost {
    /// The cost of `model`.
    pub fn of<B: burn::tensor::backend::Backend>(model: &Transformer<B>) -> Self {
        let c = &model.config;
        let parameters = model.num_params();
        let embed = c.vocab_size * c.hidden_size;
        let matmul_parameters =
            parameters - embed + if c.tie_word_embeddings { embed } else { 0 } - norms(c);
        let decode_weight_bytes = 4 * (parameters - if c.tie_word_embeddings { 0 } else { embed });
        Self {
            parameters,
            matmul_parameters,
            decode_weight_bytes,
        }
    }

    /// FLOPs of a prompt's prefill of `tokens` tokens: the forward, with the output head on the
    /// last position only (what a generator needs, and what transformers' `generate` and
    /// `tools/torch_baseline.py` compute: `logits_to_keep=1`).
    pub fn prefill_flops(&self, c: &ModelConfig, tokens: usize) -> f64 {
        let head = (c.vocab_size * c.hidden_size) as f64;
        self.forward_flops(c, &[tokens]) - 2.0 * head * tokens.saturating_sub(1) as f64
    }

    /// FLOPs of a forward over sequences of `lens` tokens (causal attention).
    pub fn forward_flops(&self, c: &ModelConfig, lens: &[usize]) -> f64 {
        let tokens: usize = lens.iter().sum();
        let pairs: f64 = lens.iter().map(|&s| (s * (s + 1) / 2) as f64).sum();
        2.0 * self.matmul_parameters as f64 * tokens as f64
            + c.num_hidden_layers as f64 * 4.0 * (c.num_attention_heads * c.head_dim) as f64 * pairs
    }
}

/// Elements of the norms' weights (vectors: no matmul).
fn norms(c: &ModelConfig) -> usize {
    let per_layer = 2 * c.hidden_size + if c.qk_norm { 2 * c.head_dim } else { 0 };
    c.num_hidden_layers * per_layer + c.hidden_size
}

/// What bounds a part: the read bandwidth or the sgemm.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// Bytes read per token ÷ the same run's read GB/s.
    Read,
    /// FLOPs per token ÷ the same run's sgemm GFLOP/s.
    Sgemm,
}

/// One part as measured: tokens in the best run, its time, and the work per token.
#[derive(Debug, Clone)]
struct Measured {
    part: String,
    tokens: f64,
    seconds: f64,
    /// Bytes (read) or FLOPs (sgemm) per token.
    work_per_token: f64,
    limit: Limit,
}

/// One part's result.
#[derive(Debug, Clone, Serialize)]
pub struct PartResult {
    /// `prefill`, `greedy decode`, `full fine-tune step`, `LoRA step`, with their counts.
    pub part: String,
    /// Tokens per second (best run).
    pub tokens_per_sec: f64,
    /// Best time of the run (prefill), the steps (decode) or one step (training), seconds.
    pub seconds: f64,
    /// The physical limit in tokens per second, from the same run's best probe.
    pub limit_tokens_per_sec: f64,
    /// `tokens_per_sec / limit_tokens_per_sec`.
    pub fraction_of_limit: f64,
    /// What the limit is.
    pub limit: Limit,
    /// Bytes (read) or FLOPs (sgemm) per token.
    pub work_per_token: f64,
}

impl Measured {
    fn result(self, sgemm_gflops: f64, read_gbps: f64) -> PartResult {
        let rate = match self.limit {
            Limit::Read => read_gbps * 1e9,
            Limit::Sgemm => sgemm_gflops * 1e9,
        };
        let tps = self.tokens / self.seconds;
        let limit = rate / self.work_per_token;
        PartResult {
            part: self.part,
            tokens_per_sec: tps,
            seconds: self.seconds,
            limit_tokens_per_sec: limit,
            fraction_of_limit: tps / limit,
            limit: self.limit,
            work_per_token: self.work_per_token,
        }
    }
}

/// The bench's JSON document.
#[derive(Debug, Clone, Serialize)]
struct ModelBenchJson {
    checkpoint: String,
    model_type: String,
    threads: usize,
    plan: ModelPlan,
    cost: ModelCost,
    sgemm_gflops: f64,
    read_gbps: f64,
    parts: Vec<PartResult>,
}

fn err(e: impl std::fmt::Display) -> CliError {
    CliError::Io(format!("bench --model: {e}"))
}

/// Deterministic token ids below `vocab`.
fn ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &x)| if x > b.1 { (i, x) } else { b },
        )
        .0 as u32
}

/// The best of `runs` wall times of `f`, after one warm-up call.
fn best_of(runs: usize, mut f: impl FnMut() -> Result<(), CliError>) -> Result<f64, CliError> {
    f()?;
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// The same-run sgemm (GFLOP/s, best of three) through the kernels' entry point.
fn sgemm_gflops(n: usize) -> f64 {
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.1).collect();
    let b = a.clone();
    let mut c = vec![0.0f32; n * n];
    let threads = cpu::threads();
    let mut best = f64::INFINITY;
    for _ in 0..4 {
        let t = Instant::now();
        cpu::gemm::sgemm(n, n, n, &a, &b, &mut c, threads);
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * (n as f64).powi(3) / best / 1e9
}

/// The read bandwidth (GB/s, best of five, caches flushed before each).
fn read_gbps(len: usize) -> f64 {
    let probe = ReadProbe {
        src: (0..len).map(|i| (i % 3) as f32).collect(),
        threads: cpu::threads(),
    };
    let mut flusher = Flusher::new(len * 8);
    let best = (0..5)
        .map(|_| probe.once(&mut flusher))
        .fold(f64::INFINITY, f64::min);
    probe.gbps(best)
}

/// Prefill and decode of one sequence through the paged-cache generator.
fn serve_parts(dir: &Path, plan: &ModelPlan, cost: &ModelCost) -> Result<Vec<Measured>, CliError> {
    let device = Default::default();
    let model = load_hf_with::<Cpu>(dir, &device, LoadOptions::default()).map_err(err)?;
    let c = model.config.clone();
    let block = 128;
    let blocks = (plan.prompt_tokens + plan.decode_tokens).div_ceil(block) + 1;
    let mut gen = Generator::new(model, blocks, block, &device).map_err(err)?;
    let prompt = ids(plan.prompt_tokens, c.vocab_size, 7);
    let prefill = best_of(plan.prefill_runs, || {
        gen.add(&prompt).map_err(err)?;
        gen.clear().map_err(err)
    })?;
    // The decode steps after a prefill (not timed): the first new token comes from the
    // prefill, each step yields one more.
    let steps = plan.decode_tokens.saturating_sub(1).max(1);
    let mut decode = f64::INFINITY;
    for run in 0..=plan.decode_runs.max(1) {
        let (seq, logits) = gen.add(&prompt).map_err(err)?;
        let mut token = argmax(&logits);
        let t = Instant::now();
        for _ in 0..steps {
            let logits = gen.step(&[seq], &[token]).map_err(err)?;
            token = argmax(&logits[0]);
        }
        // Run 0 warms up.
        if run > 0 {
            decode = decode.min(t.elapsed().as_secs_f64());
        }
        gen.clear().map_err(err)?;
    }
    // A decode step reads every weight once and its context's cache (K and V of every layer;
    // the context grows from the prompt by one token a step: its mean counts).
    let context = plan.prompt_tokens + steps / 2;
    let kv_bytes = 2 * 4 * c.num_hidden_layers * context * c.num_key_value_heads * c.head_dim;
    let prompt = plan.prompt_tokens as f64;
    Ok(vec![
        Measured {
            part: format!("prefill ({} tokens)", plan.prompt_tokens),
            tokens: prompt,
            seconds: prefill,
            work_per_token: cost.prefill_flops(&c, plan.prompt_tokens) / prompt,
            limit: Limit::Sgemm,
        },
        Measured {
            part: format!("greedy decode (1 sequence, {steps} steps)"),
            tokens: steps as f64,
            seconds: decode,
            work_per_token: (cost.decode_weight_bytes + kv_bytes) as f64,
            limit: Limit::Read,
        },
    ])
}

/// One training step's best time: forward, fused cross-entropy, backward, the global norm
/// clip and the fused AdamW step, as `finetune` runs them.
fn train_step_seconds(mut model: Transformer<Train>, plan: &ModelPlan) -> Result<f64, CliError> {
    let device = Default::default();
    let v = model.config.vocab_size;
    let t = plan.batch * plan.seq;
    let all = ids(t + plan.batch, v, 11);
    let (mut tokens, mut targets) = (Vec::with_capacity(t), Vec::with_capacity(t));
    for b in 0..plan.batch {
        let s = &all[b * (plan.seq + 1)..(b + 1) * (plan.seq + 1)];
        tokens.extend(s[..plan.seq].iter().map(|&x| x as i64));
        targets.extend(s[1..].iter().map(|&x| x as i64));
    }
    let cu: Vec<i64> = (0..=plan.batch).map(|b| (b * plan.seq) as i64).collect();
    let tokens = Tensor::<Train, 1, Int>::from_data(TensorData::new(tokens, [t]), &device);
    let targets = Tensor::<Train, 1, Int>::from_data(TensorData::new(targets, [t]), &device);
    let mut optim = FusedAdamW::<Train>::new(0.0)
        .map_err(err)?
        .init::<Transformer<Train>>();
    let mut step = |model: Transformer<Train>| -> Result<Transformer<Train>, CliError> {
        let logits = model.forward_packed(tokens.clone(), &cu).map_err(err)?;
        let loss = cross_entropy_fused(logits, targets.clone()).map_err(err)?;
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let (grads, _) = clip_global_norm(&model, grads, 1.0);
        Ok(optim.step(1e-5, model, grads))
    };
    model = step(model)?;
    let mut best = f64::INFINITY;
    for _ in 0..plan.train_steps.max(1) {
        let t0 = Instant::now();
        model = step(model)?;
        best = best.min(t0.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// The full fine-tune and LoRA steps.
fn train_parts(dir: &Path, plan: &ModelPlan, cost: &ModelCost) -> Result<Vec<Measured>, CliError> {
    let device = Default::default();
    let load = || load_hf_with::<Train>(dir, &device, LoadOptions::default()).map_err(err);
    let model = load()?;
    let c = model.config.clone();
    let tokens = (plan.batch * plan.seq) as f64;
    let fwd = cost.forward_flops(&c, &vec![plan.seq; plan.batch]);
    let matmuls = 2.0 * cost.matmul_parameters as f64 * tokens;
    let attention = fwd - matmuls;
    let full = train_step_seconds(model, plan)?;
    let settings = LoraSettings {
        rank: 8,
        alpha: 8.0,
        dropout: 0.0,
        targets: vec![
            LoraTarget::QProj,
            LoraTarget::KProj,
            LoraTarget::VProj,
            LoraTarget::OProj,
        ],
        base_model: dir.display().to_string(),
    };
    let lora = freeze_base(attach(load()?, &settings, 0, &device).map_err(err)?);
    let lora_secs = train_step_seconds(lora, plan)?;
    // A step's work: `passes` products per weight (each 2 FLOPs a weight and token), and
    // attention's backward 2.5 × its forward.
    let step = |part: String, seconds: f64, passes: f64| Measured {
        part,
        tokens,
        seconds,
        work_per_token: (passes * matmuls + 3.5 * attention) / tokens,
        limit: Limit::Sgemm,
    };
    Ok(vec![
        // Forward, dX and dW of every matmul.
        step(
            format!("full fine-tune step ({} × {}, AdamW)", plan.batch, plan.seq),
            full,
            3.0,
        ),
        // A frozen base needs no dW: forward and dX of every matmul (the adapters' own
        // products are r/hidden of that, not counted).
        step(
            format!("LoRA step (r 8, q/k/v/o, {} × {})", plan.batch, plan.seq),
            lora_secs,
            2.0,
        ),
    ])
}

/// Runs the model bench on `dir` and prints (and writes, with `json`) the results.
pub fn main(dir: &Path, plan: ModelPlan, json: Option<&Path>) -> Result<(), CliError> {
    if !dir.join("config.json").is_file() {
        return Err(CliError::Io(format!(
            "--model: no config.json in {} (a Hugging Face checkpoint folder)",
            dir.display()
        )));
    }
    let threads = cpu::threads();
    let probe_model =
        load_hf_with::<Cpu>(dir, &Default::default(), LoadOptions::default()).map_err(err)?;
    let cost = ModelCost::of(&probe_model);
    let config = probe_model.config.clone();
    drop(probe_model);
    let model_type = std::fs::read(dir.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("model_type")?.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    // The probes before, between and after the parts; the fractions take the best of each (a
    // probe depressed by other load would inflate every fraction).
    let mut sgemm = sgemm_gflops(plan.sgemm_n);
    let mut read = read_gbps(plan.read_len);
    // The parts run on a rayon worker, as `generate` and `finetune` run them on the CPU (see
    // `cpu::on_worker`).
    let mut measured = cpu::on_worker(|| serve_parts(dir, &plan, &cost))?;
    read = read.max(read_gbps(plan.read_len));
    sgemm = sgemm.max(sgemm_gflops(plan.sgemm_n));
    measured.extend(cpu::on_worker(|| train_parts(dir, &plan, &cost))?);
    sgemm = sgemm.max(sgemm_gflops(plan.sgemm_n));
    let parts: Vec<PartResult> = measured
        .into_iter()
        .map(|m| m.result(sgemm, read))
        .collect();
    println!(
        "model: {} ({:.1} M parameters, {} layers, hidden {}, vocab {}), f32 on the CPU, \
         threads: {threads}",
        model_type,
        cost.parameters as f64 / 1e6,
        config.num_hidden_layers,
        config.hidden_size,
        config.vocab_size
    );
    println!(
        "sgemm {n}^3 f32: {sgemm:.1} GFLOP/s; read (caches flushed, {threads} threads): \
         {read:.1} GB/s; a decode step reads {:.0} MB of weights",
        cost.decode_weight_bytes as f64 / 1e6,
        n = plan.sgemm_n
    );
    println!();
    println!("| part | tokens/s | limit tokens/s | × limit | limit |");
    println!("|---|---|---|---|---|");
    for p in &parts {
        println!(
            "| {} | {:.1} | {:.1} | {:.3} | {} |",
            p.part,
            p.tokens_per_sec,
            p.limit_tokens_per_sec,
            p.fraction_of_limit,
            match p.limit {
                Limit::Read => "read",
                Limit::Sgemm => "sgemm",
            }
        );
    }
    if let Some(path) = json {
        let doc = ModelBenchJson {
            checkpoint: dir.display().to_string(),
            model_type,
            threads,
            plan,
            cost,
            sgemm_gflops: sgemm,
            read_gbps: read,
            parts,
        };
        super::bench_timing::write_json(path, &doc)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_without_a_checkpoint_is_refused_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let e = main(dir.path(), ModelPlan::of(false, true), None).unwrap_err();
        assert!(e.to_string().contains("--model"), "{e}");
    }

    #[test]
    fn every_part_of_a_tiny_checkpoint_is_timed_against_its_limit() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/hf/llama");
        let out = tempfile::tempdir().unwrap();
        let json = out.path().join("bench.json");
        main(&dir, ModelPlan::of(false, true), Some(&json)).unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let parts = doc["parts"].as_array().unwrap();
        assert_eq!(parts.len(), 4);
        for p in parts {
            // Each figure is a rate and its ratio to the limit: positive and consistent.
            let (tps, limit, frac) = (
                p["tokens_per_sec"].as_f64().unwrap(),
                p["limit_tokens_per_sec"].as_f64().unwrap(),
                p["fraction_of_limit"].as_f64().unwrap(),
            );
            assert!(tps > 0.0 && limit > 0.0, "{p}");
            assert!((frac - tps / limit).abs() <= 1e-9 * frac.max(1.0), "{p}");
        }
    }
}
