//! The `burn-ascend` command line: replay an aclnn op on tensors dumped to safetensors.
//!
//! `burn-ascend run <op> <in.safetensors> <out.safetensors> [--device reference|cpu|sim|npu]`
//! (the command lines, parsed by clap: [`args`])
//!
//! Tensors are named after the aclnn parameters without the `Optional` suffix; attributes are
//! strings in the safetensors `__metadata__` under their aclnn names. Missing attributes take
//! the docs' defaults. Each op lives in its own folder under [`op`].

pub mod args;
pub mod bench;
pub mod bench_dispatch;
pub mod bench_model;
mod bench_timing;
pub mod device;
pub mod error;
pub mod finetune_cp;
pub mod host_alloc;
pub mod io;
pub mod names;
pub mod op;
pub mod plan;
pub mod release;
pub mod replay;
pub mod selftest;

pub use device::Device;
pub use error::CliError;
pub use replay::{run_files, run_op};

use clap::Parser;

/// Parses the process arguments (without the program name) and runs.
///
/// A refused command line and `--help` come back as [`CliError::Usage`] holding clap's error;
/// the binary lets clap print it ([`clap::Error::exit`]).
pub fn main_with_args(args: &[String]) -> Result<(), CliError> {
    let cli = args::Cli::try_parse_from(
        std::iter::once("burn-ascend").chain(args.iter().map(String::as_str)),
    )?;
    match cli.command {
        args::Command::Run(a) => {
            release::apply(a.cann_release.as_deref(), a.device)?;
            run_files(&a.op, &a.input, &a.output, a.device)
        }
        args::Command::Bench(a) => bench::main(&a),
        args::Command::Selftest(a) => selftest::main(&a),
        args::Command::Plan(a) => plan::main(&a),
    }
}
