//! The incremental (decode) op's parameters (named after `aclnnIncreFlashAttentionV4`) and
//! their validation.
//!
//! Every rule of `kernels/src/reference/VALIDATION.md` (IFA section) that a host-side caller can
//! break is checked here; each failure names the aclnn parameter. Element dtypes (f16/bf16 query,
//! int8 KV, mask BOOL/INT8/UINT8 with 0/1 values, int32 blocktable) are checked where they are
//! known: in the CLI. Whether the KV is int8 reaches the rules through
//! [`IncreShapes::kv_int8`]. Ascend 310P limits are not applied.

mod args;
pub mod problem;
pub mod tensors;
pub use args::IncreHostValues;
pub use problem::*;
pub use tensors::*;

use std::sync::Arc;

use crate::checked;
use crate::error::{ensure, AttnError, Result};

use crate::prompt::{resolve_kv_heads, validate_post_quant, PostQuantSpec};

/// Largest batch (A2/A3).
pub const IFA_MAX_BATCH: usize = 65_536;
/// Largest tensor-list length.
pub const IFA_MAX_LIST: usize = 256;
/// Largest `numHeads`.
pub const IFA_MAX_HEADS: usize = 256;
/// Largest head dim.
pub const IFA_MAX_HEAD_DIM: usize = 512;
/// Largest `blockSize`.
pub const IFA_MAX_BLOCK_SIZE: usize = 512;

/// `blocktable` `(B, maxBlockNumPerSeq)`, int32 block ids.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockTable {
    /// Block ids, row-major.
    pub data: Arc<[i32]>,
    /// `[B, maxBlockNumPerSeq]`.
    pub shape: Vec<usize>,
}

/// Everything of the incremental op that is not query/key/value.
#[derive(Debug, Clone, PartialEq)]
pub struct IncreSpec {
    /// `numHeads`.
    pub num_heads: usize,
    /// `numKeyValueHeads` (0 = `numHeads`).
    pub num_key_value_heads: usize,
    /// `scaleValue`.
    pub scale_value: f64,
    /// `inputLayout`.
    pub input_layout: IfaLayout,
    /// `blockSize` (paged attention only).
    pub block_size: usize,
    /// `innerPrecise` (0 or 1).
    pub inner_precise: i64,
    /// `actualSeqLengths`: per-batch KV lengths, `(B)` or `(1)`.
    pub actual_seq_lengths: Option<Vec<i64>>,
    /// `kvPaddingSize` (negative = 0).
    pub kv_padding_size: Option<i64>,
    /// `blocktable`: page attention when present. Index metadata the host owns (the paged
    /// cache's, checked id by id here), not a tensor value of the call.
    pub block_table: Option<BlockTable>,
    /// `quantScale2` / `quantOffset2` (int8 output).
    pub post_quant: Option<PostQuantSpec>,
}

/// Shapes of the KV inputs in one of the three forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IncreKvShapes {
    /// One key and one value tensor in the input layout.
    Contiguous {
        /// `key`.
        key: Vec<usize>,
        /// `value`.
        value: Vec<usize>,
    },
    /// Tensor lists (one tensor per batch, batch dim 1).
    List {
        /// `key[b]`.
        key: Vec<Vec<usize>>,
        /// `value[b]`.
        value: Vec<Vec<usize>>,
    },
    /// Paged caches `(blocknum, blockSize, H)` or `(blocknum, Nkv, blockSize, D)`.
    Paged {
        /// The key cache.
        key_cache: Vec<usize>,
        /// The value cache.
        value_cache: Vec<usize>,
    },
}

/// Shapes of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncreShapes {
    /// `query`.
    pub query: Vec<usize>,
    /// `key` / `value`.
    pub kv: IncreKvShapes,
    /// Whether key/value are int8 (needs antiquant; blockSize multiple of 32).
    pub kv_int8: bool,
    /// `attenMask` `(B, S)`, `(B, 1, S)` or `(B, 1, 1, S)`, when given.
    pub atten_mask: Option<Vec<usize>>,
    /// `pseShift` `(B|1, N, 1, S)`, when given.
    pub pse_shift: Option<Vec<usize>>,
    /// `antiquantScale`: `(2)` per tensor; `(2, Nkv, 1, D)` (BNSD), `(2, Nkv, D)` (BSND),
    /// `(2, H)` (BSH) per channel.
    pub antiquant_scale: Option<Vec<usize>>,
    /// `antiquantOffset`: the scale's shape.
    pub antiquant_offset: Option<Vec<usize>>,
}

