//! The crash-consistent checkpoints of a training run.
//!
//! Layout of the output folder `<out>`:
//!
//! ```text
//! <out>/checkpoints/step-000120/   one folder per save: config.json, model.safetensors,
//!                                  model.mpk, optim.mpk, loss.csv, state.json, manifest.json
//!                                  (a ZeRO run: one zero-shard-RRRRR-of-NNNNN.bin per rank
//!                                  in place of model.mpk and optim.mpk)
//! <out>/LATEST                     "checkpoints/step-000120": the published checkpoint
//! <out>/config.json, model.safetensors, loss.csv
//!                                  the published checkpoint's files, for `generate` and
//!                                  transformers (hard links, or copies)
//! ```
//!
//! A save writes a new step folder, each file written then fsynced, `manifest.json` last (the
//! step, and each file's size and CRC-32), fsyncs the folder and `checkpoints/`, and only then
//! publishes it with one atomic operation: `LATEST.tmp` written and fsynced, renamed over
//! `LATEST`, `<out>` fsynced. A crash at any instant leaves `LATEST` naming either the
//! previous checkpoint or the new one, both complete. The previous checkpoint is kept until
//! the new one is published; afterwards all but the last two are removed. `--resume` loads the
//! folder `LATEST` names and verifies it first (manifest present and of this format, the step
//! of the folder, manifest and `state.json` equal, every file's size and checksum, no file
//! beside them), refusing a mixed or truncated checkpoint with the file named.
//!
//! A sharded state (ZeRO's) is written by every rank into the same folder ([`StepDir`]: begun
//! by one writer, each rank writing and fsyncing its own file, published by the writer once
//! every rank has said its file is durable). Its manifest is version 2, with a `zero` section
//! recording which ranges each rank's file holds ([`crate::run_state::shards`]); every file is
//! verified streaming, a shard never held whole.
//!
//! The exported copies in `<out>` are renamed into place one by one after the publication: they
//! are for reading the newest weights, never what `--resume` trusts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn_ascend::AttnError;

use crate::run_state::durable;
use crate::run_state::shards::ShardedState;
use crate::run_state::state::TrainState;

/// The pointer file naming the published checkpoint.
pub const LATEST: &str = "LATEST";
/// The folder holding the step folders.
pub const CHECKPOINTS: &str = "checkpoints";
/// The manifest, written last into each step folder.
pub const MANIFEST: &str = "manifest.json";
/// The published checkpoint's files copied into `<out>` itself.
pub const EXPORTED: [&str; 5] = [
    "config.json",
    "model.safetensors",
    "loss.csv",
    "adapter_config.json",
    "adapter_model.safetensors",
];
const FORMAT: &str = "burn-ascend-checkpoint";
/// A checkpoint whose files are all whole (one writer).
const VERSION: u32 = 1;
/// A checkpoint with a sharded state (the manifest's `zero` section, one file per rank).
const VERSION_SHARDED: u32 = 2;

/// One file of a checkpoint as its manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of the content.
    pub crc32: u32,
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always `burn-ascend-checkpoint`.
    pub format: String,
    /// Version of this layout: 1 (every file whole), 2 (with a sharded state).
    pub version: u32,
    /// Optimizer steps done when it was saved.
    pub step: usize,
    /// Every other file of the folder (the shards included).
    pub files: BTreeMap<String, FileEntry>,
    /// A ZeRO run's sharded state: which ranges of which unit each rank's file holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero: Option<ShardedState>,
}

fn err(path: &Path, e: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {e}", path.display()))
}

/// The manifest entry of `bytes`.
pub fn entry_of(bytes: &[u8]) -> FileEntry {
    FileEntry {
        bytes: bytes.len() as u64,
        crc32: crc32fast::hash(bytes),
    }
}

/// The folder name of the checkpoint of `step`.
pub fn step_dir_name(step: usize) -> String {
    format!("step-{step:06}")
}

