//! Fast CPU kernels: tiled flash attention with rayon and the `gemm` crate.
//!
//! [`varlen_fwd`] and [`varlen_bwd`] take exactly the arguments of
//! [`crate::reference::varlen::varlen_fwd`] / [`crate::reference::varlen::varlen_bwd`] and
//! return the same types with the same conventions (empty sequences, fully masked rows, sinks,
//! both softmax layouts), so a caller can swap one for the other. They compute in f32; f16,
//! bf16 and f64 inputs are converted to f32 tile by tile, outputs converted back on write.
//!
//! Structure (FlashAttention-2):
//! - forward: one task per (sequence, kv head, query tile). A task stacks the query rows of
//!   all `G = N / Nkv` heads sharing a kv head, so every K/V tile it loads serves the whole GQA
//!   group; it walks the kv tiles with an online softmax (running max / sum per row, starting
//!   from max = sink, sum = 1 when there is a sink). Tiles entirely outside the band / causal
//!   region ([`burn_ascend_contract::varlen::SeqRule::band_columns`]) are skipped, tiles entirely inside are
//!   computed without any per-element work, and only boundary tiles (and every tile when a
//!   dense mask, pse or dropout is present) are masked element by element.
//! - backward: P is recomputed from the saved statistics, in one pass with five GEMMs per
//!   (query tile, kv tile): S, dP, dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K. The key columns of
//!   a sequence are cut into spans of 1024 (a constant), dealt round-robin to 2–4 span groups
//!   per (sequence, kv head) (a function of the problem's size, not of the thread count); one
//!   task per (sequence, group, kv head) owns dK / dV of its spans and adds their dQ
//!   contributions into its own f32 buffer, and the groups' buffers are added in group order
//!   into dQ. Every dK / dV element has one writer, every sum has a fixed order, and the
//!   dsink partials (per query tile, from the saved statistics) are summed in task order, so
//!   results are bitwise identical run to run and for any number of threads.
//!
//! Working memory: a few `rows × tile` f32 buffers per rayon job (at most a few MiB at the
//! default tiles; the backward's hold K, V, dK, dV of a span: 2 MiB at D = 128; the forward's,
//! 1–3 MiB, are kept per thread for the next call of the same shape, up to 16 MiB); in the
//! backward also `D = dO·O` as `Tq·N` f32 and the span groups' dQ accumulators, at most four
//! f32 copies of dQ (O(T), like FlashAttention-2's f32 `dq_accum`). No `Sq × Skv` buffer is
//! ever allocated. Finished forward tiles, and a backward task's dK / dV rows after each span,
//! are written to the outputs under a mutex (one short critical section each).
//!
//! Accuracy: f32 tiles and a polynomial `exp` (~1 ulp); against the f64-accumulating reference
//! the tests hold 2e-5 abs + 1e-4 rel for outputs and gradients at D ≤ 128.
//!
//! [`incre_flash_attention`] (with `_as` / `_int8` variants) is the decode kernel: the
//! arguments and semantics of [`crate::reference::incre`], computed by flash-decoding (KV
//! window split into fixed chunks processed in parallel for all query heads of a GQA group,
//! merged by log-sum-exp in a fixed order, int8 antiquant folded in: no dequantised copy). See
//! [`decode`].
//!
//! [`fia::fused_infer_attention`] runs FIA's decode on the decode kernel (the learnable sink
//! enters its chunk merge) and its prefill on the varlen forward (packed to TND), the
//! reference for the fields neither models.
//!
//! All `unsafe` lives in [`gemm`] (the `gemm` crate's raw-pointer API) and in the decode
//! kernel's AVX-512 loops (`decode_avx512`: `std::arch` intrinsics behind run-time feature
//! detection, every row offset checked before the loops, and the prefetch hints), in
//! `team` (a published job's closure reached by the awake helpers while its caller waits),
//! plus two `TypeId`-checked slice casts (`KV` → its widening view in the decode, `T = f32` →
//! `f32` in the varlen forward).

mod buffer;
pub mod decode;
#[cfg(target_arch = "x86_64")]
mod decode_avx512;
mod decode_portable;
#[cfg(target_arch = "x86_64")]
mod decode_prefetch;
pub mod fia;
pub mod fused;
pub mod gemm;
pub mod linear;
pub mod optim;
pub mod scatter;
mod team;
mod tile;
mod varlen_bwd;
mod varlen_fwd;

pub use decode::{
    incre_flash_attention, incre_flash_attention_as, incre_flash_attention_int8,
    incre_flash_attention_with_sink,
};
pub use varlen_bwd::varlen_bwd;
pub use varlen_fwd::varlen_fwd;

/// Threads the kernels run on: those of the current rayon pool (the global one unless called
/// inside `ThreadPool::install`; `RAYON_NUM_THREADS` sets it).
pub fn threads() -> usize {
    rayon::current_num_threads()
}

/// Runs `work` on one of the rayon pool's threads (inline when already on one) and returns its
/// result. The kernels split each call over the pool; called from a thread outside it (a
/// program's main thread), every parallel section is handed to the pool while the caller
/// sleeps, then the caller is woken — two thread wake-ups per section, and the caller's serial
/// work between sections competes for the cores with workers still spinning for more. A
/// prompt's prefill through a 135 M model has about 450 such sections in 85–100 ms: driven from
/// a worker it ran 11–18 % faster on 2 cores (decode and training steps, whose sections are long
/// or run on [`team`]'s helpers, unchanged). Only for CPU work: the Ascend backend binds its
/// context to the calling thread. `work` runs on the pool thread's stack (2 MiB, Rust's default
/// for a spawned thread, where a program's main thread has 8): the kernels do not recurse.
pub fn on_worker<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    // `scope` runs its body inline on a pool thread (of any pool); called outside the pools it
    // injects the body into the global one and blocks until it returns.
    rayon::scope(|_| work())
}

#[cfg(test)]
mod tests {
    use super::on_worker;

    #[test]
    fn work_handed_to_the_pool_runs_on_a_worker_and_returns_its_result() {
        assert_eq!(
            rayon::current_thread_index(),
            None,
            "the test thread is not a worker"
        );
        let (index, sum) = on_worker(|| (rayon::current_thread_index(), (1..=4).sum::<i32>()));
        assert!(index.is_some(), "ran on the calling thread");
        assert_eq!(sum, 10);
        let inline = on_worker(|| {
            let outer = std::thread::current().id();
            on_worker(|| std::thread::current().id()) == outer
        });
        assert!(inline, "a worker's call moved to another thread");
    }
}
