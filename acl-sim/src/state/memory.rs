//! Simulated device memory: host allocations owned by a registry keyed by address
//! (`aclrtMalloc` / `aclrtFree` / `aclrtMemcpy`), an optional cap, and safe reads and writes
//! of device ranges for the ops.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Mutex;

use burn_ascend_cann::acl::ffi::*;

use super::{guard, invalid, lock, SimErr, SimResult};

pub(super) static MEM: Mutex<BTreeMap<usize, Box<[u8]>>> = Mutex::new(BTreeMap::new());

/// The allocation holding `[addr, addr + len)`: (map key, offset inside it).
fn find(mem: &BTreeMap<usize, Box<[u8]>>, addr: usize, len: usize) -> Option<(usize, usize)> {
    let (&start, buf) = mem.range(..=addr).next_back()?;
    let off = addr - start;
    (off.checked_add(len)? <= buf.len()).then_some((start, off))
}

/// Copies `[addr, addr + len)` of device memory out.
pub(crate) fn read_device(addr: usize, len: usize, what: &str) -> SimResult<Vec<u8>> {
    let mem = lock(&MEM);
    let Some((start, off)) = find(&mem, addr, len) else {
        return invalid(format!(
            "{what}: {len} bytes at {addr:#x} are not inside one device allocation"
        ));
    };
    Ok(mem[&start][off..off + len].to_vec())
}

/// Runs `f` on `[addr, addr + len)` of device memory.
pub(crate) fn with_device_mut<R>(
    addr: usize,
    len: usize,
    what: &str,
    f: impl FnOnce(&mut [u8]) -> R,
) -> SimResult<R> {
    with_range(&MEM, addr, len, f, || {
        format!("{what}: {len} bytes at {addr:#x} are not inside one device allocation")
    })
}

/// Runs `f` on `[addr, addr + len)` of the blocks `mem`, else the error `outside` says.
fn with_range<R>(
    mem: &Mutex<BTreeMap<usize, Box<[u8]>>>,
    addr: usize,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> R,
    outside: impl FnOnce() -> String,
) -> SimResult<R> {
    let mut mem = lock(mem);
    let Some((start, off)) = find(&mem, addr, len) else {
        return invalid(outside());
    };
    let buf = mem.get_mut(&start).expect("found");
    Ok(f(&mut buf[off..off + len]))
}

pub(crate) fn device_range_ok(addr: usize, len: usize) -> bool {
    find(&lock(&MEM), addr, len).is_some()
}

/// `None` until first read: then `$BURN_ASCEND_SIM_MEMORY_LIMIT` (bytes) or unlimited.
static LIMIT: Mutex<Option<Option<usize>>> = Mutex::new(None);

fn memory_limit() -> Option<usize> {
    *lock(&LIMIT).get_or_insert_with(|| {
        std::env::var("BURN_ASCEND_SIM_MEMORY_LIMIT")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Caps the simulated device memory (process-wide) at `limit` bytes of live allocations
/// (`None`: unlimited). Beyond it `aclrtMalloc` fails with 207001
/// (`ACL_ERROR_RT_MEMORY_ALLOCATION`), as CANN does when the NPU's memory is exhausted. The
/// initial limit is `$BURN_ASCEND_SIM_MEMORY_LIMIT` (bytes) when set.
pub fn set_memory_limit(limit: Option<usize>) {
    *lock(&LIMIT) = Some(limit);
}

/// Bytes of simulated device memory allocated now (process-wide).
pub fn memory_in_use() -> usize {
    lock(&MEM).values().map(|b| b.len()).sum()
}

runtime_fn!(malloc, |p| {
    let size = p.size;
    guard(|| {
        super::capture::check_unsafe_call("aclrtMalloc", None)?;
        if p.dev_ptr.is_null() {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                "aclrtMalloc: devPtr is null".into(),
            ));
        }
        if size == 0 {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                "aclrtMalloc: size is 0".into(),
            ));
        }
        if let Some((st, msg)) = super::faults::malloc_fault(size) {
            return Err(SimErr(st, msg));
        }
        let mut mem = lock(&MEM);
        if let Some(limit) = memory_limit() {
            let live: usize = mem.values().map(|b| b.len()).sum();
            if live.saturating_add(size) > limit {
                return Err(SimErr(
                    ACL_ERROR_RT_MEMORY_ALLOCATION,
                    format!(
                        "aclrtMalloc: out of device memory: {size} bytes requested, {live} of the simulated {limit} bytes in use"
                    ),
                ));
            }
        }
        let buf = vec![0u8; size].into_boxed_slice();
        let addr = buf.as_ptr() as usize;
        mem.insert(addr, buf);
        drop(mem);
        // SAFETY: `dev_ptr` is non-null and, per aclrtMalloc's contract, points to writable
        // storage for one pointer.
        unsafe { *p.dev_ptr = addr as *mut c_void };
        Ok(())
    })
});

