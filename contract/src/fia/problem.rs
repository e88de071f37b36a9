//! The plain-data description of `aclnnFusedInferAttentionScoreV4`: its layouts, modes, the argument struct of one
//! call and the addressing and masking rules every implementation shares (the f64 reference
//! in `burn-ascend-kernels`, the fast CPU kernels, the simulation, the aclnn builders).

use crate::incre::problem::PagedLayout;
use crate::prompt::problem::{PfaLayout, PfaMask, PfaSparseMode, PseShift};
use crate::Element;

/// Key/value: one tensor each in the input layout, or paged caches.
#[derive(Clone, Copy, Debug)]
pub enum FiaKvSlices<'a, T> {
    /// `key` / `value` in `inputLayout` (TND: `[T2, Nkv, D]`).
    Contiguous { key: &'a [T], value: &'a [T] },
    /// Page attention: token `t` of batch `b` is in block
    /// `block_table[b·max_blocks_per_seq + t / block_size]` at offset `t % block_size`.
    Paged {
        key_cache: &'a [T],
        value_cache: &'a [T],
        layout: PagedLayout,
        block_table: &'a [i32],
        max_blocks_per_seq: usize,
        block_size: usize,
    },
}

/// How a dequantisation parameter is indexed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FiaDequantIndex {
    /// One value.
    PerTensor,
    /// `Nkv·D` values, index `n·D + d`.
    PerChannel,
    /// `(B, cols)` values, index `b·cols + t` (t the absolute KV token).
    PerToken { cols: usize },
}

/// The antiquant of K or V: `x = (x_int8 + offset) · scale`; `offset` absent = 0.
#[derive(Clone, Copy, Debug)]
pub struct FiaDequant<'a> {
    pub index: FiaDequantIndex,
    pub scale: &'a [f32],
    pub offset: Option<&'a [f32]>,
}

impl FiaDequant<'_> {
    pub fn apply(&self, x: f64, b: usize, t: usize, channel: usize) -> f64 {
        let i = match self.index {
            FiaDequantIndex::PerTensor => 0,
            FiaDequantIndex::PerChannel => channel,
            FiaDequantIndex::PerToken { cols } => b * cols + t,
        };
        (x + self.offset.map_or(0.0, |o| o[i] as f64)) * self.scale[i] as f64
    }
}

/// One FIA call. Field names follow the aclnn parameters.
///
/// `q_seq` is the query S (TND: T1); `kv_seq` the key S (TND: T2; paged: unused).
/// `actual_seq_lengths` are per batch (TND: cumulative); `actual_seq_lengths_kv` per batch
/// (TND without paging: cumulative). The mask and pse are indexed like the PFA reference's
/// ([`PfaMask`], [`PseShift`]); for decode with a rank-2 `(B, KV_S)` mask pass
/// `batched = true, rows = 1`.
///
/// Preconditions (the contract validates; violating them may panic, never UB): lengths and
/// windows inside the tensors, block ids in range, mask/pse covering every read element.
#[derive(Clone, Copy, Debug)]
pub struct FiaArgs<'a, T> {
    pub query: &'a [T],
    pub kv: FiaKvSlices<'a, T>,
    pub input_layout: PfaLayout,
    pub batch: usize,
    pub q_seq: usize,
    pub kv_seq: usize,
    pub num_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub scale: f64,
    pub pre_tokens: i64,
    pub next_tokens: i64,
    pub sparse_mode: PfaSparseMode,
    pub atten_mask: Option<PfaMask<'a>>,
    pub pse_shift: Option<PseShift<'a, f32>>,
    pub actual_seq_lengths: Option<&'a [i64]>,
    pub actual_seq_lengths_kv: Option<&'a [i64]>,
    /// Applied query left padding (`queryPaddingSize`, already resolved: `None` = none).
    pub query_padding_size: Option<usize>,
    /// Applied KV left padding (`kvPaddingSize`, resolved).
    pub kv_padding_size: Option<usize>,
    pub key_antiquant: Option<FiaDequant<'a>>,
    pub value_antiquant: Option<FiaDequant<'a>>,
    /// `learnableSink` `[N]` (raw logits).
    pub learnable_sink: Option<&'a [f32]>,
}

