//! ZeRO's checkpoints, sharded: each rank writes its own slice of the sharded state — its master
//! weights and AdamW moments of every unit — into the step folder, all ranks at once, and rank 0
//! publishes the folder only after every rank has said its shard is fsynced. `--resume` reads,
//! on any rank count, the ranges each rank owns from whichever shards hold them
//! ([`crate::run_state::shards`]). No rank gathers the optimizer state or the master weights.
//!
//! **The protocol of a save** (every rank calls [`Zero::publish_sharded`] at the same step):
//! 1. rank 0 makes the step folder empty ([`StepDir::begin`]); all ranks agree it did (an
//!    all-gather of one word each), so no rank writes into a folder that is not ready;
//! 2. each rank writes and fsyncs its shard, rank 0 also its whole files (the Hugging Face export
//!    of the gathered weights, the loss curve, `state.json`);
//! 3. all ranks exchange "my files are durable" with each shard's size and CRC-32 (an
//!    all-gather); a rank that could not write is named by every rank and nothing is published;
//! 4. rank 0 writes the manifest listing every shard with its size and CRC and the ranges each
//!    holds, then renames `LATEST` into place ([`StepDir::publish`]).
//!
//! A rank that dies anywhere in this leaves the others' collective failing (the lost rank
//! named) before step 4, so `LATEST` still names the previous checkpoint, complete.

use std::collections::BTreeMap;
use std::path::Path;

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_ascend::backend::Ascend;
use burn_ascend::AttnError;

use super::record::Moments;
use super::sharded::Zero;
use crate::model::transformer::Transformer;
use crate::parallel::ddp::hccl;
use crate::run_state::durable;
use crate::run_state::published::{step_folder, FileEntry, Published, StepDir};
use crate::run_state::shards::{ShardedState, TENSORS};
use crate::train::zero_resume::check_units;

type Ad = Autodiff<Ascend>;

fn checkpoint_err(what: String) -> AttnError {
    AttnError::invalid("checkpoint", what)
}

impl Zero {
    /// Every rank's `words` (each rank the same count), in rank order: an all-gather of the
    /// words as 16-bit halves in f32 (exact), read on the host.
    fn agree(&self, words: &[u32]) -> Result<Vec<Vec<u32>>, AttnError> {
        let halves: Vec<f32> = words
            .iter()
            .flat_map(|w| [(w >> 16) as f32, (w & 0xffff) as f32])
            .collect();
        let n = halves.len();
        let t = Tensor::<Ascend, 1>::from_data(TensorData::new(halves, [n]), &self.device);
        let all = self
            .group()
            .all_gather(t.into_primitive().tensor())
            .map_err(hccl)?;
        // The read would panic on a failed collective: wait for the typed error first.
        self.group().synchronize("HcclAllGather").map_err(hccl)?;
        let all = Tensor::<Ascend, 1>::from_primitive(TensorPrimitive::Float(all))
            .into_data()
            .to_vec::<f32>()
            .map_err(|e| checkpoint_err(format!("the ranks' checkpoint words: {e:?}")))?;
        Ok(all
            .chunks(n.max(1))
            .map(|r| {
                r.chunks(2)
                    .map(|h| ((h[0] as u32) << 16) | h[1] as u32)
                    .collect()
            })
            .collect())
    }

    /// The layout of this run's sharded state in a checkpoint.
    fn sharded_layout(&self) -> Result<ShardedState, AttnError> {
        let layout = self
            .layout
            .as_ref()
            .ok_or_else(|| AttnError::Unsupported("a ZeRO checkpoint before the layout".into()))?;
        let steps = match &self.state {
            Some(s) => s.first().map_or(0, |m| m.time),
            None => 0,
        };
        let units: Vec<(String, usize)> = layout
            .units
            .iter()
            .map(|u| (u.name.clone(), u.len))
            .collect();
        Ok(ShardedState::new(
            self.stage.number(),
            layout.ranks,
            steps,
            &units,
        ))
    }