runtime_fn!(free, |p| {
    let dev_ptr = p.dev_ptr;
    guard(|| free_block(dev_ptr, false, "aclrtFree", NOT_DEVICE))
});

/// What [`free_block`] says of a pointer that is no live block.
const NOT_DEVICE: &str = "is not a live device allocation";
const NOT_HOST: &str = "is not from aclrtMallocHost";

/// `aclrtFree` / `aclrtFreeHost` (`call`; `host` for the latter) of the block at `ptr`: an
/// error (`ptr`, then `not_live`) when no live block starts there; deferred while an enqueued
/// operation still uses it; else freed now.
fn free_block(ptr: *mut c_void, host: bool, call: &str, not_live: &str) -> SimResult<()> {
    let addr = ptr as usize;
    let mem = if host { &HOST_MEM } else { &MEM };
    let Some(len) = lock(mem).get(&addr).map(|b| b.len()) else {
        return Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("{call}: {ptr:p} {not_live}"),
        ));
    };
    if super::streams::quarantine_if_in_flight(addr, len, host, call) {
        return Ok(());
    }
    if host {
        free_host_now(addr)
    } else {
        free_now(addr)
    }
}

pub(crate) fn free_now(addr: usize) -> SimResult<()> {
    match lock(&MEM).remove(&addr) {
        Some(_) => Ok(()),
        None => Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("aclrtFree: {addr:#x} is not a live device allocation"),
        )),
    }
}

/// Page-locked host memory (`aclrtMallocHost`), by address: the only host memory
/// `aclrtMemcpyAsync` takes.
static HOST_MEM: Mutex<BTreeMap<usize, Box<[u8]>>> = Mutex::new(BTreeMap::new());

runtime_fn!(malloc_host, |p| {
    let size = p.size;
    guard(|| {
        if p.host_ptr.is_null() || size == 0 {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("aclrtMallocHost: hostPtr is null or size is 0 (size {size})"),
            ));
        }
        let buf = vec![0u8; size].into_boxed_slice();
        let addr = buf.as_ptr() as usize;
        lock(&HOST_MEM).insert(addr, buf);
        // SAFETY: non-null out-pointer per the prototype.
        unsafe { *p.host_ptr = addr as *mut c_void };
        Ok(())
    })
});

runtime_fn!(free_host, |p| {
    let host_ptr = p.host_ptr;
    guard(|| free_block(host_ptr, true, "aclrtFreeHost", NOT_HOST))
});

pub(crate) fn free_host_now(addr: usize) -> SimResult<()> {
    lock(&HOST_MEM).remove(&addr).map(|_| ()).ok_or_else(|| {
        SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("aclrtFreeHost: {addr:#x} is not live"),
        )
    })
}

/// Whether `[addr, addr + len)` lies inside one `aclrtMallocHost` allocation.
fn host_range_ok(addr: usize, len: usize) -> bool {
    find(&lock(&HOST_MEM), addr, len).is_some()
}

