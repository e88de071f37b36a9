//! The fused inference attention op's parameters (named after
//! `aclnnFusedInferAttentionScoreV4`, FIA) and their validation.
//!
//! FIA is PFA (query S > 1) and IFA (query S = 1) in one op, plus a learnable sink and the
//! softmax LSE output. The spec reuses the prompt and incremental pieces: the layouts
//! ([`PfaLayout`]), the block table ([`BlockTable`]), the TND length and GQA
//! rules and the paged-cache shape checks.
//!
//! Supported V4 fields: `query`, `key`, `value` (one tensor each, or paged caches),
//! `pseShift`, `attenMask` (sparse modes 0–4), `actualSeqLengths`, `actualSeqLengthsKv`,
//! `antiquantScale`/`antiquantOffset` (antiquantMode 0), `blockTable`, `queryPaddingSize`,
//! `kvPaddingSize`, `keyAntiquantScale`/`keyAntiquantOffset`/`valueAntiquantScale`/
//! `valueAntiquantOffset` (modes 0 per channel/tensor and 1 per token), `learnableSink`, and
//! the attributes `numHeads`, `scaleValue`, `preTokens`, `nextTokens`, `inputLayout` (BSH, BSND,
//! BNSD, BNSD_BSND, TND), `numKeyValueHeads`, `sparseMode`, `innerPrecise`, `blockSize`,
//! `antiquantMode`, `softmaxLseFlag`, `keyAntiquantMode`, `valueAntiquantMode`.
//!
//! Not supported (`unsupported: …`): KV tensor lists, shared prefix, rope split (MLA), full
//! quantisation (int8 query, `deqScale1`/`quantScale1`/`deqScale2`, `dequantScaleQuery`,
//! `queryQuantMode`), int8 output (`quantScale2`/`quantOffset2`), antiquant modes 2–6, sparse
//! mode 9 (tree mask), and the layouts NTD, NTD_TND, BSH_BNSD, BSND_BNSD, *_NBSD. The checks are
//! Atlas A2/A3's; element dtypes are checked where they are known (the CLI, the simulation).

pub mod problem;
pub mod tensors;
pub use problem::*;
pub use tensors::*;

use crate::checked;
use crate::error::{ensure, AttnError, Result};
use crate::incre::{block_table_width_named, paged_caches, BlockTable};
use crate::prompt::{cum, per_batch, resolve_kv_heads, tnd_lengths, INT_MAX_TOKENS};

mod args;
mod mask;
mod quant;
mod sink;

pub use args::FiaHostValues;

pub use crate::release::CannRelease;
pub use quant::check_learnable_sink_values;
pub use sink::FiaSinkPath;

pub use crate::incre::PagedLayout;
pub use crate::prompt::{PfaLayout, PfaSparseMode};

/// Largest batch.
pub const FIA_MAX_BATCH: usize = 65_536;
/// Largest `numHeads`.
pub const FIA_MAX_HEADS: usize = 256;
/// Largest head dim.
pub const FIA_MAX_HEAD_DIM: usize = 512;
/// Largest `blockSize`.
pub const FIA_MAX_BLOCK_SIZE: usize = 1024;

/// A KV antiquant mode (`antiquantMode`, `keyAntiquantMode`, `valueAntiquantMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FiaAntiquantMode {
    /// 0: per channel (including per tensor).
    PerChannel,
    /// 1: per token.
    PerToken,
}

impl FiaAntiquantMode {
    /// The aclnn integer.
    pub fn as_attr(self) -> i64 {
        match self {
            Self::PerChannel => 0,
            Self::PerToken => 1,
        }
    }

    /// The mode of an aclnn integer: 0 and 1 are supported; 2–6 (per-tensor+head, paged
    /// scales, per-token-group…) are valid CANN modes this build does not implement.
    pub fn from_attr(param: &'static str, v: i64) -> Result<Self> {
        match v {
            0 => Ok(Self::PerChannel),
            1 => Ok(Self::PerToken),
            2..=6 => Err(AttnError::Unsupported(format!(
                "{param} {v} (only 0 per channel and 1 per token are implemented)"
            ))),
            _ => Err(AttnError::invalid(param, format!("must be 0-6, got {v}"))),
        }
    }
}

