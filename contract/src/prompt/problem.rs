//! The plain-data description of `aclnnPromptFlashAttention` (V1, V3): its layouts, modes, the argument struct of one
//! call and the addressing and masking rules every implementation shares (the f64 reference
//! in `burn-ascend-kernels`, the fast CPU kernels, the simulation, the aclnn builders).

use crate::post_quant::PostQuant;
use crate::Element as RefElem;

/// `inputLayout`. Q/K/V use the same layout; the output uses the same layout except for
/// `BnsdBsnd` (BNSD in, BSND out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PfaLayout {
    /// `(B, S, N·D)`
    Bsh,
    /// `(B, S, N, D)`
    Bsnd,
    /// `(B, N, S, D)`
    Bnsd,
    /// input `(B, N, S, D)`, output `(B, S, N, D)`
    BnsdBsnd,
    /// `(T, N, D)`; `actualSeqLengths` / `actualSeqLengthsKv` are cumulative and required.
    Tnd,
}

impl PfaLayout {
    /// The `inputLayout` attribute string.
    pub fn as_attr(self) -> &'static str {
        match self {
            Self::Bsh => "BSH",
            Self::Bsnd => "BSND",
            Self::Bnsd => "BNSD",
            Self::BnsdBsnd => "BNSD_BSND",
            Self::Tnd => "TND",
        }
    }

    /// The layout of an `inputLayout` string; `None` for strings PFA does not take.
    pub fn from_attr(s: &str) -> Option<Self> {
        [Self::Bsh, Self::Bsnd, Self::Bnsd, Self::BnsdBsnd, Self::Tnd]
            .into_iter()
            .find(|l| l.as_attr() == s)
    }
}

/// `sparseMode` values PFA V3 supports (5–8 are "暂不支持"). V1 behaves as `DefaultMask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PfaSparseMode {
    /// 0: `attenMask[i,j]` OR outside `i − pre ≤ j ≤ i + next`.
    DefaultMask,
    /// 1: `attenMask[i,j]` only.
    AllMask,
    /// 2: `j > i` (pre = INT_MAX, next = 0). The mask's contents are not read.
    LeftUpCausal,
    /// 3: `j > i + Skv_b − Sq_b`. The mask's contents are not read.
    RightDownCausal,
    /// 4: band from the bottom-right corner:
    /// valid iff `i − (pre − Skv + Sq) ≤ j ≤ i + (next + Skv − Sq)`. Mask contents not read.
    Band,
}

impl PfaSparseMode {
    /// CANN's integer (`sparseMode`).
    pub fn as_attr(self) -> i64 {
        self as i64
    }

    /// Maps the aclnn integer; `None` for unsupported values (5..=8 and anything else).
    pub fn from_attr(v: i64) -> Option<Self> {
        match v {
            0 => Some(Self::DefaultMask),
            1 => Some(Self::AllMask),
            2 => Some(Self::LeftUpCausal),
            3 => Some(Self::RightDownCausal),
            4 => Some(Self::Band),
            _ => None,
        }
    }
}

/// `attenMask`, 1 (non-zero) = masked.
///
/// Shapes `(Sq, Skv)`, `(1, Sq, Skv)`, `(1, 1, Sq, Skv)` → `batched = false`;
/// `(B, Sq, Skv)`, `(B, 1, Sq, Skv)` → `batched = true`. Element `[b', i, j]` is at
/// `(b'·rows + i)·cols + j` with `b' = b` if batched else 0; `i`, `j` are local to the batch
/// (TND: the mask is sliced `mask[:Sq_b, :Skv_b]` per sequence).
///
/// Preconditions: `data.len() >= (batched ? B : 1)·rows·cols`; `rows >= max Sq_b`,
/// `cols >= max Skv_b` (only read for sparse modes 0 and 1).
#[derive(Clone, Copy, Debug)]
pub struct PfaMask<'a> {
    pub data: &'a [u8],
    pub batched: bool,
    pub rows: usize,
    pub cols: usize,
}

impl<'a> PfaMask<'a> {
    /// The view of `data` with one of the shapes above: `(Sq, Skv)`, `(1|B, Sq, Skv)` or
    /// `(1|B, 1, Sq, Skv)`; `None` for any other rank.
    pub fn from_shape(data: &'a [u8], shape: &[usize]) -> Option<Self> {
        let (mb, rows, cols) = match *shape {
            [r, c] => (1, r, c),
            [b, r, c] | [b, _, r, c] => (b, r, c),
            _ => return None,
        };
        Some(Self {
            data,
            batched: mb != 1,
            rows,
            cols,
        })
    }

    pub fn masked(&self, b: usize, i: usize, j: usize) -> bool {
        let bb = if self.batched { b } else { 0 };
        self.data[(bb * self.rows + i) * self.cols + j] != 0
    }
}

/// `pseShift`, shape `(B, N, rows, cols)` (`batched = true`) or `(1, N, rows, cols)`.
/// Element `[b', h, i, j]` at `((b'·N + h)·rows + i)·cols + j`.
/// Preconditions: `rows >= Sq` (query S), `cols >= Skv` (key S), data long enough.
/// Not supported with TND.
#[derive(Clone, Copy, Debug)]
pub struct PseShift<'a, T> {
    pub data: &'a [T],
    pub batched: bool,
    pub rows: usize,
    pub cols: usize,
}

impl<'a, T> PseShift<'a, T> {
    /// The view of `data` of shape `(1|B, N, rows, cols)`; `None` for any other rank.
    pub fn from_shape(data: &'a [T], shape: &[usize]) -> Option<Self> {
        let [b, _, rows, cols] = *shape else {
            return None;
        };
        Some(Self {
            data,
            batched: b != 1,
            rows,
            cols,
        })
    }
}

