//! The safe layer over nnopbase: tensor descriptors built and checked in **one place**
//! ([`TensorDesc`]), and RAII handles for device buffers, tensors, int arrays, tensor lists and
//! streams.
//!
//! # Threads (why nothing here is `Send` or `Sync`)
//! ACL binds the current device context to the calling thread (`aclrtSetDevice` /
//! `aclrtSetCurrentContext`); freeing a buffer or destroying a stream from a thread that never
//! set the context fails or acts on the wrong context. nnopbase handles (`aclTensor`, …) are
//! plain heap objects, but nothing documents them as thread-safe. Every handle therefore keeps
//! its raw pointer, which makes it `!Send + !Sync`: a handle is created, used and dropped on the
//! thread of the [`super::Runtime`] that made it. The function table itself ([`AclApi`], plain
//! function pointers) is `Send + Sync`.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr::NonNull;

use std::sync::Arc;

use super::error::{AclError, Result};
use super::ffi::*;
use super::runtime::StreamOrder;

/// Most dimensions a descriptor may have (aclnn's limit).
pub const MAX_RANK: usize = 8;

/// An `aclTensor` descriptor: everything `aclCreateTensor` takes except the data pointer.
/// Strides and offset are in **elements** (spec §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorDesc {
    /// View dimensions.
    pub dims: Vec<i64>,
    /// View strides, in elements.
    pub strides: Vec<i64>,
    /// Offset of element `[0, …, 0]` from the data pointer, in elements.
    pub offset: i64,
    /// Element type.
    pub dtype: DataType,
    /// Memory format.
    pub format: Format,
    /// Storage dimensions: the shape of the underlying allocation.
    pub storage_dims: Vec<i64>,
}

/// Row-major strides of `dims`.
pub fn contiguous_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(dims[i + 1].max(1));
    }
    strides
}

fn to_i64(dims: &[usize]) -> Result<Vec<i64>> {
    dims.iter()
        .map(|&d| {
            i64::try_from(d).map_err(|_| AclError::invalid("dims", "dimension overflows i64"))
        })
        .collect()
}

impl TensorDesc {
    /// A contiguous row-major ND tensor; storage dims equal the view dims (as in CANN's samples).
    pub fn contiguous(dims: &[usize], dtype: DataType) -> Result<Self> {
        let dims = to_i64(dims)?;
        let d = Self {
            strides: contiguous_strides(&dims),
            storage_dims: dims.clone(),
            dims,
            offset: 0,
            dtype,
            format: Format::Nd,
        };
        d.check()?;
        Ok(d)
    }

    /// A strided ND view into a flat storage of `storage_elems` elements (the storage is
    /// described as 1-D, as llama.cpp's CANN backend does).
    pub fn strided(
        dims: &[usize],
        strides: &[usize],
        offset: usize,
        storage_elems: usize,
        dtype: DataType,
    ) -> Result<Self> {
        let d = Self {
            dims: to_i64(dims)?,
            strides: to_i64(strides)?,
            offset: i64::try_from(offset)
                .map_err(|_| AclError::invalid("offset", "overflows i64"))?,
            dtype,
            format: Format::Nd,
            storage_dims: vec![i64::try_from(storage_elems)
                .map_err(|_| AclError::invalid("storage", "overflows i64"))?],
        };
        d.check()?;
        Ok(d)
    }

