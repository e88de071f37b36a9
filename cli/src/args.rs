//! The command lines of the `burn-ascend` binary and of the examples, declared for clap.
//!
//! They live in the library, not in each `main`, so that the tests parse them as functions
//! (`try_parse_from`) without building or running the binaries. clap gives every one the same
//! behaviour: `--help` (on any subcommand) prints to stdout and exits 0; a usage error prints
//! one message naming the flag to stderr and exits 2; integers are parsed as integers, so
//! `--steps -1` or `--steps 2.5` is refused rather than truncated.

use std::path::PathBuf;

use burn::tensor::FloatDType;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::Device;

/// `burn-ascend`: the op replay, the CPU kernel bench and the acceptance run.
#[derive(Debug, Parser)]
#[command(
    name = "burn-ascend",
    version,
    about = "Replay CANN's attention ops on safetensors dumps, time the fast CPU kernels, run the acceptance selftest on an Atlas NPU"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay an aclnn op on tensors dumped to safetensors.
    ///
    /// Tensors are named after the aclnn parameters without the `Optional` suffix; attributes
    /// are strings in the safetensors `__metadata__` under their aclnn names. Missing
    /// attributes take the docs' defaults.
    #[command(after_help = run_help())]
    Run(RunArgs),
    /// Throughput of the fast CPU kernels.
    ///
    /// Times the fast CPU kernels (varlen forward / forward+backward, paged decode) against a
    /// same-run 2048^3 sgemm, a same-run memory copy and the composite Burn path on NdArray.
    Bench(BenchArgs),
    /// The acceptance run on an Atlas NPU.
    #[command(after_help = SELFTEST_HELP)]
    Selftest(SelftestArgs),
    /// The memory one training rank needs, and whether it fits an Atlas A2 / A3 NPU.
    ///
    /// Bytes per rank for weights, gradients, optimizer state, activations and workspace of a
    /// model config (ours or a Hugging Face config.json), counted as this crate trains
    /// (checked against the simulation's memory-pool peak: --measure).
    Plan(PlanArgs),
}

/// `burn-ascend plan`.
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// A config.json (ours or a Hugging Face one); the finetune example's model without it.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Tokens of one rank's packed batch.
    #[arg(long, value_name = "N", value_parser = at_least_one, default_value_t = 4096, allow_negative_numbers = true)]
    pub tokens_per_rank: usize,
    /// Longest sequence (default: --tokens-per-rank).
    #[arg(long, value_name = "N", value_parser = at_least_one, allow_negative_numbers = true)]
    pub seq_len: Option<usize>,
    /// Data-parallel ranks.
    #[arg(long, value_name = "N", value_parser = at_least_one, default_value_t = 1, allow_negative_numbers = true)]
    pub ranks: usize,
    /// Compute dtype (f32 master weights and optimizer state either way).
    #[arg(long, value_enum, default_value_t = ComputeDtype::Bf16)]
    pub dtype: ComputeDtype,
    /// LoRA of this rank (frozen bf16 base); a full fine-tune without it.
    #[arg(long, value_name = "R", value_parser = at_least_one, allow_negative_numbers = true)]
    pub lora_rank: Option<usize>,
    /// The projections LoRA adapts (comma-separated; all-linear for all seven).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "q_proj,v_proj",
        requires = "lora_rank"
    )]
    pub lora_targets: String,
    /// ZeRO stage: 1 partitions the optimizer state, 2 the gradients too, 3 the weights too
    /// (as `finetune --zero K` trains; stage 3's formula gathers one layer at a time).
    #[arg(long, value_name = "K", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero: u8,
    /// Activation checkpointing per block (only each block's input kept; `finetune
    /// --checkpointing` trains so).
    #[arg(long)]
    pub checkpointing: bool,
    /// Also run two training steps on the simulated device and print the memory pool's peak
    /// (one rank, stage 0, with or without checkpointing; small configs: the simulation
    /// computes on the host).
    #[arg(long)]
    pub measure: bool,
}

