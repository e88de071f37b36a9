//! The plain-data description of a varlen (TND) flash-attention problem, mirroring
//! `aclnnFlashAttentionVarLenScoreV5` / `aclnnFlashAttentionUnpaddingScoreGradV5`.
//!
//! The masking rules live here (not in a kernel) because they *are* the semantics: every
//! implementation — the reference, the fast CPU kernels, the Ascend dispatch — asks
//! [`VarlenProblem::rule`] which positions a sequence may attend to.

/// `inputLayout` of the varlen ops: packed sequences (`"TND"`) only.
pub const VARLEN_LAYOUT: &str = "TND";

/// CANN's `sparseMode` (spec §1). Mode 5 (uncompressed prefix) does not exist for varlen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SparseMode {
    /// 0: explicit mask OR outside `[-preTokens, nextTokens]`, origin top-left.
    DefaultMask = 0,
    /// 1: the explicit mask alone.
    AllMask = 1,
    /// 2: causal, origin top-left (`j ≤ i`).
    LeftUpCausal = 2,
    /// 3: causal, origin bottom-right (`j − i ≤ Skv − Sq`).
    RightDownCausal = 3,
    /// 4: band, origin bottom-right.
    Band = 4,
    /// 6: bottom-right causal plus the first `prefix[b]` columns.
    PrefixCompress = 6,
    /// 7: bottom-right causal, the last non-empty sequence a band (query split across devices).
    RightDownCausalBand = 7,
    /// 8: top-left causal, the first non-empty sequence a band (query split across devices).
    BandLeftUpCausal = 8,
}

impl SparseMode {
    /// The mode for CANN's integer, or `None` for values varlen does not take (5, 9, …).
    pub fn from_attr(v: i64) -> Option<Self> {
        Some(match v {
            0 => Self::DefaultMask,
            1 => Self::AllMask,
            2 => Self::LeftUpCausal,
            3 => Self::RightDownCausal,
            4 => Self::Band,
            6 => Self::PrefixCompress,
            7 => Self::RightDownCausalBand,
            8 => Self::BandLeftUpCausal,
            _ => return None,
        })
    }

    /// CANN's integer (`sparseMode`).
    pub fn as_attr(self) -> i64 {
        self as i64
    }

    /// Whether the mode takes CANN's compressed mask (2048×2048, or 3072×2048 for mode 6)
    /// rather than an explicit one.
    pub fn takes_compressed_mask(self) -> bool {
        !matches!(self, Self::DefaultMask | Self::AllMask)
    }
}

/// CANN's `pseType` (spec §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PseType {
    /// 0: external pse, `scale·QKᵀ + pse`.
    OuterMulAdd = 0,
    /// 1: external pse, `scale·(QKᵀ + pse)` (the default).
    OuterAddMul = 1,
    /// 2: ALiBi generated from slopes, `scale·QKᵀ − slope·|Δ|`.
    InnerMulAdd = 2,
    /// 3: ALiBi generated from slopes, `scale·QKᵀ − slope·sqrt(|Δ|)`.
    InnerMulAddSqrt = 3,
}

impl PseType {
    /// CANN's integer (`pseType`).
    pub fn as_attr(self) -> i64 {
        self as i64
    }

    /// The type for CANN's integer.
    pub fn from_attr(v: i64) -> Option<Self> {
        Some(match v {
            0 => Self::OuterMulAdd,
            1 => Self::OuterAddMul,
            2 => Self::InnerMulAdd,
            3 => Self::InnerMulAddSqrt,
            _ => return None,
        })
    }
}

/// Layout of `softmaxMax` / `softmaxSum` in TND (`softmaxOutLayout` / `softmaxInLayout`).
/// Both hold `T·N·8` floats (each value broadcast ×8, one 32-byte block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SoftmaxLayout {
    /// `""`: per-sequence head-major blocks, element `(cumQ_b·N + h·Sq_b + i)·8`.
    #[default]
    SequenceHeadMajor,
    /// `"same_as_input"`: a true `[T, N, 8]`, element `((cumQ_b + i)·N + h)·8`.
    SameAsInput,
}

