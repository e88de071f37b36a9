//! One rank of ZeRO-sharded data-parallel training on `Autodiff<Ascend>` (see the module docs
//! of [`crate::parallel::zero`]).

use std::sync::atomic::Ordering;

use burn::backend::Autodiff;
use burn::module::Module;
use burn::optim::SimpleOptimizer;
use burn::optim::{AdamWState, AdaptiveMomentumState, GradientsParams};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::{ElementConversion, Tensor, TensorPrimitive};
use burn_ascend::backend::collective::ProcessGroup;
use burn_ascend::backend::{memory_stats, Ascend, AscendDevice};
use burn_ascend::AttnError;

use super::record::{from_record, to_record, Moments, OptimizerRecord};
use crate::model::transformer::Transformer;
use crate::parallel::ddp::{hccl, test_hooks, DataParallel};
use crate::train::optim::{clip_scale, FusedAdamW};
use crate::train::recompute::{Part, PartHooks};
use crate::train::sync::{BlockSharding, GradientSync, ShardedOptimizer, ZeroStage};
use crate::train::zero_layout::{
    flat_grads, flat_grads_of, flat_params, owned, Layout, SetUnits, Unit,
};

type Ad = Autodiff<Ascend>;

/// Collective traffic and memory of one ZeRO rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZeroStats {
    /// Optimizer steps taken.
    pub steps: u64,
    /// Gradient all-reduces (stage 1), one per unit and step.
    pub all_reduces: u64,
    /// Gradient reduce-scatters (stages 2, 3), one per unit and step.
    pub reduce_scatters: u64,
    /// Weight all-gathers (after each update, or before each forward in stage 3, and for a
    /// checkpoint's export); the moments are never gathered by a sharded checkpoint.
    pub all_gathers: u64,
    /// Bytes of gradients reduced (each rank's input).
    pub gradient_bytes: u64,
    /// Stage 3: the pool bytes the last release of the gathered weights freed (allocated
    /// before minus after replacing the trainable parameters by placeholders).
    pub released_weight_bytes: u64,
    /// Bytes of the largest shard this rank wrote to a checkpoint (its master weights and
    /// moments; nothing of the other ranks').
    pub shard_bytes_written: u64,
    /// Bytes of sharded state this rank read from a sharded checkpoint at resume (its own
    /// ranges only).
    pub shard_bytes_read: u64,
}

/// One rank: rank 0's weights broadcast first (as plain data parallelism), then each step's
/// gradients reduced into this rank's slice of every unit, AdamW applied to the slice, and the
/// whole weights gathered.
pub struct Zero {
    pub(super) dp: DataParallel,
    pub(super) stage: ZeroStage,
    optim: FusedAdamW<Ad>,
    clip_norm: f32,
    pub(super) device: AscendDevice,
    pub(super) layout: Option<Layout>,
    /// This rank's slice of each unit's f32 master weights.
    pub(super) master: Vec<Tensor<Ascend, 1>>,
    /// AdamW's state of each slice (`None` before the first step).
    pub(super) state: Option<Vec<Moments>>,
    /// The step's reduced gradient slices, between [`ShardedOptimizer::reduce`] and
    /// [`ShardedOptimizer::step`].
    grads: Vec<Tensor<Ascend, 1>>,
    /// Stage 3 with per-block checkpointing: each unit's reduced gradient slice, filled part
    /// by part during backward's chain ([`BlockSharding`]).
    part_grads: Vec<Option<Tensor<Ascend, 1>>>,
    /// The step's all-reduced squared gradient norm (`[1]`, on the device).
    squared_norm: Option<Tensor<Ascend, 1>>,
    /// Whether the model holds the whole weights (stage 3 releases them after each update).
    pub(super) gathered: bool,
    /// This rank's slices of the master weights read from a sharded checkpoint, taken by
    /// [`GradientSync::broadcast_model`] in place of the broadcast model's.
    pub(super) resumed_master: Option<Vec<Tensor<Ascend, 1>>>,
    pub(super) stats: ZeroStats,
}