fn step_of_dir_name(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("step-")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The step of the checkpoint `LATEST` in `out` names, `None` when there is no `LATEST`.
pub fn published_step(out: &Path) -> Result<Option<usize>, AttnError> {
    let path = out.join(LATEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(&path, e)),
    };
    text.trim()
        .strip_prefix(&format!("{CHECKPOINTS}/"))
        .and_then(step_of_dir_name)
        .map(Some)
        .ok_or_else(|| {
            err(
                &path,
                format!(
                    "must name a checkpoint as `{CHECKPOINTS}/step-NNNNNN`, got {:?}",
                    text.trim()
                ),
            )
        })
}

/// Writes `files` as the checkpoint of `step` in `out` and publishes it (see the module
/// documentation for the order of operations); then exports its [`EXPORTED`] files into
/// `out` and removes all checkpoints but the last two.
pub fn publish(out: &Path, step: usize, files: &[(&str, Vec<u8>)]) -> Result<(), AttnError> {
    let step_dir = StepDir::begin(out, step)?;
    let mut entries = BTreeMap::new();
    for (file, bytes) in files {
        entries.insert(file.to_string(), step_dir.write(file, bytes)?);
    }
    step_dir.publish(entries, None)
}

/// A step folder being written: made empty by [`StepDir::begin`], filled by one writer or, for
/// a sharded state, by every rank (each its own file), and published by [`StepDir::publish`]
/// once every file in it is durable.
pub struct StepDir {
    out: PathBuf,
    step: usize,
    /// The checkpoint published before this one (kept by the pruning).
    previous: Option<usize>,
    /// The folder.
    pub dir: PathBuf,
}

impl StepDir {
    /// The folder of `step` in `out`, left by nothing: a run started over in the folder of
    /// another unpublishes the old run's checkpoint first, and a folder left by a save that
    /// crashed before publishing it is removed.
    pub fn begin(out: &Path, step: usize) -> Result<Self, AttnError> {
        let mut previous = published_step(out)?;
        if previous.is_some_and(|p| p >= step) {
            // A run started over (without --resume) in the folder of another: the old run's
            // checkpoint is unpublished before this one's folder may replace it.
            durable::remove_file_if_present(&out.join(LATEST))?;
            durable::sync_dir(out)?;
            previous = None;
        }
        std::fs::create_dir_all(out).map_err(|e| err(out, e))?;
        let root = out.join(CHECKPOINTS);
        if !root.is_dir() {
            durable::create_dir(&root)?;
            durable::sync_dir(out)?;
        }
        let dir = step_folder(out, step);
        if dir.symlink_metadata().is_ok() {
            // Left by a save that crashed before publishing it: never the published one.
            durable::remove_dir_all(&dir)?;
        }
        durable::create_dir(&dir)?;
        Ok(Self {
            out: out.to_path_buf(),
            step,
            previous,
            dir,
        })
    }

    /// Writes and fsyncs `file` in the folder `dir` (another rank's [`StepDir::begin`]);
    /// returns its manifest entry.
    pub fn write_into(dir: &Path, file: &str, bytes: &[u8]) -> Result<FileEntry, AttnError> {
        if file == MANIFEST || file.contains(['/', '\\']) {
            return Err(err(&dir.join(file), "not a checkpoint file name"));
        }
        durable::write_synced(&dir.join(file), bytes)?;
        Ok(entry_of(bytes))
    }

    /// [`StepDir::write_into`] this folder.
    pub fn write(&self, file: &str, bytes: &[u8]) -> Result<FileEntry, AttnError> {
        Self::write_into(&self.dir, file, bytes)
    }

