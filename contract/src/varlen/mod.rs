//! The varlen op's parameters (named after `aclnnFlashAttentionVarLenScoreV5` and
//! `aclnnFlashAttentionUnpaddingScoreGradV5`) and their validation.
//!
//! Every constraint of the two CANN docs' parameter tables and 约束说明 sections is checked
//! here, before any kernel runs; each failure names the aclnn parameter and the rule.

pub mod problem;
pub mod tensors;
pub use problem::*;
pub use tensors::*;

use crate::dropout;

use crate::checked;
use crate::error::{ensure, AttnError, Result};

/// Largest head dim `aclnnFlashAttentionVarLenScoreV5` and its grad take (the older
/// `aclnnFlashAttentionVarLenScore` takes 512).
pub const MAX_HEAD_DIM: usize = 768;
/// Largest `headNum`.
pub const MAX_HEAD_NUM: usize = 256;
/// Largest batch of the forward (the backward allows 2M).
pub const MAX_BATCH: usize = 20_000;
/// Largest batch when `prefix` is given.
pub const MAX_BATCH_WITH_PREFIX: usize = 1024;
/// Side of CANN's compressed causal/band mask (modes 2, 3, 4, 7, 8).
pub const COMPRESSED_MASK: [usize; 2] = [2048, 2048];
/// Shape of CANN's compressed prefix mask (mode 6).
pub const COMPRESSED_PREFIX_MASK: [usize; 2] = [3072, 2048];

/// `attenMaskOptional`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MaskSpec {
    /// Null: full attention, sparseMode/preTokens/nextTokens ignored (CANN's rule).
    #[default]
    None,
    /// An explicit mask (modes 0 and 1), the call's [`VarlenInputs::atten_mask`] tensor: 1 =
    /// masked, shape `[maxSq, maxSkv]`, `[1, 1, maxSq, maxSkv]`, `[B, 1, maxSq, maxSkv]` or
    /// `[B, N, maxSq, maxSkv]` (the per-batch forms only when every sequence has the longest
    /// lengths); sequence b reads its top-left corner.
    Dense,
    /// CANN's compressed mask for modes 2, 3, 4, 6, 7, 8 (its content is fixed by the mode;
    /// see [`compressed_mask`] to materialise it for the device).
    Compressed,
}

/// Everything of the varlen op that is not a differentiable tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct VarlenSpec {
    /// `actualSeqQLenOptional`: cumulative query lengths, no leading zero (`[2,4,4,6,8]`).
    pub actual_seq_q_len: Vec<i64>,
    /// `actualSeqKvLenOptional`: cumulative key/value lengths.
    pub actual_seq_kv_len: Vec<i64>,
    /// `headNum`: must equal the query's N.
    pub head_num: usize,
    /// `scaleValue`, `keepProb`, `preTokens`, `nextTokens`, `innerPrecise`, `sparseMode`,
    /// `pseType`, `softmaxOutLayout`.
    pub attrs: VarlenAttrs,
    /// `attenMaskOptional`'s kind (an explicit mask's values are
    /// [`VarlenInputs::atten_mask`]).
    pub atten_mask: MaskSpec,
    /// `prefixOptional` (mode 6).
    pub prefix: Option<Vec<i64>>,
    /// `qStartIdxOptional`.
    pub q_start_idx: Option<i64>,
    /// `kvStartIdxOptional`.
    pub kv_start_idx: Option<i64>,
}

/// Shapes of the tensors a varlen call receives ([`VarlenInputs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarlenShapes {
    /// `query` `[Tq, N, D]`.
    pub query: [usize; 3],
    /// `key` `[Tkv, Nkv, D]`.
    pub key: [usize; 3],
    /// `value` `[Tkv, Nkv, Dv]`.
    pub value: [usize; 3],
    /// Length of `sink` (`[headNum]`), if given.
    pub sink: Option<usize>,
    /// Shape of the `realShift` tensor ([`VarlenInputs::pse`]), if given.
    pub pse: Option<Vec<usize>>,
    /// Shape of the `attenMask` tensor ([`VarlenInputs::atten_mask`]), if given.
    pub atten_mask: Option<Vec<usize>>,
    /// Shape of the ALiBi slopes ([`VarlenInputs::alibi_slopes`]), if given.
    pub alibi_slopes: Option<Vec<usize>>,
    /// Shape of the `dropMask` tensor ([`VarlenInputs::drop_mask`]), if given.
    pub drop_mask: Option<Vec<usize>>,
}

