//! The portable (`pulp`) loops of the decode kernel's staged path, which CPUs without AVX-512
//! (and f32 / f64 KV everywhere) take: scores `Q'·Kᵀ`, the online-softmax step and `P·V` over
//! K / V rows already converted to f32 (row stride `Dp`, zero padding). Explicit SIMD, the
//! instruction set picked at run time; the lane order of every sum is fixed for a given CPU.

use pulp::Simd;

use super::tile::{exp, exp_sub_sum, row_max, SimdKernel};

/// `s[r][j] = q[r]·k[j]` for the query rows (`q`: `rows × Dp`) and the `ns` rows of `k`
/// (`ns × Dp`), `s` with leading dimension `ld`. Explicit SIMD (pulp picks the instruction
/// set at run time); the lane order of the dot products is fixed for a given CPU.
pub(super) struct Scores<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub dp: usize,
    pub ns: usize,
    pub s: &'a mut [f32],
    pub ld: usize,
}

impl pulp::WithSimd for Scores<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let nb = self.dp / S::F32_LANES;
        let rows = self.q.len() / self.dp;
        let (q, _) = S::as_simd_f32s(self.q);
        let (k, _) = S::as_simd_f32s(&self.k[..self.ns * self.dp]);
        // Query rows in groups of 8 / 4 / 2 / 1, each group reading every K row once.
        let mut r0 = 0;
        while r0 < rows {
            let qr = &q[r0 * nb..];
            let s = &mut self.s[r0 * self.ld..];
            r0 += match rows - r0 {
                8.. => scores_rows::<S, 8>(simd, qr, k, nb, s, self.ld),
                4.. => scores_rows::<S, 4>(simd, qr, k, nb, s, self.ld),
                2.. => scores_rows::<S, 2>(simd, qr, k, nb, s, self.ld),
                _ => scores_rows::<S, 1>(simd, qr, k, nb, s, self.ld),
            };
        }
    }
}

/// [`Scores`] for `R` query rows; returns `R`. The `R` accumulators stay in registers while
/// a K row streams past once.
#[inline(always)]
fn scores_rows<S: Simd, const R: usize>(
    simd: S,
    q: &[S::f32s],
    k: &[S::f32s],
    nb: usize,
    s: &mut [f32],
    ld: usize,
) -> usize {
    let q: [&[S::f32s]; R] = std::array::from_fn(|r| &q[r * nb..(r + 1) * nb]);
    // Two K rows at a time: 2·R independent FMA chains hide the FMA latency, and each query
    // vector is loaded once for both.
    let mut pairs = k.chunks_exact(2 * nb);
    let mut j = 0;
    for k2 in &mut pairs {
        let (k0, k1) = k2.split_at(nb);
        let mut a0 = [simd.splat_f32s(0.0); R];
        let mut a1 = [simd.splat_f32s(0.0); R];
        for c in 0..nb {
            let (x0, x1) = (k0[c], k1[c]);
            for r in 0..R {
                let qv = q[r][c];
                a0[r] = simd.mul_add_e_f32s(qv, x0, a0[r]);
                a1[r] = simd.mul_add_e_f32s(qv, x1, a1[r]);
            }
        }
        for r in 0..R {
            s[r * ld + j] = simd.reduce_sum_f32s(a0[r]);
            s[r * ld + j + 1] = simd.reduce_sum_f32s(a1[r]);
        }
        j += 2;
    }
    for krow in pairs.remainder().chunks_exact(nb) {
        let mut acc = [simd.splat_f32s(0.0); R];
        for (c, &kx) in krow.iter().enumerate() {
            for r in 0..R {
                acc[r] = simd.mul_add_e_f32s(q[r][c], kx, acc[r]);
            }
        }
        for (r, &a) in acc.iter().enumerate() {
            s[r * ld + j] = simd.reduce_sum_f32s(a);
        }
    }
    R
}

/// `acc[r] += Σ_j p[r][j]·v[j]` for the rows of `acc` (`rows × Dp`), `p` with leading
/// dimension `ld`, `v`: `ns × Dp`. Explicit SIMD; each vector of the accumulator rows stays
/// in registers while the `ns` rows of `v` stream past. `pt` (≥ `rows × ns`) is scratch for
/// `p` transposed per row group, so the inner loop reads both operands sequentially.
pub(super) struct Pv<'a> {
    pub p: &'a [f32],
    pub ld: usize,
    pub v: &'a [f32],
    pub dp: usize,
    pub ns: usize,
    pub acc: &'a mut [f32],
    pub pt: &'a mut [f32],
}

