//! What the forward and backward kernels share: the per-call context (sequences, tile sizes,
//! mask / pse / dropout sources), tile classification against the band, the element-wise
//! score fix-ups (pse, masks, dropout) and the vectorisable row primitives (max, exp, sums).
//!
//! Tiles: a *query tile* is `bq` consecutive query tokens of one sequence, for all `G` query
//! heads of one kv head, stacked as `M = rows·G` rows in token-major order (row `r` is token
//! `i0 + r / G`, head `kvh·G + r % G`). A *kv tile* is up to `bk` consecutive key columns.

use crate::Element;
use burn_ascend_contract::varlen::{DenseMask, Pse, PseType, SeqRule, VarlenProblem};

// Tile sizes, tuned with `burn-ascend bench` on a 2-core AVX-512 machine with 2 MiB of L2
// per core (D = 64/128, G = 4): larger tiles amortise gemm's packing, the K/V tile loads and
// the per-call overhead (a 512 × 512 f32 score tile is 1 MiB). Boundary tiles are computed in
// row chunks with their own column ranges (`CHUNK_ROWS` in the forward), so big query tiles do
// not waste work on the diagonal of causal masks.
/// Target rows (`tokens × G`) of a query tile.
const TARGET_ROWS: usize = 512;
/// Key columns of a kv tile (forward).
const BK: usize = 512;
/// Key columns of a kv tile in the backward (within a span: `varlen_bwd::SPAN`).
const BK_BWD: usize = 128;

/// One sequence's geometry and positional rule.
#[derive(Debug, Clone)]
pub(crate) struct Seq {
    pub b: usize,
    /// First query token.
    pub q0: usize,
    /// First key token.
    pub kv0: usize,
    pub sq: usize,
    pub skv: usize,
    /// Start of this sequence in a dense pse / the dropout element space.
    pub pse0: usize,
    pub rule: SeqRule,
    /// Always-visible leading columns, clamped to `[0, skv]`.
    pub prefix: usize,
}

/// How a (query tile, kv tile) pair is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Nothing allowed: skip.
    Skip,
    /// Everything allowed by the rule and no dense mask: no per-element masking.
    Full,
    /// Mask element by element (boundary of the band, or a dense mask).
    Partial,
}

/// The per-call context.
pub(crate) struct Ctx<'a, 'p> {
    pub p: &'a VarlenProblem<'p>,
    pub n: usize,
    pub nkv: usize,
    pub g: usize,
    pub d: usize,
    pub dv: usize,
    pub scale: f32,
    pub seqs: Vec<Seq>,
    /// Query tokens per query tile.
    pub bq: usize,
    /// Key columns per kv tile (forward).
    pub bk: usize,
    /// Key columns per kv tile of the backward.
    pub bk_bwd: usize,
    pub dense: Option<DenseMask<'p>>,
    /// `(mask, 1 / keepProb)` when dropout is active.
    pub dropout: Option<(&'p [u8], f32)>,
    pub sink: Option<&'p [f32]>,
}

impl<'a, 'p> Ctx<'a, 'p> {
    pub fn new(p: &'a VarlenProblem<'p>) -> Self {
        let dims = &p.dims;
        let (q_off, kv_off, pse_off) = (dims.q_offsets(), dims.kv_offsets(), p.pse_offsets());
        let seqs = (0..dims.batch())
            .map(|b| {
                let rule = p.rule(b);
                let skv = dims.seq_kv[b];
                Seq {
                    b,
                    q0: q_off[b],
                    kv0: kv_off[b],
                    sq: dims.seq_q[b],
                    skv,
                    pse0: pse_off[b],
                    rule,
                    prefix: rule.prefix.clamp(0, skv as i64) as usize,
                }
            })
            .collect();
        let g = dims.group();
        let max_sq = dims.seq_q.iter().copied().max().unwrap_or(0);
        let max_skv = dims.seq_kv.iter().copied().max().unwrap_or(0);
        let dropout = match p.drop_mask {
            Some(m) if p.attrs.keep_prob < 1.0 => Some((m, (1.0 / p.attrs.keep_prob) as f32)),
            _ => None,
        };
        Self {
            p,
            n: dims.head_num,
            nkv: dims.kv_head_num,
            g,
            d: dims.head_dim,
            dv: dims.value_dim,
            scale: p.attrs.scale as f32,
            seqs,
            // Tiles no larger than the longest sequence, so small problems allocate little.
            bq: (TARGET_ROWS / g).clamp(1, max_sq.max(1)),
            bk: BK.min(max_skv.max(1)),
            bk_bwd: BK_BWD.min(max_skv.max(1)),
            dense: p.dense_mask().copied(),
            dropout,
            sink: p.sink,
        }
    }

