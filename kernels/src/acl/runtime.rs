//! A device context: the function table, the device, one stream and a caching workspace
//! allocator. Works the same over CANN ([`Runtime::npu`]) and any other table
//! ([`Runtime::with_api`]; the host simulation, crate `burn-ascend-acl-sim`, builds its
//! runtime so).

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::Mutex;

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

/// One device, one stream, a workspace pool. `!Send`: see [`super::tensor`] on threads.
pub struct Runtime {
    api: &'static AclApi,
    device: i32,
    workspace: RefCell<Option<DeviceBuffer>>,
    /// Workspaces replaced by a larger one while a launch on the stream may still use them
    /// (launches are asynchronous on an NPU): freed only after the stream is synchronised.
    retired: RefCell<Vec<DeviceBuffer>>,
    // `Some` until drop, which destroys it before resetting the device.
    stream: Option<Stream>,
}

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
            workspace: RefCell::new(None),
            retired: RefCell::new(Vec::new()),
            stream: Some(stream),
        })
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
        self.stream.as_ref().expect("present until drop")
    }

    /// Uploads a host tensor.
    pub fn upload(&self, desc: TensorDesc, bytes: &[u8]) -> Result<DeviceTensor> {
        DeviceTensor::upload(self.api, desc, bytes)
    }

    /// Allocates an output tensor, zero-filled (so a view that the op leaves untouched reads
    /// back deterministically).
    pub fn zeros(&self, desc: TensorDesc) -> Result<DeviceTensor> {
        let bytes = vec![0u8; desc.storage_bytes()];
        DeviceTensor::upload(self.api, desc, &bytes)
    }

    /// A workspace of at least `size` bytes: the cached one when it is big enough, else a new
    /// one. Returns null for `size == 0`, as aclnn expects.
    ///
    /// A launch on the stream may still be using the old workspace when a larger one is needed
    /// (launches are asynchronous), so the old one is retired, not freed: it is freed by the
    /// next successful [`Self::synchronize`] or the runtime's drop (which synchronises first).
    /// Every pointer returned therefore stays valid until the stream has finished with it.
    pub fn workspace(&self, size: u64) -> Result<*mut c_void> {
        if size == 0 {
            return Ok(std::ptr::null_mut());
        }
        let size = usize::try_from(size)
            .map_err(|_| AclError::invalid("workspace", "size overflows usize"))?;
        let mut ws = self.workspace.borrow_mut();
        if ws.as_ref().is_none_or(|b| b.len() < size) {
            // Round up so slowly growing requests do not reallocate every call.
            let grown = DeviceBuffer::alloc(self.api, size.next_power_of_two())?;
            if let Some(old) = ws.replace(grown) {
                self.retired.borrow_mut().push(old);
            }
        }
        Ok(ws.as_ref().expect("set above").as_ptr())
    }

    /// Bytes held by the workspace cache, retired workspaces awaiting a synchronisation
    /// included.
    pub fn workspace_bytes(&self) -> usize {
        let current = self
            .workspace
            .borrow()
            .as_ref()
            .map_or(0, DeviceBuffer::len);
        current
            + self
                .retired
                .borrow()
                .iter()
                .map(DeviceBuffer::len)
                .sum::<usize>()
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

    /// Waits for the stream, then frees the workspaces retired while it ran.
    pub fn synchronize(&self) -> Result<()> {
        self.stream().synchronize()?;
        self.retired.borrow_mut().clear();
        Ok(())
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // The stream's launches may still use the workspaces: wait before freeing them (an
        // error here cannot be reported; the memory is then freed anyway at device reset).
        let _ = self.stream().synchronize();
        self.retired.get_mut().clear();
        self.workspace.get_mut().take();
        self.stream.take();
        // SAFETY: pairs with the `aclrtSetDevice` in `with_api` (ACL reference-counts devices
        // per process, so other runtimes on the same device stay valid); nothing of this
        // runtime remains on the device.
        let _ = unsafe { (self.api.reset_device)(self.device) };
    }
}
