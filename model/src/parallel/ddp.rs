//! Data-parallel training over HCCL: every rank trains a replica of the model on
//! its own device and its own packed batches; after each backward the gradients are averaged
//! across ranks, so every replica takes the same optimizer step.
//!
//! The gradient all-reduce is torch DDP's: the parameters' gradients (in reverse module order,
//! roughly the order backward produces them) are grouped into buckets of about
//! [`DEFAULT_BUCKET_BYTES`]; each bucket is flattened and concatenated on the device, summed
//! with **one** `HcclAllReduce` on the device stream, scaled by 1/N and split back into views,
//! so a step makes a few large all-reduces rather than one per tensor. Parameters are
//! broadcast from rank 0 before the first step (the same buckets, `HcclBroadcast`), so
//! replicas that were initialised differently start equal.
//!
//! The loss of a data-parallel step is the mean of the ranks' mean token losses, which is the
//! single-device loss of the whole global batch because every rank's batch has the same
//! number of tokens (the packer fills each batch to exactly `batch_tokens`); its gradient is
//! then the mean of the ranks' gradients, which is what the all-reduce computes.
//!
//! Why not Burn's `distributed` feature (burn-train's DDP strategy over
//! `DistributedBackend`): enabling it makes every `Autodiff<B>` require
//! `B: DistributedBackend`, which NdArray (this crate's CPU path) does not implement, so the
//! CPU training, the tests on `Autodiff<NdArray>` and every user's `Autodiff<NdArray>` would
//! stop compiling. The loop here needs only the `Ascend` backend's HCCL process group and
//! leaves every other backend untouched.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use burn::backend::Autodiff;
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{ElementConversion, Tensor, TensorPrimitive};
use burn_ascend::backend::collective::ProcessGroup;
use burn_ascend::backend::{Ascend, HcclError};

use crate::model::transformer::Transformer;
use crate::train::sync::GradientSync;
use burn_ascend::AttnError;

/// torch DDP's default bucket size (`bucket_cap_mb = 25`).
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// Mutation switches proving the data-parallel tests can fail (process-wide; tests only).
#[doc(hidden)]
pub mod test_hooks {
    use super::*;

    pub(crate) static DROP_SCALE: AtomicBool = AtomicBool::new(false);
    pub(super) static DROP_BROADCAST: AtomicBool = AtomicBool::new(false);

    /// Sums the gradients instead of averaging them (no 1/N).
    pub fn drop_gradient_scale(on: bool) {
        DROP_SCALE.store(on, Ordering::SeqCst);
    }

    /// Skips the broadcast of rank 0's parameters.
    pub fn drop_parameter_broadcast(on: bool) {
        DROP_BROADCAST.store(on, Ordering::SeqCst);
    }
}

/// Collective traffic of one rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Gradient steps synchronised.
    pub steps: u64,
    /// Gradient all-reduces (buckets) over those steps.
    pub gradient_all_reduces: u64,
    /// Gradient bytes all-reduced over those steps.
    pub gradient_bytes: u64,
    /// Parameter broadcasts (buckets).
    pub broadcasts: u64,
}

/// One rank of data-parallel training on `Autodiff<Ascend>`.
#[derive(Debug)]
pub struct DataParallel {
    group: ProcessGroup,
    bucket_bytes: usize,
    stats: SyncStats,
}

type Ad = Autodiff<Ascend>;

pub(crate) fn hccl(e: HcclError) -> AttnError {
    let call = match &e {
        HcclError::Status { call, .. } => call.clone(),
        _ => "HCCL".into(),
    };
    AttnError::Device {
        op: "data-parallel".into(),
        call,
        status: e.status(),
        message: e.to_string(),
    }
}

/// A parameter (or its gradient) flattened to 1-D.
struct Flat {
    id: ParamId,
    dims: Vec<usize>,
    t: Tensor<Ascend, 1>,
}

fn flat<const D: usize>(id: ParamId, t: Tensor<Ascend, D>) -> Flat {
    let dims = t.dims().to_vec();
    let n: usize = dims.iter().product();
    Flat {
        id,
        dims,
        t: t.reshape([n]),
    }
}

fn shape<const D: usize>(dims: &[usize]) -> [usize; D] {
    std::array::from_fn(|i| dims[i])
}

