//! AVX-512 inner loops of the decode kernel that read the KV cache **in place**: each K / V
//! element is widened to f32 in registers (int8: `vpmovsxbd` + `vcvtdq2ps`; f16: `vcvtph2ps`;
//! bf16: a 16-bit shift) right where the dot products use it, so nothing is staged in memory
//! and an int8 cache costs one byte of memory traffic per element. The next sub-chunk's
//! rows are prefetched into L2 while the current one is computed, spread over the loops (see
//! `decode_prefetch`), so the memory reads overlap the arithmetic.
//!
//! Only compiled for x86-64; [`Avx512::detect`] checks the CPU at run time (AVX-512 F, BW and
//! VL: the masked narrow loads of the row tails need BW + VL), and the callers fall back to the
//! portable (`pulp`) path without it. The public functions are safe: they check every row
//! offset against the slice before the `unsafe` loops run.

use super::decode_prefetch::{Prefetch, PrefetchCursor};
use std::arch::x86_64::*;

/// Proof that the CPU has AVX-512 F / BW / VL (only [`Avx512::detect`] makes one).
#[derive(Clone, Copy, Debug)]
pub(super) struct Avx512(());

impl Avx512 {
    pub fn detect() -> Option<Self> {
        (is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl"))
        .then_some(Self(()))
    }
}

/// A KV element type the fused loops widen in registers.
pub(super) trait Widen: Copy + 'static {
    /// The kernel's element type this one mirrors (same size, alignment and bits).
    type Src: 'static;
    /// 16 elements at `p`, as f32.
    ///
    /// # Safety
    /// `p..p + 16` must be readable and the CPU must have AVX-512 F / BW / VL.
    unsafe fn load16(p: *const Self) -> __m512;
    /// The first `n < 16` elements at `p`, as f32, the other lanes 0 (only `p..p + n` is
    /// read).
    ///
    /// # Safety
    /// `p..p + n` must be readable and the CPU must have AVX-512 F / BW / VL.
    unsafe fn load_part(p: *const Self, n: usize) -> __m512;
}

#[inline(always)]
fn mask(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

impl Widen for i8 {
    type Src = i8;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load16(p: *const i8) -> __m512 {
        // SAFETY: the caller guarantees 16 readable bytes at `p`.
        let x = unsafe { _mm_loadu_si128(p.cast()) };
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x))
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load_part(p: *const i8, n: usize) -> __m512 {
        // SAFETY: masked load: only the `n` readable bytes are accessed.
        let x = unsafe { _mm_maskz_loadu_epi8(mask(n), p) };
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x))
    }
}

/// IEEE half precision, as its bits (`half::f16` is `repr(transparent)` over `u16`).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct F16Bits(pub u16);

/// bfloat16, as its bits (`half::bf16` is `repr(transparent)` over `u16`).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct Bf16Bits(pub u16);

impl Widen for F16Bits {
    type Src = half::f16;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load16(p: *const Self) -> __m512 {
        // SAFETY: the caller guarantees 16 readable halves (32 bytes) at `p`.
        let x = unsafe { _mm256_loadu_si256(p.cast()) };
        _mm512_cvtph_ps(x)
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load_part(p: *const Self, n: usize) -> __m512 {
        // SAFETY: masked load: only the `n` readable halves are accessed.
        let x = unsafe { _mm256_maskz_loadu_epi16(mask(n), p.cast()) };
        _mm512_cvtph_ps(x)
    }
}

impl Widen for Bf16Bits {
    type Src = half::bf16;
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load16(p: *const Self) -> __m512 {
        // SAFETY: the caller guarantees 16 readable bf16 (32 bytes) at `p`.
        let x = unsafe { _mm256_loadu_si256(p.cast()) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(x)))
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load_part(p: *const Self, n: usize) -> __m512 {
        // SAFETY: masked load: only the `n` readable bf16 are accessed.
        let x = unsafe { _mm256_maskz_loadu_epi16(mask(n), p.cast()) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(x)))
    }
}