/// What `run --help` adds after the flags: the ops (from the op table) and the names the
/// bundle's tensors and attributes take.
fn run_help() -> String {
    format!(
        "\
ops (each's own inputs → its outputs):
{}
devices: reference (f64 CPU reference), cpu (fast CPU kernels, default), sim (the aclnn
dispatch against a host simulation of the ACL ABI, not CANN), npu (CANN's aclnn, loaded at
run time from $ASCEND_TOOLKIT_HOME / $ASCEND_HOME_PATH / /usr/local/Ascend/ascend-toolkit/latest;
device $ASCEND_DEVICE_ID or 0)
inputs are named after the aclnn parameters (query, key, value, sink, attenMask, pseShift,
actualSeqLengths, actualSeqLengthsKv, blocktable, kvPaddingSize, antiquantScale,
antiquantOffset, quantScale2, quantOffset2, keyCache, valueCache, slotMapping, compressLens,
compressSeqOffset, seqLens, ...);
attributes are strings in the safetensors __metadata__ (numHeads, scaleValue, preTokens,
nextTokens, inputLayout, numKeyValueHeads, sparseMode, innerPrecise, blockSize, cacheMode,
scatterMode, strides, offsets, keepProb, softmaxLseFlag (true/false), ...)
exit status: 0 done, 1 files, 2 refused input or command line, 3 device unavailable",
        crate::replay::ops_help()
    )
}

/// What `selftest --help` adds after the flags.
const SELFTEST_HELP: &str = "\
runs every attention op and a set of the Ascend backend's native ops on a fixed suite of
small cases against the CPU reference (f32, f16, bf16 where the op takes them), times each,
runs the hardware probes (dropout bit order, CANN's dsink and the backend's around CANN's
post-processing chunk, the entry
points present, FRACTAL_NZ caches) and writes PATH.md and PATH.json (default
selftest-report); exit 0 only when every case passes, 4 when one fails, 3 without an NPU";

/// `burn-ascend run <op> <in> <out> [--device d]`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The op: one of `run --help`'s list.
    // A string, not a value enum: the input is read first, so a missing file is an io error
    // (exit 1) whatever the op; an unknown op is then refused by `run_op` (exit 2).
    pub op: String,
    /// The input bundle (safetensors).
    #[arg(value_name = "in.safetensors")]
    pub input: PathBuf,
    /// Where the outputs are written (safetensors).
    #[arg(value_name = "out.safetensors")]
    pub output: PathBuf,
    /// Where the op runs.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// The CANN release whose rules apply where they differ by release (8.5.0-beta.1, 8.5.0,
    /// 9.0.0, 9.1.0; 8.5 for 8.5.0): the one `sim` pretends to be (else
    /// $BURN_ASCEND_CANN_RELEASE, else 9.1.0); on `reference` and `cpu` a call it refuses is
    /// refused (without the flag, a call some release accepts runs, with a note naming those
    /// that refuse it). Not with `npu`, whose release is the installed CANN's.
    #[arg(long, value_name = "RELEASE")]
    pub cann_release: Option<String>,
}

/// `burn-ascend bench [--quick] [--json PATH] [--filter SUBSTRING]`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Fewer repetitions (under 2 minutes on 2 cores).
    #[arg(long)]
    pub quick: bool,
    /// Tiny shapes, one repetition: every code path in a test in a second.
    #[arg(long, hide = true)]
    pub smoke: bool,
    /// Also write the results to PATH as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Only the cases whose name contains SUBSTRING.
    #[arg(long, value_name = "SUBSTRING")]
    pub filter: Option<String>,
    /// A Hugging Face checkpoint folder: time the real model on the CPU instead of the kernels
    /// (prefill, greedy decode, a full fine-tune step and a LoRA step, each as tokens/s and as
    /// a fraction of the same run's read bandwidth or sgemm).
    #[arg(long, value_name = "HF_DIR", conflicts_with = "filter")]
    pub model: Option<PathBuf>,
}

