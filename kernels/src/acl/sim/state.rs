//! The simulated runtime and nnopbase: device memory (host allocations tracked by address),
//! streams, tensor / int-array / tensor-list handles, executors and the recent error message.
//!
//! Handles are opaque ids (never dereferenced): the C side only passes them back. Device
//! memory is `Box<[u8]>` owned by a registry keyed by address, so the simulation reads and
//! writes it through safe slices; only host pointers handed in by `aclrtMemcpy` are
//! dereferenced raw.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::acl::ffi::*;

/// A simulated failure: status and message.
#[derive(Debug)]
pub(super) struct SimErr(pub AclStatus, pub String);

pub(super) type SimResult<T> = Result<T, SimErr>;

pub(super) fn invalid<T>(msg: impl Into<String>) -> SimResult<T> {
    Err(SimErr(ACLNN_ERR_PARAM_INVALID, msg.into()))
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f`, turning its error or a panic into a status and a recent-error message.
pub(super) fn guard(f: impl FnOnce() -> SimResult<()>) -> AclStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ACL_SUCCESS,
        Ok(Err(SimErr(st, msg))) => {
            set_error(&format!("[simulation] {msg}"));
            st
        }
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("panic");
            set_error(&format!("[simulation] internal error: {what}"));
            ACLNN_ERR_INNER
        }
    }
}

/// As [`guard`] for functions returning a handle (null on failure).
fn guard_ptr<T>(f: impl FnOnce() -> SimResult<usize>) -> *mut T {
    let mut out = 0usize;
    let st = guard(|| {
        out = f()?;
        Ok(())
    });
    if st == ACL_SUCCESS {
        out as *mut T
    } else {
        std::ptr::null_mut()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0x5100);

/// A fresh opaque handle value (non-null, never dereferenced).
fn next_id() -> usize {
    NEXT_ID.fetch_add(16, Ordering::Relaxed)
}

thread_local! {
    static COMPUTE: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Turns the simulated kernels on or off **for the calling thread** (launches run
/// synchronously on the caller's thread). Off, launches still validate and consume executors
/// but write nothing: what remains is the host-side cost of a dispatch.
pub fn set_compute(on: bool) {
    COMPUTE.with(|c| c.set(on));
}

pub(super) fn compute_enabled() -> bool {
    COMPUTE.with(|c| c.get())
}

// ---- device memory -----------------------------------------------------------------------

static MEM: Mutex<BTreeMap<usize, Box<[u8]>>> = Mutex::new(BTreeMap::new());

/// The allocation holding `[addr, addr + len)`: (map key, offset inside it).
fn find(mem: &BTreeMap<usize, Box<[u8]>>, addr: usize, len: usize) -> Option<(usize, usize)> {
    let (&start, buf) = mem.range(..=addr).next_back()?;
    let off = addr - start;
    (off.checked_add(len)? <= buf.len()).then_some((start, off))
}

/// Copies `[addr, addr + len)` of device memory out.
pub(super) fn read_device(addr: usize, len: usize, what: &str) -> SimResult<Vec<u8>> {
    let mem = lock(&MEM);
    let Some((start, off)) = find(&mem, addr, len) else {
        return invalid(format!(
            "{what}: {len} bytes at {addr:#x} are not inside one device allocation"
        ));
    };
    Ok(mem[&start][off..off + len].to_vec())
}

/// Runs `f` on `[addr, addr + len)` of device memory.
pub(super) fn with_device_mut<R>(
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

pub(super) fn device_range_ok(addr: usize, len: usize) -> bool {
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

pub(super) unsafe extern "C" fn malloc(
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

pub(super) unsafe extern "C" fn free(dev_ptr: *mut c_void) -> AclStatus {
    guard(|| match lock(&MEM).remove(&(dev_ptr as usize)) {
        Some(_) => Ok(()),
        None => Err(SimErr(
            ACL_ERROR_INVALID_PARAM,
            format!("aclrtFree: {dev_ptr:p} is not a live device allocation"),
        )),
    })
}

pub(super) unsafe extern "C" fn memcpy(
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

// ---- runtime -----------------------------------------------------------------------------

pub(super) unsafe extern "C" fn acl_init(_config: *const c_char) -> AclStatus {
    ACL_SUCCESS
}

pub(super) unsafe extern "C" fn acl_finalize() -> AclStatus {
    ACL_SUCCESS
}

pub(super) unsafe extern "C" fn set_device(device: i32) -> AclStatus {
    guard(|| {
        if device != 0 {
            return Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("aclrtSetDevice: the simulation has one device (0), got {device}"),
            ));
        }
        Ok(())
    })
}

pub(super) unsafe extern "C" fn reset_device(device: i32) -> AclStatus {
    // SAFETY: same contract, plain integer.
    unsafe { set_device(device) }
}

pub(super) unsafe extern "C" fn get_device_count(count: *mut u32) -> AclStatus {
    guard(|| {
        if count.is_null() {
            return Err(SimErr(ACL_ERROR_INVALID_PARAM, "count is null".into()));
        }
        // SAFETY: non-null out-pointer per the prototype.
        unsafe { *count = 1 };
        Ok(())
    })
}

static STREAMS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

pub(super) unsafe extern "C" fn create_stream(stream: *mut AclrtStream) -> AclStatus {
    guard(|| {
        if stream.is_null() {
            return Err(SimErr(ACL_ERROR_INVALID_PARAM, "stream is null".into()));
        }
        let id = next_id();
        lock(&STREAMS).get_or_insert_with(HashSet::new).insert(id);
        // SAFETY: non-null out-pointer per the prototype.
        unsafe { *stream = id as AclrtStream };
        Ok(())
    })
}

pub(super) fn stream_ok(stream: AclrtStream) -> bool {
    stream.is_null()
        || lock(&STREAMS)
            .as_ref()
            .is_some_and(|s| s.contains(&(stream as usize)))
}

pub(super) unsafe extern "C" fn destroy_stream(stream: AclrtStream) -> AclStatus {
    guard(|| {
        if lock(&STREAMS)
            .as_mut()
            .is_some_and(|s| s.remove(&(stream as usize)))
        {
            Ok(())
        } else {
            Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("aclrtDestroyStream: {stream:p} is not a live stream"),
            ))
        }
    })
}

pub(super) unsafe extern "C" fn synchronize_stream(stream: AclrtStream) -> AclStatus {
    guard(|| {
        if stream_ok(stream) {
            Ok(()) // launches run synchronously
        } else {
            Err(SimErr(
                ACL_ERROR_INVALID_PARAM,
                format!("aclrtSynchronizeStream: {stream:p} is not a live stream"),
            ))
        }
    })
}

pub(super) unsafe extern "C" fn get_recent_err_msg() -> *const c_char {
    // The pointer stays valid until the next failure on this thread replaces the string.
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

// ---- nnopbase ----------------------------------------------------------------------------

/// A decoded `aclTensor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SimTensor {
    pub dims: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
    pub dtype: DataType,
    pub format: Format,
    pub storage_dims: Vec<usize>,
    pub data: usize,
}

impl SimTensor {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    fn storage_bytes(&self) -> usize {
        self.storage_dims.iter().product::<usize>() * self.dtype.size()
    }

    /// Checks that the storage lies inside one live allocation (the view was checked against
    /// the storage at creation).
    pub fn check_memory(&self, name: &str) -> SimResult<()> {
        if self.numel() == 0 {
            return Ok(());
        }
        if !device_range_ok(self.data, self.storage_bytes()) {
            return invalid(format!(
                "{name}: storage {:?} of {:?} ({} bytes at {:#x}) is not inside one device allocation",
                self.storage_dims,
                self.dtype,
                self.storage_bytes(),
                self.data
            ));
        }
        Ok(())
    }

    /// Element offsets of the view in row-major order.
    fn element_offsets(&self) -> Vec<usize> {
        let n = self.numel();
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return out;
        }
        let rank = self.dims.len();
        let mut idx = vec![0usize; rank];
        for _ in 0..n {
            out.push(
                self.offset
                    + idx
                        .iter()
                        .zip(&self.strides)
                        .map(|(i, s)| i * s)
                        .sum::<usize>(),
            );
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < self.dims[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }

    /// The view's elements, gathered into row-major order, as little-endian bytes.
    pub fn read(&self, name: &str) -> SimResult<Vec<u8>> {
        if self.numel() == 0 {
            return Ok(Vec::new());
        }
        let es = self.dtype.size();
        let storage = read_device(self.data, self.storage_bytes(), name)?;
        let mut out = Vec::with_capacity(self.numel() * es);
        for e in self.element_offsets() {
            out.extend_from_slice(&storage[e * es..(e + 1) * es]);
        }
        Ok(out)
    }

    /// Writes row-major elements (little-endian bytes) through the view.
    pub fn write(&self, name: &str, bytes: &[u8]) -> SimResult<()> {
        let es = self.dtype.size();
        if bytes.len() != self.numel() * es {
            return Err(SimErr(
                ACLNN_ERR_INNER,
                format!(
                    "{name}: writing {} bytes to a view of {} elements",
                    bytes.len(),
                    self.numel()
                ),
            ));
        }
        if self.numel() == 0 {
            return Ok(());
        }
        let offsets = self.element_offsets();
        with_device_mut(self.data, self.storage_bytes(), name, |storage| {
            for (k, e) in offsets.into_iter().enumerate() {
                storage[e * es..(e + 1) * es].copy_from_slice(&bytes[k * es..(k + 1) * es]);
            }
        })
    }
}

static TENSORS: Mutex<Option<HashMap<usize, SimTensor>>> = Mutex::new(None);
static INT_ARRAYS: Mutex<Option<HashMap<usize, Vec<i64>>>> = Mutex::new(None);
static LISTS: Mutex<Option<HashMap<usize, Vec<usize>>>> = Mutex::new(None);

/// Reads `n` values from a C array, `None` for a null pointer with `n > 0`.
///
/// # Safety
/// A non-null `p` must be valid for `n` reads.
unsafe fn c_array<T: Copy>(p: *const T, n: u64) -> Option<Vec<T>> {
    if n == 0 {
        return Some(Vec::new());
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec())
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn create_tensor(
    view_dims: *const i64,
    view_dims_num: u64,
    data_type: i32,
    stride: *const i64,
    offset: i64,
    format: i32,
    storage_dims: *const i64,
    storage_dims_num: u64,
    tensor_data: *mut c_void,
) -> *mut AclTensor {
    guard_ptr(|| {
        if view_dims_num > 8 || storage_dims_num > 8 {
            return invalid("aclCreateTensor: rank must be <= 8");
        }
        // SAFETY: aclCreateTensor's contract: each array holds its count of int64 values
        // (strides as many as the view dims).
        let (dims, strides, storage) = unsafe {
            (
                c_array(view_dims, view_dims_num),
                c_array(stride, view_dims_num),
                c_array(storage_dims, storage_dims_num),
            )
        };
        let (Some(dims), Some(strides), Some(storage)) = (dims, strides, storage) else {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "aclCreateTensor: null dims, strides or storage dims".into(),
            ));
        };
        let dtype = DataType::from_raw(data_type).ok_or_else(|| {
            SimErr(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclCreateTensor: unknown aclDataType {data_type}"),
            )
        })?;
        let format = Format::from_raw(format).ok_or_else(|| {
            SimErr(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclCreateTensor: unknown aclFormat {format}"),
            )
        })?;
        let nonneg = |v: &[i64]| v.iter().all(|&x| x >= 0);
        if !nonneg(&dims) || !nonneg(&strides) || !nonneg(&storage) || offset < 0 {
            return invalid(format!(
                "aclCreateTensor: negative dims {dims:?}, strides {strides:?}, storage {storage:?} or offset {offset}"
            ));
        }
        let u = |v: Vec<i64>| v.into_iter().map(|x| x as usize).collect::<Vec<_>>();
        let t = SimTensor {
            dims: u(dims),
            strides: u(strides),
            offset: offset as usize,
            dtype,
            format,
            storage_dims: u(storage),
            data: tensor_data as usize,
        };
        if t.numel() > 0 {
            let extent = t.offset
                + t.dims
                    .iter()
                    .zip(&t.strides)
                    .map(|(d, s)| (d - 1) * s)
                    .sum::<usize>()
                + 1;
            let storage_elems: usize = t.storage_dims.iter().product();
            if extent > storage_elems {
                return invalid(format!(
                    "aclCreateTensor: view dims {:?} strides {:?} offset {} reach element {extent}, beyond storage {:?}",
                    t.dims, t.strides, t.offset, t.storage_dims
                ));
            }
            if tensor_data.is_null() {
                return Err(SimErr(
                    ACLNN_ERR_PARAM_NULLPTR,
                    "aclCreateTensor: null data for a non-empty tensor".into(),
                ));
            }
        }
        let id = next_id();
        lock(&TENSORS)
            .get_or_insert_with(HashMap::new)
            .insert(id, t);
        Ok(id)
    })
}

pub(super) unsafe extern "C" fn destroy_tensor(tensor: *const AclTensor) -> AclStatus {
    guard(|| {
        match lock(&TENSORS)
            .as_mut()
            .and_then(|m| m.remove(&(tensor as usize)))
        {
            Some(_) => Ok(()),
            None => invalid(format!("aclDestroyTensor: {tensor:p} is not a live tensor")),
        }
    })
}

pub(super) unsafe extern "C" fn create_int_array(value: *const i64, size: u64) -> *mut AclIntArray {
    guard_ptr(|| {
        // SAFETY: aclCreateIntArray's contract: `value` holds `size` values.
        let Some(v) = (unsafe { c_array(value, size) }) else {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "aclCreateIntArray: null values".into(),
            ));
        };
        let id = next_id();
        lock(&INT_ARRAYS)
            .get_or_insert_with(HashMap::new)
            .insert(id, v);
        Ok(id)
    })
}

