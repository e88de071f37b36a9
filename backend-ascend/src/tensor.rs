//! The tensor primitive: a reference-counted device allocation, a shape, element strides, an
//! element offset and a dtype. `reshape` (of a contiguous tensor), `permute`/`swap_dims`,
//! `expand` and positive-step `slice` are views over the same allocation (no copy).

use std::fmt;
use std::sync::Arc;

use burn_ascend_cann::acl::{
    AclError, DataType, DeviceBuffer, Tensor as AclTensorHandle, TensorDesc,
};
use burn_backend::{DType, Shape, TensorData, TensorMetadata};

use crate::device::AscendDevice;
use crate::element::acl_dtype;

/// Device memory owned by tensors (shared by views): a block of the device's caching pool
/// ([`crate::memory`]), returned to it on drop.
pub(crate) struct Storage {
    buf: Option<DeviceBuffer>,
    /// Bytes requested (the block may be larger: the rounded size, or a whole free block whose
    /// rest was too small to split off).
    len: usize,
    device: AscendDevice,
}

// SAFETY: `DeviceBuffer` is `!Send`/`!Sync` only because ACL binds the device context to a
// thread (see `burn_ascend_cann::acl::tensor`). Every use of a `Storage` — allocation,
// memcpy, aclnn launches over it and the release in `Drop` — first goes through
// `device::runtime`/`try_runtime`, which binds this storage's device to the calling thread
// (`aclrtSetDevice`), so the calls act on the right context whatever the thread. The buffer is
// only written while its storage is not shared (a fresh allocation: its queued upload, or the
// aclnn op producing it, queued before the op returns; or an owner holding the only `Arc`,
// proven by `Arc::get_mut`, as the in-place KV cache scatter does; or a captured graph's
// input or cache, rewritten by a copy or a launch queued in stream order with every other use
// of it, `crate::graph`); otherwise it is read
// (memcpy device-to-host after the stream has finished, aclnn inputs), and every queued use is
// ordered on the device's one stream.
unsafe impl Send for Storage {}
// SAFETY: see `Send` above: shared access only reads.
unsafe impl Sync for Storage {}

impl Storage {
    /// Allocates `bytes` on `device` from its pool and fills it from `init` (whole buffer) if
    /// given; `op` names the allocation in an out-of-memory panic.
    pub(crate) fn new(device: &AscendDevice, bytes: usize, init: Option<&[u8]>) -> Self {
        Self::new_for("tensor allocation", device, bytes, init)
    }

    /// As [`Self::new`], naming the op that allocates.
    pub(crate) fn new_for(
        op: &str,
        device: &AscendDevice,
        bytes: usize,
        init: Option<&[u8]>,
    ) -> Self {
        let mut buf = crate::memory::allocate(device, bytes, op);
        if let Some(src) = init {
            buf.write(src)
                .unwrap_or_else(|e| panic!("Ascend upload to {device}: {e}"));
        }
        Self {
            buf: Some(buf),
            len: bytes,
            device: *device,
        }
    }

    pub(crate) fn buffer(&self) -> &DeviceBuffer {
        self.buf.as_ref().expect("present until drop")
    }

    /// Bytes requested for this storage (its descriptors' storage size).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn device(&self) -> &AscendDevice {
        &self.device
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // Every op over this storage was queued before this drop, so whatever uses the block
        // next is queued after them on the device's one stream: it goes back to the pool for
        // reuse at once (stream-ordered reuse, see `crate::memory`).
        if let Some(buf) = self.buf.take() {
            crate::memory::release(&self.device, buf);
        }
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Storage({} bytes on {})", self.len, self.device)
    }
}

/// The float, int and bool tensor primitive of [`crate::Ascend`].
#[derive(Clone, Debug)]
pub struct AscendTensor {
    pub(crate) storage: Arc<Storage>,
    pub(crate) shape: Shape,
    /// Element strides (0 for broadcast dimensions).
    pub(crate) strides: Vec<usize>,
    /// Element offset of index `[0, …, 0]`.
    pub(crate) offset: usize,
    pub(crate) dtype: DType,
}

