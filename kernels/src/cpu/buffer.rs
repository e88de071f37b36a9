//! Fresh output buffers filled on all cores. The kernels write their outputs in parallel, but
//! a `vec![0.0; n]` before them is one thread's `memset`: for a training step's MiB-sized
//! activations and gradients that was a quarter of the step's single-threaded time, with the
//! other cores idle.

use std::mem::MaybeUninit;

use rayon::prelude::*;

/// Elements below which one thread fills the buffer (a parallel task costs more).
const PARALLEL_FILL: usize = 1 << 16;

/// `len` copies of `value`, written by all cores when `len` is large.
pub fn filled<T: Copy + Send + Sync>(len: usize, value: T) -> Vec<T> {
    if len < PARALLEL_FILL {
        return vec![value; len];
    }
    // Whole chunks per task, each one `fill`: rayon's `repeat_n` collect wrote one element at
    // a time through its producer, at half the speed.
    initialised(len, |c| c.fill(MaybeUninit::new(value)))
}

/// `len` f32 zeros, written by all cores when `len` is large: one `memset` per chunk (twice
/// as fast as [`filled`]'s element loop on a MLP activation).
pub fn zeros(len: usize) -> Vec<f32> {
    if len < PARALLEL_FILL {
        return vec![0.0; len];
    }
    // SAFETY: `c` is an exclusively borrowed chunk of the reserved capacity, so writing
    // `c.len()` elements' bytes from its start stays inside it; all-zero bytes are 0.0f32.
    initialised(len, |c| unsafe { c.as_mut_ptr().write_bytes(0, c.len()) })
}

/// A vector of `len` elements, each chunk of [`PARALLEL_FILL`] initialised by `init` on
/// rayon's threads. `init` must initialise every element of the chunk it is given.
fn initialised<T: Send>(len: usize, init: impl Fn(&mut [MaybeUninit<T>]) + Sync) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    v.spare_capacity_mut()[..len]
        .par_chunks_mut(PARALLEL_FILL)
        .for_each(&init);
    // SAFETY: the loop above handed every element of `[..len]` of the capacity
    // `with_capacity(len)` reserved to `init`, which initialises each chunk it is given (both
    // callers above: a `fill` and a zero `memset` of the whole chunk).
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