impl SoftmaxLayout {
    /// Parse CANN's attribute string.
    pub fn from_attr(s: &str) -> Option<Self> {
        match s {
            "" => Some(Self::SequenceHeadMajor),
            "same_as_input" => Some(Self::SameAsInput),
            _ => None,
        }
    }

    /// CANN's attribute string.
    pub fn as_attr(self) -> &'static str {
        match self {
            Self::SequenceHeadMajor => "",
            Self::SameAsInput => "same_as_input",
        }
    }

    /// Index of the first of the 8 floats for (sequence starting at token `q_offset` with
    /// `sq` rows, head `h` of `n`, row `i`).
    #[inline]
    pub fn stat_index(self, q_offset: usize, sq: usize, n: usize, h: usize, i: usize) -> usize {
        match self {
            Self::SequenceHeadMajor => (q_offset * n + h * sq + i) * 8,
            Self::SameAsInput => ((q_offset + i) * n + h) * 8,
        }
    }
}

/// Scalar attributes of the forward and backward ops, named after the aclnn parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct VarlenAttrs {
    /// `scaleValue`.
    pub scale: f64,
    /// `keepProb`, in (0, 1]; below 1 a dropout mask is applied.
    pub keep_prob: f64,
    /// `preTokens`.
    pub pre_tokens: i64,
    /// `nextTokens`.
    pub next_tokens: i64,
    /// `innerPrecise` (0, 1, 2). Fully masked rows always come out as zeros here, which is
    /// what CANN computes with invalid-row handling (2) enabled.
    pub inner_precise: i64,
    /// `sparseMode`.
    pub sparse_mode: SparseMode,
    /// `pseType`.
    pub pse_type: PseType,
    /// `softmaxOutLayout` / `softmaxInLayout`.
    pub softmax_layout: SoftmaxLayout,
}

impl VarlenAttrs {
    /// CANN's defaults: keepProb 1, pre/next 2147483647, mode 0, pseType 1, default layout.
    pub fn new(scale: f64) -> Self {
        Self {
            scale,
            keep_prob: 1.0,
            pre_tokens: 2_147_483_647,
            next_tokens: 2_147_483_647,
            inner_precise: 0,
            sparse_mode: SparseMode::DefaultMask,
            pse_type: PseType::OuterAddMul,
            softmax_layout: SoftmaxLayout::SequenceHeadMajor,
        }
    }
}

/// Shapes: q `[Tq, N, D]`, k `[Tkv, Nkv, D]`, v `[Tkv, Nkv, Dv]`, out `[Tq, N, Dv]`, and the
/// per-sequence actual lengths (derived from CANN's cumulative `actualSeq*Len`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarlenDims {
    /// `headNum` (N).
    pub head_num: usize,
    /// Key/value heads (Nkv); `head_num % kv_head_num == 0`.
    pub kv_head_num: usize,
    /// Query/key head dim (D).
    pub head_dim: usize,
    /// Value head dim (Dv ≤ D).
    pub value_dim: usize,
    /// Query length of each sequence.
    pub seq_q: Vec<usize>,
    /// Key/value length of each sequence.
    pub seq_kv: Vec<usize>,
}

impl VarlenDims {
    /// Total query tokens Tq.
    pub fn t_q(&self) -> usize {
        self.seq_q.iter().sum()
    }
    /// Total key/value tokens Tkv.
    pub fn t_kv(&self) -> usize {
        self.seq_kv.iter().sum()
    }
    /// Number of sequences B.
    pub fn batch(&self) -> usize {
        self.seq_q.len()
    }
    /// GQA group size N / Nkv.
    pub fn group(&self) -> usize {
        self.head_num / self.kv_head_num
    }
    /// First query token of each sequence.
    pub fn q_offsets(&self) -> Vec<usize> {
        exclusive_prefix_sum(&self.seq_q)
    }
    /// First key/value token of each sequence.
    pub fn kv_offsets(&self) -> Vec<usize> {
        exclusive_prefix_sum(&self.seq_kv)
    }
    /// Lengths of the softmax statistics buffers (`T·N·8`).
    pub fn stats_len(&self) -> usize {
        self.t_q() * self.head_num * 8
    }
}

