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
//!   (batch, kv heads, chunk) — all kv heads when a token's heads are adjacent in memory
//!   (BSH / BSND, paged BSH), so the task reads whole contiguous token rows; one kv head for
//!   the head-major layouts (BNSD, paged BNSD), whose per-head rows are contiguous.
//! - a task walks its chunk in sub-chunks (up to 512 KiB of f32 K and as much V): the rows
//!   are read once, converted to f32 (raw values: see antiquant below), and used by **all
//!   `G = N / Nkv` query heads of each kv head**: scores `Q'·Kᵀ` (`G` dot products per K row,
//!   accumulators in SIMD registers), an online softmax (running max / sum), and `P·V`
//!   accumulated in registers, with explicit SIMD through `pulp` (AVX-512 / AVX2 / scalar
//!   chosen at run time).
//! - int8 / f16 / bf16 KV on CPUs with AVX-512 (F, BW, VL; detected at run time): the
//!   scores and `P·V` loops read the cache rows **in place** and widen each element in
//!   registers (`decode_avx512`); nothing is staged, and the next sub-chunk's rows (after a
//!   task's last sub-chunk, the next task's first) are prefetched into L2 while the current
//!   one is computed (`decode_prefetch`). Scores are computed 16 at a time (`R` query rows ×
//!   `16 / R` keys) and reduced together by a shuffle tree; the online softmax runs on
//!   AVX-512 vectors; `P·V` runs in column blocks that keep `R × blocks` accumulators in
//!   registers. f32 / f64 KV and other CPUs take the staged path above, with the portable
//!   loops of `decode_portable`.
//! - the partial results `(max, sum, acc)` of the chunks of a (batch, head) are merged by
//!   log-sum-exp in chunk order, so the output is bitwise identical for any number of threads.
//! - int8 (or any) KV with antiquant: `(x + offset)·scale` is folded into the work, never
//!   materialised, and the cache is read exactly once, converted to f32 at load (or in
//!   registers on the in-place path). With
//!   `k̂ = (k + o_k)⊙s_k`, `q·k̂ = (q⊙s_k)·k + (q⊙s_k)·o_k`: the key scale is multiplied into
//!   the query once per task, and the offset term is the same for every token of a row, so it
//!   cancels in the softmax (masked scores are replaced, not shifted, and a fully masked row is
//!   uniform either way) and is not computed. With `v̂ = (v + o_v)⊙s_v` and probabilities
//!   summing to 1, `Σ p_t v̂_t = s_v⊙(Σ p_t v_t + o_v)`: the value offset and scale are applied
//!   to the merged output row.
//!
//! Working memory, per thread (kept in a thread-local cache for the next call of the same
//! shape): the K and V sub-chunks (≤ 2 × 512 KiB, or the whole chunk when smaller), scores
//! for `G × sub` and the task's queries and accumulators (`nh·G × D`); plus the partial
//! results, `B·N·(D + 2)` f32 per chunk of the longest window, in a buffer the calling thread
//! keeps for its next call (up to 16 MiB). Nothing proportional to the cache is allocated.
//!
//! Accuracy: f32 compute and the polynomial `exp` of the varlen kernels; against the
//! f64-accumulating reference the tests hold 2e-5 abs + 1e-4 rel (D ≤ 128; f32, f16, bf16
//! and int8 KV).

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use super::decode_avx512::{self as fused, Avx512, Bf16Bits, F16Bits, Widen};
use super::decode_portable::{OnlineSoftmax, Pv, Scores};
#[cfg(target_arch = "x86_64")]
use super::decode_prefetch::Lines;
use super::tile::{vectorized, SimdKernel};
use crate::Element;
use burn_ascend_contract::incre::{
    IfaLayout, IfaPostQuant, IncreFlashAttentionArgs, KvInput, PagedLayout, IFA_MASKED_SCORE,
};

/// Tokens per chunk (one task). The split depends only on the window, never on the thread
/// count.
pub const CHUNK: usize = 512;

/// Elements (`tokens × heads × D`) of K (and of V) a task converts at a time: 128 Ki f32 =
/// 512 KiB each, so the K and V sub-chunks stay in L2 while every query head of the task
/// reads them.
const SUB_ELEMS: usize = 128 << 10;

