//! The caching device-memory pool: one per [`AscendDevice`], a simplified PyTorch CUDA caching
//! allocator (`c10/cuda/CUDACachingAllocator.cpp`) with segments, splitting and coalescing.
//!
//! - **Sizes.** A request is rounded up to a multiple of 512 B up to 1 MiB ([`SMALL_LIMIT`]),
//!   and to a multiple of 2 MiB above ([`size_class`]).
//! - **Segments and blocks.** Device allocations (`aclrtMalloc`) are *segments*; a *block* is
//!   a byte range of a segment, at an offset that is a multiple of 512 B (CANN wants 32 B).
//!   Small requests (≤ 1 MiB) come from small segments of [`SMALL_SEGMENT`] (2 MiB); a large
//!   request that no cached block serves gets a segment of its own rounded size. The two kinds
//!   never share segments, so small activations do not pin large segments.
//! - **Best fit and splitting.** A request takes the smallest free block of its kind (small or
//!   large) that is at least its rounded size — a *hit* — instead of calling `aclrtMalloc` — a
//!   *miss*. When the rest is worth keeping it is split off as a free block of its own: at
//!   least 512 B in a small segment, more than 1 MiB in a large one (PyTorch's rules); else the
//!   request gets the whole block.
//! - **Coalescing.** A tensor's storage returns its block on drop; the block is merged with
//!   the free blocks beside it in its segment, so a segment whose blocks are all freed is one
//!   free block again, and adjacent freed blocks serve a request of their combined size.
//! - **Release.** Segments go back to the device (`aclrtFree`) only when they are entirely
//!   free, and only when an allocation fails for lack of memory (such segments are released
//!   and the allocation retried once) and on an explicit [`empty_cache`]. A segment with a live
//!   block stays.
//! - **Stats.** [`memory_stats`]: bytes of blocks held by live tensors (`allocated`), bytes of
//!   segments held from the device (`reserved` = allocated + cached), their peaks, the largest
//!   free block, the number of segments, hits, misses, device frees and OOM retries.
//!
//! Not modelled from PyTorch: its 20 MiB segments for large requests under 10 MiB (a large
//! segment here is the request's own rounded size, so a tight device-memory limit is not
//! overshot by up to 18 MiB), `max_split_size`, expandable segments, and per-stream pools.
//!
//! # Stream-ordered reuse (why a freed block is reusable at once)
//! Ops are queued on the device's stream and return before they run. A device has **one**
//! stream, shared by every thread (`crate::device`), and launches enter it in the order the
//! host issues them. A tensor's storage is dropped after every op that uses it was queued, so
//! any later use of its block — or of any block split from or merged with it, by whichever
//! thread — is queued after them and runs after them: the block goes back to the free blocks at
//! once, without waiting (PyTorch's allocator with a single stream; with several streams a
//! block would carry the streams that used it and an event, `recordStream`). What the host
//! itself touches is different: uploads into a block are queued copies
//! (`DeviceBuffer::write`), reads wait for the stream (`DeviceBuffer::read`), and a segment
//! leaves the pool for the device (`aclrtFree`) only in stream order, after a synchronisation
//! ([`empty_cache`], the OOM retry).
//!
//! A block is handed out as a `DeviceBuffer::sub_range` view of its segment: its own address
//! and length (what descriptors, uploads and reads see), freeing nothing on drop. The pool
//! owns the segments' buffers and frees a segment only when none of its blocks is held.
//!
//! A reused block is handed out as it was left, on the simulation as on CANN (where device
//! memory is uninitialised): an aclnn output is written whole by its op, and a tensor that
//! must read zero is made by `AscendTensor::zeros` (a queued memset). Zero-filling reused
//! blocks on the simulation only cost a memset launch per allocation there (a training step
//! on the simulation was slower for it, and nothing read the zeros).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use burn_ascend_cann::acl::ffi::{ACL_ERROR_BAD_ALLOC, ACL_ERROR_RT_MEMORY_ALLOCATION};
use burn_ascend_cann::acl::{AclError, DeviceBuffer};

use crate::device::{runtime, try_runtime, AscendDevice};

