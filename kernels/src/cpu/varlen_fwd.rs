//! Tiled varlen flash-attention forward (online softmax), one rayon task per
//! (sequence, kv head, query tile).

use std::sync::Mutex;

use rayon::prelude::*;

use super::buffer;
use super::gemm::{matmul, Mat};
use super::tile::{exp, exp_sub_sum, row_max, store, vectorized, Ctx, Kind, SimdKernel};
use crate::reference::varlen::VarlenFwdOut;
use crate::Element;
use burn_ascend_contract::varlen::VarlenProblem;

/// Per-thread working memory of the forward (O(tile)).
struct Bufs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    s: Vec<f32>,
    drop: Vec<f32>,
    acc: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    /// Row chunks of the current tile: (first row, end row, first column, end column).
    chunks: Vec<(usize, usize, usize, usize)>,
    /// The sizes the buffers were made for ([`Bufs::shape`]).
    shape: [usize; 5],
}

thread_local! {
    /// Each thread's buffers, kept for the next task and the next call of the same shape (up
    /// to [`KEEP_BYTES`]): a fresh set per rayon job (1–3 MiB, zeroed) cost 2–3 % of the
    /// forward in `memset` alone.
    static SCRATCH: std::cell::RefCell<Option<Bufs>> = const { std::cell::RefCell::new(None) };
}

/// The most bytes of buffers a thread keeps between calls.
const KEEP_BYTES: usize = 16 << 20;

/// Rows (`tokens × G`) of a chunk of a boundary tile that gets its own column range.
const CHUNK_ROWS: usize = 128;

impl Bufs {
    fn shape(ctx: &Ctx) -> [usize; 5] {
        let dropout = usize::from(ctx.dropout.is_some());
        [ctx.bq * ctx.g, ctx.bk, ctx.d, ctx.dv, dropout]
    }

    fn bytes(&self) -> usize {
        4 * (self.q.len()
            + self.k.len()
            + self.v.len()
            + self.s.len()
            + self.drop.len()
            + self.acc.len())
    }

    /// Runs `f` with this thread's cached buffers for `ctx` (made anew when the shape
    /// differs). The buffers are out of the cache while `f` runs and go back only when it
    /// returns: a panic in `f` (caught further up, e.g. by the ACL simulation) cannot leave a
    /// half-taken set behind for the next call.
    fn with<R>(ctx: &Ctx, f: impl FnOnce(&mut Bufs) -> R) -> R {
        let shape = Self::shape(ctx);
        let cached = SCRATCH.with(|cell| cell.borrow_mut().take());
        let mut buf = match cached {
            Some(b) if b.shape == shape => b,
            _ => Bufs::new(ctx),
        };
        let r = f(&mut buf);
        // Kept unless unusually large (then each task allocates its own).
        if buf.bytes() <= KEEP_BYTES {
            SCRATCH.with(|cell| *cell.borrow_mut() = Some(buf));
        }
        r
    }

    fn new(ctx: &Ctx) -> Self {
        let rows = ctx.bq * ctx.g;
        Self {
            q: vec![0.0; rows * ctx.d],
            k: vec![0.0; ctx.bk * ctx.d],
            v: vec![0.0; ctx.bk * ctx.dv],
            s: vec![0.0; rows * ctx.bk],
            drop: vec![
                0.0;
                if ctx.dropout.is_some() {
                    rows * ctx.bk
                } else {
                    0
                }
            ],
            acc: vec![0.0; rows * ctx.dv],
            m: vec![0.0; rows],
            l: vec![0.0; rows],
            chunks: Vec::new(),
            shape: Self::shape(ctx),
        }
    }
}

/// Forward with the reference's signature and conventions
/// ([`crate::reference::varlen::varlen_fwd`]): `attentionOut`, `softmaxMax`, `softmaxSum`.
/// Preconditions: the problem and slice lengths were validated.
pub fn varlen_fwd<T: Element>(p: &VarlenProblem, q: &[T], k: &[T], v: &[T]) -> VarlenFwdOut<T> {
    let ctx = Ctx::new(p);
    let dims = &p.dims;
    let mut out = buffer::filled(dims.t_q() * ctx.n * ctx.dv, T::from_f64(0.0));
    let mut smax = vec![0.0f32; dims.stats_len()];
    let mut ssum = vec![0.0f32; dims.stats_len()];
    {
        let sinks = Mutex::new((&mut out[..], &mut smax[..], &mut ssum[..]));
        ctx.query_tasks().into_par_iter().for_each(|(si, kvh, i0)| {
            Bufs::with(&ctx, |buf| {
                let rows = tile(&ctx, buf, q, k, v, si, kvh, i0);
                let mut guard = sinks.lock().unwrap_or_else(|e| e.into_inner());
                let (out, smax, ssum) = &mut *guard;
                write_tile(&ctx, buf, si, kvh, i0, rows, out, smax, ssum);
            })
        });
    }
    VarlenFwdOut {
        attention_out: out,
        softmax_max: smax,
        softmax_sum: ssum,
    }
}