/// Extra shapes the backward receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarlenBwdShapes {
    /// `dy` `[Tq, N, Dv]`.
    pub dy: [usize; 3],
    /// `attentionIn` `[Tq, N, Dv]`.
    pub attention_in: [usize; 3],
    /// `softmaxMax` `[Tq, N, 8]`.
    pub softmax_max: [usize; 3],
    /// `softmaxSum` `[Tq, N, 8]`.
    pub softmax_sum: [usize; 3],
}

impl VarlenSpec {
    /// A spec with CANN's defaults: no mask, pse, dropout or prefix.
    pub fn new(
        actual_seq_q_len: Vec<i64>,
        actual_seq_kv_len: Vec<i64>,
        head_num: usize,
        scale: f64,
    ) -> Self {
        Self {
            actual_seq_q_len,
            actual_seq_kv_len,
            head_num,
            attrs: VarlenAttrs::new(scale),
            atten_mask: MaskSpec::None,
            prefix: None,
            q_start_idx: None,
            kv_start_idx: None,
        }
    }

    /// A spec from per-sequence lengths (`[2, 2, 0, 2, 2]`), converted to CANN's cumulative form.
    pub fn from_lengths(seq_q: &[usize], seq_kv: &[usize], head_num: usize, scale: f64) -> Self {
        Self::new(
            cumulative_from_lengths(seq_q),
            cumulative_from_lengths(seq_kv),
            head_num,
            scale,
        )
    }

    /// The per-sequence query and key/value lengths of `actualSeqQLen` / `actualSeqKvLen`
    /// (CANN's trailing-zero form included), as the validation reads them, without the
    /// tensors: for what needs the sequences before the call (the seeded dropout mask).
    pub fn sequence_lengths(&self) -> Result<(Vec<usize>, Vec<usize>)> {
        let (seq_q, _) = parse_cumulative("actualSeqQLen", &self.actual_seq_q_len)?;
        let (seq_kv, _) = parse_cumulative("actualSeqKvLen", &self.actual_seq_kv_len)?;
        same_sequence_count(&seq_q, &seq_kv)?;
        Ok((seq_q, seq_kv))
    }

    /// Checks a forward call and returns its dimensions.
    pub fn validate_fwd(&self, s: &VarlenShapes) -> Result<VarlenDims> {
        self.validate(s, false)
    }

    /// Checks a backward call and returns its dimensions.
    pub fn validate_bwd(&self, s: &VarlenShapes, b: &VarlenBwdShapes) -> Result<VarlenDims> {
        let dims = self.validate(s, true)?;
        let (t, n, dv) = (dims.t_q(), dims.head_num, dims.value_dim);
        ensure!(
            b.dy == [t, n, dv],
            "dy",
            "shape must be [Tq, N, Dv] = {:?}, got {:?}",
            [t, n, dv],
            b.dy
        );
        ensure!(
            b.attention_in == [t, n, dv],
            "attentionIn",
            "shape must be [Tq, N, Dv] = {:?}, got {:?}",
            [t, n, dv],
            b.attention_in
        );
        ensure!(
            b.softmax_max == [t, n, 8],
            "softmaxMax",
            "shape must be [Tq, N, 8] = {:?}, got {:?}",
            [t, n, 8],
            b.softmax_max
        );
        ensure!(
            b.softmax_sum == [t, n, 8],
            "softmaxSum",
            "shape must be [Tq, N, 8] = {:?}, got {:?}",
            [t, n, 8],
            b.softmax_sum
        );
        Ok(dims)
    }