impl Zero {
    /// Rank `group.rank()` of `group.size()` at `stage`, with the replicated loop's AdamW
    /// ([`FusedAdamW`] of decoupled weight decay `weight_decay`, its other settings the
    /// defaults) and global gradient-norm clip `clip_norm`.
    pub fn new(
        group: ProcessGroup,
        stage: ZeroStage,
        weight_decay: f32,
        clip_norm: f32,
    ) -> Result<Self, AttnError> {
        let device = group.device();
        Ok(Self {
            dp: DataParallel::new(group, crate::parallel::ddp::DEFAULT_BUCKET_BYTES),
            stage,
            optim: FusedAdamW::new(weight_decay)?,
            clip_norm,
            device,
            layout: None,
            master: Vec::new(),
            state: None,
            grads: Vec::new(),
            part_grads: Vec::new(),
            squared_norm: None,
            gathered: true,
            resumed_master: None,
            stats: ZeroStats::default(),
        })
    }

    /// The collective traffic so far.
    pub fn stats(&self) -> ZeroStats {
        self.stats
    }

    /// The layout (after the first broadcast or load).
    pub fn layout(&self) -> Option<&Layout> {
        self.layout.as_ref()
    }

    /// The bytes this rank's optimizer state holds in its device's memory pool, measured by
    /// releasing it: the pool's allocated bytes before minus after (the state is gone
    /// afterwards; call at the end of a run).
    pub fn release_optimizer_state(&mut self) -> u64 {
        let before = memory_stats(&self.device).allocated_bytes;
        self.state = None;
        let after = memory_stats(&self.device).allocated_bytes;
        before.saturating_sub(after) as u64
    }

    pub(super) fn group(&self) -> &ProcessGroup {
        self.dp.group()
    }

    pub(super) fn layout_of(&mut self, model: &Transformer<Ad>) -> Result<&Layout, AttnError> {
        if self.layout.is_none() {
            self.layout = Some(Layout::of(model, self.group().size())?);
        }
        Ok(self.layout.as_ref().expect("set above"))
    }

    fn gather(&mut self, t: Tensor<Ascend, 1>) -> Result<Tensor<Ascend, 1>, AttnError> {
        self.stats.all_gathers += 1;
        let out = self
            .group()
            .all_gather(t.into_primitive().tensor())
            .map_err(hccl)?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
    }

    /// Each unit whole from the slices `parts` (one per unit).
    pub(super) fn gather_units(
        &mut self,
        parts: Vec<Tensor<Ascend, 1>>,
    ) -> Result<Vec<Tensor<Ascend, 1>>, AttnError> {
        parts.into_iter().map(|p| self.gather(p)).collect()
    }

    /// The model's parameters set from the whole units `flat`, and the master slices as
    /// views of them (no copy).
    pub(super) fn set_whole(
        &mut self,
        model: Transformer<Ad>,
        flat: &[Tensor<Ascend, 1>],
    ) -> Transformer<Ad> {
        let layout = self.layout.as_ref().expect("layout before weights");
        let rank = self.group().rank();
        self.master = layout
            .units
            .iter()
            .zip(flat)
            .map(|(u, f)| f.clone().slice(layout.shard(u, rank)))
            .collect();
        self.gathered = true;
        model.map(&mut SetUnits::new(layout, Some(flat), self.device))
    }

    pub(super) fn release(&mut self, model: Transformer<Ad>) -> Transformer<Ad> {
        let layout = self.layout.as_ref().expect("layout before weights");
        self.gathered = false;
        let before = memory_stats(&self.device).allocated_bytes;
        let model = model.map(&mut SetUnits::new(layout, None, self.device));
        let after = memory_stats(&self.device).allocated_bytes;
        self.stats.released_weight_bytes = before.saturating_sub(after) as u64;
        model
    }