    /// Whether scores need per-element work on every tile (pse or dense mask).
    pub fn elementwise_scores(&self) -> bool {
        self.dense.is_some() || !matches!(self.p.pse, Pse::None)
    }

    /// `(sequence, kv head, first row)` of every query tile of sequences with `Skv > 0`.
    pub fn query_tasks(&self) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        for (si, s) in self.seqs.iter().enumerate() {
            if s.skv == 0 {
                continue;
            }
            for kvh in 0..self.nkv {
                for i0 in (0..s.sq).step_by(self.bq) {
                    out.push((si, kvh, i0));
                }
            }
        }
        out
    }

    /// Classifies rows `[i0, i1)` × columns `[c0, c1)` of `s` and trims the column range to
    /// the columns some row may attend (for `Partial` tiles).
    pub fn classify(
        &self,
        s: &Seq,
        i0: usize,
        i1: usize,
        c0: usize,
        c1: usize,
    ) -> (Kind, usize, usize) {
        let pre = s.prefix;
        let (mut any, mut all) = (c0 < pre, true);
        let (mut lo_min, mut hi_max) = (usize::MAX, 0);
        for i in i0..i1 {
            let (lo, hi) = s.rule.band_columns(i, s.skv);
            if lo.max(c0) < hi.min(c1) {
                any = true;
                lo_min = lo_min.min(lo);
                hi_max = hi_max.max(hi);
            }
            // Columns below the prefix are allowed anyway.
            all &= (lo <= c0.max(pre) && hi >= c1) || c1 <= pre;
        }
        if !any {
            return (Kind::Skip, c0, c0);
        }
        if all && self.dense.is_none() {
            return (Kind::Full, c0, c1);
        }
        if c0 < pre {
            lo_min = c0;
            hi_max = hi_max.max(pre.min(c1));
        }
        (Kind::Partial, c0.max(lo_min), c1.min(hi_max))
    }

    /// Query head of row `r` of a query tile of kv head `kvh`.
    #[inline]
    pub fn head(&self, kvh: usize, r: usize) -> usize {
        kvh * self.g + r % self.g
    }

    /// Loads the query tile (rows `[i0, i0 + rows)`, all heads of `kvh`) of `src`
    /// (`[T, N, width]`) into `dst` (`M × width`), multiplied by `mul`.
    #[allow(clippy::too_many_arguments)]
    pub fn load_q_rows<T: Element>(
        &self,
        src: &[T],
        width: usize,
        s: &Seq,
        kvh: usize,
        i0: usize,
        rows: usize,
        mul: f32,
        dst: &mut [f32],
    ) {
        let gw = self.g * width;
        for ii in 0..rows {
            let start = ((s.q0 + i0 + ii) * self.n + kvh * self.g) * width;
            load(
                &src[start..start + gw],
                &mut dst[ii * gw..(ii + 1) * gw],
                mul,
            );
        }
    }

    /// Loads key/value rows `[c0, c1)` of kv head `kvh` of `src` (`[T, Nkv, width]`) into
    /// `dst` (`(c1 − c0) × width`).
    #[allow(clippy::too_many_arguments)]
    pub fn load_kv_rows<T: Element>(
        &self,
        src: &[T],
        width: usize,
        s: &Seq,
        kvh: usize,
        c0: usize,
        c1: usize,
        dst: &mut [f32],
    ) {
        for (jj, j) in (c0..c1).enumerate() {
            let start = ((s.kv0 + j) * self.nkv + kvh) * width;
            load(
                &src[start..start + width],
                &mut dst[jj * width..(jj + 1) * width],
                1.0,
            );
        }
    }