    /// Publishes the folder once all its `files` are durable (every rank's shard fsynced):
    /// `manifest.json` (with the sharded layout `zero`), the folder and `checkpoints/`
    /// fsynced, then `LATEST` renamed into place; then exports the [`EXPORTED`] files and
    /// prunes.
    pub fn publish(
        self,
        files: BTreeMap<String, FileEntry>,
        zero: Option<ShardedState>,
    ) -> Result<(), AttnError> {
        let (out, dir) = (&self.out, &self.dir);
        let root = out.join(CHECKPOINTS);
        let manifest = Manifest {
            format: FORMAT.into(),
            version: if zero.is_some() {
                VERSION_SHARDED
            } else {
                VERSION
            },
            step: self.step,
            files,
            zero,
        };
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| err(&dir.join(MANIFEST), e))?;
        durable::write_synced(&dir.join(MANIFEST), &text)?;
        durable::sync_dir(dir)?;
        durable::sync_dir(&root)?;
        // The publication: one rename of an fsynced pointer file.
        let tmp = out.join("LATEST.tmp");
        let name = step_dir_name(self.step);
        durable::write_synced(&tmp, format!("{CHECKPOINTS}/{name}\n").as_bytes())?;
        durable::rename(&tmp, &out.join(LATEST))?;
        durable::sync_dir(out)?;
        // Convenience copies of the published files.
        for file in EXPORTED {
            if !manifest.files.contains_key(file) {
                continue;
            }
            let tmp = out.join(format!(".{file}.tmp"));
            durable::remove_file_if_present(&tmp)?;
            durable::link_or_copy(&dir.join(file), &tmp)?;
            durable::rename(&tmp, &out.join(file))?;
        }
        durable::sync_dir(out)?;
        prune(&root, self.step, self.previous)
    }
}

/// The folder of the checkpoint of `step` in `out`.
pub fn step_folder(out: &Path, step: usize) -> PathBuf {
    out.join(CHECKPOINTS).join(step_dir_name(step))
}

/// Removes every step folder but `keep` and `previous` (also the leftovers of crashed saves).
fn prune(root: &Path, keep: usize, previous: Option<usize>) -> Result<(), AttnError> {
    let mut stale: Vec<(usize, PathBuf)> = std::fs::read_dir(root)
        .map_err(|e| err(root, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let step = step_of_dir_name(e.file_name().to_str()?)?;
            (step != keep && Some(step) != previous).then(|| (step, e.path()))
        })
        .collect();
    stale.sort();
    for (_, dir) in stale {
        durable::remove_dir_all(&dir)?;
    }
    Ok(())
}

/// The published checkpoint of a run, verified.
#[derive(Debug, Clone)]
pub struct Published {
    /// Its folder.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

impl Published {
    /// Finds the checkpoint `LATEST` in `out` names and verifies it whole: the manifest of this
    /// format and version, its step that of the folder's name, every file it lists present with
    /// its size and checksum, and no other file in the folder.
    pub fn open(out: &Path) -> Result<Self, AttnError> {
        let step = published_step(out)?.ok_or_else(|| {
            err(
                &out.join(LATEST),
                "no published checkpoint to resume (the run saved none, or was written before \
                 checkpoints were published through LATEST)",
            )
        })?;
        let dir = out.join(CHECKPOINTS).join(step_dir_name(step));
        let path = dir.join(MANIFEST);
        let text = std::fs::read(&path).map_err(|e| err(&path, e))?;
        let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| err(&path, e))?;
        let version = if manifest.zero.is_some() {
            VERSION_SHARDED
        } else {
            VERSION
        };
        if manifest.format != FORMAT || manifest.version != version {
            return Err(err(
                &path,
                format!(
                    "format {:?} version {} (this build reads {FORMAT:?} version {VERSION}, and \
                     version {VERSION_SHARDED} with a sharded state in `zero`)",
                    manifest.format, manifest.version
                ),
            ));
        }
        if manifest.step != step {
            return Err(err(
                &path,
                format!(
                    "step {} but the folder is that of step {step}",
                    manifest.step
                ),
            ));
        }
        let published = Self { dir, manifest };
        if let Some(zero) = &published.manifest.zero {
            let files = &published.manifest.files;
            zero.check(|f| files.get(f).map(|e| e.bytes), &published.dir, &path)?;
        }
        for name in published.manifest.files.keys() {
            published.verify(name)?;
        }
        let mut extra: Vec<String> = std::fs::read_dir(&published.dir)
            .map_err(|e| err(&published.dir, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != MANIFEST && !published.manifest.files.contains_key(n))
            .collect();
        extra.sort();
        if let Some(name) = extra.first() {
            return Err(err(
                &published.dir.join(name),
                "not listed in manifest.json (a mixed checkpoint)",
            ));
        }
        Ok(published)
    }