/// `x` as a slice of `W` when `KV` is `W::Src` (the same type, or `half::f16` / `half::bf16`
/// for their bit wrappers).
pub(super) fn as_widen<KV: 'static, W: Widen>(x: &[KV]) -> Option<&[W]> {
    use std::any::TypeId;
    use std::mem::{align_of, size_of};
    let same = TypeId::of::<KV>() == TypeId::of::<W::Src>()
        && size_of::<KV>() == size_of::<W>()
        && align_of::<W>() <= align_of::<KV>();
    // SAFETY: `KV` is `W::Src`, and `W` is that type itself or a `repr(transparent)` wrapper of
    // the `u16` that `half::f16` / `half::bf16` are `repr(transparent)` over: same size, no
    // stricter alignment, every bit pattern valid. The slice keeps `x`'s lifetime and length.
    same.then(|| unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<W>(), x.len()) })
}

/// The element offsets of a sub-chunk's K / V rows, with their maximum computed once, so the
/// loops that read `d` elements at each offset check them against a buffer in O(1) (the
/// scores and `P·V` of every kv head of a sub-chunk read the same rows).
#[derive(Clone, Copy)]
pub(super) struct Rows<'a> {
    offs: &'a [usize],
    max: usize,
}

impl<'a> Rows<'a> {
    pub fn new(offs: &'a [usize]) -> Self {
        let max = offs.iter().copied().max().unwrap_or(0);
        Self { offs, max }
    }

    /// Checks that `d` elements from every offset lie inside `kv`.
    fn check<T>(&self, kv: &[T], d: usize) {
        assert!(
            self.offs.is_empty() || self.max.checked_add(d).is_some_and(|e| e <= kv.len()),
            "decode: KV row outside its buffer"
        );
    }
}

/// `s[r·ld + j] = q[r]·k_j` for the query rows `q` (`rows × dp`, zero beyond `d`) and the
/// keys `k_j = kv[offs[j]..offs[j] + d]`, widened in registers. While computing, the lines of
/// `pf` (a share of the next sub-chunk) are prefetched into L2.
#[allow(clippy::too_many_arguments)]
pub(super) fn scores<T: Widen>(
    cpu: Avx512,
    q: &[f32],
    dp: usize,
    d: usize,
    kv: &[T],
    offs: Rows<'_>,
    s: &mut [f32],
    ld: usize,
    pf: Prefetch<'_>,
) {
    let _ = cpu;
    let rows = q.len() / dp;
    let ns = offs.offs.len();
    assert!(d <= dp && dp.is_multiple_of(16) && q.len() == rows * dp);
    assert!(ns <= ld && (rows == 0 || s.len() >= (rows - 1) * ld + ns));
    offs.check(kv, d);
    let offs = offs.offs;
    let mut r0 = 0;
    while r0 < rows {
        let (q, s) = (&q[r0 * dp..], &mut s[r0 * ld..]);
        // Prefetch once, during the first row group.
        let pf = if r0 == 0 { pf } else { Prefetch::none() };
        // SAFETY: `cpu` proves the features; the rows of `q` and `s` the group touches are in
        // bounds (checked above), and so is every K row (`Rows::check`).
        r0 += unsafe {
            match rows - r0 {
                8.. => scores_rows::<T, 8, 2>(q, dp, d, kv, offs, s, ld, pf),
                4.. => scores_rows::<T, 4, 4>(q, dp, d, kv, offs, s, ld, pf),
                2.. => scores_rows::<T, 2, 8>(q, dp, d, kv, offs, s, ld, pf),
                _ => scores_rows::<T, 1, 16>(q, dp, d, kv, offs, s, ld, pf),
            }
        };
    }
}

/// Prefetches the cache line at address `p` into L2 (`decode_prefetch`'s hint). A hint: it
/// never faults, whatever `p`.
#[inline(always)]
pub(super) fn prefetch_line(p: usize) {
    // SAFETY: `prefetcht1` only hints the cache; it reads nothing architecturally and never
    // faults, so any address is fine (SSE, always present on x86-64).
    unsafe { _mm_prefetch::<_MM_HINT_T1>(p as *const i8) };
}