/// `burn-ascend selftest [--device npu|sim] [--report PATH]`.
#[derive(Debug, Args)]
pub struct SelftestArgs {
    /// The device; without it, the NPU when one opens (never the simulation by itself).
    #[arg(long, value_enum)]
    pub device: Option<SelftestDevice>,
    /// Where the report goes: PATH.md and PATH.json.
    #[arg(long, value_name = "PATH", default_value = "selftest-report")]
    pub report: PathBuf,
    /// Perturbs one device result so the run must fail (proves the exit status).
    #[arg(long, hide = true)]
    pub inject_error: bool,
    /// (sim) The CANN release the simulation pretends to be (8.5.0-beta.1, 8.5.0, 9.0.0, 9.1.0;
    /// else $BURN_ASCEND_CANN_RELEASE, else 9.1.0). Not with `npu`, whose release is the
    /// installed CANN's.
    #[arg(long, value_name = "RELEASE")]
    pub cann_release: Option<String>,
}

/// `selftest --device`: only the aclnn devices; the host devices have nothing to check
/// against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SelftestDevice {
    /// CANN's aclnn on the NPU ($ASCEND_DEVICE_ID, else 0); the default when one opens.
    Npu,
    /// The host simulation of the ACL ABI (not CANN): checks this build without an NPU.
    Sim,
}

impl From<SelftestDevice> for Device {
    fn from(d: SelftestDevice) -> Self {
        match d {
            SelftestDevice::Npu => Device::Npu,
            SelftestDevice::Sim => Device::Sim,
        }
    }
}

/// Where the examples train or serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExampleDevice {
    /// `NdArray` on the CPU.
    Cpu,
    /// The `Ascend` backend on the host simulation of the ACL ABI (not CANN; slow: its
    /// kernels are the CPU reference's).
    Sim,
    /// The `Ascend` backend on a real NPU.
    Ascend,
}

/// `finetune --dtype`: mixed precision's compute dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ComputeDtype {
    /// f32 throughout.
    F32,
    /// bf16 compute, f32 master weights and optimizer state.
    Bf16,
    /// f16 compute, f32 master weights and optimizer state.
    F16,
}

impl ComputeDtype {
    /// The model's compute dtype: `None` for f32 throughout.
    pub fn float_dtype(self) -> Option<FloatDType> {
        match self {
            Self::F32 => None,
            Self::Bf16 => Some(FloatDType::BF16),
            Self::F16 => Some(FloatDType::F16),
        }
    }
}