/// Bytes of K (and of V) per sub-chunk on the in-place (AVX-512) path, whose next sub-chunk
/// is prefetched meanwhile: 64 KiB (64 tokens of the bench's int8 cache, 8 kv heads × 128)
/// took ~25 % less CPU time than 256 KiB on the paged bench case, 16–32 KiB no better.
#[cfg(target_arch = "x86_64")]
const FUSED_SUB_BYTES: usize = 64 << 10;

/// One task: tokens `[t0, t1)` of batch `b`, kv heads `[n0, n0 + nh)`.
#[derive(Clone, Copy, Debug)]
struct Task {
    b: usize,
    n0: usize,
    t0: usize,
    t1: usize,
    /// The next task's `(b, n0, t0, t1)`, whose first sub-chunk is prefetched during this
    /// task's last.
    then: Option<(usize, usize, usize, usize)>,
}

/// Per-call constants.
struct Ctx<'x, 'a, Q, KV> {
    a: &'x IncreFlashAttentionArgs<'a, Q, KV>,
    n: usize,
    nkv: usize,
    g: usize,
    d: usize,
    /// `D` rounded up to [`PAD`]: the row stride of the f32 working buffers, whose padding
    /// columns stay 0, so the SIMD loops need no tails.
    dp: usize,
    scale: f32,
    /// kv heads per task: all of them when a token's heads are adjacent in memory (BSH / BSND
    /// layouts, paged BSH), so a task reads whole contiguous token rows; 1 otherwise (BNSD,
    /// paged BNSD: each head's tokens are contiguous).
    nh: usize,
    /// Tokens per sub-chunk.
    sub: usize,
    /// The key antiquant scale of each channel `n·D + d` (1 without antiquant).
    kscale: Vec<f32>,
    /// The value antiquant scale and offset of each channel `n·D + d` (1 and 0 without
    /// antiquant), applied to the merged output rows.
    vscale: Vec<f32>,
    voffset: Vec<f32>,
    /// The in-place AVX-512 loops, when the CPU has them and `KV` is one of their types.
    #[cfg(target_arch = "x86_64")]
    fused: Option<Avx512>,
}

/// Row padding of the working buffers, in f32: a multiple of every SIMD width (16 lanes of
/// AVX-512, 8 of AVX2, 1 scalar).
const PAD: usize = 16;

/// A zeroed f32 buffer whose first element is 64-byte aligned (a cache line), so the SIMD
/// loads and stores of its `Dp`-strided rows never straddle two lines.
struct Aligned {
    data: Vec<f32>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Self {
        let data = vec![0.0f32; len + 16];
        // At most 15 elements; `min` only guards the documented "may fail" case of
        // `align_offset` (then the buffer is merely unaligned).
        let off = data.as_ptr().align_offset(64).min(16);
        Self { data, off, len }
    }
}