    /// Repairs what a crash after the publication left: the files exported into `out` made
    /// those of this checkpoint again, temporary files and unpublished step folders removed
    /// (this one and the one before it are kept). Safe to run from several processes at once
    /// (every rank of a torchrun launch resumes): each exports through a temporary name of
    /// its own, and what another already removed is no error.
    pub fn tidy(&self, out: &Path) -> Result<(), AttnError> {
        durable::remove_file_if_present(&out.join("LATEST.tmp"))?;
        let mut changed = false;
        for file in EXPORTED {
            let Some(entry) = self.manifest.files.get(file) else {
                continue;
            };
            durable::remove_file_if_present(&out.join(format!(".{file}.tmp")))?;
            let tmp = out.join(format!(".{file}.{}.tmp", std::process::id()));
            durable::remove_file_if_present(&tmp)?;
            let current = std::fs::read(out.join(file)).ok().map(|b| entry_of(&b));
            if current.as_ref() != Some(entry) {
                durable::link_or_copy(&self.dir.join(file), &tmp)?;
                durable::rename(&tmp, &out.join(file))?;
                changed = true;
            }
        }
        if changed {
            durable::sync_dir(out)?;
        }
        let root = out.join(CHECKPOINTS);
        let below = std::fs::read_dir(&root)
            .map_err(|e| err(&root, e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| step_of_dir_name(e.file_name().to_str()?))
            .filter(|&s| s < self.step())
            .max();
        prune(&root, self.step(), below)
    }

    /// The step the checkpoint was saved at.
    pub fn step(&self) -> usize {
        self.manifest.step
    }

    /// Its `state.json`, refused when the state's step is not the manifest's (a checkpoint
    /// mixed from two saves), the error naming `param` (what the caller loads).
    pub(crate) fn train_state(&self, param: &'static str) -> Result<TrainState, AttnError> {
        let path = self.dir.join("state.json");
        let state = TrainState::from_json(&self.read("state.json")?, &path)?;
        if state.step != self.step() {
            return Err(AttnError::invalid(
                param,
                format!(
                    "{}: step {} but manifest.json says {} (a mixed checkpoint)",
                    path.display(),
                    state.step,
                    self.step()
                ),
            ));
        }
        Ok(state)
    }

    /// The content of `name`, checked against the manifest (size, then checksum).
    pub fn read(&self, name: &str) -> Result<Vec<u8>, AttnError> {
        let (path, entry) = self.entry(name)?;
        let bytes = std::fs::read(&path).map_err(|e| err(&path, e))?;
        check_entry(&path, entry, bytes.len() as u64, crc32fast::hash(&bytes))?;
        Ok(bytes)
    }

    /// Checks `name` against the manifest (size, then checksum) reading it in pieces of
    /// 1 MiB: a shard is verified without holding it.
    pub fn verify(&self, name: &str) -> Result<(), AttnError> {
        use std::io::Read;
        let (path, entry) = self.entry(name)?;
        let mut f = std::fs::File::open(&path).map_err(|e| err(&path, e))?;
        let mut hasher = crc32fast::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut len = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(|e| err(&path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            len += n as u64;
        }
        check_entry(&path, entry, len, hasher.finalize())
    }

    fn entry(&self, name: &str) -> Result<(PathBuf, &FileEntry), AttnError> {
        let path = self.dir.join(name);
        let entry = self
            .manifest
            .files
            .get(name)
            .ok_or_else(|| err(&path, "not listed in manifest.json"))?;
        Ok((path, entry))
    }
}

/// The size, then the checksum, of the file at `path` against its manifest entry.
fn check_entry(path: &Path, entry: &FileEntry, bytes: u64, crc: u32) -> Result<(), AttnError> {
    if bytes != entry.bytes {
        return Err(err(
            path,
            format!(
                "{bytes} bytes but manifest.json says {} (truncated or from another save)",
                entry.bytes
            ),
        ));
    }
    if crc != entry.crc32 {
        return Err(err(
            path,
            format!(
                "CRC-32 {crc:08x} but manifest.json says {:08x} (corrupted or from another save)",
                entry.crc32
            ),
        ));
    }
    Ok(())
}