/// Sum of each of 16 vectors: lane `i` of the result is the sum of the lanes of `v[i']`, with
/// `i' = (i % 4)·4 + i / 4` (the 4 × 4 transpose that the shuffle tree produces; callers
/// pass their accumulators in that order). 15 adds and 30 shuffles, against 16 full
/// horizontal sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn reduce16(v: [__m512; 16]) -> __m512 {
    // 512 → 256: w[i] = [v[2i].lo + v[2i].hi, v[2i+1].lo + v[2i+1].hi] (8 partials each).
    let mut w = [_mm512_setzero_ps(); 8];
    for (i, w) in w.iter_mut().enumerate() {
        let (x, y) = (v[2 * i], v[2 * i + 1]);
        *w = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(x, y),
            _mm512_shuffle_f32x4::<0xEE>(x, y),
        );
    }
    // 256 → 128: u[i] quarter k = 4 partials of v[4i + k].
    let mut u = [_mm512_setzero_ps(); 4];
    for (i, u) in u.iter_mut().enumerate() {
        let (x, y) = (w[2 * i], w[2 * i + 1]);
        *u = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(x, y),
            _mm512_shuffle_f32x4::<0xDD>(x, y),
        );
    }
    // 128 → 64: x[i] quarter k = [2 partials of v[8i + k], 2 of v[8i + 4 + k]].
    let mut x = [_mm512_setzero_ps(); 2];
    for (i, x) in x.iter_mut().enumerate() {
        let (a, b) = (_mm512_castps_pd(u[2 * i]), _mm512_castps_pd(u[2 * i + 1]));
        // 64-bit unpacks move float pairs; the add is in f32.
        *x = _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
            _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)),
        );
    }
    // 64 → 32: quarter k, position m = v[4m + k].
    _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(x[0], x[1]),
        _mm512_shuffle_ps::<0xDD>(x[0], x[1]),
    )
}