impl std::ops::Deref for Aligned {
    type Target = [f32];
    #[inline(always)]
    fn deref(&self) -> &[f32] {
        &self.data[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for Aligned {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.data[self.off..self.off + self.len]
    }
}

/// Per-thread working memory: O(sub-chunk), at most a few MiB.
struct Bufs {
    /// Scaled queries of the task's heads, `nh·G × Dp`.
    q: Aligned,
    /// K rows of the sub-chunk, per head: `nh × sub × Dp`.
    k: Aligned,
    /// V rows, same shape.
    v: Aligned,
    /// Scores, then unnormalised probabilities, of one head's group: `G × sub`.
    s: Vec<f32>,
    /// Unnormalised outputs of the task's heads, `nh·G × Dp`.
    acc: Aligned,
    /// Probabilities transposed for [`Pv`], `G × sub`.
    pt: Vec<f32>,
    /// In-place path: offsets of the sub-chunk's rows in the K / V buffers.
    offs: Vec<usize>,
    /// In-place path: offsets of the next sub-chunk's rows (prefetched).
    next: Vec<usize>,
    /// In-place path: the next sub-chunk's K and V cache lines.
    #[cfg(target_arch = "x86_64")]
    lines: (Lines, Lines),
    /// The `(nh, G, D, sub, in place)` the buffers were made for. `D` itself (not only
    /// `Dp`): the padding columns `[D, Dp)` of `q`, `k` and `v` are never written, so they
    /// stay zero only while `D` does not change.
    shape: (usize, usize, usize, usize, bool),
}

thread_local! {
    /// Each thread's working buffers, kept for the next call with the same shape: a decode
    /// loop calls the kernel once per generated token, and fresh MiB-sized buffers would cost
    /// page faults every time. At most a few MiB per thread.
    static SCRATCH: std::cell::RefCell<Option<Bufs>> = const { std::cell::RefCell::new(None) };
}

/// The largest partial-results buffer (f32 elements, 16 MiB) a thread keeps between calls.
const PARTIALS_KEEP: usize = 4 << 20;

thread_local! {
    /// The calling thread's buffer of chunk partial results, kept for its next call: about
    /// 1 MiB at the bench's decode shape, which a fresh allocation (above malloc's mmap
    /// threshold) could page-fault in again on every generated token.
    static PARTIALS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<Q: Element, KV: Element> Ctx<'_, '_, Q, KV> {
    /// Whether the in-place AVX-512 loops run.
    fn in_place(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self.fused.is_some();
        #[cfg(not(target_arch = "x86_64"))]
        return false;
    }

    fn shape(&self) -> (usize, usize, usize, usize, bool) {
        (self.nh, self.g, self.d, self.sub, self.in_place())
    }

    fn bufs(&self) -> Bufs {
        let (nh, g, dp, sub) = (self.nh, self.g, self.dp, self.sub);
        // The in-place path stages no K / V rows.
        let staged = if self.in_place() { 0 } else { nh * sub * dp };
        Bufs {
            q: Aligned::zeroed(nh * g * dp),
            k: Aligned::zeroed(staged),
            v: Aligned::zeroed(staged),
            s: vec![0.0; g * sub],
            acc: Aligned::zeroed(nh * g * dp),
            pt: vec![0.0; g * sub],
            offs: Vec::with_capacity(sub),
            next: Vec::with_capacity(sub),
            #[cfg(target_arch = "x86_64")]
            lines: Default::default(),
            shape: self.shape(),
        }
    }

    /// Runs `t` with this thread's cached buffers (reallocated when the shape changed, so the
    /// padding columns are zero).
    fn task_with_scratch(&self, t: Task, slot: &mut [f32]) {
        SCRATCH.with(|cell| {
            let mut cached = cell.borrow_mut();
            let shape = self.shape();
            let buf = match &mut *cached {
                Some(b) if b.shape == shape => b,
                other => other.insert(self.bufs()),
            };
            self.task(buf, t, slot);
        });
    }

    /// Query heads of a task.
    fn rows(&self) -> usize {
        self.nh * self.g
    }

    /// Size of one task's partial result: `[max; R] [sum; R] [acc; R·D]`, `R` = [`Self::rows`].
    fn slot(&self) -> usize {
        self.rows() * (self.d + 2)
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
    /// first element (`D` contiguous elements in every layout; `nh·D` from head `n0` when the
    /// heads are adjacent).
    #[inline]
    fn row(&self, b: usize, n: usize, t: usize) -> (&[KV], &[KV], usize) {
        let (k, v) = self.kv_bufs(b);
        (k, v, self.row_at(b, n, t))
    }

    /// The key and value buffers of batch `b`.
    #[inline]
    fn kv_bufs(&self, b: usize) -> (&[KV], &[KV]) {
        match self.a.kv {
            KvInput::Contiguous { key, value, .. } => (key, value),
            KvInput::TensorList { key, value } => (key[b], value[b]),
            KvInput::Paged {
                key_cache,
                value_cache,
                ..
            } => (key_cache, value_cache),
        }
    }

    /// [`Self::row_at`] of tokens `[t0, t1)` into `out` (cleared first): one block-table
    /// look-up per block, a fixed stride within it.
    #[cfg(target_arch = "x86_64")]
    fn rows_at(&self, b: usize, n: usize, t0: usize, t1: usize, out: &mut Vec<usize>) {
        out.clear();
        let (block, stride) = match self.a.kv {
            KvInput::Paged {
                layout, block_size, ..
            } => (
                block_size,
                match layout {
                    PagedLayout::Bsh => self.nkv * self.d,
                    PagedLayout::Bnsd => self.d,
                },
            ),
            _ => (
                usize::MAX,
                match self.a.input_layout {
                    IfaLayout::Bsh | IfaLayout::Bsnd => self.nkv * self.d,
                    IfaLayout::Bnsd => self.d,
                },
            ),
        };
        let mut tok = t0;
        while tok < t1 {
            // Tokens up to the end of `tok`'s block are `stride` apart.
            let end = if block == usize::MAX {
                t1
            } else {
                (tok - tok % block + block).min(t1)
            };
            let first = self.row_at(b, n, tok);
            out.extend((0..end - tok).map(|i| first + i * stride));
            tok = end;
        }
    }

    /// Index of the first element of token `t`, kv head `n` of batch `b` in
    /// [`Self::kv_bufs`]`(b)`.
    #[inline]
    fn row_at(&self, b: usize, n: usize, t: usize) -> usize {
        let (nkv, d) = (self.nkv, self.d);
        let contiguous = |bb: usize, s: usize| match self.a.input_layout {
            IfaLayout::Bsh | IfaLayout::Bsnd => ((bb * s + t) * nkv + n) * d,
            IfaLayout::Bnsd => ((bb * nkv + n) * s + t) * d,
        };
        match self.a.kv {
            KvInput::Contiguous { kv_seq, .. } => contiguous(b, kv_seq),
            KvInput::TensorList { .. } => contiguous(0, self.a.kv_s(b)),
            KvInput::Paged {
                layout,
                block_table,
                max_blocks_per_seq,
                block_size,
                ..
            } => {
                let id = block_table[b * max_blocks_per_seq + t / block_size];
                let blk = usize::try_from(id)
                    .expect("IFA precondition violated: negative block id for a valid token");
                let off = t % block_size;
                match layout {
                    PagedLayout::Bsh => (blk * block_size + off) * nkv * d + n * d,
                    PagedLayout::Bnsd => ((blk * nkv + n) * block_size + off) * d,
                }
            }
        }
    }

    /// Runs one chunk task and writes its partial result into `slot`: an online softmax over
    /// sub-chunks, each converted once and used by every query head of the task.
    fn task(&self, buf: &mut Bufs, t: Task, slot: &mut [f32]) {
        let (n, g, d, dp, nh, sub) = (self.n, self.g, self.d, self.dp, self.nh, self.sub);
        let rows = self.rows();
        // Queries, times the softmax scale and the key antiquant scale (query head
        // h = n0·G + r belongs to kv head h / G).
        for r in 0..rows {
            let h = t.n0 * g + r;
            let src = &self.a.query[(t.b * n + h) * d..(t.b * n + h + 1) * d];
            let kscale = &self.kscale[(h / g) * d..(h / g + 1) * d];
            let dst = &mut buf.q[r * dp..r * dp + d];
            for ((dst, x), ks) in dst.iter_mut().zip(src).zip(kscale) {
                *dst = x.to_f64() as f32 * self.scale * ks;
            }
        }
        let (stats, acc_out) = slot.split_at_mut(2 * rows);
        let (maxes, sums) = stats.split_at_mut(rows);
        maxes.fill(f32::NEG_INFINITY);
        sums.fill(0.0);
        buf.acc.fill(0.0);
        for s0 in (t.t0..t.t1).step_by(sub) {
            let s1 = (s0 + sub).min(t.t1);
            let ns = s1 - s0;
            #[cfg(target_arch = "x86_64")]
            if let Some(cpu) = self.fused {
                use std::any::TypeId;
                let (maxes, sums) = (&mut *maxes, &mut *sums);
                let id = TypeId::of::<KV>();
                if id == TypeId::of::<i8>() {
                    self.sub_in_place::<i8>(cpu, buf, t, s0, s1, maxes, sums);
                } else if id == TypeId::of::<half::f16>() {
                    self.sub_in_place::<F16Bits>(cpu, buf, t, s0, s1, maxes, sums);
                } else {
                    self.sub_in_place::<Bf16Bits>(cpu, buf, t, s0, s1, maxes, sums);
                }
                continue;
            }
            vectorized(LoadRows {
                ctx: self,
                buf: &mut *buf,
                b: t.b,
                n0: t.n0,
                s0,
                s1,
            });
            for hn in 0..nh {
                let kh = &buf.k[hn * sub * dp..(hn * sub + ns) * dp];
                let vh = &buf.v[hn * sub * dp..(hn * sub + ns) * dp];
                let acc = &mut buf.acc[hn * g * dp..(hn + 1) * g * dp];
                pulp::Arch::new().dispatch(Scores {
                    q: &buf.q[hn * g * dp..(hn + 1) * g * dp],
                    k: kh,
                    dp,
                    ns,
                    s: &mut buf.s,
                    ld: sub,
                });
                self.fix_scores(&mut buf.s, t.b, (t.n0 + hn) * g, s0, ns);
                vectorized(OnlineSoftmax {
                    s: &mut buf.s,
                    ld: sub,
                    ns,
                    maxes: &mut maxes[hn * g..(hn + 1) * g],
                    sums: &mut sums[hn * g..(hn + 1) * g],
                    acc: &mut *acc,
                    dp,
                });
                pulp::Arch::new().dispatch(Pv {
                    p: &buf.s,
                    ld: sub,
                    v: vh,
                    dp,
                    ns,
                    acc,
                    pt: &mut buf.pt,
                });
            }
        }
        for (dst, src) in acc_out.chunks_exact_mut(d).zip(buf.acc.chunks_exact(dp)) {
            dst.copy_from_slice(&src[..d]);
        }
    }

    /// One sub-chunk `[s0, s1)` of task `t` on the in-place path: scores and `P·V` read the
    /// K / V rows where they are (as `W`, the widening view of `KV`), while the next
    /// sub-chunk's rows are prefetched.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    fn sub_in_place<W: Widen>(
        &self,
        cpu: Avx512,
        buf: &mut Bufs,
        t: Task,
        s0: usize,
        s1: usize,
        maxes: &mut [f32],
        sums: &mut [f32],
    ) {
        let (g, d, dp, nh, sub) = (self.g, self.d, self.dp, self.nh, self.sub);
        let (k, v) = self.kv_bufs(t.b);
        let (Some(k), Some(v)) = (fused::as_widen::<KV, W>(k), fused::as_widen::<KV, W>(v)) else {
            unreachable!("the in-place path is only chosen for its element types");
        };
        self.rows_at(t.b, t.n0, s0, s1, &mut buf.offs);
        let ns = s1 - s0;
        let rows = fused::Rows::new(&buf.offs);
        // The next sub-chunk's rows (all `nh` heads of a token: `nh·D` elements from each
        // offset): this task's, or after its last sub-chunk the next task's first (usually
        // the next one this thread runs), a share per kv head: K during its scores, V during
        // its `P·V`.
        let next = if s1 < t.t1 {
            Some((t.b, t.n0, s1, (s1 + sub).min(t.t1)))
        } else {
            t.then
                .map(|(b, n0, t0, t1)| (b, n0, t0, (t0 + sub).min(t1)))
        };
        buf.next.clear();
        let (mut nk, mut nv) = (k, v);
        if let Some((b, n0, t0, t1)) = next {
            self.rows_at(b, n0, t0, t1, &mut buf.next);
            // The next task's batch may have buffers of its own (tensor lists).
            let (k, v) = self.kv_bufs(b);
            nk = fused::as_widen::<KV, W>(k).unwrap_or(nk);
            nv = fused::as_widen::<KV, W>(v).unwrap_or(nv);
        }
        let (lk, lv) = &mut buf.lines;
        lk.build(nk, &buf.next, nh * d);
        lv.build(nv, &buf.next, nh * d);
        for hn in 0..nh {
            let acc = &mut buf.acc[hn * g * dp..(hn + 1) * g * dp];
            fused::scores(
                cpu,
                &buf.q[hn * g * dp..(hn + 1) * g * dp],
                dp,
                d,
                &k[hn * d..],
                rows,
                &mut buf.s,
                sub,
                lk.share(hn, nh),
            );
            self.fix_scores(&mut buf.s, t.b, (t.n0 + hn) * g, s0, ns);
            fused::online_softmax(
                cpu,
                &mut buf.s,
                sub,
                ns,
                &mut maxes[hn * g..(hn + 1) * g],
                &mut sums[hn * g..(hn + 1) * g],
                &mut *acc,
                dp,
            );
            fused::pv(
                cpu,
                &buf.s,
                sub,
                &v[hn * d..],
                rows,
                d,
                acc,
                dp,
                lv.share(hn, nh),
            );
        }
    }

    /// Adds the pse to the `G × ns` products of query heads `[h0, h0 + G)` (leading dimension
    /// `sub`, tokens from `s0`) and replaces masked scores with −1e12 (the reference's order:
    /// a masked score ignores the pse).
    fn fix_scores(&self, s: &mut [f32], b: usize, h0: usize, s0: usize, ns: usize) {
        if self.a.pse_shift.is_none() && self.a.atten_mask.is_none() {
            return;
        }
        for gi in 0..self.g {
            let h = h0 + gi;
            let row = &mut s[gi * self.sub..gi * self.sub + ns];
            if let Some(p) = self.a.pse_shift {
                let bb = if p.batched { b } else { 0 };
                let start = (bb * self.n + h) * p.cols + s0;
                for (x, v) in row.iter_mut().zip(&p.data[start..start + ns]) {
                    *x += v.to_f64() as f32;
                }
            }
            if let Some(m) = self.a.atten_mask {
                let start = b * m.cols + s0;
                for (x, &mk) in row.iter_mut().zip(&m.data[start..start + ns]) {
                    if mk != 0 {
                        *x = IFA_MASKED_SCORE as f32;
                    }
                }
            }
        }
    }
}

/// Converts tokens `[s0, s1)` of kv heads `[n0, n0 + nh)` of K and V to f32 into the
/// per-head buffers (row stride `Dp`), raw (the antiquant is folded elsewhere). Each token's `nh·D` elements are read in one contiguous run. Compiled for the
/// CPU's best instruction set.
struct LoadRows<'c, 'x, 'a, 'b, Q, KV> {
    ctx: &'c Ctx<'x, 'a, Q, KV>,
    buf: &'b mut Bufs,
    b: usize,
    n0: usize,
    s0: usize,
    s1: usize,
}

impl<Q: Element, KV: Element> SimdKernel for LoadRows<'_, '_, '_, '_, Q, KV> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (d, dp, nh, sub) = (self.ctx.d, self.ctx.dp, self.ctx.nh, self.ctx.sub);
        let (kbuf, vbuf): (&mut [f32], &mut [f32]) = (&mut self.buf.k, &mut self.buf.v);
        for (j, tok) in (self.s0..self.s1).enumerate() {
            let (k, v, at) = self.ctx.row(self.b, self.n0, tok);
            let (k, v) = (&k[at..at + nh * d], &v[at..at + nh * d]);
            for hn in 0..nh {
                let dst = (hn * sub + j) * dp;
                let (kd, vd) = (&mut kbuf[dst..dst + d], &mut vbuf[dst..dst + d]);
                let (ks, vs) = (&k[hn * d..(hn + 1) * d], &v[hn * d..(hn + 1) * d]);
                convert(ks, kd);
                convert(vs, vd);
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

/// The whole computation: the normalised output in f32, `B·N·D` (`(b·N + h)·D + d`),
/// zero rows for empty windows, and the log-sum-exp of each row's scores, `B·N` (`b·N + h`;
/// `+inf` for an empty window).
///
/// `sink`: one raw logit per query head (`[N]`), one more term of every row's softmax
/// denominator with no value (FIA's `learnableSink`); it enters the merge of the chunks as
/// one more partial result `(max = sink, sum = 1, acc = 0)`, so it costs nothing per token.
/// The LSE's scores are those the kernel computes: without the key antiquant offset's
/// per-row constant (see the module docs), which the caller adds when it needs the true LSE.
///
/// `in_place`: use the AVX-512 in-place loops when the CPU has them (false: the portable path
/// that other CPUs take, for tests).
fn run<Q: Element, KV: Element>(
    a: &IncreFlashAttentionArgs<Q, KV>,
    sink: Option<&[f32]>,
    in_place: bool,
) -> (Vec<f32>, Vec<f32>) {
    let n = a.num_heads;
    let nkv = if a.num_key_value_heads == 0 {
        n
    } else {
        a.num_key_value_heads
    };
    let d = a.head_dim;
    let mut out = vec![0.0f32; a.batch * n * d];
    let mut lse = vec![f32::INFINITY; a.batch * n];
    if d == 0 || out.is_empty() {
        return (out, lse);
    }
    let token_major = match a.kv {
        KvInput::Contiguous { .. } | KvInput::TensorList { .. } => {
            a.input_layout != IfaLayout::Bnsd
        }
        KvInput::Paged { layout, .. } => layout == PagedLayout::Bsh,
    };
    let nh = if token_major { nkv } else { 1 };
    #[cfg(target_arch = "x86_64")]
    let fused = {
        use std::any::TypeId;
        let id = TypeId::of::<KV>();
        // Not f32 (nor f64): reading f32 rows in place was slower than converting them
        // (measured on the bench's paged decode); the narrow types gain 2× (int8) to 7×
        // (f16 / bf16).
        let supported = [
            TypeId::of::<i8>(),
            TypeId::of::<half::f16>(),
            TypeId::of::<half::bf16>(),
        ]
        .contains(&id);
        if in_place && supported {
            Avx512::detect()
        } else {
            None
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = in_place;
    #[cfg(target_arch = "x86_64")]
    let sub = if fused.is_some() {
        FUSED_SUB_BYTES / (nh * d * std::mem::size_of::<KV>())
    } else {
        SUB_ELEMS / (nh * d.next_multiple_of(PAD))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let sub = SUB_ELEMS / (nh * d.next_multiple_of(PAD));
    let ctx = Ctx {
        a,
        n,
        nkv,
        g: n / nkv,
        d,
        dp: d.next_multiple_of(PAD),
        scale: a.scale as f32,
        nh,
        sub: sub.clamp(1, CHUNK),
        kscale: Vec::new(),
        vscale: Vec::new(),
        voffset: Vec::new(),
        #[cfg(target_arch = "x86_64")]
        fused,
    };
    let mut ctx = ctx;
    ctx.kscale = (0..nkv * d).map(|c| ctx.antiquant(0, c).0).collect();
    (ctx.vscale, ctx.voffset) = (0..nkv * d).map(|c| ctx.antiquant(1, c)).unzip();
    let (rows, slot) = (ctx.rows(), ctx.slot());
    // Tasks in (batch, head range, chunk) order; `groups[b·(Nkv / nh) + i]` = the first task
    // and task count of head range i of batch b.
    let per_b = nkv / nh;
    let mut tasks = Vec::new();
    let mut groups = vec![(0usize, 0usize); a.batch * per_b];
    for b in 0..a.batch {
        let (start, len) = a.window(b);
        for i in 0..per_b {
            let first = tasks.len();
            for t0 in (start..start + len).step_by(CHUNK) {
                tasks.push(Task {
                    b,
                    n0: i * nh,
                    t0,
                    t1: (t0 + CHUNK).min(start + len),
                    then: None,
                });
            }
            groups[b * per_b + i] = (first, tasks.len() - first);
        }
    }
    for i in 1..tasks.len() {
        let nx = tasks[i];
        tasks[i - 1].then = Some((nx.b, nx.n0, nx.t0, nx.t1));
    }
    // Every task writes its whole slot, so a reused buffer needs no clearing.
    let mut partials = PARTIALS.with(|p| std::mem::take(&mut *p.borrow_mut()));
    partials.resize(tasks.len() * slot, 0.0);
    partials
        .par_chunks_mut(slot)
        .zip(tasks.par_iter())
        .for_each(|(dst, &t)| ctx.task_with_scratch(t, dst));

    // Merge each head range's chunks in chunk order, then apply the value antiquant scale.
    out.par_chunks_mut(n * d)
        .zip(lse.par_chunks_mut(n))
        .enumerate()
        .for_each(|(b, (out_b, lse_b))| {
            // Each output row is summed here and written once: `out`'s fresh pages are
            // first touched by a write (a read first would map the zero page, and the write
            // after it fault again with a TLB shootdown).
            let mut row = vec![0.0f32; d];
            for i in 0..per_b {
                let (first, count) = groups[b * per_b + i];
                if count == 0 {
                    continue; // empty window: zero rows
                }
                let parts = &partials[first * slot..(first + count) * slot];
                for r in 0..rows {
                    let h = i * rows + r;
                    let dst = &mut out_b[h * d..(h + 1) * d];
                    let sink_h = sink.map(|s| s[h]);
                    let m = parts
                        .chunks_exact(slot)
                        .map(|p| p[r])
                        .fold(sink_h.unwrap_or(f32::NEG_INFINITY), f32::max);
                    let mut l = sink_h.map_or(0.0, |s| (s - m).exp());
                    row.fill(0.0);
                    for p in parts.chunks_exact(slot) {
                        let w = (p[r] - m).exp();
                        l += p[rows + r] * w;
                        let acc = &p[2 * rows + r * d..2 * rows + (r + 1) * d];
                        row.iter_mut().zip(acc).for_each(|(o, x)| *o += w * x);
                    }
                    let inv_l = 1.0 / l;
                    lse_b[h] = m + l.ln();
                    let kvh = h / ctx.g;
                    let (scale, offset) = (
                        &ctx.vscale[kvh * d..(kvh + 1) * d],
                        &ctx.voffset[kvh * d..(kvh + 1) * d],
                    );
                    for (((o, x), s), off) in dst.iter_mut().zip(&row).zip(scale).zip(offset) {
                        *o = (x * inv_l + off) * s;
                    }
                }
            }
        });
    // Kept for the next call unless unusually large (a one-off huge batch should not pin
    // its buffer to the thread).
    if partials.capacity() <= PARTIALS_KEEP {
        PARTIALS.with(|p| *p.borrow_mut() = partials);
    }
    (out, lse)
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
    run(a, None, true).0
}

/// [`incre_flash_attention`] with a learnable sink (`[N]` raw logits, FIA's `learnableSink`)
/// in every row's softmax denominator, also returning the rows' log-sum-exp (`B·N`, `+inf`
/// for an empty window). The LSE leaves out the key antiquant offset's per-row constant
/// `scale·Σ_d q_d·s_d·o_d` (it cancels in the softmax); with a key offset the caller adds it.
pub fn incre_flash_attention_with_sink<Q: Element, KV: Element>(
    a: &IncreFlashAttentionArgs<Q, KV>,
    sink: Option<&[f32]>,
) -> (Vec<f32>, Vec<f32>) {
    run(a, sink, true)
}

/// [`incre_flash_attention`] on the portable path (the one CPUs without AVX-512 take), for
/// tests; same semantics, possibly different rounding.
#[doc(hidden)]
pub fn incre_flash_attention_portable<Q: Element, KV: Element>(
    a: &IncreFlashAttentionArgs<Q, KV>,
) -> Vec<f32> {
    run(a, None, false).0
}

/// [`incre_flash_attention`] rounded (nearest-even) to `O`.
pub fn incre_flash_attention_as<Q: Element, KV: Element, O: Element>(
    a: &IncreFlashAttentionArgs<Q, KV>,
) -> Vec<O> {
    run(a, None, true)
        .0
        .into_iter()
        .map(|x| O::from_f64(x as f64))
        .collect()
}

/// int8 output through `quantScale2` / `quantOffset2` with the reference's rounding
/// ([`IfaPostQuant::quantize`]). Zero rows (`len = 0`) quantise as `offset`.
pub fn incre_flash_attention_int8<Q: Element, KV: Element>(
    a: &IncreFlashAttentionArgs<Q, KV>,
    quant: &IfaPostQuant,
) -> Vec<i8> {
    let (n, d) = (a.num_heads, a.head_dim);
    run(a, None, true)
        .0
        .into_iter()
        .enumerate()
        .map(|(i, x)| {
            let h = (i / d.max(1)) % n.max(1);
            quant.quantize(x as f64, h * d + i % d.max(1))
        })
        .collect()
}