    /// `unit`'s whole flat gradient `g` summed over the ranks into this rank's slice and
    /// scaled by 1/N.
    fn reduce_unit(
        &mut self,
        layout: &Layout,
        unit: &Unit,
        g: Tensor<Ascend, 1>,
    ) -> Result<Tensor<Ascend, 1>, AttnError> {
        let n = self.group().size();
        let rank = self.group().rank();
        self.stats.gradient_bytes += (unit.padded * 4) as u64;
        let prim = g.into_primitive().tensor();
        let shard = match self.stage {
            ZeroStage::One => {
                self.stats.all_reduces += 1;
                let sum = self.group().all_reduce_sum(prim).map_err(hccl)?;
                Tensor::<Ascend, 1>::from_primitive(TensorPrimitive::Float(sum))
                    .slice(layout.shard(unit, rank))
            }
            ZeroStage::Two | ZeroStage::Three => {
                self.stats.reduce_scatters += 1;
                let part = self.group().reduce_scatter_sum(prim).map_err(hccl)?;
                Tensor::from_primitive(TensorPrimitive::Float(part))
            }
        };
        // The mean over ranks, as plain data parallelism scales its all-reduced sums (the
        // product also makes stage 1's slice a tensor of its own).
        Ok(if !test_hooks::DROP_SCALE.load(Ordering::SeqCst) {
            shard.mul_scalar(1.0 / n as f64)
        } else {
            owned(shard)
        })
    }

    /// Keeps the reduced slices `shards` (one per unit, in unit order) for the step and
    /// returns the global gradient norm: the square root of the all-reduced sum of the
    /// slices' sums of squares.
    fn norm_of(&mut self, shards: Vec<Tensor<Ascend, 1>>) -> Result<f32, AttnError> {
        let mut squares: Option<Tensor<Ascend, 1>> = None;
        for shard in &shards {
            let sq = shard.clone().powi_scalar(2).sum();
            squares = Some(match squares.take() {
                Some(acc) => acc + sq,
                None => sq,
            });
        }
        self.grads = shards;
        let Some(squares) = squares else {
            self.squared_norm = None;
            return Ok(0.0);
        };
        // The global squared norm: the shards' partial sums, summed over ranks.
        let total = self
            .group()
            .all_reduce_sum(squares.into_primitive().tensor())
            .map_err(hccl)?;
        self.group().synchronize("HcclAllReduce").map_err(hccl)?;
        let total = Tensor::<Ascend, 1>::from_primitive(TensorPrimitive::Float(total));
        self.squared_norm = Some(total.clone());
        let squared: f32 = total.into_scalar().elem();
        Ok(squared.sqrt())
    }

    /// AdamW on one slice: the replicated loop's [`FusedAdamW`] update, element-wise.
    fn adamw(
        &self,
        lr: f64,
        master: Tensor<Ascend, 1>,
        grad: Tensor<Ascend, 1>,
        state: Option<Moments>,
    ) -> (Tensor<Ascend, 1>, Moments) {
        let state = state.map(|s| AdamWState {
            momentum: AdaptiveMomentumState {
                time: s.time,
                moment_1: s.m,
                moment_2: s.v,
                max_moment_2: None,
            },
        });
        let (w, state) = SimpleOptimizer::<Ascend>::step(&self.optim, lr, master, grad, state);
        let m = state.expect("AdamW keeps a state").momentum;
        (
            w,
            Moments {
                time: m.time,
                m: m.moment_1,
                v: m.moment_2,
            },
        )
    }
}

impl GradientSync<Ad> for Zero {
    fn rank(&self) -> usize {
        self.group().rank()
    }

    fn size(&self) -> usize {
        self.group().size()
    }

    fn broadcast_model(&mut self, model: Transformer<Ad>) -> Result<Transformer<Ad>, AttnError> {
        let model = self.dp.broadcast_model(model)?;
        self.layout_of(&model)?;
        let layout = self.layout.as_ref().expect("set above");
        let rank = self.group().rank();
        if let Some(master) = self.resumed_master.take() {
            // Resumed from a sharded checkpoint: the saved master slices are the weights;
            // stages 1 and 2 gather them whole into the model.
            self.master = master;
            return Ok(match self.stage {
                ZeroStage::Three => self.release(model),
                _ => {
                    let whole = self.gather_units(self.master.clone())?;
                    self.set_whole(model, &whole)
                }
            });
        }
        let flat = flat_params(&model, layout, &self.device)?;
        // Copies: a view would keep the whole unit alive.
        self.master = layout
            .units
            .iter()
            .zip(flat)
            .map(|(u, f)| owned(f.slice(layout.shard(u, rank))))
            .collect();
        Ok(match self.stage {
            ZeroStage::Three => self.release(model),
            _ => model,
        })
    }