impl IncreShapes {
    /// Query and key/value only (no mask, pse or antiquant).
    pub fn new(query: Vec<usize>, kv: IncreKvShapes, kv_int8: bool) -> Self {
        Self {
            query,
            kv,
            kv_int8,
            atten_mask: None,
            pse_shift: None,
            antiquant_scale: None,
            antiquant_offset: None,
        }
    }
}

/// Dimensions of the KV form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvDims {
    /// Contiguous with KV S.
    Contiguous {
        /// KV S.
        kv_seq: usize,
    },
    /// Tensor list with each batch's S.
    List {
        /// `S_b`.
        seqs: Vec<usize>,
    },
    /// Paged.
    Paged {
        /// Cache layout.
        layout: PagedLayout,
        /// blocknum.
        num_blocks: usize,
        /// maxBlockNumPerSeq.
        max_blocks: usize,
        /// blockSize.
        block_size: usize,
    },
}

/// A validated call's dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncreDims {
    /// B.
    pub batch: usize,
    /// N.
    pub num_heads: usize,
    /// Nkv (resolved).
    pub kv_heads: usize,
    /// D.
    pub head_dim: usize,
    /// The KV form.
    pub kv: KvDims,
    /// `attenMask`'s S (its last dim), when given.
    pub mask_cols: Option<usize>,
    /// `pseShift` `[B|1, N, 1, S]`, when given.
    pub pse_shape: Option<[usize; 4]>,
    /// With an antiquant: whether it is per channel (else per tensor).
    pub antiquant_per_channel: Option<bool>,
}

impl IncreDims {
    /// KV S of batch `b` (paged: maxBlockNumPerSeq·blockSize).
    pub fn kv_s(&self, b: usize) -> usize {
        match &self.kv {
            KvDims::Contiguous { kv_seq } => *kv_seq,
            KvDims::List { seqs } => seqs[b],
            KvDims::Paged {
                max_blocks,
                block_size,
                ..
            } => max_blocks * block_size,
        }
    }

    fn max_kv_s(&self) -> usize {
        (0..self.batch).map(|b| self.kv_s(b)).max().unwrap_or(0)
    }
}

/// Parses `inputLayout`.
pub fn parse_ifa_layout(s: &str) -> Result<IfaLayout> {
    IfaLayout::from_attr(s).ok_or_else(|| {
        AttnError::invalid(
            "inputLayout",
            format!("must be BSH, BSND or BNSD, got \"{s}\""),
        )
    })
}

impl IncreSpec {
    /// CANN's defaults: `Nkv = N`, no optional inputs, innerPrecise 1, blockSize 0.
    pub fn new(num_heads: usize, scale_value: f64, input_layout: IfaLayout) -> Self {
        Self {
            num_heads,
            num_key_value_heads: 0,
            scale_value,
            input_layout,
            block_size: 0,
            inner_precise: 1,
            actual_seq_lengths: None,
            kv_padding_size: None,
            block_table: None,
            post_quant: None,
        }
    }

    /// The left padding the kernel applies: `kvPaddingSize` (negative as 0) only when key and
    /// value are one batch-continuous tensor (a single tensor, or a list whose one tensor holds
    /// all B = 1 batches), `actualSeqLengths` is given and no block table is used. Otherwise
    /// CANN ignores `kvPaddingSize` without an error (`incre_flash_attention_tiling_check.cpp`,
    /// `CheckSupportKVLeftPadding`; `batchContinuousFlag_ = (B == key.dim0)` in
    /// `incre_flash_attention_tiling.cpp`), and so do the reference, the CPU kernels and the
    /// simulation. The Burn-level API refuses those combinations instead
    /// ([`Self::check_left_padding_applies`]).
    pub fn left_padding(&self, dims: &IncreDims) -> Option<usize> {
        let pad = self.kv_padding_size?;
        let batch_continuous = match &dims.kv {
            KvDims::Contiguous { .. } => true,
            KvDims::List { seqs } => seqs.len() == 1,
            KvDims::Paged { .. } => false,
        };
        (batch_continuous && self.actual_seq_lengths.is_some()).then_some(pad.max(0) as usize)
    }

