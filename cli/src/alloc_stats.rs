//! Heap accounting for `burn-ascend bench`: a counting wrapper over the system allocator and
//! safe functions to read it.
//!
//! The `burn-ascend` binary installs [`CountingAlloc`] as its `#[global_allocator]`; in any
//! other program (library users, tests that do not install it) [`installed`] is false and the
//! bench reports no peak-memory figures. Counting is two relaxed atomic updates per
//! allocation; the bytes are the requested `Layout` sizes (allocator overhead not included).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

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

/// The system allocator, counting live and peak bytes.
pub struct CountingAlloc;

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the bookkeeping only touches atomics (it never allocates, so it
// cannot recurse into the allocator) and does not affect the returned pointers.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller guarantees `layout` has a non-zero size (GlobalAlloc contract).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` was allocated by this allocator (i.e. by
        // `System`, to which every allocation was forwarded) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        on_dealloc(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr` came from this allocator (so from `System`) with
        // `layout`, and that `new_size` is non-zero and valid for `layout.align()`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
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
}