    fn validate(&self, s: &VarlenShapes, backward: bool) -> Result<VarlenDims> {
        let [tq, n, d] = s.query;
        let [tkv, nkv, dk] = s.key;
        let [tv, nv, dv] = s.value;
        ensure!(
            (1..=MAX_HEAD_NUM).contains(&self.head_num),
            "headNum",
            "must be in 1..={MAX_HEAD_NUM}, got {}",
            self.head_num
        );
        ensure!(
            n == self.head_num,
            "headNum",
            "must equal the query's N (dim 1) = {n}, got {}",
            self.head_num
        );
        ensure!(
            nkv >= 1 && n % nkv == 0,
            "key",
            "N must divide the query's N {n} (GQA/MQA), got {nkv}"
        );
        ensure!(
            tv == tkv && nv == nkv,
            "value",
            "T and N must equal the key's {:?}, got {:?}",
            [tkv, nkv],
            [tv, nv]
        );
        ensure!(
            (1..=MAX_HEAD_DIM).contains(&d),
            "query",
            "D must be in 1..={MAX_HEAD_DIM}, got {d}"
        );
        ensure!(dk == d, "key", "D must equal the query's D {d}, got {dk}");
        if backward {
            ensure!(
                dv == d,
                "value",
                "D must equal the query's D {d} in the backward, got {dv}"
            );
        } else {
            ensure!(
                (1..=d).contains(&dv),
                "value",
                "D must be in 1..=key D {d}, got {dv}"
            );
        }

        let seq_q = cumulative("actualSeqQLen", &self.actual_seq_q_len, tq, "query")?;
        let seq_kv = cumulative("actualSeqKvLen", &self.actual_seq_kv_len, tkv, "key")?;
        same_sequence_count(&seq_q, &seq_kv)?;
        let batch = seq_q.len();
        let max_batch = if backward { 2 << 20 } else { MAX_BATCH };
        ensure!(
            batch <= max_batch,
            "actualSeqQLen",
            "at most {max_batch} sequences, got {batch}"
        );

        let a = &self.attrs;
        ensure!(
            a.keep_prob > 0.0 && a.keep_prob <= 1.0,
            "keepProb",
            "must be in (0, 1], got {}",
            checked::num(a.keep_prob)
        );
        // The kernel reads keepProb as f32 and scales kept scores by 1/keepProb in f32: both
        // must be finite and keepProb non-zero there (5e-324 is 0 as an f32).
        let keep = checked::finite_f32("keepProb", a.keep_prob)?;
        ensure!(
            keep > 0.0 && (1.0 / keep).is_finite(),
            "keepProb",
            "must be > 0 with a finite 1/keepProb as the f32 the device computes in, got {} (f32: {keep})",
            checked::num(a.keep_prob)
        );
        ensure!(
            (0..=2).contains(&a.inner_precise),
            "innerPrecise",
            "must be 0, 1 or 2, got {}",
            a.inner_precise
        );
        ensure!(
            a.scale.is_finite(),
            "scaleValue",
            "must be finite, got {}",
            a.scale
        );
        checked::finite_f32("scaleValue", a.scale)?;
        if let Some(len) = s.sink {
            ensure!(len == n, "sink", "length must equal headNum {n}, got {len}");
        }

        let dims = VarlenDims {
            head_num: n,
            kv_head_num: nkv,
            head_dim: d,
            value_dim: dv,
            seq_q,
            seq_kv,
        };
        if a.keep_prob < 1.0 {
            // N·Σ Sq_b·Skv_b checked first: dropout::mask_bits multiplies unchecked.
            let per_seq = dims
                .seq_q
                .iter()
                .zip(&dims.seq_kv)
                .map(|(&q, &k)| checked::product("dropMask", "Sq_b·Skv_b", &[q, k]))
                .collect::<Result<Vec<_>>>()?;
            let pairs = checked::sum("dropMask", "Σ Sq_b·Skv_b", per_seq)?;
            checked::product("dropMask", "N·Σ Sq_b·Skv_b bits", &[n, pairs])?;
            let need = dropout::mask_bytes(dropout::mask_bits(n, &dims.seq_q, &dims.seq_kv));
            match s.drop_mask.as_deref() {
                None => return Err(AttnError::invalid("dropMask", "required when keepProb < 1")),
                Some(&[len]) => ensure!(
                    len >= need,
                    "dropMask",
                    "needs N·Σ Sq_b·Skv_b bits = {need} bytes, got {len}"
                ),
                Some(shape) => {
                    return Err(AttnError::invalid(
                        "dropMask",
                        format!("must be 1-D (bit-packed bytes), got shape {shape:?}"),
                    ))
                }
            }
        }
        self.validate_mask(&dims, s.atten_mask.as_deref())?;
        self.validate_pse(&dims, s.pse.as_deref(), s.alibi_slopes.as_deref())?;
        Ok(dims)
    }