    /// A PA_NZ KV cache `[num_blocks, N·D / last, block_size, last]` (`last = 32 / sizeof`),
    /// described as a contiguous **ND** tensor over that shape, as the docs' example
    /// (`docs/aclnnScatterPaKvCache.md`, `examples/test_aclnn_scatter_pa_kv_cache.cpp`) does.
    ///
    /// Why not `ACL_FORMAT_FRACTAL_NZ` with torch_npu's physical storage shape: in
    /// ops-transformer `attention/scatter_pa_kv_cache`, the op definition
    /// (`op_host/scatter_pa_kv_cache_def.cpp`) declares FORMAT_ND only for `key_cache` /
    /// `value_cache` and every shipped binary (`op_host/config/*/scatter_pa_kv_cache_binary.json`)
    /// is ND; the tiling reads only the origin (view) shape (`scatter_pa_kv_cache_tiling.cpp`,
    /// `GetOriginShape`), and the NZ kernel (`scatter_pa_kv_cache_normal_nz_fully_load.h`)
    /// addresses the buffer as the contiguous `[nb, N·D/last, bs, last]` array. torch_npu's
    /// op-plugin passes format 29 only because its caller format-cast the cache
    /// (`ConvertType` in `op_plugin/utils/op_api_common.cpp` forwards `npu_format_` and
    /// `storage_sizes_`; `test/test_custom_ops/test_scatter_pa_kv_cache.py`, skipped); that
    /// storage shape (`[nb, c, ⌈last/16⌉, ⌈bs/16⌉, 16, 16]`) pads `block_size` to 16 and so
    /// would not even describe our buffer for other block sizes. Hardware confirms which
    /// formats the binary selection accepts (the selftest's FRACTAL_NZ probe).
    pub fn pa_nz_cache(dims: &[usize], dtype: DataType) -> Result<Self> {
        if dims.len() != 4 || dims[3] * dtype.size() != 32 {
            return Err(AclError::invalid(
                "keyCache",
                format!(
                    "a PA_NZ cache is [num_blocks, N*D/last, block_size, last] with last*sizeof = 32 bytes, got {dims:?} of {dtype:?}"
                ),
            ));
        }
        Self::contiguous(dims, dtype)
    }

    /// Number of view elements.
    pub fn numel(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }

    /// Number of storage elements.
    pub fn storage_numel(&self) -> usize {
        self.storage_dims.iter().map(|&d| d as usize).product()
    }

    /// An upload's bytes must be exactly the storage of this description.
    pub(crate) fn check_upload(&self, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.storage_bytes() {
            return Err(AclError::invalid(
                "upload",
                format!(
                    "{} bytes for a storage of {:?} {:?} ({} bytes)",
                    bytes.len(),
                    self.storage_dims,
                    self.dtype,
                    self.storage_bytes()
                ),
            ));
        }
        Ok(())
    }

    /// Bytes the data pointer must be valid for: the storage.
    pub fn storage_bytes(&self) -> usize {
        self.storage_numel() * self.dtype.size()
    }

    /// One past the largest element index the view addresses (0 for an empty view).
    pub fn view_extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        let last: i64 = self
            .dims
            .iter()
            .zip(&self.strides)
            .map(|(&d, &s)| (d - 1) * s)
            .sum();
        (self.offset + last + 1) as usize
    }

    /// Checks the descriptor is self-consistent: ranks agree, nothing negative, the view lies
    /// inside the storage, sizes do not overflow.
    pub fn check(&self) -> Result<()> {
        let bad = |rule: String| Err(AclError::invalid("tensor descriptor", rule));
        if self.dims.len() > MAX_RANK || self.storage_dims.len() > MAX_RANK {
            return bad(format!("rank must be <= {MAX_RANK}, got {:?}", self.dims));
        }
        if self.dims.len() != self.strides.len() {
            return bad(format!(
                "{} dims but {} strides",
                self.dims.len(),
                self.strides.len()
            ));
        }
        if self
            .dims
            .iter()
            .chain(&self.strides)
            .chain(&self.storage_dims)
            .any(|&x| x < 0)
            || self.offset < 0
        {
            return bad(format!(
                "negative dim, stride or offset: dims {:?} strides {:?} offset {}",
                self.dims, self.strides, self.offset
            ));
        }
        let fits = |v: &[i64]| {
            v.iter()
                .try_fold(self.dtype.size() as i64, |acc, &d| {
                    acc.checked_mul(d.max(1))
                })
                .is_some()
        };
        let span = self
            .dims
            .iter()
            .zip(&self.strides)
            .try_fold(self.offset, |acc, (&d, &s)| {
                acc.checked_add((d.max(1) - 1).checked_mul(s)?)
            });
        if !fits(&self.dims) || !fits(&self.storage_dims) || span.is_none() {
            return bad("size overflows".into());
        }
        if self.view_extent() > self.storage_numel() {
            return bad(format!(
                "view (dims {:?}, strides {:?}, offset {}) reaches element {} but the storage {:?} has {}",
                self.dims,
                self.strides,
                self.offset,
                self.view_extent(),
                self.storage_dims,
                self.storage_numel()
            ));
        }
        Ok(())
    }
}

