//! `burn-ascend run <op> <in> <out> [--device d]`: the op looked up in the table
//! ([`crate::op::OPS`]), the bundle's names checked, then the op's replay.

use std::path::Path;

use crate::io::Bundle;
use crate::names::OpNames;
use crate::op::OPS;
use crate::{CliError, Device};

/// An op's replay: the bundle on a device to the op's outputs.
pub type Replay = fn(&Bundle, Device) -> Result<Bundle, CliError>;

/// One row of the op table: the op's name on the command line, the names it reads, its line
/// of `run --help` and its replay.
#[derive(Clone, Copy)]
pub struct ReplayOp {
    /// The name `run` takes (`varlen-fwd`, …).
    pub name: &'static str,
    /// The tensor and attribute names the op reads.
    pub names: OpNames,
    /// What `run --help` says of the op: the inputs of its own beyond the common aclnn names,
    /// and the outputs it writes.
    pub help: &'static str,
    /// The op on a bundle.
    pub replay: Replay,
}

impl ReplayOp {
    /// A row of the table.
    pub const fn new(
        name: &'static str,
        names: OpNames,
        help: &'static str,
        replay: Replay,
    ) -> Self {
        Self {
            name,
            names,
            help,
            replay,
        }
    }
}

/// `run --help`'s list of the ops, one line each from the table: the op's name and its help.
pub fn ops_help() -> String {
    OPS.iter()
        .map(|row| format!("  {}: {}", row.name, row.help))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs one op on a bundle of named tensors.
///
/// The input is validated the same way for every device before anything is dispatched: the
/// names first ([`crate::names`]), then the op's contract and the host-side checks of the
/// values; only then is the device opened (for `npu`, CANN loaded), so a bad input exits 2 with
/// the same line on `reference`, `cpu`, `sim` and `npu`.
pub fn run_op(op: &str, input: &Bundle, device: Device) -> Result<Bundle, CliError> {
    let Some(row) = OPS.iter().find(|row| row.name == op) else {
        return Err(unknown_op(op));
    };
    row.names.check(op, input)?;
    (row.replay)(input, device)
}

/// One line on stderr about a call that runs but not quite as written: a parameter CANN ignores
/// in it (dropped, as CANN runs the call without it), or the CANN releases that refuse it. The
/// outputs are unaffected; a script reading only the exit status and the output file never sees
/// it.
pub fn note(op: &str, text: impl std::fmt::Display) {
    eprintln!("note: {op}: {text}");
}

fn unknown_op(op: &str) -> CliError {
    let ops: Vec<&str> = OPS.iter().map(|row| row.name).collect();
    CliError::Unknown(format!("unknown op '{op}' (ops: {})", ops.join(", ")))
}

/// `run <op> <in> <out> [--device d]`.
pub fn run_files(op: &str, input: &Path, output: &Path, device: Device) -> Result<(), CliError> {
    let bundle = Bundle::read(input)?;
    let out = run_op(op, &bundle, device)?;
    out.write(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_help_gives_every_op_of_the_table_a_line_with_its_outputs() {
        let help = ops_help();
        let lines: Vec<&str> = help.lines().collect();
        assert_eq!(lines.len(), OPS.len());
        for (line, row) in lines.iter().zip(OPS) {
            assert!(line.starts_with(&format!("  {}: ", row.name)), "{line}");
            assert!(
                line.contains(" → "),
                "{} names no outputs: {line}",
                row.name
            );
        }
    }
}
