//! Tiled varlen flash-attention backward (FlashAttention-2: P recomputed from the saved
//! statistics). Two passes, each writing disjoint outputs in a fixed reduction order:
//! dK/dV with one task per (sequence, kv head, kv tile), then dQ and the dsink partials with
//! one task per (sequence, kv head, query tile).

use std::sync::Mutex;

use rayon::prelude::*;

use super::gemm::{matmul, Mat};
use super::tile::{store, vectorized, Ctx, Kind, ProbRows, Seq, SimdKernel};
use crate::reference::varlen::VarlenGrads;
use crate::varlen::VarlenProblem;
use crate::Element;

/// Per-thread working memory of the backward (O(tile)).
struct Bufs {
    q: Vec<f32>,
    dout: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Scores, then P.
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
    /// dK (or dQ) and dV accumulators.
    acc_a: Vec<f32>,
    acc_b: Vec<f32>,
}

impl Bufs {
    fn new(ctx: &Ctx) -> Self {
        let rows = ctx.bq * ctx.g;
        let cols = ctx.bk.max(ctx.bk_bwd);
        let drop = if ctx.dropout.is_some() {
            rows * cols
        } else {
            0
        };
        Self {
            q: vec![0.0; rows * ctx.d],
            dout: vec![0.0; rows * ctx.dv],
            k: vec![0.0; cols * ctx.d],
            v: vec![0.0; cols * ctx.dv],
            s: vec![0.0; rows * cols],
            dp: vec![0.0; rows * cols],
            drop: vec![0.0; drop],
            pd: vec![0.0; drop],
            m: vec![0.0; rows],
            inv_l: vec![0.0; rows],
            delta: vec![0.0; rows],
            acc_a: vec![0.0; rows.max(cols) * ctx.d],
            acc_b: vec![0.0; cols * ctx.dv],
        }
    }
}