/// [`scores`] for `R` query rows, `TT = 16 / R` keys at a time (`R·TT = 16` accumulators,
/// reduced together by [`reduce16`]). Returns `R`.
///
/// # Safety
/// AVX-512 F / BW / VL; `q` holds `R` rows of `dp ≥ d` f32, `s` rows `r·ld + j` for
/// `r < R`, `j < offs.len()`; every `offs[j] + d` is within `kv`.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn scores_rows<T: Widen, const R: usize, const TT: usize>(
    q: &[f32],
    dp: usize,
    d: usize,
    kv: &[T],
    offs: &[usize],
    s: &mut [f32],
    ld: usize,
    pf: Prefetch<'_>,
) -> usize {
    const { assert!(R * TT == 16) };
    let (nfull, tail) = (d / 16, d % 16);
    let qp = q.as_ptr();
    let kp = kv.as_ptr();
    let ns = offs.len();
    let mut pf = PrefetchCursor::new(pf, ns);
    let mut j = 0;
    while j + TT <= ns {
        // SAFETY (all loads below): K rows checked by the caller, `q` rows of `dp ≥ d`.
        let mut rowp = [kp; TT];
        for (t, r) in rowp.iter_mut().enumerate() {
            // SAFETY: `offs[j + t] + d ≤ kv.len()` (checked by `scores`).
            *r = unsafe { kp.add(offs[j + t]) };
        }
        let mut acc = [_mm512_setzero_ps(); 16];
        for c in 0..nfull {
            let mut qv = [_mm512_setzero_ps(); R];
            for (r, x) in qv.iter_mut().enumerate() {
                // SAFETY: query row `r < R` holds `dp ≥ 16·⌈d / 16⌉` f32.
                *x = unsafe { _mm512_loadu_ps(qp.add(r * dp + c * 16)) };
            }
            for (t, &rp) in rowp.iter().enumerate() {
                // SAFETY: `c < nfull`: 16 elements of the row.
                let kx = unsafe { T::load16(rp.add(c * 16)) };
                for (r, &qr) in qv.iter().enumerate() {
                    // Accumulator of (r, t) at the reduce16 input index of lane r·TT + t.
                    let l = r * TT + t;
                    let i = (l % 4) * 4 + l / 4;
                    acc[i] = _mm512_fmadd_ps(qr, kx, acc[i]);
                }
            }
        }
        if tail != 0 {
            let c = nfull;
            let mut qv = [_mm512_setzero_ps(); R];
            for (r, x) in qv.iter_mut().enumerate() {
                // SAFETY: query row `r < R` holds `dp ≥ 16·⌈d / 16⌉` f32.
                *x = unsafe { _mm512_loadu_ps(qp.add(r * dp + c * 16)) };
            }
            for (t, &rp) in rowp.iter().enumerate() {
                // SAFETY: the row's last `tail` elements.
                let kx = unsafe { T::load_part(rp.add(c * 16), tail) };
                for (r, &qr) in qv.iter().enumerate() {
                    let l = r * TT + t;
                    let i = (l % 4) * 4 + l / 4;
                    acc[i] = _mm512_fmadd_ps(qr, kx, acc[i]);
                }
            }
        }
        let mut out = [0.0f32; 16];
        // SAFETY: `out` holds 16 f32.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), reduce16(acc)) };
        for r in 0..R {
            s[r * ld + j..r * ld + j + TT].copy_from_slice(&out[r * TT..(r + 1) * TT]);
        }
        j += TT;
        pf.step(TT);
    }
    // Remaining keys one at a time.
    while j < ns {
        // SAFETY: `offs[j] + d ≤ kv.len()` (checked by `scores`).
        let rowp = unsafe { kp.add(offs[j]) };
        let mut acc = [_mm512_setzero_ps(); R];
        for c in 0..nfull {
            // SAFETY: `c < nfull`: 16 elements of the row.
            let kx = unsafe { T::load16(rowp.add(c * 16)) };
            for (r, a) in acc.iter_mut().enumerate() {
                // SAFETY: query row `r < R` holds `dp ≥ 16·⌈d / 16⌉` f32.
                let qv = unsafe { _mm512_loadu_ps(qp.add(r * dp + c * 16)) };
                *a = _mm512_fmadd_ps(qv, kx, *a);
            }
        }
        if tail != 0 {
            // SAFETY: the row's last `tail` elements.
            let kx = unsafe { T::load_part(rowp.add(nfull * 16), tail) };
            for (r, a) in acc.iter_mut().enumerate() {
                // SAFETY: query row `r < R` holds `dp ≥ 16·⌈d / 16⌉` f32.
                let qv = unsafe { _mm512_loadu_ps(qp.add(r * dp + nfull * 16)) };
                *a = _mm512_fmadd_ps(qv, kx, *a);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            s[r * ld + j] = _mm512_reduce_add_ps(*a);
        }
        j += 1;
        pf.step(1);
    }
    // All of it, also when there were no keys.
    pf.finish();
    R
}

/// `acc[r] += Σ_j p[r·ld + j]·v_j` for the accumulator rows `acc` (`rows × dp`) and the
/// values `v_j = kv[offs[j]..offs[j] + d]`, widened in registers. While computing, the lines
/// of `pf` are prefetched into L2.
#[allow(clippy::too_many_arguments)]
pub(super) fn pv<T: Widen>(
    cpu: Avx512,
    p: &[f32],
    ld: usize,
    kv: &[T],
    offs: Rows<'_>,
    d: usize,
    acc: &mut [f32],
    dp: usize,
    pf: Prefetch<'_>,
) {
    let _ = cpu;
    let rows = acc.len() / dp;
    let ns = offs.offs.len();
    assert!(d <= dp && dp.is_multiple_of(16) && acc.len() == rows * dp);
    assert!(ns <= ld && (rows == 0 || p.len() >= (rows - 1) * ld + ns));
    offs.check(kv, d);
    let offs = offs.offs;
    let mut r0 = 0;
    while r0 < rows {
        let (p, a) = (&p[r0 * ld..], &mut acc[r0 * dp..]);
        let next = if r0 == 0 { pf } else { Prefetch::none() };
        // SAFETY: `cpu` proves the features; bounds checked above.
        r0 += unsafe {
            match rows - r0 {
                8.. => pv_rows::<T, 8>(p, ld, kv, offs, d, a, dp, next),
                4.. => pv_rows::<T, 4>(p, ld, kv, offs, d, a, dp, next),
                2.. => pv_rows::<T, 2>(p, ld, kv, offs, d, a, dp, next),
                _ => pv_rows::<T, 1>(p, ld, kv, offs, d, a, dp, next),
            }
        };
    }
}

/// [`pv`] for `R` rows; returns `R`. The columns are done in blocks of `CB` vectors
/// (`R·CB ≤ 16` accumulators in registers, independent FMA chains), each block streaming the
/// keys once: a key row's bytes of a block are read once, not once per vector.
///
/// # Safety
/// AVX-512 F / BW / VL; `acc` holds `R` rows of `dp ≥ d` f32, `p` rows `r·ld + j` for
/// `r < R`, `j < offs.len()`; every `offs[j] + d` is within `kv`.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn pv_rows<T: Widen, const R: usize>(
    p: &[f32],
    ld: usize,
    kv: &[T],
    offs: &[usize],
    d: usize,
    acc: &mut [f32],
    dp: usize,
    next: Prefetch<'_>,
) -> usize {
    let nb = d.div_ceil(16);
    let widest = if R >= 2 { 16 / R } else { 8 };
    // The prefetches are spread over all the blocks (`nb·ns` vector-key steps), so the line
    // fill buffers are neither saturated during one block nor idle during the others.
    let mut pf = PrefetchCursor::new(next, nb * offs.len());
    let mut c = 0;
    while c < nb {
        let rest = (nb - c).min(widest);
        let pf = &mut pf;
        // Whole vectors only (no masked tail): the loads need no per-key check.
        let full = (c + rest) * 16 <= d;
        // SAFETY: forwarded from the caller; blocks stay within the `nb` vectors of a row.
        c += unsafe {
            match (rest, full) {
                (8.., true) => pv_block::<T, R, 8, true>(p, ld, kv, offs, d, c, acc, dp, pf),
                (4.., true) => pv_block::<T, R, 4, true>(p, ld, kv, offs, d, c, acc, dp, pf),
                (2.., true) => pv_block::<T, R, 2, true>(p, ld, kv, offs, d, c, acc, dp, pf),
                (_, true) => pv_block::<T, R, 1, true>(p, ld, kv, offs, d, c, acc, dp, pf),
                (8.., false) => pv_block::<T, R, 8, false>(p, ld, kv, offs, d, c, acc, dp, pf),
                (4.., false) => pv_block::<T, R, 4, false>(p, ld, kv, offs, d, c, acc, dp, pf),
                (2.., false) => pv_block::<T, R, 2, false>(p, ld, kv, offs, d, c, acc, dp, pf),
                (_, false) => pv_block::<T, R, 1, false>(p, ld, kv, offs, d, c, acc, dp, pf),
            }
        };
    }
    pf.finish();
    R
}

