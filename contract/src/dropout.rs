//! CANN's dropout mask: one bit per attention-score element, bit-packed in uint8.
//!
//! Element index for sequence b, query head h, row i, column j (spec §4):
//! `e = N·Σ_{b'<b} Sq_b'·Skv_b' + h·Sq_b·Skv_b + i·Skv_b + j`. A set bit keeps the element
//! (scaled by `1/keepProb`), a clear bit drops it.
//!
//! Bit order within a byte is LSB first. This is **UNCONFIRMED** against the kernel source
//! (spec §4); it is the order `aclnnDropoutGenMask` documents for its output, and it is kept in
//! this one module so it is easy to change.

/// Number of mask bits a varlen problem needs: `N · Σ_b Sq_b·Skv_b`.
pub fn mask_bits(head_num: usize, seq_q: &[usize], seq_kv: &[usize]) -> usize {
    head_num * seq_q.iter().zip(seq_kv).map(|(q, k)| q * k).sum::<usize>()
}

/// Bytes of bit-packed mask for `bits` elements.
pub fn mask_bytes(bits: usize) -> usize {
    bits.div_ceil(8)
}

/// Whether element `e` is kept.
#[inline]
pub fn kept(mask: &[u8], e: usize) -> bool {
    (mask[e / 8] >> (e % 8)) & 1 == 1
}

/// A seeded bit-packed mask where each bit is set with probability `keep_prob`.
///
/// The generator is splitmix64, so a mask is reproducible from `(seed, bits, keep_prob)` on every
/// platform. It is not CANN's Philox stream: masks generated on the NPU must be passed in.
pub fn generate_mask(bits: usize, keep_prob: f64, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut mask = vec![0u8; mask_bytes(bits)];
    for e in 0..bits {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // 53 random bits → uniform in [0, 1).
        let u = (z >> 11) as f64 / (1u64 << 53) as f64;
        if u < keep_prob {
            mask[e / 8] |= 1 << (e % 8);
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_mask_keeps_about_keep_prob_and_is_reproducible() {
        let bits = 100_000;
        let a = generate_mask(bits, 0.8, 7);
        let b = generate_mask(bits, 0.8, 7);
        assert_eq!(a, b);
        let kept_count = (0..bits).filter(|&e| kept(&a, e)).count();
        let frac = kept_count as f64 / bits as f64;
        assert!((frac - 0.8).abs() < 0.01, "kept fraction {frac}");
        assert_ne!(a, generate_mask(bits, 0.8, 8));
    }

    #[test]
    fn bit_order_is_lsb_first() {
        let mask = [0b0000_0101u8];
        assert!(kept(&mask, 0));
        assert!(!kept(&mask, 1));
        assert!(kept(&mask, 2));
    }

    #[test]
    fn bit_count_sums_over_sequences() {
        assert_eq!(mask_bits(2, &[2, 0, 3], &[4, 5, 1]), 2 * (8 + 3));
        assert_eq!(mask_bytes(17), 3);
    }
}
