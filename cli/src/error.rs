//! The CLI's one error type: each failure a line on stderr and an exit code.

use burn_ascend::AttnError;

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
