//! The plain-data description of `aclnnIncreFlashAttentionV4`: its layouts, modes, the argument struct of one
//! call and the addressing and masking rules every implementation shares (the f64 reference
//! in `burn-ascend-kernels`, the fast CPU kernels, the simulation, the aclnn builders).

use crate::post_quant::PostQuant;
use crate::Element as RefElem;

/// Score given to a masked token (spec §5: "1 replaces the score with −1e12").
pub const IFA_MASKED_SCORE: f64 = -1e12;

/// `inputLayout` of query, output and contiguous / tensor-list KV. With S = 1 the query and
/// output flat index is `(b·N + h)·D + d` in all three layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfaLayout {
    /// KV `(B, S, Nkv·D)`
    Bsh,
    /// KV `(B, S, Nkv, D)`
    Bsnd,
    /// KV `(B, Nkv, S, D)`
    Bnsd,
}

impl IfaLayout {
    /// The `inputLayout` attribute string.
    pub fn as_attr(self) -> &'static str {
        match self {
            Self::Bsh => "BSH",
            Self::Bsnd => "BSND",
            Self::Bnsd => "BNSD",
        }
    }

    /// The layout of an `inputLayout` string; `None` for strings IFA does not take.
    pub fn from_attr(s: &str) -> Option<Self> {
        [Self::Bsh, Self::Bsnd, Self::Bnsd]
            .into_iter()
            .find(|l| l.as_attr() == s)
    }
}

/// Paged KV cache layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagedLayout {
    /// `(blocknum, blockSize, Nkv·D)`: element `[blk, off, n·D + d]`.
    Bsh,
    /// `(blocknum, Nkv, blockSize, D)`: element `[blk, n, off, d]` (docs: only with query BNSD).
    Bnsd,
}

/// Where key and value come from. Key and value always share one form (inexpressible
/// otherwise).
#[derive(Clone, Copy, Debug)]
pub enum KvInput<'a, T> {
    /// One tensor each, `(B, kv_seq, …)` in the input layout.
    Contiguous {
        key: &'a [T],
        value: &'a [T],
        kv_seq: usize,
    },
    /// Tensor-list form: `B` tensors each, tensor `b` is `(1, S_b, …)` in the input layout
    /// with `S_b = key[b].len() / (Nkv·D)`.
    TensorList {
        key: &'a [&'a [T]],
        value: &'a [&'a [T]],
    },
    /// Page attention: token `t` of batch `b` is in block `block_table[b·max_blocks_per_seq +
    /// t / block_size]` at offset `t % block_size`.
    Paged {
        key_cache: &'a [T],
        value_cache: &'a [T],
        layout: PagedLayout,
        block_table: &'a [i32],
        max_blocks_per_seq: usize,
        block_size: usize,
    },
}

/// `attenMask` of shape `(B, S)`, `(B, 1, S)` or `(B, 1, 1, S)`: element `[b, t]` at
/// `b·cols + t`; non-zero = masked. Precondition: `cols >= ` every accessed `t + 1`
/// (paged: `cols >= max_blocks_per_seq·block_size`).
#[derive(Clone, Copy, Debug)]
pub struct IfaMask<'a> {
    pub data: &'a [u8],
    pub cols: usize,
}

/// `pseShift` of shape `(B, N, 1, S)` (`batched`) or `(1, N, 1, S)`: element `[b', h, 0, t]` at
/// `(b'·N + h)·cols + t`. Same `cols` precondition as the mask.
#[derive(Clone, Copy, Debug)]
pub struct IfaPse<'a, T> {
    pub data: &'a [T],
    pub batched: bool,
    pub cols: usize,
}

/// `antiquantScale` / `antiquantOffset`, widened to f32 (the device takes the query dtype or
/// FLOAT32; f16/bf16 → f32 is exact).
///
/// Per-tensor: shape `(2)`, `scale[0]` for K, `scale[1]` for V. Per-channel: shapes
/// `(2, Nkv, 1, D)`, `(2, Nkv, D)`, `(2, H)` all flatten to `[kv][n·D + d]`, i.e. index
/// `kv·Nkv·D + n·D + d`. `offset` has the same shape; absent → 0.
#[derive(Clone, Copy, Debug)]
pub struct Antiquant<'a> {
    pub scale: &'a [f32],
    pub offset: Option<&'a [f32]>,
    pub per_channel: bool,
}