/// The `finetune` example.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "finetune",
    about = "Fine-tune a small gpt-oss / Llama style transformer on packed variable-length batches, then sample from it",
    after_help = FINETUNE_HELP
)]
pub struct FinetuneArgs {
    /// The whole run's length (the schedule spans it).
    // `allow_negative_numbers` on every integer: `-1` reaches the integer parser and is refused
    // as an invalid value of the flag, not mistaken for an unknown flag.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 300,
        allow_negative_numbers = true
    )]
    pub steps: usize,
    /// Where to train.
    #[arg(long, value_enum, default_value_t = ExampleDevice::Cpu)]
    pub device: ExampleDevice,
    /// The corpus: .txt, or .jsonl of {"text": …} records or of chat records
    /// ({"messages": [{"role", "content"}, …]}, rendered with --checkpoint's chat template, the
    /// loss on the assistant's tokens only); the bundled Shakespeare without it.
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,
    /// Continue the run in --out up to --steps.
    #[arg(long)]
    pub resume: bool,
    /// Start from a Hugging Face checkpoint folder.
    #[arg(long, value_name = "HF_DIR")]
    pub checkpoint: Option<PathBuf>,
    /// Output folder.
    #[arg(long, value_name = "DIR", default_value = "runs/finetune")]
    pub out: PathBuf,
    /// Tokens per batch (per rank).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1024,
        allow_negative_numbers = true
    )]
    pub batch_tokens: usize,
    /// Longest packed sequence.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 256,
        allow_negative_numbers = true
    )]
    pub seq_len: usize,
    /// Peak learning rate [default: 3e-3 from scratch; with --checkpoint 2e-5, or 2e-4 with
    /// --lora-rank (then a linear warm-up over 10 % of --steps)].
    #[arg(
        long,
        value_parser = positive_finite,
        value_name = "X",
        allow_negative_numbers = true
    )]
    pub lr: Option<f64>,
    /// Seed of the initialisation, the batches and the samples.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 42,
        allow_negative_numbers = true
    )]
    pub seed: u64,
    /// Skip sampling after training.
    #[arg(long)]
    pub no_samples: bool,
    /// Stop after step N (an interrupted run that --resume completes).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub stop_after: Option<usize>,
    /// (sim, ascend) A per-op table of the dispatch (calls, host µs, device ms) per step.
    #[arg(long)]
    pub profile: bool,
    /// (sim, one device) Run the steps with the simulated kernels off: launches, shapes and
    /// host time are real, the numbers are not (nothing is written); for the modelled device
    /// time of a model too large to compute on the host. With --profile.
    #[arg(long, requires = "profile")]
    pub dry_run: bool,
    /// A fresh model of this config.json (ours or a Hugging Face one) instead of the default
    /// small model.
    #[arg(long, value_name = "FILE", conflicts_with = "checkpoint")]
    pub model_config: Option<PathBuf>,
    /// (sim, ascend) Mixed precision: f32 master weights and optimizer state, the blocks,
    /// attention and output head computing in this dtype.
    #[arg(long, value_enum, default_value_t = ComputeDtype::F32)]
    pub dtype: ComputeDtype,
    /// (sim, ascend) Data-parallel training on devices 0..N.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub devices: usize,
    /// (with --devices N) Also train the first 3 global batches (5 with --zero) on one device
    /// and compare.
    #[arg(long)]
    pub check_ddp: bool,
    /// (with --devices N) ZeRO: 1 shards AdamW's state over the ranks, 2 the gradients too, 3
    /// the weights too (stored sharded between steps, gathered per block for the step).
    #[arg(long, value_name = "K", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero: u8,
    /// Publish a checkpoint every N steps (and at the end).
    #[arg(
        long,
        value_parser = at_least_one,
        value_name = "N",
        default_value_t = 100,
        allow_negative_numbers = true
    )]
    pub save_every: usize,
    /// Load a --checkpoint whose weights hold NaN or ±inf (refused by default).
    #[arg(long)]
    pub allow_non_finite_weights: bool,
    /// Refuse a --checkpoint whose weight files hold tensors the model does not use (by
    /// default they are ignored with one warning line, as transformers does).
    #[arg(long)]
    pub strict: bool,
    /// The memory a training step may need (bytes, or with a unit: 512MiB, 8GiB); by default
    /// the available host memory.
    #[arg(long, value_parser = byte_size, value_name = "SIZE", allow_hyphen_values = true)]
    pub memory_budget: Option<u64>,
    /// Context parallelism: each step's packed batch split across N ranks (threads on cpu,
    /// devices 0..N on sim / ascend).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub cp: usize,
    /// (with --cp N) Also train the first 3 batches on one device and compare.
    #[arg(long)]
    pub check_cp: bool,
    /// LoRA: train rank-R adapters on a frozen --checkpoint instead of every weight.
    #[arg(long, value_name = "R", value_parser = at_least_one, allow_negative_numbers = true)]
    pub lora_rank: Option<usize>,
    /// LoRA's alpha: the adapters' output is scaled by alpha / R (PEFT's default 8).
    #[arg(
        long,
        value_name = "X",
        value_parser = positive_finite,
        default_value_t = 8.0,
        allow_negative_numbers = true,
        requires = "lora_rank"
    )]
    pub lora_alpha: f64,
    /// The projections LoRA adapts (comma-separated; all-linear for all seven).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "q_proj,v_proj",
        requires = "lora_rank"
    )]
    pub lora_targets: String,
    /// Dropout probability on the adapters' input while training, in [0, 1).
    #[arg(
        long,
        value_name = "P",
        value_parser = dropout_probability,
        default_value_t = 0.0,
        allow_negative_numbers = true,
        requires = "lora_rank"
    )]
    pub lora_dropout: f64,
    /// After training, also write the base with the adapters merged in (a plain Hugging Face
    /// checkpoint) to DIR/merged.
    #[arg(long)]
    pub merge_lora: bool,
    /// (sim) The CANN release the simulation pretends to be (8.5.0-beta.1, 8.5.0, 9.0.0, 9.1.0;
    /// else $BURN_ASCEND_CANN_RELEASE, else 9.1.0): FIA's sink dtype and the varlen backward's
    /// dsink follow it.
    #[arg(long, value_name = "RELEASE")]
    pub cann_release: Option<String>,
    /// (one device) Activation checkpointing: `block` (the default when the flag has no
    /// value) keeps only each transformer block's input and recomputes the block in backward;
    /// `balanced` is Burn's BalancedCheckpointing over the whole model (recomputes memory-bound
    /// ops; it raises this model's peak, kept for comparison).
    #[arg(long, num_args = 0..=1, default_missing_value = "block", value_name = "block|balanced")]
    pub checkpointing: Option<Checkpointing>,
    /// How batches are packed: `varlen` (documents of any length up to --seq-len, each its
    /// own sequence) or `fixed` (rows of exactly --seq-len tokens from the concatenated
    /// documents, the same `cu_seqlens` every step; --graph needs it).
    #[arg(long, value_enum, default_value_t = Pack::Varlen, value_name = "varlen|fixed")]
    pub pack: Pack,
    /// (sim, ascend; one device; with --pack fixed) Capture one whole training step (forward,
    /// backward, clip, AdamW) as an ACL graph after a warm-up step and replay it per step: one
    /// launch per step.
    #[arg(long)]
    pub graph: bool,
}

