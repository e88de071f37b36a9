//! A device context: the function table, the device, one stream with its stream-ordered
//! lifetimes ([`StreamOrder`]) and a caching workspace allocator. Works the same over CANN ([`Runtime::npu`]) and any other table
//! ([`Runtime::with_api`]; the host simulation, crate `burn-ascend-acl-sim`, builds its
//! runtime so).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::{AclError, Result};
use super::ffi::*;
use super::tensor::{check, DeviceBuffer, DeviceTensor, Stream, TensorDesc};

/// Device index for `--device npu`: `$ASCEND_DEVICE_ID`, else 0.
pub fn default_device_id() -> Result<i32> {
    match std::env::var("ASCEND_DEVICE_ID") {
        Err(_) => Ok(0),
        Ok(s) => s
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|&d| d >= 0)
            .ok_or_else(|| {
                AclError::invalid(
                    "ASCEND_DEVICE_ID",
                    format!("must be a non-negative device index, got {s:?}"),
                )
            }),
    }
}

/// Number of devices `api` sees (`aclrtGetDeviceCount`), initialising ACL first.
pub fn device_count(api: &'static AclApi) -> Result<u32> {
    init_once(api)?;
    let mut count = 0u32;
    // SAFETY: `count` is a valid out-pointer.
    let st = unsafe { (api.get_device_count)(&mut count) };
    check(api, st, names::get_device_count)?;
    Ok(count)
}

/// `aclInit` must run once per process per table; this remembers which tables were initialised.
static INITIALISED: Mutex<Vec<ApiKind>> = Mutex::new(Vec::new());

fn init_once(api: &'static AclApi) -> Result<()> {
    let mut done = INITIALISED.lock().unwrap_or_else(|e| e.into_inner());
    if done.contains(&api.kind) {
        return Ok(());
    }
    // SAFETY: a null config path is documented as "no configuration file".
    let st = unsafe { (api.acl_init)(std::ptr::null()) };
    if st != ACL_SUCCESS && st != ACL_ERROR_REPEAT_INITIALIZE {
        check(api, st, names::acl_init)?;
    }
    done.push(api.kind);
    // aclFinalize is never called: it is process-wide and other runtimes may still be alive;
    // the driver releases everything at process exit.
    Ok(())
}

/// What a [`Runtime`] did since it was opened ([`Runtime::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeCounters {
    /// aclnn launches (second stages) and asynchronous copies / memsets queued on the stream.
    pub launches: u64,
    /// Stream synchronisations (every wait of the host for the device).
    pub synchronizations: u64,
    /// Bytes copied host to device.
    pub h2d_bytes: u64,
    /// Bytes copied device to host.
    pub d2h_bytes: u64,
    /// Of `launches`, the host-to-device copies (uploads of inputs): a replayed graph's
    /// per-step cost is `launches - uploads` kernel launches plus these copies.
    pub uploads: u64,
}