    /// Turns the raw products `(scale·q)·k` of a tile (rows `M = rows·G`, columns
    /// `[c0, c0 + nc)`, leading dimension `ld`) into scores: adds the pse and sets masked
    /// entries to −∞. Full tiles without pse are left as they are.
    #[allow(clippy::too_many_arguments)]
    pub fn fix_scores(
        &self,
        st: &mut [f32],
        ld: usize,
        s: &Seq,
        kvh: usize,
        i0: usize,
        rows: usize,
        c0: usize,
        nc: usize,
        kind: Kind,
    ) {
        vectorized(FixScores {
            ctx: self,
            st,
            ld,
            s,
            kvh,
            i0,
            rows,
            c0,
            nc,
            kind,
        });
    }

    /// Writes the dropout factors (`bit / keepProb`) of a tile into `dst` (same geometry as
    /// [`Self::fix_scores`]). Only called when dropout is active.
    #[allow(clippy::too_many_arguments)]
    pub fn drop_factors(
        &self,
        dst: &mut [f32],
        ld: usize,
        s: &Seq,
        kvh: usize,
        i0: usize,
        rows: usize,
        c0: usize,
        nc: usize,
    ) {
        let Some((mask, inv_keep)) = self.dropout else {
            return;
        };
        for r in 0..rows * self.g {
            let i = i0 + r / self.g;
            let h = self.head(kvh, r);
            let e0 = s.pse0 + (h * s.sq + i) * s.skv + c0;
            for (jj, x) in dst[r * ld..r * ld + nc].iter_mut().enumerate() {
                *x = if burn_ascend_contract::dropout::kept(mask, e0 + jj) {
                    inv_keep
                } else {
                    0.0
                };
            }
        }
    }

    /// Index of the statistics of (sequence, head, row).
    #[inline]
    pub fn stat_index(&self, s: &Seq, h: usize, i: usize) -> usize {
        self.p
            .attrs
            .softmax_layout
            .stat_index(s.q0, s.sq, self.n, h, i)
    }
}

struct FixScores<'c, 'a, 'p, 'x> {
    ctx: &'c Ctx<'a, 'p>,
    st: &'x mut [f32],
    ld: usize,
    s: &'x Seq,
    kvh: usize,
    i0: usize,
    rows: usize,
    c0: usize,
    nc: usize,
    kind: Kind,
}