/// `finetune --pack`'s batch shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pack {
    /// Variable-length documents packed into each batch.
    Varlen,
    /// Fixed-length rows: every batch of the same shape.
    Fixed,
}

impl FinetuneArgs {
    /// Why `--graph` cannot run with these flags (`unsupported: --graph with …`), if so.
    pub fn graph_refusal(&self, launched: bool) -> Option<String> {
        if !self.graph {
            return None;
        }
        let with = [
            (
                self.device == ExampleDevice::Cpu,
                "--device cpu (graph capture is ACL's)",
            ),
            (
                self.devices > 1 || launched,
                "--devices N / a launched rank (one device)",
            ),
            (self.zero > 0, "--zero"),
            (self.cp > 1, "--cp"),
            (self.checkpointing.is_some(), "--checkpointing"),
            (
                self.lora_rank.is_some() && self.lora_dropout > 0.0,
                "--lora-dropout (a replayed step would reuse the captured dropout mask; use \
                 --lora-dropout 0)",
            ),
            (self.dry_run, "--dry-run"),
            (self.check_ddp, "--check-ddp"),
        ];
        if let Some((_, what)) = with.iter().find(|(bad, _)| *bad) {
            return Some(format!("unsupported: --graph with {what}"));
        }
        if self.pack != Pack::Fixed {
            return Some(
                "invalid --graph: needs --pack fixed (the varlen attention's sequence lengths \
                 are baked into the captured launches)"
                    .into(),
            );
        }
        None
    }
}

/// The peak learning rate of a model trained from scratch here (the toy's: small, randomly
/// initialised, it wants a large step).
pub const FROM_SCRATCH_LR: f64 = 3e-3;
/// The peak learning rate of a full fine-tune of a pretrained `--checkpoint`: 2e-5, as Alpaca /
/// Vicuna-style supervised fine-tuning and MindSpeed-LLM's and LLaMA-Factory's full-SFT examples
/// use (1e-5..2e-5). A pretrained model sits in a minimum that a from-scratch step (3e-3) throws
/// it out of: the loss climbs instead of falling.
pub const FULL_FINETUNE_LR: f64 = 2e-5;
/// The peak learning rate of a LoRA fine-tune (`--lora-rank`): 2e-4, what QLoRA, PEFT's and
/// Unsloth's examples use (LLaMA-Factory's 1e-4): the adapters start at zero (B = 0) and are
/// few, so they take ten times a full fine-tune's step.
pub const LORA_LR: f64 = 2e-4;
/// The fraction of the steps a fine-tune of a pretrained model warms up over, linearly (the
/// warm-up ratio 0.1 of LLaMA-Factory's SFT examples): Adam's first steps, with moments still
/// estimated from one or two batches, would otherwise move the pretrained weights at the full
/// rate.
pub const PRETRAINED_WARMUP_FRACTION: f64 = 0.1;

