//! Tiled varlen flash-attention backward (FlashAttention-2: P recomputed from the saved
//! statistics), deterministic. One task per (sequence, kv head, group of kv spans) computes
//! dK / dV of its spans and their dQ contributions into a buffer of its own (five GEMMs per
//! tile pair, S and dP computed once); the group buffers are added in a fixed order, and the
//! dsink partials come from the saved statistics alone.

use std::sync::Mutex;

use rayon::prelude::*;

use super::buffer;
use super::gemm::{matmul, Mat};
use super::tile::{store, vectorized, Ctx, Kind, ProbRows, Seq, SimdKernel};
use crate::reference::varlen::{dpse_factor, VarlenBwdOut};
use crate::Element;
use burn_ascend_contract::varlen::VarlenProblem;

/// Working memory of a backward rayon job: tile buffers and the K, V, dK, dV of a span.
struct Bufs {
    /// Scaled Q and dO of a query tile (`M × D`).
    q: Vec<f32>,
    dout: Vec<f32>,
    /// K and V rows of a span.
    k: Vec<f32>,
    v: Vec<f32>,
    /// Scores, then P (`M × bk_bwd`).
    s: Vec<f32>,
    /// dP, then dS.
    dp: Vec<f32>,
    /// Dropout factors and P∘factors (dropout only).
    drop: Vec<f32>,
    pd: Vec<f32>,
    /// Per row: max, 1/sum, D = dO·O.
    m: Vec<f32>,
    inv_l: Vec<f32>,
    delta: Vec<f32>,
    /// dK and dV accumulators of a span.
    acc_a: Vec<f32>,
    acc_b: Vec<f32>,
}

impl Bufs {
    fn new(ctx: &Ctx) -> Self {
        let rows = ctx.bq * ctx.g;
        let cols = ctx.bk_bwd;
        // Rows of a span (no more than the longest sequence has).
        let span = SPAN.min(ctx.seqs.iter().map(|s| s.skv).max().unwrap_or(0));
        let drop = if ctx.dropout.is_some() {
            rows * cols
        } else {
            0
        };
        Self {
            q: vec![0.0; rows * ctx.d],
            dout: vec![0.0; rows * ctx.dv],
            k: vec![0.0; span * ctx.d],
            v: vec![0.0; span * ctx.dv],
            s: vec![0.0; rows * cols],
            dp: vec![0.0; rows * cols],
            drop: vec![0.0; drop],
            pd: vec![0.0; drop],
            m: vec![0.0; rows],
            inv_l: vec![0.0; rows],
            delta: vec![0.0; rows],
            acc_a: vec![0.0; span * ctx.d],
            acc_b: vec![0.0; span * ctx.dv],
        }
    }
}

/// Key columns of a *span*: the kv rows one task owns (dK / dV) while it loops over every
/// query tile that sees them. A constant, so the work split never depends on the thread count.
/// 1024 against 512 / 2048: 5–10 % less time on the bench's backward at D = 64 and 128 (the
/// query side of a tile is loaded once per span; K, V, dK, dV of a span at D = 128 are 2 MiB).
const SPAN: usize = 1024;

/// Span groups per (sequence, kv head): group `gi` takes spans `gi, gi + groups, …` in order
/// and accumulates their dQ contributions into its own f32 buffer (like FlashAttention-2's
/// f32 `dq_accum`), so dQ needs no racing accumulation; the groups' buffers are added in
/// group order at the end. The buffers are at most `MAX_GROUPS ×` the size of dQ in f32:
/// O(T), whatever the sequence length. The count per sequence aims at [`TARGET_TASKS`] tasks
/// in all (at least 2 groups): on the bench (4 sequences × 2 kv heads) that is 2, which took
/// the same time as 4 there and on one 8192-token sequence (2 threads), with half the memory.
const MAX_GROUPS: usize = 4;

/// Tasks the span groups aim at (for machines with more cores than the 2 tuned on).
const TARGET_TASKS: usize = 16;

