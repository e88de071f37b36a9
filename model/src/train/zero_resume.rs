//! A replicated run resuming a ZeRO run's sharded checkpoint: the whole AdamW record of the
//! model's trainable parameters assembled from the ranks' shards (a replicated run holds the
//! whole state anyway), and the check that a sharded state's units are a model's.

use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::record::AdaptorRecord;
use burn::optim::{AdamWState, AdaptiveMomentumState};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use burn_ascend::{AttnError, OptimBackend};

use crate::model::transformer::Transformer;
use crate::run_state::published::{Published, MANIFEST};
use crate::run_state::shards::ShardedState;
use crate::train::optim::FusedAdamW;
use crate::train::zero_layout::Layout;

/// A replicated optimizer's record over `B` (`optim.mpk`'s content).
pub type WholeRecord<B> = <burn::optim::adaptor::OptimizerAdaptor<
    FusedAdamW<B>,
    Transformer<B>,
    B,
> as burn::optim::Optimizer<Transformer<B>, B>>::Record;

struct FromShards<'a, B: AutodiffBackend + OptimBackend> {
    zero: &'a ShardedState,
    dir: &'a Path,
    /// Parameter id → (unit, range in its flat buffer).
    slots: std::collections::HashMap<burn::module::ParamId, (usize, std::ops::Range<usize>)>,
    out: WholeRecord<B>,
    failed: Option<AttnError>,
}

impl<B: AutodiffBackend + OptimBackend> ModuleVisitor<B> for FromShards<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some((u, range)) = self.slots.remove(&param.id) else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        let value = param.val();
        let (dims, device) = (value.dims(), value.device());
        let read = |t: usize| -> Result<Tensor<B::InnerBackend, D>, AttnError> {
            let v = self.zero.read_range(self.dir, u, t, range.clone())?;
            Ok(Tensor::from_data(TensorData::new(v, dims), &device))
        };
        match (read(1), read(2)) {
            (Ok(m), Ok(v)) => {
                let state = AdamWState {
                    momentum: AdaptiveMomentumState {
                        time: self.zero.adam_steps,
                        moment_1: m,
                        moment_2: v,
                        max_moment_2: None,
                    },
                };
                self.out
                    .insert(param.id, AdaptorRecord::from_state::<D>(state));
            }
            (Err(e), _) | (_, Err(e)) => self.failed = Some(e),
        }
    }
}

/// The whole optimizer record of `model`'s trainable parameters assembled from the sharded
/// checkpoint `saved` — for a replicated run resuming a ZeRO run's checkpoint (it holds the
/// whole state anyway); empty when saved before the first step. The checkpoint's units must
/// be `model`'s.
pub fn whole_record_from_shards<B: AutodiffBackend + OptimBackend>(
    model: &Transformer<B>,
    saved: &Published,
) -> Result<WholeRecord<B>, AttnError> {
    let zero =
        saved.manifest.zero.as_ref().ok_or_else(|| {
            AttnError::Unsupported("a whole checkpoint read as a sharded one".into())
        })?;
    let layout = Layout::of(model, 1)?;
    check_units(&layout, zero, saved)?;
    if zero.adam_steps == 0 {
        return Ok(WholeRecord::<B>::default());
    }
    let slots = layout
        .param_slots()
        .into_iter()
        .map(|(id, (u, range, _))| (id, (u, range)))
        .collect();
    let mut v = FromShards {
        zero,
        dir: &saved.dir,
        slots,
        out: WholeRecord::<B>::default(),
        failed: None,
    };
    model.visit(&mut v);
    match v.failed {
        Some(e) => Err(e),
        None => Ok(v.out),
    }
}

/// Refuses a sharded state whose units (names, elements) are not `layout`'s, naming the
/// manifest.
pub(crate) fn check_units(
    layout: &Layout,
    zero: &ShardedState,
    saved: &Published,
) -> Result<(), AttnError> {
    let ours: Vec<(&str, usize)> = layout
        .units
        .iter()
        .map(|u| (u.name.as_str(), u.len))
        .collect();
    let theirs: Vec<(&str, usize)> = zero
        .units
        .iter()
        .map(|u| (u.name.as_str(), u.elements))
        .collect();
    if ours != theirs {
        return Err(AttnError::invalid(
            "checkpoint",
            format!(
                "{}: its sharded state's units {theirs:?} are not this model's {ours:?}",
                saved.dir.join(MANIFEST).display()
            ),
        ));
    }
    Ok(())
}