/// Vectors `[c0, c0 + CB)` (columns `16·c0..`) of [`pv_rows`]; returns `CB`. `FULL`: the
/// block's vectors are all whole (`16·(c0 + CB) ≤ d`), so no load checks for the row's tail.
///
/// # Safety
/// As [`pv_rows`], and `c0 + CB ≤ ⌈d / 16⌉` (`16·(c0 + CB) ≤ d` when `FULL`).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn pv_block<T: Widen, const R: usize, const CB: usize, const FULL: bool>(
    p: &[f32],
    ld: usize,
    kv: &[T],
    offs: &[usize],
    d: usize,
    c0: usize,
    acc: &mut [f32],
    dp: usize,
    pf: &mut PrefetchCursor<'_>,
) -> usize {
    let kp = kv.as_ptr();
    let pp = p.as_ptr();
    let ap = acc.as_mut_ptr();
    // Elements of the block's last vector (< 16 only for the row's tail).
    let last_n = (d - (c0 + CB - 1) * 16).min(16);
    let mut a = [[_mm512_setzero_ps(); CB]; R];
    for (r, ar) in a.iter_mut().enumerate() {
        for (v, x) in ar.iter_mut().enumerate() {
            // SAFETY: accumulator row `r` holds `dp ≥ 16·(c0 + CB)` f32.
            *x = unsafe { _mm512_loadu_ps(ap.add(r * dp + (c0 + v) * 16)) };
        }
    }
    for (j, &o) in offs.iter().enumerate() {
        // SAFETY: the row at `o` holds `d` elements (checked by `pv`), and the block's
        // vectors lie within them (the last one masked to `last_n`).
        let rp = unsafe { kp.add(o + c0 * 16) };
        let mut x = [_mm512_setzero_ps(); CB];
        for (v, xv) in x.iter_mut().enumerate() {
            // SAFETY: vector `v` of the block lies within the row; the last one is masked to
            // its `last_n` elements when the row ends there.
            *xv = unsafe {
                if FULL || v + 1 < CB || last_n == 16 {
                    T::load16(rp.add(v * 16))
                } else {
                    T::load_part(rp.add(v * 16), last_n)
                }
            };
        }
        for (r, ar) in a.iter_mut().enumerate() {
            // SAFETY: `p` row `r` holds `ns` probabilities.
            let pb = _mm512_set1_ps(unsafe { *pp.add(r * ld + j) });
            for (av, &xv) in ar.iter_mut().zip(&x) {
                *av = _mm512_fmadd_ps(pb, xv, *av);
            }
        }
        pf.step(CB);
    }
    for (r, ar) in a.iter().enumerate() {
        for (v, &x) in ar.iter().enumerate() {
            // SAFETY: as for the loads above.
            unsafe { _mm512_storeu_ps(ap.add(r * dp + (c0 + v) * 16), x) };
        }
    }
    CB
}