pub(super) unsafe extern "C" fn destroy_int_array(array: *const AclIntArray) -> AclStatus {
    guard(|| {
        match lock(&INT_ARRAYS)
            .as_mut()
            .and_then(|m| m.remove(&(array as usize)))
        {
            Some(_) => Ok(()),
            None => invalid(format!(
                "aclDestroyIntArray: {array:p} is not a live int array"
            )),
        }
    })
}

pub(super) unsafe extern "C" fn create_tensor_list(
    value: *const *const AclTensor,
    size: u64,
) -> *mut AclTensorList {
    guard_ptr(|| {
        // SAFETY: aclCreateTensorList's contract: `value` holds `size` tensor handles.
        let Some(v) = (unsafe { c_array(value, size) }) else {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "aclCreateTensorList: null values".into(),
            ));
        };
        let ids: Vec<usize> = v.into_iter().map(|p| p as usize).collect();
        {
            let tensors = lock(&TENSORS);
            if let Some(bad) = ids
                .iter()
                .find(|id| !tensors.as_ref().is_some_and(|m| m.contains_key(id)))
            {
                return invalid(format!(
                    "aclCreateTensorList: {bad:#x} is not a live tensor"
                ));
            }
        }
        let id = next_id();
        lock(&LISTS)
            .get_or_insert_with(HashMap::new)
            .insert(id, ids);
        Ok(id)
    })
}

