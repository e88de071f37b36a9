//! A sharded training state on disk, as `torch.distributed.checkpoint` stores one: each rank
//! writes its own file holding its flat ranges of every unit, and the manifest's `zero` section
//! records which ranges each file holds, so a run of another rank count reads the ranges it owns
//! from whichever files hold them, never the whole state at once.
//!
//! **The files.** Rank `r` of `N` writes `zero-shard-RRRRR-of-NNNNN.bin`: for each unit in
//! order, for each of [`TENSORS`] in order, the f32 elements (little-endian) of its range of that
//! unit's flat buffer — the padding past the unit's last element is not stored. The byte offset
//! of any range is therefore a sum over the layout, and the file's size is 4 × 3 × its elements.
//!
//! **The layout** ([`ShardedState`]) is checked whole before anything is read: its tensors the
//! ones this build writes, one shard per rank, each shard listed in the manifest with the size its
//! ranges need, and every unit's ranges, in rank order, tiling `[0, elements)` without a gap or
//! an overlap.
//! The content (size and CRC-32 of each file) is the manifest's check, streamed file by file.

use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;

use burn_ascend::AttnError;

/// What each shard file holds per unit, in file order: the f32 master weights and AdamW's two
/// moments (torch's `exp_avg`, `exp_avg_sq`).
pub const TENSORS: [&str; 3] = ["master", "exp_avg", "exp_avg_sq"];

/// One unit (FSDP's flattening of a module's trainable parameters) of the sharded state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitEntry {
    /// What it is (`embed_tokens`, `layers.3`, `norm and lm_head`).
    pub name: String,
    /// Elements of its flat buffer (without the padding).
    pub elements: usize,
}

/// One rank's file and the ranges of each unit it holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    /// Its file name in the step folder.
    pub file: String,
    /// Per unit: `[start, end)` of the unit's flat buffer (an empty range holds nothing).
    pub ranges: Vec<[usize; 2]>,
}

impl ShardEntry {
    fn range(&self, unit: usize) -> Range<usize> {
        let [a, b] = self.ranges[unit];
        a..b
    }

    /// Elements of the file (all units, one tensor).
    fn elements(&self) -> usize {
        self.ranges.iter().map(|[a, b]| b - a).sum()
    }

    /// Byte offset of `tensor`'s elements of `unit` in the file.
    fn offset(&self, unit: usize, tensor: usize) -> u64 {
        let before: usize = self.ranges[..unit].iter().map(|[a, b]| b - a).sum();
        let len = self.range(unit).len();
        4 * (TENSORS.len() * before + tensor * len) as u64
    }
}

/// The manifest's `zero` section: how the sharded state of a ZeRO run was laid out when saved.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardedState {
    /// The ZeRO stage it was saved at (any stage resumes it: every stage's shards hold the
    /// master weights and both moments).
    pub stage: u8,
    /// The rank count it was saved over: one shard each.
    pub ranks: usize,
    /// AdamW's step count (every unit's).
    pub adam_steps: usize,
    /// [`TENSORS`], in file order.
    pub tensors: Vec<String>,
    /// The units, in file order.
    pub units: Vec<UnitEntry>,
    /// The shards, in rank order.
    pub shards: Vec<ShardEntry>,
}

/// The file name of rank `rank`'s shard of `ranks`.
pub fn shard_file_name(rank: usize, ranks: usize) -> String {
    format!("zero-shard-{rank:05}-of-{ranks:05}.bin")
}

/// Elements `[rank·n, (rank+1)·n)` of a buffer of `elements` padded to a multiple of `ranks`,
/// clipped to `elements`: what rank `rank` owns of it.
pub fn owned_range(elements: usize, ranks: usize, rank: usize) -> Range<usize> {
    let n = elements.div_ceil(ranks.max(1));
    (rank * n).min(elements)..((rank + 1) * n).min(elements)
}

fn bad(path: &Path, rule: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {rule}", path.display()))
}

