//! The `burn-ascend` command line: replay an aclnn op on tensors dumped to safetensors.
//!
//! `burn-ascend run <op> <in.safetensors> <out.safetensors> [--device reference|cpu|sim|npu]`
//!
//! Tensors are named after the aclnn parameters without the `Optional` suffix; attributes are
//! strings in the safetensors `__metadata__` under their aclnn names. Missing attributes take
//! the docs' defaults.

pub mod alloc_stats;
pub mod bench;
pub mod bench_dispatch;
pub mod device;
pub mod fia;
pub mod incre;
pub mod io;
pub mod names;
pub mod prompt;
pub mod scatter;
pub mod selftest;
pub mod varlen;

use std::fmt;
use std::path::Path;

use burn_ascend::AttnError;
use io::Bundle;

/// Where an op runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Parses `--device`.
    pub fn parse(s: &str) -> Result<Self, CliError> {
        Ok(match s {
            "reference" => Self::Reference,
            "cpu" => Self::Cpu,
            "sim" => Self::Sim,
            "npu" => Self::Npu,
            other => {
                return Err(CliError::Usage(format!(
                    "unknown device '{other}' (reference, cpu, sim, npu)"
                )))
            }
        })
    }

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
#[derive(Debug)]
pub enum CliError {
    /// Bad command line (exit 64).
    Usage(String),
    /// An op refused its input (exit 2).
    Attn(AttnError),
    /// Reading or writing files failed (exit 1).
    Io(String),
    /// The Ascend device (or its simulation) is unavailable or a call on it failed (exit 3).
    Device(String),
    /// `selftest` ran and some case failed (exit 4): the one-line summary.
    Selftest(String),
    /// A tensor or attribute the op does not read (exit 2, as any refused input): the message
    /// names the closest known name.
    Unknown(String),
}

impl CliError {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Usage(_) => 64,
            Self::Attn(_) | Self::Unknown(_) => 2,
            Self::Io(_) => 1,
            Self::Device(_) => 3,
            Self::Selftest(_) => 4,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(m) => write!(f, "usage: {m}"),
            Self::Attn(e) => write!(f, "{e}"),
            Self::Io(m) => write!(f, "io: {m}"),
            Self::Device(m) => write!(f, "device: {m}"),
            Self::Selftest(m) => write!(f, "selftest failed: {m}"),
            Self::Unknown(m) => write!(f, "{m}"),
        }
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
        return Err(CliError::Usage(format!(
            "unknown op '{other}' (ops: {})",
            OPS.join(", "),
            other = op
        )));
    };
    names.check(op, input)?;
    match op {
        "varlen-fwd" => varlen::forward(input, device),
        "varlen-bwd" => varlen::backward(input, device),
        "prompt" => prompt::prompt(input, device),
        "incre" => incre::incre(input, device),
        "fia" => fia::fia(input, device),
        "scatter" => scatter::scatter(input, device),
        other => Err(CliError::Usage(format!(
            "unknown op '{other}' (ops: {})",
            OPS.join(", ")
        ))),
    }
}

/// `run <op> <in> <out> [--device d]`.
pub fn run_files(op: &str, input: &Path, output: &Path, device: Device) -> Result<(), CliError> {
    let bundle = Bundle::read(input)?;
    let out = run_op(op, &bundle, device)?;
    out.write(output)
}

/// Usage text.
pub const USAGE: &str =
    "burn-ascend run <op> <in.safetensors> <out.safetensors> [--device reference|cpu|sim|npu]
  ops: varlen-fwd, varlen-bwd, prompt, incre, fia, scatter
  devices: reference (f64 CPU reference), cpu (fast CPU kernels, default), sim (the aclnn
  dispatch against a host simulation of the ACL ABI, not CANN), npu (CANN's aclnn, loaded at
  run time from $ASCEND_TOOLKIT_HOME / $ASCEND_HOME_PATH / /usr/local/Ascend/ascend-toolkit/latest;
  device $ASCEND_DEVICE_ID or 0)
  inputs are named after the aclnn parameters (query, key, value, sink, attenMask, pseShift,
  actualSeqLengths, actualSeqLengthsKv, blocktable, kvPaddingSize, antiquantScale,
  antiquantOffset, quantScale2, quantOffset2, keyCache, valueCache, slotMapping, compressLens,
  compressSeqOffset, seqLens, ...; incre's tensor-list form: key.0, key.1, ..., value.0, ...; fia: blockTable,
  queryPaddingSize, keyAntiquantScale, valueAntiquantScale, learnableSink, ...);
  attributes are strings in the safetensors __metadata__ (numHeads, scaleValue, preTokens,
  nextTokens, inputLayout, numKeyValueHeads, sparseMode, innerPrecise, blockSize, cacheMode,
  scatterMode, strides, offsets, keepProb, softmaxLseFlag (true/false), ...)
  outputs: attentionOut (prompt, incre, fia), softmaxLse (fia with softmaxLseFlag), keyCache and valueCache (scatter)
burn-ascend bench [--quick] [--json PATH]: throughput of the fast CPU kernels (bench --help)
burn-ascend selftest [--device npu|sim] [--report PATH]: the acceptance run on an Atlas NPU
  (every op against the CPU reference, hardware probes, PATH.md + PATH.json; selftest --help)";

/// Parses the process arguments (without the program name) and runs.
pub fn main_with_args(args: &[String]) -> Result<(), CliError> {
    if args.first().is_some_and(|a| a == "bench") {
        return bench::main(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "selftest") {
        return selftest::main(&args[1..]);
    }
    let mut positional = Vec::new();
    let mut device = Device::Cpu;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--device" => {
                let d = it
                    .next()
                    .ok_or_else(|| CliError::Usage("--device needs a value".into()))?;
                device = Device::parse(d)?;
            }
            "-h" | "--help" => return Err(CliError::Usage(USAGE.into())),
            s if s.starts_with("--device=") => device = Device::parse(&s["--device=".len()..])?,
            s if s.starts_with('-') => {
                return Err(CliError::Usage(format!("unknown flag '{s}'\n{USAGE}")))
            }
            _ => positional.push(a.as_str()),
        }
    }
    match positional.as_slice() {
        ["run", op, input, output] => run_files(op, Path::new(input), Path::new(output), device),
        _ => Err(CliError::Usage(USAGE.into())),
    }
}
