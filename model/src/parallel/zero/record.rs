//! The whole optimizer record of a sharded run, in the replicated run's format: the
//! [`FusedAdamW`] record (Burn's AdamW layout, one moment pair per parameter keyed by its id), so
//! `optim.mpk` does not depend on how the run was sharded.

use std::collections::HashMap;
use std::ops::Range;

use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::record::AdaptorRecord;
use burn::optim::{AdamWState, AdaptiveMomentumState, Optimizer};
use burn::tensor::Tensor;
use burn_ascend::backend::Ascend;

use crate::model::transformer::Transformer;
use crate::train::optim::FusedAdamW;
use crate::train::zero_layout::Layout;

type Ad = Autodiff<Ascend>;

/// The replicated training loop's optimizer (see `train/eager.rs`).
pub type ReplicatedOptimizer = OptimizerAdaptor<FusedAdamW<Ad>, Transformer<Ad>, Ad>;
/// Its record: `optim.mpk`.
pub type OptimizerRecord = <ReplicatedOptimizer as Optimizer<Transformer<Ad>, Ad>>::Record;

/// AdamW's moments of one unit, whole (gathered) or this rank's slice.
#[derive(Clone)]
pub struct Moments {
    /// Steps taken.
    pub time: usize,
    /// First moment.
    pub m: Tensor<Ascend, 1>,
    /// Second moment.
    pub v: Tensor<Ascend, 1>,
}

struct ToRecord<'a> {
    /// Parameter id → (unit, range in its buffer, shape).
    slots: HashMap<ParamId, (usize, Range<usize>, Vec<usize>)>,
    whole: &'a [Moments],
    out: OptimizerRecord,
}

impl ModuleVisitor<Ad> for ToRecord<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
        let Some((u, range, dims)) = self.slots.remove(&param.id) else {
            return;
        };
        let dims: [usize; D] = std::array::from_fn(|i| dims[i]);
        let w = &self.whole[u];
        let state = AdamWState {
            momentum: AdaptiveMomentumState {
                time: w.time,
                moment_1: w.m.clone().slice(range.clone()).reshape(dims),
                moment_2: w.v.clone().slice(range).reshape(dims),
                max_moment_2: None,
            },
        };
        self.out
            .insert(param.id, AdaptorRecord::from_state::<D>(state));
    }
}

/// The record of the whole moments `whole` (one per unit of `layout`) of `model`'s parameters.
pub fn to_record(model: &Transformer<Ad>, layout: &Layout, whole: &[Moments]) -> OptimizerRecord {
    let mut v = ToRecord {
        slots: layout.param_slots(),
        whole,
        out: OptimizerRecord::default(),
    };
    model.visit(&mut v);
    v.out
}

/// A parameter's step count and flattened moments.
type Flat = (usize, Tensor<Ascend, 1>, Tensor<Ascend, 1>);

struct FromRecord<'a> {
    record: &'a mut OptimizerRecord,
    want: HashMap<ParamId, usize>,
    /// Per slot (layout order): time and the flattened moments.
    out: Vec<Option<Flat>>,
}

impl ModuleVisitor<Ad> for FromRecord<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
        let Some(&i) = self.want.get(&param.id) else {
            return;
        };
        let Some(rec) = self.record.remove(&param.id) else {
            return;
        };
        let state: AdamWState<Ascend, D> = rec.into_state::<D>();
        let m = state.momentum;
        let n = m.moment_1.shape().num_elements();
        self.out[i] = Some((m.time, m.moment_1.reshape([n]), m.moment_2.reshape([n])));
    }
}

/// Per unit of `layout`: the whole moments `record` holds for `model`'s trainable parameters
/// (flattened, padded with zeros); `None` when the record is empty (saved before the first
/// step). A parameter the record lacks, or a moment of another size, is an error naming it.
pub fn from_record(
    model: &Transformer<Ad>,
    layout: &Layout,
    mut record: OptimizerRecord,
) -> Result<Option<Vec<Moments>>, String> {
    if record.is_empty() {
        return Ok(None);
    }
    let want: HashMap<ParamId, usize> = layout
        .units
        .iter()
        .flat_map(|u| &u.slots)
        .enumerate()
        .map(|(i, s)| (s.id, i))
        .collect();
    let mut v = FromRecord {
        record: &mut record,
        out: vec![None; want.len()],
        want,
    };
    model.visit(&mut v);
    let mut per_slot = v.out.into_iter();
    let device = model.embed_tokens.weight.val().device();
    let mut units = Vec::new();
    for unit in &layout.units {
        let (mut time, mut ms, mut vs) = (None, Vec::new(), Vec::new());
        for s in &unit.slots {
            let Some((t, m, v)) = per_slot.next().flatten() else {
                return Err(format!(
                    "no AdamW state for a {:?} parameter of {} (the record is not this model's)",
                    s.dims, unit.name
                ));
            };
            if m.dims()[0] != s.len() || v.dims()[0] != s.len() {
                return Err(format!(
                    "AdamW state of {} elements for a {:?} parameter of {}",
                    m.dims()[0],
                    s.dims,
                    unit.name
                ));
            }
            if time.is_some_and(|x| x != t) {
                return Err(format!("AdamW states of {} at different steps", unit.name));
            }
            time = Some(t);
            ms.push(m);
            vs.push(v);
        }
        let pad =
            |parts| crate::train::zero_layout::concat_padded(parts, unit.len, unit.padded, &device);
        units.push(Moments {
            time: time.unwrap_or(0),
            m: pad(ms),
            v: pad(vs),
        });
    }
    Ok(Some(units))
}
