//! End-to-end cases of the selftest on the example model (crate `burn-ascend-model`), on the
//! backend users train and serve on: `Autodiff<Ascend>` (and `Ascend`) on the device under
//! test against `Autodiff<NdArray>` (and `NdArray`) on the CPU, from the same checkpoint.
//!
//! - `train_step_gradients`: one training step's gradients, every parameter (sinks included),
//!   within [`GRAD_REL`] of each parameter's largest NdArray gradient;
//! - `train_20_steps`: 20 AdamW steps on the device must lower the loss;
//! - `fia_serving_tokens`: greedy serving through fused inference attention in BF16 (as on an
//!   Atlas) tracks NdArray's f32 serving, logits within [`BF16_LOGIT_TOL`] while the tokens
//!   agree;
//! - `data_parallel_2_vs_1`: one data-parallel step on two devices (rank 0's averaged
//!   gradients) against one device on the global batch, within [`GRAD_REL`]; with fewer than
//!   two devices visible it is skipped, the reason reported as a probe.
//!
//! The models are tiny (2 layers, hidden 32 or 64 × 2 heads of 64): the cases check the path,
//! not throughput, and keep the simulation's run short.

use std::path::PathBuf;
use std::time::Instant;

use burn::backend::{Autodiff, NdArray};
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Int, Tensor, TensorData};
use burn_ascend::backend::collective::ProcessGroup;
use burn_ascend::backend::{Ascend, AscendDevice, AscendKind};
use burn_ascend::{AttendPath, AttnError, TrainingBackend};
use burn_ascend_cann::acl::ffi::names;
use burn_ascend_model::load::config::LayerType;
use burn_ascend_model::load::data::{
    concat_batches, documents_from_text, SplitMix, BUNDLED_CORPUS,
};
use burn_ascend_model::model::hf_checkpoint::{load_hf, save_hf};
use burn_ascend_model::parallel::ddp::DataParallel;
use burn_ascend_model::train::{train, GradientSync, TrainOptions, TrainState};
use burn_ascend_model::{
    cross_entropy, generate_batch, Generator, ModelConfig, PackedBatch, Packer, Sampling,
    Tokenizer, Transformer,
};

use super::harness::guarded;
use super::report::{CaseResult, Probe, Status};
use crate::device::ascend_device;
use crate::{CliError, Device};

/// Gradients (f32 on both sides): every element within `GRAD_REL` × the parameter's largest
/// NdArray gradient (at least 1e-3). The device sums in another order (and the NPU's cube
/// units round f32 products their own way), the host in f32 too; 1e-3 leaves an order of
/// magnitude over what the simulation shows while a wrong kernel is off by O(1).
pub const GRAD_REL: f64 = 1e-3;

/// Logits of the served tokens, BF16 attention against NdArray's f32: `max |Δ|` (logits of
/// O(1..10); BF16 keeps 8 bits of mantissa, so its rounding of q, k, v and the attention
/// output moves them by a few 1e-3 to 1e-2, while a wrong kernel moves them by O(1)).
pub const BF16_LOGIT_TOL: f64 = 5e-2;

/// Steps of the loss case.
const STEPS: usize = 20;

/// The training model: GQA 4/2, head dim 8, a sliding window on every other layer and
/// learned sinks, so the varlen backward's dsink is among the gradients checked.
fn train_config() -> ModelConfig {
    // The example's small byte model (bytes in, GQA 4/2, sinks, no biases) made tiny.
    ModelConfig {
        hidden_size: 32,
        intermediate_size: 40,
        num_hidden_layers: 2,
        head_dim: 8,
        // Transformers' window: 8 keys including the query.
        sliding_window: Some(8),
        layer_types: LayerType::alternating(2),
        ..ModelConfig::small_byte_model()
    }
}

/// The serving model: head dim 64 with sinks, which `Generator` serves through FIA with a
/// learnable sink (CANN takes the sink for head dims 64 and 128).
fn serve_config() -> ModelConfig {
    ModelConfig {
        hidden_size: 64,
        intermediate_size: 48,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        head_dim: 64,
        sliding_window: Some(4),
        ..train_config()
    }
}