impl SimdKernel for FixScores<'_, '_, '_, '_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let Self {
            ctx,
            st,
            ld,
            s,
            kvh,
            i0,
            rows,
            c0,
            nc,
            kind,
        } = self;
        let scale = ctx.scale;
        let outer_add_mul = ctx.p.attrs.pse_type == PseType::OuterAddMul;
        for r in 0..rows * ctx.g {
            let i = i0 + r / ctx.g;
            let h = ctx.head(kvh, r);
            let row = &mut st[r * ld..r * ld + nc];
            match ctx.p.pse {
                Pse::None => {}
                Pse::Dense(pse) => {
                    let start = s.pse0 + (h * s.sq + i) * s.skv + c0;
                    let src = &pse[start..start + nc];
                    if outer_add_mul {
                        row.iter_mut().zip(src).for_each(|(x, p)| *x += scale * p);
                    } else {
                        row.iter_mut().zip(src).for_each(|(x, p)| *x += p);
                    }
                }
                Pse::Alibi { slopes, per_batch } => {
                    let slope = slopes[if per_batch { s.b * ctx.n + h } else { h }];
                    let qpos = i as i64 + ctx.p.q_start_idx;
                    let sqrt = ctx.p.attrs.pse_type == PseType::InnerMulAddSqrt;
                    for (jj, x) in row.iter_mut().enumerate() {
                        let kpos = (c0 + jj) as i64 + ctx.p.kv_start_idx;
                        let dist = (kpos - qpos).unsigned_abs() as f64;
                        let dist = if sqrt { dist.sqrt() } else { dist };
                        *x += (-(slope as f64) * dist) as f32;
                    }
                }
                Pse::AlibiCompressed { .. } => {
                    // One read per element from the compressed tensor (no materialised bias).
                    for (jj, x) in row.iter_mut().enumerate() {
                        let v = ctx.p.pse_value(0, s.b, h, i, c0 + jj) as f32;
                        *x += if outer_add_mul { scale * v } else { v };
                    }
                }
            }
            if kind == Kind::Partial {
                // Allowed: the prefix `[0, pre)` and the band `[lo, hi)`; the rest of the row's
                // columns are masked, as (at most) two runs.
                let (lo, hi) = s.rule.band_columns(i, s.skv);
                let pre = s.prefix;
                let end = c0 + nc;
                let local = |a: usize, b: usize| (a.clamp(c0, end) - c0, b.clamp(c0, end) - c0);
                for (a, b) in [local(pre, lo), local(pre.max(hi), end)] {
                    if a < b {
                        row[a..b].fill(f32::NEG_INFINITY);
                    }
                }
                if let Some(m) = &ctx.dense {
                    for (jj, x) in row.iter_mut().enumerate() {
                        if m.masked(s.b, h, i, c0 + jj) {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
    }
}

/// `dst = src · mul`, converted to f32 (compiled for the CPU's vector width: the plain
/// loop ran at the baseline's 4 lanes, ~4 % of the forward).
#[inline]
fn load<T: Element>(src: &[T], dst: &mut [f32], mul: f32) {
    vectorized(Map {
        src,
        dst,
        f: |x: T| x.to_f64() as f32 * mul,
    });
}

/// Writes an f32 row as `T`, times `mul` (compiled for the CPU's vector width, like
/// [`load`]).
#[inline]
pub(crate) fn store<T: Element>(src: &[f32], dst: &mut [T], mul: f32) {
    vectorized(Map {
        src,
        dst,
        f: |x: f32| T::from_f64((x * mul) as f64),
    });
}

/// `dst[i] = f(src[i])`.
struct Map<'a, S, D, F> {
    src: &'a [S],
    dst: &'a mut [D],
    f: F,
}

impl<S: Copy, D, F: Fn(S) -> D> SimdKernel for Map<'_, S, D, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (d, &x) in self.dst.iter_mut().zip(self.src) {
            *d = (self.f)(x);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Row primitives. Written as fixed-width lane loops so LLVM vectorises them; the lane order is
// fixed, so the results do not depend on threads or runs.
// ---------------------------------------------------------------------------------------------

const LANES: usize = 16;

/// `exp(x)` in f32 (Cephes' `expf` polynomial, ~1 ulp on [−87, 88]), branch-free so loops over
/// it vectorise. Returns exactly 0 for `x < −87.3` (including −∞).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23
    let xc = x.clamp(-87.3, 88.7);
    // Fused multiply-adds (`mul_add`: one `vfmadd` each in the AVX-512 / AVX2+FMA builds of
    // the loops, about half the instructions of separate multiplies and adds; exact
    // everywhere, so every build gives the same bits — a software `fmaf` on x86 CPUs older
    // than FMA, the only slow case).
    // Round to nearest via the magic number: the low mantissa bits of `t` hold n.
    let t = xc.mul_add(LOG2E, MAGIC);
    let n = t - MAGIC;
    let r = (-n).mul_add(C2, (-n).mul_add(C1, xc));
    let mut y = 1.987_569_2e-4_f32;
    y = y.mul_add(r, 1.398_2e-3);
    y = y.mul_add(r, 8.333_452e-3);
    y = y.mul_add(r, 4.166_579_6e-2);
    y = y.mul_add(r, 1.666_666_5e-1);
    y = y.mul_add(r, 0.5);
    y = y.mul_add(r * r, r) + 1.0;
    // 2^n: (bits(t) − bits(MAGIC)) = n, plus the exponent bias, shifted into place.
    let pow2 = f32::from_bits(t.to_bits().wrapping_sub(MAGIC.to_bits()).wrapping_add(127) << 23);
    if x < -87.3 {
        0.0
    } else {
        y * pow2
    }
}

/// An element-wise tile kernel: [`vectorized`] runs [`SimdKernel::run`] compiled for the best
/// instruction set of this CPU. Implementations mark `run` `#[inline(always)]` and call only
/// `#[inline(always)]` helpers in their loops, so the whole loop nest is compiled inside the
/// target-feature function and vectorises at full width.
pub(crate) trait SimdKernel {
    type Output;
    fn run(self) -> Self::Output;
}

struct Dispatch<K>(K);

impl<K: SimdKernel> pulp::WithSimd for Dispatch<K> {
    type Output = K::Output;
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> K::Output {
        self.0.run()
    }
}

/// Runs `k` compiled for AVX-512, AVX2+FMA or the baseline, chosen at run time (pulp's
/// `Arch::dispatch`, which checks the CPU's features).
#[inline(always)]
pub(crate) fn vectorized<K: SimdKernel>(k: K) -> K::Output {
    pulp::Arch::new().dispatch(Dispatch(k))
}

/// `x = exp(x − m) · inv_l` for the `rows` rows (leading dimension `ld`, `nc` columns) of a
/// tile, one max / 1-over-sum per row: the recomputed probabilities of the backward.
pub(crate) struct ProbRows<'a> {
    pub s: &'a mut [f32],
    pub m: &'a [f32],
    pub inv_l: &'a [f32],
    pub rows: usize,
    pub nc: usize,
    pub ld: usize,
}