/// `exp(x)` of 16 lanes: the polynomial of [`super::tile::exp`] with the same operations
/// (so the same bits), 0 for `x < −87.3`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn exp16(x: __m512) -> __m512 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23
    let set = _mm512_set1_ps;
    let xc = _mm512_min_ps(_mm512_max_ps(x, set(-87.3)), set(88.7));
    let t = _mm512_fmadd_ps(xc, set(LOG2E), set(MAGIC));
    let n = _mm512_sub_ps(t, set(MAGIC));
    // fma(−n, C, y) = −(n·C) + y.
    let r = _mm512_fnmadd_ps(n, set(C2), _mm512_fnmadd_ps(n, set(C1), xc));
    let mut y = set(1.987_569_2e-4);
    for c in [
        1.398_2e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        y = _mm512_fmadd_ps(y, r, set(c));
    }
    y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r), set(1.0));
    let bits = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(MAGIC.to_bits() as i32),
    );
    let pow2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
        bits,
        _mm512_set1_epi32(127),
    )));
    let tiny = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, set(-87.3));
    _mm512_maskz_mul_ps(!tiny, y, pow2)
}

/// One online-softmax step for `maxes.len()` rows of scores (leading dimension `ld`, `ns`
/// columns): updates each row's running max and sum, rescales its accumulator row (stride
/// `dp`) and turns the scores into the unnormalised probabilities `exp(s − max)` for [`pv`].
/// The AVX-512 form of the portable path's `OnlineSoftmax` (the same `exp`).
#[allow(clippy::too_many_arguments)]
pub(super) fn online_softmax(
    cpu: Avx512,
    s: &mut [f32],
    ld: usize,
    ns: usize,
    maxes: &mut [f32],
    sums: &mut [f32],
    acc: &mut [f32],
    dp: usize,
) {
    let _ = cpu;
    let rows = maxes.len();
    assert!(sums.len() == rows && acc.len() >= rows * dp && dp.is_multiple_of(16));
    assert!(ns <= ld && (rows == 0 || s.len() >= (rows - 1) * ld + ns));
    // SAFETY: `cpu` proves the features; row `r` of `s` holds `ns` scores from `r·ld` and
    // row `r` of `acc` `dp` f32 from `r·dp` (checked above).
    unsafe { online_softmax_rows(s.as_mut_ptr(), ld, ns, maxes, sums, acc.as_mut_ptr(), dp) }
}