/// Consecutive runs of `items` of one dtype holding at least `limit` bytes each (the last
/// may hold less): DDP's buckets.
fn buckets(items: &[Flat], limit: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0usize;
    for (i, f) in items.iter().enumerate() {
        if i > start && f.t.dtype() != items[start].t.dtype() {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += f.t.shape().num_elements() * f.t.dtype().size();
        if bytes >= limit {
            out.push(start..i + 1);
            start = i + 1;
            bytes = 0;
        }
    }
    if start < items.len() {
        out.push(start..items.len());
    }
    out
}

enum Collective {
    /// Sum, then scale by 1/N.
    Average,
    /// Rank 0's values.
    Broadcast,
}

impl DataParallel {
    /// Rank `group.rank()` of `group.size()`, with buckets of `bucket_bytes`.
    pub fn new(group: ProcessGroup, bucket_bytes: usize) -> Self {
        Self {
            group,
            bucket_bytes: bucket_bytes.max(1),
            stats: SyncStats::default(),
        }
    }

    /// The collective traffic so far.
    pub fn stats(&self) -> SyncStats {
        self.stats
    }

    /// The process group.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// Runs `what` over `items` bucket by bucket, in place of their tensors.
    fn run(&mut self, items: &mut [Flat], what: Collective) -> Result<(), AttnError> {
        let n = self.group.size();
        for range in buckets(items, self.bucket_bytes) {
            let parts: Vec<Tensor<Ascend, 1>> =
                items[range.clone()].iter().map(|f| f.t.clone()).collect();
            let bucket = if parts.len() == 1 {
                parts.into_iter().next().expect("one")
            } else {
                Tensor::cat(parts, 0)
            };
            let bytes = bucket.shape().num_elements() * bucket.dtype().size();
            let prim = bucket.into_primitive().tensor();
            let out = match what {
                Collective::Average => {
                    self.stats.gradient_all_reduces += 1;
                    self.stats.gradient_bytes += bytes as u64;
                    self.group.all_reduce_sum(prim)
                }
                Collective::Broadcast => {
                    self.stats.broadcasts += 1;
                    self.group.broadcast(prim, 0)
                }
            }
            .map_err(hccl)?;
            let mut out = Tensor::<Ascend, 1>::from_primitive(TensorPrimitive::Float(out));
            if matches!(what, Collective::Average) && !test_hooks::DROP_SCALE.load(Ordering::SeqCst)
            {
                out = out.mul_scalar(1.0 / n as f64);
            }
            let mut off = 0;
            for f in &mut items[range] {
                let len = f.dims.iter().product::<usize>();
                f.t = out.clone().slice(off..off + len);
                off += len;
            }
        }
        Ok(())
    }
}

struct CollectGrads<'a> {
    grads: &'a mut GradientsParams,
    out: Vec<Flat>,
}

impl ModuleVisitor<Ad> for CollectGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
        if let Some(g) = self.grads.remove::<Ascend, D>(param.id) {
            self.out.push(flat(param.id, g));
        }
    }
}

struct RestoreGrads<'a> {
    grads: &'a mut GradientsParams,
    by_id: HashMap<ParamId, Flat>,
}

impl ModuleVisitor<Ad> for RestoreGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
        if let Some(f) = self.by_id.remove(&param.id) {
            let t = f.t.reshape(shape::<D>(&f.dims));
            self.grads.register::<Ascend, D>(param.id, t);
        }
    }
}

struct CollectParams {
    out: Vec<Flat>,
}

impl ModuleVisitor<Ad> for CollectParams {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
        self.out.push(flat(param.id, param.val().inner()));
    }
}

struct SetParams {
    by_id: HashMap<ParamId, Flat>,
}

impl ModuleMapper<Ad> for SetParams {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<Ad, D>>) -> Param<Tensor<Ad, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(f) = self.by_id.remove(&id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let mut value = Tensor::<Ad, D>::from_inner(f.t.reshape(shape::<D>(&f.dims)));
        if tensor.is_require_grad() {
            value = value.require_grad();
        }
        Param::from_mapped_value(id, value, mapper)
    }
}

impl GradientSync<Ad> for DataParallel {
    fn rank(&self) -> usize {
        self.group.rank()
    }

    fn size(&self) -> usize {
        self.group.size()
    }

    fn broadcast_model(&mut self, model: Transformer<Ad>) -> Result<Transformer<Ad>, AttnError> {
        if test_hooks::DROP_BROADCAST.load(Ordering::SeqCst) {
            return Ok(model);
        }
        let mut c = CollectParams { out: Vec::new() };
        model.visit(&mut c);
        let mut items = c.out;
        self.run(&mut items, Collective::Broadcast)?;
        let by_id = items.into_iter().map(|f| (f.id, f)).collect();
        Ok(model.map(&mut SetParams { by_id }))
    }

    fn average_loss(&mut self, loss: Tensor<Ad, 1>) -> Result<f32, AttnError> {
        let n = self.group.size();
        let prim = loss.inner().into_primitive().tensor();
        let sum = self.group.all_reduce_sum(prim).map_err(hccl)?;
        // The read below would panic on a failed collective: wait here for the typed error.
        self.group.synchronize("HcclAllReduce").map_err(hccl)?;
        let sum: f32 = Tensor::<Ascend, 1>::from_primitive(TensorPrimitive::Float(sum))
            .into_scalar()
            .elem();
        Ok(sum / n as f32)
    }

    fn wait(&mut self) -> Result<(), AttnError> {
        self.group.synchronize("HcclAllReduce").map_err(hccl)
    }

    fn average_gradients(
        &mut self,
        model: &Transformer<Ad>,
        mut grads: GradientsParams,
    ) -> Result<GradientsParams, AttnError> {
        let mut c = CollectGrads {
            grads: &mut grads,
            out: Vec::new(),
        };
        model.visit(&mut c);
        let mut items = c.out;
        // Reverse module order: the order backward produces the gradients in (DDP's buckets).
        items.reverse();
        self.run(&mut items, Collective::Average)?;
        self.stats.steps += 1;
        let by_id = items.into_iter().map(|f| (f.id, f)).collect();
        model.visit(&mut RestoreGrads {
            grads: &mut grads,
            by_id,
        });
        Ok(grads)
    }
}

struct Materialize;

impl<Bk: burn::tensor::backend::Backend> ModuleVisitor<Bk> for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Bk, D>>) {
        let _ = param.val();
    }
}

/// Runs every parameter's lazy initialisation now: a clone of a module whose parameters are
/// still lazy initialises its own copy later, with other random values, so a replica (or the
/// single-device reference of `--check-ddp`) cloned from a fresh model must be made after
/// this.
pub fn materialize<Bk: burn::tensor::backend::Backend>(model: &Transformer<Bk>) {
    model.visit(&mut Materialize);
}
