//! Fast fused inference attention (`aclnnFusedInferAttentionScoreV4`) on the CPU: FIA's two
//! regimes on the two fast kernels that already exist, the reference for the rest.
//!
//! - **decode** (query S = 1 outside TND) runs the flash-decoding kernel ([`super::decode`])
//!   on the same contiguous or paged KV, with the learnable sink entering the merge of its
//!   chunks as one more partial result (so it costs nothing per token) and the LSE read from
//!   the merged `(max, sum)`;
//! - **prefill** (S > 1, or TND) packs each batch's actual rows into TND and runs the tiled
//!   varlen forward ([`super::varlen_fwd`]), whose sink and statistics are FIA's: the LSE is
//!   `max + ln sum`;
//! - anything either kernel does not model (pseShift, query/KV left padding, per-token
//!   antiquant, antiquant in prefill, Dv ≠ D in decode, a dense mask in TND, a row with every
//!   column masked under a dense mask, a batch with no query row) takes the f64 reference
//!   ([`crate::reference::fia`]), rounded to f32. [`FiaPath`] says which one ran.
//!
//! The semantics are the reference's (see its module docs); the tests compare the two on every
//! path.

use crate::Element;
use burn_ascend_contract::fia::{len_at, FiaArgs, FiaDequant, FiaDequantIndex, FiaKvSlices};
use burn_ascend_contract::incre::{
    Antiquant, IfaLayout, IfaMask, IncreFlashAttentionArgs, KvInput, PagedLayout,
};
use burn_ascend_contract::prompt::{PfaLayout, PfaSparseMode};
use burn_ascend_contract::varlen::{
    AttenMask, DenseMask, SoftmaxLayout, SparseMode, VarlenAttrs, VarlenDims, VarlenProblem,
};

/// Which implementation computed a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FiaPath {
    /// The flash-decoding kernel.
    Decode,
    /// The tiled varlen forward on the packed actual rows.
    Prefill,
    /// The f64 reference (a field neither kernel models).
    Reference,
}

/// `attentionOut` (f32, in the output layout), `softmaxLse` (as the reference's) and the path.
#[derive(Clone, Debug, PartialEq)]
pub struct FiaFastOut {
    pub attention_out: Vec<f32>,
    pub softmax_lse: Vec<f32>,
    pub path: FiaPath,
}

/// FIA with the reference's arguments and semantics, on the fast kernels where they apply.
///
/// Preconditions: those of [`FiaArgs`] (the caller validates); violating them may panic, never
/// cause undefined behaviour.
pub fn fused_infer_attention<T: Element>(a: &FiaArgs<T>) -> FiaFastOut {
    if let Some((attention_out, softmax_lse)) = decode(a) {
        return FiaFastOut {
            attention_out,
            softmax_lse,
            path: FiaPath::Decode,
        };
    }
    if let Some((attention_out, softmax_lse)) = prefill(a) {
        return FiaFastOut {
            attention_out,
            softmax_lse,
            path: FiaPath::Prefill,
        };
    }
    let r = crate::reference::fia::fused_infer_attention(a);
    FiaFastOut {
        attention_out: r.attention_out.into_iter().map(|x| x as f32).collect(),
        softmax_lse: r.softmax_lse,
        path: FiaPath::Reference,
    }
}

/// Per-batch clamped KV lengths (FIA's reading of `actualSeqLengthsKv`, non-TND).
fn kv_lengths<T: Element>(a: &FiaArgs<T>) -> Vec<i64> {
    let full = a.kv_extent();
    (0..a.batch)
        .map(|b| len_at(a.actual_seq_lengths_kv, b, full) as i64)
        .collect()
}

/// IFA's combined `antiquantScale` / `antiquantOffset` (`[2]` or `[2, Nkv·D]`) from FIA's
/// separate key and value parameters, when both are per-tensor or both per-channel.
fn combined_antiquant(
    k: &FiaDequant,
    v: &FiaDequant,
    channels: usize,
) -> Option<(Vec<f32>, Option<Vec<f32>>, bool)> {
    let per_channel = match (k.index, v.index) {
        (FiaDequantIndex::PerTensor, FiaDequantIndex::PerTensor) => false,
        (FiaDequantIndex::PerChannel, FiaDequantIndex::PerChannel) => true,
        _ => return None,
    };
    let width = if per_channel { channels } else { 1 };
    let mut scale = Vec::with_capacity(2 * width);
    scale.extend_from_slice(&k.scale[..width]);
    scale.extend_from_slice(&v.scale[..width]);
    let offset = (k.offset.is_some() || v.offset.is_some()).then(|| {
        let mut o = Vec::with_capacity(2 * width);
        for q in [k, v] {
            match q.offset {
                Some(x) => o.extend_from_slice(&x[..width]),
                None => o.extend(std::iter::repeat_n(0.0, width)),
            }
        }
        o
    });
    Some((scale, offset, per_channel))
}

