//! The CANN releases whose kernel sources the project has read, by name, and the rules that
//! differ between them.
//!
//! What differs (`cannmirror/ops-transformer`, Atlas A2/A3 kernels; the spec's 2026-11 and
//! 2026-12 appendices):
//!
//! - **FIA's `learnableSink` dtype** ([`CannRelease::fia_sink_per_path`]): up to 8.5.0 BFLOAT16
//!   only; from 9.0.0 (`20ea81afa`, 2026-02) the TND split-fuse path takes the query's dtype
//!   (the per-path rule is in `fia::sink`).
//! - **The varlen backward's dsink post step** ([`CannRelease::dsink_post_step`]): 8.5.0-beta.1
//!   overwrites its sum per chunk, 8.5.0 and 9.0.0 accumulate over chunks but read an empty
//!   last chunk when the size is an exact multiple of it, 9.1.0 (`ce9556718`) reduces per-core
//!   partials once.
//!
//! A release's name is what `--cann-release` and the simulation's environment variable take:
//! `8.5.0-beta.1`, `8.5.0` (or `8.5`), `9.0.0` (`9.0`), `9.1.0` (`9.1`).

use crate::error::{AttnError, Result};

/// A CANN release whose kernel sources the project has read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CannRelease {
    /// 8.5.0-beta.1 (ops-transformer `05c401f9`, what the ABI check reads).
    V8_5_0Beta1,
    /// 8.5.0 (`8fff8f927`).
    V8_5_0,
    /// 9.0.0 (`1a341f415`).
    V9_0_0,
    /// 9.1.0 (`3311e26e5`; its dsink post step from `ce9556718`). What vllm-ascend builds on.
    V9_1_0,
}

/// How the varlen backward's post step reduces `dsink` from the main kernel's partials
/// (`flash_attention_score_grad_post.h`; the spec's 2026-12 appendix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DsinkPostStep {
    /// 8.5.0-beta.1: `dsinkCalc = −ReduceSum(chunk)` per chunk of `2·postUbBaseSize` bytes, so
    /// only the last chunk survives once a head's partials span more than one.
    OverwritePerChunk,
    /// 8.5.0, 9.0.0: `dsinkCalc += −ReduceSum(chunk)`, but the last chunk's size is
    /// `size % chunk`, so a size that is an exact multiple of the chunk reads an empty last
    /// chunk and drops its share (read in the sources, not run).
    AccumulateChunks,
    /// 9.1.0 on: per-core partials in an `N1 × coreNum` workspace, one `ReduceSum` per head,
    /// no chunk loop: right at every size.
    ReducePerCorePartials,
}

impl DsinkPostStep {
    /// Whether the post step gives the right dsink at every size (else only below the chunk
    /// threshold, or away from its exact multiples).
    pub fn right_at_every_size(self) -> bool {
        self == Self::ReducePerCorePartials
    }

    /// Whether the post step gives the right dsink for `partials` per head read in chunks of
    /// `chunk` (both in floats; the tiling's sizes, see the simulation's `DsinkPost`): one
    /// chunk is read whole below it; past it 8.5.0-beta.1 keeps only the last chunk, and 8.5.0
    /// / 9.0.0 read an empty last chunk at an exact multiple.
    pub fn right_for(self, partials: usize, chunk: usize) -> bool {
        match self {
            Self::OverwritePerChunk => partials < chunk,
            Self::AccumulateChunks => partials < chunk || !partials.is_multiple_of(chunk),
            Self::ReducePerCorePartials => true,
        }
    }
}

impl CannRelease {
    /// Every release the project has read, oldest first.
    pub const KNOWN: [Self; 4] = [Self::V8_5_0Beta1, Self::V8_5_0, Self::V9_0_0, Self::V9_1_0];

    /// The newest release the project has read: what the simulation reports and models unless
    /// told otherwise.
    pub const NEWEST: Self = Self::V9_1_0;

    /// Its name (`9.1.0`).
    pub fn name(self) -> &'static str {
        match self {
            Self::V8_5_0Beta1 => "8.5.0-beta.1",
            Self::V8_5_0 => "8.5.0",
            Self::V9_0_0 => "9.0.0",
            Self::V9_1_0 => "9.1.0",
        }
    }

    /// The known releases' names, `8.5.0-beta.1, 8.5.0, 9.0.0, 9.1.0`.
    pub fn known_names() -> String {
        Self::KNOWN.map(Self::name).join(", ")
    }

    /// The release `text` names (`9.1.0`, or `9.1` for it; case and surrounding blanks
    /// ignored); an unknown one is an error naming `source` (the flag or the environment
    /// variable it came from) and the releases known.
    pub fn parse(text: &str, source: &'static str) -> Result<Self> {
        let t = text.trim().to_ascii_lowercase();
        Self::KNOWN
            .into_iter()
            .find(|r| {
                let name = r.name();
                t == name || name.strip_suffix(".0").is_some_and(|short| t == short)
            })
            .ok_or_else(|| {
                AttnError::invalid(
                    source,
                    format!(
                        "unknown CANN release '{}' (known: {})",
                        text.trim(),
                        Self::known_names()
                    ),
                )
            })
    }

    /// The release whose rules a CANN package version follows (`version=` of
    /// `ascend_toolkit_install.info` / `ascend_ops_install.info`: "8.5.0", "8.3.RC1",
    /// "9.0.0-beta.2", "9.1.0"); `None` when it does not parse. Older than 8.5.0 (the sink
    /// ops' first release) follows 8.5.0-beta.1; 9.0.0-beta.1 predates `20ea81afa` and
    /// follows 8.5.0; a 9.1 beta is taken as 9.1.0, and anything newer as the newest read.
    pub fn from_package_version(version: &str) -> Option<Self> {
        let v = version.trim();
        let mut parts = v.split(['.', '-']);
        let major: u32 = parts.next()?.trim().parse().ok()?;
        let minor: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
        let lower = v.to_ascii_lowercase();
        let pre = ["beta", "rc", "alpha"].iter().any(|p| lower.contains(p));
        let beta1 = lower.contains("beta.1") || lower.contains("beta1");
        Some(match (major, minor) {
            (0..=7, _) | (8, 0..=4) => Self::V8_5_0Beta1,
            (8, 5) if pre => Self::V8_5_0Beta1,
            (8, _) => Self::V8_5_0,
            (9, 0) if beta1 => Self::V8_5_0,
            (9, 0) => Self::V9_0_0,
            _ => Self::V9_1_0,
        })
    }

    /// Whether FIA's `learnableSink` dtype follows the path the call takes (9.x: the TND
    /// split-fuse path takes the query's) rather than being BFLOAT16 always (up to 8.5.0).
    pub fn fia_sink_per_path(self) -> bool {
        self >= Self::V9_0_0
    }

    /// The varlen backward's dsink post step in this release.
    pub fn dsink_post_step(self) -> DsinkPostStep {
        match self {
            Self::V8_5_0Beta1 => DsinkPostStep::OverwritePerChunk,
            Self::V8_5_0 | Self::V9_0_0 => DsinkPostStep::AccumulateChunks,
            Self::V9_1_0 => DsinkPostStep::ReducePerCorePartials,
        }
    }

    /// How errors and notes name it (`CANN 9.1.0`).
    pub fn label(self) -> String {
        format!("CANN {}", self.name())
    }
}

impl std::fmt::Display for CannRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
