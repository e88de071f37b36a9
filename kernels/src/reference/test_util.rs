//! What the reference's unit tests share: their seeded inputs and their tolerance check, so
//! the PFA and IFA tests draw the same values from the same seeds.

/// Deterministic pseudo-random values in [-1, 1) (a 64-bit LCG, the top 24 bits).
pub(super) fn rand_vec(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

/// Every element within `tol` of its counterpart (the index named on failure).
pub(super) fn assert_close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol, "index {k}: {x} vs {y}");
    }
}