/// Decode on the flash-decoding kernel, or `None` when the call needs the reference.
fn decode<T: Element>(a: &FiaArgs<T>) -> Option<(Vec<f32>, Vec<f32>)> {
    if !a.decode()
        || a.pse_shift.is_some()
        || a.query_padding_size.is_some()
        || a.kv_padding_size.is_some()
        || a.head_dim_v != a.head_dim
        || a.key_antiquant.is_some() != a.value_antiquant.is_some()
        || (0..a.batch).any(|b| len_at(a.actual_seq_lengths, b, 1) != 1)
    {
        return None;
    }
    let (n, nkv, d) = (a.num_heads, a.nkv(), a.head_dim);
    let lens = kv_lengths(a);
    // Only modes 0 and 1 read the mask in decode (2–4 have no effect at S = 1).
    let mask = a.atten_mask.filter(|_| {
        matches!(
            a.sparse_mode,
            PfaSparseMode::DefaultMask | PfaSparseMode::AllMask
        )
    });
    // IFA's mask is `(B, cols)`, one row per batch; a row with every valid column masked is
    // uniform in IFA's semantics and empty in FIA's, so it takes the reference.
    let ifa_mask: Option<Vec<u8>> = match mask {
        None => None,
        Some(m) => {
            let mut rows = Vec::with_capacity(a.batch * m.cols);
            for (b, &len) in lens.iter().enumerate() {
                let bb = if m.batched { b } else { 0 };
                let row = &m.data[bb * m.rows * m.cols..(bb * m.rows + 1) * m.cols];
                if len > 0 && row[..len as usize].iter().all(|&x| x != 0) {
                    return None;
                }
                rows.extend_from_slice(row);
            }
            Some(rows)
        }
    };
    let aq = match (a.key_antiquant, a.value_antiquant) {
        (Some(k), Some(v)) => Some(combined_antiquant(&k, &v, nkv * d)?),
        _ => None,
    };
    let (layout, kv) = match a.kv {
        FiaKvSlices::Contiguous { key, value } => (
            match a.input_layout {
                PfaLayout::Bsh => IfaLayout::Bsh,
                PfaLayout::Bsnd => IfaLayout::Bsnd,
                PfaLayout::Bnsd | PfaLayout::BnsdBsnd => IfaLayout::Bnsd,
                PfaLayout::Tnd => return None,
            },
            KvInput::Contiguous {
                key,
                value,
                kv_seq: a.kv_seq,
            },
        ),
        FiaKvSlices::Paged {
            key_cache,
            value_cache,
            layout,
            block_table,
            max_blocks_per_seq,
            block_size,
        } => (
            // The query layout of a paged call only decides how Q and the output are read;
            // at S = 1 BSH, BSND and BNSD are the same bytes.
            IfaLayout::Bsnd,
            KvInput::Paged {
                key_cache,
                value_cache,
                layout,
                block_table,
                max_blocks_per_seq,
                block_size,
            },
        ),
    };
    let mut args = IncreFlashAttentionArgs::new(a.query, kv, layout, a.batch, n, d, a.scale);
    args.num_key_value_heads = a.num_key_value_heads;
    args.actual_seq_lengths = Some(&lens);
    if let Some(m) = &ifa_mask {
        args.atten_mask = Some(IfaMask {
            data: m,
            cols: m.len() / a.batch.max(1),
        });
    }
    if let Some((scale, offset, per_channel)) = &aq {
        args.antiquant = Some(Antiquant {
            scale,
            offset: offset.as_deref(),
            per_channel: *per_channel,
        });
    }
    let (out, mut lse) = super::decode::incre_flash_attention_with_sink(&args, a.learnable_sink);
    // The kernel drops the key offset's per-row constant `scale·Σ_d q_d·s_d·o_d` (it cancels
    // in the softmax); the LSE needs it back.
    if let Some(k) = a.key_antiquant.filter(|k| k.offset.is_some()) {
        let channel = |hk: usize, di: usize| match k.index {
            FiaDequantIndex::PerChannel => hk * d + di,
            _ => 0,
        };
        let offset = k.offset.expect("filtered");
        let g = n / nkv;
        for b in 0..a.batch {
            for h in 0..n {
                let l = &mut lse[b * n + h];
                if !l.is_finite() {
                    continue;
                }
                let c: f64 = (0..d)
                    .map(|di| {
                        let q = a.query[(b * n + h) * d + di].to_f64();
                        let ch = channel(h / g, di);
                        q * k.scale[ch] as f64 * offset[ch] as f64
                    })
                    .sum();
                *l = (*l as f64 + a.scale * c) as f32;
            }
        }
    }
    Some((out, lse))
}

