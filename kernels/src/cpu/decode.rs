//! Fast incremental attention (decode: query S = 1) — flash-decoding over the KV window.
//!
//! Takes exactly the arguments of [`crate::reference::incre`] ([`IncreFlashAttentionArgs`])
//! and follows its semantics (window with left padding, the mask *replacing* scores with
//! −1e12 so a fully masked row is the uniform average of V over the window, `len = 0` → zero
//! row, pse, GQA, antiquant), for every KV form: contiguous (BSH / BSND / BNSD), tensor list
//! and paged (BSH / BNSD caches).
//!
//! Structure:
//! - the valid window `[start, start + len)` of each batch is cut into chunks of [`CHUNK`]
//!   tokens (a constant: the split never depends on the thread count). One rayon task per
//!   (batch, kv head, chunk) loads the chunk's K and V rows once, converted to f32, and
//!   computes for **all `G = N / Nkv` query heads of the group**: scores `S = Q'·Kᵀ` (`G × C`)
//!   and `P·V` through the `gemm` crate, plus the chunk's softmax statistics (max, sum).
//! - the partial results `(max, sum, acc)` of a (batch, head) are merged by log-sum-exp in
//!   chunk order, so the output is bitwise identical for any number of threads.
//! - int8 (or any) KV with antiquant: `(x + offset)·scale` is fused into the work, never
//!   materialised for the cache. The offset is added while a row is converted to f32 at load
//!   (exact for int8 values and small offsets); the scale is folded algebraically:
//!   `q·((k + o)⊙s) = (q⊙s)·(k + o)`, so the key scale is multiplied into the query once per
//!   task, and `Σ p_t (v_t + o)⊙s = s⊙Σ p_t (v_t + o)`, so the value scale is applied to the
//!   merged output row. The cache is read exactly once.
//!
//! Working memory: per rayon job `2·C·D + G·C + G·D` f32 (K/V chunk rows, scores, scaled
//! queries), plus the partial results, `B·N·(D + 2)` f32 per chunk of the longest window.
//! Nothing proportional to the cache is allocated.
//!
//! Accuracy: f32 compute and the polynomial `exp` of the varlen kernels; against the
//! f64-accumulating reference the tests hold 2e-5 abs + 1e-4 rel at D ≤ 256 for f32.

use rayon::prelude::*;

use super::gemm::{matmul, Mat};
use super::tile::{exp_sub_sum, row_max, vectorized, SimdKernel};
use crate::reference::incre::{
    IfaLayout, IncreFlashAttentionArgs, KvInput, PagedLayout, PostQuant, IFA_MASKED_SCORE,
};
use crate::Element;

/// Tokens per chunk (one task). 512 rows of D = 128 f32 are 256 KiB per K or V chunk, which
/// stays in a 1–2 MiB L2 together with the scores.
pub const CHUNK: usize = 512;

/// One task: tokens `[t0, t1)` of batch `b`, kv head `kvh`.
#[derive(Clone, Copy, Debug)]
struct Task {
    b: usize,
    kvh: usize,
    t0: usize,
    t1: usize,
}

/// Per-call constants.
struct Ctx<'x, 'a, Q, KV> {
    a: &'x IncreFlashAttentionArgs<'a, Q, KV>,
    n: usize,
    nkv: usize,
    g: usize,
    d: usize,
    scale: f32,
}

/// Per-thread working memory (O(chunk)).
struct Bufs {
    /// Scaled queries of the group, `G × D`.
    q: Vec<f32>,
    /// Antiquant offsets of this kv head's channels for K and V, `D` each (empty without an
    /// offset).
    koff: Vec<f32>,
    voff: Vec<f32>,
    /// K rows of the chunk, `C × D`.
    k: Vec<f32>,
    /// V rows of the chunk, `C × D`.
    v: Vec<f32>,
    /// Scores, then unnormalised probabilities, `G × C`.
    s: Vec<f32>,
}

impl<Q: Element, KV: Element> Ctx<'_, '_, Q, KV> {
    fn bufs(&self) -> Bufs {
        Bufs {
            q: vec![0.0; self.g * self.d],
            koff: Vec::with_capacity(self.d),
            voff: Vec::with_capacity(self.d),
            k: vec![0.0; CHUNK * self.d],
            v: vec![0.0; CHUNK * self.d],
            s: vec![0.0; self.g * CHUNK],
        }
    }