impl ShardedState {
    /// The layout of `units` (name, elements) over `ranks` ranks, each owning its
    /// [`owned_range`] of every unit.
    pub fn new(stage: u8, ranks: usize, adam_steps: usize, units: &[(String, usize)]) -> Self {
        Self {
            stage,
            ranks,
            adam_steps,
            tensors: TENSORS.iter().map(|t| t.to_string()).collect(),
            units: units
                .iter()
                .map(|(name, elements)| UnitEntry {
                    name: name.clone(),
                    elements: *elements,
                })
                .collect(),
            shards: (0..ranks)
                .map(|r| ShardEntry {
                    file: shard_file_name(r, ranks),
                    ranges: units
                        .iter()
                        .map(|(_, e)| {
                            let o = owned_range(*e, ranks, r);
                            [o.start, o.end]
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The bytes of rank `rank`'s file: `parts[u][t]` the elements of unit `u`'s range for
    /// tensor `t` of [`TENSORS`].
    pub fn encode(&self, rank: usize, parts: &[[Vec<f32>; 3]]) -> Result<Vec<u8>, AttnError> {
        let shard = &self.shards[rank];
        let mut out = Vec::with_capacity(4 * TENSORS.len() * shard.elements());
        for (u, unit) in parts.iter().enumerate() {
            for (t, values) in unit.iter().enumerate() {
                if values.len() != shard.range(u).len() {
                    return Err(AttnError::Unsupported(format!(
                        "{} of {}: {} elements for a range of {}",
                        TENSORS[t],
                        self.units[u].name,
                        values.len(),
                        shard.range(u).len()
                    )));
                }
                out.extend(values.iter().flat_map(|x| x.to_le_bytes()));
            }
        }
        Ok(out)
    }

    /// Checks the layout (see the module documentation) against the files of the step folder
    /// `dir` as its manifest (at `manifest`) lists them: `bytes_of` gives a file's listed size
    /// (`None`: not listed). Every refusal names the file (or the manifest) and the rule.
    pub fn check(
        &self,
        bytes_of: impl Fn(&str) -> Option<u64>,
        dir: &Path,
        manifest: &Path,
    ) -> Result<(), AttnError> {
        if self.tensors != TENSORS {
            return Err(bad(
                manifest,
                format!(
                    "zero.tensors {:?}, this build reads {TENSORS:?}",
                    self.tensors
                ),
            ));
        }
        if self.shards.len() != self.ranks || self.ranks == 0 {
            return Err(bad(
                manifest,
                format!(
                    "zero: {} shard(s) for {} rank(s) (one shard per rank)",
                    self.shards.len(),
                    self.ranks
                ),
            ));
        }
        for (r, shard) in self.shards.iter().enumerate() {
            let path = dir.join(&shard.file);
            if shard.file != shard_file_name(r, self.ranks) {
                return Err(bad(
                    &path,
                    format!(
                        "rank {r}'s shard must be named {}",
                        shard_file_name(r, self.ranks)
                    ),
                ));
            }
            if shard.ranges.len() != self.units.len() || shard.ranges.iter().any(|[a, b]| a > b) {
                return Err(bad(
                    &path,
                    format!(
                        "its ranges must be one [start, end) per unit ({} units), got {:?}",
                        self.units.len(),
                        shard.ranges
                    ),
                ));
            }
        }
        for (u, unit) in self.units.iter().enumerate() {
            // Rank order is element order: each rank owns the range after its predecessor's.
            let mut at = 0;
            for (r, file) in self.shards.iter().map(|s| (s.range(u), s.file.as_str())) {
                if r.start != at {
                    return Err(bad(
                        &dir.join(file),
                        format!(
                            "its range {}..{} of {} leaves {} (the shards' ranges, in rank \
                             order, must tile 0..{} without gap or overlap)",
                            r.start,
                            r.end,
                            unit.name,
                            if r.start > at {
                                format!("a gap at element {at}")
                            } else {
                                format!("an overlap before element {at}")
                            },
                            unit.elements
                        ),
                    ));
                }
                at = r.end;
            }
            if at != unit.elements {
                return Err(bad(
                    manifest,
                    format!(
                        "the shards hold {at} of the {} elements of {}",
                        unit.elements, unit.name
                    ),
                ));
            }
        }
        for shard in &self.shards {
            let path = dir.join(&shard.file);
            let bytes = bytes_of(&shard.file)
                .ok_or_else(|| bad(&path, "a shard of the layout missing from manifest.json"))?;
            let want = 4 * (TENSORS.len() * shard.elements()) as u64;
            if bytes != want {
                return Err(bad(
                    &path,
                    format!(
                        "manifest.json gives it {bytes} bytes but its ranges hold {want} (3 \
                         tensors × 4 bytes × {} elements)",
                        shard.elements()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Elements `range` (within `[0, elements)`) of `tensor` of unit `unit`, read from the
    /// shards in `dir` that hold them: only those bytes are read (a seek and one read per
    /// shard overlapping the range). Call after [`Self::check`].
    pub fn read_range(
        &self,
        dir: &Path,
        unit: usize,
        tensor: usize,
        range: Range<usize>,
    ) -> Result<Vec<f32>, AttnError> {
        let mut out = Vec::with_capacity(range.len());
        let mut bytes = Vec::new();
        for shard in &self.shards {
            let held = shard.range(unit);
            let (lo, hi) = (range.start.max(held.start), range.end.min(held.end));
            if lo >= hi {
                continue;
            }
            let path = dir.join(&shard.file);
            let at = shard.offset(unit, tensor) + 4 * (lo - held.start) as u64;
            bytes.resize(4 * (hi - lo), 0);
            let mut f = std::fs::File::open(&path).map_err(|e| bad(&path, e))?;
            f.seek(SeekFrom::Start(at))
                .and_then(|_| f.read_exact(&mut bytes))
                .map_err(|e| bad(&path, e))?;
            // Shard order is element order (checked): the pieces arrive in order.
            out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        if out.len() != range.len() {
            return Err(bad(
                dir,
                format!(
                    "the shards hold {} of elements {}..{} of {}",
                    out.len(),
                    range.start,
                    range.end,
                    self.units[unit].name
                ),
            ));
        }
        Ok(out)
    }

    /// The shard files' names.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.shards.iter().map(|s| s.file.as_str())
    }
}