fn exclusive_prefix_sum(v: &[usize]) -> Vec<usize> {
    let mut acc = 0;
    v.iter()
        .map(|&x| {
            let start = acc;
            acc += x;
            start
        })
        .collect()
}

/// The varlen ops' (`actualSeqQLen` / `actualSeqKvLen`) reading of cumulative lengths:
/// [`lengths_from_cumulative`], plus CANN's trailing-zero form: `[2, 5, 9, 0, 0]` is five
/// sequences of lengths `[2, 3, 4, 0, 0]` ending at 9 (padded arrays, as graph-captured callers
/// pass them). The arch32 tiling (`flash_attention_score_tiling_general.cpp`,
/// `GetActualSeqLenData`) turns every step `≤ 0` into length 0; only a tail of zeros after the
/// last real entry keeps the per-sequence offsets consistent with the packed T, so only that
/// form is accepted. Returns the lengths and the end (the largest entry), or `None`.
pub fn lengths_from_varlen_cumulative(cumulative: &[i64]) -> Option<(Vec<usize>, i64)> {
    let real = cumulative
        .iter()
        .rposition(|&c| c != 0)
        .map_or(0, |last| last + 1);
    let (head, tail) = cumulative.split_at(real);
    debug_assert!(tail.iter().all(|&c| c == 0));
    let mut lens = lengths_from_cumulative(head)?;
    lens.resize(cumulative.len(), 0);
    Some((lens, head.last().copied().unwrap_or(0)))
}

/// Converts CANN's cumulative lengths (`[2,4,4,6,8]` for `[2,2,0,2,2]`) to lengths.
/// Returns `None` if they decrease or start below zero.
pub fn lengths_from_cumulative(cumulative: &[i64]) -> Option<Vec<usize>> {
    let mut prev = 0i64;
    cumulative
        .iter()
        .map(|&c| {
            let len = c.checked_sub(prev).filter(|&l| l >= 0 && c >= 0)?;
            prev = c;
            usize::try_from(len).ok()
        })
        .collect()
}

/// Cumulative lengths in CANN's convention (no leading zero) from per-sequence lengths.
pub fn cumulative_from_lengths(lengths: &[usize]) -> Vec<i64> {
    let mut acc = 0i64;
    lengths
        .iter()
        .map(|&l| {
            acc += l as i64;
            acc
        })
        .collect()
}

/// `attenMask` as the kernels see it. 1 = masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttenMask<'a> {
    /// No mask: every position is computed, and sparseMode/preTokens/nextTokens are ignored
    /// (CANN's rule).
    None,
    /// An explicit mask `[batch, heads, rows, cols]` (batch ∈ {1, B}, heads ∈ {1, N}); sequence
    /// b reads the top-left `[Sq_b, Skv_b]` corner. Modes 0 and 1.
    Dense(DenseMask<'a>),
    /// CANN's compressed mask for modes 2, 3, 4, 6, 7, 8: its content is fixed by the mode, so
    /// the kernels generate the pattern from the mode's formula.
    Compressed,
    /// An explicit mask (modes 0 and 1) whose values are not in this view: they are the call's
    /// `atten_mask` tensor, which the caller applies where it lies (the composite on its
    /// device). The mode's rule (`rule`) applies as with `Dense`; [`VarlenProblem::allowed`]
    /// reads the rule alone. Host kernels replace it with `Dense` over the tensor's host copy.
    DenseElsewhere,
}

/// An explicit `attenMask`, row-major `[batch, heads, rows, cols]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenseMask<'a> {
    /// The mask bytes (bool or uint8; non-zero = masked).
    pub data: &'a [u8],
    /// 1 (shared) or B.
    pub batch: usize,
    /// 1 (shared) or N.
    pub heads: usize,
    /// Rows (≥ every Sq_b).
    pub rows: usize,
    /// Columns (≥ every Skv_b).
    pub cols: usize,
}