/// Device memory from `aclrtMalloc`, freed on drop — at once, or, for a buffer allocated
/// through a runtime ([`Self::alloc_ordered`], [`super::Runtime::alloc`]), **stream-ordered**:
/// after the stream's next synchronisation, since a queued task may still use it. Such a
/// buffer's [`Self::write`] is a queued copy and its [`Self::read`] waits for the stream first.
///
/// A buffer may also be a **view** of a byte range of another one ([`Self::sub_range`], a
/// caching pool's block of a segment): it reads and writes only its range and frees nothing.
pub struct DeviceBuffer {
    api: &'static AclApi,
    ptr: *mut c_void,
    len: usize,
    order: Option<Arc<StreamOrder>>,
    /// Whether dropping the buffer frees `ptr` (false for a [`Self::sub_range`] view).
    owned: bool,
}

impl DeviceBuffer {
    /// Allocates `len` bytes (at least 1, so every buffer has a distinct non-null address),
    /// with no stream: written and read synchronously, freed at once on drop.
    pub fn alloc(api: &'static AclApi, len: usize) -> Result<Self> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; the size is a plain integer.
        let st = unsafe { (api.malloc)(&mut ptr, len.max(1), ACL_MEM_MALLOC_HUGE_FIRST) };
        check(api, st, names::malloc)?;
        if ptr.is_null() {
            return Err(status_error(api, ACL_ERROR_BAD_ALLOC, names::malloc));
        }
        Ok(Self {
            api,
            ptr,
            len,
            order: None,
            owned: true,
        })
    }

    /// A view of `len` bytes of `segment` from byte `offset`: same runtime and stream order,
    /// its own address and length (what [`Self::as_ptr`], [`Self::len`], reads, writes and
    /// descriptors see), and a drop that frees nothing. An error if the range is not inside
    /// `segment`.
    ///
    /// # Safety
    /// The caller keeps `segment` alive (not dropped, so not freed) for as long as the view or
    /// any work queued over it may use the memory: with a stream-ordered segment, dropping it
    /// after the view is enough, since its free waits for the stream.
    pub unsafe fn sub_range(segment: &DeviceBuffer, offset: usize, len: usize) -> Result<Self> {
        if offset.checked_add(len).is_none_or(|end| end > segment.len) {
            return Err(AclError::invalid(
                "sub_range",
                format!(
                    "{len} bytes at offset {offset} of a {}-byte buffer",
                    segment.len
                ),
            ));
        }
        Ok(Self {
            api: segment.api,
            // Plain address arithmetic inside the segment (checked above); never dereferenced
            // on the host.
            ptr: segment.ptr.cast::<u8>().wrapping_add(offset).cast(),
            len,
            order: segment.order.clone(),
            owned: false,
        })
    }

    /// Whether this buffer is a [`Self::sub_range`] view (its drop frees nothing).
    pub fn is_view(&self) -> bool {
        !self.owned
    }