    /// Why CANN ignores the given `kvPaddingSize` in this call (see [`Self::left_padding`]),
    /// or `None` where it is not given or is applied. The op-replay CLI drops such a padding
    /// with a note, as CANN runs the call without it.
    pub fn ignored_left_padding(&self, dims: &IncreDims) -> Option<&'static str> {
        if self.kv_padding_size.is_none() || self.left_padding(dims).is_some() {
            return None;
        }
        Some(match &dims.kv {
            KvDims::Paged { .. } => "page attention (blocktable) is used",
            KvDims::List { .. } => "key/value are a tensor list of more than one tensor",
            KvDims::Contiguous { .. } => "actualSeqLengths is not given",
        })
    }

    /// A typed error where `kvPaddingSize` is given but CANN would ignore it (see
    /// [`Self::left_padding`]): the Burn-level API never drops a user's input silently.
    pub fn check_left_padding_applies(&self, dims: &IncreDims) -> Result<()> {
        let Some(why) = self.ignored_left_padding(dims) else {
            return Ok(());
        };
        Err(AttnError::invalid(
            "kvPaddingSize",
            format!(
                "CANN ignores left padding when {why} (it needs one key/value tensor, \
                 actualSeqLengths and no blocktable); refused rather than silently ignored"
            ),
        ))
    }

    /// Valid KV window `[start, start + len)` of batch `b` (after validation).
    pub fn window(&self, dims: &IncreDims, b: usize) -> (usize, usize) {
        let kv_s = dims.kv_s(b);
        let len = match &self.actual_seq_lengths {
            None => kv_s,
            Some(l) => (if l.len() == 1 { l[0] } else { l[b] }).max(0) as usize,
        };
        let start = match self.left_padding(dims) {
            None => 0,
            Some(pad) => kv_s - pad - len,
        };
        (start, len)
    }

    /// Checks a call and returns its dimensions.
    pub fn validate(&self, s: &IncreShapes) -> Result<IncreDims> {
        let layout = self.input_layout;
        let n = self.num_heads;
        ensure!(
            (1..=IFA_MAX_HEADS).contains(&n),
            "numHeads",
            "must be in 1..={IFA_MAX_HEADS}, got {n}"
        );
        let q = &s.query;
        let (qb, qn, d) = match (layout, q.as_slice()) {
            (IfaLayout::Bnsd, &[b, qn, 1, d]) => (b, qn, d),
            (IfaLayout::Bsnd, &[b, 1, qn, d]) => (b, qn, d),
            (IfaLayout::Bsh, &[b, 1, h]) => {
                ensure!(
                    h % n == 0 && h > 0,
                    "query",
                    "H = {h} must be a positive multiple of numHeads {n}"
                );
                (b, n, h / n)
            }
            _ => {
                return Err(AttnError::invalid(
                    "query",
                    format!(
                        "shape must be (B,N,1,D) for BNSD, (B,1,N,D) for BSND or (B,1,H) for BSH (S = 1), got {q:?} for {layout:?}"
                    ),
                ))
            }
        };
        // CANN's IFA tiling refuses an empty query (no early return in the aclnn layer):
        // `IFATiling::CheckBaseInputsNull` in
        // `attention/incre_flash_attention/op_host/incre_flash_attention_tiling_check.cpp`.
        ensure!(
            qb > 0 && d > 0,
            "query",
            "must not be empty (B and D > 0; CANN's IFA tiling refuses an empty query), got {q:?}"
        );
        ensure!(
            qn == n,
            "numHeads",
            "must equal the query's N = {qn}, got {n}"
        );
        let nkv = resolve_kv_heads(n, self.num_key_value_heads)?;
        ensure!(
            (1..=IFA_MAX_HEAD_DIM).contains(&d),
            "query",
            "D must be in 1..={IFA_MAX_HEAD_DIM}, got {d}"
        );
        ensure!(
            qb <= IFA_MAX_BATCH,
            "query",
            "B must be <= {IFA_MAX_BATCH}, got {qb}"
        );
        ensure!(
            self.scale_value.is_finite(),
            "scaleValue",
            "must be finite, got {}",
            self.scale_value
        );
        checked::finite_f32("scaleValue", self.scale_value)?;
        ensure!(
            (0..=1).contains(&self.inner_precise),
            "innerPrecise",
            "must be 0 or 1, got {}",
            self.inner_precise
        );
        let kv = self.validate_kv(s, qb, nkv, d)?;
        let mut dims = IncreDims {
            batch: qb,
            num_heads: n,
            kv_heads: nkv,
            head_dim: d,
            kv,
            mask_cols: None,
            pse_shape: None,
            antiquant_per_channel: None,
        };
        self.validate_lengths(&dims)?;
        (dims.mask_cols, dims.pse_shape) = validate_mask_pse(&dims, s)?;
        dims.antiquant_per_channel = self.validate_antiquant(&dims, s)?;
        if let Some(pq) = &self.post_quant {
            validate_post_quant(pq, checked::product("query", "N·D", &[n, d])?)?;
        }
        Ok(dims)
    }

    /// `(B, S, Nkv, D)` of a contiguous-layout KV tensor.
    fn kv_split(&self, t: &[usize], nkv: usize, name: &'static str) -> Result<[usize; 4]> {
        Ok(match (self.input_layout, t) {
            (IfaLayout::Bsh, &[b, s, h]) => {
                ensure!(
                    h % nkv == 0,
                    name,
                    "H = {h} must be a multiple of numKeyValueHeads {nkv}"
                );
                [b, s, nkv, h / nkv]
            }
            (IfaLayout::Bsnd, &[b, s, kn, d]) => [b, s, kn, d],
            (IfaLayout::Bnsd, &[b, kn, s, d]) => [b, s, kn, d],
            (layout, _) => {
                return Err(AttnError::invalid(
                    name,
                    format!(
                        "shape must be (B,S,H), (B,S,N,D) or (B,N,S,D) per inputLayout, got {t:?} for {layout:?}"
                    ),
                ))
            }
        })
    }

    fn check_kv_tensor(
        &self,
        t: &[usize],
        nkv: usize,
        d: usize,
        name: &'static str,
    ) -> Result<[usize; 4]> {
        let [b, s, kn, kd] = self.kv_split(t, nkv, name)?;
        ensure!(
            kn == nkv,
            "numKeyValueHeads",
            "must equal the key's N = {kn} (0 means numHeads), got {}",
            self.num_key_value_heads
        );
        ensure!(kd == d, name, "D must equal the query's D {d}, got {kd}");
        Ok([b, s, kn, kd])
    }

    fn validate_kv(&self, s: &IncreShapes, batch: usize, nkv: usize, d: usize) -> Result<KvDims> {
        let paged = matches!(s.kv, IncreKvShapes::Paged { .. });
        ensure!(
            self.block_table.is_some() == paged,
            "blocktable",
            "must be given exactly when key/value are paged caches ({})",
            if paged {
                "missing"
            } else {
                "given without paged caches"
            }
        );
        match &s.kv {
            IncreKvShapes::Contiguous { key, value } => {
                let [kb, ks, _, _] = self.check_kv_tensor(key, nkv, d, "key")?;
                ensure!(
                    kb == batch,
                    "key",
                    "B must equal the query's B {batch}, got {kb}"
                );
                ensure!(
                    value == key,
                    "value",
                    "shape must equal the key's {key:?}, got {value:?}"
                );
                Ok(KvDims::Contiguous { kv_seq: ks })
            }
            IncreKvShapes::List { key, value } => {
                ensure!(
                    key.len() == batch,
                    "key",
                    "tensor list must hold B = {batch} tensors, got {}",
                    key.len()
                );
                ensure!(
                    key.len() <= IFA_MAX_LIST,
                    "key",
                    "tensor list holds at most {IFA_MAX_LIST} tensors, got {}",
                    key.len()
                );
                ensure!(
                    value.len() == key.len(),
                    "value",
                    "tensor list must hold as many tensors as key ({}), got {}",
                    key.len(),
                    value.len()
                );
                let mut seqs = Vec::with_capacity(key.len());
                let mut first: Option<Vec<usize>> = None;
                for (b, (k, v)) in key.iter().zip(value).enumerate() {
                    let [kb, ks, _, _] = self.check_kv_tensor(k, nkv, d, "key")?;
                    ensure!(kb == 1, "key", "tensor {b}: batch dim must be 1, got {kb}");
                    ensure!(
                        v == k,
                        "value",
                        "tensor {b}: shape must equal the key's {k:?}, got {v:?}"
                    );
                    // All shapes equal except S: compare with S zeroed.
                    let mut norm = k.clone();
                    let s_axis = if self.input_layout == IfaLayout::Bnsd {
                        2
                    } else {
                        1
                    };
                    norm[s_axis] = 0;
                    match &first {
                        None => first = Some(norm),
                        Some(f) => ensure!(
                            *f == norm,
                            "key",
                            "tensor {b}: shape {k:?} differs from tensor 0 in more than S"
                        ),
                    }
                    seqs.push(ks);
                }
                Ok(KvDims::List { seqs })
            }
            IncreKvShapes::Paged {
                key_cache,
                value_cache,
            } => {
                let bs = self.block_size;
                let align = if s.kv_int8 { 32 } else { 16 };
                ensure!(
                    (1..=IFA_MAX_BLOCK_SIZE).contains(&bs) && bs.is_multiple_of(align),
                    "blockSize",
                    "paged attention needs 0 < blockSize <= {IFA_MAX_BLOCK_SIZE}, a multiple of {align} ({} KV), got {bs}",
                    if s.kv_int8 { "int8" } else { "f16/bf16" }
                );
                let (layout, nb) = paged_caches(
                    key_cache,
                    value_cache,
                    nkv,
                    d,
                    bs,
                    self.input_layout == IfaLayout::Bnsd,
                )?;
                let bt = self.block_table.as_ref().expect("checked above");
                let max_blocks = block_table_width(bt, batch, bs)?;
                ensure!(
                    self.actual_seq_lengths.is_some(),
                    "actualSeqLengths",
                    "required with page attention (blocktable)"
                );
                Ok(KvDims::Paged {
                    layout,
                    num_blocks: nb,
                    max_blocks,
                    block_size: bs,
                })
            }
        }
    }

    fn validate_lengths(&self, dims: &IncreDims) -> Result<()> {
        let batch = dims.batch;
        let pad = self.left_padding(dims).unwrap_or(0);
        if let Some(l) = &self.actual_seq_lengths {
            ensure!(
                l.len() == 1 || l.len() == batch,
                "actualSeqLengths",
                "must have B = {batch} entries or 1, got {}",
                l.len()
            );
        }
        for b in 0..batch {
            let kv_s = dims.kv_s(b);
            if let Some(l) = &self.actual_seq_lengths {
                let x = if l.len() == 1 { l[0] } else { l[b] };
                // With left padding the window start KV_S − pad − len must not be negative:
                // the docs call it invalid; the kernel skips the batch and leaves its output
                // unwritten (`ComputeKVPaddingBeginOffset` in
                // `arch32/incre_flash_attention_split_Bbn2s2_Us2.h`), so it is an error here.
                ensure!(
                    x >= 0 && x as u64 + pad as u64 <= kv_s as u64,
                    "actualSeqLengths",
                    "entry {b} = {x} must be in [0, KV S - kvPaddingSize] = [0, {}]",
                    kv_s as i64 - pad as i64
                );
            }
            if let KvDims::Paged {
                num_blocks,
                max_blocks,
                block_size,
                ..
            } = &dims.kv
            {
                let (_, len) = self.window(dims, b);
                let used = len.div_ceil(*block_size);
                let bt = self.block_table.as_ref().expect("paged");
                ensure!(
                    used <= *max_blocks,
                    "blocktable",
                    "batch {b} needs {used} blocks, maxBlockNumPerSeq is {max_blocks}"
                );
                for i in 0..used {
                    let id = bt.data[b * max_blocks + i];
                    ensure!(
                        id >= 0 && (id as usize) < *num_blocks,
                        "blocktable",
                        "[{b}][{i}] = {id} must be a block id in [0, {num_blocks})"
                    );
                }
            }
        }
        // No rule that blocknum covers the *sum* of every batch's blocks: the docs state one
        // ("blocknum不能小于…每个batch的block数量之和"), but the tiling does not check it
        // (`incre_flash_attention_tiling.cpp` reads blocknum only as `totalBlockNum_`) and
        // serving shares blocks between sequences (forks, prefix caching), so their tables
        // together list more blocks than the cache holds. Every id a valid token uses is in
        // range (above), which is what the kernel's reads need.
        Ok(())
    }

    /// `Some(per channel)` with an antiquant.
    fn validate_antiquant(&self, dims: &IncreDims, s: &IncreShapes) -> Result<Option<bool>> {
        let Some(shape) = &s.antiquant_scale else {
            ensure!(
                s.antiquant_offset.is_none(),
                "antiquantOffset",
                "needs antiquantScale"
            );
            ensure!(!s.kv_int8, "antiquantScale", "required with int8 key/value");
            return Ok(None);
        };
        ensure!(s.kv_int8, "antiquantScale", "only with int8 key/value");
        let (nkv, d) = (dims.kv_heads, dims.head_dim);
        let per_channel = match (self.input_layout, shape.as_slice()) {
            (_, [2]) => false,
            (IfaLayout::Bnsd, &[2, a, 1, b]) if a == nkv && b == d => true,
            (IfaLayout::Bsnd, &[2, a, b]) if a == nkv && b == d => true,
            (IfaLayout::Bsh, &[2, h]) if nkv.checked_mul(d) == Some(h) => true,
            (layout, shape) => {
                return Err(AttnError::invalid(
                    "antiquantScale",
                    format!(
                        "shape must be (2) or per channel (2,{nkv},1,{d}) BNSD / (2,{nkv},{d}) BSND / (2,{}) BSH, got {shape:?} for {layout:?}",
                        nkv.saturating_mul(d)
                    ),
                ))
            }
        };
        if let Some(o) = &s.antiquant_offset {
            ensure!(
                o == shape,
                "antiquantOffset",
                "must have antiquantScale's shape {shape:?}, got {o:?}"
            );
        }
        Ok(Some(per_channel))
    }
}