/// Copies K (`which = 0`) or V (`1`) row `t` of batch `b` (all kv heads, `[Nkv, dim]`) into
/// `dst`.
fn copy_kv_row<T: Element>(a: &FiaArgs<T>, which: usize, b: usize, t: usize, dst: &mut [T]) {
    let nkv = a.nkv();
    let dim = dst.len() / nkv;
    match a.kv {
        FiaKvSlices::Contiguous { key, value } => {
            let src = if which == 0 { key } else { value };
            match a.input_layout {
                PfaLayout::Bsh | PfaLayout::Bsnd => {
                    let at = (b * a.kv_seq + t) * nkv * dim;
                    dst.copy_from_slice(&src[at..at + nkv * dim]);
                }
                PfaLayout::Tnd => dst.copy_from_slice(&src[t * nkv * dim..(t + 1) * nkv * dim]),
                PfaLayout::Bnsd | PfaLayout::BnsdBsnd => {
                    for (n, o) in dst.chunks_exact_mut(dim).enumerate() {
                        let at = ((b * nkv + n) * a.kv_seq + t) * dim;
                        o.copy_from_slice(&src[at..at + dim]);
                    }
                }
            }
        }
        FiaKvSlices::Paged {
            key_cache,
            value_cache,
            layout,
            block_table,
            max_blocks_per_seq,
            block_size,
        } => {
            let src = if which == 0 { key_cache } else { value_cache };
            let blk = block_table[b * max_blocks_per_seq + t / block_size] as usize;
            let off = t % block_size;
            match layout {
                PagedLayout::Bsh => {
                    let at = (blk * block_size + off) * nkv * dim;
                    dst.copy_from_slice(&src[at..at + nkv * dim]);
                }
                PagedLayout::Bnsd => {
                    for (n, o) in dst.chunks_exact_mut(dim).enumerate() {
                        let at = ((blk * nkv + n) * block_size + off) * dim;
                        o.copy_from_slice(&src[at..at + dim]);
                    }
                }
            }
        }
    }
}