/// Backward with the reference's signature and conventions
/// ([`crate::reference::varlen::varlen_bwd`]). `attention_in` is the forward output, `dy` its
/// gradient, `softmax_max` / `softmax_sum` the forward statistics in the problem's layout.
///
/// One pass, five GEMMs per (query tile, kv tile): S = Q·Kᵀ, dP = dO·Vᵀ, dV += Pᵀ·dO,
/// dK += dSᵀ·Q and dQ += dS·K. One task per (sequence, kv head, group of kv spans), see the module docs of `cpu`.
///
/// Deterministic: bitwise-identical results for any number of rayon threads (every sum has a
/// fixed order: tasks write disjoint rows, and the per-group dQ buffers are added in group
/// order).
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
    let ctx = Ctx::new(p);
    let dims = &p.dims;
    let (n, nkv, g, d, dv) = (ctx.n, ctx.nkv, ctx.g, ctx.d, ctx.dv);
    if n == 0 || d == 0 {
        // Nothing to differentiate (empty heads, or D = 0 where dO·O = 0): zero gradients,
        // without chunking by an empty row below.
        let zero = T::from_f64(0.0);
        return VarlenBwdOut {
            dq: vec![zero; dims.t_q() * n * d],
            dk: vec![zero; dims.t_kv() * nkv * d],
            dv: vec![zero; dims.t_kv() * nkv * dv],
            dpse: dpse_factor(p).map(|_| vec![zero; p.pse_total_len()]),
            dsink: ctx.sink.map(|_| vec![0.0; n]),
        };
    }
    // D = dO·O per (token, head), f64-accumulated.
    let mut delta = vec![0.0f32; dims.t_q() * n];
    delta.par_chunks_mut(n).enumerate().for_each(|(t, row)| {
        for (h, x) in row.iter_mut().enumerate() {
            let o = (t * n + h) * dv;
            *x = dy[o..o + dv]
                .iter()
                .zip(&attention_in[o..o + dv])
                .map(|(a, b)| a.to_f64() * b.to_f64())
                .sum::<f64>() as f32;
        }
    });
    let st = Stats {
        max: softmax_max,
        sum: softmax_sum,
        delta: &delta,
    };

    // Span groups per (sequence, kv head): enough for about `TARGET_TASKS` tasks in all
    // (more when there are few sequences and kv heads), at least 2, at most `MAX_GROUPS`, never
    // more than the sequence has spans. A function of the problem, not of the thread count.
    let pairs = nkv * ctx.seqs.iter().filter(|s| s.sq > 0 && s.skv > 0).count();
    let max_groups = TARGET_TASKS.div_ceil(pairs.max(1)).clamp(2, MAX_GROUPS);
    let groups = |s: &Seq| {
        if s.sq == 0 {
            0
        } else {
            s.skv.div_ceil(SPAN).min(max_groups)
        }
    };
    // dQ/scale buffers: for each sequence, group and kv head, `Sq × G × D` f32 (the rows of
    // a query tile are contiguous there).
    let part_len = |s: &Seq| s.sq * g * d;
    let total: usize = ctx.seqs.iter().map(|s| groups(s) * nkv * part_len(s)).sum();
    let mut parts = buffer::zeros(total);
    let mut dk = buffer::filled(dims.t_kv() * nkv * d, T::from_f64(0.0));
    let mut dvv = buffer::filled(dims.t_kv() * nkv * dv, T::from_f64(0.0));
    // dpse (dense pse only): each (sequence, head, row, column) is one task's, written once
    // from the tile's dS under a lock (a copy per tile, next to five GEMMs).
    let dpse_mul = dpse_factor(p).map(|f| f as f32);
    let mut dpse = dpse_mul.map(|_| vec![T::from_f64(0.0); p.pse_total_len()]);
    {
        let dpse_out = dpse.as_deref_mut().map(Mutex::new);
        let dpse_out = dpse_out.as_ref().zip(dpse_mul);
        // Tasks in (sequence, group, kv head) order, each with its own dQ buffer.
        let mut tasks = Vec::new();
        let mut rest = &mut parts[..];
        for (si, s) in ctx.seqs.iter().enumerate() {
            for gi in 0..groups(s) {
                for kvh in 0..nkv {
                    let (mine, tail) = rest.split_at_mut(part_len(s));
                    rest = tail;
                    tasks.push((si, gi, kvh, mine));
                }
            }
        }
        let sinks = Mutex::new((&mut dk[..], &mut dvv[..]));
        tasks.into_par_iter().for_each_init(
            || Bufs::new(&ctx),
            |buf, (si, gi, kvh, dq_part)| {
                let s = &ctx.seqs[si];
                let ngroups = groups(s);
                // Query tiles whose dQ rows hold a value yet: the first GEMM into a tile
                // overwrites instead of adding. The buffer is zeroed (tiles no span reaches
                // stay 0) but its pages are fresh: a read first would map the shared zero
                // page and the write after it fault again, with a TLB shootdown across the
                // threads per 4 KiB page — 40 % of the backward's time at D = 128 before.
                let mut written = vec![false; s.sq.div_ceil(ctx.bq)];
                for c0 in (gi * SPAN..s.skv).step_by(ngroups * SPAN) {
                    let c1 = (c0 + SPAN).min(s.skv);
                    span_task(
                        &ctx,
                        buf,
                        &st,
                        (q, k, v, dy),
                        s,
                        kvh,
                        (c0, c1),
                        dq_part,
                        &mut written,
                        dpse_out,
                    );
                    let mut guard = sinks.lock().unwrap_or_else(|e| e.into_inner());
                    let (dk, dvv) = &mut *guard;
                    for (jj, j) in (c0..c1).enumerate() {
                        let row = (s.kv0 + j) * nkv + kvh;
                        store(
                            &buf.acc_a[jj * d..(jj + 1) * d],
                            &mut dk[row * d..(row + 1) * d],
                            1.0,
                        );
                        store(
                            &buf.acc_b[jj * dv..(jj + 1) * dv],
                            &mut dvv[row * dv..(row + 1) * dv],
                            1.0,
                        );
                    }
                }
            },
        );
    }

    // dQ = scale · Σ_groups (in group order).
    let mut dq = buffer::filled(dims.t_q() * n * d, T::from_f64(0.0));
    {
        let mut offs = Vec::with_capacity(ctx.seqs.len());
        let mut at = 0;
        for s in &ctx.seqs {
            offs.push(at);
            at += groups(s) * nkv * part_len(s);
        }
        let parts = &parts;
        dq.par_chunks_mut(n * d).enumerate().for_each_init(
            || vec![0.0f32; d],
            |row, (t, dq_t)| {
                // The sequence holding query token `t`.
                let si = ctx.seqs.partition_point(|s| s.q0 + s.sq <= t);
                let Some(s) = ctx.seqs.get(si) else {
                    return;
                };
                let i = t - s.q0;
                let ng = groups(s);
                for h in 0..n {
                    let (kvh, gg) = (h / g, h % g);
                    row.fill(0.0);
                    for gi in 0..ng {
                        let start = offs[si] + (gi * nkv + kvh) * part_len(s) + (i * g + gg) * d;
                        for (x, y) in row.iter_mut().zip(&parts[start..start + d]) {
                            *x += y;
                        }
                    }
                    store(row, &mut dq_t[h * d..(h + 1) * d], ctx.scale);
                }
            },
        );
    }

    // dsink_h = −Σ_i exp(sink_h − m_i) / l_i · D_i: partials per query tile, added in task
    // order.
    let dsink = ctx.sink.map(|sink| {
        let partials: Vec<(usize, Vec<f64>)> = ctx
            .query_tasks()
            .into_par_iter()
            .map(|(si, kvh, i0)| {
                let s = &ctx.seqs[si];
                let rows = ctx.bq.min(s.sq - i0);
                let mut part = vec![0.0f64; g];
                for r in 0..rows * g {
                    let i = i0 + r / g;
                    let h = ctx.head(kvh, r);
                    let at = ctx.stat_index(s, h, i);
                    let pi = (sink[h] as f64 - st.max[at] as f64).exp() * (1.0 / st.sum[at]) as f64;
                    part[r % g] -= pi * st.delta[(s.q0 + i) * n + h] as f64;
                }
                (kvh, part)
            })
            .collect();
        let mut acc = vec![0.0f64; n];
        for (kvh, part) in &partials {
            for (gi, x) in part.iter().enumerate() {
                acc[kvh * g + gi] += x;
            }
        }
        acc.into_iter().map(|x| x as f32).collect()
    });
    VarlenBwdOut {
        dq,
        dk,
        dv: dvv,
        dpse,
        dsink,
    }
}

