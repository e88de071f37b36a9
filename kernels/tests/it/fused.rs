//! The fused transformer ops' kernels (RMSNorm, SwiGLU, softmax cross-entropy, rotary
//! embedding: what a training step fuses so that it launches fewer ops): the f64 references' backwards against central
//! finite differences of their forwards, the cross-entropy reference against CANN's documented
//! example, and the fast f32 CPU kernels against the references.

use burn_ascend_contract::fused::rotary::{self, RotaryMode};
use burn_ascend_kernels::cpu::fused as cpu;
use burn_ascend_kernels::reference::fused::{cross_entropy, rms_norm, rotary as rope, swiglu};
use burn_ascend_test_support::{assert_close, Rng};

/// A deterministic pseudo-random vector in [-1.5, 1.5) (the shared generator, one per seed).
fn data(n: usize, seed: u64) -> Vec<f64> {
    Rng::new(seed).vec(n, 1.5)
}

/// `∂(Σ w·f(x)) / ∂x` by central differences, step `h`.
fn numeric_grad(x: &[f64], w: &[f64], h: f64, f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let (mut p, mut m) = (x.to_vec(), x.to_vec());
            p[i] += h;
            m[i] -= h;
            let dot = |v: Vec<f64>| v.iter().zip(w).map(|(a, b)| a * b).sum::<f64>();
            (dot(f(&p)) - dot(f(&m))) / (2.0 * h)
        })
        .collect()
}

#[test]
fn rms_norm_backward_matches_central_differences_in_f64() {
    let (rows, cols, eps) = (3, 7, 1e-5);
    let (x, g, dy) = (data(rows * cols, 1), data(cols, 2), data(rows * cols, 3));
    let (_, rstd) = rms_norm::rms_norm_fwd(&x, &g, rows, cols, eps);
    let (dx, dg) = rms_norm::rms_norm_bwd(&dy, &x, &rstd, &g, rows, cols);
    let ndx = numeric_grad(&x, &dy, 1e-6, |x| {
        rms_norm::rms_norm_fwd(x, &g, rows, cols, eps).0
    });
    let ndg = numeric_grad(&g, &dy, 1e-6, |g| {
        rms_norm::rms_norm_fwd(&x, g, rows, cols, eps).0
    });
    assert_close("rms_norm dx", &dx, &ndx, 1e-8, 0.0);
    assert_close("rms_norm dgamma", &dg, &ndg, 1e-8, 0.0);
}

#[test]
fn swiglu_backward_matches_central_differences_in_f64_split_on_a_middle_dimension() {
    // x [2, 6, 3] split along dim 1: outer 2, half 3, inner 3.
    let (outer, half, inner) = (2, 3, 3);
    let x = data(outer * 2 * half * inner, 4);
    let dy = data(outer * half * inner, 5);
    let dx = swiglu::swiglu_bwd(&dy, &x, outer, half, inner);
    let n = numeric_grad(&x, &dy, 1e-6, |x| swiglu::swiglu_fwd(x, outer, half, inner));
    assert_close("swiglu dx", &dx, &n, 1e-8, 0.0);
    // The first half is the gate: silu(a)·b with a = x[0,0,0], b = x[0,3,0].
    let y = swiglu::swiglu_fwd(&x, outer, half, inner);
    let (a, b) = (x[0], x[3 * inner]);
    assert!((y[0] - a / (1.0 + (-a).exp()) * b).abs() < 1e-15);
}

#[test]
fn cross_entropy_gradient_matches_central_differences_in_f64_with_an_ignored_row() {
    let (n, c, ignore) = (4, 5, -100);
    let x = data(n * c, 6);
    let target = [3, ignore, 0, 4];
    let (_, lp) = cross_entropy::cross_entropy_fwd(&x, &target, n, c, ignore);
    let dx = cross_entropy::cross_entropy_bwd(0.7, &lp, &target, n, c, ignore);
    let num = numeric_grad(&x, &[0.7], 1e-6, |x| {
        vec![cross_entropy::cross_entropy_fwd(x, &target, n, c, ignore).0]
    });
    assert_close("cross_entropy dx", &dx, &num, 1e-8, 0.0);
    assert!(
        dx[c..2 * c].iter().all(|&v| v == 0.0),
        "the ignored row gets no gradient"
    );
}