    /// Size of one task's partial result: `[max; G] [sum; G] [acc; G·D]`.
    fn slot(&self) -> usize {
        self.g * (self.d + 2)
    }

    /// The antiquant scale and offset of channel `c = n·D + d` for K (`kv = 0`) or V (`1`);
    /// `(1, 0)` without antiquant.
    #[inline]
    fn antiquant(&self, kv: usize, c: usize) -> (f32, f32) {
        match self.a.antiquant {
            None => (1.0, 0.0),
            Some(aq) => {
                let idx = if aq.per_channel {
                    kv * self.nkv * self.d + c
                } else {
                    kv
                };
                (aq.scale[idx], aq.offset.map_or(0.0, |o| o[idx]))
            }
        }
    }

    /// Key and value buffers holding token `t` of batch `b`, kv head `n`, and the index of its
    /// first element (D contiguous elements in every layout).
    #[inline]
    fn row(&self, b: usize, n: usize, t: usize) -> (&[KV], &[KV], usize) {
        let (nkv, d) = (self.nkv, self.d);
        let contiguous = |bb: usize, s: usize| match self.a.input_layout {
            IfaLayout::Bsh | IfaLayout::Bsnd => ((bb * s + t) * nkv + n) * d,
            IfaLayout::Bnsd => ((bb * nkv + n) * s + t) * d,
        };
        match self.a.kv {
            KvInput::Contiguous { key, value, kv_seq } => (key, value, contiguous(b, kv_seq)),
            KvInput::TensorList { key, value } => (key[b], value[b], contiguous(0, self.a.kv_s(b))),
            KvInput::Paged {
                key_cache,
                value_cache,
                layout,
                block_table,
                max_blocks_per_seq,
                block_size,
            } => {
                let id = block_table[b * max_blocks_per_seq + t / block_size];
                let blk = usize::try_from(id)
                    .expect("IFA precondition violated: negative block id for a valid token");
                let off = t % block_size;
                let idx = match layout {
                    PagedLayout::Bsh => (blk * block_size + off) * nkv * d + n * d,
                    PagedLayout::Bnsd => ((blk * nkv + n) * block_size + off) * d,
                };
                (key_cache, value_cache, idx)
            }
        }
    }

    /// Runs one chunk task and writes its partial result into `slot`.
    fn task(&self, buf: &mut Bufs, t: Task, slot: &mut [f32]) {
        let (n, g, d) = (self.n, self.g, self.d);
        let nt = t.t1 - t.t0;
        // Queries of the group, times the softmax scale and the key antiquant scale.
        for gi in 0..g {
            let h = t.kvh * g + gi;
            let src = &self.a.query[(t.b * n + h) * d..(t.b * n + h + 1) * d];
            for (di, (dst, x)) in buf.q[gi * d..(gi + 1) * d].iter_mut().zip(src).enumerate() {
                let (s, _) = self.antiquant(0, t.kvh * d + di);
                *dst = x.to_f64() as f32 * self.scale * s;
            }
        }
        buf.koff.clear();
        buf.voff.clear();
        if self.a.antiquant.is_some_and(|aq| aq.offset.is_some()) {
            for di in 0..d {
                buf.koff.push(self.antiquant(0, t.kvh * d + di).1);
                buf.voff.push(self.antiquant(1, t.kvh * d + di).1);
            }
        }
        vectorized(LoadRows {
            ctx: self,
            buf: &mut *buf,
            t,
        });
        matmul(
            &mut buf.s,
            CHUNK,
            Mat::row_major(&buf.q, g, d, d),
            Mat::row_major(&buf.k, nt, d, d).t(),
            false,
            1.0,
        );
        self.fix_scores(buf, t);
        let (stats, acc) = slot.split_at_mut(2 * g);
        let (maxes, sums) = stats.split_at_mut(g);
        vectorized(ChunkSoftmax {
            s: &mut buf.s,
            maxes,
            sums,
            nt,
        });
        matmul(
            acc,
            d,
            Mat::row_major(&buf.s, g, nt, CHUNK),
            Mat::row_major(&buf.v, nt, d, d),
            false,
            1.0,
        );
    }