/// A run's learning-rate schedule before its cosine decay: the peak and the warm-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSchedule {
    /// The peak learning rate.
    pub peak: f64,
    /// Warm-up steps; `None`: the from-scratch default (5 % of the steps).
    pub warmup_steps: Option<usize>,
}

impl FinetuneArgs {
    /// The learning rate and warm-up this run takes: `--lr` when given; else from scratch
    /// [`FROM_SCRATCH_LR`] with the default warm-up, and with `--checkpoint` (a pretrained
    /// model) [`FULL_FINETUNE_LR`], or [`LORA_LR`] with `--lora-rank`, warming up over
    /// [`PRETRAINED_WARMUP_FRACTION`] of `--steps` (at least one step), whatever `--lr` says.
    pub fn lr_schedule(&self) -> LrSchedule {
        if self.checkpoint.is_none() {
            return LrSchedule {
                peak: self.lr.unwrap_or(FROM_SCRATCH_LR),
                warmup_steps: None,
            };
        }
        let default = if self.lora_rank.is_some() {
            LORA_LR
        } else {
            FULL_FINETUNE_LR
        };
        let warmup = (self.steps as f64 * PRETRAINED_WARMUP_FRACTION).ceil() as usize;
        LrSchedule {
            peak: self.lr.unwrap_or(default),
            warmup_steps: Some(warmup.max(1)),
        }
    }
}

/// `finetune --checkpointing`'s strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Checkpointing {
    /// Per transformer block: only the block's input kept, the block recomputed in backward.
    Block,
    /// Burn's `BalancedCheckpointing` over the whole model.
    Balanced,
}

/// What `finetune --help` adds after the flags.
const FINETUNE_HELP: &str = "\
--dtype bf16|f16 (sim, ascend): mixed precision, f32 master weights and optimizer state,
  the blocks, attention and output head computing in that dtype
--devices N (sim, ascend): data-parallel training on devices 0..N (one thread each, HCCL
  all-reduce of the gradients; on sim the simulation's HCCL, not CANN's); each rank trains on
  its own batches (the global batch is N × --batch-tokens). Launched by torchrun (RANK,
  WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set) with --device ascend, this process is
  one rank on device LOCAL_RANK instead
--check-ddp (with --devices N): also trains the first 3 global batches on one device and ends
  with `finetune: data-parallel <N> devices, max |Δloss| vs 1 device <x>`
--zero K (with --devices N, N >= 2): ZeRO stage K shards the training state over the ranks:
  1 AdamW's moments (gradients all-reduced, each rank updates its slice of the flattened
  weights), 2 the gradients too (reduce-scattered), 3 the weights too (kept sharded between
  steps, all-gathered block by block before the forward); the updated slices are all-gathered.
  Checkpoints are sharded: each rank writes its slice of the master weights and moments, and
  --resume reads each rank's ranges on any --devices (or WORLD_SIZE). With --check-ddp the first 5 global batches are compared and the line reads
  `finetune: data-parallel <N> devices (zero <K>), max |Δloss| vs 1 device <x>`
--cp N: context parallelism: each step's packed batch split across N ranks (a head and a tail
  chunk of every sequence of 2N tokens or more, shorter ones whole), keys and values
  all-gathered per layer, dK / dV reduce-scattered, the other gradients summed; on cpu the
  ranks are threads with host collectives (the emulation), on sim / ascend devices 0..N over
  HCCL. Needs --batch-tokens of at least 2·N²
--check-cp (with --cp N): also trains the first 3 batches on one device and ends with
  `finetune: context-parallel <N> devices, max |Δloss| vs 1 device <x>`
--profile (sim, ascend): a per-op table of the dispatch (calls, host µs, device ms) per step;
  on sim also the modelled Atlas A2 time (a roofline per launch from its FLOPs and HBM bytes,
  BENCHMARKS.md) of the top ops and `finetune: per step <L> launches, host <H> µs, modelled
  device <D> µs (Atlas A2 roofline), host / device <R>`