impl<'a> DenseMask<'a> {
    /// The view of `data` of shape `[maxSq, maxSkv]` or `[B|1, N|1, maxSq, maxSkv]`; `None`
    /// for another rank or a data length that does not fill the shape.
    pub fn from_shape(data: &'a [u8], shape: &[usize]) -> Option<Self> {
        let (batch, heads, rows, cols) = match *shape {
            [r, c] => (1, 1, r, c),
            [b, h, r, c] => (b, h, r, c),
            _ => return None,
        };
        let len = [batch, heads, rows, cols]
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))?;
        (len == data.len()).then_some(Self {
            data,
            batch,
            heads,
            rows,
            cols,
        })
    }

    /// Whether (b, h, i, j) is masked.
    #[inline]
    pub fn masked(&self, b: usize, h: usize, i: usize, j: usize) -> bool {
        let b = if self.batch == 1 { 0 } else { b };
        let h = if self.heads == 1 { 0 } else { h };
        self.data[((b * self.heads + h) * self.rows + i) * self.cols + j] != 0
    }
}

/// Positional bias (`realShift` / `pseShift`), as f32 (the caller converts from the input dtype).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pse<'a> {
    /// No pse.
    None,
    /// External pse `[pseTotalLen]`: for each sequence b, `[N, Sq_b, Skv_b]` row-major,
    /// concatenated. Used with pseType 0 or 1.
    Dense(&'a [f32]),
    /// ALiBi slopes `[N]` or `[B, N]` (pseType 2 or 3).
    Alibi {
        /// The slopes.
        slopes: &'a [f32],
        /// Whether they are `[B, N]` (else `[N]`).
        per_batch: bool,
    },
    /// The ALiBi-compressed external pse `[Bp, N, 1024, S2]` (pseType 0 or 1): the last 1024
    /// rows of a Toeplitz `[S2, S2]` bias, S2 the longest KV length; see
    /// [`VarlenProblem::pse_value`] for the kernel's reading.
    AlibiCompressed {
        /// The values, row-major `[Bp, N, 1024, S2]`.
        data: &'a [f32],
        /// Bp (1 or B).
        batches: usize,
        /// S2.
        s2: usize,
    },
}

impl<'a> Pse<'a> {
    /// The kernels' view of a validated call's `realShift` held on the host: the pse tensor's
    /// values `pse` (flat, or ALiBi-compressed when its shape is 4-D) or the ALiBi slopes'
    /// `slopes` (`[N]`, or `[B, N]` when they hold more than `head_num`). `None` for neither.
    pub fn of_tensor(
        pse: Option<(&'a [f32], &[usize])>,
        slopes: Option<&'a [f32]>,
        head_num: usize,
    ) -> Self {
        match (pse, slopes) {
            (Some((data, &[batches, _, _, s2])), _) => Pse::AlibiCompressed { data, batches, s2 },
            (Some((data, _)), _) => Pse::Dense(data),
            (None, Some(slopes)) => Pse::Alibi {
                slopes,
                per_batch: slopes.len() != head_num,
            },
            (None, None) => Pse::None,
        }
    }
}

/// Rows of CANN's ALiBi-compressed pse.
pub const ALIBI_COMPRESSED_ROWS: usize = 1024;

/// Element (i, j) of sequence b, head h of an ALiBi-compressed pse `C = [Bp, N, 1024, S2]`, as
/// the arch32 kernel reads it in TND (`common/include/kernel/pse.h`, `PseAlibiComputeOffset`,
/// the `LAYOUT_TND` branch): with `threshold = S2 − 1024` and `d = (i − j) − threshold`, a block
/// starting at (row, column) reads `C[b % Bp, h, m + r, k + c]` from `(m, k) = (d, 0)` when
/// `d ≥ 0`, else `(0, −d)`. Within a block the position therefore depends on where the block
/// starts, and only a `C` that is constant along its diagonals (the last rows of a Toeplitz
/// ALiBi bias, which validation requires) gives one answer: the diagonal `p − q = d`, read here
/// at its first element. Only the lower triangle (`i ≥ j`) is read (`NeedPseAlibiCompute`);
/// the upper one is masked by the causal modes this pse requires, and gives 0 here.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn alibi_compressed_value(
    data: &[f32],
    batches: usize,
    s2: usize,
    heads: usize,
    b: usize,
    h: usize,
    i: usize,
    j: usize,
) -> f64 {
    match alibi_compressed_index(s2, i, j) {
        None => 0.0,
        Some(at) => {
            let base = ((b % batches) * heads + h) * ALIBI_COMPRESSED_ROWS * s2;
            data[base + at] as f64
        }
    }
}