/// Requests up to this size are rounded to [`SMALL_GRANULE`] and served from small segments;
/// larger ones are rounded to [`LARGE_GRANULE`] and served from large segments.
pub const SMALL_LIMIT: usize = 1 << 20;
/// The rounding of small requests, and the alignment of every block's offset in its segment.
pub const SMALL_GRANULE: usize = 512;
/// The rounding of large requests: a multiple of 2 MiB (as PyTorch's caching allocator), so a
/// block is never more than 2 MiB larger than asked — a power of two would reserve up to
/// twice a large KV cache.
pub const LARGE_GRANULE: usize = 2 << 20;
/// The size of a small segment (PyTorch's `kSmallBuffer`): small blocks are split from it.
pub const SMALL_SEGMENT: usize = 2 << 20;

/// The block size a request of `bytes` gets (at least; a block whose remainder is too small to
/// split off is handed out whole).
pub fn size_class(bytes: usize) -> usize {
    let bytes = bytes.max(1);
    if bytes <= SMALL_LIMIT {
        bytes.div_ceil(SMALL_GRANULE) * SMALL_GRANULE
    } else {
        bytes.div_ceil(LARGE_GRANULE) * LARGE_GRANULE
    }
}

/// Whether a free block of `kind` with `remainder` bytes left over is split (PyTorch's
/// `should_split`): at least 512 B in a small segment, more than 1 MiB in a large one.
fn should_split(small: bool, remainder: usize) -> bool {
    if small {
        remainder >= SMALL_GRANULE
    } else {
        remainder > SMALL_LIMIT
    }
}

/// A device's pool counters ([`memory_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in blocks held by live tensors (rounded sizes).
    pub allocated_bytes: usize,
    /// Bytes of segments held from the device: allocated plus cached.
    pub reserved_bytes: usize,
    /// Bytes in free blocks (`reserved_bytes - allocated_bytes`).
    pub cached_bytes: usize,
    /// The largest free block: the largest request (rounded) served without `aclrtMalloc`.
    pub largest_free_block_bytes: usize,
    /// Segments held from the device.
    pub segments: usize,
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
    /// Allocations during a graph capture served by a block released earlier in the same
    /// capture (counted in `hits` too).
    pub capture_reuses: u64,
}

/// A block of a segment: its length and whether it is free.
#[derive(Clone, Copy)]
struct Block {
    len: usize,
    free: bool,
}

/// A device allocation and its blocks by offset (they tile it: each starts where the previous
/// ends; no two free blocks are adjacent).
///
/// `DeviceBuffer` is `!Send` because ACL binds device contexts to threads; the pool binds the
/// segment's device on the calling thread (`device::runtime`) before every `aclrtFree`, as
/// `Storage` does.
struct Segment {
    buf: DeviceBuffer,
    small: bool,
    blocks: BTreeMap<usize, Block>,
}

// SAFETY: see the type's docs: a segment's buffer is only freed after `try_runtime(device)`
// has bound its device to the freeing thread; while in the pool it is only read for its
// address and length and for `DeviceBuffer::sub_range` views, which the thread using them
// binds the device for (`Storage`).
unsafe impl Send for Segment {}

impl Segment {
    fn entirely_free(&self) -> bool {
        self.blocks.len() == 1 && self.blocks.values().all(|b| b.free)
    }
}