/// [`online_softmax`] on raw rows.
///
/// # Safety
/// AVX-512 F / BW / VL; `s + r·ld .. + ns` and `acc + r·dp .. + dp` are valid for every row
/// `r < maxes.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn online_softmax_rows(
    s: *mut f32,
    ld: usize,
    ns: usize,
    maxes: &mut [f32],
    sums: &mut [f32],
    acc: *mut f32,
    dp: usize,
) {
    let (full, tail) = (ns / 16, ns % 16);
    let tail_mask = mask(tail);
    for (r, (m, l)) in maxes.iter_mut().zip(sums.iter_mut()).enumerate() {
        // SAFETY: row `r < maxes.len()` starts at `r·ld` (the caller's contract); every
        // access below stays within its `ns` scores or its `dp` accumulators.
        let row = unsafe { s.add(r * ld) };
        let mut mv = _mm512_set1_ps(f32::NEG_INFINITY);
        for i in 0..full {
            // SAFETY: vector `i < ns / 16` of the row.
            mv = _mm512_max_ps(mv, unsafe { _mm512_loadu_ps(row.add(16 * i)) });
        }
        if tail != 0 {
            // SAFETY: masked: only the row's last `tail` scores are read.
            let x = unsafe { _mm512_mask_loadu_ps(mv, tail_mask, row.add(16 * full)) };
            mv = _mm512_max_ps(mv, x);
        }
        // Scores are finite (masked ones are −1e12), so the new max is finite.
        let new_m = m.max(_mm512_reduce_max_ps(mv));
        // exp(−∞) = 0 on the first step.
        let alpha = super::tile::exp(*m - new_m);
        let mb = _mm512_set1_ps(new_m);
        let mut sv = _mm512_setzero_ps();
        for i in 0..full {
            // SAFETY: vector `i < ns / 16` of the row.
            unsafe {
                let p = exp16(_mm512_sub_ps(_mm512_loadu_ps(row.add(16 * i)), mb));
                _mm512_storeu_ps(row.add(16 * i), p);
                sv = _mm512_add_ps(sv, p);
            }
        }
        if tail != 0 {
            // SAFETY: masked: only the row's last `tail` scores are accessed.
            unsafe {
                let x = _mm512_maskz_loadu_ps(tail_mask, row.add(16 * full));
                let p = _mm512_maskz_mov_ps(tail_mask, exp16(_mm512_sub_ps(x, mb)));
                _mm512_mask_storeu_ps(row.add(16 * full), tail_mask, p);
                sv = _mm512_add_ps(sv, p);
            }
        }
        *l = *l * alpha + _mm512_reduce_add_ps(sv);
        *m = new_m;
        if alpha != 1.0 {
            let a = _mm512_set1_ps(alpha);
            for i in 0..dp / 16 {
                // SAFETY: vector `i < dp / 16` of accumulator row `r`.
                unsafe {
                    let p = acc.add(r * dp + 16 * i);
                    _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), a));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn reduce16_of(v: &[[f32; 16]; 16]) -> [f32; 16] {
        let mut vv = [_mm512_setzero_ps(); 16];
        for (x, row) in vv.iter_mut().zip(v) {
            // SAFETY: `row` holds 16 f32.
            *x = unsafe { _mm512_loadu_ps(row.as_ptr()) };
        }
        let mut out = [0.0f32; 16];
        // SAFETY: `out` holds 16 f32.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), reduce16(vv)) };
        out
    }

    #[test]
    fn reduce16_sums_each_vector() {
        let Some(_) = Avx512::detect() else {
            return;
        };
        let v: [[f32; 16]; 16] =
            std::array::from_fn(|i| std::array::from_fn(|l| (i * 100 + l) as f32));
        // SAFETY: the features were detected.
        let out = unsafe { reduce16_of(&v) };
        for (lane, &x) in out.iter().enumerate() {
            let i = (lane % 4) * 4 + lane / 4;
            assert_eq!(x, v[i].iter().sum::<f32>(), "lane {lane}");
        }
    }
}
