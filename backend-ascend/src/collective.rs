//! Data- and context-parallel collectives over HCCL for `Ascend` tensors: a [`ProcessGroup`] is one rank of
//! an HCCL communicator bound to its [`AscendDevice`], and its collectives run **on that
//! device's stream**, queued like any other op (the host does not wait; what is queued after a
//! collective sees its result).
//!
//! - [`ProcessGroup::local`]: one process driving N local devices (`HcclCommInitAll`); each
//!   group is then used on its own thread.
//! - [`ProcessGroup::from_launch`]: one process per device, from torchrun's variables
//!   ([`LaunchEnv`]): rank 0's `HcclGetRootInfo`, shared over the TCP rendezvous, then
//!   `HcclCommInitRootInfo`.
//! - [`ProcessGroup::split`]: a sub-communicator of such a launch (context × data
//!   parallelism's groups), its root info all-gathered over the world communicator.
//!
//! On [`AscendDevice::sim`]-kind devices the communicators are the simulation's HCCL (not
//! CANN's; `burn_ascend_acl_sim::hccl_api`), over simulated devices `0..N` ([`simulate_devices`])
//! of this process, or, with [`ProcessGroup::from_launch`], over one simulated device per
//! process of the launch (the simulation joins processes of one machine).

use burn_ascend_cann::acl::AclApi;
use burn_ascend_cann::hccl::{
    launch, root_info, Communicator, HcclApi, HcclDataType, HcclError, LaunchEnv, ReduceOp,
};

use crate::device::{try_runtime, AscendDevice, AscendKind};
use crate::tensor::AscendTensor;

/// Makes the simulation report at least `n` devices, so `AscendDevice { kind: Simulation,
/// index }` opens for every index below `n`.
#[cfg(feature = "sim")]
pub fn simulate_devices(n: u32) {
    if burn_ascend_acl_sim::device_count() < n {
        burn_ascend_acl_sim::set_device_count(n);
    }
}

fn tables(kind: AscendKind) -> Result<(&'static HcclApi, &'static AclApi), HcclError> {
    match kind {
        #[cfg(feature = "sim")]
        AscendKind::Simulation => Ok((burn_ascend_acl_sim::hccl_api(), burn_ascend_acl_sim::api())),
        #[cfg(not(feature = "sim"))]
        AscendKind::Simulation => Err(HcclError::Unsupported(
            "the host simulation (and its HCCL) is not compiled in: enable the `sim` feature"
                .into(),
        )),
        AscendKind::Npu => {
            let hccl = burn_ascend_cann::hccl::loader::hccl()?;
            let acl = burn_ascend_cann::acl::loader::cann()?;
            Ok((hccl, acl))
        }
    }
}

fn open(device: &AscendDevice) -> Result<(), HcclError> {
    try_runtime(device)
        .map(drop)
        .map_err(|e| dev_err(device, e))
}

/// One rank of a communicator, on its device. `Send`: made on one thread, used on its rank's.
#[derive(Debug)]
pub struct ProcessGroup {
    comm: Communicator,
    device: AscendDevice,
}

impl ProcessGroup {
    /// `HcclCommInitAll` over `devices` (rank `i` on `devices[i]`, all of one kind), for one
    /// process driving them all.
    pub fn local(devices: &[AscendDevice]) -> Result<Vec<Self>, HcclError> {
        let Some(first) = devices.first() else {
            return Err(HcclError::Invalid {
                param: "devices".into(),
                rule: "needs at least one device".into(),
            });
        };
        if let Some(d) = devices.iter().find(|d| d.kind != first.kind) {
            return Err(HcclError::Invalid {
                param: "devices".into(),
                rule: format!("all ranks must be of one kind: {first} and {d}"),
            });
        }
        for d in devices {
            open(d)?;
        }
        let (hccl, acl) = tables(first.kind)?;
        let ids: Vec<i32> = devices.iter().map(|d| d.index as i32).collect();
        let comms = Communicator::init_all(hccl, acl, &ids)?;
        Ok(comms
            .into_iter()
            .zip(devices)
            .map(|(comm, &device)| Self { comm, device })
            .collect())
    }

    /// One process per device: this process is rank `env.rank` on device `env.local_rank` of
    /// `kind`. Rank 0 gets the root info and serves it over the rendezvous; every rank then
    /// joins with `HcclCommInitRootInfo`. Waits up to `HCCL_CONNECT_TIMEOUT`.
    pub fn from_launch(env: &LaunchEnv, kind: AscendKind) -> Result<Self, HcclError> {
        let device = AscendDevice {
            kind,
            index: env.local_rank,
        };
        open(&device)?;
        let (hccl, acl) = tables(kind)?;
        let mine = if env.rank == 0 {
            Some(root_info(hccl, acl)?)
        } else {
            None
        };
        let info = launch::exchange_root_info(env, mine.as_ref(), launch::connect_timeout()?)?;
        let comm = Communicator::init_root_info(
            hccl,
            acl,
            env.world_size,
            &info,
            env.rank,
            device.index as i32,
        )?;
        Ok(Self { comm, device })
    }