/// The saved statistics and D.
struct Stats<'a> {
    max: &'a [f32],
    sum: &'a [f32],
    delta: &'a [f32],
}

/// Loads the per-row inputs of a query tile: scaled q, dO, max, 1/sum, D.
#[allow(clippy::too_many_arguments)]
fn load_query_side<T: Element>(
    ctx: &Ctx,
    buf: &mut Bufs,
    st: &Stats,
    q: &[T],
    dy: &[T],
    s: &Seq,
    kvh: usize,
    i0: usize,
    rows: usize,
) {
    ctx.load_q_rows(q, ctx.d, s, kvh, i0, rows, ctx.scale, &mut buf.q);
    ctx.load_q_rows(dy, ctx.dv, s, kvh, i0, rows, 1.0, &mut buf.dout);
    for r in 0..rows * ctx.g {
        let i = i0 + r / ctx.g;
        let h = ctx.head(kvh, r);
        let at = ctx.stat_index(s, h, i);
        buf.m[r] = st.max[at];
        buf.inv_l[r] = 1.0 / st.sum[at];
        buf.delta[r] = st.delta[(s.q0 + i) * ctx.n + h];
    }
}

/// For a (query tile, kv tile) pair whose q side is in `buf.q`/`buf.dout` and kv side in
/// `buf.k[koff..]`/`buf.v[koff..]` (rows `[a, a + nc)`): computes P into `buf.s`, dS into
/// `buf.dp` and, with dropout, P∘factors into `buf.pd`. Leading dimension `ld`.
#[allow(clippy::too_many_arguments)]
fn probs_and_ds(
    ctx: &Ctx,
    buf: &mut Bufs,
    s: &Seq,
    kvh: usize,
    i0: usize,
    rows: usize,
    a: usize,
    nc: usize,
    koff: usize,
    kind: Kind,
    ld: usize,
) {
    let (d, dv) = (ctx.d, ctx.dv);
    let mm = rows * ctx.g;
    matmul(
        &mut buf.s,
        ld,
        Mat::row_major(&buf.q, mm, d, d),
        Mat::row_major(&buf.k[koff * d..], nc, d, d).t(),
        false,
        1.0,
    );
    if ctx.elementwise_scores() || kind == Kind::Partial {
        ctx.fix_scores(&mut buf.s, ld, s, kvh, i0, rows, a, nc, kind);
    }
    vectorized(ProbRows {
        s: &mut buf.s,
        m: &buf.m,
        inv_l: &buf.inv_l,
        rows: mm,
        nc,
        ld,
    });
    matmul(
        &mut buf.dp,
        ld,
        Mat::row_major(&buf.dout, mm, dv, dv),
        Mat::row_major(&buf.v[koff * dv..], nc, dv, dv).t(),
        false,
        1.0,
    );
    let dropout = ctx.dropout.is_some();
    if dropout {
        ctx.drop_factors(&mut buf.drop, ld, s, kvh, i0, rows, a, nc);
    }
    vectorized(DsRows {
        buf,
        mm,
        nc,
        ld,
        dropout,
    });
}