/// `attenMask`'s S and `pseShift`'s shape, checked against the call: both cover the KV S
/// (paged: maxBlockNumPerSeq·blockSize), the mask one row per batch, the pse one per head.
fn validate_mask_pse(
    dims: &IncreDims,
    s: &IncreShapes,
) -> Result<(Option<usize>, Option<[usize; 4]>)> {
    let (batch, n) = (dims.batch, dims.num_heads);
    let need = dims.max_kv_s();
    let mask_cols = match &s.atten_mask {
        None => None,
        Some(shape) => {
            let (mb, cols) = match *shape.as_slice() {
                [b, s] | [b, 1, s] | [b, 1, 1, s] => (b, s),
                _ => {
                    return Err(AttnError::invalid(
                        "attenMask",
                        format!("shape must be (B,S), (B,1,S) or (B,1,1,S), got {shape:?}"),
                    ))
                }
            };
            ensure!(
                mb == batch,
                "attenMask",
                "batch dim must be B = {batch}, got {mb}"
            );
            ensure!(
                cols >= need,
                "attenMask",
                "S = {cols} must be >= KV S {need} (paged: maxBlockNumPerSeq·blockSize)"
            );
            checked::product("attenMask", "its element count", &[mb, cols])?;
            Some(cols)
        }
    };
    let pse_shape = match &s.pse_shift {
        None => None,
        Some(shape) => {
            let &[pb, pn, one, cols] = shape.as_slice() else {
                return Err(AttnError::invalid(
                    "pseShift",
                    format!("shape must be (B|1, N, 1, S), got {shape:?}"),
                ));
            };
            ensure!(
                (pb == 1 || pb == batch) && pn == n && one == 1,
                "pseShift",
                "shape must be (B|1, N, 1, S) with B = {batch}, N = {n}, got {shape:?}"
            );
            ensure!(
                cols >= need,
                "pseShift",
                "S = {cols} must be >= KV S {need} (paged: maxBlockNumPerSeq·blockSize)"
            );
            checked::product("pseShift", "its element count", &[pb, pn, cols])?;
            Some([pb, pn, one, cols])
        }
    };
    Ok((mask_cols, pse_shape))
}