    /// This rank's sub-communicator of the launch `self` is the world of, as HCCL jobs and
    /// Megatron build their context- and data-parallel groups: `groups` partitions the world's
    /// ranks (a group's order is its ranks' order), every rank of `self` calls this with the
    /// same `groups`. The first rank of each group gets its root info (`HcclGetRootInfo`), the
    /// root infos are all-gathered over `self`, and each rank joins its group's with
    /// `HcclCommInitRootInfo`, on this rank's device.
    pub fn split(&self, groups: &[Vec<usize>]) -> Result<Self, HcclError> {
        let (me, world) = (self.rank(), self.size());
        let mut seen = vec![false; world];
        for r in groups.iter().flatten() {
            if *r >= world || std::mem::replace(&mut seen[*r], true) {
                return Err(HcclError::Invalid {
                    param: "groups".into(),
                    rule: format!(
                        "must hold each rank of the {world} once, got rank {r} out of range or twice"
                    ),
                });
            }
        }
        let Some((group, at)) = groups
            .iter()
            .find_map(|g| g.iter().position(|&r| r == me).map(|at| (g, at)))
        else {
            return Err(HcclError::Invalid {
                param: "groups".into(),
                rule: format!("no group holds rank {me}"),
            });
        };
        try_runtime(&self.device).map_err(|e| dev_err(&self.device, e))?;
        let (hccl, acl) = tables(self.device.kind)?;
        // The ranks that are not a group's first contribute zeros.
        let mine = if at == 0 {
            root_info(hccl, acl)?
        } else {
            burn_ascend_cann::hccl::HcclRootInfo::default()
        };
        const BYTES: usize = burn_ascend_cann::hccl::HCCL_ROOT_INFO_BYTES;
        let sent = AscendTensor::from_data(
            burn_backend::TensorData::new(mine.internal.to_vec(), [BYTES]),
            &self.device,
        );
        let all = self
            .all_gather(sent)?
            .try_to_data()
            .map_err(|e| dev_err(&self.device, e))?;
        let bytes = all.as_slice::<u8>().map_err(|e| HcclError::Invalid {
            param: "groups".into(),
            rule: format!("the gathered root infos: {e:?}"),
        })?;
        let mut info = burn_ascend_cann::hccl::HcclRootInfo::default();
        info.internal
            .copy_from_slice(&bytes[group[0] * BYTES..(group[0] + 1) * BYTES]);
        let comm = Communicator::init_root_info(
            hccl,
            acl,
            group.len() as u32,
            &info,
            at as u32,
            self.device.index as i32,
        )?;
        Ok(Self {
            comm,
            device: self.device,
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size() as usize
    }

    /// This rank's device.
    pub fn device(&self) -> AscendDevice {
        self.device
    }

    /// A contiguous tensor owning its storage alone, so a collective may write it in place:
    /// `t` itself when it already is one, else a device copy.
    fn exclusive(&self, t: AscendTensor, call: &str) -> Result<AscendTensor, HcclError> {
        if t.device() != self.device {
            return Err(HcclError::Invalid {
                param: "tensor".into(),
                rule: format!(
                    "{call} on rank {} needs a tensor on {}, got one on {}",
                    self.rank(),
                    self.device,
                    t.device()
                ),
            });
        }
        let whole = t.is_contiguous()
            && t.offset == 0
            && t.numel() * t.dtype.size() == t.storage.len()
            && std::sync::Arc::strong_count(&t.storage) == 1;
        if whole {
            return Ok(t);
        }
        crate::tensor_ops::native_index::contiguous(&t)
            .ok_or_else(|| HcclError::Unsupported(format!("{call} of a {:?} tensor", t.dtype)))
    }

    fn hccl_dtype(t: &AscendTensor, call: &str) -> Result<HcclDataType, HcclError> {
        burn_ascend_cann::acl::DataType::from_raw(t.acl_dtype(call).raw())
            .and_then(HcclDataType::from_acl)
            .ok_or_else(|| HcclError::Unsupported(format!("{call} of a {:?} tensor", t.dtype)))
    }

    /// The element-wise sum over all ranks of `t` (queued on the device stream; every rank
    /// must call it, in the same order as its other collectives, with the same shape and
    /// dtype).
    pub fn all_reduce_sum(&self, t: AscendTensor) -> Result<AscendTensor, HcclError> {
        const CALL: &str = "HcclAllReduce";
        let t = self.exclusive(t, CALL)?;
        let dtype = Self::hccl_dtype(&t, CALL)?;
        let rt = try_runtime(&self.device).map_err(|e| dev_err(&self.device, e))?;
        self.comm.all_reduce(
            &rt,
            t.storage.buffer(),
            t.storage.buffer(),
            t.numel(),
            dtype,
            ReduceOp::Sum,
        )?;
        Ok(t)
    }

    /// Rank `root`'s `t` on every rank (queued on the device stream; see
    /// [`Self::all_reduce_sum`]).
    pub fn broadcast(&self, t: AscendTensor, root: usize) -> Result<AscendTensor, HcclError> {
        const CALL: &str = "HcclBroadcast";
        let t = self.exclusive(t, CALL)?;
        let dtype = Self::hccl_dtype(&t, CALL)?;
        let rt = try_runtime(&self.device).map_err(|e| dev_err(&self.device, e))?;
        let root = u32::try_from(root).unwrap_or(u32::MAX);
        self.comm
            .broadcast(&rt, t.storage.buffer(), t.numel(), dtype, root)?;
        Ok(t)
    }

    /// Every rank's `t` (all of one shape `[d0, …]` and dtype), stacked in rank order along
    /// the first dimension: `[size · d0, …]` on every rank (`HcclAllGather`, queued on the
    /// device stream; see [`Self::all_reduce_sum`]).
    pub fn all_gather(&self, t: AscendTensor) -> Result<AscendTensor, HcclError> {
        const CALL: &str = "HcclAllGather";
        let t = self.exclusive(t, CALL)?;
        let dtype = Self::hccl_dtype(&t, CALL)?;
        let rt = try_runtime(&self.device).map_err(|e| dev_err(&self.device, e))?;
        let mut dims: Vec<usize> = t.shape.iter().copied().collect();
        let Some(first) = dims.first_mut() else {
            return Err(HcclError::Invalid {
                param: "tensor".into(),
                rule: format!("{CALL} needs a tensor of rank 1 or more, got a scalar"),
            });
        };
        *first *= self.size();
        let out = AscendTensor::alloc_for(CALL, dims.into(), t.dtype, &self.device);
        self.comm.all_gather(
            &rt,
            t.storage.buffer(),
            out.storage.buffer(),
            t.numel(),
            dtype,
        )?;
        Ok(out)
    }

    /// The sum over ranks of block `rank` of `t` split into `size` blocks along its first
    /// dimension: `[d0 / size, …]` (`HcclReduceScatter`, queued on the device stream; see
    /// [`Self::all_reduce_sum`]). The backward of [`Self::all_gather`].
    pub fn reduce_scatter_sum(&self, t: AscendTensor) -> Result<AscendTensor, HcclError> {
        const CALL: &str = "HcclReduceScatter";
        let t = self.exclusive(t, CALL)?;
        let dtype = Self::hccl_dtype(&t, CALL)?;
        let rt = try_runtime(&self.device).map_err(|e| dev_err(&self.device, e))?;
        let mut dims: Vec<usize> = t.shape.iter().copied().collect();
        let n = self.size();
        match dims.first_mut() {
            Some(first) if *first % n == 0 => *first /= n,
            _ => {
                return Err(HcclError::Invalid {
                    param: "tensor".into(),
                    rule: format!(
                        "{CALL} over {n} ranks needs a first dimension divisible by {n}, got shape {:?}",
                        t.shape.iter().collect::<Vec<_>>()
                    ),
                })
            }
        }
        let out = AscendTensor::alloc_for(CALL, dims.into(), t.dtype, &self.device);
        self.comm.reduce_scatter(
            &rt,
            t.storage.buffer(),
            out.storage.buffer(),
            out.numel(),
            dtype,
            ReduceOp::Sum,
        )?;
        Ok(out)
    }

    /// `HcclBarrier` on the device stream.
    pub fn barrier(&self) -> Result<(), HcclError> {
        let rt = try_runtime(&self.device).map_err(|e| dev_err(&self.device, e))?;
        self.comm.barrier(&rt)
    }

    /// Waits for the device stream: a failed queued collective (a peer's mismatch, a timeout,
    /// a rank that left) becomes this rank's typed error, `call` naming what was waited for.
    pub fn synchronize(&self, call: &str) -> Result<(), HcclError> {
        let rt = try_runtime(&self.device).map_err(|e| dev_err(&self.device, e))?;
        self.comm.synchronize(&rt, call)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // Collectives still queued on the stream use the communicator: let them finish before
        // it is destroyed (their failure, if any, was this rank's to report earlier).
        let _ = self.synchronize("HcclCommDestroy");
    }
}

fn dev_err(device: &AscendDevice, e: String) -> HcclError {
    HcclError::Invalid {
        param: "device".into(),
        rule: format!("{device} cannot be opened: {e}"),
    }
}