pub(super) unsafe extern "C" fn destroy_tensor_list(list: *const AclTensorList) -> AclStatus {
    guard(|| {
        let Some(ids) = lock(&LISTS)
            .as_mut()
            .and_then(|m| m.remove(&(list as usize)))
        else {
            return invalid(format!(
                "aclDestroyTensorList: {list:p} is not a live tensor list"
            ));
        };
        // As in nnopbase, destroying the list destroys its tensors.
        let mut tensors = lock(&TENSORS);
        for id in ids {
            tensors.as_mut().and_then(|m| m.remove(&id));
        }
        Ok(())
    })
}

/// The tensor behind a handle: `Ok(None)` for null, 161002 for a dead or foreign handle.
pub(super) fn tensor(p: *const AclTensor, name: &str) -> SimResult<Option<SimTensor>> {
    if p.is_null() {
        return Ok(None);
    }
    let t = lock(&TENSORS)
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).cloned());
    match t {
        Some(t) => {
            t.check_memory(name)?;
            Ok(Some(t))
        }
        None => invalid(format!("{name}: {p:p} is not a live aclTensor")),
    }
}

/// A required tensor: null → 161001 naming it.
pub(super) fn required(p: *const AclTensor, name: &str) -> SimResult<SimTensor> {
    tensor(p, name)?.ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, format!("{name} is null")))
}