--dry-run (sim, with --profile): the steps with the simulated kernels off (real launches,
  shapes and host time; meaningless numbers; nothing written): the modelled time of a model
  too large to compute here, e.g. --model-config tools/profile/qwen2.5-0.5b.json
  --batch-tokens 8192 --seq-len 8192 --steps 2
--lora-rank R [--lora-alpha A --lora-targets q_proj,v_proj,... --lora-dropout P] (with
  --checkpoint HF_DIR): LoRA. The base is frozen (no gradients, no optimizer state; its
  matrices stored bf16, or bf16-rounded f32 on cpu), only the adapters train; --out gets PEFT's
  adapter_config.json + adapter_model.safetensors (PEFT loads them; generate --adapter DIR too),
  --resume continues from them, --merge-lora also writes DIR/merged (base + adapters merged)
--lr X: the peak learning rate, reached after a linear warm-up and followed by a cosine decay to
  a tenth. Without it: 3e-3 from scratch (warm-up over 5 % of --steps); with --checkpoint, a
  pretrained model, 2e-5 for a full fine-tune and 2e-4 with --lora-rank (common practice for
  supervised fine-tuning: Alpaca / MindSpeed-LLM full SFT 1e-5..2e-5, QLoRA / PEFT LoRA
  1e-4..2e-4), warming up over 10 % of --steps (also with --lr)
--steps is the whole run's length (the schedule spans it); --resume continues the run in --out
  up to it; --stop-after N stops early (an interrupted run that --resume completes)
--save-every N: each save is a new folder --out/checkpoints/step-NNNNNN (files fsynced,
  manifest.json with sizes and CRC-32s last), published by renaming --out/LATEST; --resume
  verifies the checkpoint LATEST names and refuses a mixed or truncated one";

/// `generate --attend-path`: which attention path serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttendPathArg {
    /// Fused inference attention (sinks as its learnableSink, windows as masks).
    Fused,
    /// Prompt / incremental attention, sinks on a placeholder token's pseShift.
    PromptIncre,
}

impl From<AttendPathArg> for burn_ascend::AttendPath {
    fn from(p: AttendPathArg) -> Self {
        match p {
            AttendPathArg::Fused => Self::Fused,
            AttendPathArg::PromptIncre => Self::PromptIncre,
        }
    }
}