/// A scratch folder for the checkpoints of this run, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Result<Self, CliError> {
        let dir = std::env::temp_dir().join(format!(
            "burn-ascend-selftest-{what}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::Io(format!("{}: {e}", dir.display())))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A checkpoint of `cfg` initialised on NdArray from `seed`, with sinks away from their zero
/// initialisation (a zero sink's gradient would hide a wrong dsink less well).
fn checkpoint(cfg: &ModelConfig, seed: u64, dir: &std::path::Path) -> Result<(), CliError> {
    let device = Default::default();
    NdArray::<f32>::seed(&device, seed);
    let mut m = Transformer::<NdArray>::new(cfg, &device)?;
    for (i, layer) in m.layers.iter_mut().enumerate() {
        if let Some(s) = &mut layer.self_attn.sinks {
            let n = cfg.num_attention_heads;
            let v: Vec<f32> = (0..n)
                .map(|h| 0.5 - 0.7 * h as f32 + 0.3 * i as f32)
                .collect();
            *s = Param::from_tensor(Tensor::from_data(TensorData::new(v, [n]), &device));
        }
    }
    Ok(save_hf(&m, dir)?)
}

fn packer(seed: u64) -> Result<Packer, CliError> {
    let docs = documents_from_text(&BUNDLED_CORPUS[..20_000]);
    Ok(Packer::new(&docs, &Tokenizer::Bytes, 64, 32, seed)?)
}

fn case(name: &str) -> CaseResult {
    CaseResult::failed("model", name, "f32", None)
}

/// `(max |Δ|, tol)` of the worst parameter, or why it failed.
type Check = Result<(f64, f64), String>;

/// Fills `res` from a check: pass when it ran and `max |Δ| ≤ tol`.
fn finish(mut res: CaseResult, started: Instant, check: Check) -> CaseResult {
    res.ms = started.elapsed().as_secs_f64() * 1e3;
    match check {
        Ok((err, tol)) => {
            res.max_abs_err = err;
            res.tol = tol;
            if err <= tol {
                res.status = Status::Pass;
            } else {
                res.note = Some(format!("max |Δ| {err:e} over the tolerance {tol:e}"));
            }
        }
        Err(e) => res.note = Some(e),
    }
    res
}

/// Every float parameter's gradient on the host, in module order (sinks included), and the
/// number of parameters that had none.
struct HostGrads<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    out: Vec<Vec<f32>>,
    missing: usize,
    _b: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for HostGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        match self.grads.get::<B::InnerBackend, D>(param.id) {
            Some(g) => self.out.push(
                g.into_data()
                    .convert::<f32>()
                    .to_vec::<f32>()
                    .unwrap_or_default(),
            ),
            None => self.missing += 1,
        }
    }
}

fn host_grads<B: AutodiffBackend>(
    model: &Transformer<B>,
    grads: &GradientsParams,
) -> Result<Vec<Vec<f32>>, String> {
    let mut h = HostGrads::<B> {
        grads,
        out: Vec::new(),
        missing: 0,
        _b: std::marker::PhantomData,
    };
    model.visit(&mut h);
    if h.missing > 0 {
        return Err(format!("{} parameters got no gradient", h.missing));
    }
    Ok(h.out)
}

/// One step's gradients of `model` on `batch`.
fn grads_of<B: AutodiffBackend + TrainingBackend>(
    model: &Transformer<B>,
    batch: &PackedBatch,
) -> Result<GradientsParams, AttnError> {
    let device = model.embed_tokens.weight.val().device();
    let t = batch.tokens.len();
    let ids = |v: &[i64]| Tensor::<B, 1, Int>::from_data(TensorData::new(v.to_vec(), [t]), &device);
    let logits = model.forward_packed(ids(&batch.tokens), &batch.cu_seqlens)?;
    let loss = cross_entropy(logits, ids(&batch.targets));
    Ok(GradientsParams::from_grads(loss.backward(), model))
}

/// `(max |Δ|, tol)` over parameters of the worst ratio `max |got − want| / (GRAD_REL × scale)`.
fn compare_grads(got: &[Vec<f32>], want: &[Vec<f32>]) -> Check {
    if got.len() != want.len() {
        return Err(format!(
            "{} gradients on the device, {} on NdArray",
            got.len(),
            want.len()
        ));
    }
    let mut worst = (0.0f64, GRAD_REL, -1.0f64);
    for (g, w) in got.iter().zip(want) {
        if g.len() != w.len() {
            return Err(format!(
                "a gradient of {} elements, want {}",
                g.len(),
                w.len()
            ));
        }
        let scale = w.iter().fold(1e-3f64, |m, &x| m.max(f64::from(x).abs()));
        let err = g
            .iter()
            .zip(w)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs())
            .fold(
                0.0,
                |m: f64, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
            );
        let tol = GRAD_REL * scale;
        if err / tol > worst.2 {
            worst = (err, tol, err / tol);
        }
    }
    Ok((worst.0, worst.1))
}