impl Antiquant<'_> {
    /// `x = (x_int8 + offset) · scale`. `kv` is 0 for K, 1 for V.
    pub fn apply(&self, x: f64, kv: usize, channel: usize, channels: usize) -> f64 {
        let idx = if self.per_channel {
            kv * channels + channel
        } else {
            kv
        };
        let offset = self.offset.map_or(0.0, |o| o[idx] as f64);
        (x + offset) * self.scale[idx] as f64
    }
}

/// IFA's output post-quantisation ([`PostQuant`], the PFA rule; source: ops-transformer
/// `vf_post_quant.h`). `scale.len()` is 1 (per-tensor) or `N·D` (per-channel, index
/// `h·D + d`; the docs' parameter table says "(D·N), N为numKeyValueHeads" but the 约束说明 say
/// the product equals H for BSH output, i.e. query heads — the reference follows the latter,
/// UNCONFIRMED).
pub type IfaPostQuant<'a> = PostQuant<'a>;

/// Inputs of one IFA V4 call. Field names follow the aclnn parameters.
///
/// Dimensions: `B = batch`, `N = num_heads`, `Nkv = num_key_value_heads` (0 → N),
/// `D = head_dim`. Query and output: `B·N·D` elements (`(B,N,1,D)`, `(B,1,N,D)` or `(B,1,H)`).
///
/// `KV_S(b)`: `kv_seq` (Contiguous), `S_b` (TensorList), `max_blocks_per_seq·block_size` (Paged).
///
/// Preconditions (the caller validates; violating them may panic, never UB):
/// - `N >= 1`, `Nkv` is 0 or divides `N`; `query.len() >= B·N·D`;
/// - Contiguous: key/value `>= B·kv_seq·Nkv·D`; TensorList: `B` tensors each, `key[b].len() ==
///   value[b].len()`, a multiple of `Nkv·D`;
/// - Paged: `actual_seq_lengths` present; `block_table.len() >= B·max_blocks_per_seq`;
///   every block id used by a valid token is in `[0, blocknum)`; caches long enough;
/// - `actual_seq_lengths`: absent, length 1 (broadcast) or length `>= B`; `len_b` in
///   `[0, KV_S(b) − pad]` with `pad` the applied [`Self::left_padding`] (values are not
///   clamped: a window start below 0 panics);
/// - mask / pse `cols` cover every valid `t`; pse `data.len() >= (B|1)·N·cols`;
/// - antiquant: required for int8 KV (otherwise raw int8 values are used as-is); lengths as in
///   [`Antiquant`].
#[derive(Clone, Copy, Debug)]
pub struct IncreFlashAttentionArgs<'a, Q, KV> {
    pub query: &'a [Q],
    pub kv: KvInput<'a, KV>,
    pub input_layout: IfaLayout,
    pub batch: usize,
    pub num_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub scale: f64,
    pub pse_shift: Option<IfaPse<'a, Q>>,
    pub atten_mask: Option<IfaMask<'a>>,
    pub actual_seq_lengths: Option<&'a [i64]>,
    pub antiquant: Option<Antiquant<'a>>,
    /// `kvPaddingSize`; negative behaves as 0. Applied only as [`Self::left_padding`] says.
    pub kv_padding_size: Option<i64>,
    /// Device precision selection; no effect on the reference.
    pub inner_precise: i64,
}

impl<'a, Q: RefElem, KV: RefElem> IncreFlashAttentionArgs<'a, Q, KV> {
    /// No optional inputs, `Nkv = N`.
    pub fn new(
        query: &'a [Q],
        kv: KvInput<'a, KV>,
        input_layout: IfaLayout,
        batch: usize,
        num_heads: usize,
        head_dim: usize,
        scale: f64,
    ) -> Self {
        Self {
            query,
            kv,
            input_layout,
            batch,
            num_heads,
            num_key_value_heads: 0,
            head_dim,
            scale,
            pse_shift: None,
            atten_mask: None,
            actual_seq_lengths: None,
            antiquant: None,
            kv_padding_size: None,
            inner_precise: 1,
        }
    }

