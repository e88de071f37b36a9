//! FIA's mask rule and the CPU reference's arguments.

use crate::fia::problem::{FiaArgs, FiaDequant, FiaDequantIndex, FiaKvSlices};
use crate::prompt::problem::{PfaMask, PseShift};

use super::{FiaDims, FiaSpec, PfaSparseMode};
use crate::prompt::PromptMask;

impl FiaSpec {
    /// Whether local `(i, j)` of batch `b` is masked (`sq`, `skv`: its actual lengths; `qi`,
    /// `kj`: the absolute row and column the dense mask is read at). The reference's rule.
    #[allow(clippy::too_many_arguments)]
    pub fn masked(
        &self,
        dims: &FiaDims,
        b: usize,
        (i, j): (usize, usize),
        (qi, kj): (usize, usize),
        (sq, skv): (usize, usize),
    ) -> bool {
        let dense = || match (&self.atten_mask, self.mask_dims(dims)) {
            (PromptMask::Dense { data, .. }, Some((mb, rows, cols))) => {
                let bb = if mb == 1 { 0 } else { b };
                let row = if dims.decode() { 0 } else { qi };
                data[(bb * rows + row) * cols + kj] != 0
            }
            _ => false,
        };
        if self.atten_mask == PromptMask::None {
            return false;
        }
        let d = j as i128 - i as i128;
        let delta = skv as i128 - sq as i128;
        let (pre, next) = (i128::from(self.pre_tokens), i128::from(self.next_tokens));
        let padded = self.query_padding_size.is_some() || self.kv_padding_size.is_some();
        match self.mode() {
            PfaSparseMode::DefaultMask => {
                dense() || (!dims.decode() && !padded && (d < -pre || d > next))
            }
            PfaSparseMode::AllMask => dense(),
            _ if dims.decode() => false,
            PfaSparseMode::LeftUpCausal => d > 0,
            PfaSparseMode::RightDownCausal => d > delta,
            PfaSparseMode::Band => d < delta - pre || d > delta + next,
        }
    }

    fn dequant<'a>(&'a self, dims: &FiaDims, which: usize) -> Option<FiaDequant<'a>> {
        let (kv, mode) = if which == 0 {
            (&self.key_antiquant, self.key_antiquant_mode)
        } else {
            (&self.value_antiquant, self.value_antiquant_mode)
        };
        if let Some(q) = kv {
            let index = if mode == 1 {
                FiaDequantIndex::PerToken {
                    cols: *q.shape.last().expect("validated"),
                }
            } else if q.scale.len() == 1 {
                FiaDequantIndex::PerTensor
            } else {
                FiaDequantIndex::PerChannel
            };
            return Some(FiaDequant {
                index,
                scale: &q.scale,
                offset: q.offset.as_deref(),
            });
        }
        let aq = self.antiquant.as_ref()?;
        let per = if aq.shape.len() == 1 {
            1
        } else {
            dims.kv_heads * dims.head_dim
        };
        let pick = |v: &'a [f32]| &v[which * per..(which + 1) * per];
        Some(FiaDequant {
            index: if per == 1 {
                FiaDequantIndex::PerTensor
            } else {
                FiaDequantIndex::PerChannel
            },
            scale: pick(&aq.scale),
            offset: aq.offset.as_deref().map(pick),
        })
    }

    /// The CPU reference's arguments for a validated call (f32 host buffers: query in the
    /// layout, key/value or the paged caches; int8 KV values as f32; the `learnableSink`
    /// values).
    pub fn args<'a>(
        &'a self,
        dims: &FiaDims,
        query: &'a [f32],
        key: &'a [f32],
        value: &'a [f32],
        learnable_sink: Option<&'a [f32]>,
    ) -> FiaArgs<'a, f32> {
        let kv = match dims.paged {
            None => FiaKvSlices::Contiguous { key, value },
            Some(p) => FiaKvSlices::Paged {
                key_cache: key,
                value_cache: value,
                layout: p.layout,
                block_table: &self.block_table.as_ref().expect("validated").data,
                max_blocks_per_seq: p.max_blocks,
                block_size: p.block_size,
            },
        };
        let atten_mask = match (&self.atten_mask, self.mask_dims(dims)) {
            (PromptMask::None, _) => None,
            (PromptMask::Dense { data, .. }, Some((mb, rows, cols))) => Some(PfaMask {
                data,
                batched: mb != 1,
                rows,
                cols,
            }),
            // Modes 2-4 never read the mask's contents.
            _ => Some(PfaMask {
                data: &[],
                batched: false,
                rows: 0,
                cols: 0,
            }),
        };
        FiaArgs {
            query,
            kv,
            input_layout: dims.layout,
            batch: dims.batch,
            q_seq: dims.q_seq,
            kv_seq: dims.kv_seq,
            num_heads: dims.num_heads,
            num_key_value_heads: dims.kv_heads,
            head_dim: dims.head_dim,
            head_dim_v: dims.head_dim_v,
            scale: self.scale_value,
            pre_tokens: self.pre_tokens,
            next_tokens: self.next_tokens,
            sparse_mode: self.mode(),
            atten_mask,
            pse_shift: self.pse_shift.as_ref().map(|p| PseShift {
                data: &p.data,
                batched: p.shape[0] != 1,
                rows: p.shape[2],
                cols: p.shape[3],
            }),
            actual_seq_lengths: self.actual_seq_lengths.as_deref(),
            actual_seq_lengths_kv: self.actual_seq_lengths_kv.as_deref(),
            query_padding_size: self.applied_query_padding(),
            kv_padding_size: self.applied_kv_padding(),
            key_antiquant: self.dequant(dims, 0),
            value_antiquant: self.dequant(dims, 1),
            learnable_sink,
        }
    }
}