    /// Adds the pse to the products and replaces masked scores with −1e12 (the reference's
    /// order: a masked score ignores the pse).
    fn fix_scores(&self, buf: &mut Bufs, t: Task) {
        let (n, g) = (self.n, self.g);
        let nt = t.t1 - t.t0;
        for gi in 0..g {
            let h = t.kvh * g + gi;
            let row = &mut buf.s[gi * CHUNK..gi * CHUNK + nt];
            if let Some(p) = self.a.pse_shift {
                let bb = if p.batched { t.b } else { 0 };
                let start = (bb * n + h) * p.cols + t.t0;
                for (x, v) in row.iter_mut().zip(&p.data[start..start + nt]) {
                    *x += v.to_f64() as f32;
                }
            }
            if let Some(m) = self.a.atten_mask {
                let start = t.b * m.cols + t.t0;
                for (x, &mk) in row.iter_mut().zip(&m.data[start..start + nt]) {
                    if mk != 0 {
                        *x = IFA_MASKED_SCORE as f32;
                    }
                }
            }
        }
    }
}

/// Loads a chunk's K and V rows as f32, plus the antiquant offsets (the scales are folded
/// elsewhere), compiled for the CPU's best instruction set.
struct LoadRows<'c, 'x, 'a, 'b, Q, KV> {
    ctx: &'c Ctx<'x, 'a, Q, KV>,
    buf: &'b mut Bufs,
    t: Task,
}

impl<Q: Element, KV: Element> SimdKernel for LoadRows<'_, '_, '_, '_, Q, KV> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let d = self.ctx.d;
        let t = self.t;
        for (j, tok) in (t.t0..t.t1).enumerate() {
            let (k, v, at) = self.ctx.row(t.b, t.kvh, tok);
            let (kd, vd) = (
                &mut self.buf.k[j * d..(j + 1) * d],
                &mut self.buf.v[j * d..(j + 1) * d],
            );
            if self.buf.koff.is_empty() {
                convert(&k[at..at + d], kd);
                convert(&v[at..at + d], vd);
            } else {
                convert_add(&k[at..at + d], &self.buf.koff, kd);
                convert_add(&v[at..at + d], &self.buf.voff, vd);
            }
        }
    }
}

#[inline(always)]
fn convert<T: Element>(src: &[T], dst: &mut [f32]) {
    for (y, x) in dst.iter_mut().zip(src) {
        *y = x.to_f64() as f32;
    }
}

#[inline(always)]
fn convert_add<T: Element>(src: &[T], add: &[f32], dst: &mut [f32]) {
    for ((y, x), o) in dst.iter_mut().zip(src).zip(add) {
        *y = x.to_f64() as f32 + o;
    }
}

/// Per row of the `G × nt` scores (leading dimension [`CHUNK`]): the max, then
/// `p = exp(s − max)` in place and the sum of `p`.
struct ChunkSoftmax<'a> {
    s: &'a mut [f32],
    maxes: &'a mut [f32],
    sums: &'a mut [f32],
    nt: usize,
}

impl SimdKernel for ChunkSoftmax<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (r, (m, l)) in self.maxes.iter_mut().zip(self.sums.iter_mut()).enumerate() {
            let row = &mut self.s[r * CHUNK..r * CHUNK + self.nt];
            // Scores are finite (masked ones are −1e12), so the max is finite for nt ≥ 1.
            *m = row_max(row);
            *l = exp_sub_sum(row, *m);
        }
    }
}