impl SimdKernel for ProbRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for r in 0..self.rows {
            exp_sub_scale(
                &mut self.s[r * self.ld..r * self.ld + self.nc],
                self.m[r],
                self.inv_l[r],
            );
        }
    }
}

/// Maximum of a row (−∞ for an empty or fully masked row).
#[inline(always)]
pub(crate) fn row_max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &v in acc.iter().chain(tail) {
        m = if v > m { v } else { m };
    }
    m
}

/// `x = exp(x − m)`; returns the sum of the new values.
#[inline(always)]
pub(crate) fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            c[l] = exp(c[l] - m);
            acc[l] += c[l];
        }
    }
    let mut sum = 0.0;
    for v in chunks.into_remainder() {
        *v = exp(*v - m);
        sum += *v;
    }
    acc.iter().sum::<f32>() + sum
}

/// `x = exp(x − m) · inv_l`.
#[inline(always)]
pub(crate) fn exp_sub_scale(x: &mut [f32], m: f32, inv_l: f32) {
    for v in x.iter_mut() {
        *v = exp(*v - m) * inv_l;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_and_zero_below_range() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(
            worst < 4.0 * f32::EPSILON as f64,
            "worst rel error {worst:e}"
        );
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }

    /// The baseline build of an element-wise kernel (what a CPU without AVX2 runs) gives
    /// bitwise the same result as the dispatched one: Rust never contracts or reassociates
    /// float operations (the explicit `mul_add`s are exact in every build), and the
    /// reductions use a fixed lane order.
    #[test]
    fn dispatch_matches_baseline() {
        let run = |arch: Option<pulp::Arch>| {
            let mut s: Vec<f32> = (0..3 * 37).map(|i| (i as f32 * 0.61).sin() * 9.0).collect();
            s[5] = f32::NEG_INFINITY;
            let m = [3.0f32, 1.5, 9.0];
            let inv_l = [0.25f32, 1.0, 0.125];
            let k = ProbRows {
                s: &mut s,
                m: &m,
                inv_l: &inv_l,
                rows: 3,
                nc: 35,
                ld: 37,
            };
            match arch {
                Some(a) => a.dispatch(Dispatch(k)),
                None => vectorized(k),
            }
            let mut row = s[..37].to_vec();
            let sum = match arch {
                Some(a) => a.dispatch(|| exp_sub_sum(&mut row, 2.0)),
                None => exp_sub_sum(&mut row, 2.0),
            };
            (s, row, sum)
        };
        let base = run(Some(pulp::Arch::Scalar));
        let best = run(None);
        assert_eq!(base.0, best.0);
        assert_eq!(base.1, best.1);
        assert_eq!(base.2.to_bits(), best.2.to_bits());
        assert_eq!(base.0[5], 0.0);
    }

    #[test]
    fn row_primitives() {
        let mut x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let m = row_max(&x);
        assert_eq!(m, x.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        let want: f64 = x.iter().map(|&v| ((v - m) as f64).exp()).sum();
        let got = exp_sub_sum(&mut x, m) as f64;
        assert!((got - want).abs() < 1e-5 * want);
        assert_eq!(row_max(&[]), f32::NEG_INFINITY);
    }
}