    fn validate_mask(&self, dims: &VarlenDims, tensor: Option<&[usize]>) -> Result<()> {
        let mode = self.attrs.sparse_mode;
        let (a, batch) = (&self.attrs, dims.batch());
        match (self.atten_mask, tensor) {
            (MaskSpec::Dense, None) => {
                return Err(AttnError::invalid(
                    "attenMask",
                    "the spec says an explicit mask but no mask tensor was given",
                ))
            }
            (MaskSpec::None | MaskSpec::Compressed, Some(shape)) => {
                return Err(AttnError::invalid(
                    "attenMask",
                    format!(
                        "a mask tensor {shape:?} was given but the spec's mask is {:?} (a mask tensor is an explicit mask: sparseMode 0 or 1)",
                        self.atten_mask
                    ),
                ))
            }
            _ => {}
        }
        match (self.atten_mask, tensor) {
            // No mask: mode, pre and next are ignored. (A dense kind without a tensor is refused
            // above.)
            (MaskSpec::None, _) | (MaskSpec::Dense, None) => return Ok(()),
            (MaskSpec::Dense, Some(shape)) => {
                ensure!(
                    !mode.takes_compressed_mask(),
                    "attenMask",
                    "sparseMode {} takes CANN's compressed mask (2048x2048, 3072x2048 for mode 6), not an explicit one",
                    mode as i64
                );
                // The arch32 tiling accepts exactly [maxSq, maxSkv], [1, 1, maxSq, maxSkv],
                // [B, 1, maxSq, maxSkv] and [B, N, maxSq, maxSkv] in TND
                // (`flash_attention_score_tiling_general.cpp`, the attenMaskShapeType branch).
                // The kernel reads the shared forms as the top-left [Sq_b, Skv_b] corner with
                // the row stride maxSkv, but the per-batch forms at the *packed* offset
                // Σ_{b'<b} Sq_b'·Skv_b' with the mask's row stride
                // (`flash_attention_score_s1s2_bn2gs1.h`, `ComputeOffsetForNoCompress`, and
                // `flash_attention_var_len_score.h`): the two readings agree only when every
                // sequence has the longest lengths, so per-batch masks are refused otherwise.
                let max_q = dims.seq_q.iter().copied().max().unwrap_or(0);
                let max_kv = dims.seq_kv.iter().copied().max().unwrap_or(0);
                let (b, h, rows, cols) = match *shape {
                    [r, c] => (1, 1, r, c),
                    [b, h, r, c] => (b, h, r, c),
                    _ => {
                        return Err(AttnError::invalid(
                            "attenMask",
                            format!("shape must be [maxSq, maxSkv] or [B|1, N|1, maxSq, maxSkv], got {shape:?}"),
                        ))
                    }
                };
                ensure!(
                    b == 1 || b == batch,
                    "attenMask",
                    "batch dim must be 1 or B = {batch}, got {b}"
                );
                ensure!(
                    h == 1 || h == dims.head_num,
                    "attenMask",
                    "head dim must be 1 or N = {}, got {h}",
                    dims.head_num
                );
                ensure!(
                    !(b == 1 && h > 1 && batch > 1),
                    "attenMask",
                    "a per-head mask must also be per batch: [B, N, maxSq, maxSkv], got {shape:?}"
                );
                ensure!(
                    rows == max_q && cols == max_kv,
                    "attenMask",
                    "[Sq, Skv] = [{rows}, {cols}] must be the longest sequence's [maxSq, maxSkv] = [{max_q}, {max_kv}] in TND"
                );
                if b == batch && batch > 1 {
                    let uneven = dims
                        .seq_q
                        .iter()
                        .zip(&dims.seq_kv)
                        .position(|(&q, &k)| (q, k) != (max_q, max_kv));
                    if let Some(s) = uneven {
                        return Err(AttnError::invalid(
                            "attenMask",
                            format!(
                                "a per-batch mask {shape:?} needs every sequence to have the longest lengths \
                                 [{max_q}, {max_kv}] in TND (sequence {s} has [{}, {}]): CANN's kernel reads it \
                                 at packed per-sequence offsets with the mask's row stride, which disagrees with \
                                 the top-left reading otherwise; pass one [maxSq, maxSkv] mask for all sequences",
                                dims.seq_q[s], dims.seq_kv[s]
                            ),
                        ));
                    }
                }
                checked::product("attenMask", "its element count", &[b, h, rows, cols])?;
            }
            (MaskSpec::Compressed, _) => {
                ensure!(
                    mode.takes_compressed_mask(),
                    "attenMask",
                    "the compressed mask goes with sparseMode 2, 3, 4, 6, 7 or 8, not {}",
                    mode as i64
                );
            }
        }
        let pairs = || dims.seq_q.iter().zip(&dims.seq_kv).enumerate();
        match mode {
            SparseMode::RightDownCausal => {
                for (b, (&sq, &skv)) in pairs() {
                    ensure!(sq <= skv, "actualSeqQLen", "sparseMode 3 needs Sq <= Skv in every sequence; sequence {b} has Sq {sq} > Skv {skv}");
                }
            }
            SparseMode::Band => {
                ensure!(
                    a.pre_tokens.saturating_add(a.next_tokens) >= 0,
                    "preTokens",
                    "band (sparseMode 4) needs preTokens and nextTokens to overlap (pre + next >= 0), got pre {} next {}",
                    a.pre_tokens,
                    a.next_tokens
                );
            }
            SparseMode::PrefixCompress => {
                let Some(prefix) = &self.prefix else {
                    return Err(AttnError::invalid("prefix", "required with sparseMode 6"));
                };
                ensure!(
                    prefix.len() == batch,
                    "prefix",
                    "needs one entry per sequence ({batch}), got {}",
                    prefix.len()
                );
                ensure!(
                    batch <= MAX_BATCH_WITH_PREFIX,
                    "prefix",
                    "at most {MAX_BATCH_WITH_PREFIX} sequences with prefix, got {batch}"
                );
                for (b, (&sq, &skv)) in pairs() {
                    let lo = if sq > skv { 0 } else { (skv - sq) as i64 };
                    ensure!(
                        (lo..=skv as i64).contains(&prefix[b]),
                        "prefix",
                        "prefix[{b}] must be in [{lo}, {skv}] (Sq {sq}, Skv {skv}), got {}",
                        prefix[b]
                    );
                }
            }
            SparseMode::RightDownCausalBand | SparseMode::BandLeftUpCausal => {
                let problem = VarlenProblem::new(dims.clone(), self.attrs.clone());
                if let Some(band) = problem.band_sequence() {
                    let (sq, skv) = (dims.seq_q[band] as i64, dims.seq_kv[band] as i64);
                    ensure!(a.pre_tokens >= skv, "preTokens", "sparseMode {} needs preTokens >= Skv of the band sequence {band} ({skv}), got {}", mode as i64, a.pre_tokens);
                    if mode == SparseMode::RightDownCausalBand {
                        ensure!(
                            sq - skv <= a.next_tokens && a.next_tokens <= 0,
                            "nextTokens",
                            "sparseMode 7 needs Sq - Skv <= nextTokens <= 0 for the band sequence {band} ({}), got {}",
                            sq - skv,
                            a.next_tokens
                        );
                        for (b, (&sq, &skv)) in pairs() {
                            ensure!(b == band || sq <= skv, "actualSeqQLen", "sparseMode 7 needs Sq <= Skv outside the band sequence; sequence {b} has Sq {sq} > Skv {skv}");
                        }
                    } else {
                        ensure!(
                            a.next_tokens >= sq - skv,
                            "nextTokens",
                            "sparseMode 8 needs nextTokens >= Sq - Skv of the band sequence {band} ({}), got {}",
                            sq - skv,
                            a.next_tokens
                        );
                    }
                }
            }
            SparseMode::DefaultMask => self.validate_default_band(dims)?,
            SparseMode::AllMask | SparseMode::LeftUpCausal => {}
        }
        Ok(())
    }

