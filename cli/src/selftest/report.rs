//! The selftest's results and their Markdown and JSON forms.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::CliError;

/// A case's outcome (`"pass"` / `"fail"` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within tolerance.
    Pass,
    /// Outside tolerance, a different shape or dtype, NaN, an error or a panic.
    Fail,
}

/// One case: an op on one input in one dtype, against the CPU reference. Serialised as an
/// entry of the JSON's `cases`, under these names (serde_json writes a non-finite float as
/// `null`, which JSON cannot hold otherwise).
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The op (`varlen-fwd`, `matmul`, …).
    pub op: String,
    /// The case within the op.
    pub name: String,
    /// `f32`, `f16`, `bf16`, `int8`.
    pub dtype: String,
    pub status: Status,
    /// The largest `|got − ref|` of the output closest to failing (NaN when not computed).
    pub max_abs_err: f64,
    /// Its tolerance.
    pub tol: f64,
    /// Wall time of one call on the device, in milliseconds.
    pub ms: f64,
    /// Why it failed, when it did.
    pub note: Option<String>,
}

impl CaseResult {
    /// A failed case with nothing measured: where every case starts (it passes only once its
    /// check does), or, with `note`, one that could not run.
    pub fn failed(op: &str, name: &str, dtype: &str, note: Option<String>) -> Self {
        Self {
            op: op.into(),
            name: name.into(),
            dtype: dtype.into(),
            status: Status::Fail,
            max_abs_err: f64::NAN,
            tol: f64::NAN,
            ms: f64::NAN,
            note,
        }
    }
}

/// A probe's finding (an entry of the JSON's `probes`).
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub name: String,
    pub result: String,
}

/// Everything a selftest found.
#[derive(Debug, Clone)]
pub struct Report {
    /// `npu:0 (CANN)` or `sim (the host simulation of the ACL ABI, not CANN)`.
    pub device: String,
    /// The CANN package version (from its install-info files), or why it is unknown.
    pub cann_version: String,
    /// The ACL interface version (`aclrtGetVersion`).
    pub acl_version: String,
    /// The CANN libraries in the directory CANN was loaded from.
    pub libraries: Vec<String>,
    /// Every aclnn op of the function table and whether it resolved.
    pub entry_points: Vec<(String, bool)>,
    pub cases: Vec<CaseResult>,
    pub probes: Vec<Probe>,
    /// Wall time of the whole run.
    pub seconds: f64,
}

/// The JSON document: the report's fields, `passed`, and the entry points as objects.
#[derive(Debug, Serialize)]
struct ReportJson<'a> {
    device: &'a str,
    cann_version: &'a str,
    acl_version: &'a str,
    libraries: &'a [String],
    entry_points: Vec<EntryPoint<'a>>,
    /// Whether every case passed.
    passed: bool,
    seconds: f64,
    cases: &'a [CaseResult],
    probes: &'a [Probe],
}

/// An aclnn op of the function table and whether it resolved.
#[derive(Debug, Serialize)]
struct EntryPoint<'a> {
    name: &'a str,
    present: bool,
}

fn fmt_err(x: f64) -> String {
    if x.is_nan() {
        "—".into()
    } else {
        format!("{x:.3e}")
    }
}