    fn average_loss(&mut self, loss: Tensor<Ad, 1>) -> Result<f32, AttnError> {
        self.dp.average_loss(loss)
    }

    fn wait(&mut self) -> Result<(), AttnError> {
        self.dp.wait()
    }

    fn average_gradients(
        &mut self,
        _model: &Transformer<Ad>,
        _grads: GradientsParams,
    ) -> Result<GradientsParams, AttnError> {
        Err(AttnError::Unsupported(
            "whole averaged gradients under --zero (the loop reduces them into shards through \
             ShardedOptimizer::reduce)"
                .into(),
        ))
    }

    fn sharded(&mut self) -> Option<&mut dyn ShardedOptimizer<Ad>> {
        Some(self)
    }
}

impl ShardedOptimizer<Ad> for Zero {
    fn stage(&self) -> ZeroStage {
        self.stage
    }

    fn reduce(
        &mut self,
        model: &Transformer<Ad>,
        grads: GradientsParams,
    ) -> Result<f32, AttnError> {
        let layout = self.layout.clone().ok_or_else(|| {
            AttnError::Unsupported("ZeRO reduce before the parameters were broadcast".into())
        })?;
        let flat = flat_grads(model, grads, &layout, &self.device)?;
        let mut shards = Vec::with_capacity(flat.len());
        for (unit, g) in layout.units.iter().zip(flat) {
            shards.push(self.reduce_unit(&layout, unit, g)?);
        }
        self.norm_of(shards)
    }

    fn step(&mut self, lr: f64, model: Transformer<Ad>) -> Result<Transformer<Ad>, AttnError> {
        let grads = std::mem::take(&mut self.grads);
        if grads.len() != self.master.len() {
            return Err(AttnError::Unsupported(
                "a ZeRO step without its reduced gradients".into(),
            ));
        }
        // Global-norm clipping as the replicated loop's (`clip_global_norm`): one scale, on the
        // device, for every shard.
        let scale = self
            .squared_norm
            .take()
            .map(|sq| clip_scale(sq, self.clip_norm));
        let masters = std::mem::take(&mut self.master);
        let states: Vec<Option<Moments>> = match self.state.take() {
            Some(s) => s.into_iter().map(Some).collect(),
            None => vec![None; masters.len()],
        };
        let mut updated = Vec::with_capacity(masters.len());
        let mut moments = Vec::with_capacity(masters.len());
        for ((w, g), s) in masters.into_iter().zip(grads).zip(states) {
            let g = match &scale {
                Some(s) => g * s.clone(),
                None => g,
            };
            let (w, m) = self.adamw(lr, w, g, s);
            updated.push(w);
            moments.push(m);
        }
        self.state = Some(moments);
        self.stats.steps += 1;
        match self.stage {
            ZeroStage::Three => {
                self.master = updated;
                Ok(self.release(model))
            }
            _ => {
                let whole = self.gather_units(updated)?;
                Ok(self.set_whole(model, &whole))
            }
        }
    }

    fn per_block(&mut self) -> Option<&mut dyn BlockSharding<Ad>> {
        match self.stage {
            ZeroStage::Three => Some(self),
            _ => None,
        }
    }

    fn whole(&mut self, model: Transformer<Ad>) -> Result<Transformer<Ad>, AttnError> {
        if self.gathered {
            return Ok(model);
        }
        let parts = self.master.clone();
        let whole = self.gather_units(parts)?;
        Ok(self.set_whole(model, &whole))
    }

    fn optimizer_bytes(&mut self, model: &Transformer<Ad>) -> Result<Vec<u8>, AttnError> {
        let layout = self
            .layout
            .clone()
            .ok_or_else(|| AttnError::Unsupported("ZeRO record before the layout".into()))?;
        let record = match self.state.clone() {
            None => OptimizerRecord::default(),
            Some(state) => {
                let mut whole = Vec::with_capacity(state.len());
                for s in state {
                    whole.push(Moments {
                        time: s.time,
                        m: self.gather(s.m)?,
                        v: self.gather(s.v)?,
                    });
                }
                to_record(model, &layout, &whole)
            }
        };
        NamedMpkBytesRecorder::<FullPrecisionSettings>::new()
            .record(record, ())
            .map_err(|e| AttnError::invalid("checkpoint", format!("optim.mpk: {e}")))
    }

