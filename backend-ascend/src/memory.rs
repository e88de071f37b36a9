//! The caching device-memory pool: one per [`AscendDevice`], a simplified PyTorch CUDA caching
//! allocator.
//!
//! - **Size classes.** A request is rounded up to a multiple of 512 B up to 1 MiB, and to a
//!   multiple of 2 MiB above; each class has a free list.
//! - **Reuse.** A tensor's storage returns its block to its class's free list on drop; the next
//!   request of that class pops it (a *hit*) instead of calling `aclrtMalloc` (a *miss*).
//! - **Release.** Cached blocks go back to the device (`aclrtFree`) only when an allocation
//!   fails for lack of memory (the cache is emptied and the allocation retried once) and on an
//!   explicit [`empty_cache`].
//! - **Stats.** [`memory_stats`]: bytes handed out (`allocated`), held from the device
//!   (`reserved` = allocated + cached), their peaks, hits, misses, device allocations and
//!   frees, and OOM retries.
//!
//! # Stream-ordered reuse (why a freed block is reusable at once)
//! Ops are queued on the device's stream and return before they run. A device has **one**
//! stream, shared by every thread (`crate::device`), and launches enter it in the order the
//! host issues them. A tensor's storage is dropped after every op that uses it was queued, so
//! any later use of its block — by whichever thread — is queued after them and runs after
//! them: the block goes back to its free list at once, without waiting (PyTorch's allocator
//! with a single stream; with several streams a block would carry the streams that used it and
//! an event, `recordStream`). What the host itself touches is different: uploads into a block
//! are queued copies (`DeviceBuffer::write`), reads wait for the stream
//! (`DeviceBuffer::read`), and a block leaves the pool for the device (`aclrtFree`) only in
//! stream order, after a synchronisation ([`empty_cache`], the OOM retry).
//!
//! On the simulation, a reused block handed out without initial data is zero-filled, so
//! `AscendTensor::alloc` keeps reading back zeros there (on CANN it is uninitialised).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use burn_ascend_kernels::acl::ffi::{ACL_ERROR_BAD_ALLOC, ACL_ERROR_RT_MEMORY_ALLOCATION};
use burn_ascend_kernels::acl::{AclError, ApiKind, DeviceBuffer};

use crate::device::{runtime, try_runtime, AscendDevice};

/// Requests up to this size are rounded to [`SMALL_GRANULE`]; larger ones to [`LARGE_GRANULE`].
pub const SMALL_LIMIT: usize = 1 << 20;
/// The rounding of small requests.
pub const SMALL_GRANULE: usize = 512;
/// The rounding of large requests: a multiple of 2 MiB (as PyTorch's caching allocator), so a
/// block is never more than 2 MiB larger than asked — a power of two would reserve up to
/// twice a large KV cache.
pub const LARGE_GRANULE: usize = 2 << 20;

/// The block size a request of `bytes` gets.
pub fn size_class(bytes: usize) -> usize {
    let bytes = bytes.max(1);
    if bytes <= SMALL_LIMIT {
        bytes.div_ceil(SMALL_GRANULE) * SMALL_GRANULE
    } else {
        bytes.div_ceil(LARGE_GRANULE) * LARGE_GRANULE
    }
}

/// A device's pool counters ([`memory_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in blocks held by live tensors (size-class bytes).
    pub allocated_bytes: usize,
    /// Bytes held from the device: allocated plus cached free blocks.
    pub reserved_bytes: usize,
    /// Bytes in cached free blocks.
    pub cached_bytes: usize,
    /// Highest `allocated_bytes` so far (reset by [`reset_peak_stats`]).
    pub peak_allocated_bytes: usize,
    /// Highest `reserved_bytes` so far (reset by [`reset_peak_stats`]).
    pub peak_reserved_bytes: usize,
    /// Allocations served from the cache.
    pub hits: u64,
    /// Allocations that went to the device (`aclrtMalloc`).
    pub misses: u64,
    /// `aclrtFree` calls made by the pool (OOM retries and [`empty_cache`]).
    pub device_frees: u64,
    /// Allocations that failed for lack of memory and were retried after emptying the cache.
    pub oom_retries: u64,
}

/// `DeviceBuffer` is `!Send` because ACL binds device contexts to threads; the pool binds
/// the block's device on the calling thread (`device::runtime`) before every `aclrtFree`, as
/// `Storage` does.
struct CachedBlock(DeviceBuffer);

// SAFETY: see the type's docs: a cached block is only freed after `try_runtime(device)` has
// bound its device to the freeing thread, and it is not accessed otherwise while cached.
unsafe impl Send for CachedBlock {}

#[derive(Default)]
struct Pool {
    free: BTreeMap<usize, Vec<CachedBlock>>,
    stats: MemoryStats,
}

impl Pool {
    fn note_peaks(&mut self) {
        let s = &mut self.stats;
        s.peak_allocated_bytes = s.peak_allocated_bytes.max(s.allocated_bytes);
        s.peak_reserved_bytes = s.peak_reserved_bytes.max(s.reserved_bytes);
    }

