//! Reference varlen flash attention, forward and backward (spec §1–4).
//!
//! Per sequence b, query head h (kv head `h / G`), row i, over the allowed columns j:
//! `s_ij = score(q_i·k_j, pse_ij)`, `m_i = max(sink_h, max_j s_ij)`,
//! `l_i = Σ_j exp(s_ij − m_i) + exp(sink_h − m_i)`, `P_ij = exp(s_ij − m_i) / l_i`,
//! `out_i = Σ_j P_ij·drop_ij·V_j`.
//!
//! Conventions for rows with nothing to attend (documented in docs/api.md):
//! - `Skv_b = 0`: out = 0, max = 0, sum = 0 (CANN skips the sequence);
//! - every column masked, no sink: out = 0, max = −FLT_MAX, sum = +FLT_MAX (CANN's invalid-row
//!   handling), so the recomputed P is 0 and the row's gradients are 0;
//! - every column masked, with a sink: max = sink, sum = 1, out = 0.

use crate::Element;
use burn_ascend_contract::varlen::{Pse, PseType, VarlenProblem};

/// Forward outputs: `attentionOut [Tq, N, Dv]`, `softmaxMax` and `softmaxSum` (`T·N·8` f32 in
/// the problem's softmax layout).
#[derive(Debug, Clone, PartialEq)]
pub struct VarlenFwdOut<T> {
    /// `attentionOut`.
    pub attention_out: Vec<T>,
    /// `softmaxMax`.
    pub softmax_max: Vec<f32>,
    /// `softmaxSum`.
    pub softmax_sum: Vec<f32>,
}

/// Backward outputs: `dq [Tq, N, D]`, `dk [Tkv, Nkv, D]`, `dv [Tkv, Nkv, Dv]`, `dpse
/// [pseTotalLen]` when the problem has an external pse, and `dsink [N]` when it has a sink.
#[derive(Debug, Clone, PartialEq)]
pub struct VarlenBwdOut<T> {
    /// `dqOut`.
    pub dq: Vec<T>,
    /// `dkOut`.
    pub dk: Vec<T>,
    /// `dvOut`.
    pub dv: Vec<T>,
    /// `dpseOut` for a dense pse (pseType 0/1), laid out as the pse: per sequence b,
    /// `[N, Sq_b, Skv_b]`. With dS = ∂L/∂s (s the score): pseType 0 adds the pse after the
    /// scaling (`s = scale·qk + pse`), so dpse = dS; pseType 1 adds it before
    /// (`s = scale·(qk + pse)`), so dpse = scale·dS. Masked positions get 0. ALiBi slopes
    /// (pseType 2/3) are not differentiated (`None`): they parametrise a generated bias and
    /// CANN has no output for them.
    pub dpse: Option<Vec<T>>,
    /// `dsinkOut`.
    pub dsink: Option<Vec<f32>>,
}

/// The factor from dS (the gradient of the score) to dpse, for a dense pse; `None` when the
/// problem has no differentiable pse.
pub fn dpse_factor(p: &VarlenProblem) -> Option<f64> {
    match (p.pse, p.attrs.pse_type) {
        (Pse::Dense(_), PseType::OuterAddMul) => Some(p.attrs.scale),
        (Pse::Dense(_), _) => Some(1.0),
        _ => None,
    }
}

/// Everything about one (sequence, head) pair the loops need.
struct Block {
    b: usize,
    h: usize,
    kvh: usize,
    q0: usize,
    kv0: usize,
    sq: usize,
    skv: usize,
    pse0: usize,
    /// First dropout element of this (b, h) block.
    drop0: usize,
}

fn blocks(p: &VarlenProblem) -> Vec<Block> {
    let d = &p.dims;
    let (q_off, kv_off, pse_off) = (d.q_offsets(), d.kv_offsets(), p.pse_offsets());
    let mut out = Vec::new();
    for b in 0..d.batch() {
        for h in 0..d.head_num {
            out.push(Block {
                b,
                h,
                kvh: h / d.group(),
                q0: q_off[b],
                kv0: kv_off[b],
                sq: d.seq_q[b],
                skv: d.seq_kv[b],
                pse0: pse_off[b],
                drop0: pse_off[b] + h * d.seq_q[b] * d.seq_kv[b],
            });
        }
    }
    out
}

/// Scores of row i over all columns; `None` where masked.
fn row_scores<T: Element>(
    p: &VarlenProblem,
    blk: &Block,
    i: usize,
    q: &[T],
    k: &[T],
) -> Vec<Option<f64>> {
    let dims = &p.dims;
    let (n, nkv, dd) = (dims.head_num, dims.kv_head_num, dims.head_dim);
    let rule = p.rule(blk.b);
    let qi = &q[((blk.q0 + i) * n + blk.h) * dd..][..dd];
    (0..blk.skv)
        .map(|j| {
            if !p.allowed(&rule, blk.b, blk.h, i, j) {
                return None;
            }
            let kj = &k[((blk.kv0 + j) * nkv + blk.kvh) * dd..][..dd];
            let qk: f64 = qi
                .iter()
                .zip(kj)
                .map(|(a, b)| a.to_f64() * b.to_f64())
                .sum();
            Some(p.score(qk, p.pse_value(blk.pse0, blk.b, blk.h, i, j)))
        })
        .collect()
}