    fn publish_sharded(
        &mut self,
        out: &std::path::Path,
        step: usize,
        files: Option<Vec<(&'static str, Vec<u8>)>>,
    ) -> Result<(), AttnError> {
        Zero::publish_sharded(self, out, step, files)
    }

    fn load_sharded(
        &mut self,
        model: &Transformer<Ad>,
        saved: &crate::run_state::published::Published,
    ) -> Result<(), AttnError> {
        Zero::load_sharded(self, model, saved)
    }

    fn load_optimizer(
        &mut self,
        model: &Transformer<Ad>,
        bytes: &[u8],
        path: &std::path::Path,
    ) -> Result<(), AttnError> {
        let err = |e: &dyn std::fmt::Display| {
            AttnError::invalid("checkpoint", format!("{}: {e}", path.display()))
        };
        let record: OptimizerRecord = NamedMpkBytesRecorder::<FullPrecisionSettings>::new()
            .load(bytes.to_vec(), &self.device)
            .map_err(|e| err(&e))?;
        let layout = self.layout_of(model)?.clone();
        let rank = self.group().rank();
        self.state = from_record(model, &layout, record)
            .map_err(|e| err(&e))?
            .map(|whole| {
                layout
                    .units
                    .iter()
                    .zip(whole)
                    .map(|(u, w)| {
                        let r = layout.shard(u, rank);
                        Moments {
                            time: w.time,
                            m: owned(w.m.slice(r.clone())),
                            v: owned(w.v.slice(r)),
                        }
                    })
                    .collect()
            });
        Ok(())
    }
}

impl BlockSharding<Ad> for Zero {
    fn begin(&mut self, model: Transformer<Ad>) -> Result<Transformer<Ad>, AttnError> {
        if self.layout.is_none() {
            return Err(AttnError::Unsupported(
                "ZeRO-3 step before the parameters were broadcast".into(),
            ));
        }
        self.part_grads = vec![None; self.master.len()];
        if !self.gathered {
            return Ok(model);
        }
        // After a checkpoint the slices are views of the whole units: copies, so releasing
        // the model frees the units.
        self.master = std::mem::take(&mut self.master)
            .into_iter()
            .map(owned)
            .collect();
        Ok(self.release(model))
    }

    fn hooks(&mut self) -> &mut dyn PartHooks<Ad> {
        self
    }

    fn finish(&mut self) -> Result<f32, AttnError> {
        let layout = self.layout.clone().expect("layout before a step");
        let shards = std::mem::take(&mut self.part_grads)
            .into_iter()
            .zip(&layout.units)
            .map(|(g, u)| {
                g.ok_or_else(|| {
                    AttnError::invalid(
                        "--zero",
                        format!(
                            "the gradient of {} is missing (a trained part the loss does not \
                             reach)",
                            u.name
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.norm_of(shards)
    }
}

impl PartHooks<Ad> for Zero {
    fn gather(
        &mut self,
        model: &Transformer<Ad>,
        parts: &[Part],
    ) -> Result<Option<Transformer<Ad>>, AttnError> {
        if self.gathered {
            return Ok(None);
        }
        let layout = self.layout.clone().expect("layout before a step");
        let mut out: Option<Transformer<Ad>> = None;
        for &part in parts {
            let Some(u) = layout.unit_of(part) else {
                continue;
            };
            let whole = [self.gather(self.master[u].clone())?];
            let m = out.take().unwrap_or_else(|| model.clone());
            out = Some(m.map(&mut SetUnits::unit(&layout, u, &whole, self.device)));
        }
        Ok(out)
    }

    fn reduce(
        &mut self,
        model: &Transformer<Ad>,
        part: Part,
        grads: &mut GradientsParams,
    ) -> Result<(), AttnError> {
        let layout = self.layout.clone().expect("layout before a step");
        let Some(u) = layout.unit_of(part) else {
            return Ok(());
        };
        let unit = &layout.units[u];
        let flat = flat_grads_of(model, grads, std::slice::from_ref(unit), &self.device)?;
        let g = flat.into_iter().next().expect("one unit");
        let shard = self.reduce_unit(&layout, unit, g)?;
        self.part_grads[u] = Some(shard);
        Ok(())
    }
}