/// An int array's values (`None` for null).
pub(super) fn int_array(p: *const AclIntArray, name: &str) -> SimResult<Option<Vec<i64>>> {
    if p.is_null() {
        return Ok(None);
    }
    match lock(&INT_ARRAYS)
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).cloned())
    {
        Some(v) => Ok(Some(v)),
        None => invalid(format!("{name}: {p:p} is not a live aclIntArray")),
    }
}

/// A tensor list's tensors (`None` for null).
pub(super) fn tensor_list(
    p: *const AclTensorList,
    name: &str,
) -> SimResult<Option<Vec<SimTensor>>> {
    if p.is_null() {
        return Ok(None);
    }
    let Some(ids) = lock(&LISTS)
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).cloned())
    else {
        return invalid(format!("{name}: {p:p} is not a live aclTensorList"));
    };
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| required(id as *const AclTensor, &format!("{name}[{i}]")))
        .collect::<SimResult<Vec<_>>>()
        .map(Some)
}

/// A C string attribute (`None` for null).
///
/// # Safety
/// A non-null `p` must point to a NUL-terminated string.
pub(super) unsafe fn c_str(p: *const c_char, name: &str) -> SimResult<Option<String>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_string()))
        .or_else(|_| invalid(format!("{name}: not UTF-8")))
}