fn with_host<R>(addr: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> SimResult<R> {
    with_range(&HOST_MEM, addr, len, f, || {
        format!("aclrtMemcpyAsync: {len} bytes of host memory at {addr:#x} are no longer allocated")
    })
}

/// The argument checks `aclrtMemcpy` and `aclrtMemcpyAsync` share, in CANN's order: a count
/// over `destMax` is refused, an empty copy succeeds without looking at the pointers (`false`:
/// nothing to copy), a null pointer is refused; `true` when there are bytes to copy.
fn copy_to_make(call: &str, count: usize, dest_max: usize, nulls: bool) -> SimResult<bool> {
    let refuse = |m: String| SimErr(ACL_ERROR_INVALID_PARAM, format!("{call}: {m}"));
    if count > dest_max {
        return Err(refuse(format!("count {count} > destMax {dest_max}")));
    }
    if count == 0 {
        return Ok(false);
    }
    if nulls {
        return Err(refuse("null pointer".into()));
    }
    Ok(true)
}

// `aclrtMemcpyAsync`: validated now, copied when the stream gets to it. Host memory must come
// from `aclrtMallocHost` (CANN's asynchronous copies need page-locked memory).
runtime_fn!(memcpy_async, |p| {
    let (dest_max, count, stream) = (p.dest_max, p.count, p.stream);
    guard(|| {
        let err = |m: String| {
            Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("aclrtMemcpyAsync: {m}"),
            ))
        };
        let nulls = p.dst.is_null() || p.src.is_null();
        if !copy_to_make("aclrtMemcpyAsync", count, dest_max, nulls)? {
            return Ok(());
        }
        if !super::stream_ok(stream) {
            return err(format!("{stream:p} is not a live stream"));
        }
        if p.kind != ACL_MEMCPY_DEVICE_TO_DEVICE {
            super::capture::check_host_copy("aclrtMemcpyAsync", stream as usize)?;
        }
        let (d, s) = (p.dst as usize, p.src as usize);
        let host_ok = |a: usize, what: &str| -> SimResult<()> {
            if host_range_ok(a, count) {
                Ok(())
            } else {
                err(format!(
                    "the {what} ({count} bytes at {a:#x}) is not page-locked host memory from aclrtMallocHost"
                ))
            }
        };
        let dev_ok = |a: usize, what: &str| -> SimResult<()> {
            if device_range_ok(a, count) {
                Ok(())
            } else {
                err(format!(
                    "the {what} ({count} bytes at {a:#x}) is not inside one device allocation"
                ))
            }
        };
        let job: super::Job = match p.kind {
            ACL_MEMCPY_HOST_TO_DEVICE => {
                host_ok(s, "source")?;
                dev_ok(d, "destination")?;
                Box::new(move || {
                    let bytes = with_host(s, count, |h| h.to_vec())?;
                    with_device_mut(d, count, "aclrtMemcpyAsync destination", |x| {
                        x.copy_from_slice(&bytes)
                    })
                })
            }
            ACL_MEMCPY_DEVICE_TO_HOST => {
                dev_ok(s, "source")?;
                host_ok(d, "destination")?;
                Box::new(move || {
                    let bytes = read_device(s, count, "aclrtMemcpyAsync source")?;
                    with_host(d, count, |h| h.copy_from_slice(&bytes))
                })
            }
            3 => {
                dev_ok(s, "source")?;
                dev_ok(d, "destination")?;
                Box::new(move || {
                    let bytes = read_device(s, count, "aclrtMemcpyAsync source")?;
                    with_device_mut(d, count, "aclrtMemcpyAsync destination", |x| {
                        x.copy_from_slice(&bytes)
                    })
                })
            }
            other => {
                return err(format!(
                    "kind {other} is not modelled (host-to-device 1, device-to-host 2, device-to-device 3)"
                ))
            }
        };
        let cost = crate::cost::cost_model_enabled()
            .then(|| crate::cost::of_transfer(count, Some(p.kind as u32)));
        let recorded = note_recorded_cost(stream, cost);
        super::streams::enqueue(
            stream,
            "aclrtMemcpyAsync",
            vec![(s, s + count), (d, d + count)],
            job,
            // A device-to-device copy is device work, off with the kernels (`set_compute`);
            // the host-visible copies always run.
            p.kind != 3 || super::compute_enabled(),
        )?;
        if let (false, Some(cost)) = (recorded, cost) {
            crate::cost::record("aclrtMemcpyAsync", cost);
        }
        Ok(())
    })
});