    /// sparseMode 0 with a mask: preTokens / nextTokens as CANN's varlen tiling checks them
    /// (`attention/flash_attention_score/op_host/arch32/flash_attention_score_tiling_general.cpp`,
    /// `FlashAttentionVarLenScoreTiling::GetSparseInfo` → `SparseNoMaskModeCheck`): unless the
    /// band is causal (pre >= maxSq, next = 0) or covers everything (pre >= maxSq, next >=
    /// maxSkv), a negative nextTokens, a row with nothing to attend (Skv_b + pre < Sq_b) or an
    /// empty band (pre < 0 and next < |pre|) is refused, as prompt and varlen mode 4 refuse
    /// an empty band. Computed in i128: pre / next = i64::MIN must not wrap when negated.
    fn validate_default_band(&self, dims: &VarlenDims) -> Result<()> {
        let (pre, next) = (
            i128::from(self.attrs.pre_tokens),
            i128::from(self.attrs.next_tokens),
        );
        let max_q = dims.seq_q.iter().copied().max().unwrap_or(0) as i128;
        let max_kv = dims.seq_kv.iter().copied().max().unwrap_or(0) as i128;
        if pre >= max_q && (next == 0 || next >= max_kv) {
            return Ok(());
        }
        ensure!(
            next >= 0,
            "nextTokens",
            "sparseMode 0 with a mask needs nextTokens >= 0 unless the band is causal or full (CANN's varlen tiling: no valid data block), got {next}"
        );
        for (b, (&sq, &skv)) in dims.seq_q.iter().zip(&dims.seq_kv).enumerate() {
            if sq == 0 || skv == 0 {
                continue;
            }
            ensure!(
                skv as i128 + pre >= sq as i128,
                "preTokens",
                "sparseMode 0 with a mask: sequence {b} (Sq {sq}, Skv {skv}) has rows with nothing to attend (Skv + preTokens < Sq), preTokens {pre}"
            );
        }
        ensure!(
            pre >= 0 || next >= -pre,
            "preTokens",
            "sparseMode 0 with a mask needs preTokens and nextTokens to overlap (pre + next >= 0), got pre {pre} next {next}"
        );
        Ok(())
    }