/// Where [`alibi_compressed_value`] reads element (i, j) within one `[1024, S2]` slab (row-major
/// `p·S2 + q`), `None` above the diagonal (`i < j`, not read).
#[inline]
pub fn alibi_compressed_index(s2: usize, i: usize, j: usize) -> Option<usize> {
    if i < j {
        return None;
    }
    let d = (i - j) as i64 - (s2 as i64 - ALIBI_COMPRESSED_ROWS as i64);
    let (p, q) = if d >= 0 {
        (d as usize, 0)
    } else {
        (0, d.unsigned_abs() as usize)
    };
    Some(p * s2 + q)
}

/// Which key columns a query row of one sequence may attend, before any explicit mask:
/// `j` is allowed iff `j < prefix` or `d_min ≤ j − i ≤ d_max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRule {
    /// Smallest allowed `j − i`.
    pub d_min: i64,
    /// Largest allowed `j − i`.
    pub d_max: i64,
    /// Columns `j < prefix` are always allowed (mode 6), 0 otherwise.
    pub prefix: i64,
}

impl SeqRule {
    /// Everything allowed.
    pub const FULL: SeqRule = SeqRule {
        d_min: i64::MIN,
        d_max: i64::MAX,
        prefix: 0,
    };

    /// Whether (i, j) passes the rule.
    #[inline]
    pub fn allows(&self, i: usize, j: usize) -> bool {
        let d = j as i64 - i as i64;
        (j as i64) < self.prefix || (self.d_min <= d && d <= self.d_max)
    }

    /// The allowed column range `[lo, hi)` of row `i` out of `skv` columns (the band part;
    /// prefix columns `< prefix` are allowed in addition).
    #[inline]
    pub fn band_columns(&self, i: usize, skv: usize) -> (usize, usize) {
        let lo = (i as i64).saturating_add(self.d_min).max(0);
        let hi = (i as i64).saturating_add(self.d_max).saturating_add(1);
        let hi = hi.clamp(0, skv as i64);
        (lo.min(hi) as usize, hi as usize)
    }
}

/// A whole varlen problem: shapes, attributes and the optional inputs that shape the scores.
#[derive(Debug, Clone)]
pub struct VarlenProblem<'a> {
    /// Shapes and per-sequence lengths.
    pub dims: VarlenDims,
    /// Scalar attributes.
    pub attrs: VarlenAttrs,
    /// `attenMask`.
    pub atten_mask: AttenMask<'a>,
    /// `realShift` / `pseShift` or ALiBi slopes.
    pub pse: Pse<'a>,
    /// Bit-packed `dropMask`, read when `keep_prob < 1`.
    pub drop_mask: Option<&'a [u8]>,
    /// `prefix` (mode 6): per-sequence count of always-visible leading key columns.
    pub prefix: Option<&'a [i64]>,
    /// `qStartIdx` (ALiBi position offset of the query block), 0 when absent.
    pub q_start_idx: i64,
    /// `kvStartIdx` (ALiBi position offset of the key block), 0 when absent.
    pub kv_start_idx: i64,
    /// `sink`: per query head, an unscaled logit added to the softmax denominator.
    pub sink: Option<&'a [f32]>,
}

impl<'a> VarlenProblem<'a> {
    /// A problem with no mask, pse, dropout or sink.
    pub fn new(dims: VarlenDims, attrs: VarlenAttrs) -> Self {
        Self {
            dims,
            attrs,
            atten_mask: AttenMask::None,
            pse: Pse::None,
            drop_mask: None,
            prefix: None,
            q_start_idx: 0,
            kv_start_idx: 0,
            sink: None,
        }
    }