    pub fn nkv(&self) -> usize {
        if self.num_key_value_heads == 0 {
            self.num_heads
        } else {
            self.num_key_value_heads
        }
    }

    /// KV S of batch `b` (see the struct docs).
    pub fn kv_s(&self, b: usize) -> usize {
        match self.kv {
            KvInput::Contiguous { kv_seq, .. } => kv_seq,
            KvInput::TensorList { key, .. } => key[b].len() / (self.nkv() * self.head_dim),
            KvInput::Paged {
                max_blocks_per_seq,
                block_size,
                ..
            } => max_blocks_per_seq * block_size,
        }
    }

    /// Raw (not yet dequantised) K (`kv = 0`) or V (`kv = 1`) element of token `t`, kv head
    /// `n`, dim `d`.
    pub fn kv_raw(&self, kv: usize, b: usize, t: usize, n: usize, d: usize) -> f64 {
        let (nkv, dh) = (self.nkv(), self.head_dim);
        let contiguous = |buf: &[KV], bb: usize, s: usize| -> f64 {
            let idx = match self.input_layout {
                IfaLayout::Bsh | IfaLayout::Bsnd => ((bb * s + t) * nkv + n) * dh + d,
                IfaLayout::Bnsd => ((bb * nkv + n) * s + t) * dh + d,
            };
            buf[idx].to_f64()
        };
        match self.kv {
            KvInput::Contiguous { key, value, kv_seq } => {
                contiguous(if kv == 0 { key } else { value }, b, kv_seq)
            }
            KvInput::TensorList { key, value } => {
                let buf = if kv == 0 { key[b] } else { value[b] };
                contiguous(buf, 0, self.kv_s(b))
            }
            KvInput::Paged {
                key_cache,
                value_cache,
                layout,
                block_table,
                max_blocks_per_seq,
                block_size,
            } => {
                let blk = block_table[b * max_blocks_per_seq + t / block_size] as usize;
                let off = t % block_size;
                let idx = match layout {
                    PagedLayout::Bsh => (blk * block_size + off) * nkv * dh + n * dh + d,
                    PagedLayout::Bnsd => ((blk * nkv + n) * block_size + off) * dh + d,
                };
                let buf = if kv == 0 { key_cache } else { value_cache };
                buf[idx].to_f64()
            }
        }
    }

    pub fn kv_elem(&self, kv: usize, b: usize, t: usize, n: usize, d: usize) -> f64 {
        let x = self.kv_raw(kv, b, t, n, d);
        match self.antiquant {
            Some(aq) => aq.apply(x, kv, n * self.head_dim + d, self.nkv() * self.head_dim),
            None => x,
        }
    }

    /// The left padding the kernel applies: `kvPaddingSize` (negative → 0) only with one
    /// batch-continuous K/V tensor (Contiguous, or a one-tensor list with B = 1) and
    /// `actual_seq_lengths`; otherwise CANN ignores it without an error
    /// (`incre_flash_attention_tiling_check.cpp`, `CheckSupportKVLeftPadding`).
    pub fn left_padding(&self) -> Option<i64> {
        let pad = self.kv_padding_size?;
        let batch_continuous = match self.kv {
            KvInput::Contiguous { .. } => true,
            KvInput::TensorList { key, .. } => key.len() == 1,
            KvInput::Paged { .. } => false,
        };
        (batch_continuous && self.actual_seq_lengths.is_some()).then_some(pad.max(0))
    }

    /// Valid absolute token window `[start, start + len)` of batch `b`.
    pub fn window(&self, b: usize) -> (usize, usize) {
        let kv_s = self.kv_s(b) as i64;
        let len = match self.actual_seq_lengths {
            None => kv_s,
            Some(l) => (if l.len() == 1 { l[0] } else { l[b] }).max(0),
        };
        let start = match self.left_padding() {
            None => 0,
            Some(pad) => kv_s - pad - len,
        };
        assert!(
            start >= 0 && len >= 0,
            "IFA precondition violated: window start {start}, len {len} (batch {b})"
        );
        (start as usize, len as usize)
    }
}
