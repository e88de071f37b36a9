//! Simulated device memory: host allocations owned by a registry keyed by address
//! (`aclrtMalloc` / `aclrtFree` / `aclrtMemcpy`), an optional cap, and safe reads and writes
//! of device ranges for the ops.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use burn_ascend_kernels::acl::ffi::*;

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
    let mut mem = lock(&MEM);
    let Some((start, off)) = find(&mem, addr, len) else {
        return invalid(format!(
            "{what}: {len} bytes at {addr:#x} are not inside one device allocation"
        ));
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

pub(crate) unsafe extern "C" fn malloc(
    dev_ptr: *mut *mut c_void,
    size: usize,
    _policy: c_int,
) -> AclStatus {
    guard(|| {
        if dev_ptr.is_null() {
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
        unsafe { *dev_ptr = addr as *mut c_void };
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn free(dev_ptr: *mut c_void) -> AclStatus {
    guard(|| {
        let len = lock(&MEM).get(&(dev_ptr as usize)).map_or(0, |b| b.len());
        if let Some(stream) = super::pending_workspace_stream(dev_ptr as usize, len) {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!(
                    "aclrtFree: {dev_ptr:p} is the workspace of a launch on stream {stream:#x} that \
                     was not synchronised yet (on an NPU the kernel may still be using it)"
                ),
            ));
        }
        free_now(dev_ptr)
    })
}

fn free_now(dev_ptr: *mut c_void) -> SimResult<()> {
    match lock(&MEM).remove(&(dev_ptr as usize)) {
        Some(_) => Ok(()),
        None => Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("aclrtFree: {dev_ptr:p} is not a live device allocation"),
        )),
    }
}

pub(crate) unsafe extern "C" fn memcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: c_int,
) -> AclStatus {
    guard(|| {
        let err = |m: String| Err(SimErr(ACL_ERROR_INVALID_PARAM, format!("aclrtMemcpy: {m}")));
        if count > dest_max {
            return err(format!("count {count} > destMax {dest_max}"));
        }
        if count == 0 {
            return Ok(());
        }
        if dst.is_null() || src.is_null() {
            return err("null pointer".into());
        }
        match kind {
            ACL_MEMCPY_HOST_TO_DEVICE => {
                // SAFETY: aclrtMemcpy's contract: `src` is host memory readable for `count`
                // bytes. It is not device memory (which the simulation owns), so it cannot
                // alias the destination slice below.
                let host = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), count) };
                with_device_mut(dst as usize, count, "aclrtMemcpy destination", |d| {
                    d.copy_from_slice(host)
                })
            }
            ACL_MEMCPY_DEVICE_TO_HOST => {
                let bytes = read_device(src as usize, count, "aclrtMemcpy source")?;
                // SAFETY: aclrtMemcpy's contract: `dst` is host memory writable for
                // `dest_max >= count` bytes; `bytes` is a fresh copy, so no overlap.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.cast::<u8>(), count) };
                Ok(())
            }
            3 => {
                let bytes = read_device(src as usize, count, "aclrtMemcpy source")?;
                with_device_mut(dst as usize, count, "aclrtMemcpy destination", |d| {
                    d.copy_from_slice(&bytes)
                })
            }
            other => err(format!(
                "kind {other} is not modelled (host-to-device 1, device-to-host 2, device-to-device 3)"
            )),
        }
    })
}
