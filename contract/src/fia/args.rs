//! FIA's mask rule and the CPU reference's arguments.

use crate::fia::problem::{FiaArgs, FiaDequant, FiaDequantIndex, FiaKvSlices};
use crate::prompt::problem::{PfaMask, PseShift};

use super::{FiaDims, FiaMask, FiaSpec, PfaSparseMode};

/// The host values of the optional tensor inputs ([`super::FiaInputs`]'s), as the reference
/// reads them: the mask as bytes (non-zero = masked), the rest as f32, each row-major in the
/// shape validation saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct FiaHostValues<'a> {
    /// `attenMask` (with [`FiaMask::Dense`]).
    pub atten_mask: Option<&'a [u8]>,
    /// `pseShift`.
    pub pse_shift: Option<&'a [f32]>,
    /// `antiquantScale` (combined K/V).
    pub antiquant_scale: Option<&'a [f32]>,
    /// `antiquantOffset`.
    pub antiquant_offset: Option<&'a [f32]>,
    /// `keyAntiquantScale`.
    pub key_antiquant_scale: Option<&'a [f32]>,
    /// `keyAntiquantOffset`.
    pub key_antiquant_offset: Option<&'a [f32]>,
    /// `valueAntiquantScale`.
    pub value_antiquant_scale: Option<&'a [f32]>,
    /// `valueAntiquantOffset`.
    pub value_antiquant_offset: Option<&'a [f32]>,
    /// `learnableSink`.
    pub learnable_sink: Option<&'a [f32]>,
}

impl FiaSpec {
    /// The mask rule without the dense mask's values: whether local `(i, j)` of batch `b`
    /// is masked by the sparse mode and pre/next tokens (`sq`, `skv`: its actual lengths;
    /// `dense`: whether the dense mask, where there is one, masks it). [`Self::masked`] with
    /// the mask's values read at the call's row and column.
    pub fn masked_by_mode(
        &self,
        dims: &FiaDims,
        (i, j): (usize, usize),
        (sq, skv): (usize, usize),
        dense: impl FnOnce() -> bool,
    ) -> bool {
        if self.atten_mask == FiaMask::None {
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

    /// Whether local `(i, j)` of batch `b` is masked (`sq`, `skv`: its actual lengths; `qi`,
    /// `kj`: the absolute row and column the dense mask is read at; `mask`: the dense mask's
    /// bytes). The reference's rule.
    pub fn masked(
        &self,
        dims: &FiaDims,
        b: usize,
        (i, j): (usize, usize),
        (qi, kj): (usize, usize),
        (sq, skv): (usize, usize),
        mask: Option<&[u8]>,
    ) -> bool {
        let dense = || match (mask, dims.mask) {
            (Some(data), Some((mb, rows, cols))) => {
                let bb = if mb == 1 { 0 } else { b };
                let row = if dims.decode() { 0 } else { qi };
                data[(bb * rows + row) * cols + kj] != 0
            }
            _ => false,
        };
        self.masked_by_mode(dims, (i, j), (sq, skv), dense)
    }

    /// The CPU reference's arguments for a validated call (f32 host buffers: query in the
    /// layout, key/value or the paged caches; int8 KV values as f32; `host`: the optional
    /// inputs' values, the ones `dims` was validated with, and the `learnableSink`).
    pub fn args<'a>(
        &'a self,
        dims: &FiaDims,
        query: &'a [f32],
        key: &'a [f32],
        value: &'a [f32],
        host: FiaHostValues<'a>,
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
        let atten_mask = match (self.atten_mask, host.atten_mask, dims.mask) {
            (FiaMask::None, ..) => None,
            (FiaMask::Dense, Some(data), Some((mb, rows, cols))) => Some(PfaMask {
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
            pse_shift: host
                .pse_shift
                .zip(dims.pse_shape)
                .map(|(data, p)| PseShift {
                    data,
                    batched: p[0] != 1,
                    rows: p[2],
                    cols: p[3],
                }),
            actual_seq_lengths: self.actual_seq_lengths.as_deref(),
            actual_seq_lengths_kv: self.actual_seq_lengths_kv.as_deref(),
            query_padding_size: self.applied_query_padding(),
            kv_padding_size: self.applied_kv_padding(),
            key_antiquant: dequant(dims, &host, 0),
            value_antiquant: dequant(dims, &host, 1),
            learnable_sink: host.learnable_sink,
        }
    }
}

/// The reference's antiquant of K (`which = 0`) or V (`which = 1`): the separate scale /
/// offset, else its row of the combined ones.
fn dequant<'a>(dims: &FiaDims, host: &FiaHostValues<'a>, which: usize) -> Option<FiaDequant<'a>> {
    let index = dims.antiquant_index?[which];
    let (scale, offset) = if which == 0 {
        (host.key_antiquant_scale, host.key_antiquant_offset)
    } else {
        (host.value_antiquant_scale, host.value_antiquant_offset)
    };
    if let Some(scale) = scale {
        return Some(FiaDequant {
            index,
            scale,
            offset,
        });
    }
    let per = match index {
        FiaDequantIndex::PerTensor => 1,
        _ => dims.kv_heads * dims.head_dim,
    };
    let row = |v: &'a [f32]| &v[which * per..(which + 1) * per];
    Some(FiaDequant {
        index,
        scale: row(host.antiquant_scale?),
        offset: host.antiquant_offset.map(row),
    })
}