/// The reference's outputs: `attentionOut` (f64, in the output layout) and `softmaxLse`
/// (`[B, N, Q_S]`, TND `[T, N]`; the trailing 1 of CANN's shape is implicit).
#[derive(Clone, Debug, PartialEq)]
pub struct FiaOut {
    pub attention_out: Vec<f64>,
    pub softmax_lse: Vec<f32>,
}

pub fn len_at(lens: Option<&[i64]>, b: usize, full: usize) -> usize {
    match lens {
        None => full,
        Some(l) => (if l.len() == 1 { l[0] } else { l[b] }).clamp(0, full as i64) as usize,
    }
}

pub fn cum_at(lens: &[i64], b: usize) -> (usize, usize) {
    let end = lens[b].max(0) as usize;
    let start = if b == 0 {
        0
    } else {
        lens[b - 1].max(0) as usize
    };
    (start, end.saturating_sub(start))
}

impl<T: Element> FiaArgs<'_, T> {
    pub fn nkv(&self) -> usize {
        if self.num_key_value_heads == 0 {
            self.num_heads
        } else {
            self.num_key_value_heads
        }
    }

    pub fn tnd(&self) -> bool {
        self.input_layout == PfaLayout::Tnd
    }

    pub fn decode(&self) -> bool {
        !self.tnd() && self.q_seq == 1
    }

    /// KV S of the tensors (paged: the block table's reach).
    pub fn kv_extent(&self) -> usize {
        match self.kv {
            FiaKvSlices::Contiguous { .. } => self.kv_seq,
            FiaKvSlices::Paged {
                max_blocks_per_seq,
                block_size,
                ..
            } => max_blocks_per_seq * block_size,
        }
    }

    /// `(q_start, sq, kv_start, skv)`: absolute first row/column and actual lengths of batch b
    /// (TND: token offsets).
    pub fn sequence(&self, b: usize) -> (usize, usize, usize, usize) {
        let paged = matches!(self.kv, FiaKvSlices::Paged { .. });
        let (q0, sq) = if self.tnd() {
            cum_at(self.actual_seq_lengths.unwrap_or(&[]), b)
        } else {
            let sq = len_at(self.actual_seq_lengths, b, self.q_seq);
            let q0 = self.query_padding_size.map_or(0, |p| self.q_seq - p - sq);
            (q0, sq)
        };
        let (k0, skv) = if self.tnd() && !paged {
            cum_at(self.actual_seq_lengths_kv.unwrap_or(&[]), b)
        } else {
            let full = self.kv_extent();
            let skv = len_at(self.actual_seq_lengths_kv, b, full);
            let k0 = self.kv_padding_size.map_or(0, |p| full - p - skv);
            (k0, skv)
        };
        (q0, sq, k0, skv)
    }

    pub fn q_at(&self, b: usize, row: usize, h: usize, d: usize) -> f64 {
        let (n, dd) = (self.num_heads, self.head_dim);
        let idx = match self.input_layout {
            PfaLayout::Bsh | PfaLayout::Bsnd => ((b * self.q_seq + row) * n + h) * dd + d,
            PfaLayout::Bnsd | PfaLayout::BnsdBsnd => ((b * n + h) * self.q_seq + row) * dd + d,
            PfaLayout::Tnd => (row * n + h) * dd + d,
        };
        self.query[idx].to_f64()
    }

    /// K (`which = 0`) or V (`which = 1`), batch b, absolute token t (TND: token row), kv head
    /// n, dim d, dequantised.
    pub fn kv_at(&self, which: usize, b: usize, t: usize, n: usize, d: usize) -> f64 {
        let nkv = self.nkv();
        let dim = if which == 0 {
            self.head_dim
        } else {
            self.head_dim_v
        };
        let raw = match self.kv {
            FiaKvSlices::Contiguous { key, value } => {
                let buf = if which == 0 { key } else { value };
                let idx = match self.input_layout {
                    PfaLayout::Bsh | PfaLayout::Bsnd => ((b * self.kv_seq + t) * nkv + n) * dim + d,
                    PfaLayout::Bnsd | PfaLayout::BnsdBsnd => {
                        ((b * nkv + n) * self.kv_seq + t) * dim + d
                    }
                    PfaLayout::Tnd => (t * nkv + n) * dim + d,
                };
                buf[idx].to_f64()
            }
            FiaKvSlices::Paged {
                key_cache,
                value_cache,
                layout,
                block_table,
                max_blocks_per_seq,
                block_size,
            } => {
                let buf = if which == 0 { key_cache } else { value_cache };
                let blk = block_table[b * max_blocks_per_seq + t / block_size] as usize;
                let off = t % block_size;
                let idx = match layout {
                    PagedLayout::Bsh => (blk * block_size + off) * nkv * dim + n * dim + d,
                    PagedLayout::Bnsd => ((blk * nkv + n) * block_size + off) * dim + d,
                };
                buf[idx].to_f64()
            }
        };
        let dq = if which == 0 {
            self.key_antiquant
        } else {
            self.value_antiquant
        };
        match dq {
            Some(q) => q.apply(raw, b, t, n * dim + d),
            None => raw,
        }
    }

    /// Whether local (i, j) of batch b is masked; `(qi, kj)` are the absolute row and column
    /// the dense mask is read at.
    #[allow(clippy::too_many_arguments)]
    pub fn masked(
        &self,
        b: usize,
        i: usize,
        j: usize,
        qi: usize,
        kj: usize,
        sq: usize,
        skv: usize,
    ) -> bool {
        let Some(m) = self.atten_mask else {
            return false;
        };
        let dense = || {
            let bb = if m.batched { b } else { 0 };
            let row = if self.decode() { 0 } else { qi };
            m.data[(bb * m.rows + row) * m.cols + kj] != 0
        };
        let d = j as i128 - i as i128;
        let delta = skv as i128 - sq as i128;
        let (pre, next) = (i128::from(self.pre_tokens), i128::from(self.next_tokens));
        let padded = self.query_padding_size.is_some() || self.kv_padding_size.is_some();
        match self.sparse_mode {
            PfaSparseMode::DefaultMask => {
                dense() || (!self.decode() && !padded && (d < -pre || d > next))
            }
            PfaSparseMode::AllMask => dense(),
            _ if self.decode() => false,
            PfaSparseMode::LeftUpCausal => d > 0,
            PfaSparseMode::RightDownCausal => d > delta,
            PfaSparseMode::Band => d < delta - pre || d > delta + next,
        }
    }

    pub fn out_index(&self, b: usize, row: usize, h: usize, d: usize) -> usize {
        let (n, dv) = (self.num_heads, self.head_dim_v);
        match self.input_layout {
            PfaLayout::Bsh | PfaLayout::Bsnd | PfaLayout::BnsdBsnd => {
                ((b * self.q_seq + row) * n + h) * dv + d
            }
            PfaLayout::Bnsd => ((b * n + h) * self.q_seq + row) * dv + d,
            PfaLayout::Tnd => (row * n + h) * dv + d,
        }
    }

    pub fn lse_index(&self, b: usize, row: usize, h: usize) -> usize {
        if self.tnd() {
            row * self.num_heads + h
        } else {
            (b * self.num_heads + h) * self.q_seq + row
        }
    }

    /// Number of output elements.
    pub fn output_len(&self) -> usize {
        let rows = if self.tnd() {
            self.q_seq
        } else {
            self.batch * self.q_seq
        };
        rows * self.num_heads * self.head_dim_v
    }

    /// Number of `softmaxLse` elements.
    pub fn lse_len(&self) -> usize {
        let rows = if self.tnd() {
            self.q_seq
        } else {
            self.batch * self.q_seq
        };
        rows * self.num_heads
    }
}
