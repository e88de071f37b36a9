//! `aclnnScatterPaKvCache`'s plain scatter (scenarios without compression) for caches in the
//! Norm layout (`[blocks, blockSize, N, D]`: a slot's heads contiguous): one copy of each
//! token's `N·D` values, where the reference ([`crate::reference::scatter`]) writes element
//! by element through the general slot-to-element map — a prompt's cache append spent 1.7 ms
//! of a 72-token prefill there. Other layouts take the reference. Same skips (a negative or
//! out-of-range slot), same preconditions ([`check_scatter`] passed).
//!
//! [`check_scatter`]: burn_ascend_contract::scatter::problem::check_scatter

use burn_ascend_contract::scatter::problem::{CacheMode, PlainScatterArgs, SlotIndex};

use crate::reference::scatter as reference;

/// Writes key (and value) tokens into the caches, as [`reference::scatter_pa_kv_cache`].
pub fn scatter_pa_kv_cache<T: Copy, I: SlotIndex>(
    a: &PlainScatterArgs<T, I>,
    key_cache: &mut [T],
    value_cache: Option<&mut [T]>,
) {
    if a.cache_mode != CacheMode::Norm {
        return reference::scatter_pa_kv_cache(a, key_cache, value_cache);
    }
    let max = (a.num_blocks * a.block_size) as i64;
    let mut jobs: Vec<(usize, &[T], usize, &mut [T])> = vec![(0, a.key, a.k_head_size, key_cache)];
    if let (Some(v), Some(vc)) = (a.value, value_cache) {
        jobs.push((1, v, a.v_head_size, vc));
    }
    for (which, src, d, cache) in jobs {
        let nd = a.num_heads * d;
        for t in 0..a.num_tokens {
            let s = a.slot_mapping[t].to_i64();
            if s < 0 || s >= max {
                continue;
            }
            let start = a.src_start(which, t, d).expect("checked by check_scatter");
            let at = s as usize * nd;
            cache[at..at + nd].copy_from_slice(&src[start..start + nd]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn_ascend_contract::scatter::problem::ScatterMode;

    /// A scatter of 5 tokens (two skipped: a negative and an out-of-range slot) into 3 blocks
    /// of 4 slots, `N = 2`, key `D = 3`, value `D = 2`, in `mode`, plain and strided (Nct).
    fn both_ways(mode: CacheMode, scatter_mode: ScatterMode, key_len: usize) {
        let (n, dk, dv, nb, bs) = (2, 3, 2, 3, 4);
        let key: Vec<f32> = (0..key_len).map(|i| i as f32 + 0.5).collect();
        let value: Vec<f32> = (0..key_len).map(|i| -(i as f32) - 0.25).collect();
        let slots: [i64; 5] = [7, -1, 0, 12, 5];
        let a = PlainScatterArgs {
            key: &key,
            value: Some(&value),
            slot_mapping: &slots,
            num_tokens: 5,
            num_heads: n,
            k_head_size: dk,
            v_head_size: dv,
            num_blocks: nb,
            block_size: bs,
            cache_mode: mode,
            scatter_mode,
        };
        let (mut kc, mut vc) = (
            vec![9.0f32; nb * bs * n * dk],
            vec![9.0f32; nb * bs * n * dv],
        );
        let (mut rk, mut rv) = (kc.clone(), vc.clone());
        scatter_pa_kv_cache(&a, &mut kc, Some(&mut vc));
        reference::scatter_pa_kv_cache(&a, &mut rk, Some(&mut rv));
        assert_eq!(kc, rk, "{mode:?} {scatter_mode:?} key cache");
        assert_eq!(vc, rv, "{mode:?} {scatter_mode:?} value cache");
        assert!(kc.iter().any(|&x| x != 9.0), "something was written");
    }

    #[test]
    fn the_norm_layout_copy_writes_what_the_reference_writes_and_other_layouts_take_it() {
        both_ways(CacheMode::Norm, ScatterMode::None, 5 * 2 * 3);
        // Nct: tokens 8 elements apart, the value 1 element in.
        let nct = ScatterMode::Nct {
            strides: [8, 1],
            offsets: [0, 1],
        };
        both_ways(CacheMode::Norm, nct, 5 * 8 + 8);
        both_ways(CacheMode::Nhsd, ScatterMode::None, 5 * 2 * 3);
    }
}