/// Which `attenMask` a call takes: its values travel as the carrier's tensor
/// ([`FiaInputs::atten_mask`]); the compressed mask's content is fixed by the sparse mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FiaMask {
    /// Null: no masking.
    #[default]
    None,
    /// A full mask (sparse modes 0 and 1), the carrier's tensor, non-zero = masked:
    /// `(Q_S,KV_S)`, `(1|B,Q_S,KV_S)`, `(1|B,1,Q_S,KV_S)`; decode also `(B,KV_S)`.
    Dense,
    /// CANN's compressed 2048×2048 causal mask (sparse modes 2, 3, 4).
    Compressed,
}

/// Everything of the fused inference op that is not query/key/value.
#[derive(Debug, Clone, PartialEq)]
pub struct FiaSpec {
    /// `numHeads`.
    pub num_heads: usize,
    /// `numKeyValueHeads` (0 = `numHeads`).
    pub num_key_value_heads: usize,
    /// `scaleValue`.
    pub scale_value: f64,
    /// `preTokens`.
    pub pre_tokens: i64,
    /// `nextTokens`.
    pub next_tokens: i64,
    /// `inputLayout`.
    pub input_layout: PfaLayout,
    /// `sparseMode` (0–4).
    pub sparse_mode: i64,
    /// `innerPrecise` (0–3; the host paths always zero invalid rows).
    pub inner_precise: i64,
    /// `blockSize` (paged only).
    pub block_size: usize,
    /// `antiquantMode` (of `antiquantScale`).
    pub antiquant_mode: i64,
    /// `softmaxLseFlag`: also return `softmaxLse`.
    pub softmax_lse_flag: bool,
    /// `keyAntiquantMode`.
    pub key_antiquant_mode: i64,
    /// `valueAntiquantMode`.
    pub value_antiquant_mode: i64,
    /// `actualSeqLengths` (per batch; cumulative in TND).
    pub actual_seq_lengths: Option<Vec<i64>>,
    /// `actualSeqLengthsKv` (per batch; cumulative in TND without a block table).
    pub actual_seq_lengths_kv: Option<Vec<i64>>,
    /// `attenMask`'s kind: dense for modes 0/1 (the carrier's tensor), compressed 2048×2048
    /// for modes 2–4.
    pub atten_mask: FiaMask,
    /// `blockTable` (page attention when present). Index metadata the host owns (the paged
    /// cache's, checked id by id here), not a tensor value of the call.
    pub block_table: Option<BlockTable>,
    /// `queryPaddingSize` (query left padding, query S > 1; negative = 0).
    pub query_padding_size: Option<i64>,
    /// `kvPaddingSize` (KV left padding; negative = 0).
    pub kv_padding_size: Option<i64>,
}

/// Key/value shapes: one tensor each, or paged caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FiaKvShapes {
    /// `key` / `value` in the input layout.
    Contiguous {
        /// `key`.
        key: Vec<usize>,
        /// `value`.
        value: Vec<usize>,
    },
    /// Caches `(blocknum, blockSize, H)` or `(blocknum, Nkv, blockSize, D)`.
    Paged {
        /// The key cache.
        key_cache: Vec<usize>,
        /// The value cache.
        value_cache: Vec<usize>,
    },
}