    /// Writes and fsyncs this rank's shard into `dir`: for each unit, its master weights and
    /// both moments over the range it owns (its slice without the padding), one tensor at a
    /// time on the host. Returns its manifest entry.
    fn write_shard(&self, dir: &Path, zero: &ShardedState) -> Result<FileEntry, AttnError> {
        let rank = self.group().rank();
        let shard = &zero.shards[rank];
        let ranges = shard.ranges.clone();
        let pieces = (0..ranges.len() * TENSORS.len()).map(|i| {
            let (u, t) = (i / TENSORS.len(), i % TENSORS.len());
            let [a, b] = ranges[u];
            let tensor = match (t, &self.state) {
                (0, _) => &self.master[u],
                (1, Some(s)) => &s[u].m,
                (_, Some(s)) => &s[u].v,
                // Saved before the first step: the zero moments AdamW starts from.
                (_, None) => return Ok(vec![0; 4 * (b - a)]),
            };
            let mut v = tensor
                .clone()
                .into_data()
                .to_vec::<f32>()
                .map_err(|e| checkpoint_err(format!("{} of a shard: {e:?}", TENSORS[t])))?;
            if v.len() < b - a {
                return Err(AttnError::Unsupported(format!(
                    "{} of unit {u}: a slice of {} elements for a range of {}",
                    TENSORS[t],
                    v.len(),
                    b - a
                )));
            }
            v.truncate(b - a);
            Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect())
        });
        let (bytes, crc32) = durable::write_synced_pieces(&dir.join(&shard.file), pieces)?;
        Ok(FileEntry { bytes, crc32 })
    }

    /// Saves this rank's shard of the checkpoint of `step` in `out` and, on the rank that
    /// writes (`files` is `Some`: its whole files), publishes it once every rank's shard is
    /// durable (see the module documentation). Every rank calls it at the same step.
    pub fn publish_sharded(
        &mut self,
        out: &Path,
        step: usize,
        files: Option<Vec<(&'static str, Vec<u8>)>>,
    ) -> Result<(), AttnError> {
        let zero = self.sharded_layout()?;
        // 1. The folder, made empty by the writer.
        let begun = files.as_ref().map(|_| StepDir::begin(out, step));
        let ready = self.agree(&[u32::from(!matches!(begun, Some(Err(_))))])?;
        let begun = begun.transpose()?;
        if let Some(r) = ready.iter().position(|w| w[0] == 0) {
            return Err(checkpoint_err(format!(
                "rank {r} could not prepare the folder of step {step}; nothing was published"
            )));
        }
        // 2. This rank's files, each fsynced.
        let dir = step_folder(out, step);
        let written = self.write_shard(&dir, &zero).and_then(|entry| {
            self.stats.shard_bytes_written = self.stats.shard_bytes_written.max(entry.bytes);
            let mut whole = BTreeMap::new();
            for (name, bytes) in files.iter().flatten() {
                whole.insert(name.to_string(), StepDir::write_into(&dir, name, bytes)?);
            }
            Ok((entry, whole))
        });
        // 3. Every rank's "durable", with its shard's size and checksum.
        let words = match &written {
            Ok((e, _)) => [1, (e.bytes >> 32) as u32, e.bytes as u32, e.crc32],
            Err(_) => [0; 4],
        };
        let all = self.agree(&words)?;
        let (_, mut entries) = written?;
        if let Some(r) = all.iter().position(|w| w[0] == 0) {
            return Err(checkpoint_err(format!(
                "rank {r} could not write its shard of step {step}; nothing was published"
            )));
        }
        // 4. The writer publishes.
        let Some(begun) = begun else {
            return Ok(());
        };
        for (s, w) in zero.shards.iter().zip(&all) {
            let entry = FileEntry {
                bytes: (u64::from(w[1]) << 32) | u64::from(w[2]),
                crc32: w[3],
            };
            entries.insert(s.file.clone(), entry);
        }
        begun.publish(entries, Some(zero))
    }

    /// Takes this rank's ranges of the sharded state in the verified checkpoint `saved` (of
    /// any rank count and stage): its master weights (used by the broadcast that follows, in
    /// place of the model's) and its moments. Refused naming the unit when the checkpoint's
    /// units are not this model's.
    pub fn load_sharded(
        &mut self,
        model: &Transformer<Ad>,
        saved: &Published,
    ) -> Result<(), AttnError> {
        let zero = saved.manifest.zero.as_ref().ok_or_else(|| {
            AttnError::Unsupported("a whole checkpoint read as a sharded one".into())
        })?;
        let layout = self.layout_of(model)?.clone();
        check_units(&layout, zero, saved)?;
        let rank = self.group().rank();
        let mut master = Vec::with_capacity(layout.units.len());
        let mut moments = Vec::with_capacity(layout.units.len());
        for (u, unit) in layout.units.iter().enumerate() {
            let slice = layout.shard(unit, rank);
            let n = slice.len();
            let held = slice.start.min(unit.len)..slice.end.min(unit.len);
            let mut read = |t: usize| -> Result<Tensor<Ascend, 1>, AttnError> {
                let mut v = zero.read_range(&saved.dir, u, t, held.clone())?;
                self.stats.shard_bytes_read += 4 * v.len() as u64;
                // The padding past the unit's end: zeros, as the layout pads.
                v.resize(n, 0.0);
                Ok(Tensor::from_data(TensorData::new(v, [n]), &self.device))
            };
            master.push(read(0)?);
            let (m, v) = (read(1)?, read(2)?);
            moments.push(Moments {
                time: zero.adam_steps,
                m,
                v,
            });
        }
        self.resumed_master = Some(master);
        // Saved before the first step: no moments yet.
        self.state = (zero.adam_steps > 0).then_some(moments);
        Ok(())
    }

    /// Bytes of the sharded state this rank holds: its slices (padding included) of the master
    /// weights and both moments of every unit.
    pub fn held_state_bytes(&self) -> u64 {
        self.layout.as_ref().map_or(0, |l| {
            let slice: usize = l.units.iter().map(|u| l.shard_len(u)).sum();
            4 * TENSORS.len() as u64 * slice as u64
        })
    }

    /// Bytes of the whole sharded state of the layout (master weights and both moments of
    /// every unit, no padding): what one rank would hold if it gathered all of it.
    pub fn whole_state_bytes(&self) -> u64 {
        self.layout
            .as_ref()
            .map_or(0, |l| 4 * TENSORS.len() as u64 * l.params() as u64)
    }
}