    /// Allocates `len` bytes used in `order`'s stream order (see the type's docs).
    pub fn alloc_ordered(order: &Arc<StreamOrder>, len: usize) -> Result<Self> {
        let mut b = Self::alloc(order.api(), len)?;
        b.order = Some(order.clone());
        Ok(b)
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address (for aclnn's workspace argument).
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Copies `src` to the start of the buffer: queued on the stream for a stream-ordered
    /// buffer (the host does not wait), else a synchronous copy.
    pub fn write(&mut self, src: &[u8]) -> Result<()> {
        if src.len() > self.len {
            return Err(AclError::invalid(
                "upload",
                format!("{} bytes into a {}-byte buffer", src.len(), self.len),
            ));
        }
        if src.is_empty() {
            return Ok(());
        }
        if let Some(order) = &self.order {
            return order.upload(self.ptr, self.len, src);
        }
        // SAFETY: `self.ptr` is a live device allocation of `self.len >= src.len()` bytes and
        // `src` is a host slice of `src.len()` bytes.
        let st = unsafe {
            (self.api.memcpy)(
                self.ptr,
                self.len,
                src.as_ptr().cast(),
                src.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        };
        check(self.api, st, &format!("{}(host to device)", names::memcpy))
    }

    /// Copies `src` to the start of a **stream-ordered** buffer through `&self`: the copy is
    /// queued after every use of the buffer queued before it and runs before every use queued
    /// after it, so a buffer that queued work (a captured graph's tasks) reads is refilled
    /// between two uses — how a graph's inputs are written before each replay. An error for a
    /// buffer with no stream order (whose synchronous write could race nothing, but is not
    /// what this is for) and for `src` longer than the buffer.
    pub fn overwrite(&self, src: &[u8]) -> Result<()> {
        if src.len() > self.len {
            return Err(AclError::invalid(
                "upload",
                format!("{} bytes into a {}-byte buffer", src.len(), self.len),
            ));
        }
        match &self.order {
            Some(order) => order.upload(self.ptr, self.len, src),
            None => Err(AclError::invalid(
                "overwrite",
                "the buffer has no stream order (allocate it with alloc_ordered)",
            )),
        }
    }

    /// Zeroes the whole buffer: a queued memset for a stream-ordered buffer, else a
    /// synchronous copy of zeros.
    pub fn fill_zero(&self) -> Result<()> {
        match &self.order {
            Some(order) => order.memset(self.ptr, self.len, 0),
            None => {
                let zeros = vec![0u8; self.len];
                // SAFETY: as in `write`: a live allocation of `self.len` bytes.
                let st = unsafe {
                    (self.api.memcpy)(
                        self.ptr,
                        self.len,
                        zeros.as_ptr().cast(),
                        self.len,
                        ACL_MEMCPY_HOST_TO_DEVICE,
                    )
                };
                check(self.api, st, &format!("{}(host to device)", names::memcpy))
            }
        }
    }

    /// Copies the first `dst.len()` bytes of the buffer to `dst`, after waiting for the stream
    /// when the buffer is stream-ordered (its last writer may still be queued).
    pub fn read(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() > self.len {
            return Err(AclError::invalid(
                "download",
                format!("{} bytes from a {}-byte buffer", dst.len(), self.len),
            ));
        }
        if dst.is_empty() {
            return Ok(());
        }
        if let Some(order) = &self.order {
            if !super::test_hooks::read_wait_dropped() {
                order.synchronize()?;
            }
            order.note_d2h(dst.len());
        }
        // SAFETY: `dst` is a host slice of `dst.len()` bytes; `self.ptr` is a live device
        // allocation of at least that many bytes.
        let st = unsafe {
            (self.api.memcpy)(
                dst.as_mut_ptr().cast(),
                dst.len(),
                self.ptr,
                dst.len(),
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        check(self.api, st, &format!("{}(device to host)", names::memcpy))
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if !self.owned {
            // A view: its segment's owner frees the memory.
            return;
        }
        if let Some(order) = self.order.take() {
            // A queued task may still use the buffer: freed after the next synchronisation.
            order.defer_free(self.ptr);
            return;
        }
        // SAFETY: `ptr` came from `aclrtMalloc` and is freed exactly once, here. A failure
        // cannot be reported from drop; the memory is then leaked, which is safe.
        let _ = unsafe { (self.api.free)(self.ptr) };
    }
}

/// Device memory with a tensor descriptor: an uploaded input or an allocated output.
pub struct DeviceTensor {
    /// The memory.
    pub buf: DeviceBuffer,
    /// Its descriptor.
    pub desc: TensorDesc,
}

impl DeviceTensor {
    /// Allocates storage for `desc` (zero-filled on CANN only if the caller writes it).
    pub fn alloc(api: &'static AclApi, desc: TensorDesc) -> Result<Self> {
        desc.check()?;
        Ok(Self {
            buf: DeviceBuffer::alloc(api, desc.storage_bytes())?,
            desc,
        })
    }

    /// Uploads `bytes`, which must be exactly the storage of `desc`.
    pub fn upload(api: &'static AclApi, desc: TensorDesc, bytes: &[u8]) -> Result<Self> {
        desc.check_upload(bytes)?;
        let mut t = Self::alloc(api, desc)?;
        t.buf.write(bytes)?;
        Ok(t)
    }

    /// Reads the whole storage back.
    pub fn download(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.desc.storage_bytes()];
        self.buf.read(&mut out)?;
        Ok(out)
    }

    /// An `aclTensor` over this memory.
    pub fn handle(&self) -> Result<Tensor<'_>> {
        Tensor::new(&self.buf, &self.desc)
    }
}

impl AsRef<DeviceTensor> for DeviceTensor {
    fn as_ref(&self) -> &DeviceTensor {
        self
    }
}

/// An `aclTensor`, borrowing the device memory it describes (so it cannot outlive it);
/// destroyed on drop.
pub struct Tensor<'b> {
    api: &'static AclApi,
    ptr: NonNull<AclTensor>,
    _mem: PhantomData<&'b DeviceBuffer>,
}

impl<'b> Tensor<'b> {
    /// Creates the descriptor over `buf`. This is the only place `aclCreateTensor` is called:
    /// the descriptor is checked and its storage must fit in `buf`.
    pub fn new(buf: &'b DeviceBuffer, desc: &TensorDesc) -> Result<Self> {
        desc.check()?;
        if desc.storage_bytes() > buf.len() {
            return Err(AclError::invalid(
                "tensor descriptor",
                format!(
                    "storage {:?} of {:?} needs {} bytes, the buffer has {}",
                    desc.storage_dims,
                    desc.dtype,
                    desc.storage_bytes(),
                    buf.len()
                ),
            ));
        }
        let api = buf.api;
        // SAFETY: every array pointer is valid for the length passed with it (dims and strides
        // have equal lengths, checked above); the data pointer is a live device allocation that
        // covers the storage (checked above) and outlives the handle (lifetime `'b`).
        let ptr = unsafe {
            (api.create_tensor)(
                desc.dims.as_ptr(),
                desc.dims.len() as u64,
                desc.dtype.raw(),
                desc.strides.as_ptr(),
                desc.offset,
                desc.format.raw(),
                desc.storage_dims.as_ptr(),
                desc.storage_dims.len() as u64,
                buf.ptr,
            )
        };
        let ptr = NonNull::new(ptr).ok_or_else(|| null_error(api, names::create_tensor))?;
        Ok(Self {
            api,
            ptr,
            _mem: PhantomData,
        })
    }

    /// The raw handle, for an aclnn argument.
    pub fn as_ptr(&self) -> *const AclTensor {
        self.ptr.as_ptr()
    }
}

impl Drop for Tensor<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from `aclCreateTensor` and is destroyed exactly once (a
        // tensor moved into a `TensorList` is forgotten instead, see there).
        let _ = unsafe { (self.api.destroy_tensor)(self.ptr.as_ptr()) };
    }
}

/// An `aclIntArray` (nnopbase copies the values), destroyed on drop.
pub struct IntArray {
    api: &'static AclApi,
    ptr: NonNull<AclIntArray>,
}

impl IntArray {
    /// Creates an int array holding a copy of `values`.
    pub fn new(api: &'static AclApi, values: &[i64]) -> Result<Self> {
        // SAFETY: `values` is valid for `values.len()` elements; nnopbase copies them.
        let ptr = unsafe { (api.create_int_array)(values.as_ptr(), values.len() as u64) };
        let ptr = NonNull::new(ptr).ok_or_else(|| null_error(api, names::create_int_array))?;
        Ok(Self { api, ptr })
    }

