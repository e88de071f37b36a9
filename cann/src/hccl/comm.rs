//! [`Communicator`]: an RAII `HcclComm` (destroyed on drop) with its rank, size and device, and
//! the collectives data and context parallelism need, queued on a [`Runtime`]'s stream.

use std::ffi::CStr;

use super::error::HcclError;
use super::ffi::*;
use crate::acl::tensor::recent_error;
use crate::acl::{AclApi, DeviceBuffer, Runtime};

/// One rank of a communicator. `Send` (it may be created on one thread — `HcclCommInitAll`
/// makes every rank's at once — and used on its rank's thread), not `Sync`: HCCL expects one
/// thread to issue a communicator's collectives, in one order.
pub struct Communicator {
    api: &'static HcclApi,
    acl: &'static AclApi,
    comm: HcclComm,
    rank: u32,
    size: u32,
    device: i32,
}

// SAFETY: an `HcclComm` is a handle into HCCL's process-wide state, not bound to the thread
// that created it (HCCL's single-process multi-device sample creates all communicators with
// `HcclCommInitAll` on the main thread and drives each from its own thread after
// `aclrtSetDevice`). Exclusive use (`!Sync`, `&self` methods on one thread at a time) keeps
// each communicator's calls in one order.
unsafe impl Send for Communicator {}