#[test]
fn cross_entropy_reference_reproduces_canns_documented_example() {
    // aclnnCrossEntropyLoss.md's example: input [[5,0,3,3,7],[9,3,5,2,4]], targets [0, 0],
    // mean: loss 1.0937543, logProb as listed.
    let x = [5.0, 0.0, 3.0, 3.0, 7.0, 9.0, 3.0, 5.0, 2.0, 4.0];
    let (loss, lp) = cross_entropy::cross_entropy_fwd(&x, &[0, 0], 2, 5, -100);
    assert!((loss - 1.093_754_3).abs() < 1e-6, "loss {loss}");
    let want = [
        -2.159461, -7.159461, -4.159461, -4.159461, -0.159461, -0.0280476, -6.0280476, -4.0280476,
        -7.0280476, -5.0280476,
    ];
    assert_close("logProb", &lp, &want, 1e-6, 0.0);
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[test]
fn fast_cpu_kernels_match_the_f64_references_within_f32_rounding() {
    let (rows, cols, eps) = (5, 33, 1e-6);
    let (x, g, dy) = (data(rows * cols, 7), data(cols, 8), data(rows * cols, 9));
    let (y, rstd) = rms_norm::rms_norm_fwd(&x, &g, rows, cols, eps);
    let (dx, dg) = rms_norm::rms_norm_bwd(&dy, &x, &rstd, &g, rows, cols);
    let (fy, frstd) = cpu::rms_norm_fwd(&f32s(&x), &f32s(&g), cols, eps);
    let (fdx, fdg) = cpu::rms_norm_bwd(&f32s(&dy), &f32s(&x), &frstd, &f32s(&g), cols);
    for (name, a, b) in [
        ("y", &y, f64s(&fy)),
        ("rstd", &rstd, f64s(&frstd)),
        ("dx", &dx, f64s(&fdx)),
        ("dgamma", &dg, f64s(&fdg)),
    ] {
        assert_close(&format!("rms_norm {name}"), a, &b, 1e-5, 0.0);
    }

    let (outer, half, inner) = (3, 4, 2);
    let x = data(outer * 2 * half * inner, 10);
    let dy = data(outer * half * inner, 11);
    let y = swiglu::swiglu_fwd(&x, outer, half, inner);
    let dx = swiglu::swiglu_bwd(&dy, &x, outer, half, inner);
    let fy = f64s(&cpu::swiglu_fwd(&f32s(&x), outer, half, inner));
    assert_close("swiglu y", &y, &fy, 1e-6, 0.0);
    let fdx = cpu::swiglu_bwd(&f32s(&dy), &f32s(&x), outer, half, inner);
    assert_close("swiglu dx", &dx, &f64s(&fdx), 1e-6, 0.0);

    let (n, c) = (6, 11);
    let x: Vec<f64> = data(n * c, 12).iter().map(|v| v * 4.0).collect();
    let target = [0, 10, 5, -100, 3, 3];
    let (loss, lp) = cross_entropy::cross_entropy_fwd(&x, &target, n, c, -100);
    let dx = cross_entropy::cross_entropy_bwd(1.3, &lp, &target, n, c, -100);
    let (floss, flp) = cpu::cross_entropy_fwd(&f32s(&x), &target, c, -100);
    let fdx = cpu::cross_entropy_bwd(1.3, &flp, &target, c, -100);
    assert!((loss - floss as f64).abs() < 1e-5, "loss {loss} vs {floss}");
    assert_close("cross_entropy logProb", &lp, &f64s(&flp), 1e-5, 0.0);
    assert_close("cross_entropy dx", &dx, &f64s(&fdx), 1e-6, 0.0);
}

#[test]
fn rotary_backward_matches_central_differences_in_f64_in_both_modes_with_broadcast_tables() {
    // x [2, 3, 2, 6] as BSND, cos / sin [1, 3, 1, 6] (1S1D): each table row serves 4 rows.
    let (x_shape, c_shape) = ([2, 3, 2, 6], [1, 3, 1, 6]);
    for mode in [RotaryMode::Half, RotaryMode::Interleave] {
        let dims = rotary::validate_fwd(&x_shape, &c_shape, &c_shape, mode).unwrap();
        let x = data(72, 13);
        let (cos, sin) = (data(18, 14), data(18, 15));
        let dy = data(72, 16);
        let dx = rope::rotary_bwd(&dy, &cos, &sin, &dims, mode);
        let n = numeric_grad(&x, &dy, 1e-6, |x| {
            rope::rotary_fwd(x, &cos, &sin, &dims, mode)
        });
        assert_close(&format!("{mode:?} dx"), &dx, &n, 1e-8, 0.0);
        let (dcos, dsin) = rope::rotary_bwd_tables(&dy, &x, &dims, mode);
        let nc = numeric_grad(&cos, &dy, 1e-6, |c| {
            rope::rotary_fwd(&x, c, &sin, &dims, mode)
        });
        let ns = numeric_grad(&sin, &dy, 1e-6, |s| {
            rope::rotary_fwd(&x, &cos, s, &dims, mode)
        });
        assert_close(&format!("{mode:?} dcos"), &dcos, &nc, 1e-8, 0.0);
        assert_close(&format!("{mode:?} dsin"), &dsin, &ns, 1e-8, 0.0);
    }
    // Half mode pairs element 0 with D/2 = 3: y[0] = x0·c0 − x3·s0 on the first row.
    let dims = rotary::validate_fwd(
        &[1, 1, 1, 6],
        &[1, 1, 1, 6],
        &[1, 1, 1, 6],
        RotaryMode::Half,
    )
    .unwrap();
    let (x, c, s) = (data(6, 17), data(6, 18), data(6, 19));
    let y = rope::rotary_fwd(&x, &c, &s, &dims, RotaryMode::Half);
    assert!((y[0] - (x[0] * c[0] - x[3] * s[0])).abs() < 1e-15);
    assert!((y[4] - (x[4] * c[4] + x[1] * s[4])).abs() < 1e-15);
}

#[test]
fn fast_cpu_rotary_kernel_matches_the_f64_reference_within_f32_rounding() {
    // x [3, 2, 4, 8] as BNSD with cos [3, 1, 4, 8] (B1SD), and as SBND with S11D; then 600
    // rows, more than one parallel task's, whose boundaries fall inside a head.
    for (x_shape, c_shape, mode) in [
        ([3, 2, 4, 8], [3, 1, 4, 8], RotaryMode::Half),
        ([3, 2, 4, 8], [3, 1, 1, 8], RotaryMode::Interleave),
        ([2, 3, 100, 8], [2, 1, 100, 8], RotaryMode::Half),
        ([2, 3, 100, 8], [1, 1, 100, 8], RotaryMode::Interleave),
    ] {
        let dims = rotary::validate_fwd(&x_shape, &c_shape, &c_shape, mode).unwrap();
        let n: usize = x_shape.iter().product();
        let m: usize = c_shape.iter().product();
        let (x, cos, sin, dy) = (data(n, 20), data(m, 21), data(m, 22), data(n, 23));
        let y = rope::rotary_fwd(&x, &cos, &sin, &dims, mode);
        let dx = rope::rotary_bwd(&dy, &cos, &sin, &dims, mode);
        let fy = cpu::rotary_fwd(&f32s(&x), &f32s(&cos), &f32s(&sin), &dims, mode);
        let fdx = cpu::rotary_bwd(&f32s(&dy), &f32s(&cos), &f32s(&sin), &dims, mode);
        assert_close(&format!("{mode:?} y"), &y, &f64s(&fy), 1e-6, 0.0);
        assert_close(&format!("{mode:?} dx"), &dx, &f64s(&fdx), 1e-6, 0.0);
    }
}

#[test]
fn swiglu_of_the_halves_held_apart_equals_the_reference_on_their_concatenation() {
    // Rows of 40 000 columns: several parallel chunks, one of them partial.
    let (rows, half) = (3, 40_000);
    let (a, b) = (data(rows * half, 20), data(rows * half, 21));
    let dy = data(rows * half, 22);
    let mut x = Vec::with_capacity(2 * a.len());
    for r in 0..rows {
        x.extend_from_slice(&a[r * half..(r + 1) * half]);
        x.extend_from_slice(&b[r * half..(r + 1) * half]);
    }
    let y = swiglu::swiglu_fwd(&x, rows, half, 1);
    let dx = swiglu::swiglu_bwd(&dy, &x, rows, half, 1);
    let fy = cpu::swiglu_pair_fwd(&f32s(&a), &f32s(&b));
    assert_close("swiglu pair y", &y, &f64s(&fy), 1e-6, 0.0);
    let (da, db) = cpu::swiglu_pair_bwd(&f32s(&dy), &f32s(&a), &f32s(&b));
    let (mut want_da, mut want_db) = (Vec::new(), Vec::new());
    for r in 0..rows {
        want_da.extend_from_slice(&dx[2 * r * half..(2 * r + 1) * half]);
        want_db.extend_from_slice(&dx[(2 * r + 1) * half..(2 * r + 2) * half]);
    }
    assert_close("swiglu pair da", &want_da, &f64s(&da), 1e-6, 0.0);
    assert_close("swiglu pair db", &want_db, &f64s(&db), 1e-6, 0.0);
}