thread_local! {
    /// Launches and uploads queued by the calling thread, through every runtime.
    static THREAD_COUNTS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

fn count_on_thread(launches: u64, uploads: u64) {
    let _ = THREAD_COUNTS.try_with(|c| {
        let (l, u) = c.get();
        c.set((l + launches, u + uploads));
    });
}

/// `(launches, uploads)` queued by the calling thread so far, through every runtime: what one
/// host loop (a decode step) cost, whatever other threads queue on the same device meanwhile
/// ([`Runtime::counters`] counts all threads).
pub fn thread_launches() -> (u64, u64) {
    THREAD_COUNTS.try_with(|c| c.get()).unwrap_or_default()
}

#[derive(Default)]
struct Deferred {
    /// Device allocations to free once the stream has finished with them.
    device: Vec<usize>,
    /// Page-locked staging buffers (host side of queued copies) to free likewise.
    host: Vec<usize>,
    host_bytes: usize,
}

/// Staging held for queued copies beyond which an upload first synchronises (bounds the
/// page-locked memory a long burst of uploads, e.g. a checkpoint load, can pin).
const MAX_PENDING_STAGING: usize = 256 << 20;

/// A stream and everything whose lifetime is **stream-ordered**: device memory dropped while
/// a queued task may still use it is freed only after the stream's next synchronisation, and
/// so is the page-locked staging of every queued upload. Shared (`Arc`) by the [`Runtime`] and
/// every [`DeviceBuffer`] allocated through it, so a buffer outliving its runtime still frees
/// safely.
pub struct StreamOrder {
    api: &'static AclApi,
    stream: Stream,
    deferred: Mutex<Deferred>,
    launches: AtomicU64,
    syncs: AtomicU64,
    h2d: AtomicU64,
    d2h: AtomicU64,
    uploads: AtomicU64,
    /// A graph capture is active on the stream (`crate::acl::graph`): tasks are recorded, not
    /// run, and synchronisations, uploads and workspace growth are refused.
    capturing: AtomicBool,
    /// A task-group update is active: the calls made are recorded into the group.
    updating: AtomicBool,
}

// SAFETY: `Stream` is `!Send`/`!Sync` only because it holds the raw `aclrtStream`. A stream
// belongs to its device's context, which every thread that calls `aclrtSetDevice` on that
// device shares ([`Runtime::bind_current_thread`] is called before any use from a new thread),
// and ACL's stream calls (launch, copy, synchronise, destroy) may be made from any such thread.
// The deferred lists are behind a mutex; the counters are atomics.
unsafe impl Send for StreamOrder {}
// SAFETY: see `Send` above.
unsafe impl Sync for StreamOrder {}

impl StreamOrder {
    fn lock(&self) -> MutexGuard<'_, Deferred> {
        self.deferred.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The function table.
    pub fn api(&self) -> &'static AclApi {
        self.api
    }

    /// The stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Waits for the stream, then frees what was deferred **before** the wait began (what is
    /// deferred meanwhile by another thread may belong to a task queued after it).
    pub fn synchronize(&self) -> Result<()> {
        if self.recording() {
            // Nothing is freed either: the deferred memory may be what the recorded tasks use.
            return Err(super::graph::capture_refusal(
                names::synchronize_stream,
                "the host cannot wait for a stream whose tasks are recorded, not run (read \
                 results after the capture, after replaying the graph)",
            ));
        }
        let snapshot = std::mem::take(&mut *self.lock());
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let result = super::profile::timed(names::synchronize_stream, || self.stream.synchronize());
        // The stream's tasks are over either way (a failed task ends the wait too).
        for p in snapshot.device {
            // SAFETY: from `aclrtMalloc`, deferred exactly once by `DeviceBuffer::drop`; the
            // stream has finished every task queued before the deferral.
            let _ = unsafe { (self.api.free)(p as *mut c_void) };
        }
        for p in snapshot.host {
            // SAFETY: from `aclrtMallocHost` in `upload`, deferred once; its copy is done.
            let _ = unsafe { (self.api.free_host)(p as *mut c_void) };
        }
        result
    }

    pub(crate) fn defer_free(&self, ptr: *mut c_void) {
        self.lock().device.push(ptr as usize);
    }

    /// Counts a launch queued for running (a task recorded into a graph is not one: the
    /// graph's replay is).
    pub(crate) fn note_launch(&self) {
        if !self.recording() {
            self.launches.fetch_add(1, Ordering::Relaxed);
            count_on_thread(1, 0);
        }
    }

    /// Whether a graph capture is active on the stream.
    pub fn capturing(&self) -> bool {
        self.capturing.load(Ordering::SeqCst)
    }

    /// Whether the stream's calls are recorded (a capture or a task-group update).
    pub fn recording(&self) -> bool {
        self.capturing() || self.updating.load(Ordering::SeqCst)
    }

    pub(crate) fn set_capturing(&self, on: bool) {
        self.capturing.store(on, Ordering::SeqCst);
    }

    pub(crate) fn set_updating(&self, on: bool) {
        self.updating.store(on, Ordering::SeqCst);
    }

    pub(crate) fn note_d2h(&self, bytes: usize) {
        self.d2h.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Queues a copy of `src` to the device address `dst` (capacity `dst_len`): `src` goes to
    /// a page-locked staging buffer, freed after the next synchronisation; the host does not
    /// wait.
    pub(crate) fn upload(&self, dst: *mut c_void, dst_len: usize, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        if self.recording() {
            return Err(super::graph::capture_refusal(
                names::memcpy_async,
                "an upload from host memory would be replayed from a staging buffer freed long \
                 before (write a graph's inputs into its device buffers before replaying it)",
            ));
        }
        super::profile::timed("aclrtMemcpyAsync(host to device)", || {
            self.upload_untimed(dst, dst_len, src)
        })
    }

    fn upload_untimed(&self, dst: *mut c_void, dst_len: usize, src: &[u8]) -> Result<()> {
        if self.lock().host_bytes + src.len() > MAX_PENDING_STAGING {
            self.synchronize()?;
        }
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: `host` is a valid out-pointer; the size is a plain integer.
        let st = unsafe { (self.api.malloc_host)(&mut host, src.len()) };
        check(self.api, st, names::malloc_host)?;
        // SAFETY: `host` is a fresh page-locked allocation of `src.len()` bytes, not aliased.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), host.cast::<u8>(), src.len()) };
        // SAFETY: `dst` is a live device allocation of `dst_len >= src.len()` bytes (the
        // caller's contract), `host` holds `src.len()` bytes and stays allocated until the
        // copy is done (deferred below), the stream is live.
        let st = unsafe {
            (self.api.memcpy_async)(
                dst,
                dst_len,
                host,
                src.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
                self.stream.as_ptr(),
            )
        };
        {
            let mut d = self.lock();
            d.host.push(host as usize);
            d.host_bytes += src.len();
        }
        check(self.api, st, names::memcpy_async)?;
        self.launches.fetch_add(1, Ordering::Relaxed);
        self.uploads.fetch_add(1, Ordering::Relaxed);
        count_on_thread(1, 1);
        self.h2d.fetch_add(src.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Queues setting `len` bytes at `dst` to `value`.
    pub(crate) fn memset(&self, dst: *mut c_void, len: usize, value: u8) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: `dst` is a live device allocation of at least `len` bytes (the caller's
        // contract); the stream is live.
        let st = unsafe {
            (self.api.memset_async)(dst, len, i32::from(value), len, self.stream.as_ptr())
        };
        check(self.api, st, names::memset_async)?;
        self.note_launch();
        Ok(())
    }

    fn counters(&self) -> RuntimeCounters {
        RuntimeCounters {
            launches: self.launches.load(Ordering::Relaxed),
            synchronizations: self.syncs.load(Ordering::Relaxed),
            h2d_bytes: self.h2d.load(Ordering::Relaxed),
            d2h_bytes: self.d2h.load(Ordering::Relaxed),
            uploads: self.uploads.load(Ordering::Relaxed),
        }
    }
}

/// One device, one stream, a workspace pool; **asynchronous**: launches and uploads are queued
/// on the stream and return; the host waits only in [`Self::synchronize`] and in reads of
/// device memory ([`DeviceBuffer::read`] synchronises first).
///
/// `Send + Sync`: one runtime per device may serve every thread of the process (each binds the
/// device first, [`Self::bind_current_thread`]); launches are serialised by the workspace lock,
/// so their stream order is the order the host issued them in.
pub struct Runtime {
    api: &'static AclApi,
    device: i32,
    /// The cached workspace, stream-ordered (a replaced one is freed after the next
    /// synchronisation); its lock is held across each two-stage call.
    workspace: Mutex<Option<DeviceBuffer>>,
    /// Constant inputs uploaded once per runtime ([`Self::constant`]).
    constants: Mutex<HashMap<String, Arc<DeviceTensor>>>,
    order: Arc<StreamOrder>,
}

// SAFETY: the `!Send` parts are the workspace `DeviceBuffer` (behind a mutex, used only while
// launching), the constants (device tensors behind a mutex, only ever launch inputs: read by
// the device, never written, freed stream-ordered with the runtime) and the stream order (see its impls); both belong to the device's context, which
// every thread binds before use (`bind_current_thread`). The table is plain function pointers.
unsafe impl Send for Runtime {}
// SAFETY: see `Send` above; every shared mutable part is behind a mutex or atomic.
unsafe impl Sync for Runtime {}

impl Runtime {
    /// Opens CANN (see [`super::loader`]), initialises ACL and binds `device` to this thread.
    pub fn npu(device: i32) -> Result<Self> {
        let api = super::loader::cann()?;
        Self::with_api(api, device)
    }

    /// A runtime over any function table.
    pub fn with_api(api: &'static AclApi, device: i32) -> Result<Self> {
        init_once(api)?;
        let mut count = 0u32;
        // SAFETY: `count` is a valid out-pointer.
        let st = unsafe { (api.get_device_count)(&mut count) };
        check(api, st, names::get_device_count)?;
        if device < 0 || device as u32 >= count {
            return Err(AclError::invalid(
                "device",
                format!("device {device} does not exist ({count} visible)"),
            ));
        }
        // SAFETY: plain integer argument, checked against the device count.
        let st = unsafe { (api.set_device)(device) };
        check(api, st, names::set_device)?;
        let stream = Stream::new(api)?;
        Ok(Self {
            api,
            device,
            workspace: Mutex::new(None),
            constants: Mutex::new(HashMap::new()),
            order: Arc::new(StreamOrder {
                api,
                stream,
                deferred: Mutex::new(Deferred::default()),
                launches: AtomicU64::new(0),
                syncs: AtomicU64::new(0),
                h2d: AtomicU64::new(0),
                d2h: AtomicU64::new(0),
                uploads: AtomicU64::new(0),
                capturing: AtomicBool::new(false),
                updating: AtomicBool::new(false),
            }),
        })
    }

    /// Binds this runtime's device to the calling thread (`aclrtSetDevice`): every thread
    /// other than the one that opened the runtime calls it once before using the runtime.
    pub fn bind_current_thread(&self) -> Result<()> {
        // SAFETY: plain integer argument, a device this runtime was opened on.
        let st = unsafe { (self.api.set_device)(self.device) };
        check(self.api, st, names::set_device)
    }

    /// The function table.
    pub fn api(&self) -> &'static AclApi {
        self.api
    }

    /// Whether this is CANN or the simulation.
    pub fn kind(&self) -> ApiKind {
        self.api.kind
    }

    /// The device index.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The stream ops are launched on.
    pub fn stream(&self) -> &Stream {
        self.order.stream()
    }

    /// The stream and its stream-ordered lifetimes.
    pub fn order(&self) -> &Arc<StreamOrder> {
        &self.order
    }

    /// Launches, synchronisations and copied bytes so far.
    pub fn counters(&self) -> RuntimeCounters {
        self.order.counters()
    }

    /// Allocates `len` bytes whose free is stream-ordered (see [`StreamOrder`]).
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer> {
        DeviceBuffer::alloc_ordered(&self.order, len)
    }

    /// Uploads a host tensor: a stream-ordered buffer, filled by a queued copy.
    pub fn upload(&self, desc: TensorDesc, bytes: &[u8]) -> Result<DeviceTensor> {
        desc.check_upload(bytes)?;
        desc.check()?;
        let mut buf = self.alloc(desc.storage_bytes())?;
        buf.write(bytes)?;
        Ok(DeviceTensor { buf, desc })
    }

    /// A constant input (e.g. CANN's 2048×2048 compressed attention mask) uploaded on first use
    /// and kept on the device for the runtime's life, under `key`: `make` gives its descriptor
    /// and bytes. Saves re-uploading megabytes per call.
    pub fn constant(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<(TensorDesc, Vec<u8>)>,
    ) -> Result<Arc<DeviceTensor>> {
        let mut c = self.constants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = c.get(key) {
            return Ok(t.clone());
        }
        let (desc, bytes) = make()?;
        // Shared across threads as the runtime is (see its `Send` / `Sync`): only read.
        #[allow(clippy::arc_with_non_send_sync)]
        let t = Arc::new(self.upload(desc, &bytes)?);
        c.insert(key.to_string(), t.clone());
        Ok(t)
    }

    /// Allocates an output tensor, zero-filled by a queued memset (so a view that the op
    /// leaves untouched reads back deterministically).
    pub fn zeros(&self, desc: TensorDesc) -> Result<DeviceTensor> {
        desc.check()?;
        let buf = self.alloc(desc.storage_bytes())?;
        buf.fill_zero()?;
        Ok(DeviceTensor { buf, desc })
    }

    /// Runs `launch` with a workspace of at least `size` bytes (null for 0, as aclnn expects):
    /// the cached one when big enough, else a new one — the old one is stream-ordered, freed
    /// after the next synchronisation, since a queued launch may still use it. The lock held
    /// meanwhile serialises launches on the stream.
    pub fn with_workspace<R>(
        &self,
        size: u64,
        launch: impl FnOnce(*mut c_void) -> Result<R>,
    ) -> Result<R> {
        let mut ws = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        if size == 0 {
            return launch(std::ptr::null_mut());
        }
        let size = usize::try_from(size)
            .map_err(|_| AclError::invalid("workspace", "size overflows usize"))?;
        if ws.as_ref().is_none_or(|b| b.len() < size) {
            if self.order.recording() {
                return Err(super::graph::capture_refusal(
                    "workspace",
                    &format!(
                        "the op's GetWorkspaceSize asks for {size} bytes of workspace, more than \
                         the {} bytes reserved before the capture (its allocation would be an \
                         aclrtMalloc inside the capture; call Runtime::reserve_workspace first)",
                        ws.as_ref().map_or(0, DeviceBuffer::len)
                    ),
                ));
            }
            // Round up so slowly growing requests do not reallocate every call.
            let grown = self.alloc(size.next_power_of_two())?;
            // The old one's drop defers its free to the next synchronisation.
            ws.replace(grown);
        }
        let ptr = ws.as_ref().expect("set above").as_ptr();
        let r = launch(ptr);
        if r.is_ok() {
            self.order.note_launch();
        }
        r
    }

    /// Grows the cached workspace to at least `size` bytes now, outside any capture, so the
    /// ops a capture records find it big enough.
    pub fn reserve_workspace(&self, size: usize) -> Result<()> {
        let mut ws = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        if size > 0 && ws.as_ref().is_none_or(|b| b.len() < size) {
            ws.replace(self.alloc(size.next_power_of_two())?);
        }
        Ok(())
    }

    /// Bytes held by the workspace cache (workspaces replaced but not yet freed excluded).
    pub fn workspace_bytes(&self) -> usize {
        self.workspace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, DeviceBuffer::len)
    }

    /// The ACL interface version (`aclrtGetVersion`: major, minor, patch). Not the CANN
    /// package version, which CANN ships in its install-info files.
    pub fn acl_version(&self) -> Result<(i32, i32, i32)> {
        let (mut major, mut minor, mut patch) = (0i32, 0i32, 0i32);
        // SAFETY: three valid out-pointers, as the prototype takes.
        let st = unsafe { (self.api.get_version)(&mut major, &mut minor, &mut patch) };
        check(self.api, st, names::get_version)?;
        Ok((major, minor, patch))
    }

    /// Waits for the stream, then frees what was released while it ran (see [`StreamOrder`]).
    pub fn synchronize(&self) -> Result<()> {
        self.order.synchronize()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Queued launches may still use the workspace and deferred buffers: wait, then free
        // them (an error here cannot be reported; the memory is then freed at device reset).
        self.workspace
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let _ = self.order.synchronize();
        // SAFETY: pairs with the `aclrtSetDevice` in `with_api` (ACL reference-counts devices
        // per process, so other runtimes on the same device stay valid). The stream is
        // destroyed with the last buffer allocated through this runtime.
        let _ = unsafe { (self.api.reset_device)(self.device) };
    }
}