/// What an HCCL status means, for messages: `HcclGetErrorString` plus the runtime's recent
/// error message (where HCCL reports the details).
fn describe(api: &HcclApi, acl: &AclApi, status: HcclResult) -> String {
    // SAFETY: takes an integer; returns null or a static NUL-terminated string, copied at once.
    let s = unsafe {
        let p = (api.get_error_string)(status);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    let recent = recent_error(acl);
    match (s.is_empty(), recent.is_empty()) {
        (_, true) => s,
        (true, false) => recent,
        (false, false) => format!("{s}; {recent}"),
    }
}

fn check(
    api: &HcclApi,
    acl: &AclApi,
    status: HcclResult,
    call: &str,
    rank: Option<u32>,
) -> Result<(), HcclError> {
    if status == HCCL_SUCCESS {
        return Ok(());
    }
    Err(HcclError::Status {
        call: call.to_string(),
        rank,
        status,
        message: describe(api, acl, status),
    })
}

/// `HcclGetRootInfo`: rank 0's half of a multi-process communicator (its address and a unique
/// id, to be shared with every rank, e.g. by [`super::launch::exchange_root_info`]). The
/// device must be bound to the calling thread.
pub fn root_info(api: &'static HcclApi, acl: &'static AclApi) -> Result<HcclRootInfo, HcclError> {
    let mut info = HcclRootInfo::default();
    // SAFETY: `info` is a writable `HcclRootInfo` of the header's size.
    let st = unsafe { (api.get_root_info)(&mut info) };
    check(api, acl, st, names::get_root_info, Some(0))?;
    Ok(info)
}

impl Communicator {
    /// `HcclCommInitAll`: one communicator per device of `devices` (rank `i` on
    /// `devices[i]`), for one process driving them all. Each communicator is then used on its
    /// own thread, with its device bound.
    pub fn init_all(
        api: &'static HcclApi,
        acl: &'static AclApi,
        devices: &[i32],
    ) -> Result<Vec<Self>, HcclError> {
        if devices.is_empty() {
            return Err(HcclError::invalid("devices", "needs at least one device"));
        }
        for (i, d) in devices.iter().enumerate() {
            if *d < 0 {
                return Err(HcclError::invalid(
                    "devices",
                    format!("device index {d} (rank {i}) is negative"),
                ));
            }
            if devices[..i].contains(d) {
                return Err(HcclError::invalid(
                    "devices",
                    format!("device {d} appears twice (ranks need distinct devices)"),
                ));
            }
        }
        let n = u32::try_from(devices.len())
            .map_err(|_| HcclError::invalid("devices", "more than u32::MAX devices"))?;
        let mut devs = devices.to_vec();
        let mut comms: Vec<HcclComm> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `devs` holds `n` device ids and `comms` room for `n` handles, both live for
        // the call.
        let st = unsafe { (api.comm_init_all)(n, devs.as_mut_ptr(), comms.as_mut_ptr()) };
        check(api, acl, st, names::comm_init_all, None)?;
        Ok(comms
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (comm, &device))| Self {
                api,
                acl,
                comm,
                rank: rank as u32,
                size: n,
                device,
            })
            .collect())
    }

    /// `HcclCommInitRootInfo`: rank `rank` of `n_ranks`, one process per device, joining the
    /// communicator rank 0's [`root_info`] describes; `device` (bound to the calling thread)
    /// is this rank's. Blocks until every rank has joined or `HCCL_CONNECT_TIMEOUT` passed.
    pub fn init_root_info(
        api: &'static HcclApi,
        acl: &'static AclApi,
        n_ranks: u32,
        root: &HcclRootInfo,
        rank: u32,
        device: i32,
    ) -> Result<Self, HcclError> {
        if n_ranks == 0 || rank >= n_ranks {
            return Err(HcclError::invalid(
                "rank",
                format!("must be below the rank count {n_ranks}, got {rank}"),
            ));
        }
        let mut comm: HcclComm = std::ptr::null_mut();
        // SAFETY: `root` is a live `HcclRootInfo`, `comm` a valid out-pointer.
        let st = unsafe { (api.comm_init_root_info)(n_ranks, root, rank, &mut comm) };
        check(api, acl, st, names::comm_init_root_info, Some(rank))?;
        Ok(Self {
            api,
            acl,
            comm,
            rank,
            size: n_ranks,
            device,
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// This rank's device.
    pub fn device(&self) -> i32 {
        self.device
    }

    fn check(&self, status: HcclResult, call: &str) -> Result<(), HcclError> {
        check(self.api, self.acl, status, call, Some(self.rank))
    }

    fn on_this_device(&self, rt: &Runtime, call: &str) -> Result<(), HcclError> {
        if rt.device() != self.device {
            return Err(HcclError::invalid(
                "stream",
                format!(
                    "{call} on rank {} needs a stream of device {}, got device {}'s",
                    self.rank,
                    self.device,
                    rt.device()
                ),
            ));
        }
        Ok(())
    }

    fn fits(
        buf: &DeviceBuffer,
        what: &str,
        count: usize,
        dtype: HcclDataType,
    ) -> Result<(), HcclError> {
        let bytes = count.checked_mul(dtype.size()).ok_or_else(|| {
            HcclError::invalid(
                "count",
                format!("{count} {dtype:?} elements overflow usize"),
            )
        })?;
        if bytes > buf.len() {
            return Err(HcclError::invalid(
                what,
                format!(
                    "{count} {dtype:?} elements ({bytes} bytes) do not fit its {} bytes",
                    buf.len()
                ),
            ));
        }
        Ok(())
    }

    /// `HcclAllReduce` of `count` elements from `send` into `recv` (they may be the same
    /// buffer), queued on `rt`'s stream: the host does not wait; the result is ready for
    /// anything queued after it on that stream, and a failure of the collective (a peer's
    /// mismatch, a timeout) is reported by the stream's next synchronisation.
    pub fn all_reduce(
        &self,
        rt: &Runtime,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        count: usize,
        dtype: HcclDataType,
        op: ReduceOp,
    ) -> Result<(), HcclError> {
        self.on_this_device(rt, names::all_reduce)?;
        Self::fits(send, "sendBuf", count, dtype)?;
        Self::fits(recv, "recvBuf", count, dtype)?;
        // SAFETY: both buffers are live device allocations holding `count` elements of
        // `dtype` (checked above), kept alive by the caller until the stream has run the
        // collective (stream-ordered frees); the communicator and the stream are live.
        let st = unsafe {
            (self.api.all_reduce)(
                send.as_ptr(),
                recv.as_ptr(),
                count as u64,
                dtype.raw(),
                op.raw(),
                self.comm,
                rt.stream().as_ptr(),
            )
        };
        self.check(st, names::all_reduce)?;
        rt.order().note_launch();
        Ok(())
    }

    /// `HcclBroadcast` of `count` elements of `buf` from rank `root` to every rank, in place,
    /// queued on `rt`'s stream (see [`Self::all_reduce`]).
    pub fn broadcast(
        &self,
        rt: &Runtime,
        buf: &DeviceBuffer,
        count: usize,
        dtype: HcclDataType,
        root: u32,
    ) -> Result<(), HcclError> {
        self.on_this_device(rt, names::broadcast)?;
        Self::fits(buf, "buf", count, dtype)?;
        if root >= self.size {
            return Err(HcclError::invalid(
                "root",
                format!("must be below the rank count {}, got {root}", self.size),
            ));
        }
        // SAFETY: as in `all_reduce`: a live buffer of `count` elements, live comm and stream.
        let st = unsafe {
            (self.api.broadcast)(
                buf.as_ptr(),
                count as u64,
                dtype.raw(),
                root,
                self.comm,
                rt.stream().as_ptr(),
            )
        };
        self.check(st, names::broadcast)?;
        rt.order().note_launch();
        Ok(())
    }

    /// `HcclAllGather`: every rank's `send_count` elements of `send`, in rank order, into
    /// `recv` (`size × send_count` elements on every rank), queued on `rt`'s stream (see
    /// [`Self::all_reduce`]). Context parallelism gathers the keys and values with it; ZeRO
    /// gathers parameter shards.
    pub fn all_gather(
        &self,
        rt: &Runtime,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        send_count: usize,
        dtype: HcclDataType,
    ) -> Result<(), HcclError> {
        self.on_this_device(rt, names::all_gather)?;
        Self::fits(send, "sendBuf", send_count, dtype)?;
        let total = send_count.checked_mul(self.size as usize).ok_or_else(|| {
            HcclError::invalid(
                "sendCount",
                format!("{send_count} × {} ranks overflows usize", self.size),
            )
        })?;
        Self::fits(recv, "recvBuf", total, dtype)?;
        // SAFETY: `send` holds `send_count` and `recv` `size × send_count` elements of
        // `dtype` (checked above), both live device allocations kept alive by the caller until
        // the stream has run the collective; the communicator and the stream are live.
        let st = unsafe {
            (self.api.all_gather)(
                send.as_ptr(),
                recv.as_ptr(),
                send_count as u64,
                dtype.raw(),
                self.comm,
                rt.stream().as_ptr(),
            )
        };
        self.check(st, names::all_gather)?;
        rt.order().note_launch();
        Ok(())
    }

    /// `HcclReduceScatter`: `send` holds `size × recv_count` elements on every rank; rank `r`
    /// receives into `recv` the reduction over ranks of block `r` (`recv_count` elements),
    /// queued on `rt`'s stream (see [`Self::all_reduce`]). The backward of an all-gather.
    pub fn reduce_scatter(
        &self,
        rt: &Runtime,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        recv_count: usize,
        dtype: HcclDataType,
        op: ReduceOp,
    ) -> Result<(), HcclError> {
        self.on_this_device(rt, names::reduce_scatter)?;
        let total = recv_count.checked_mul(self.size as usize).ok_or_else(|| {
            HcclError::invalid(
                "recvCount",
                format!("{recv_count} × {} ranks overflows usize", self.size),
            )
        })?;
        Self::fits(send, "sendBuf", total, dtype)?;
        Self::fits(recv, "recvBuf", recv_count, dtype)?;
        // SAFETY: `send` holds `size × recv_count` and `recv` `recv_count` elements of `dtype`
        // (checked above), live device allocations kept alive by the caller until the stream
        // has run the collective; the communicator and the stream are live.
        let st = unsafe {
            (self.api.reduce_scatter)(
                send.as_ptr(),
                recv.as_ptr(),
                recv_count as u64,
                dtype.raw(),
                op.raw(),
                self.comm,
                rt.stream().as_ptr(),
            )
        };
        self.check(st, names::reduce_scatter)?;
        rt.order().note_launch();
        Ok(())
    }

    /// `HcclBarrier` on `rt`'s stream: work queued after it runs once every rank got there.
    pub fn barrier(&self, rt: &Runtime) -> Result<(), HcclError> {
        self.on_this_device(rt, names::barrier)?;
        // SAFETY: live communicator and stream.
        let st = unsafe { (self.api.barrier)(self.comm, rt.stream().as_ptr()) };
        self.check(st, names::barrier)?;
        rt.order().note_launch();
        Ok(())
    }

    /// Waits for `rt`'s stream, turning a failed queued collective into this rank's typed
    /// error (`call` names the collective being waited for).
    pub fn synchronize(&self, rt: &Runtime, call: &str) -> Result<(), HcclError> {
        rt.synchronize().map_err(|e| match e {
            crate::acl::AclError::Status {
                status, message, ..
            } => HcclError::Status {
                call: call.to_string(),
                rank: Some(self.rank),
                status,
                message,
            },
            other => HcclError::Device(other),
        })
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // SAFETY: created by `HcclCommInitAll` / `HcclCommInitRootInfo`, destroyed once. A
        // failure cannot be reported from a drop.
        let _ = unsafe { (self.api.comm_destroy)(self.comm) };
    }
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Communicator(rank {} of {} on device {}, {:?})",
            self.rank, self.size, self.device, self.api.kind
        )
    }
}