/// Shapes of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiaShapes {
    /// `query`.
    pub query: Vec<usize>,
    /// `key` / `value`.
    pub kv: FiaKvShapes,
    /// Whether key/value are int8 (antiquant required, blockSize a multiple of 32).
    pub kv_int8: bool,
    /// `learnableSink` `[N]`, when the call has one: one raw logit per query head, not scaled by
    /// `scaleValue`, only in the softmax denominator. It is a tensor input like the query (a
    /// model's trained parameter stays on its device); the dtype CANN reads it in depends on the
    /// path and the release, not on the query (module `sink` cites the sources):
    /// [`FiaSpec::learnable_sink_dtype`] says which, [`FiaSpec::check_learnable_sink_dtype`]
    /// refuses the others.
    pub learnable_sink: Option<Vec<usize>>,
    /// `attenMask`, with [`FiaMask::Dense`].
    pub atten_mask: Option<Vec<usize>>,
    /// `pseShift` `(B|1, N, ≥Q_S, ≥KV_S)`.
    pub pse_shift: Option<Vec<usize>>,
    /// `antiquantScale` (combined K/V: `(2)`, `(2,Nkv,1,D)`, `(2,Nkv,D)`, `(2,H)`).
    pub antiquant_scale: Option<Vec<usize>>,
    /// `antiquantOffset` (the scale's shape).
    pub antiquant_offset: Option<Vec<usize>>,
    /// `keyAntiquantScale` (wins over `antiquantScale`). Per channel: `(1)` (per tensor),
    /// `(1, Nkv, 1, D)`, `(1, Nkv, D)`, `(1, H)`, `(Nkv, D)`, `(Nkv, 1, D)`, `(H)`. Per token:
    /// `(B, S)` or `(1, B, S)` with `S ≥` KV S.
    pub key_antiquant_scale: Option<Vec<usize>>,
    /// `keyAntiquantOffset` (the scale's shape).
    pub key_antiquant_offset: Option<Vec<usize>>,
    /// `valueAntiquantScale`.
    pub value_antiquant_scale: Option<Vec<usize>>,
    /// `valueAntiquantOffset`.
    pub value_antiquant_offset: Option<Vec<usize>>,
}

impl FiaShapes {
    /// Query, key/value and the sink only (no mask, pse or antiquant).
    pub fn new(
        query: Vec<usize>,
        kv: FiaKvShapes,
        kv_int8: bool,
        learnable_sink: Option<Vec<usize>>,
    ) -> Self {
        Self {
            query,
            kv,
            kv_int8,
            learnable_sink,
            atten_mask: None,
            pse_shift: None,
            antiquant_scale: None,
            antiquant_offset: None,
            key_antiquant_scale: None,
            key_antiquant_offset: None,
            value_antiquant_scale: None,
            value_antiquant_offset: None,
        }
    }

    /// Whether an antiquant is given (int8 KV).
    pub fn quantised(&self) -> bool {
        self.antiquant_scale.is_some() || self.key_antiquant_scale.is_some()
    }
}

/// The paged form's dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiaPaged {
    /// Cache layout.
    pub layout: PagedLayout,
    /// blocknum.
    pub num_blocks: usize,
    /// maxBlockNumPerSeq.
    pub max_blocks: usize,
    /// blockSize.
    pub block_size: usize,
}

/// A validated call's dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiaDims {
    /// Layout.
    pub layout: PfaLayout,
    /// B (TND: the number of sequences).
    pub batch: usize,
    /// Query S (TND: T1).
    pub q_seq: usize,
    /// KV S (TND: T2; paged: maxBlockNumPerSeq·blockSize).
    pub kv_seq: usize,
    /// N.
    pub num_heads: usize,
    /// Nkv (resolved).
    pub kv_heads: usize,
    /// D of query and key.
    pub head_dim: usize,
    /// D of value and output.
    pub head_dim_v: usize,
    /// The paged form, when `blockTable` is given.
    pub paged: Option<FiaPaged>,
    /// A dense `attenMask`'s `(batch dim, rows, cols)` (decode `(B, KV_S)`: rows 1).
    pub mask: Option<(usize, usize, usize)>,
    /// `pseShift` `[B|1, N, rows, cols]`.
    pub pse_shape: Option<[usize; 4]>,
    /// With int8 KV: how the key's and the value's antiquant are indexed (each the separate
    /// `keyAntiquant*` / `valueAntiquant*`, else its row of the combined `antiquantScale`).
    pub antiquant_index: Option<[FiaDequantIndex; 2]>,
}

impl FiaDims {
    /// `attentionOut`'s shape: the query's with value's D (BNSD_BSND → BSND).
    pub fn out_shape(&self) -> Vec<usize> {
        let (b, s, n, dv) = (self.batch, self.q_seq, self.num_heads, self.head_dim_v);
        match self.layout {
            PfaLayout::Bsh => vec![b, s, n * dv],
            PfaLayout::Bsnd | PfaLayout::BnsdBsnd => vec![b, s, n, dv],
            PfaLayout::Bnsd => vec![b, n, s, dv],
            PfaLayout::Tnd => vec![s, n, dv],
        }
    }