    /// The sequence that modes 7/8 treat as a band: the last (7) or first (8) with Sq > 0.
    pub fn band_sequence(&self) -> Option<usize> {
        let non_empty = |b: &usize| self.dims.seq_q[*b] > 0;
        match self.attrs.sparse_mode {
            SparseMode::RightDownCausalBand => (0..self.dims.batch()).rev().find(non_empty),
            SparseMode::BandLeftUpCausal => (0..self.dims.batch()).find(non_empty),
            _ => None,
        }
    }

    /// The positional rule of sequence `b` (spec §1). With no `attenMask`, everything is
    /// computed whatever the mode says — CANN's rule.
    pub fn rule(&self, b: usize) -> SeqRule {
        let a = &self.attrs;
        let (sq, skv) = (self.dims.seq_q[b] as i64, self.dims.seq_kv[b] as i64);
        let delta = skv - sq;
        let band = SeqRule {
            d_min: delta.saturating_sub(a.pre_tokens),
            d_max: delta.saturating_add(a.next_tokens),
            prefix: 0,
        };
        let causal = |d_max| SeqRule {
            d_min: i64::MIN,
            d_max,
            prefix: 0,
        };
        if matches!(self.atten_mask, AttenMask::None) {
            return SeqRule::FULL;
        }
        match a.sparse_mode {
            SparseMode::DefaultMask => SeqRule {
                d_min: a.pre_tokens.saturating_neg(),
                d_max: a.next_tokens,
                prefix: 0,
            },
            SparseMode::AllMask => SeqRule::FULL,
            SparseMode::LeftUpCausal => causal(0),
            SparseMode::RightDownCausal => causal(delta),
            SparseMode::Band => band,
            SparseMode::PrefixCompress => SeqRule {
                prefix: self.prefix.map_or(0, |p| p[b]),
                ..causal(delta)
            },
            SparseMode::RightDownCausalBand if self.band_sequence() == Some(b) => band,
            SparseMode::RightDownCausalBand => causal(delta),
            SparseMode::BandLeftUpCausal if self.band_sequence() == Some(b) => band,
            SparseMode::BandLeftUpCausal => causal(0),
        }
    }