    /// The raw handle.
    pub fn as_ptr(&self) -> *const AclIntArray {
        self.ptr.as_ptr()
    }
}

impl Drop for IntArray {
    fn drop(&mut self) {
        // SAFETY: created by `aclCreateIntArray`, destroyed once.
        let _ = unsafe { (self.api.destroy_int_array)(self.ptr.as_ptr()) };
    }
}

/// An `aclTensorList`. It **owns** its tensors: `aclDestroyTensorList` destroys them too, so
/// the [`Tensor`] handles moved in are forgotten rather than dropped.
pub struct TensorList<'b> {
    api: &'static AclApi,
    ptr: NonNull<AclTensorList>,
    _mem: PhantomData<&'b DeviceBuffer>,
}

impl<'b> TensorList<'b> {
    /// Creates a list taking ownership of `tensors`.
    pub fn new(api: &'static AclApi, tensors: Vec<Tensor<'b>>) -> Result<Self> {
        let raw: Vec<*const AclTensor> = tensors.iter().map(Tensor::as_ptr).collect();
        // SAFETY: `raw` is valid for `raw.len()` live tensor handles.
        let ptr = unsafe { (api.create_tensor_list)(raw.as_ptr(), raw.len() as u64) };
        // On failure the tensors are still ours and drop normally.
        let ptr = NonNull::new(ptr).ok_or_else(|| null_error(api, names::create_tensor_list))?;
        // The list now owns them (destroyed with it).
        tensors.into_iter().for_each(std::mem::forget);
        Ok(Self {
            api,
            ptr,
            _mem: PhantomData,
        })
    }