/// Backward with the reference's signature and conventions
/// ([`crate::reference::varlen::varlen_bwd`]). `attention_in` is the forward output, `dy` its
/// gradient, `softmax_max` / `softmax_sum` the forward statistics in the problem's layout.
///
/// Deterministic: bitwise-identical results for any number of rayon threads.
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
) -> VarlenGrads<T> {
    let ctx = Ctx::new(p);
    let dims = &p.dims;
    let (n, nkv, d, dv) = (ctx.n, ctx.nkv, ctx.d, ctx.dv);
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

    // Pass 1: dK, dV.
    let mut dk = vec![T::from_f64(0.0); dims.t_kv() * nkv * d];
    let mut dvv = vec![T::from_f64(0.0); dims.t_kv() * nkv * dv];
    {
        let sinks = Mutex::new((&mut dk[..], &mut dvv[..]));
        let mut tasks = Vec::new();
        for (si, s) in ctx.seqs.iter().enumerate() {
            if s.sq == 0 {
                continue; // no query rows: dK = dV = 0
            }
            for kvh in 0..nkv {
                for c0 in (0..s.skv).step_by(ctx.bk_bwd) {
                    tasks.push((si, kvh, c0));
                }
            }
        }
        tasks.into_par_iter().for_each_init(
            || Bufs::new(&ctx),
            |buf, (si, kvh, c0)| {
                let s = &ctx.seqs[si];
                let c1 = (c0 + ctx.bk_bwd).min(s.skv);
                dkdv_tile(&ctx, buf, &st, q, k, v, dy, s, kvh, c0, c1);
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
            },
        );
    }

    // Pass 2: dQ and the dsink partials (one per task, reduced below in task order).
    let mut dq = vec![T::from_f64(0.0); dims.t_q() * n * d];
    let partials: Vec<(usize, Vec<f64>)> = {
        let sink = Mutex::new(&mut dq[..]);
        ctx.query_tasks()
            .into_par_iter()
            .map_init(
                || Bufs::new(&ctx),
                |buf, (si, kvh, i0)| {
                    let s = &ctx.seqs[si];
                    let (rows, part) = dq_tile(&ctx, buf, &st, q, k, v, dy, s, kvh, i0);
                    let mut dq = sink.lock().unwrap_or_else(|e| e.into_inner());
                    for r in 0..rows * ctx.g {
                        let row = (s.q0 + i0 + r / ctx.g) * n + ctx.head(kvh, r);
                        store(
                            &buf.acc_a[r * d..(r + 1) * d],
                            &mut dq[row * d..(row + 1) * d],
                            ctx.scale,
                        );
                    }
                    (kvh, part)
                },
            )
            .collect()
    };
    let dsink = ctx.sink.map(|_| {
        let mut acc = vec![0.0f64; n];
        for (kvh, part) in &partials {
            for (gi, x) in part.iter().enumerate() {
                acc[kvh * ctx.g + gi] += x;
            }
        }
        acc.into_iter().map(|x| x as f32).collect()
    });
    VarlenGrads {
        dq,
        dk,
        dv: dvv,
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

/// dK (unscaled by `scale`: q is pre-scaled) into `buf.acc_a`, dV into `buf.acc_b`, for kv
/// rows `[c0, c1)` of kv head `kvh`.
#[allow(clippy::too_many_arguments)]
fn dkdv_tile<T: Element>(
    ctx: &Ctx,
    buf: &mut Bufs,
    st: &Stats,
    q: &[T],
    k: &[T],
    v: &[T],
    dy: &[T],
    s: &Seq,
    kvh: usize,
    c0: usize,
    c1: usize,
) {
    let (d, dv) = (ctx.d, ctx.dv);
    let ncol = c1 - c0;
    ctx.load_kv_rows(k, d, s, kvh, c0, c1, &mut buf.k);
    ctx.load_kv_rows(v, dv, s, kvh, c0, c1, &mut buf.v);
    buf.acc_a[..ncol * d].fill(0.0);
    buf.acc_b[..ncol * dv].fill(0.0);
    let ld = ctx.bk_bwd;
    for i0 in (0..s.sq).step_by(ctx.bq) {
        let rows = ctx.bq.min(s.sq - i0);
        let (kind, a, e) = ctx.classify(s, i0, i0 + rows, c0, c1);
        if kind == Kind::Skip {
            continue;
        }
        let (nc, off) = (e - a, a - c0);
        let mm = rows * ctx.g;
        load_query_side(ctx, buf, st, q, dy, s, kvh, i0, rows);
        probs_and_ds(ctx, buf, s, kvh, i0, rows, a, nc, off, kind, ld);
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
    }
}

/// dQ / scale into `buf.acc_a` for a query tile; returns its rows and the tile's dsink
/// partials (one per head of the group, zeros without a sink).
#[allow(clippy::too_many_arguments)]
fn dq_tile<T: Element>(
    ctx: &Ctx,
    buf: &mut Bufs,
    st: &Stats,
    q: &[T],
    k: &[T],
    v: &[T],
    dy: &[T],
    s: &Seq,
    kvh: usize,
    i0: usize,
) -> (usize, Vec<f64>) {
    let d = ctx.d;
    let rows = ctx.bq.min(s.sq - i0);
    let mm = rows * ctx.g;
    load_query_side(ctx, buf, st, q, dy, s, kvh, i0, rows);
    let mut part = vec![0.0f64; ctx.g];
    if let Some(sink) = ctx.sink {
        // dsink_h −= exp(sink_h − m_i) / l_i · D_i
        for r in 0..mm {
            let h = ctx.head(kvh, r);
            let pi = (sink[h] as f64 - buf.m[r] as f64).exp() * buf.inv_l[r] as f64;
            part[r % ctx.g] -= pi * buf.delta[r] as f64;
        }
    }
    buf.acc_a[..mm * d].fill(0.0);
    for c0 in (0..s.skv).step_by(ctx.bk) {
        let c1 = (c0 + ctx.bk).min(s.skv);
        let (kind, a, e) = ctx.classify(s, i0, i0 + rows, c0, c1);
        if kind == Kind::Skip {
            continue;
        }
        let nc = e - a;
        ctx.load_kv_rows(k, d, s, kvh, a, e, &mut buf.k);
        ctx.load_kv_rows(v, ctx.dv, s, kvh, a, e, &mut buf.v);
        probs_and_ds(ctx, buf, s, kvh, i0, rows, a, nc, 0, kind, ctx.bk);
        // dQ/scale += dS · K
        matmul(
            &mut buf.acc_a,
            d,
            Mat::row_major(&buf.dp, mm, nc, ctx.bk),
            Mat::row_major(&buf.k, nc, d, d),
            true,
            1.0,
        );
    }
    (rows, part)
}