/// Computes one query tile into `buf.acc` (unnormalised), `buf.m`, `buf.l`; returns its rows
/// (query tokens).
#[allow(clippy::too_many_arguments)]
fn tile<T: Element>(
    ctx: &Ctx,
    buf: &mut Bufs,
    q: &[T],
    k: &[T],
    v: &[T],
    si: usize,
    kvh: usize,
    i0: usize,
) -> usize {
    let s = &ctx.seqs[si];
    let (d, dv, g) = (ctx.d, ctx.dv, ctx.g);
    let rows = ctx.bq.min(s.sq - i0);
    let i1 = i0 + rows;
    let mm = rows * g;
    ctx.load_q_rows(q, d, s, kvh, i0, rows, ctx.scale, &mut buf.q);
    for r in 0..mm {
        let h = ctx.head(kvh, r);
        // The sink starts the online softmax: max = sink, sum = exp(sink − sink) = 1.
        (buf.m[r], buf.l[r]) = match ctx.sink {
            Some(sk) => (sk[h], 1.0),
            None => (f32::NEG_INFINITY, 0.0),
        };
    }
    buf.acc[..mm * dv].fill(0.0);
    let elementwise = ctx.elementwise_scores();
    let bk = ctx.bk;
    // The K / V tile buffers, out of `buf` while the loop borrows them (put back below).
    let (mut kbuf, mut vbuf) = (std::mem::take(&mut buf.k), std::mem::take(&mut buf.v));
    for c0 in (0..s.skv).step_by(bk) {
        let c1 = (c0 + bk).min(s.skv);
        let (kind, a, e) = ctx.classify(s, i0, i1, c0, c1);
        if kind == Kind::Skip {
            continue;
        }
        let nc = e - a;
        // f32 K / V are read in place by gemm (which packs its operands anyway): row `j` of
        // the tile at `kv_at + j·Nkv·width`; other types are converted into the tile buffers.
        let kv_at = (s.kv0 + a) * ctx.nkv + kvh;
        let (ks, kstride, vs, vstride) = match (as_f32(k), as_f32(v)) {
            (Some(k32), Some(v32)) => (
                &k32[kv_at * d..],
                ctx.nkv * d,
                &v32[kv_at * dv..],
                ctx.nkv * dv,
            ),
            _ => {
                ctx.load_kv_rows(k, d, s, kvh, a, e, &mut kbuf);
                ctx.load_kv_rows(v, dv, s, kvh, a, e, &mut vbuf);
                (&kbuf[..], d, &vbuf[..], dv)
            }
        };
        // Row chunks and the columns each may attend: a boundary tile (e.g. the diagonal of a
        // causal mask) computes only each chunk's hull, not the whole tile's.
        let mut chunks = std::mem::take(&mut buf.chunks);
        chunks.clear();
        if kind == Kind::Partial {
            let ct = (CHUNK_ROWS / g).max(1);
            for ci0 in (i0..i1).step_by(ct) {
                let ci1 = (ci0 + ct).min(i1);
                let (ck, ca, ce) = ctx.classify(s, ci0, ci1, a, e);
                let (lo, hi) = if ck == Kind::Skip {
                    (0, 0)
                } else {
                    (ca - a, ce - a)
                };
                chunks.push(((ci0 - i0) * g, (ci1 - i0) * g, lo, hi));
            }
        } else {
            chunks.push((0, mm, 0, nc));
        }
        // Scores outside a chunk's hull stay stale here; `fix_scores` masks them (−∞), since
        // nothing there is allowed.
        for &(r0, r1, lo, hi) in chunks.iter().filter(|c| c.3 > c.2) {
            matmul(
                &mut buf.s[r0 * bk + lo..],
                bk,
                Mat::row_major(&buf.q[r0 * d..], r1 - r0, d, d),
                Mat::row_major(&ks[lo * kstride..], hi - lo, d, kstride).t(),
                false,
                1.0,
            );
        }
        if elementwise || kind == Kind::Partial {
            ctx.fix_scores(&mut buf.s, bk, s, kvh, i0, rows, a, nc, kind);
        }
        let dropout = ctx.dropout.is_some();
        if dropout {
            ctx.drop_factors(&mut buf.drop, bk, s, kvh, i0, rows, a, nc);
        }
        vectorized(OnlineSoftmax {
            buf,
            ld: bk,
            mm,
            nc,
            dv,
            dropout,
        });
        // P is exactly 0 outside each chunk's hull.
        for &(r0, r1, lo, hi) in chunks.iter().filter(|c| c.3 > c.2) {
            matmul(
                &mut buf.acc[r0 * dv..],
                dv,
                Mat::row_major(&buf.s[r0 * bk + lo..], r1 - r0, hi - lo, bk),
                Mat::row_major(&vs[lo * vstride..], hi - lo, dv, vstride),
                true,
                1.0,
            );
        }
        buf.chunks = chunks;
    }
    (buf.k, buf.v) = (kbuf, vbuf);
    rows
}