/// Prefill on the tiled varlen forward, or `None` when the call needs the reference.
fn prefill<T: Element>(a: &FiaArgs<T>) -> Option<(Vec<f32>, Vec<f32>)> {
    if a.decode()
        || a.pse_shift.is_some()
        || a.query_padding_size.is_some()
        || a.kv_padding_size.is_some()
        || a.key_antiquant.is_some()
        || a.value_antiquant.is_some()
    {
        return None;
    }
    let (n, nkv, d, dv) = (a.num_heads, a.nkv(), a.head_dim, a.head_dim_v);
    let sparse_mode = match a.sparse_mode {
        PfaSparseMode::DefaultMask => SparseMode::DefaultMask,
        PfaSparseMode::AllMask => SparseMode::AllMask,
        PfaSparseMode::LeftUpCausal => SparseMode::LeftUpCausal,
        PfaSparseMode::RightDownCausal => SparseMode::RightDownCausal,
        PfaSparseMode::Band => SparseMode::Band,
    };
    // A dense mask is read at absolute rows and columns; outside TND (no padding) those are
    // each batch's local ones, as the varlen kernel reads them.
    let atten_mask = match a.atten_mask {
        None => AttenMask::None,
        Some(_) if sparse_mode.takes_compressed_mask() => AttenMask::Compressed,
        Some(_) if a.tnd() => return None,
        Some(m) => AttenMask::Dense(DenseMask {
            data: m.data,
            batch: if m.batched { a.batch } else { 1 },
            heads: 1,
            rows: m.rows,
            cols: m.cols,
        }),
    };
    let seqs: Vec<(usize, usize, usize, usize)> = (0..a.batch).map(|b| a.sequence(b)).collect();
    if seqs.iter().all(|s| s.1 == 0) {
        return None;
    }
    let (tq, tkv) = (
        seqs.iter().map(|s| s.1).sum::<usize>(),
        seqs.iter().map(|s| s.3).sum::<usize>(),
    );
    // Pack each batch's actual rows (TND: its cumulative range) into `[T, N, D]`.
    let zero = T::from_f64(0.0);
    let mut q = vec![zero; tq * n * d];
    let mut rows = q.chunks_exact_mut(n * d);
    for (b, &(q0, sq, _, _)) in seqs.iter().enumerate() {
        for i in 0..sq {
            let dst = rows.next().expect("sized");
            let row = q0 + i;
            match a.input_layout {
                PfaLayout::Bsh | PfaLayout::Bsnd => {
                    let at = (b * a.q_seq + row) * n * d;
                    dst.copy_from_slice(&a.query[at..at + n * d]);
                }
                PfaLayout::Tnd => dst.copy_from_slice(&a.query[row * n * d..(row + 1) * n * d]),
                PfaLayout::Bnsd | PfaLayout::BnsdBsnd => {
                    for (h, o) in dst.chunks_exact_mut(d).enumerate() {
                        let at = ((b * n + h) * a.q_seq + row) * d;
                        o.copy_from_slice(&a.query[at..at + d]);
                    }
                }
            }
        }
    }
    let (mut k, mut v) = (vec![zero; tkv * nkv * d], vec![zero; tkv * nkv * dv]);
    let (mut kr, mut vr) = (k.chunks_exact_mut(nkv * d), v.chunks_exact_mut(nkv * dv));
    for (b, &(_, _, k0, skv)) in seqs.iter().enumerate() {
        for t in k0..k0 + skv {
            copy_kv_row(a, 0, b, t, kr.next().expect("sized"));
            copy_kv_row(a, 1, b, t, vr.next().expect("sized"));
        }
    }
    let mut attrs = VarlenAttrs::new(a.scale);
    attrs.pre_tokens = a.pre_tokens;
    attrs.next_tokens = a.next_tokens;
    attrs.sparse_mode = sparse_mode;
    attrs.softmax_layout = SoftmaxLayout::SameAsInput;
    let dims = VarlenDims {
        head_num: n,
        kv_head_num: nkv,
        head_dim: d,
        value_dim: dv,
        seq_q: seqs.iter().map(|s| s.1).collect(),
        seq_kv: seqs.iter().map(|s| s.3).collect(),
    };
    let mut p = VarlenProblem::new(dims, attrs);
    p.atten_mask = atten_mask;
    p.sink = a.learnable_sink;
    let r = super::varlen_fwd(&p, &q, &k, &v);
    // Scatter back into the output layout; rows outside the actual lengths stay 0 / +inf.
    let mut out = vec![0.0f32; a.output_len()];
    let mut lse = vec![f32::INFINITY; a.lse_len()];
    let mut packed = 0;
    for (b, &(q0, sq, _, skv)) in seqs.iter().enumerate() {
        let rule = p.rule(b);
        for i in 0..sq {
            // A row with no column to attend: zeros from the kernel, `+inf` LSE (the
            // kernel's statistics say max = sink or −FLT_MAX there).
            let (lo, hi) = rule.band_columns(i, skv);
            let live = (lo..hi).any(|j| !p.dense_mask().is_some_and(|m| m.masked(b, 0, i, j)));
            let t = packed + i;
            for h in 0..n {
                let src = &r.attention_out[(t * n + h) * dv..(t * n + h + 1) * dv];
                for (di, x) in src.iter().enumerate() {
                    out[a.out_index(b, q0 + i, h, di)] = x.to_f64() as f32;
                }
                if live {
                    let s = SoftmaxLayout::SameAsInput.stat_index(0, 0, n, h, t);
                    lse[a.lse_index(b, q0 + i, h)] = r.softmax_max[s] + r.softmax_sum[s].ln();
                }
            }
        }
        packed += sq;
    }
    Some((out, lse))
}
