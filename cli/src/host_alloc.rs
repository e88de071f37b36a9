//! The process's allocator in the `burn-ascend` binary and the examples: mimalloc, told to keep
//! the memory it frees, counting live and peak bytes for `burn-ascend bench`'s memory figures.
//!
//! Why not the system allocator: a CPU training step allocates and frees the same few
//! gigabytes of activations and gradients every step (a prefill or a decode step its logits and
//! scratch every call), and glibc's allocator hands every block over its `mmap` threshold (32 MiB
//! at most; the logits of a 1 024-token batch are 200 MB) back to the kernel when it is freed,
//! and trims the heap's top: the next step faults every page in again, one zeroed 4 KiB page at
//! a time. On a full fine-tune step of a 135 M checkpoint a fifth of the step was the kernel
//! clearing pages (`clear_page_erms` in `perf`), 1.9 M page faults for a run whose peak resident
//! set is 0.8 M pages. mimalloc keeps freed memory in its arenas for any thread's next
//! allocation, and its large blocks are backed by transparent huge pages where the kernel allows
//! them (fewer TLB misses on every stream over weights and activations). Its one default that
//! works against this is purging (returning) memory unused for 10 ms: [`keep_freed_memory`]
//! turns that off, so the resident set stays at the peak a training or serving process reaches
//! on its first step anyway.
//!
//! The binary and the examples install [`CountingAlloc`] as their `#[global_allocator]` and call
//! [`keep_freed_memory`] first thing; in any other program (library users, the tests) nothing
//! changes, [`installed`] is false and the bench reports no peak-memory figures. Counting is two
//! relaxed atomic updates per allocation; the bytes are the requested `Layout` sizes (allocator
//! overhead not included).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use mimalloc::MiMalloc;

/// mimalloc's option "delay in milliseconds before memory unused is purged; -1: never" (its
/// index in `mi_option_t`, the same in mimalloc 2 and 3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells the allocator never to return freed memory to the operating system, so that a step's
/// allocations reuse the pages the previous step faulted in. Call it once, first thing in
/// `main`, in a program whose `#[global_allocator]` is [`CountingAlloc`].
pub fn keep_freed_memory() {
    // SAFETY: `mi_option_set` stores one option value; the option index is mimalloc's
    // `mi_option_purge_delay` and -1 its documented "no purging at all". mimalloc documents the
    // option setters as not thread-safe: this runs first in `main`, before any thread starts.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);

fn on_alloc(size: usize) {
    if !ACTIVE.load(Relaxed) {
        ACTIVE.store(true, Relaxed);
    }
    let now = CURRENT.fetch_add(size, Relaxed).wrapping_add(size);
    PEAK.fetch_max(now, Relaxed);
}

fn on_dealloc(size: usize) {
    CURRENT.fetch_sub(size, Relaxed);
}

/// Whether a [`CountingAlloc`] is the global allocator (it has seen an allocation).
pub fn installed() -> bool {
    ACTIVE.load(Relaxed)
}

/// Bytes currently allocated.
pub fn current() -> usize {
    CURRENT.load(Relaxed)
}

/// Highest [`current`] since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Relaxed)
}

/// Starts a new peak window at the current level; returns that level.
pub fn reset_peak() -> usize {
    let now = CURRENT.load(Relaxed);
    PEAK.store(now, Relaxed);
    now
}

/// Runs `f` and returns its result with the peak heap growth during the call: the highest
/// level reached minus the level before it (`None` without a [`CountingAlloc`]). Memory the
/// result still holds counts, memory live before the call (the inputs) does not. Other threads'
/// allocations in the meantime count too, so measure with nothing else running.
pub fn peak_extra<R>(f: impl FnOnce() -> R) -> (R, Option<usize>) {
    let before = reset_peak();
    let r = f();
    let extra = peak().saturating_sub(before);
    (r, installed().then_some(extra))
}

/// mimalloc, counting live and peak bytes.
pub struct CountingAlloc;

// SAFETY: every method forwards its arguments unchanged to mimalloc, which upholds the
// `GlobalAlloc` contract; the bookkeeping only touches atomics (it never allocates, so it
// cannot recurse into the allocator) and does not affect the returned pointers.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller guarantees `layout` has a non-zero size (GlobalAlloc contract).
        let p = unsafe { MiMalloc.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` was allocated by this allocator (i.e. by
        // mimalloc, to which every allocation was forwarded) with `layout`.
        unsafe { MiMalloc.dealloc(ptr, layout) };
        on_dealloc(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr` came from this allocator (so from mimalloc) with
        // `layout`, and that `new_size` is non-zero and valid for `layout.align()`.
        let p = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            on_dealloc(layout.size());
            on_alloc(new_size);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_track_peak_above_the_starting_level() {
        // Drive the bookkeeping directly (the test binary's allocator is not this one).
        let before = reset_peak();
        on_alloc(1000);
        on_alloc(500);
        on_dealloc(1500);
        on_alloc(200);
        assert!(peak() >= before + 1500);
        on_dealloc(200);
        assert!(installed());
    }

    /// Page faults this thread has taken that needed no I/O (fresh pages zeroed, mostly): the
    /// tenth field after the command name in `/proc/thread-self/stat`.
    fn thread_minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(7).unwrap().parse().unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_block_freed_and_allocated_again_after_a_purge_is_not_faulted_in_again() {
        // Only this test allocates through mimalloc in this binary (its global allocator is the
        // system's), so setting the option here races with nothing.
        keep_freed_memory();
        let layout = Layout::from_size_align(96 << 20, 64).unwrap();
        // SAFETY: a non-zero-sized layout; the block is written within its size and freed
        // with the same layout, once.
        unsafe {
            let p = MiMalloc.alloc(layout);
            assert!(!p.is_null());
            std::ptr::write_bytes(p, 1, layout.size());
            MiMalloc.dealloc(p, layout);
        }
        // Past mimalloc's default purge delay (10 ms, ×10 for its arenas), then a forced
        // collection, which purges whatever is due: with the default, the block's pages go back
        // to the kernel here and the next block faults them in again (at least one fault per
        // 2 MiB huge page, 48 here; 24 576 with 4 KiB pages).
        std::thread::sleep(std::time::Duration::from_millis(150));
        // SAFETY: `mi_collect` takes no pointers; mimalloc is initialised (it allocated above).
        unsafe { libmimalloc_sys::mi_collect(true) };
        let before = thread_minor_faults();
        // SAFETY: as above.
        unsafe {
            let p = MiMalloc.alloc(layout);
            assert!(!p.is_null());
            std::ptr::write_bytes(p, 2, layout.size());
            assert_eq!(*p.add(layout.size() - 1), 2);
            MiMalloc.dealloc(p, layout);
        }
        let faults = thread_minor_faults() - before;
        assert!(
            faults < 16,
            "{faults} page faults for a 96 MiB block allocated again"
        );
    }
}