/// Row-major strides.
pub(crate) fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(1);
    }
    s
}

impl TensorMetadata for AscendTensor {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn shape(&self) -> Shape {
        self.shape.clone()
    }
}

impl AscendTensor {
    /// The device the tensor lives on.
    pub fn device(&self) -> AscendDevice {
        *self.storage.device()
    }

    /// The device address of the buffer under this view: equal for views of one allocation
    /// (an identity check, e.g. that an op worked in place).
    pub fn storage_ptr(&self) -> usize {
        self.storage.buffer().as_ptr() as usize
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.num_elements()
    }

    /// Whether the view is row-major contiguous from its offset (size-1 dims ignored).
    pub fn is_contiguous(&self) -> bool {
        let want = contiguous_strides(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&want))
            .all(|(&d, (&s, &w))| d == 1 || s == w)
    }

    /// Uploads `data` (any non-quantized dtype) to `device`.
    /// Queues a copy of `bytes` over this (contiguous) tensor's elements in its storage,
    /// stream-ordered with every use of the storage, shared or not (`crate::graph`'s inputs).
    pub(crate) fn overwrite(&self, bytes: &[u8]) -> Result<(), AclError> {
        let start = self.offset * self.dtype.size();
        // SAFETY: the caller checked that the tensor is contiguous and `bytes` is exactly its
        // elements, so `start..start + bytes.len()` lies inside the storage's buffer, which
        // `self` keeps alive; the view frees nothing on drop, and the copy queued through it
        // is ordered on the device's one stream after every use of the storage queued before.
        let view = unsafe { DeviceBuffer::sub_range(self.storage.buffer(), start, bytes.len()) }?;
        view.overwrite(bytes)
    }

    pub fn from_data(data: TensorData, device: &AscendDevice) -> Self {
        if matches!(data.dtype, DType::QFloat(_)) {
            panic!("unsupported: quantized TensorData as a float/int/bool Ascend tensor (use the quantized tensor ops)");
        }
        let shape = data.shape.clone();
        let dtype = data.dtype;
        let bytes = data.as_bytes();
        let storage = Storage::new(device, bytes.len(), Some(bytes));
        Self {
            storage: Arc::new(storage),
            strides: contiguous_strides(&shape),
            shape,
            offset: 0,
            dtype,
        }
    }

    /// A zero-filled contiguous tensor.
    pub fn zeros(shape: Shape, dtype: DType, device: &AscendDevice) -> Self {
        // A queued memset on the device: nothing crosses from the host.
        let t = Self::alloc_for("zeros", shape, dtype, device);
        t.storage
            .buffer()
            .fill_zero()
            .unwrap_or_else(|e| panic!("Ascend zeros on {device}: {e}"));
        t
    }

    /// A new contiguous tensor over a fresh, uninitialised allocation (on the simulation as
    /// on CANN: a reused pool block keeps its last contents): an aclnn output.
    pub(crate) fn alloc(shape: Shape, dtype: DType, device: &AscendDevice) -> Self {
        Self::alloc_for("aclnn output", shape, dtype, device)
    }

    /// As [`Self::alloc`], naming the op in an out-of-memory panic.
    pub(crate) fn alloc_for(op: &str, shape: Shape, dtype: DType, device: &AscendDevice) -> Self {
        let bytes = shape.num_elements() * dtype.size();
        Self {
            storage: Arc::new(Storage::new_for(op, device, bytes, None)),
            strides: contiguous_strides(&shape),
            shape,
            offset: 0,
            dtype,
        }
    }

    /// One past the last element the view reads (0 when empty).
    fn extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// Downloads the tensor (device to host) as contiguous `TensorData`, panicking if a
    /// queued operation failed (see [`Self::try_to_data`]).
    pub fn to_data(&self) -> TensorData {
        self.try_to_data().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Downloads the tensor (device to host) as contiguous `TensorData`. The read waits for
    /// the device's stream, so a failure of any operation queued before it (a kernel fault,
    /// which an NPU reports at the next synchronisation) is this call's error.
    pub fn try_to_data(&self) -> Result<TensorData, String> {
        let esz = self.dtype.size();
        let mut raw = vec![0u8; self.extent() * esz];
        let device = self.device();
        let _rt = crate::device::try_runtime(&device)?;
        self.storage
            .buffer()
            .read(&mut raw)
            .map_err(|e| format!("Ascend download from {device}: {e}"))?;
        let bytes = if self.is_contiguous() {
            raw.drain(..self.offset * esz);
            raw.truncate(self.numel() * esz);
            raw
        } else {
            gather(&raw, &self.shape, &self.strides, self.offset, esz)
        };
        Ok(TensorData::from_bytes_vec(
            bytes,
            self.shape.clone(),
            self.dtype,
        ))
    }

    /// The aclnn descriptor of this view (element strides and offset over a 1-D storage).
    pub(crate) fn desc(&self, op: &str) -> TensorDesc {
        let dt = self.acl_dtype(op);
        let storage_elems = self.storage.len() / self.dtype.size();
        TensorDesc::strided(&self.shape, &self.strides, self.offset, storage_elems, dt)
            .unwrap_or_else(|e| panic!("{op}: {e}"))
    }

    /// An `aclTensor` over this view, described by `desc` (from [`Self::desc`]).
    pub(crate) fn handle<'a>(&'a self, desc: &TensorDesc, op: &str) -> AclTensorHandle<'a> {
        AclTensorHandle::new(self.storage.buffer(), desc).unwrap_or_else(|e| fail(op, e))
    }

    pub(crate) fn acl_dtype(&self, op: &str) -> DataType {
        acl_dtype(self.dtype).unwrap_or_else(|| {
            panic!(
                "unsupported: {op} on dtype {:?} (no aclDataType)",
                self.dtype
            )
        })
    }

    /// A view with new shape/strides/offset over the same storage.
    pub(crate) fn view(&self, shape: Shape, strides: Vec<usize>, offset: usize) -> Self {
        Self {
            storage: self.storage.clone(),
            shape,
            strides,
            offset,
            dtype: self.dtype,
        }
    }
}