    /// `softmaxLse`'s shape: `[B, N, Q_S, 1]`, TND `[T, N, 1]`.
    pub fn lse_shape(&self) -> Vec<usize> {
        match self.layout {
            PfaLayout::Tnd => vec![self.q_seq, self.num_heads, 1],
            _ => vec![self.batch, self.num_heads, self.q_seq, 1],
        }
    }

    /// Whether the KV is dequantised (int8 KV).
    pub fn quantised(&self) -> bool {
        self.antiquant_index.is_some()
    }

    /// Decode: query S = 1 outside TND (modes 2–4, preTokens and nextTokens have no effect).
    pub fn decode(&self) -> bool {
        self.layout != PfaLayout::Tnd && self.q_seq == 1
    }

    /// Per batch `(q_start, Sq_b, kv_start, Skv_b)`: the first query row / KV token (TND:
    /// token offsets; with left padding: the window start) and the actual lengths.
    pub fn sequences(&self, spec: &FiaSpec) -> Vec<(usize, usize, usize, usize)> {
        let tnd = self.layout == PfaLayout::Tnd;
        (0..self.batch)
            .map(|b| {
                let (q0, sq) = if tnd {
                    cum(spec.actual_seq_lengths.as_deref().unwrap_or(&[]), b)
                } else {
                    let sq = per_batch(spec.actual_seq_lengths.as_deref(), b, self.q_seq);
                    let q0 = spec
                        .applied_query_padding()
                        .map_or(0, |p| self.q_seq - p - sq);
                    (q0, sq)
                };
                let (k0, skv) = if tnd && self.paged.is_none() {
                    cum(spec.actual_seq_lengths_kv.as_deref().unwrap_or(&[]), b)
                } else {
                    let skv = per_batch(spec.actual_seq_lengths_kv.as_deref(), b, self.kv_seq);
                    let k0 = spec
                        .applied_kv_padding()
                        .map_or(0, |p| self.kv_seq - p - skv);
                    (k0, skv)
                };
                (q0, sq, k0, skv)
            })
            .collect()
    }
}

/// Parses `inputLayout`: the documented layouts this build leaves out are `unsupported`.
pub fn parse_fia_layout(s: &str) -> Result<PfaLayout> {
    if let Some(l) = PfaLayout::from_attr(s) {
        return Ok(l);
    }
    const LEFT_OUT: [&str; 7] = [
        "NTD",
        "NTD_TND",
        "BSH_BNSD",
        "BSND_BNSD",
        "BSH_NBSD",
        "BSND_NBSD",
        "BNSD_NBSD",
    ];
    if LEFT_OUT.contains(&s) {
        return Err(AttnError::Unsupported(format!(
            "inputLayout {s} (FIA here takes BSH, BSND, BNSD, BNSD_BSND and TND)"
        )));
    }
    Err(AttnError::invalid(
        "inputLayout",
        format!("must be BSH, BSND, BNSD, BNSD_BSND or TND, got \"{s}\""),
    ))
}

impl FiaSpec {
    /// torch_npu's defaults: `Nkv = N`, pre = next = 2147483647, sparse 0, innerPrecise 0, no
    /// optional inputs, no LSE.
    pub fn new(num_heads: usize, scale_value: f64, input_layout: PfaLayout) -> Self {
        Self {
            num_heads,
            num_key_value_heads: 0,
            scale_value,
            pre_tokens: INT_MAX_TOKENS,
            next_tokens: INT_MAX_TOKENS,
            input_layout,
            sparse_mode: 0,
            inner_precise: 0,
            block_size: 0,
            antiquant_mode: 0,
            softmax_lse_flag: false,
            key_antiquant_mode: 0,
            value_antiquant_mode: 0,
            actual_seq_lengths: None,
            actual_seq_lengths_kv: None,
            atten_mask: FiaMask::None,
            block_table: None,
            query_padding_size: None,
            kv_padding_size: None,
        }
    }

    /// The kernels' sparse mode (valid after [`Self::validate`]).
    pub fn mode(&self) -> PfaSparseMode {
        PfaSparseMode::from_attr(self.sparse_mode).unwrap_or(PfaSparseMode::DefaultMask)
    }

    /// The applied query left padding (negative as 0), after validation.
    pub fn applied_query_padding(&self) -> Option<usize> {
        self.query_padding_size.map(|p| p.max(0) as usize)
    }