#[derive(Default)]
struct Pool {
    /// By device address of the segment's start.
    segments: BTreeMap<usize, Segment>,
    /// Free blocks of small segments, as (length, device address): best fit is the first at
    /// or above a length.
    free_small: BTreeSet<(usize, usize)>,
    /// Free blocks of large segments, as `free_small`.
    free_large: BTreeSet<(usize, usize)>,
    stats: MemoryStats,
    /// The graph being captured on the device (`crate::graph`): the blocks allocated
    /// meanwhile belong to it.
    capturing: Option<u64>,
    /// The thread recording a task-group update of a graph of the device (`crate::graph`):
    /// its allocations are refused — a block would return to the pool when its tensor drops,
    /// while the updated graph still reads or writes it at every replay. Other threads'
    /// allocations (another device's work, a test beside) are not the update's.
    updating: Option<std::thread::ThreadId>,
    /// Blocks (by address) that a captured graph's recorded tasks use, and the graph: they are
    /// not handed out again while the graph lives.
    graph_owned: HashMap<usize, u64>,
    /// Per graph, its blocks whose tensors were dropped: returned to the free blocks when the
    /// graph is dropped.
    graph_released: HashMap<u64, Vec<GraphBlock>>,
    /// Blocks released while the graph in `capturing` is captured, by (length, address): its
    /// own, and older ones its recorded tasks may read (not another graph's). The same
    /// capture's later requests take them again — the graph's tasks run in recording order
    /// on one stream, at every replay, so a later task writes a block only after the earlier
    /// ones are done with it (the reuse a CUDA graph's private pool makes) — and the graph
    /// keeps them when its capture ends, as it keeps every block it recorded.
    capture_free: BTreeMap<(usize, usize), GraphBlock>,
    /// While recorded ([`record_large_requests`]): the size class of every large request.
    large_requests: Option<Vec<usize>>,
}

/// A block a captured graph keeps after its tensor was dropped.
struct GraphBlock(DeviceBuffer);

// SAFETY: as `Segment`: a view of a segment the pool owns, only moved back into the pool's
// free blocks (`Pool::release`), never used for device calls while held here.
unsafe impl Send for GraphBlock {}

impl Pool {
    fn note_peaks(&mut self) {
        let s = &mut self.stats;
        s.peak_allocated_bytes = s.peak_allocated_bytes.max(s.allocated_bytes);
        s.peak_reserved_bytes = s.peak_reserved_bytes.max(s.reserved_bytes);
    }

    fn free_set(&mut self, small: bool) -> &mut BTreeSet<(usize, usize)> {
        if small {
            &mut self.free_small
        } else {
            &mut self.free_large
        }
    }

    /// Marks `len` bytes at `offset` of the segment at `base` (the start of a free block)
    /// allocated, splitting off the rest of the block when worth it; returns the bytes taken
    /// and a view of them.
    fn carve(&mut self, base: usize, offset: usize, class: usize) -> Option<(usize, DeviceBuffer)> {
        let seg = self.segments.get_mut(&base)?;
        let small = seg.small;
        let block = *seg.blocks.get(&offset)?;
        debug_assert!(block.free && block.len >= class);
        let rest = block.len - class;
        let split = should_split(small, rest);
        let taken = if split { class } else { block.len };
        // SAFETY: the view lies inside the segment (`sub_range` checks it), and the pool keeps
        // the segment's buffer until every block of it is free again, i.e. until this view has
        // come back through `release`; its `aclrtFree` is then stream-ordered after all work
        // queued over the view.
        let view = unsafe { DeviceBuffer::sub_range(&seg.buf, offset, taken) }.ok()?;
        seg.blocks.insert(
            offset,
            Block {
                len: taken,
                free: false,
            },
        );
        if split {
            seg.blocks.insert(
                offset + class,
                Block {
                    len: rest,
                    free: true,
                },
            );
            self.free_set(small).insert((rest, base + offset + class));
        }
        self.stats.allocated_bytes += taken;
        self.note_peaks();
        Some((taken, view))
    }

    /// The best-fit free block of `kind` for a request of `class` bytes, taken (a hit).
    fn take_free(&mut self, small: bool, class: usize) -> Option<DeviceBuffer> {
        let &(len, addr) = self.free_set(small).range((class, 0)..).next()?;
        self.free_set(small).remove(&(len, addr));
        let (&base, _) = self.segments.range(..=addr).next_back()?;
        let (_, view) = self.carve(base, addr - base, class)?;
        self.stats.hits += 1;
        Some(view)
    }