    /// `realShift`: the external pse tensor of shape `pse` or the ALiBi slopes of shape
    /// `slopes` (never both), by shape; the pseType must say which.
    fn validate_pse(
        &self,
        dims: &VarlenDims,
        pse: Option<&[usize]>,
        slopes: Option<&[usize]>,
    ) -> Result<()> {
        let (pse_type, mode, n, batch) = (
            self.attrs.pse_type,
            self.attrs.sparse_mode,
            dims.head_num,
            dims.batch(),
        );
        let masked = self.atten_mask != MaskSpec::None;
        if pse.is_some() || slopes.is_some() {
            ensure!(
                !(masked && mode == SparseMode::RightDownCausalBand),
                "realShift",
                "not supported with sparseMode 7"
            );
            ensure!(
                !(masked && mode == SparseMode::BandLeftUpCausal && dims.seq_q != dims.seq_kv),
                "realShift",
                "sparseMode 8 takes a pse only when every sequence has Sq = Skv"
            );
            ensure!(
                dims.seq_q.iter().all(|&s| s > 0),
                "realShift",
                "not supported when a sequence has zero query length (actualSeqQLen repeats a value)"
            );
        }
        let pse_total = || {
            let per_seq = dims
                .seq_q
                .iter()
                .zip(&dims.seq_kv)
                .map(|(&q, &k)| checked::product("realShift", "N·Sq_b·Skv_b", &[n, q, k]))
                .collect::<Result<Vec<_>>>()?;
            checked::sum("realShift", "pseTotalLen = Σ N·Sq_b·Skv_b", per_seq)
        };
        match (pse, slopes) {
            (Some(_), Some(_)) => Err(AttnError::invalid(
                "realShift",
                "given both as a pse tensor and as ALiBi slopes: pass one",
            )),
            (None, None) => {
                ensure!(
                    pse_type == PseType::OuterAddMul,
                    "pseType",
                    "must be 1 when realShift is absent, got {}",
                    pse_type as i64
                );
                Ok(())
            }
            (Some(shape), None) => {
                ensure!(
                    matches!(pse_type, PseType::OuterMulAdd | PseType::OuterAddMul),
                    "pseType",
                    "a pse tensor is an external pse (pseType 0 or 1), got {}",
                    pse_type.as_attr()
                );
                if shape.len() == 4 {
                    return self.validate_alibi_compressed(dims, shape);
                }
                let total = pse_total()?;
                ensure!(
                    shape == [total],
                    "realShift",
                    "a pse tensor is the flat [pseTotalLen] = [{total}] (Σ N·Sq_b·Skv_b) or the ALiBi-compressed [1|B, N, 1024, maxSkv], got shape {shape:?}"
                );
                Ok(())
            }
            (None, Some(shape)) => {
                ensure!(
                    matches!(pse_type, PseType::InnerMulAdd | PseType::InnerMulAddSqrt),
                    "pseType",
                    "ALiBi slopes go with pseType 2 or 3, got {}",
                    pse_type as i64
                );
                ensure!(
                    shape == [n] || shape == [batch, n],
                    "realShift",
                    "ALiBi slopes must be [N] = [{n}] or [B, N] = [{batch}, {n}], got {shape:?}"
                );
                Ok(())
            }
        }
    }

