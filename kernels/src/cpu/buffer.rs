//! Fresh output buffers filled on all cores. The kernels write their outputs in parallel, but
//! a `vec![0.0; n]` before them is one thread's `memset`: for a training step's MiB-sized
//! activations and gradients that was a quarter of the step's single-threaded time, with the
//! other cores idle.

use rayon::prelude::*;

/// Elements below which one thread fills the buffer (a parallel task costs more).
const PARALLEL_FILL: usize = 1 << 16;

/// `len` copies of `value`, written by all cores when `len` is large.
pub fn filled<T: Copy + Send + Sync>(len: usize, value: T) -> Vec<T> {
    if len < PARALLEL_FILL {
        return vec![value; len];
    }
    let mut v = Vec::with_capacity(len);
    // Whole chunks per task, each one `fill`: rayon's `repeat_n` collect wrote one element at
    // a time through its producer, at half the speed.
    v.spare_capacity_mut()[..len]
        .par_chunks_mut(PARALLEL_FILL)
        .for_each(|c| c.fill(std::mem::MaybeUninit::new(value)));
    // SAFETY: the loop above initialised each of the first `len` elements (the chunks cover
    // `[..len]` of the spare capacity, which `with_capacity(len)` made at least `len` long).
    unsafe { v.set_len(len) };
    v
}

/// `len` f32 zeros, written by all cores when `len` is large: one `memset` per chunk (twice
/// as fast as [`filled`]'s element loop on a MLP activation).
pub fn zeros(len: usize) -> Vec<f32> {
    if len < PARALLEL_FILL {
        return vec![0.0; len];
    }
    let mut v: Vec<f32> = Vec::with_capacity(len);
    v.spare_capacity_mut()[..len]
        .par_chunks_mut(PARALLEL_FILL)
        // SAFETY: `c` is an exclusively borrowed chunk of the reserved capacity, so writing
        // `c.len()` elements' bytes from its start stays inside it; all-zero bytes are 0.0f32.
        .for_each(|c| unsafe { c.as_mut_ptr().write_bytes(0, c.len()) });
    // SAFETY: the loop above wrote each of the first `len` elements (its chunks cover
    // `[..len]` of the capacity `with_capacity(len)` reserved) as the f32 0.0.
    unsafe { v.set_len(len) };
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_buffer_holds_the_value_at_every_length_around_the_parallel_threshold() {
        for len in [
            0,
            1,
            PARALLEL_FILL - 1,
            PARALLEL_FILL,
            3 * PARALLEL_FILL + 7,
        ] {
            let v = filled(len, 2.5f32);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 2.5), "len {len}");
            assert!(zeros(len).iter().all(|&x| x == 0.0), "len {len}");
        }
    }
}