/// `x` as `&[f32]` when `T` is `f32`.
fn as_f32<T: Element>(x: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()).then(|| {
        // SAFETY: `T` is `f32` (same TypeId), so this is the same slice with its own type.
        unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<f32>(), x.len()) }
    })
}

/// One online-softmax step over the scores of a kv tile in `buf.s` (`mm × nc`): updates the
/// running max / sum per row, rescales the accumulator rows, and leaves in `buf.s` the
/// unnormalised probabilities (times the dropout factors) for the P·V product.
struct OnlineSoftmax<'a> {
    buf: &'a mut Bufs,
    ld: usize,
    mm: usize,
    nc: usize,
    dv: usize,
    dropout: bool,
}

impl SimdKernel for OnlineSoftmax<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        online_softmax(self.buf, self.ld, self.mm, self.nc, self.dv, self.dropout);
    }
}

#[inline(always)]
fn online_softmax(buf: &mut Bufs, ld: usize, mm: usize, nc: usize, dv: usize, dropout: bool) {
    for r in 0..mm {
        let row = &mut buf.s[r * ld..r * ld + nc];
        let new_m = buf.m[r].max(row_max(row));
        if new_m == f32::NEG_INFINITY {
            // Nothing allowed so far (no sink): contributes nothing.
            row.fill(0.0);
            continue;
        }
        let alpha = exp(buf.m[r] - new_m);
        let sum = exp_sub_sum(row, new_m);
        buf.l[r] = buf.l[r] * alpha + sum;
        buf.m[r] = new_m;
        if alpha != 1.0 {
            buf.acc[r * dv..(r + 1) * dv]
                .iter_mut()
                .for_each(|x| *x *= alpha);
        }
        if dropout {
            // The sum above is pre-dropout; only P·V sees the mask.
            row.iter_mut()
                .zip(&buf.drop[r * ld..r * ld + nc])
                .for_each(|(x, f)| *x *= f);
        }
    }
}

/// Normalises a finished tile and writes its rows and statistics.
#[allow(clippy::too_many_arguments)]
fn write_tile<T: Element>(
    ctx: &Ctx,
    buf: &Bufs,
    si: usize,
    kvh: usize,
    i0: usize,
    rows: usize,
    out: &mut [T],
    smax: &mut [f32],
    ssum: &mut [f32],
) {
    let s = &ctx.seqs[si];
    let (n, dv) = (ctx.n, ctx.dv);
    for r in 0..rows * ctx.g {
        let i = i0 + r / ctx.g;
        let h = ctx.head(kvh, r);
        let at = ctx.stat_index(s, h, i);
        let (m, l) = (buf.m[r], buf.l[r]);
        let (m_out, l_out) = if m == f32::NEG_INFINITY {
            // Fully masked without a sink: out stays 0, CANN's invalid-row statistics.
            (f32::MIN, f32::MAX)
        } else {
            let o = ((s.q0 + i) * n + h) * dv;
            store(&buf.acc[r * dv..(r + 1) * dv], &mut out[o..o + dv], 1.0 / l);
            (m, l)
        };
        smax[at..at + 8].fill(m_out);
        ssum[at..at + 8].fill(l_out);
    }
}