    /// The ALiBi-compressed external pse `[Bp, N, 1024, S2]` (seeds 002/003): the last 1024 rows
    /// of a Toeplitz ALiBi bias. The arch32 TND tiling classifies a 4-D pse with dims
    /// `[1|B, N, 1024, maxSkv]` as this form (`flash_attention_score_tiling_general.cpp`, the
    /// pseShapeType branch) and the kernel reads it along diagonals at block-dependent
    /// positions (`common/include/kernel/pse.h`, `PseAlibiComputeOffset`), so it must be
    /// constant along its diagonals; the docs require Sq = Skv per sequence and a
    /// lower-triangular mask (modes 2 and 3, or mode 0 with a mask, preTokens ≥ max Sq and
    /// nextTokens = 0).
    ///
    /// Validation sees shapes only; the diagonal constancy needs the values and is checked
    /// where they are on the host ([`check_alibi_compressed_values`]).
    fn validate_alibi_compressed(&self, dims: &VarlenDims, shape: &[usize]) -> Result<()> {
        let (n, batch) = (dims.head_num, dims.batch());
        let max_kv = dims.seq_kv.iter().copied().max().unwrap_or(0);
        let max_q = dims.seq_q.iter().copied().max().unwrap_or(0);
        ensure!(
            (shape[0] == 1 || shape[0] == batch)
                && shape[1] == n
                && shape[2] == ALIBI_COMPRESSED_ROWS
                && shape[3] == max_kv,
            "realShift",
            "a 4-D pse is the ALiBi-compressed [1|B, N, 1024, maxSkv] = [1|{batch}, {n}, 1024, {max_kv}], got {shape:?}"
        );
        checked::product("realShift", "its element count", shape)?;
        ensure!(
            dims.seq_q == dims.seq_kv,
            "realShift",
            "the ALiBi-compressed pse needs Sq = Skv in every sequence"
        );
        let a = &self.attrs;
        let causal = match a.sparse_mode {
            SparseMode::LeftUpCausal | SparseMode::RightDownCausal => {
                self.atten_mask == MaskSpec::Compressed
            }
            SparseMode::DefaultMask => {
                self.atten_mask != MaskSpec::None
                    && a.pre_tokens >= max_q as i64
                    && a.next_tokens == 0
            }
            _ => false,
        };
        ensure!(
            causal,
            "sparseMode",
            "the ALiBi-compressed pse needs a lower-triangular mask: sparseMode 2 or 3 with the compressed mask, or 0 with a mask, preTokens >= max Sq ({max_q}) and nextTokens = 0; got mode {}, preTokens {}, nextTokens {}",
            a.sparse_mode.as_attr(),
            a.pre_tokens,
            a.next_tokens
        );
        Ok(())
    }

    /// The kernels' view of a validated call. `dims` must come from `validate_*` on this spec.
    pub fn problem<'a>(&'a self, dims: VarlenDims, sink: Option<&'a [f32]>) -> VarlenProblem<'a> {
        let atten_mask = match self.atten_mask {
            MaskSpec::None => AttenMask::None,
            MaskSpec::Compressed => AttenMask::Compressed,
            // The values are the call's tensor: a host caller sets `Dense` over its copy.
            MaskSpec::Dense => AttenMask::DenseElsewhere,
        };
        VarlenProblem {
            dims,
            attrs: self.attrs.clone(),
            atten_mask,
            // The pse and slopes are the call's tensors: a host caller sets them over its copy
            // ([`Pse::of_tensor`]).
            pse: Pse::None,
            // The call's tensor too: a host caller sets it over its bytes.
            drop_mask: None,
            prefix: self.prefix.as_deref(),
            q_start_idx: self.q_start_idx.unwrap_or(0),
            kv_start_idx: self.kv_start_idx.unwrap_or(0),
            sink,
        }
    }
}