/// The `generate` example.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "generate",
    about = "Serve several prompts at once through the paged KV cache"
)]
pub struct GenerateArgs {
    /// The checkpoint folder (ours, or a Hugging Face llama, qwen2, qwen3 or mistral one).
    #[arg(long, value_name = "DIR", default_value = "runs/finetune")]
    pub checkpoint: PathBuf,
    /// (sim) The CANN release the simulation pretends to be (8.5.0-beta.1, 8.5.0, 9.0.0, 9.1.0;
    /// else $BURN_ASCEND_CANN_RELEASE, else 9.1.0): FIA's sink dtype and the varlen backward's
    /// dsink follow it.
    #[arg(long, value_name = "RELEASE")]
    pub cann_release: Option<String>,
    /// A prompt (repeatable); replaces the built-in prompts.
    #[arg(long = "prompt", value_name = "TEXT")]
    pub prompts: Vec<String>,
    /// Decode every prompt greedily (otherwise even prompts are greedy, odd ones top-p).
    #[arg(long)]
    pub greedy: bool,
    /// Tokens to generate per prompt.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 80,
        allow_negative_numbers = true
    )]
    pub max_new: usize,
    /// Nucleus sampling's probability mass.
    #[arg(
        long,
        value_parser = probability,
        value_name = "P",
        default_value_t = 0.9,
        allow_negative_numbers = true
    )]
    pub top_p: f64,
    /// Sampling temperature.
    #[arg(
        long,
        value_parser = positive_finite,
        value_name = "T",
        default_value_t = 0.8,
        allow_negative_numbers = true
    )]
    pub temperature: f64,
    /// Sampling seed.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub seed: u64,
    /// Tokens per KV cache block.
    #[arg(
        long,
        value_parser = at_least_one,
        value_name = "N",
        default_value_t = 16,
        allow_negative_numbers = true
    )]
    pub block_size: usize,
    /// Where to serve.
    #[arg(long, value_enum, default_value_t = ExampleDevice::Cpu)]
    pub device: ExampleDevice,
    /// Recompute every full sequence in one packed varlen forward and compare the logits.
    #[arg(long)]
    pub check: bool,
    /// Decode through a captured ACL graph: the decode step of the batch is captured once and
    /// replayed per token as one launch (Ascend devices only: `--device sim` or `ascend`; with
    /// `--dtype bf16` or `f16`).
    #[arg(long)]
    pub graph: bool,
    /// (sim, ascend) The dtype the KV caches hold and attention computes in: f32 (the model's)
    /// or, as served on an NPU, bf16 / f16, the projections staying in the model's dtype.
    /// CANN's inference attention ops take no f32: an f32 model attends through the composite.
    #[arg(long, value_enum, default_value_t = ComputeDtype::F32)]
    pub dtype: ComputeDtype,
    /// Force one of the two attention paths (to compare them).
    #[arg(long, value_enum)]
    pub attend_path: Option<AttendPathArg>,
    /// Each prompt as a user's message in the checkpoint's chat template, with the assistant's
    /// generation prompt; generation also stops at the tokenizer's eos_token (the end of turn).
    #[arg(long)]
    pub chat: bool,
    /// Load weights holding NaN or ±inf (refused by default).
    #[arg(long)]
    pub allow_non_finite_weights: bool,
    /// Refuse weight files holding tensors the model does not use (by default they are
    /// ignored with one warning line, as transformers does).
    #[arg(long)]
    pub strict: bool,
    /// The memory the KV cache may take (bytes, or with a unit: 512MiB, 8GiB); by default the
    /// available host memory.
    #[arg(long, value_parser = byte_size, value_name = "SIZE", allow_hyphen_values = true)]
    pub memory_budget: Option<u64>,
    /// A LoRA adapter folder in PEFT's format (adapter_config.json + adapter_model.safetensors)
    /// applied to --checkpoint.
    #[arg(long, value_name = "DIR")]
    pub adapter: Option<PathBuf>,
    /// (sim, ascend) After the run, decode again from the same prompts and print per decode
    /// step the dispatch table, and on sim the modelled Atlas A2 time of the top ops with
    /// `generate: per step <L> launches, host <H> µs, modelled device <D> µs (Atlas A2
    /// roofline), host / device <R>`.
    #[arg(long)]
    pub profile: bool,
}

/// The `varlen_train` example.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "varlen_train",
    about = "Train a small attention layer with learned sinks on packed variable-length sequences"
)]
pub struct VarlenTrainArgs {
    /// Training steps.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 300,
        allow_negative_numbers = true
    )]
    pub steps: usize,
}

/// A finite number above 0 (`--lr`, `--temperature`): a negative learning rate climbs the
/// loss, a NaN one poisons every weight, a zero temperature divides by zero.
fn positive_finite(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("must be a finite number above 0, got {s}"))
    }
}

/// A probability mass in (0, 1] (`--top-p`).
fn probability(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err(format!("must be in (0, 1], got {s}"))
    }
}

/// A dropout probability in [0, 1) (`--lora-dropout`: 1 would drop everything).
fn dropout_probability(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("must be in [0, 1), got {s}"))
    }
}

/// A whole number of at least 1 (`--block-size`: a page of 0 tokens holds nothing).
fn at_least_one(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if n >= 1 {
        Ok(n)
    } else {
        Err("must be at least 1, got 0".into())
    }
}

/// A size in bytes, with an optional unit (`K`, `M`, `G`, `T`, as `KiB`… or `KB`…, all
/// binary): `--memory-budget`.
fn byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("unknown unit in {s:?} (B, KiB, MiB, GiB, TiB)")),
    };
    let x: f64 = num
        .parse()
        .map_err(|_| format!("must be a size such as 8GiB, got {s:?}"))?;
    let bytes = x * (1u64 << shift) as f64;
    if bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64 {
        Ok(bytes as u64)
    } else {
        Err(format!("must be a size of at least 1 byte, got {s:?}"))
    }
}