/// Copies a strided view out of `raw` into row-major order.
fn gather(raw: &[u8], shape: &[usize], strides: &[usize], offset: usize, esz: usize) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n * esz);
    if n == 0 {
        return out;
    }
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let mut pos = offset;
    for _ in 0..n {
        out.extend_from_slice(&raw[pos * esz..(pos + 1) * esz]);
        for d in (0..rank).rev() {
            idx[d] += 1;
            pos += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            pos -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
    out
}

/// A failed aclnn / runtime call of attention op `op` (valid input, failing device) as the typed
/// error the attention ops return.
pub(crate) fn device_error(op: &str, e: AclError) -> burn_ascend_ops::error::AttnError {
    let (call, status, message) = match e {
        AclError::Status {
            call,
            status,
            message,
        } => (call, Some(status), message),
        other => (String::new(), None, other.to_string()),
    };
    burn_ascend_ops::error::AttnError::Device {
        op: op.to_string(),
        call,
        status,
        message,
    }
}

/// Turns a dispatch error into the panic message Burn's infallible op signatures require: the
/// op, the status and CANN's message.
pub(crate) fn fail(op: &str, e: AclError) -> ! {
    panic!("Ascend {op} failed: {e}")
}

/// The one device of a call's tensors (the first one's), or a typed error naming the op and the
/// first tensor elsewhere: the extension ops return it where Burn's own ops panic.
pub(crate) fn same_device(
    op: &str,
    ts: &[&AscendTensor],
) -> Result<AscendDevice, burn_ascend_ops::error::AttnError> {
    let d = ts[0].device();
    if let Some(o) = ts.iter().find(|t| t.device() != d) {
        return Err(burn_ascend_ops::error::AttnError::Unsupported(format!(
            "{op}: tensors on different devices ({d} and {}); move them with `to_device` first",
            o.device()
        )));
    }
    Ok(d)
}
