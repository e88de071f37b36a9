//! CPU reference for `aclnnScatterPaKvCache`.
//!
//! Two entry points, each with a pure check that validates everything a write could touch,
//! separate from the write path so a caller can reject a call before mutating any cache:
//! - [`check_scatter`] / [`scatter_pa_kv_cache`]: scenarios 1 (PA_NZ), 2 (Norm, None or Nct),
//!   6 (key only), and NHSD (spec §6; listed in the kernel sources, not in the aclnn doc);
//! - [`check_compressed_scatter`] / [`scatter_pa_kv_cache_compressed`]: scenarios 4 (Alibi) and
//!   5 (Rope / Omni), 3-D key.
//!
//! Scenario 3 (4-D key, Ascend 950 only) is not modelled.
//!
//! Slot semantics (spec §6, and the ops-transformer kernel's CopyOut): for slot `s`,
//! `blk = s / block_size`, `off = s % block_size`; **`s < 0` skips the token**. The kernel also
//! skips `s >= num_blocks·block_size`; the write path does the same, and [`check_scatter`]
//! rejects such slots (the docs require `[0, num_blocks·block_size)`), as well as duplicates.

use burn_ascend_contract::scatter::problem::*;
/// Element conversion, only needed by the Rope/Omni mean reduction: the contract's element
/// trait (f64, f32, f16, bf16, i8), under the name this module used.
pub use burn_ascend_contract::Element as RefElem;

/// Writes key (and value) tokens into the caches. Tokens with a negative or out-of-range slot
/// are skipped. Assumes [`check_scatter`] passed (otherwise it may panic, never UB).
pub fn scatter_pa_kv_cache<T: Copy, I: SlotIndex>(
    a: &PlainScatterArgs<T, I>,
    key_cache: &mut [T],
    value_cache: Option<&mut [T]>,
) {
    let last = nz_last_dim::<T>();
    let max = (a.num_blocks * a.block_size) as i64;
    let mut jobs: Vec<(usize, &[T], usize, &mut [T])> = vec![(0, a.key, a.k_head_size, key_cache)];
    if let (Some(v), Some(vc)) = (a.value, value_cache) {
        jobs.push((1, v, a.v_head_size, vc));
    }
    for (which, src, d, cache) in jobs {
        for t in 0..a.num_tokens {
            let s = a.slot_mapping[t].to_i64();
            if s < 0 || s >= max {
                continue;
            }
            let start = a.src_start(which, t, d).expect("checked by check_scatter");
            for e in 0..a.num_heads * d {
                cache[a.dst(s as usize, e, d, last)] = src[start + e];
            }
        }
    }
}

/// Writes compressed key (and value) into `[nb, bs, 1, D]` caches. Writes to slots
/// `>= nb·bs` are skipped. Assumes [`check_compressed_scatter`] passed. The Rope mean is the
/// kernel's (`ComputeAvg`): summed in f32 in sequence order, divided by the window in f32,
/// rounded to `T` (nearest-even, `CAST_RINT`).
pub fn scatter_pa_kv_cache_compressed<T: RefElem, I: SlotIndex>(
    a: &CompressedScatterArgs<T, I>,
    key_cache: &mut [T],
    value_cache: Option<&mut [T]>,
) {
    let max = (a.num_blocks * a.block_size) as i64;
    let n = a.num_heads;
    let mut jobs: Vec<(&[T], usize, &mut [T])> = vec![(a.key, a.k_head_size, key_cache)];
    if let (Some(v), Some(vc)) = (a.value, value_cache) {
        jobs.push((v, a.v_head_size, vc));
    }
    for (src, d, cache) in jobs {
        for b in 0..a.batch() {
            let base = a.seq_start(b);
            for h in 0..n {
                for w in a.plan(b, h) {
                    if w.slot < 0 || w.slot >= max {
                        continue;
                    }
                    for e in 0..d {
                        let el = |p: usize| src[((base + p) * n + h) * d + e];
                        cache[w.slot as usize * d + e] = if w.to - w.from == 1 {
                            el(w.from)
                        } else {
                            let sum = (w.from..w.to).fold(0.0f32, |s, p| s + el(p).to_f64() as f32);
                            T::from_f64((sum / (w.to - w.from) as f32) as f64)
                        };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