/// PFA's output post-quantisation ([`PostQuant`]): `scale.len()` is 1 (per-tensor) or
/// `num_heads · head_dim_v` (per-channel; shapes `[H]`, `[1,1,H]`, `[N,D]`, `[1,N,1,D]`,
/// `[1,1,N,D]` all flatten to index `h·D + d`).
pub type PfaPostQuant<'a> = PostQuant<'a>;

/// Inputs of one PFA call. Field names follow the aclnn parameters.
///
/// Dimensions: `B = batch`, `N = num_heads`, `Nkv = num_key_value_heads` (0 → N),
/// `Sq = q_seq`, `Skv = kv_seq`, `D = head_dim` (Q and K), `Dv = head_dim_v` (V and output).
///
/// Buffer shapes (row-major):
/// - `Bsh`/`Bsnd`: query `(B, Sq, N, D)`, key `(B, Skv, Nkv, D)`, value `(B, Skv, Nkv, Dv)`;
/// - `Bnsd`/`BnsdBsnd`: query `(B, N, Sq, D)`, key `(B, Nkv, Skv, D)`, value `(B, Nkv, Skv, Dv)`;
/// - `Tnd`: `q_seq` is T1 (total query tokens), `kv_seq` is T2; query `(T1, N, D)`,
///   key `(T2, Nkv, D)`, value `(T2, Nkv, Dv)`.
///
/// Output (returned): `Bsh`/`Bsnd`/`BnsdBsnd`: `(B, Sq, N, Dv)`; `Bnsd`: `(B, N, Sq, Dv)`;
/// `Tnd`: `(T1, N, Dv)`.
///
/// Preconditions (the caller validates; violating them may panic, never UB):
/// - `N >= 1`, `Nkv` is 0 or divides `N`; buffers at least as long as the shapes above;
/// - `actual_seq_lengths` / `actual_seq_lengths_kv` (non-TND): each is absent (= Sq / Skv), of
///   length 1 (broadcast) or of length `>= B` (first B used); values in `[0, Sq]` / `[0, Skv]`
///   (negative values are treated as 0, values above S are clamped to S);
/// - TND: both are present, cumulative, non-decreasing, non-negative, of length exactly `B`,
///   last values `<= T1` / `<= T2`; `pse_shift` is `None`;
/// - `head_dim_v == head_dim` except in TND (docs: Q_D = K_D = 192, V_D ∈ {128, 192});
/// - mask/pse shapes as documented on [`PfaMask`] / [`PseShift`];
/// - with `atten_mask == None` the sparse mode and pre/next are ignored (no masking at all,
///   spec §1/§5); the docs require a (compressed) mask for sparse modes 2, 3, 4.
#[derive(Clone, Copy, Debug)]
pub struct PromptFlashAttentionArgs<'a, T> {
    pub query: &'a [T],
    pub key: &'a [T],
    pub value: &'a [T],
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
    /// Device precision selection; no effect on the reference (invalid rows are always zero).
    pub inner_precise: i64,
    pub actual_seq_lengths: Option<&'a [i64]>,
    pub actual_seq_lengths_kv: Option<&'a [i64]>,
    pub pse_shift: Option<PseShift<'a, T>>,
    pub atten_mask: Option<PfaMask<'a>>,
}

impl<'a, T: RefElem> PromptFlashAttentionArgs<'a, T> {
    /// Defaults: attributes set to the docs' recommended values
    /// (pre = 2147483647, next = 0 — note that without a mask they are ignored anyway),
    /// sparse mode 0, no optional inputs, `head_dim_v = head_dim`, `Nkv = N`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        query: &'a [T],
        key: &'a [T],
        value: &'a [T],
        input_layout: PfaLayout,
        batch: usize,
        q_seq: usize,
        kv_seq: usize,
        num_heads: usize,
        head_dim: usize,
        scale: f64,
    ) -> Self {
        Self {
            query,
            key,
            value,
            input_layout,
            batch,
            q_seq,
            kv_seq,
            num_heads,
            num_key_value_heads: 0,
            head_dim,
            head_dim_v: head_dim,
            scale,
            pre_tokens: 2_147_483_647,
            next_tokens: 0,
            sparse_mode: PfaSparseMode::DefaultMask,
            inner_precise: 0,
            actual_seq_lengths: None,
            actual_seq_lengths_kv: None,
            pse_shift: None,
            atten_mask: None,
        }
    }

    /// Number of output elements.
    pub fn output_len(&self) -> usize {
        let rows = match self.input_layout {
            PfaLayout::Tnd => self.q_seq,
            _ => self.batch * self.q_seq,
        };
        rows * self.num_heads * self.head_dim_v
    }
}

/// Per-batch length from an `actualSeqLengths`-style array (non-TND): absent → `full`,
/// length 1 → broadcast, else element `b`; clamped to `[0, full]`.
pub fn per_batch_len(lens: Option<&[i64]>, b: usize, full: usize) -> usize {
    match lens {
        None => full,
        Some(l) => {
            let v = if l.len() == 1 { l[0] } else { l[b] };
            (v.max(0) as u64).min(full as u64) as usize
        }
    }
}

/// `(start, len)` of sequence `b` from a cumulative array (TND).
pub fn cumulative(lens: &[i64], b: usize) -> (usize, usize) {
    let end = lens[b].max(0) as usize;
    let start = if b == 0 {
        0
    } else {
        lens[b - 1].max(0) as usize
    };
    (start, end.saturating_sub(start))
}