// ---- executors ---------------------------------------------------------------------------

type Job = Box<dyn FnOnce() -> SimResult<()> + Send>;

struct Executor {
    op: &'static str,
    workspace: u64,
    job: Job,
}

static EXECUTORS: Mutex<Option<HashMap<usize, Executor>>> = Mutex::new(None);

/// The first stage's tail: records an executor for `op` needing `workspace` bytes and writes
/// the out-parameters.
///
/// # Safety
/// Non-null `ws` / `ex` must be writable out-pointers.
pub(super) unsafe fn new_executor(
    op: &'static str,
    workspace: u64,
    job: Job,
    ws: *mut u64,
    ex: *mut *mut AclOpExecutor,
) -> SimResult<()> {
    if ws.is_null() || ex.is_null() {
        return Err(SimErr(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}GetWorkspaceSize: workspaceSize or executor out-pointer is null"),
        ));
    }
    let id = next_id();
    lock(&EXECUTORS)
        .get_or_insert_with(HashMap::new)
        .insert(id, Executor { op, workspace, job });
    // SAFETY: the caller's contract (checked non-null above).
    unsafe {
        *ws = workspace;
        *ex = id as *mut AclOpExecutor;
    }
    Ok(())
}

/// The second stage of every simulated op: checks the two-stage order, the workspace and the
/// stream, then runs the job (unless compute is off).
pub(super) fn launch(
    op: &'static str,
    workspace: *mut c_void,
    size: u64,
    executor: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    guard(|| {
        let Some(e) = lock(&EXECUTORS)
            .as_mut()
            .and_then(|m| m.remove(&(executor as usize)))
        else {
            return invalid(format!(
                "{op}: executor {executor:p} was not produced by {op}GetWorkspaceSize or was already launched (call GetWorkspaceSize, then launch once)"
            ));
        };
        if e.op != op {
            return invalid(format!(
                "{op}: executor belongs to {}GetWorkspaceSize",
                e.op
            ));
        }
        if size < e.workspace {
            return invalid(format!(
                "{op}: workspaceSize {size} is smaller than the {} bytes GetWorkspaceSize asked for",
                e.workspace
            ));
        }
        if e.workspace > 0 && !device_range_ok(workspace as usize, e.workspace as usize) {
            return invalid(format!(
                "{op}: workspace {workspace:p} is not a device allocation of {} bytes",
                e.workspace
            ));
        }
        if !stream_ok(stream) {
            return invalid(format!("{op}: {stream:p} is not a live stream"));
        }
        if compute_enabled() {
            (e.job)()?;
        }
        Ok(())
    })
}

/// Counts of live simulated objects (for leak tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveHandles {
    pub allocations: usize,
    pub tensors: usize,
    pub int_arrays: usize,
    pub tensor_lists: usize,
    pub executors: usize,
    pub streams: usize,
}

/// The live simulated objects right now (process-wide).
pub fn live_handles() -> LiveHandles {
    LiveHandles {
        allocations: lock(&MEM).len(),
        tensors: lock(&TENSORS).as_ref().map_or(0, HashMap::len),
        int_arrays: lock(&INT_ARRAYS).as_ref().map_or(0, HashMap::len),
        tensor_lists: lock(&LISTS).as_ref().map_or(0, HashMap::len),
        executors: lock(&EXECUTORS).as_ref().map_or(0, HashMap::len),
        streams: lock(&STREAMS).as_ref().map_or(0, HashSet::len),
    }
}
