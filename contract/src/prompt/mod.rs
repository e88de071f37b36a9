//! The prompt op's parameters (named after `aclnnPromptFlashAttention` and
//! `aclnnPromptFlashAttentionV3`) and their validation.
//!
//! Every rule of `kernels/src/reference/VALIDATION.md` (PFA section) that a host-side caller can
//! break is checked here before any kernel runs; each failure names the aclnn parameter. Element
//! dtype rules (f16/bf16/int8, mask BOOL/INT8/UINT8, 0/1 values) are checked where dtypes are
//! known: in the CLI. Ascend 310P limits are not applied (Atlas A2/A3 rules only).

pub mod problem;
pub mod tensors;
pub use problem::*;
pub use tensors::*;

use std::sync::Arc;

use crate::checked;
use crate::error::{ensure, AttnError, Result};

/// Largest batch (A2/A3).
pub const PFA_MAX_BATCH: usize = 65_536;
/// Largest batch when D is not 16-aligned (32 for int8).
pub const PFA_MAX_BATCH_UNALIGNED: usize = 128;
/// Largest `numHeads`.
pub const PFA_MAX_HEADS: usize = 256;
/// Largest head dim.
pub const PFA_MAX_HEAD_DIM: usize = 512;
/// Largest sequence length.
pub const PFA_MAX_SEQ: usize = 20_971_520;
/// Largest `numHeads / numKeyValueHeads`.
pub const MAX_GQA_RATIO: usize = 64;
/// Largest T of the TND layout.
pub const PFA_TND_MAX_T: usize = 65_536;
/// Side of the compressed mask of sparse modes 2, 3, 4.
pub const PFA_COMPRESSED_MASK: [usize; 2] = [2048, 2048];
/// `preTokens` default.
pub const INT_MAX_TOKENS: i64 = 2_147_483_647;

/// The prompt op's `attenMask` kind. A dense mask's values travel as a tensor
/// ([`PromptInputs::atten_mask`], on the device for a device backend), never in the spec.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PromptMaskKind {
    /// Null: no masking; `sparseMode`, `preTokens`, `nextTokens` are ignored (spec §1/§5).
    #[default]
    None,
    /// A full mask (sparse modes 0 and 1), the carrier's `atten_mask` tensor: non-zero =
    /// masked, shape `(Sq, Skv)`, `(1|B, Sq, Skv)` or `(1|B, 1, Sq, Skv)`; batch b reads its
    /// top-left `actual` corner.
    Dense,
    /// CANN's compressed 2048×2048 causal mask (sparse modes 2, 3, 4; content fixed by the
    /// mode, so no tensor of the caller's: the device path supplies it).
    Compressed,
}

/// `quantScale2` / `quantOffset2`: int8 `attentionOut` (host paths only: the CLI).
#[derive(Debug, Clone, PartialEq)]
pub struct PostQuantSpec {
    /// `quantScale2`: 1 value (per tensor) or `N·Dv` (per channel).
    pub scale: Arc<[f32]>,
    /// `quantOffset2`: same length as `scale`; absent means 0.
    pub offset: Option<Arc<[f32]>>,
}

/// Everything of the prompt op that is not query/key/value.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSpec {
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
    /// `sparseMode` (0–4; V1 is 0).
    pub sparse_mode: i64,
    /// `innerPrecise` (0–3; the host paths always zero invalid rows).
    pub inner_precise: i64,
    /// `actualSeqLengths` (per batch; cumulative in TND).
    pub actual_seq_lengths: Option<Vec<i64>>,
    /// `actualSeqLengthsKv` (per batch; cumulative in TND).
    pub actual_seq_lengths_kv: Option<Vec<i64>>,
    /// `attenMask`'s kind; a dense mask's values are [`PromptInputs::atten_mask`] (and
    /// `pseShift` is [`PromptInputs::pse_shift`]).
    pub atten_mask: PromptMaskKind,
    /// `quantScale2` / `quantOffset2` (int8 output).
    pub post_quant: Option<PostQuantSpec>,
}

/// Shapes of the call's tensors ([`PromptInputs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptShapes {
    /// `query`.
    pub query: Vec<usize>,
    /// `key`.
    pub key: Vec<usize>,
    /// `value`.
    pub value: Vec<usize>,
    /// `attenMask` (a dense mask), when given.
    pub atten_mask: Option<Vec<usize>>,
    /// `pseShift`, when given.
    pub pse_shift: Option<Vec<usize>>,
}