    /// Takes a block back into the cache. This is where stream-ordered reuse would record the
    /// streams still using the block, were launches not synchronised (see the module docs).
    fn release(&mut self, block: DeviceBuffer) {
        let class = block.len();
        self.stats.allocated_bytes -= class;
        self.stats.cached_bytes += class;
        self.free.entry(class).or_default().push(CachedBlock(block));
    }

    /// Removes every cached block (the caller frees them with the device bound).
    fn drain(&mut self) -> Vec<CachedBlock> {
        let blocks: Vec<CachedBlock> = std::mem::take(&mut self.free)
            .into_values()
            .flatten()
            .collect();
        let bytes: usize = blocks.iter().map(|b| b.0.len()).sum();
        self.stats.cached_bytes -= bytes;
        self.stats.reserved_bytes -= bytes;
        self.stats.device_frees += blocks.len() as u64;
        blocks
    }
}

static POOLS: Mutex<Option<HashMap<AscendDevice, Pool>>> = Mutex::new(None);

fn with_pool<R>(device: &AscendDevice, f: impl FnOnce(&mut Pool) -> R) -> R {
    let mut g: MutexGuard<'_, _> = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new)
        .entry(*device)
        .or_default())
}

fn is_oom(e: &AclError) -> bool {
    matches!(
        e.status(),
        Some(ACL_ERROR_RT_MEMORY_ALLOCATION) | Some(ACL_ERROR_BAD_ALLOC)
    )
}

/// A block of at least `bytes` bytes on `device` (the calling thread's runtime bound), from
/// the cache or the device. Out of memory, the cache is emptied and the allocation retried
/// once; a second failure panics naming `op`, the bytes and the status. `clear`: the caller
/// will not write the block, so a reused one is zeroed on the simulation.
pub(crate) fn allocate(device: &AscendDevice, bytes: usize, op: &str, clear: bool) -> DeviceBuffer {
    let class = size_class(bytes);
    let rt = runtime(device);
    let cached = with_pool(device, |p| {
        let b = p.free.get_mut(&class).and_then(Vec::pop);
        if b.is_some() {
            p.stats.hits += 1;
            p.stats.cached_bytes -= class;
            p.stats.allocated_bytes += class;
            p.note_peaks();
        } else {
            p.stats.misses += 1;
        }
        b
    });
    if let Some(CachedBlock(buf)) = cached {
        if clear && rt.kind() == ApiKind::Simulation {
            // Keep the simulation's fresh allocations reading zero (see the module docs).
            buf.fill_zero().unwrap_or_else(|e| {
                panic!("Ascend {op}: clearing a reused block on {device}: {e}")
            });
        }
        return buf;
    }
    let buf = match rt.alloc(class) {
        Ok(b) => b,
        Err(e) if is_oom(&e) => {
            let released = empty_cache(device);
            with_pool(device, |p| p.stats.oom_retries += 1);
            rt.alloc(class).unwrap_or_else(|e2| {
                let s = memory_stats(device);
                panic!(
                    "Ascend out of device memory on {device}: {op} needs {bytes} bytes (block of {class}); {e2}. \
                     Retried after releasing {released} cached bytes; {} bytes are held by live tensors \
                     (first failure: {e})",
                    s.allocated_bytes
                )
            })
        }
        Err(e) => panic!("Ascend alloc of {bytes} bytes for {op} on {device}: {e}"),
    };
    with_pool(device, |p| {
        p.stats.allocated_bytes += class;
        p.stats.reserved_bytes += class;
        p.note_peaks();
    });
    buf
}

/// Returns a block to its device's cache (from `Storage`'s drop).
pub(crate) fn release(device: &AscendDevice, block: DeviceBuffer) {
    with_pool(device, |p| p.release(block));
}

/// Frees every cached (unused) block of `device` back to the device; returns the bytes
/// released. Memory held by live tensors is untouched. Queued work may still use a cached
/// block (its tensor was dropped after queuing it), so the blocks' frees are stream-ordered
/// and this waits for the stream to carry them out.
pub fn empty_cache(device: &AscendDevice) -> usize {
    let blocks = with_pool(device, Pool::drain);
    let bytes = blocks.iter().map(|b| b.0.len()).sum();
    // `aclrtFree` needs the device bound on this thread; if that is impossible (thread exit)
    // the blocks are leaked rather than freed on the wrong context.
    match try_runtime(device) {
        Ok(rt) => {
            drop(blocks);
            let _ = rt.synchronize();
        }
        Err(_) => blocks.into_iter().for_each(|b| std::mem::forget(b.0)),
    }
    bytes
}

/// The pool counters of `device` (all zero before its first allocation).
pub fn memory_stats(device: &AscendDevice) -> MemoryStats {
    with_pool(device, |p| p.stats)
}

/// Resets the peaks of `device` to the current values.
pub fn reset_peak_stats(device: &AscendDevice) {
    with_pool(device, |p| {
        p.stats.peak_allocated_bytes = p.stats.allocated_bytes;
        p.stats.peak_reserved_bytes = p.stats.reserved_bytes;
    });
}
