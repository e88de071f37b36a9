//! The `burn-ascend` command line: replay an aclnn op on tensors dumped to safetensors.
//!
//! `burn-ascend run <op> <in.safetensors> <out.safetensors> [--device reference|cpu|sim|npu]`
//! (the command lines, parsed by clap: [`args`])
//!
//! Tensors are named after the aclnn parameters without the `Optional` suffix; attributes are
//! strings in the safetensors `__metadata__` under their aclnn names. Missing attributes take
//! the docs' defaults.

pub mod alloc_stats;
pub mod args;
pub mod bench;
pub mod bench_dispatch;
mod bench_timing;
pub mod device;
pub mod fia;
pub mod finetune_cp;
pub mod incre;
pub mod io;
pub mod names;
pub mod plan;
pub mod prompt;
pub mod scatter;
pub mod selftest;
pub mod varlen;

use std::path::Path;

use burn_ascend::AttnError;
use clap::Parser;
use io::Bundle;

/// Where an op runs (`--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    /// The plain CPU reference (f64 accumulation).
    Reference,
    /// The public ops API on Burn's `NdArray` (its fast CPU kernels).
    Cpu,
    /// The public ops API on the `Ascend` backend against its host simulation of the ACL ABI
    /// (not CANN): the backend's code path, checked on machines without an NPU.
    Sim,
    /// The public ops API on the `Ascend` backend on a real NPU through CANN's aclnn, loaded
    /// at run time (device `$ASCEND_DEVICE_ID`, else 0).
    Npu,
}

impl Device {
    /// Errors for devices that cannot run ops here: `npu` without CANN's libraries (one line
    /// naming every path tried).
    pub fn ensure_available(self) -> Result<(), CliError> {
        device::probe(self)
    }

    /// Whether ops run through the aclnn dispatch layer (`sim`, `npu`).
    pub fn is_acl(self) -> bool {
        matches!(self, Self::Sim | Self::Npu)
    }
}

/// A CLI failure; each maps to one line on stderr and a non-zero exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line was refused, or `--help` / `--version` asked for: clap's own message
    /// and exit status (2; 0 for help), which the binary prints through clap
    /// ([`clap::Error::exit`]) so that help goes to stdout.
    #[error("{0}")]
    Usage(clap::Error),
    /// An op refused its input (exit 2).
    #[error("{0}")]
    Attn(AttnError),
    /// Reading or writing files failed (exit 1).
    #[error("io: {0}")]
    Io(String),
    /// The Ascend device (or its simulation) is unavailable or a call on it failed (exit 3).
    #[error("device: {0}")]
    Device(String),
    /// `selftest` ran and some case failed (exit 4): the one-line summary.
    #[error("selftest failed: {0}")]
    Selftest(String),
    /// An op, tensor or attribute name `run` does not know (exit 2, as any refused input): the
    /// message names the closest known name.
    #[error("{0}")]
    Unknown(String),
}

impl CliError {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Usage(e) => e.exit_code(),
            Self::Attn(_) | Self::Unknown(_) => 2,
            Self::Io(_) => 1,
            Self::Device(_) => 3,
            Self::Selftest(_) => 4,
        }
    }
}

impl From<clap::Error> for CliError {
    fn from(e: clap::Error) -> Self {
        Self::Usage(e)
    }
}

impl From<AttnError> for CliError {
    fn from(e: AttnError) -> Self {
        Self::Attn(e)
    }
}

/// The ops `run` knows.
pub const OPS: &[&str] = &[
    "varlen-fwd",
    "varlen-bwd",
    "prompt",
    "incre",
    "fia",
    "scatter",
];

/// Runs one op on a bundle of named tensors.
///
/// The input is validated the same way for every device before anything is dispatched: the
/// names first ([`names`]), then the op's contract and the host-side checks of the values; only
/// then is the device opened (for `npu`, CANN loaded), so a bad input exits 2 with the same
/// line on `reference`, `cpu`, `sim` and `npu`.
pub fn run_op(op: &str, input: &Bundle, device: Device) -> Result<Bundle, CliError> {
    let Some(names) = names::of(op) else {
        return Err(unknown_op(op));
    };
    names.check(op, input)?;
    match op {
        "varlen-fwd" => varlen::forward(input, device),
        "varlen-bwd" => varlen::backward(input, device),
        "prompt" => prompt::prompt(input, device),
        "incre" => incre::incre(input, device),
        "fia" => fia::fia(input, device),
        "scatter" => scatter::scatter(input, device),
        other => Err(unknown_op(other)),
    }
}

fn unknown_op(op: &str) -> CliError {
    CliError::Unknown(format!("unknown op '{op}' (ops: {})", OPS.join(", ")))
}

/// `run <op> <in> <out> [--device d]`.
pub fn run_files(op: &str, input: &Path, output: &Path, device: Device) -> Result<(), CliError> {
    let bundle = Bundle::read(input)?;
    let out = run_op(op, &bundle, device)?;
    out.write(output)
}

/// Parses the process arguments (without the program name) and runs.
///
/// A refused command line and `--help` come back as [`CliError::Usage`] holding clap's error;
/// the binary lets clap print it ([`clap::Error::exit`]).
pub fn main_with_args(args: &[String]) -> Result<(), CliError> {
    let cli = args::Cli::try_parse_from(
        std::iter::once("burn-ascend").chain(args.iter().map(String::as_str)),
    )?;
    match cli.command {
        args::Command::Run(a) => run_files(&a.op, &a.input, &a.output, a.device),
        args::Command::Bench(a) => bench::main(&a),
        args::Command::Selftest(a) => selftest::main(&a),
        args::Command::Plan(a) => plan::main(&a),
    }
}