/// The whole computation: the normalised output in f32, `B·N·D` (`(b·N + h)·D + d`),
/// zero rows for empty windows.
fn run<Q: Element, KV: Element>(a: &IncreFlashAttentionArgs<Q, KV>) -> Vec<f32> {
    let n = a.num_heads;
    let nkv = if a.num_key_value_heads == 0 {
        n
    } else {
        a.num_key_value_heads
    };
    let ctx = Ctx {
        a,
        n,
        nkv,
        g: n / nkv,
        d: a.head_dim,
        scale: a.scale as f32,
    };
    let (g, d) = (ctx.g, ctx.d);
    let mut out = vec![0.0f32; a.batch * n * d];
    if d == 0 || out.is_empty() {
        return out;
    }
    // Tasks in (batch, kv head, chunk) order; `groups[b·Nkv + kvh]` = its first task and count.
    let mut tasks = Vec::new();
    let mut groups = vec![(0usize, 0usize); a.batch * nkv];
    for b in 0..a.batch {
        let (start, len) = a.window(b);
        for kvh in 0..nkv {
            let first = tasks.len();
            for t0 in (start..start + len).step_by(CHUNK) {
                tasks.push(Task {
                    b,
                    kvh,
                    t0,
                    t1: (t0 + CHUNK).min(start + len),
                });
            }
            groups[b * nkv + kvh] = (first, tasks.len() - first);
        }
    }
    let slot = ctx.slot();
    let mut partials = vec![0.0f32; tasks.len() * slot];
    partials
        .par_chunks_mut(slot)
        .zip(tasks.par_iter())
        .for_each_init(|| ctx.bufs(), |buf, (dst, &t)| ctx.task(buf, t, dst));

    // Merge each (batch, kv head)'s chunks, in chunk order, then apply the value antiquant.
    out.par_chunks_mut(nkv.max(1) * g * d)
        .enumerate()
        .for_each(|(b, out_b)| {
            for kvh in 0..nkv {
                let (first, count) = groups[b * nkv + kvh];
                if count == 0 {
                    continue; // empty window: zero rows
                }
                let parts = &partials[first * slot..(first + count) * slot];
                for gi in 0..g {
                    let dst = &mut out_b[(kvh * g + gi) * d..(kvh * g + gi + 1) * d];
                    let m = parts
                        .chunks_exact(slot)
                        .map(|p| p[gi])
                        .fold(f32::NEG_INFINITY, f32::max);
                    let mut l = 0.0f32;
                    for p in parts.chunks_exact(slot) {
                        let w = (p[gi] - m).exp();
                        l += p[g + gi] * w;
                        let acc = &p[2 * g + gi * d..2 * g + (gi + 1) * d];
                        dst.iter_mut().zip(acc).for_each(|(o, x)| *o += w * x);
                    }
                    let inv_l = 1.0 / l;
                    for (di, o) in dst.iter_mut().enumerate() {
                        *o *= inv_l * ctx.antiquant(1, kvh * d + di).0;
                    }
                }
            }
        });
    out
}

/// Incremental attention with the reference's arguments and semantics
/// ([`crate::reference::incre::incre_flash_attention`]); the output in f32, `B·N·D` elements
/// (`(b·N + h)·D + d`, valid for all layouts).
///
/// Preconditions: those of [`IncreFlashAttentionArgs`] (the caller validates); violating them
/// may panic (slice bounds), never cause undefined behaviour.
pub fn incre_flash_attention<Q: Element, KV: Element>(
    a: &IncreFlashAttentionArgs<Q, KV>,
) -> Vec<f32> {
    run(a)
}

/// [`incre_flash_attention`] rounded (nearest-even) to `O`.
pub fn incre_flash_attention_as<Q: Element, KV: Element, O: Element>(
    a: &IncreFlashAttentionArgs<Q, KV>,
) -> Vec<O> {
    run(a).into_iter().map(|x| O::from_f64(x as f64)).collect()
}

/// int8 output through `quantScale2` / `quantOffset2` with the reference's rounding
/// ([`PostQuant::quantize`]). Zero rows (`len = 0`) quantise as `offset`.
pub fn incre_flash_attention_int8<Q: Element, KV: Element>(
    a: &IncreFlashAttentionArgs<Q, KV>,
    quant: &PostQuant,
) -> Vec<i8> {
    let (n, d) = (a.num_heads, a.head_dim);
    run(a)
        .into_iter()
        .enumerate()
        .map(|(i, x)| {
            let h = (i / d.max(1)) % n.max(1);
            quant.quantize(x as f64, h * d + i % d.max(1))
        })
        .collect()
}
