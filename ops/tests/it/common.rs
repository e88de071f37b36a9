//! Helpers shared by the suites of this binary.

/// `n` pseudo-random values in [−1.5, 1.5) from `seed` (xorshift64; the same every run).
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 3.0 - 1.5) as f32
        })
        .collect()
}