impl Report {
    /// Number of failed cases.
    pub fn failed(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| c.status != Status::Pass)
            .count()
    }

    /// `op name dtype: note` of the first failed case.
    pub fn first_failure(&self) -> Option<String> {
        self.cases
            .iter()
            .find(|c| c.status != Status::Pass)
            .map(|c| {
                format!(
                    "{} {} {}: {}",
                    c.op,
                    c.name,
                    c.dtype,
                    c.note.as_deref().unwrap_or("")
                )
            })
    }

    /// One line: device, counts, time.
    pub fn summary(&self) -> String {
        format!(
            "selftest on {}: {} of {} cases passed, {} probes, {:.1} s",
            self.device,
            self.cases.len() - self.failed(),
            self.cases.len(),
            self.probes.len(),
            self.seconds
        )
    }

    /// `PATH.md` and `PATH.json` (a `.md` or `.json` suffix on PATH is dropped first).
    pub fn paths(&self, base: &Path) -> (PathBuf, PathBuf) {
        let base = match base.extension().and_then(|e| e.to_str()) {
            Some("md" | "json") => base.with_extension(""),
            _ => base.to_path_buf(),
        };
        let with = |ext: &str| {
            let mut s = base.clone().into_os_string();
            s.push(ext);
            PathBuf::from(s)
        };
        (with(".md"), with(".json"))
    }

    /// The JSON document: `{device, cann_version, cases:[{op, name, dtype, status,
    /// max_abs_err, tol, ms, note}], probes:[{name, result}]}` plus the environment fields.
    fn to_json(&self) -> ReportJson<'_> {
        ReportJson {
            device: &self.device,
            cann_version: &self.cann_version,
            acl_version: &self.acl_version,
            libraries: &self.libraries,
            entry_points: self
                .entry_points
                .iter()
                .map(|(name, present)| EntryPoint {
                    name,
                    present: *present,
                })
                .collect(),
            passed: self.failed() == 0,
            seconds: self.seconds,
            cases: &self.cases,
            probes: &self.probes,
        }
    }

    /// The Markdown report, to attach to an issue.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# burn-ascend selftest\n");
        let _ = writeln!(s, "- device: {}", self.device);
        let _ = writeln!(s, "- CANN version: {}", self.cann_version);
        let _ = writeln!(s, "- ACL interface version: {}", self.acl_version);
        let _ = writeln!(s, "- burn-ascend {}", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(s, "- result: **{}**\n", self.summary());
        let _ = writeln!(s, "## Libraries\n");
        if self.libraries.is_empty() {
            let _ = writeln!(s, "(none: not CANN)");
        }
        for l in &self.libraries {
            let _ = writeln!(s, "- `{l}`");
        }
        let _ = writeln!(s, "\n## aclnn entry points\n");
        let (present, absent): (Vec<_>, Vec<_>) = self.entry_points.iter().partition(|e| e.1);
        let names = |v: &[&(String, bool)]| {
            v.iter()
                .map(|(n, _)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(s, "- present: {}", names(&present));
        let _ = writeln!(s, "- absent: {}", names(&absent));
        let _ = writeln!(s, "\n## Probes\n");
        let _ = writeln!(s, "| probe | result |\n|---|---|");
        for p in &self.probes {
            let _ = writeln!(s, "| {} | {} |", p.name, p.result.replace('|', "\\|"));
        }
        let _ = writeln!(s, "\n## Cases\n");
        let _ = writeln!(
            s,
            "Pass: max |got − ref| ≤ tol for every output, tol = rel · max(1, max |ref|).\n"
        );
        let _ = writeln!(
            s,
            "| op | case | dtype | status | max abs err | tol | ms | note |\n|---|---|---|---|---|---|---|---|"
        );
        for c in &self.cases {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.3} | {} |",
                c.op,
                c.name,
                c.dtype,
                if c.status == Status::Pass {
                    "pass"
                } else {
                    "**FAIL**"
                },
                fmt_err(c.max_abs_err),
                fmt_err(c.tol),
                c.ms,
                c.note.as_deref().unwrap_or("").replace('|', "\\|")
            );
        }
        s
    }

    /// Writes both files (creating their directory).
    pub fn write(&self, md: &Path, json: &Path) -> Result<(), CliError> {
        for p in [md, json] {
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| CliError::Io(format!("{}: {e}", dir.display())))?;
            }
        }
        let text = serde_json::to_string_pretty(&self.to_json())
            .map_err(|e| CliError::Io(format!("{}: {e}", json.display())))?;
        std::fs::write(json, text + "\n")
            .map_err(|e| CliError::Io(format!("{}: {e}", json.display())))?;
        std::fs::write(md, self.to_markdown())
            .map_err(|e| CliError::Io(format!("{}: {e}", md.display())))?;
        Ok(())
    }
}