// `aclrtMemsetAsync`: sets `count` bytes to the low byte of `value` when the stream gets to it.
runtime_fn!(memset_async, |p| {
    let (max_count, count, stream) = (p.max_count, p.count, p.stream);
    guard(|| {
        if count > max_count {
            return invalid(format!(
                "aclrtMemsetAsync: count {count} > maxCount {max_count}"
            ));
        }
        if count == 0 {
            return Ok(());
        }
        let d = p.dev_ptr as usize;
        if !device_range_ok(d, count) {
            return invalid(format!(
                "aclrtMemsetAsync: {count} bytes at {d:#x} are not inside one device allocation"
            ));
        }
        if !super::stream_ok(stream) {
            return invalid(format!("aclrtMemsetAsync: {stream:p} is not a live stream"));
        }
        let byte = p.value as u8;
        let cost = crate::cost::cost_model_enabled().then(|| crate::cost::of_transfer(count, None));
        let recorded = note_recorded_cost(stream, cost);
        super::streams::enqueue(
            stream,
            "aclrtMemsetAsync",
            vec![(d, d + count)],
            Box::new(move || {
                with_device_mut(d, count, "aclrtMemsetAsync destination", |x| x.fill(byte))
            }),
            super::compute_enabled(),
        )?;
        if let (false, Some(cost)) = (recorded, cost) {
            crate::cost::record("aclrtMemsetAsync", cost);
        }
        Ok(())
    })
});

runtime_fn!(memcpy, |p| {
    let (dest_max, count) = (p.dest_max, p.count);
    guard(|| {
        super::capture::check_unsafe_call("aclrtMemcpy", None)?;
        let err = |m: String| Err(SimErr(ACL_ERROR_INVALID_PARAM, format!("aclrtMemcpy: {m}")));
        if !copy_to_make(
            "aclrtMemcpy",
            count,
            dest_max,
            p.dst.is_null() || p.src.is_null(),
        )? {
            return Ok(());
        }
        let (d, s) = (p.dst as usize, p.src as usize);
        match p.kind {
            ACL_MEMCPY_HOST_TO_DEVICE => {
                super::streams::check_host_access((d, d + count), "aclrtMemcpy(host to device)")?;
                // SAFETY: aclrtMemcpy's contract: `src` is host memory readable for `count`
                // bytes. It is not device memory (which the simulation owns), so it cannot
                // alias the destination slice below.
                let host = unsafe { std::slice::from_raw_parts(p.src.cast::<u8>(), count) };
                with_device_mut(p.dst as usize, count, "aclrtMemcpy destination", |d| {
                    d.copy_from_slice(host)
                })
            }
            ACL_MEMCPY_DEVICE_TO_HOST => {
                super::streams::check_host_access((s, s + count), "aclrtMemcpy(device to host)")?;
                let bytes = read_device(s, count, "aclrtMemcpy source")?;
                // SAFETY: aclrtMemcpy's contract: `dst` is host memory writable for
                // `dest_max >= count` bytes; `bytes` is a fresh copy, so no overlap.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.dst.cast::<u8>(), count) };
                Ok(())
            }
            3 => {
                super::streams::check_host_access((s, s + count), "aclrtMemcpy(device to device)")?;
                super::streams::check_host_access((d, d + count), "aclrtMemcpy(device to device)")?;
                let bytes = read_device(s, count, "aclrtMemcpy source")?;
                with_device_mut(p.dst as usize, count, "aclrtMemcpy destination", |d| {
                    d.copy_from_slice(&bytes)
                })
            }
            other => err(format!(
                "kind {other} is not modelled (host-to-device 1, device-to-host 2, device-to-device 3)"
            )),
        }
    })
});

/// Whether `stream` records its tasks into a graph; if so, `cost` goes with the task the caller
/// enqueues next (counted when a replay runs it, not now).
fn note_recorded_cost(stream: AclrtStream, cost: Option<crate::cost::OpCost>) -> bool {
    let recorded = super::capture::recording(stream as usize);
    if recorded {
        super::capture::note_next_cost(cost);
    }
    recorded
}