    /// Adds a fresh segment and takes its first `class` bytes.
    fn add_segment(&mut self, buf: DeviceBuffer, small: bool, class: usize) -> DeviceBuffer {
        let base = buf.as_ptr() as usize;
        let len = buf.len();
        let mut blocks = BTreeMap::new();
        blocks.insert(0, Block { len, free: true });
        self.segments.insert(base, Segment { buf, small, blocks });
        self.stats.reserved_bytes += len;
        match self.carve(base, 0, class) {
            Some((_, view)) => view,
            // Unreachable: the segment was just inserted with one free block of `len >= class`
            // bytes. Hand it out whole rather than panic.
            None => {
                let seg = self.segments.remove(&base).expect("just inserted");
                self.stats.reserved_bytes -= len;
                seg.buf
            }
        }
    }

    /// Notes that a block was handed out (a captured graph then owns it).
    fn note_handed_out(&mut self, block: &DeviceBuffer) {
        if let Some(g) = self.capturing {
            self.graph_owned.insert(block.as_ptr() as usize, g);
        }
    }

    /// A block released during the current capture, for a request of `class` bytes: the
    /// best fit no larger than twice the request (a larger one stays for a larger request).
    fn take_capture_free(&mut self, class: usize) -> Option<DeviceBuffer> {
        let (&key, _) = self
            .capture_free
            .range((class, 0)..)
            .next()
            .filter(|((len, _), _)| *len <= 2 * class)?;
        let GraphBlock(block) = self.capture_free.remove(&key)?;
        self.stats.hits += 1;
        self.stats.capture_reuses += 1;
        Some(block)
    }

    /// Takes a block back, merging it with its free neighbours. A buffer that is not a block
    /// of this pool (none is) is dropped, which frees it if it owns its memory. A block a
    /// captured graph uses is kept for the graph instead, and one released during a capture
    /// serves the capture's later requests (`capture_free`).
    fn release(&mut self, block: DeviceBuffer) {
        let addr = block.as_ptr() as usize;
        let owner = self.graph_owned.get(&addr).copied();
        match (owner, self.capturing) {
            (Some(g), Some(c)) if g == c => {
                self.capture_free
                    .insert((block.len(), addr), GraphBlock(block));
                return;
            }
            (Some(g), _) => {
                self.graph_released
                    .entry(g)
                    .or_default()
                    .push(GraphBlock(block));
                return;
            }
            (None, Some(c)) => {
                // From before the capture: the recorded tasks may use it, so the graph keeps it.
                self.graph_owned.insert(addr, c);
                self.capture_free
                    .insert((block.len(), addr), GraphBlock(block));
                return;
            }
            (None, None) => {}
        }
        let Some((&base, seg)) = self.segments.range_mut(..=addr).next_back() else {
            debug_assert!(false, "released a block of no segment");
            return;
        };
        let mut offset = addr - base;
        let small = seg.small;
        let Some(b) = seg.blocks.get_mut(&offset).filter(|b| !b.free) else {
            debug_assert!(false, "released a block the pool does not hold");
            return;
        };
        b.free = true;
        let mut len = b.len;
        self.stats.allocated_bytes -= len;
        let mut unindex = Vec::new();
        // the next block
        if let Some(next) = seg.blocks.get(&(offset + len)).copied() {
            if next.free {
                seg.blocks.remove(&(offset + len));
                unindex.push((next.len, base + offset + len));
                len += next.len;
            }
        }
        // the previous block
        if let Some((&prev_off, &prev)) = seg.blocks.range(..offset).next_back() {
            if prev.free && prev_off + prev.len == offset {
                seg.blocks.remove(&offset);
                unindex.push((prev.len, base + prev_off));
                offset = prev_off;
                len += prev.len;
            }
        }
        seg.blocks.insert(offset, Block { len, free: true });
        let set = self.free_set(small);
        for k in unindex {
            set.remove(&k);
        }
        set.insert((len, base + offset));
        drop(block);
    }

    /// Removes every entirely free segment (the caller frees them with the device bound).
    fn drain(&mut self) -> Vec<Segment> {
        let bases: Vec<usize> = self
            .segments
            .iter()
            .filter(|(_, s)| s.entirely_free())
            .map(|(&b, _)| b)
            .collect();
        let mut out = Vec::with_capacity(bases.len());
        for base in bases {
            if let Some(seg) = self.segments.remove(&base) {
                let len = seg.buf.len();
                self.free_set(seg.small).remove(&(len, base));
                self.stats.reserved_bytes -= len;
                self.stats.device_frees += 1;
                out.push(seg);
            }
        }
        out
    }