/// dS = P∘(dP∘factors − D) in place of dP and, with dropout, P∘factors into `buf.pd`.
struct DsRows<'a> {
    buf: &'a mut Bufs,
    mm: usize,
    nc: usize,
    ld: usize,
    dropout: bool,
}

impl SimdKernel for DsRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        ds_rows(self.buf, self.mm, self.nc, self.ld, self.dropout);
    }
}

#[inline(always)]
fn ds_rows(buf: &mut Bufs, mm: usize, nc: usize, ld: usize, dropout: bool) {
    for r in 0..mm {
        let range = r * ld..r * ld + nc;
        let dl = buf.delta[r];
        let (p, dp) = (&buf.s[range.clone()], &mut buf.dp[range.clone()]);
        if dropout {
            let f = &buf.drop[range.clone()];
            let pd = &mut buf.pd[range];
            for (((x, &p), &f), y) in dp.iter_mut().zip(p).zip(f).zip(pd) {
                *x = p * (*x * f - dl);
                *y = p * f;
            }
        } else {
            for (x, &p) in dp.iter_mut().zip(p) {
                *x = p * (*x - dl);
            }
        }
    }
}

/// One span (kv rows `[c0, c1)` of kv head `kvh`): dK (unscaled by `scale`: q is pre-scaled)
/// into `buf.acc_a`, dV into `buf.acc_b`, and dQ/scale added into `dq_part` (the task's
/// buffer, `Sq × G × D`; written, not added, where `written[query tile]` is false),
/// looping over the query tiles that see the span; with `dpse`, the tiles' dS times the
/// pse factor into it.
#[allow(clippy::too_many_arguments)]
fn span_task<T: Element>(
    ctx: &Ctx,
    buf: &mut Bufs,
    st: &Stats,
    (q, k, v, dy): (&[T], &[T], &[T], &[T]),
    s: &Seq,
    kvh: usize,
    (c0, c1): (usize, usize),
    dq_part: &mut [f32],
    written: &mut [bool],
    dpse: Option<(&Mutex<&mut [T]>, f32)>,
) {
    let (d, dv, g) = (ctx.d, ctx.dv, ctx.g);
    let ncol = c1 - c0;
    ctx.load_kv_rows(k, d, s, kvh, c0, c1, &mut buf.k);
    ctx.load_kv_rows(v, dv, s, kvh, c0, c1, &mut buf.v);
    buf.acc_a[..ncol * d].fill(0.0);
    buf.acc_b[..ncol * dv].fill(0.0);
    let ld = ctx.bk_bwd;
    for i0 in (0..s.sq).step_by(ctx.bq) {
        let rows = ctx.bq.min(s.sq - i0);
        if ctx.classify(s, i0, i0 + rows, c0, c1).0 == Kind::Skip {
            continue;
        }
        let mm = rows * g;
        load_query_side(ctx, buf, st, q, dy, s, kvh, i0, rows);
        let dq_rows = &mut dq_part[i0 * g * d..(i0 * g + mm) * d];
        let written = &mut written[i0 / ctx.bq];
        for t0 in (c0..c1).step_by(ld) {
            let t1 = (t0 + ld).min(c1);
            let (kind, a, e) = ctx.classify(s, i0, i0 + rows, t0, t1);
            if kind == Kind::Skip {
                continue;
            }
            let (nc, off) = (e - a, a - c0);
            probs_and_ds(ctx, buf, s, kvh, i0, rows, a, nc, off, kind, ld);
            if let Some((out, mul)) = dpse {
                let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                for r in 0..mm {
                    let (i, h) = (i0 + r / g, ctx.head(kvh, r));
                    let start = s.pse0 + (h * s.sq + i) * s.skv + a;
                    store(
                        &buf.dp[r * ld..r * ld + nc],
                        &mut out[start..start + nc],
                        mul,
                    );
                }
            }
            let pd = if ctx.dropout.is_some() {
                &buf.pd
            } else {
                &buf.s
            };
            // dV += (P∘drop)ᵀ · dO
            matmul(
                &mut buf.acc_b[off * dv..],
                dv,
                Mat::row_major(pd, mm, nc, ld).t(),
                Mat::row_major(&buf.dout, mm, dv, dv),
                true,
                1.0,
            );
            // dK += dSᵀ · (scale·Q)
            matmul(
                &mut buf.acc_a[off * d..],
                d,
                Mat::row_major(&buf.dp, mm, nc, ld).t(),
                Mat::row_major(&buf.q, mm, d, d),
                true,
                1.0,
            );
            // dQ/scale += dS · K
            matmul(
                dq_rows,
                d,
                Mat::row_major(&buf.dp, mm, nc, ld),
                Mat::row_major(&buf.k[off * d..], nc, d, d),
                *written,
                1.0,
            );
            *written = true;
        }
    }
}