impl PromptShapes {
    /// The shapes of query, key and value alone (no mask, no pse).
    pub fn qkv(query: Vec<usize>, key: Vec<usize>, value: Vec<usize>) -> Self {
        Self {
            query,
            key,
            value,
            atten_mask: None,
            pse_shift: None,
        }
    }
}

/// A validated call's dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptDims {
    /// Layout.
    pub layout: PfaLayout,
    /// B (TND: the number of sequences).
    pub batch: usize,
    /// Query S (TND: T1).
    pub q_seq: usize,
    /// KV S (TND: T2).
    pub kv_seq: usize,
    /// N.
    pub num_heads: usize,
    /// Nkv (resolved, never 0).
    pub kv_heads: usize,
    /// D of query and key.
    pub head_dim: usize,
    /// D of value and output.
    pub head_dim_v: usize,
}

impl PromptDims {
    /// `attentionOut`'s shape: the query's, except BNSD_BSND → BSND.
    pub fn out_shape(&self) -> Vec<usize> {
        let (b, s, n, dv) = (self.batch, self.q_seq, self.num_heads, self.head_dim_v);
        match self.layout {
            PfaLayout::Bsh => vec![b, s, n * dv],
            PfaLayout::Bsnd | PfaLayout::BnsdBsnd => vec![b, s, n, dv],
            PfaLayout::Bnsd => vec![b, n, s, dv],
            PfaLayout::Tnd => vec![s, n, dv],
        }
    }

    /// Per-batch `(query offset, Sq_b, kv offset, Skv_b)` (offsets are token rows; TND only).
    pub fn sequences(&self, spec: &PromptSpec) -> Vec<(usize, usize, usize, usize)> {
        let tnd = self.layout == PfaLayout::Tnd;
        (0..self.batch)
            .map(|b| {
                if tnd {
                    let (qo, sq) = cum(spec.actual_seq_lengths.as_deref().unwrap_or(&[]), b);
                    let (ko, skv) = cum(spec.actual_seq_lengths_kv.as_deref().unwrap_or(&[]), b);
                    (qo, sq, ko, skv)
                } else {
                    let sq = per_batch(spec.actual_seq_lengths.as_deref(), b, self.q_seq);
                    let skv = per_batch(spec.actual_seq_lengths_kv.as_deref(), b, self.kv_seq);
                    (0, sq, 0, skv)
                }
            })
            .collect()
    }
}

/// The `attenMask` / `sparseMode` pairing of PFA: no mask only with mode 0, the compressed
/// 2048×2048 mask with modes 2–4, a full mask with 0 or 1. `Ok(false)`: no mask, nothing more
/// to check.
pub(crate) fn mask_kind_fits_mode(mask: PromptMaskKind, mode: i64) -> Result<bool> {
    match mask {
        PromptMaskKind::None => {
            ensure!(
                mode == 0,
                "attenMask",
                "required with sparseMode {mode} (full mask for 1, compressed 2048x2048 for 2-4)"
            );
            Ok(false)
        }
        PromptMaskKind::Compressed => {
            ensure!(
                (2..=4).contains(&mode),
                "attenMask",
                "the compressed mask goes with sparseMode 2, 3 or 4, not {mode}"
            );
            Ok(true)
        }
        PromptMaskKind::Dense => {
            ensure!(
                mode <= 1,
                "attenMask",
                "sparseMode {mode} takes CANN's compressed 2048x2048 mask, not a full one"
            );
            Ok(true)
        }
    }
}

/// Batch `b`'s `(start, length)` in cumulative TND lengths (negative values as 0).
pub(crate) fn cum(lens: &[i64], b: usize) -> (usize, usize) {
    let end = lens[b].max(0) as usize;
    let start = if b == 0 {
        0
    } else {
        lens[b - 1].max(0) as usize
    };
    (start, end.saturating_sub(start))
}

/// Batch `b`'s actual length (one value for every batch, or one per batch), within `full`.
pub(crate) fn per_batch(lens: Option<&[i64]>, b: usize, full: usize) -> usize {
    match lens {
        None => full,
        Some(l) => (if l.len() == 1 { l[0] } else { l[b] }).clamp(0, full as i64) as usize,
    }
}