    /// The raw handle.
    pub fn as_ptr(&self) -> *const AclTensorList {
        self.ptr.as_ptr()
    }
}

impl Drop for TensorList<'_> {
    fn drop(&mut self) {
        // SAFETY: created by `aclCreateTensorList`, destroyed once, with its tensors.
        let _ = unsafe { (self.api.destroy_tensor_list)(self.ptr.as_ptr()) };
    }
}

/// An `aclScalar` (nnopbase copies the value), destroyed on drop.
pub struct Scalar {
    api: &'static AclApi,
    ptr: NonNull<AclScalar>,
}

impl Scalar {
    /// A FLOAT scalar.
    pub fn f32(api: &'static AclApi, value: f32) -> Result<Self> {
        let mut v = value;
        // SAFETY: `v` is one FLOAT element, valid for the call; nnopbase copies it.
        let ptr =
            unsafe { (api.create_scalar)((&mut v as *mut f32).cast(), DataType::Float.raw()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| null_error(api, names::create_scalar))?;
        Ok(Self { api, ptr })
    }

    /// A DOUBLE scalar.
    pub fn f64(api: &'static AclApi, value: f64) -> Result<Self> {
        let mut v = value;
        // SAFETY: `v` is one DOUBLE element, valid for the call; nnopbase copies it.
        let ptr =
            unsafe { (api.create_scalar)((&mut v as *mut f64).cast(), DataType::Double.raw()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| null_error(api, names::create_scalar))?;
        Ok(Self { api, ptr })
    }

    /// An INT64 scalar.
    pub fn i64(api: &'static AclApi, value: i64) -> Result<Self> {
        let mut v = value;
        // SAFETY: `v` is one INT64 element, valid for the call; nnopbase copies it.
        let ptr =
            unsafe { (api.create_scalar)((&mut v as *mut i64).cast(), DataType::Int64.raw()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| null_error(api, names::create_scalar))?;
        Ok(Self { api, ptr })
    }

    /// The raw handle.
    pub fn as_ptr(&self) -> *const AclScalar {
        self.ptr.as_ptr()
    }
}

impl Drop for Scalar {
    fn drop(&mut self) {
        // SAFETY: created by `aclCreateScalar`, destroyed once.
        let _ = unsafe { (self.api.destroy_scalar)(self.ptr.as_ptr()) };
    }
}

/// An `aclrtStream`, destroyed on drop.
pub struct Stream {
    api: &'static AclApi,
    ptr: AclrtStream,
}

impl Stream {
    /// Creates a stream on the current device.
    pub fn new(api: &'static AclApi) -> Result<Self> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer.
        let st = unsafe { (api.create_stream)(&mut ptr) };
        check(api, st, names::create_stream)?;
        Ok(Self { api, ptr })
    }

    /// The raw handle.
    pub fn as_ptr(&self) -> AclrtStream {
        self.ptr
    }

    /// Waits for everything queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream is live.
        let st = unsafe { (self.api.synchronize_stream)(self.ptr) };
        check(self.api, st, names::synchronize_stream)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by `aclrtCreateStream`, destroyed once.
        let _ = unsafe { (self.api.destroy_stream)(self.ptr) };
    }
}

/// `aclGetRecentErrMsg()` as an owned string (empty when there is none).
pub fn recent_error(api: &AclApi) -> String {
    // SAFETY: takes no arguments; returns null or a NUL-terminated string owned by ACL that
    // stays valid until the next ACL call on this thread, and it is copied at once.
    unsafe {
        let p = (api.get_recent_err_msg)();
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// The error for a non-zero status of `call`, with ACL's recent message.
pub fn status_error(api: &AclApi, status: AclStatus, call: &str) -> AclError {
    AclError::Status {
        call: call.to_string(),
        status,
        message: recent_error(api),
    }
}

/// `Ok` for `ACL_SUCCESS`, else the status error of `call`.
pub fn check(api: &AclApi, status: AclStatus, call: &str) -> Result<()> {
    if status == ACL_SUCCESS {
        Ok(())
    } else {
        Err(status_error(api, status, call))
    }
}

fn null_error(api: &AclApi, call: &str) -> AclError {
    AclError::Status {
        call: call.to_string(),
        status: ACLNN_ERR_PARAM_INVALID,
        message: format!("returned null: {}", recent_error(api)),
    }
}