    fn snapshot(&self) -> MemoryStats {
        let largest = |s: &BTreeSet<(usize, usize)>| s.last().map_or(0, |&(len, _)| len);
        MemoryStats {
            cached_bytes: self.stats.reserved_bytes - self.stats.allocated_bytes,
            largest_free_block_bytes: largest(&self.free_small).max(largest(&self.free_large)),
            segments: self.segments.len(),
            ..self.stats
        }
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
/// a cached free block or a new segment. Out of memory, the entirely free segments are
/// released and the allocation retried once; a second failure panics naming `op`, the bytes
/// and the status. The block's contents are undefined (what its last user left).
pub(crate) fn allocate(device: &AscendDevice, bytes: usize, op: &str) -> DeviceBuffer {
    let class = size_class(bytes);
    let small = class <= SMALL_LIMIT;
    // Waits while another thread captures a graph of the device.
    let rt = runtime(device);
    if with_pool(device, |p| p.updating == Some(std::thread::current().id())) {
        panic!(
            "allocation of {bytes} bytes for {op} refused during graph capture's task-group \
             update on {device}: a re-issued call must write the buffers the capture bound \
             (its output, its workspace), not a new block the pool would hand out again"
        );
    }
    let cached = with_pool(device, |p| {
        if let (false, Some(r)) = (small, p.large_requests.as_mut()) {
            r.push(class);
        }
        let reused = if p.capturing.is_some() {
            p.take_capture_free(class)
        } else {
            None
        };
        let b = reused.or_else(|| p.take_free(small, class));
        if b.is_none() {
            p.stats.misses += 1;
        }
        b
    });
    if let Some(buf) = &cached {
        with_pool(device, |p| p.note_handed_out(buf));
    }
    if let Some(buf) = cached {
        return buf;
    }
    let segment = if small { SMALL_SEGMENT } else { class };
    let buf = match rt.alloc(segment) {
        Ok(b) => b,
        Err(e) if is_oom(&e) => {
            let released = empty_cache(device);
            with_pool(device, |p| p.stats.oom_retries += 1);
            rt.alloc(segment).unwrap_or_else(|e2| {
                let s = memory_stats(device);
                panic!(
                    "Ascend out of device memory on {device}: {op} needs {bytes} bytes (block of {class}, segment of {segment}); {e2}. \
                     Retried after releasing {released} cached bytes; {} bytes are held by live tensors \
                     (first failure: {e})",
                    s.allocated_bytes
                )
            })
        }
        Err(e) => panic!("Ascend alloc of {bytes} bytes for {op} on {device}: {e}"),
    };
    with_pool(device, |p| {
        let block = p.add_segment(buf, small, class);
        p.note_handed_out(&block);
        block
    })
}

/// Makes sure `device`'s pool holds at least `bytes` of free small blocks (requests up to
/// [`SMALL_LIMIT`]), adding small segments as needed: the memory a graph capture, which may
/// not call `aclrtMalloc`, allocates from. Returns the segments added.
pub fn reserve_small(device: &AscendDevice, bytes: usize) -> Result<usize, String> {
    let rt = try_runtime(device)?;
    let free_small = || {
        with_pool(device, |p| {
            p.free_small.iter().map(|&(len, _)| len).sum::<usize>()
        })
    };
    let mut added = 0;
    while free_small() < bytes {
        let buf = rt
            .alloc(SMALL_SEGMENT)
            .map_err(|e| format!("reserving {bytes} bytes on {device}: {e}"))?;
        with_pool(device, |p| {
            let block = p.add_segment(buf, true, SMALL_SEGMENT);
            p.release(block);
        });
        added += 1;
    }
    Ok(added)
}

/// Starts recording the size class of every large request (over [`SMALL_LIMIT`]) on
/// `device`, for [`take_large_requests`]: what one eager step allocates, so that a capture of
/// the same step — which keeps every block it takes, freed or not, and may not call
/// `aclrtMalloc` — can have them reserved first ([`reserve_large`]).
pub fn record_large_requests(device: &AscendDevice) {
    with_pool(device, |p| p.large_requests = Some(Vec::new()));
}

/// The size classes recorded since [`record_large_requests`], in request order; stops
/// recording.
pub fn take_large_requests(device: &AscendDevice) -> Vec<usize> {
    with_pool(device, |p| p.large_requests.take().unwrap_or_default())
}

/// Adds one free large block of each size class in `classes` to `device`'s pool (a segment
/// each, `aclrtMalloc` now): the large blocks a graph capture then takes. Returns the bytes
/// added.
pub fn reserve_large(device: &AscendDevice, classes: &[usize]) -> Result<usize, String> {
    let rt = try_runtime(device)?;
    let mut added = 0;
    for &class in classes {
        let class = size_class(class.max(SMALL_LIMIT + 1));
        let buf = rt
            .alloc(class)
            .map_err(|e| format!("reserving a block of {class} bytes on {device}: {e}"))?;
        with_pool(device, |p| {
            let block = p.add_segment(buf, false, class);
            p.release(block);
        });
        added += class;
    }
    Ok(added)
}

/// Starts attributing `device`'s allocations to graph `graph` (a capture began).
pub(crate) fn begin_graph(device: &AscendDevice, graph: u64) {
    with_pool(device, |p| p.capturing = Some(graph));
}

/// Refuses (`on`) or allows again the calling thread's allocations on the device while it
/// records a task-group update.
pub(crate) fn set_updating(device: &AscendDevice, on: bool) {
    let me = on.then(|| std::thread::current().id());
    with_pool(device, |p| p.updating = me);
}

/// Stops attributing allocations to a graph (its capture ended); the blocks released during
/// the capture stay the graph's.
pub(crate) fn end_capture(device: &AscendDevice) {
    with_pool(device, |p| {
        if let Some(g) = p.capturing.take() {
            let kept = std::mem::take(&mut p.capture_free).into_values();
            p.graph_released.entry(g).or_default().extend(kept);
        }
    });
}

/// Returns graph `graph`'s blocks to the pool (the graph was dropped): those whose tensors
/// are gone become free blocks, the others return when their tensors drop.
pub(crate) fn release_graph(device: &AscendDevice, graph: u64) {
    with_pool(device, |p| {
        p.graph_owned.retain(|_, g| *g != graph);
        for GraphBlock(block) in p.graph_released.remove(&graph).unwrap_or_default() {
            p.release(block);
        }
    });
}

/// Returns a block to its device's pool (from `Storage`'s drop).
pub(crate) fn release(device: &AscendDevice, block: DeviceBuffer) {
    with_pool(device, |p| p.release(block));
}

/// Frees every entirely free segment of `device` back to the device; returns the bytes
/// released. Segments with a block held by a live tensor are untouched. Queued work may still
/// use a free segment (its tensors were dropped after queuing it), so the frees are
/// stream-ordered and this waits for the stream to carry them out.
pub fn empty_cache(device: &AscendDevice) -> usize {
    let segments = with_pool(device, Pool::drain);
    let bytes = segments.iter().map(|s| s.buf.len()).sum();
    // `aclrtFree` needs the device bound on this thread; if that is impossible (thread exit)
    // the segments are leaked rather than freed on the wrong context.
    match try_runtime(device) {
        Ok(rt) => {
            drop(segments);
            let _ = rt.synchronize();
        }
        Err(_) => segments.into_iter().for_each(|s| std::mem::forget(s.buf)),
    }
    bytes
}

/// The pool counters of `device` (all zero before its first allocation).
pub fn memory_stats(device: &AscendDevice) -> MemoryStats {
    with_pool(device, |p| p.snapshot())
}

/// Resets the peaks of `device` to the current values.
pub fn reset_peak_stats(device: &AscendDevice) {
    with_pool(device, |p| {
        p.stats.peak_allocated_bytes = p.stats.allocated_bytes;
        p.stats.peak_reserved_bytes = p.stats.reserved_bytes;
    });
}