/// Forward. Preconditions: the problem and slice lengths were validated
/// (`burn_ascend_ops::varlen::validate_fwd`).
pub fn varlen_fwd<T: Element>(p: &VarlenProblem, q: &[T], k: &[T], v: &[T]) -> VarlenFwdOut<T> {
    let dims = &p.dims;
    let (n, nkv, dv) = (dims.head_num, dims.kv_head_num, dims.value_dim);
    let mut out = vec![0.0f64; dims.t_q() * n * dv];
    let mut smax = vec![0.0f32; dims.stats_len()];
    let mut ssum = vec![0.0f32; dims.stats_len()];
    for blk in blocks(p) {
        if blk.skv == 0 {
            continue; // out, max and sum stay 0
        }
        let sink = p.sink.map(|s| s[blk.h] as f64);
        for i in 0..blk.sq {
            let s = row_scores(p, &blk, i, q, k);
            let row_max = s
                .iter()
                .flatten()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
            let m = sink.map_or(row_max, |sk| sk.max(row_max));
            let (m_out, l_out) = if m == f64::NEG_INFINITY {
                (f32::MIN, f32::MAX) // fully masked, no sink: P = 0
            } else {
                let mut l = sink.map_or(0.0, |sk| (sk - m).exp());
                let o = &mut out[((blk.q0 + i) * n + blk.h) * dv..][..dv];
                for (j, sj) in s.iter().enumerate() {
                    if let Some(sj) = sj {
                        let e = (sj - m).exp();
                        l += e;
                        let w = e * p.dropout_factor(blk.drop0 + i * blk.skv + j);
                        let vj = &v[((blk.kv0 + j) * nkv + blk.kvh) * dv..][..dv];
                        o.iter_mut().zip(vj).for_each(|(o, x)| *o += w * x.to_f64());
                    }
                }
                o.iter_mut().for_each(|o| *o /= l);
                (m as f32, l as f32)
            };
            let at = p
                .attrs
                .softmax_layout
                .stat_index(blk.q0, blk.sq, n, blk.h, i);
            smax[at..at + 8].fill(m_out);
            ssum[at..at + 8].fill(l_out);
        }
    }
    VarlenFwdOut {
        attention_out: out.into_iter().map(T::from_f64).collect(),
        softmax_max: smax,
        softmax_sum: ssum,
    }
}

/// Backward, recomputing P from the saved statistics as CANN does.
/// `attention_in` is the forward output (`attentionIn`), `dy` its gradient.
#[allow(clippy::too_many_arguments)]
pub fn varlen_bwd<T: Element>(
    p: &VarlenProblem,
    q: &[T],
    k: &[T],
    v: &[T],
    dy: &[T],
    attention_in: &[T],
    softmax_max: &[f32],
    softmax_sum: &[f32],
) -> VarlenBwdOut<T> {
    let dims = &p.dims;
    let (n, nkv, dd, dv) = (
        dims.head_num,
        dims.kv_head_num,
        dims.head_dim,
        dims.value_dim,
    );
    let scale = p.attrs.scale;
    let mut dq = vec![0.0f64; dims.t_q() * n * dd];
    let mut dk = vec![0.0f64; dims.t_kv() * nkv * dd];
    let mut dvv = vec![0.0f64; dims.t_kv() * nkv * dv];
    let mut dsink = vec![0.0f64; n];
    let dpse_factor = dpse_factor(p);
    let mut dpse = vec![0.0f64; dpse_factor.map_or(0, |_| p.pse_total_len())];
    for blk in blocks(p) {
        if blk.skv == 0 {
            continue;
        }
        for i in 0..blk.sq {
            let at = p
                .attrs
                .softmax_layout
                .stat_index(blk.q0, blk.sq, n, blk.h, i);
            let (m, l) = (softmax_max[at] as f64, softmax_sum[at] as f64);
            let row = (blk.q0 + i) * n + blk.h;
            let dyi = &dy[row * dv..][..dv];
            let oi = &attention_in[row * dv..][..dv];
            // D_i = dO_i · O_i (O includes dropout), so Σ_j P_ij dP_ij = D_i.
            let d_i: f64 = dyi
                .iter()
                .zip(oi)
                .map(|(a, b)| a.to_f64() * b.to_f64())
                .sum();
            if let Some(sink) = p.sink {
                dsink[blk.h] -= ((sink[blk.h] as f64 - m).exp() / l) * d_i;
            }
            let qi: Vec<f64> = q[row * dd..][..dd].iter().map(|x| x.to_f64()).collect();
            for (j, sj) in row_scores(p, &blk, i, q, k).into_iter().enumerate() {
                let Some(sj) = sj else { continue };
                let pij = (sj - m).exp() / l;
                let drop = p.dropout_factor(blk.drop0 + i * blk.skv + j);
                let kv_row = (blk.kv0 + j) * nkv + blk.kvh;
                let vj = &v[kv_row * dv..][..dv];
                let dp: f64 = dyi
                    .iter()
                    .zip(vj)
                    .map(|(a, b)| a.to_f64() * b.to_f64())
                    .sum();
                let ds = pij * (dp * drop - d_i);
                if let Some(f) = dpse_factor {
                    dpse[blk.pse0 + (blk.h * blk.sq + i) * blk.skv + j] = f * ds;
                }
                for (x, g) in dvv[kv_row * dv..][..dv].iter_mut().zip(dyi) {
                    *x += pij * drop * g.to_f64();
                }
                let kj = &k[kv_row * dd..][..dd];
                for (x, kx) in dq[row * dd..][..dd].iter_mut().zip(kj) {
                    *x += scale * ds * kx.to_f64();
                }
                for (x, qx) in dk[kv_row * dd..][..dd].iter_mut().zip(&qi) {
                    *x += scale * ds * qx;
                }
            }
        }
    }
    let cast = |v: Vec<f64>| v.into_iter().map(T::from_f64).collect();
    VarlenBwdOut {
        dq: cast(dq),
        dk: cast(dk),
        dv: cast(dvv),
        dpse: dpse_factor.map(|_| cast(dpse)),
        dsink: p
            .sink
            .map(|_| dsink.into_iter().map(|x| x as f32).collect()),
    }
}