    /// The explicit mask, if the mode reads one.
    pub fn dense_mask(&self) -> Option<&DenseMask<'a>> {
        match &self.atten_mask {
            AttenMask::Dense(m) => Some(m),
            _ => None,
        }
    }

    /// Whether (b, h, i, j) takes part in the softmax.
    #[inline]
    pub fn allowed(&self, rule: &SeqRule, b: usize, h: usize, i: usize, j: usize) -> bool {
        rule.allows(i, j) && !self.dense_mask().is_some_and(|m| m.masked(b, h, i, j))
    }

    /// The pse term added to the *scaled* score for pseType 0/2/3, or to the unscaled
    /// `QKᵀ` for pseType 1; `pse_offset` is where sequence b starts in a dense pse.
    #[inline]
    pub fn pse_value(&self, pse_offset: usize, b: usize, h: usize, i: usize, j: usize) -> f64 {
        match self.pse {
            Pse::None => 0.0,
            Pse::Dense(p) => {
                let (sq, skv) = (self.dims.seq_q[b], self.dims.seq_kv[b]);
                p[pse_offset + (h * sq + i) * skv + j] as f64
            }
            Pse::Alibi { slopes, per_batch } => {
                let n = self.dims.head_num;
                let slope = slopes[if per_batch { b * n + h } else { h }] as f64;
                self.alibi_bias(slope, i, j)
            }
            Pse::AlibiCompressed { data, batches, s2 } => {
                alibi_compressed_value(data, batches, s2, self.dims.head_num, b, h, i, j)
            }
        }
    }

    /// The ALiBi bias of (i, j) for one slope (pseType 2: `−slope·|Δ|`, pseType 3:
    /// `−slope·√|Δ|`, Δ measured from `qStartIdx` / `kvStartIdx`).
    #[inline]
    pub fn alibi_bias(&self, slope: f64, i: usize, j: usize) -> f64 {
        let dist =
            ((j as i64 + self.kv_start_idx) - (i as i64 + self.q_start_idx)).unsigned_abs() as f64;
        match self.attrs.pse_type {
            PseType::InnerMulAddSqrt => -slope * dist.sqrt(),
            _ => -slope * dist,
        }
    }

    /// The score `s_ij` from the raw dot product `qk = q_i · k_j` (spec §2).
    #[inline]
    pub fn score(&self, qk: f64, pse: f64) -> f64 {
        match self.attrs.pse_type {
            PseType::OuterAddMul => self.attrs.scale * (qk + pse),
            _ => self.attrs.scale * qk + pse,
        }
    }

    /// Elements of a dense pse, `pseTotalLen = Σ_b N·Sq_b·Skv_b`.
    pub fn pse_total_len(&self) -> usize {
        let n = self.dims.head_num;
        (0..self.dims.batch())
            .map(|b| n * self.dims.seq_q[b] * self.dims.seq_kv[b])
            .sum()
    }

    /// Start of each sequence's block in a dense pse (`Σ_{b'<b} N·Sq_b'·Skv_b'`).
    pub fn pse_offsets(&self) -> Vec<usize> {
        let n = self.dims.head_num;
        let per_seq: Vec<usize> = (0..self.dims.batch())
            .map(|b| n * self.dims.seq_q[b] * self.dims.seq_kv[b])
            .collect();
        exclusive_prefix_sum(&per_seq)
    }

    /// The dropout factor of element `e` (`bit/keepProb`), 1 without dropout.
    #[inline]
    pub fn dropout_factor(&self, e: usize) -> f64 {
        match self.drop_mask {
            Some(m) if self.attrs.keep_prob < 1.0 => {
                if crate::dropout::kept(m, e) {
                    1.0 / self.attrs.keep_prob
                } else {
                    0.0
                }
            }
            _ => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_round_trip_with_empty_sequence() {
        let lens = lengths_from_cumulative(&[2, 4, 4, 6, 8]).unwrap();
        assert_eq!(lens, vec![2, 2, 0, 2, 2]);
        assert_eq!(cumulative_from_lengths(&lens), vec![2, 4, 4, 6, 8]);
        assert_eq!(lengths_from_cumulative(&[2, 1]), None);
        assert_eq!(lengths_from_cumulative(&[2, 5, 9, 0, 0]), None);
        assert_eq!(
            lengths_from_varlen_cumulative(&[2, 5, 9, 0, 0]),
            Some((vec![2, 3, 4, 0, 0], 9))
        );
        assert_eq!(
            lengths_from_varlen_cumulative(&[0, 0]),
            Some((vec![0, 0], 0))
        );
        // A zero that is not in the tail is a decrease.
        assert_eq!(lengths_from_varlen_cumulative(&[2, 0, 9]), None);
        assert_eq!(lengths_from_varlen_cumulative(&[2, 5, 3, 0]), None);
        assert_eq!(lengths_from_cumulative(&[-1]), None);
    }

    #[test]
    fn stat_index_layouts() {
        // sequence starting at token 3 with 2 rows, N = 4, head 1, row 1.
        assert_eq!(
            SoftmaxLayout::SameAsInput.stat_index(3, 2, 4, 1, 1),
            (4 * 4 + 1) * 8
        );
        assert_eq!(
            SoftmaxLayout::SequenceHeadMajor.stat_index(3, 2, 4, 1, 1),
            (3 * 4 + 2 + 1) * 8
        );
    }

    #[test]
    fn band_columns_match_allows() {
        let rules = [
            SeqRule::FULL,
            SeqRule {
                d_min: -2,
                d_max: 1,
                prefix: 0,
            },
            SeqRule {
                d_min: i64::MIN,
                d_max: -3,
                prefix: 0,
            },
            SeqRule {
                d_min: 5,
                d_max: i64::MAX,
                prefix: 0,
            },
        ];
        for r in rules {
            for i in 0..6 {
                let (lo, hi) = r.band_columns(i, 7);
                for j in 0..7 {
                    assert_eq!(r.allows(i, j), lo <= j && j < hi, "{r:?} {i} {j}");
                }
            }
        }
    }
}