type Dev = Autodiff<Ascend>;
type Host = Autodiff<NdArray>;

/// One training step on the device against NdArray.
fn train_step(device: AscendDevice) -> Check {
    let dir = Scratch::new("train-step").map_err(|e| e.to_string())?;
    let run = || -> Result<Check, CliError> {
        checkpoint(&train_config(), 3, &dir.0)?;
        let batch = packer(5)?.next_batch();
        let host = load_hf::<Host>(&dir.0, &Default::default())?;
        let dev = load_hf::<Dev>(&dir.0, &device)?;
        let want = host_grads(&host, &grads_of(&host, &batch)?);
        let got = host_grads(&dev, &grads_of(&dev, &batch)?);
        Ok(want.and_then(|w| got.and_then(|g| compare_grads(&g, &w))))
    };
    guarded(run)?
}

/// 20 AdamW steps on the device: `(last loss, first loss)`, so the check passes when the
/// loss went down.
fn train_steps(device: AscendDevice) -> Check {
    let dir = Scratch::new("train-20").map_err(|e| e.to_string())?;
    let run = || -> Result<Check, CliError> {
        checkpoint(&train_config(), 4, &dir.0)?;
        let model = load_hf::<Dev>(&dir.0, &device)?;
        let opts = TrainOptions {
            warmup_steps: None,
            total_steps: STEPS,
            stop_after: None,
            lr: 3e-3,
            weight_decay: 0.1,
            clip_norm: 1.0,
            seed: 7,
            out: dir.0.join("run"),
            save_every: STEPS,
        };
        let (_, state) = train(
            model,
            TrainState::default(),
            false,
            &mut packer(7)?,
            &opts,
            |_| {},
        )?;
        let (first, last) = match (state.losses.first(), state.losses.last()) {
            (Some(&f), Some(&l)) if state.losses.len() == STEPS => (f, l),
            _ => return Ok(Err(format!("{} losses, want {STEPS}", state.losses.len()))),
        };
        // NaN compares as not lower: a diverged run fails too.
        if last.partial_cmp(&first) != Some(std::cmp::Ordering::Less) {
            return Ok(Err(format!(
                "the loss did not go down over {STEPS} steps: {first} → {last}"
            )));
        }
        Ok(Ok((f64::from(last), f64::from(first))))
    };
    guarded(run)?
}

/// Greedy serving through FIA on the device against NdArray's tokens.
fn fia_serving(device: AscendDevice) -> Check {
    let dir = Scratch::new("serve").map_err(|e| e.to_string())?;
    let run = || -> Result<Check, CliError> {
        checkpoint(&serve_config(), 5, &dir.0)?;
        let prompts = vec![vec![1u32, 5, 9, 2, 7], vec![3u32; 9]];
        let sampling = vec![Sampling::Greedy; prompts.len()];
        let host = Default::default();
        let mut gen = Generator::new(load_hf::<NdArray>(&dir.0, &host)?, 16, 16, &host)?;
        let want = generate_batch(&mut gen, &prompts, 8, &sampling, &mut SplitMix(1))?;
        // Attention in BF16, as a model is served on an Atlas: CANN's attention ops take no F32
        // query, and FIA then reads its learnableSink in BF16 (the sink's dtype follows the path
        // and the CANN release, and BF16 is what every release's FIA v3 reads).
        let mut gen = Generator::new(load_hf::<Ascend>(&dir.0, &device)?, 16, 16, &device)?
            .with_attention_dtype(FloatDType::BF16)?;
        if gen.attend_path() != AttendPath::Fused {
            return Ok(Err(format!(
                "the device serves through {:?}, not FIA (no {}?)",
                gen.attend_path(),
                names::fia_v4
            )));
        }
        let got = generate_batch(&mut gen, &prompts, 8, &sampling, &mut SplitMix(1))?;
        // Step by step while the tokens agree (a different token changes the context): the
        // first step of each prompt is always compared.
        let mut gap = 0.0f64;
        for (seq, (gl, wl)) in got.logits.iter().zip(&want.logits).enumerate() {
            for (step, (g, w)) in gl.iter().zip(wl).enumerate() {
                let step_gap = g
                    .iter()
                    .zip(w)
                    .map(|(a, b)| f64::from((a - b).abs()))
                    .fold(0.0, f64::max);
                gap = gap.max(step_gap);
                if got.generated[seq][step] != want.generated[seq][step] {
                    break;
                }
            }
        }
        Ok(Ok((gap, BF16_LOGIT_TOL)))
    };
    guarded(run)?
}