/// The content rule of the ALiBi-compressed pse `[Bp, N, 1024, S2]` ([`VarlenInputs::pse`] of
/// rank 4), for a caller holding its values on the host (the op-replay CLI, the CPU kernels'
/// path): constant along every diagonal, `C[p, q] == C[p + 1, q + 1]`, because the arch32
/// kernel reads each diagonal at a block-dependent position (`common/include/kernel/pse.h`,
/// `PseAlibiComputeOffset`). [`VarlenSpec::validate_fwd`] checked the shape; a device backend
/// cannot check this without reading the tensor back, so it trusts the caller.
pub fn check_alibi_compressed_values(data: &[f32], shape: &[usize]) -> Result<()> {
    let &[_, n, rows, cols] = shape else {
        return Err(AttnError::invalid(
            "realShift",
            format!("the ALiBi-compressed pse is 4-D, got shape {shape:?}"),
        ));
    };
    let numel = checked::product("realShift", "its element count", shape)?;
    ensure!(
        numel == data.len(),
        "realShift",
        "has {} values, shape {shape:?} needs their product",
        data.len()
    );
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    for (slab, c) in data.chunks_exact(rows * cols).enumerate() {
        for p in 0..rows - 1 {
            for q in 0..cols - 1 {
                if c[p * cols + q].to_bits() != c[(p + 1) * cols + q + 1].to_bits() {
                    return Err(AttnError::invalid(
                        "realShift",
                        format!(
                            "the ALiBi-compressed pse must be constant along its diagonals (the kernel reads \
                             each diagonal at a block-dependent position); [{}, {}, {p}, {q}] differs from \
                             [.., {}, {}]",
                            slab / n.max(1),
                            slab % n.max(1),
                            p + 1,
                            q + 1
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Both cumulative arrays describe the same number of sequences.
fn same_sequence_count(seq_q: &[usize], seq_kv: &[usize]) -> Result<()> {
    ensure!(
        seq_q.len() == seq_kv.len(),
        "actualSeqKvLen",
        "must have one entry per sequence like actualSeqQLen ({}), got {}",
        seq_q.len(),
        seq_kv.len()
    );
    Ok(())
}

fn cumulative(param: &'static str, cum: &[i64], total: usize, tensor: &str) -> Result<Vec<usize>> {
    let (lens, last) = parse_cumulative(param, cum)?;
    ensure!(
        last == total as i64,
        param,
        "must end at the {tensor}'s T = {total}, ends at {last}"
    );
    Ok(lens)
}

/// `cum`'s per-sequence lengths and its end ([`lengths_from_varlen_cumulative`]), or the typed
/// error naming `param`.
fn parse_cumulative(param: &'static str, cum: &[i64]) -> Result<(Vec<usize>, i64)> {
    ensure!(!cum.is_empty(), param, "needs at least one sequence");
    lengths_from_varlen_cumulative(cum).ok_or_else(|| {
        AttnError::invalid(
            param,
            format!(
                "cumulative lengths must be non-negative and non-decreasing (a tail of zeros \
                 is allowed), got {cum:?}"
            ),
        )
    })
}

/// CANN's compressed mask for a sparse mode (1 = masked), for callers that must hand the device
/// a real tensor: 2048×2048 strict upper triangle; for mode 6, 3072×2048 with the lower
/// 1024 rows 0 in the left half and 1 in the right half. `None` for modes 0 and 1.
pub fn compressed_mask(mode: SparseMode) -> Option<(Vec<u8>, [usize; 2])> {
    if !mode.takes_compressed_mask() {
        return None;
    }
    let shape = if mode == SparseMode::PrefixCompress {
        COMPRESSED_PREFIX_MASK
    } else {
        COMPRESSED_MASK
    };
    let [rows, cols] = shape;
    let mut mask = vec![0u8; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            mask[i * cols + j] = if i < 2048 {
                (j > i) as u8
            } else {
                (j >= cols / 2) as u8
            };
        }
    }
    Some((mask, shape))
}