/// Parses `inputLayout`.
pub fn parse_pfa_layout(s: &str) -> Result<PfaLayout> {
    PfaLayout::from_attr(s).ok_or_else(|| {
        AttnError::invalid(
            "inputLayout",
            format!("must be BSH, BSND, BNSD, BNSD_BSND or TND, got \"{s}\""),
        )
    })
}

/// Checks `quantScale2` / `quantOffset2` against `channels` (= N·D of the output).
pub(crate) fn validate_post_quant(q: &PostQuantSpec, channels: usize) -> Result<()> {
    let n = q.scale.len();
    ensure!(
        n == 1 || n == channels,
        "quantScale2",
        "must hold 1 value (per tensor) or N·D = {channels} (per channel), got {n}"
    );
    ensure!(
        q.scale.iter().all(|x| x.is_finite()),
        "quantScale2",
        "values must be finite"
    );
    if let Some(o) = &q.offset {
        ensure!(
            o.len() == n,
            "quantOffset2",
            "must have the shape of quantScale2 ({n} values), got {}",
            o.len()
        );
    }
    Ok(())
}

impl PromptSpec {
    /// CANN's defaults: BSH-agnostic, `Nkv = N`, pre = 2147483647, next = 0, sparse 0, no
    /// optional inputs.
    pub fn new(num_heads: usize, scale_value: f64, input_layout: PfaLayout) -> Self {
        Self {
            num_heads,
            num_key_value_heads: 0,
            scale_value,
            pre_tokens: INT_MAX_TOKENS,
            next_tokens: 0,
            input_layout,
            sparse_mode: 0,
            inner_precise: 1,
            actual_seq_lengths: None,
            actual_seq_lengths_kv: None,
            atten_mask: PromptMaskKind::None,
            post_quant: None,
        }
    }

    /// The kernels' sparse mode (valid after [`PromptSpec::validate`]).
    pub fn mode(&self) -> PfaSparseMode {
        PfaSparseMode::from_attr(self.sparse_mode).unwrap_or(PfaSparseMode::DefaultMask)
    }