/// The paged caches' layout and blocknum: `(blocknum, blockSize, H)` or (when `bnsd_ok`, i.e.
/// the query layout is BNSD) `(blocknum, KV_N, blockSize, D)`; key and value caches equal.
/// Shared by IFA and FIA.
pub(crate) fn paged_caches(
    key_cache: &[usize],
    value_cache: &[usize],
    nkv: usize,
    d: usize,
    bs: usize,
    bnsd_ok: bool,
) -> Result<(PagedLayout, usize)> {
    let (layout, nb) = match *key_cache {
        [nb, cbs, h] => {
            ensure!(
                cbs == bs && nkv.checked_mul(d) == Some(h),
                "key",
                "paged cache (blocknum, blockSize, H) must be ({nb}, {bs}, {}), got {key_cache:?}",
                nkv.saturating_mul(d)
            );
            ensure!(
                h <= 65_536,
                "key",
                "paged cache (blocknum, blockSize, H) needs numKvHeads·headDim <= 64k, got {h}"
            );
            (PagedLayout::Bsh, nb)
        }
        [nb, kn, cbs, cd] => {
            ensure!(
                bnsd_ok,
                "key",
                "the (blocknum, KV_N, blockSize, D) cache needs inputLayout BNSD"
            );
            ensure!(
                kn == nkv && cbs == bs && cd == d,
                "key",
                "paged cache (blocknum, KV_N, blockSize, D) must be ({nb}, {nkv}, {bs}, {d}), got {key_cache:?}"
            );
            (PagedLayout::Bnsd, nb)
        }
        _ => {
            return Err(AttnError::invalid(
                "key",
                format!(
                    "paged cache must be (blocknum, blockSize, H) or (blocknum, KV_N, blockSize, D), got {key_cache:?}"
                ),
            ))
        }
    };
    ensure!(
        value_cache == key_cache,
        "value",
        "paged cache shape must equal the key cache's {key_cache:?}, got {value_cache:?}"
    );
    Ok((layout, nb))
}