    /// The applied KV left padding (negative as 0), after validation.
    pub fn applied_kv_padding(&self) -> Option<usize> {
        self.kv_padding_size.map(|p| p.max(0) as usize)
    }

    /// Checks a call and returns its dimensions.
    pub fn validate(&self, s: &FiaShapes) -> Result<FiaDims> {
        let layout = self.input_layout;
        let n = self.num_heads;
        ensure!(
            (1..=FIA_MAX_HEADS).contains(&n),
            "numHeads",
            "must be in 1..={FIA_MAX_HEADS}, got {n}"
        );
        let nkv = resolve_kv_heads(n, self.num_key_value_heads)?;
        let tnd = layout == PfaLayout::Tnd;
        let rank = if matches!(layout, PfaLayout::Bsh | PfaLayout::Tnd) {
            3
        } else {
            4
        };
        ensure!(
            s.query.len() == rank,
            "query",
            "must be rank {rank} for inputLayout {}, got shape {:?}",
            layout.as_attr(),
            s.query
        );
        // (batch, seq, heads, dim) of a tensor in the layout.
        let split = |t: &[usize], heads: usize, name: &'static str| -> Result<[usize; 4]> {
            Ok(match layout {
                PfaLayout::Bsh => {
                    ensure!(
                        t[2] > 0 && t[2].is_multiple_of(heads),
                        name,
                        "H = {} must be a positive multiple of its head count {heads}",
                        t[2]
                    );
                    [t[0], t[1], heads, t[2] / heads]
                }
                PfaLayout::Bsnd => [t[0], t[1], t[2], t[3]],
                PfaLayout::Bnsd | PfaLayout::BnsdBsnd => [t[0], t[2], t[1], t[3]],
                PfaLayout::Tnd => [1, t[0], t[1], t[2]],
            })
        };
        let [qb, qs, qn, d] = split(&s.query, n, "query")?;
        ensure!(
            qn == n,
            "numHeads",
            "must equal the query's N = {qn}, got {n}"
        );
        ensure!(
            (1..=FIA_MAX_HEAD_DIM).contains(&d),
            "query",
            "D must be in 1..={FIA_MAX_HEAD_DIM}, got {d}"
        );
        ensure!(
            self.scale_value.is_finite(),
            "scaleValue",
            "must be finite, got {}",
            self.scale_value
        );
        checked::finite_f32("scaleValue", self.scale_value)?;
        ensure!(
            (0..=3).contains(&self.inner_precise),
            "innerPrecise",
            "must be 0, 1, 2 or 3, got {}",
            self.inner_precise
        );
        match self.sparse_mode {
            0..=4 => {}
            9 => {
                return Err(AttnError::Unsupported(
                    "sparseMode 9 (tree mask for speculative decoding)".into(),
                ))
            }
            m => {
                return Err(AttnError::invalid(
                    "sparseMode",
                    format!("FIA supports 0-4 and 9 (5-8 are not supported by CANN), got {m}"),
                ))
            }
        }
        let (paged, ks, dv) = match &s.kv {
            FiaKvShapes::Contiguous { key, value } => {
                ensure!(
                    self.block_table.is_none(),
                    "blockTable",
                    "given, but key/value are not paged caches"
                );
                for (name, t) in [("key", key), ("value", value)] {
                    ensure!(
                        t.len() == rank,
                        name,
                        "must be rank {rank} for inputLayout {}, got shape {t:?}",
                        layout.as_attr()
                    );
                }
                let [kb, ks, kn, dk] = split(key, nkv, "key")?;
                let [vb, vs, vn, dv] = split(value, nkv, "value")?;
                ensure!(
                    kn == nkv,
                    "numKeyValueHeads",
                    "must equal the key's N = {kn} (0 means numHeads = {n}), got {}",
                    self.num_key_value_heads
                );
                ensure!(dk == d, "key", "D must equal the query's D {d}, got {dk}");
                ensure!(
                    tnd || kb == qb,
                    "key",
                    "B must equal the query's B {qb}, got {kb}"
                );
                ensure!(
                    [vb, vs, vn] == [kb, ks, kn] && (tnd || dv == d),
                    "value",
                    "shape must equal the key's {key:?} (TND: except D), got {value:?}"
                );
                (None, ks, dv)
            }
            FiaKvShapes::Paged {
                key_cache,
                value_cache,
            } => {
                let Some(bt) = &self.block_table else {
                    return Err(AttnError::invalid(
                        "blockTable",
                        "required when key/value are paged caches",
                    ));
                };
                let bs = self.block_size;
                let (align, max) = if s.kv_int8 {
                    (32, FIA_MAX_BLOCK_SIZE)
                } else if d == 64 || d == 128 {
                    (16, FIA_MAX_BLOCK_SIZE)
                } else if qs > 1 || tnd {
                    (128, FIA_MAX_BLOCK_SIZE)
                } else {
                    (16, 512)
                };
                ensure!(
                    (1..=max).contains(&bs) && bs.is_multiple_of(align),
                    "blockSize",
                    "page attention needs 0 < blockSize <= {max}, a multiple of {align} here, got {bs}"
                );
                let (pl, nb) = paged_caches(
                    key_cache,
                    value_cache,
                    nkv,
                    d,
                    bs,
                    layout == PfaLayout::Bnsd,
                )?;
                let batch = if tnd {
                    self.actual_seq_lengths.as_ref().map_or(0, Vec::len)
                } else {
                    qb
                };
                let max_blocks = block_table_width_named(bt, batch, bs, "blockTable")?;
                ensure!(
                    self.actual_seq_lengths_kv.is_some(),
                    "actualSeqLengthsKv",
                    "required with page attention (blockTable)"
                );
                let paged = FiaPaged {
                    layout: pl,
                    num_blocks: nb,
                    max_blocks,
                    block_size: bs,
                };
                (Some(paged), max_blocks * bs, d)
            }
        };
        let batch = if tnd {
            self.validate_tnd(s, qs, ks, n, nkv, d, dv, paged.is_some())?
        } else {
            qb
        };
        ensure!(
            batch <= FIA_MAX_BATCH,
            "query",
            "B must be <= {FIA_MAX_BATCH}, got {batch}"
        );
        let mut dims = FiaDims {
            layout,
            batch,
            q_seq: qs,
            kv_seq: ks,
            num_heads: n,
            kv_heads: nkv,
            head_dim: d,
            head_dim_v: dv,
            paged,
            mask: None,
            pse_shape: None,
            antiquant_index: None,
        };
        self.validate_lengths(&dims)?;
        dims.mask = self.validate_mask(&dims, s.atten_mask.as_deref())?;
        dims.pse_shape = mask::validate_pse(&dims, s.pse_shift.as_deref())?;
        dims.antiquant_index = self.validate_antiquant(&dims, s)?;
        self.validate_sink(&dims, s)?;
        Ok(dims)
    }

    #[allow(clippy::too_many_arguments)]
    fn validate_tnd(
        &self,
        s: &FiaShapes,
        t1: usize,
        t2: usize,
        n: usize,
        nkv: usize,
        d: usize,
        dv: usize,
        paged: bool,
    ) -> Result<usize> {
        let dims_ok = (d == dv && (d == 64 || d == 128))
            || (d == 192 && dv == 128)
            || (nkv != n && self.inner_precise == 0 && d == dv && d <= 256);
        ensure!(
            dims_ok,
            "query",
            "TND: D of query/key and value must be 64/64, 128/128, 192/128, or equal and <= 256 with GQA and innerPrecise 0; got {d}/{dv}"
        );
        if nkv != n {
            ensure!(
                self.inner_precise == 0,
                "innerPrecise",
                "TND with GQA supports only 0, got {}",
                self.inner_precise
            );
        }
        let masked = self.atten_mask != FiaMask::None;
        ensure!(
            (self.sparse_mode == 0 && !masked) || ((self.sparse_mode == 3 || self.sparse_mode == 4) && masked),
            "sparseMode",
            "TND takes sparseMode 0 without attenMask or 3/4 with the compressed mask, got {} ({} mask)",
            self.sparse_mode,
            if masked { "with" } else { "without" }
        );
        ensure!(s.pse_shift.is_none(), "pseShift", "not supported with TND");
        ensure!(
            self.query_padding_size.is_none() && self.kv_padding_size.is_none(),
            "queryPaddingSize",
            "left padding (queryPaddingSize / kvPaddingSize) is not supported with TND"
        );
        ensure!(
            !s.quantised(),
            "antiquantScale",
            "antiquant is not supported with TND here (CANN: per channel with 5-D caches only)"
        );
        let q = tnd_lengths("actualSeqLengths", self.actual_seq_lengths.as_deref(), t1)?;
        let kv = if paged {
            let l = self.actual_seq_lengths_kv.as_deref().unwrap_or(&[]);
            ensure!(
                l.len() == q.len(),
                "actualSeqLengthsKv",
                "TND with a block table: one per-batch length per sequence ({}), got {}",
                q.len(),
                l.len()
            );
            l.iter().map(|&x| x.max(0) as usize).collect()
        } else {
            tnd_lengths(
                "actualSeqLengthsKv",
                self.actual_seq_lengths_kv.as_deref(),
                t2,
            )?
        };
        ensure!(
            q.len() == kv.len(),
            "actualSeqLengthsKv",
            "TND: must have one entry per sequence like actualSeqLengths ({}), got {}",
            q.len(),
            kv.len()
        );
        Ok(q.len())
    }

    fn validate_lengths(&self, dims: &FiaDims) -> Result<()> {
        let (batch, tnd) = (dims.batch, dims.layout == PfaLayout::Tnd);
        let qpad = self.query_padding_size.map(|p| p.max(0) as usize);
        let kvpad = self.kv_padding_size.map(|p| p.max(0) as usize);
        if let Some(p) = self.query_padding_size {
            ensure!(
                dims.q_seq > 1,
                "queryPaddingSize",
                "only with query S > 1 (CANN ignores it otherwise; refused rather than ignored)"
            );
            ensure!(
                self.actual_seq_lengths.is_some(),
                "queryPaddingSize",
                "needs actualSeqLengths (CANN treats it as right padding otherwise; refused rather than ignored), got {p}"
            );
        }
        if let Some(p) = self.kv_padding_size {
            ensure!(
                self.actual_seq_lengths_kv.is_some(),
                "kvPaddingSize",
                "needs actualSeqLengthsKv (CANN treats it as right padding otherwise; refused rather than ignored), got {p}"
            );
        }
        if dims.paged.is_some() {
            ensure!(
                qpad.is_none() && kvpad.is_none(),
                if qpad.is_some() {
                    "queryPaddingSize"
                } else {
                    "kvPaddingSize"
                },
                "left padding is not supported with page attention (blockTable)"
            );
        }
        if !tnd {
            for (name, lens, full, pad) in [
                (
                    "actualSeqLengths",
                    &self.actual_seq_lengths,
                    dims.q_seq,
                    qpad,
                ),
                (
                    "actualSeqLengthsKv",
                    &self.actual_seq_lengths_kv,
                    dims.kv_seq,
                    kvpad,
                ),
            ] {
                let Some(l) = lens else { continue };
                ensure!(
                    l.len() == 1 || l.len() >= batch,
                    name,
                    "must have 1 or at least B = {batch} entries, got {}",
                    l.len()
                );
                let pad = pad.unwrap_or(0) as u64;
                let used = if l.len() == 1 { &l[..] } else { &l[..batch] };
                if let Some((b, x)) = used
                    .iter()
                    .enumerate()
                    .find(|(_, &x)| x < 0 || x as u64 + pad > full as u64)
                {
                    return Err(AttnError::invalid(
                        name,
                        format!(
                            "entry {b} = {x} must be in [0, S - padding] = [0, {}]",
                            full as i64 - pad as i64
                        ),
                    ));
                }
            }
        }
        if let (Some(p), Some(bt)) = (&dims.paged, &self.block_table) {
            for (b, &(_, _, _, skv)) in dims.sequences(self).iter().enumerate() {
                if tnd {
                    ensure!(
                        skv <= dims.kv_seq,
                        "actualSeqLengthsKv",
                        "entry {b} = {skv} exceeds maxBlockNumPerSeq·blockSize = {}",
                        dims.kv_seq
                    );
                }
                for i in 0..skv.div_ceil(p.block_size) {
                    let id = bt.data[b * p.max_blocks + i];
                    ensure!(
                        id >= 0 && (id as usize) < p.num_blocks,
                        "blockTable",
                        "[{b}][{i}] = {id} must be a block id in [0, {})",
                        p.num_blocks
                    );
                }
            }
        }
        Ok(())
    }
}