    /// Checks a call and returns its dimensions.
    pub fn validate(&self, s: &PromptShapes) -> Result<PromptDims> {
        let layout = self.input_layout;
        let n = self.num_heads;
        ensure!(
            (1..=PFA_MAX_HEADS).contains(&n),
            "numHeads",
            "must be in 1..={PFA_MAX_HEADS}, got {n}"
        );
        let nkv = resolve_kv_heads(n, self.num_key_value_heads)?;
        let rank = match layout {
            PfaLayout::Bsh | PfaLayout::Tnd => 3,
            _ => 4,
        };
        for (name, shape) in [("query", &s.query), ("key", &s.key), ("value", &s.value)] {
            ensure!(
                shape.len() == rank,
                name,
                "must be rank {rank} for inputLayout {layout:?}, got shape {shape:?}"
            );
        }
        let (q, k, v) = (&s.query, &s.key, &s.value);
        // (batch, seq, heads, dim) of each tensor.
        let split = |t: &[usize], heads: usize, name: &'static str| -> Result<[usize; 4]> {
            Ok(match layout {
                PfaLayout::Bsh => {
                    ensure!(
                        t[2].is_multiple_of(heads) && t[2] > 0,
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
        let [qb, qs, qn, d] = split(q, n, "query")?;
        ensure!(
            qn == n,
            "numHeads",
            "must equal the query's N = {qn}, got {n}"
        );
        let [kb, ks, kn, dk] = split(k, nkv, "key")?;
        let [vb, vs, vn, dv] = split(v, nkv, "value")?;
        ensure!(
            kn == nkv,
            "numKeyValueHeads",
            "must equal the key's N = {kn} (0 means numHeads = {n}), got {}",
            self.num_key_value_heads
        );
        ensure!(
            (1..=PFA_MAX_HEAD_DIM).contains(&d),
            "query",
            "D must be in 1..={PFA_MAX_HEAD_DIM}, got {d}"
        );
        ensure!(dk == d, "key", "D must equal the query's D {d}, got {dk}");
        ensure!(
            kb == qb || layout == PfaLayout::Tnd,
            "key",
            "B must equal the query's B {qb}, got {kb}"
        );
        ensure!(
            [vb, vs, vn] == [kb, ks, kn] && (dv == dk || layout == PfaLayout::Tnd),
            "value",
            "shape must equal the key's {k:?}, got {v:?}"
        );
        ensure!(
            qs <= PFA_MAX_SEQ && ks <= PFA_MAX_SEQ,
            "query",
            "S must be <= {PFA_MAX_SEQ}"
        );
        if matches!(layout, PfaLayout::Bsh | PfaLayout::Bsnd) {
            let nd = checked::product("query", "N·D", &[n, d])?;
            ensure!(
                nd < 65_535,
                "query",
                "N·D must be < 65535 for BSH/BSND, got {nd}"
            );
        }
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
        ensure!(
            (0..=4).contains(&self.sparse_mode),
            "sparseMode",
            "prompt attention supports 0-4 (5-8 are not supported), got {}",
            self.sparse_mode
        );

        let batch = if layout == PfaLayout::Tnd {
            self.validate_tnd(qs, ks, n, nkv, d, dv, s.pse_shift.is_some())?
        } else {
            qb
        };
        let max_b = if d % 16 == 0 {
            PFA_MAX_BATCH
        } else {
            PFA_MAX_BATCH_UNALIGNED
        };
        ensure!(
            batch <= max_b,
            "query",
            "B must be <= {max_b} (D = {d}), got {batch}"
        );
        let dims = PromptDims {
            layout,
            batch,
            q_seq: qs,
            kv_seq: ks,
            num_heads: n,
            kv_heads: nkv,
            head_dim: d,
            head_dim_v: dv,
        };
        if layout != PfaLayout::Tnd {
            for (name, lens, full) in [
                ("actualSeqLengths", &self.actual_seq_lengths, qs),
                ("actualSeqLengthsKv", &self.actual_seq_lengths_kv, ks),
            ] {
                if let Some(l) = lens {
                    ensure!(
                        l.len() == 1 || l.len() >= batch,
                        name,
                        "must have 1 or at least B = {batch} entries, got {}",
                        l.len()
                    );
                    let used = if l.len() == 1 { &l[..] } else { &l[..batch] };
                    if let Some((b, x)) = used
                        .iter()
                        .enumerate()
                        .find(|(_, &x)| x < 0 || x > full as i64)
                    {
                        return Err(AttnError::invalid(
                            name,
                            format!("entry {b} = {x} must be in [0, S = {full}]"),
                        ));
                    }
                }
            }
        }
        self.validate_mask(&dims, s.atten_mask.as_deref())?;
        validate_pse(&dims, s.pse_shift.as_deref())?;
        if let Some(pq) = &self.post_quant {
            validate_post_quant(pq, checked::product("query", "N·Dv", &[n, dv])?)?;
            self.validate_int8_rows(&dims)?;
        }
        Ok(dims)
    }

    #[allow(clippy::too_many_arguments)]
    fn validate_tnd(
        &self,
        t1: usize,
        t2: usize,
        n: usize,
        nkv: usize,
        d: usize,
        dv: usize,
        has_pse: bool,
    ) -> Result<usize> {
        ensure!(
            t1 <= PFA_TND_MAX_T && t2 <= PFA_TND_MAX_T,
            "query",
            "TND: T must be <= {PFA_TND_MAX_T}"
        );
        ensure!(
            [8, 16, 32, 64, 128].contains(&n),
            "numHeads",
            "TND: must be 8, 16, 32, 64 or 128, got {n}"
        );
        ensure!(
            nkv == n,
            "numKeyValueHeads",
            "TND: query, key and value must have the same N ({n}), got {nkv}"
        );
        ensure!(
            d == 192,
            "query",
            "TND: D of query and key must be 192, got {d}"
        );
        ensure!(
            dv == 128 || dv == 192,
            "value",
            "TND: D of value must be 128 or 192, got {dv}"
        );
        let masked = self.atten_mask != PromptMaskKind::None;
        ensure!(
            (self.sparse_mode == 0 && !masked) || (self.sparse_mode == 3 && masked),
            "sparseMode",
            "TND takes sparseMode 0 without attenMask or 3 with it, got {} ({} mask)",
            self.sparse_mode,
            if masked { "with" } else { "without" }
        );
        ensure!(!has_pse, "pseShift", "not supported with TND");
        ensure!(
            self.post_quant.is_none(),
            "quantScale2",
            "int8 output is not supported with TND"
        );
        let q = tnd_lengths("actualSeqLengths", self.actual_seq_lengths.as_deref(), t1)?;
        let kv = tnd_lengths(
            "actualSeqLengthsKv",
            self.actual_seq_lengths_kv.as_deref(),
            t2,
        )?;
        ensure!(
            q.len() == kv.len(),
            "actualSeqLengthsKv",
            "TND: must have one entry per sequence like actualSeqLengths ({}), got {}",
            q.len(),
            kv.len()
        );
        if self.sparse_mode == 3 {
            for (b, (sq, skv)) in q.iter().zip(&kv).enumerate() {
                ensure!(
                    sq <= skv,
                    "actualSeqLengths",
                    "TND sparseMode 3 needs Sq <= Skv per sequence; sequence {b} has {sq} > {skv}"
                );
            }
        }
        Ok(q.len())
    }

    fn validate_mask(&self, dims: &PromptDims, tensor: Option<&[usize]>) -> Result<()> {
        let mode = self.sparse_mode;
        match (self.atten_mask, tensor) {
            (PromptMaskKind::Dense, None) => {
                return Err(AttnError::invalid(
                    "attenMask",
                    "the spec says a dense mask but no mask tensor was given",
                ))
            }
            (PromptMaskKind::None | PromptMaskKind::Compressed, Some(shape)) => {
                return Err(AttnError::invalid(
                    "attenMask",
                    format!(
                        "a mask tensor {shape:?} was given but the spec's mask is {:?} (a mask tensor is a dense mask: sparseMode 0 or 1)",
                        self.atten_mask
                    ),
                ))
            }
            _ => {}
        }
        if !mask_kind_fits_mode(self.atten_mask, mode)? {
            return Ok(());
        }
        if let Some(shape) = tensor {
            let (mb, rows, cols) = match *shape {
                [r, c] => (1, r, c),
                [b, r, c] => (b, r, c),
                [b, 1, r, c] => (b, r, c),
                _ => {
                    return Err(AttnError::invalid(
                        "attenMask",
                        format!(
                            "shape must be (Sq,Skv), (1|B,Sq,Skv) or (1|B,1,Sq,Skv), got {shape:?}"
                        ),
                    ))
                }
            };
            ensure!(
                mb == 1 || mb == dims.batch,
                "attenMask",
                "batch dim must be 1 or B = {}, got {mb}",
                dims.batch
            );
            // The mask covers the query's and key's S, not only the actual lengths:
            // `CheckAttenMaskShape` in
            // `attention/prompt_flash_attention/op_host/prompt_flash_attention_tiling.cpp`
            // compares it with the shapes' S (TND: the longest sequences).
            let (need_q, need_kv) = if dims.layout == PfaLayout::Tnd {
                let seqs = dims.sequences(self);
                (
                    seqs.iter().map(|s| s.1).max().unwrap_or(0),
                    seqs.iter().map(|s| s.3).max().unwrap_or(0),
                )
            } else {
                (dims.q_seq, dims.kv_seq)
            };
            ensure!(
                rows >= need_q && cols >= need_kv,
                "attenMask",
                "[Sq, Skv] = [{rows}, {cols}] must cover the query's and key's S [{need_q}, {need_kv}]"
            );
            checked::product("attenMask", "its element count", &[mb, rows, cols])?;
        }
        // i128: preTokens / nextTokens = i64::MIN must not wrap when negated.
        let (pre, next) = (i128::from(self.pre_tokens), i128::from(self.next_tokens));
        if mode == 0 {
            let seqs = dims.sequences(self);
            let max_q = seqs.iter().map(|s| s.1).max().unwrap_or(0) as i128;
            let max_kv = seqs.iter().map(|s| s.3).max().unwrap_or(0) as i128;
            if next < 0 {
                ensure!(
                    pre >= -next && -next < max_kv.max(1),
                    "nextTokens",
                    "a negative nextTokens needs preTokens >= |nextTokens| and |nextTokens| < Skv ({max_kv}), got pre {pre} next {next}"
                );
            }
            if pre < 0 {
                ensure!(
                    next >= -pre && -pre < max_q.max(1),
                    "preTokens",
                    "a negative preTokens needs nextTokens >= |preTokens| and |preTokens| < Sq ({max_q}), got pre {pre} next {next}"
                );
            }
        }
        if mode == 4 {
            ensure!(
                pre + next >= 0,
                "preTokens",
                "band (sparseMode 4) needs preTokens and nextTokens to overlap (pre + next >= 0), got pre {pre} next {next}"
            );
        }
        Ok(())
    }

    /// The int8-output rules of the V3 约束说明.
    fn validate_int8_rows(&self, dims: &PromptDims) -> Result<()> {
        let masked = self.atten_mask != PromptMaskKind::None;
        // i128: sums of user preTokens / nextTokens and lengths must not wrap.
        let (pre, next) = (i128::from(self.pre_tokens), i128::from(self.next_tokens));
        ensure!(
            !(masked && self.sparse_mode == 4 && (pre < 0 || next < 0)),
            "quantScale2",
            "int8 output is not supported with sparseMode 4 and negative preTokens/nextTokens"
        );
        let has_offset = self.post_quant.as_ref().is_some_and(|q| q.offset.is_some());
        if !has_offset || !masked {
            return Ok(());
        }
        for (b, &(_, sq, _, skv)) in dims.sequences(self).iter().enumerate() {
            let (sq, skv) = (sq as i128, skv as i128);
            let invalid = match self.sparse_mode {
                0 => sq - skv - pre > 0 || next < 0,
                3 => skv - sq < 0,
                4 => pre < 0 || next + skv - sq < 0,
                _ => false,
            };
            ensure!(
                !invalid,
                "quantOffset2",
                "not supported when rows can be fully masked (sparseMode {}, batch {b}: Sq {sq}, Skv {skv}, pre {pre}, next {next})",
                self.sparse_mode
            );
        }
        Ok(())
    }

    /// Whether score `(i, j)` is masked by the sparse mode's rule (`sq`, `skv`: the batch's
    /// actual lengths) — everything but a dense mask's values, which are OR-ed in where the
    /// kind is [`PromptMaskKind::Dense`] (modes 0 and 1). Same rule as the CPU reference.
    pub fn rule_masked(&self, i: usize, j: usize, sq: usize, skv: usize) -> bool {
        let (ii, jj) = (i as i128, j as i128);
        let (sq, skv) = (sq as i128, skv as i128);
        let (pre, next) = (self.pre_tokens as i128, self.next_tokens as i128);
        match (self.atten_mask, self.mode()) {
            (PromptMaskKind::None, _) => false,
            (_, PfaSparseMode::DefaultMask) => jj < ii - pre || jj > ii + next,
            (_, PfaSparseMode::AllMask) => false,
            (_, PfaSparseMode::LeftUpCausal) => jj > ii,
            (_, PfaSparseMode::RightDownCausal) => jj > ii + skv - sq,
            (_, PfaSparseMode::Band) => jj < ii - (pre - skv + sq) || jj > ii + (next + skv - sq),
        }
    }

    /// The CPU reference's arguments for a validated call: f32 host buffers in the layout,
    /// the dense mask's bytes (non-zero = masked) and the pse's values with their shapes
    /// (the carrier's `atten_mask` / `pse_shift` on the host).
    pub fn args<'a>(
        &'a self,
        dims: &PromptDims,
        query: &'a [f32],
        key: &'a [f32],
        value: &'a [f32],
        atten_mask: Option<(&'a [u8], &[usize])>,
        pse_shift: Option<(&'a [f32], &[usize])>,
    ) -> Result<PromptFlashAttentionArgs<'a, f32>> {
        let mut a = PromptFlashAttentionArgs::new(
            query,
            key,
            value,
            dims.layout,
            dims.batch,
            dims.q_seq,
            dims.kv_seq,
            dims.num_heads,
            dims.head_dim,
            self.scale_value,
        );
        a.head_dim_v = dims.head_dim_v;
        a.num_key_value_heads = dims.kv_heads;
        a.pre_tokens = self.pre_tokens;
        a.next_tokens = self.next_tokens;
        a.sparse_mode = self.mode();
        a.inner_precise = self.inner_precise;
        a.actual_seq_lengths = self.actual_seq_lengths.as_deref();
        a.actual_seq_lengths_kv = self.actual_seq_lengths_kv.as_deref();
        a.atten_mask = match (self.atten_mask, atten_mask) {
            (PromptMaskKind::None, _) => None,
            // Modes 2-4 never read the mask's contents.
            (PromptMaskKind::Compressed, _) => Some(PfaMask {
                data: &[],
                batched: false,
                rows: 0,
                cols: 0,
            }),
            (PromptMaskKind::Dense, Some((data, shape))) => {
                let m = PfaMask::from_shape(data, shape).ok_or_else(|| {
                    AttnError::invalid(
                        "attenMask",
                        format!("shape must be rank 2, 3 or 4, got {shape:?}"),
                    )
                })?;
                let need: usize = shape.iter().product();
                ensure!(
                    data.len() == need,
                    "attenMask",
                    "has {} elements, shape {shape:?} needs {need}",
                    data.len()
                );
                Some(m)
            }
            (PromptMaskKind::Dense, None) => {
                return Err(AttnError::invalid(
                    "attenMask",
                    "the spec says a dense mask but no mask values were given",
                ))
            }
        };
        a.pse_shift = match pse_shift {
            None => None,
            Some((data, shape)) => {
                let p = PseShift::from_shape(data, shape).ok_or_else(|| {
                    AttnError::invalid("pseShift", format!("shape must be rank 4, got {shape:?}"))
                })?;
                let need: usize = shape.iter().product();
                ensure!(
                    data.len() == need,
                    "pseShift",
                    "has {} values, shape {shape:?} needs {need}",
                    data.len()
                );
                Some(p)
            }
        };
        Ok(a)
    }

    /// The reference's post-quant view of `quantScale2` / `quantOffset2`.
    pub fn post_quant(&self) -> Option<PfaPostQuant<'_>> {
        self.post_quant.as_ref().map(|q| PfaPostQuant {
            scale: &q.scale,
            offset: q.offset.as_deref(),
        })
    }
}

/// Checks `pseShift`'s shape (`None`: no pse).
fn validate_pse(dims: &PromptDims, shape: Option<&[usize]>) -> Result<()> {
    let Some(shape) = shape else {
        return Ok(());
    };
    let n = dims.num_heads;
    let [pb, pn, rows, cols] = *shape else {
        return Err(AttnError::invalid(
            "pseShift",
            format!("shape must be (B|1, N, Qs, KVs), got {shape:?}"),
        ));
    };
    ensure!(
        (pb == 1 || pb == dims.batch) && pn == n,
        "pseShift",
        "shape must be (B|1, N, Qs, KVs) with B = {}, N = {n}, got {shape:?}",
        dims.batch
    );
    ensure!(
        rows >= dims.q_seq && cols >= dims.kv_seq,
        "pseShift",
        "[Qs, KVs] = [{rows}, {cols}] must be >= [query S, key S] = [{}, {}]",
        dims.q_seq,
        dims.kv_seq
    );
    checked::product("pseShift", "its element count", &[pb, pn, rows, cols])?;
    Ok(())
}

pub(crate) fn tnd_lengths(
    param: &'static str,
    cum: Option<&[i64]>,
    total: usize,
) -> Result<Vec<usize>> {
    let Some(cum) = cum else {
        return Err(AttnError::invalid(param, "required (cumulative) with TND"));
    };
    ensure!(!cum.is_empty(), param, "TND needs at least one sequence");
    let mut prev = 0i64;
    let mut lens = Vec::with_capacity(cum.len());
    for &c in cum {
        ensure!(
            c >= prev,
            param,
            "TND lengths must be cumulative, non-negative and non-decreasing, got {cum:?}"
        );
        lens.push((c - prev) as usize);
        prev = c;
    }
    ensure!(
        prev as usize <= total,
        param,
        "must end at most at T = {total}, ends at {prev}"
    );
    Ok(lens)
}

/// `numKeyValueHeads` as PFA and IFA read it: 0 means `numHeads`; it must divide `numHeads`
/// with a ratio of at most [`MAX_GQA_RATIO`].
pub(crate) fn resolve_kv_heads(n: usize, num_key_value_heads: usize) -> Result<usize> {
    let nkv = if num_key_value_heads == 0 {
        n
    } else {
        num_key_value_heads
    };
    ensure!(
        n.is_multiple_of(nkv),
        "numKeyValueHeads",
        "numHeads {n} must be a multiple of numKeyValueHeads {nkv}"
    );
    ensure!(
        n / nkv <= MAX_GQA_RATIO,
        "numKeyValueHeads",
        "numHeads / numKeyValueHeads must be <= {MAX_GQA_RATIO}, got {}",
        n / nkv
    );
    Ok(nkv)
}