/// Checks a block table `(B, maxBlockNumPerSeq)` (IFA's `blocktable`, FIA's `blockTable`) and
/// returns maxBlockNumPerSeq.
pub(crate) fn block_table_width(bt: &BlockTable, batch: usize, bs: usize) -> Result<usize> {
    block_table_width_named(bt, batch, bs, "blocktable")
}

/// [`block_table_width`] with the parameter's name.
pub(crate) fn block_table_width_named(
    bt: &BlockTable,
    batch: usize,
    bs: usize,
    param: &'static str,
) -> Result<usize> {
    let &[tb, max_blocks] = bt.shape.as_slice() else {
        return Err(AttnError::invalid(
            param,
            format!("must be 2-D (B, maxBlockNumPerSeq), got {:?}", bt.shape),
        ));
    };
    ensure!(tb == batch, param, "dim 0 must be B = {batch}, got {tb}");
    let need = checked::product(param, "its entry count", &[tb, max_blocks])?;
    ensure!(
        bt.data.len() == need,
        param,
        "has {} entries, shape {:?} needs {need}",
        bt.data.len(),
        bt.shape
    );
    // The KV S of the paged form (maxBlockNumPerSeq·blockSize) is used unchecked once
    // validated: bound it here (a batch-0 table may have any width).
    checked::product(param, "maxBlockNumPerSeq·blockSize", &[max_blocks, bs])?;
    Ok(max_blocks)
}