/// The devices a data-parallel step runs on: two simulated devices, or NPUs 0 and 1 when two
/// are visible; else why not.
fn two_devices(device: AscendDevice) -> Result<[AscendDevice; 2], String> {
    match device.kind {
        AscendKind::Simulation => {
            burn_ascend::backend::collective::simulate_devices(2);
        }
        AscendKind::Npu => {
            let n = burn_ascend_cann::acl::loader::cann()
                .and_then(burn_ascend_cann::acl::device_count)
                .map_err(|e| e.to_string())?;
            if n < 2 {
                return Err(format!("{n} NPU visible, a data-parallel step needs two"));
            }
        }
    }
    let at = |index| AscendDevice { index, ..device };
    Ok([at(0), at(1)])
}

/// One data-parallel step on two devices against one device on the global batch.
fn data_parallel(devices: [AscendDevice; 2]) -> Check {
    let dir = Scratch::new("ddp").map_err(|e| e.to_string())?;
    let run = || -> Result<Check, CliError> {
        checkpoint(&train_config(), 6, &dir.0)?;
        let mut p = packer(9)?;
        let parts: Vec<PackedBatch> = (0..2).map(|_| p.next_batch()).collect();
        let groups = ProcessGroup::local(&devices)
            .map_err(|e| CliError::Device(format!("process group: {e}")))?;
        let models = devices
            .iter()
            .map(|d| load_hf::<Dev>(&dir.0, d))
            .collect::<Result<Vec<_>, _>>()?;
        let reference = load_hf::<Dev>(&dir.0, &devices[0])?;
        let ranks = std::thread::scope(|s| {
            let handles: Vec<_> = models
                .into_iter()
                .zip(groups)
                .zip(parts.clone())
                .map(|((model, group), batch)| {
                    s.spawn(move || -> Result<Vec<Vec<f32>>, String> {
                        let mut sync = DataParallel::new(group, 4096);
                        let err = |e: AttnError| e.to_string();
                        let model = sync.broadcast_model(model).map_err(err)?;
                        let grads = grads_of(&model, &batch).map_err(err)?;
                        let grads = sync.average_gradients(&model, grads).map_err(err)?;
                        sync.wait().map_err(err)?;
                        host_grads(&model, &grads)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
                .collect::<Vec<_>>()
        });
        let want = host_grads(&reference, &grads_of(&reference, &concat_batches(&parts))?);
        let mut ranks = ranks.into_iter();
        let (Some(rank0), Some(rank1)) = (ranks.next(), ranks.next()) else {
            return Ok(Err("two ranks expected".into()));
        };
        let (rank0, rank1) = match (rank0, rank1) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return Ok(Err(e)),
        };
        if rank0 != rank1 {
            return Ok(Err("the ranks hold different averaged gradients".into()));
        }
        Ok(want.and_then(|w| compare_grads(&rank0, &w)))
    };
    guarded(run)?
}

/// The model cases on `device` (`sim` or `npu`), and the probe line of a skipped case.
pub fn run_all(device: Device) -> (Vec<CaseResult>, Vec<Probe>) {
    let dev = match ascend_device(device) {
        Ok(d) => d,
        Err(e) => {
            let mut c = case("train_step_gradients");
            c.note = Some(e.to_string());
            return (vec![c], Vec::new());
        }
    };
    let mut cases = Vec::new();
    let mut probes = Vec::new();
    type Run = fn(AscendDevice) -> Check;
    let runs: [(&str, Run); 3] = [
        ("train_step_gradients", train_step),
        ("train_20_steps", train_steps),
        ("fia_serving_tokens", fia_serving),
    ];
    for (name, f) in runs {
        let t0 = Instant::now();
        cases.push(finish(case(name), t0, f(dev)));
    }
    match two_devices(dev) {
        Ok(devices) => {
            let t0 = Instant::now();
            let check = data_parallel(devices);
            cases.push(finish(case("data_parallel_2_vs_1"), t0, check));
        }
        Err(why) => probes.push(Probe {
            name: "model data_parallel_2_vs_1".into(),
            result: format!("skipped: {why}"),
        }),
    }
    (cases, probes)
}