impl pulp::WithSimd for Pv<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let (ns, ld) = (self.ns, self.ld);
        let nb = self.dp / S::F32_LANES;
        let rows = self.acc.len() / self.dp;
        let (v, _) = S::as_simd_f32s(&self.v[..ns * self.dp]);
        let (acc, _) = S::as_mut_simd_f32s(self.acc);
        let mut r0 = 0;
        while r0 < rows {
            let p = &self.p[r0 * ld..];
            let a = &mut acc[r0 * nb..];
            let pt = &mut self.pt[r0 * ns..];
            r0 += match rows - r0 {
                8.. => pv_rows::<S, 8>(simd, p, ld, pt, v, nb, ns, a),
                4.. => pv_rows::<S, 4>(simd, p, ld, pt, v, nb, ns, a),
                2.. => pv_rows::<S, 2>(simd, p, ld, pt, v, nb, ns, a),
                _ => pv_rows::<S, 1>(simd, p, ld, pt, v, nb, ns, a),
            };
        }
    }
}

/// [`Pv`] for `R` rows; returns `R`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pv_rows<S: Simd, const R: usize>(
    simd: S,
    p: &[f32],
    ld: usize,
    pt: &mut [f32],
    v: &[S::f32s],
    nb: usize,
    ns: usize,
    acc: &mut [S::f32s],
) -> usize {
    // pt[j·R + r] = p[r][j].
    let pt = &mut pt[..ns * R];
    for (r, row) in p.chunks(ld).take(R).enumerate() {
        for (j, &x) in row[..ns].iter().enumerate() {
            pt[j * R + r] = x;
        }
    }
    let pt = &*pt;
    let (v_pairs, pt_pairs) = (v.chunks_exact(2 * nb), pt.chunks_exact(2 * R));
    let (v_last, pt_last) = (v_pairs.remainder(), pt_pairs.remainder());
    for c in 0..nb {
        // Even and odd tokens in separate accumulators (2·R independent FMA chains), added
        // at the end: a fixed order.
        let mut a0: [S::f32s; R] = std::array::from_fn(|r| acc[r * nb + c]);
        let mut a1 = [simd.splat_f32s(0.0); R];
        for (vv, pp) in v.chunks_exact(2 * nb).zip(pt.chunks_exact(2 * R)) {
            let (v0, v1) = (vv[c], vv[nb + c]);
            for r in 0..R {
                a0[r] = simd.mul_add_e_f32s(simd.splat_f32s(pp[r]), v0, a0[r]);
                a1[r] = simd.mul_add_e_f32s(simd.splat_f32s(pp[R + r]), v1, a1[r]);
            }
        }
        if !pt_last.is_empty() {
            let v0 = v_last[c];
            for r in 0..R {
                a0[r] = simd.mul_add_e_f32s(simd.splat_f32s(pt_last[r]), v0, a0[r]);
            }
        }
        for r in 0..R {
            acc[r * nb + c] = simd.add_f32s(a0[r], a1[r]);
        }
    }
    R
}

/// One online-softmax step for the rows of scores (leading dimension `ld`, `ns` columns):
/// updates the running max / sum, rescales the accumulator rows (stride `dp`) and turns the
/// scores into the unnormalised probabilities `exp(s − max)` for [`Pv`].
pub(super) struct OnlineSoftmax<'a> {
    pub s: &'a mut [f32],
    pub ld: usize,
    pub ns: usize,
    pub maxes: &'a mut [f32],
    pub sums: &'a mut [f32],
    pub acc: &'a mut [f32],
    pub dp: usize,
}

impl SimdKernel for OnlineSoftmax<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (ld, ns, dp) = (self.ld, self.ns, self.dp);
        let stats = self.maxes.iter_mut().zip(self.sums.iter_mut());
        for (r, (m, l)) in stats.enumerate() {
            let row = &mut self.s[r * ld..r * ld + ns];
            // Scores are finite (masked ones are −1e12), so the new max is finite.
            let new_m = m.max(row_max(row));
            // exp(−∞) = 0 on the first step.
            let alpha = exp(*m - new_m);
            let sum = exp_sub_sum(row, new_m);
            *l = *l * alpha + sum;
            *m = new_m;
            if alpha != 1.0 {
                self.acc[r * dp..(r + 1) * dp]
                    .iter_mut()
                    .for_each(|x| *x *= alpha);
            }
        }
    }
}
