//! Context parallelism with one process per rank, as torchrun launches them: this process
//! trains one rank of [`super::train_context_parallel`]'s run ([`train_context_parallel_rank`]),
//! its replica made equal to rank 0's first ([`share_weights`]).

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_ascend::{AttnError, TrainingBackend};

use super::gather::{Comm, CpBackend};
use super::train::{plan_run, train_rank, RankComms};
use crate::load::data::Packer;
use crate::model::transformer::Transformer;
use crate::run_state::state::TrainState;
use crate::train::eager::{StepReport, TrainOptions};

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// Rank 0's values of `model`'s parameters on every rank of `comm`: each parameter summed over
/// the ranks in rank order with every rank but 0 contributing zeros (`x + 0 + … = x`
/// exactly). Processes build their replicas apart, and a replica initialised on another
/// device need not draw the same values; after this they are equal, as
/// [`super::replicate`]'s are.
pub fn share_weights<B: AutodiffBackend>(
    model: Transformer<B>,
    comm: &Comm<Inner<B>>,
) -> Result<Transformer<B>, AttnError> {
    struct Share<'a, B: AutodiffBackend> {
        comm: &'a Comm<Inner<B>>,
        failed: Option<AttnError>,
    }
    impl<B: AutodiffBackend> ModuleMapper<B> for Share<'_, B> {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, t, mapper) = p.consume();
            if self.failed.is_some() {
                return Param::from_mapped_value(id, t, mapper);
            }
            let grad = t.is_require_grad();
            let dims = t.dims();
            let n: usize = dims.iter().product();
            let mut flat = t.clone().inner().reshape([n]);
            if self.comm.rank() != 0 {
                flat = flat.zeros_like();
            }
            match self.comm.all_reduce_sum(flat) {
                Ok(sum) => {
                    let mut v = Tensor::<B, D>::from_inner(sum.reshape(dims));
                    if grad {
                        v = v.require_grad();
                    }
                    Param::from_mapped_value(id, v, mapper)
                }
                Err(e) => {
                    self.failed = Some(e);
                    Param::from_mapped_value(id, t, mapper)
                }
            }
        }
    }
    let mut share = Share::<B> { comm, failed: None };
    let model = model.map(&mut share);
    match share.failed {
        Some(e) => Err(e),
        None => Ok(model),
    }
}

/// This process's rank of a context-parallel run, of one data-parallel group or (with
/// `comms.dp`) of several: the packer's stream as [`super::train_context_parallel`] reads it,
/// data-parallel rank `i` of `M` taking batch `s·M + i` at step `s`, each batch split across
/// its `comms.cp`. `model` must equal every other rank's ([`share_weights`]). Rank 0 (of both
/// groups) reports each step to `on_step` and alone writes the checkpoints; every rank returns
/// the run's state (the losses are the global ones, the same on every rank).
pub fn train_context_parallel_rank<B: CpBackend + TrainingBackend>(
    model: Transformer<B>,
    comms: RankComms<Inner<B>>,
    mut state: TrainState,
    resume_optimizer: bool,
    packer: &mut Packer,
    opts: &TrainOptions,
    mut on_step: impl FnMut(&StepReport),
) -> Result<(Transformer<B>, TrainState), AttnError> {
    let cp = comms.cp.size();
    let dp = comms.dp.as_ref().map_or(1, |d| d.size());
    let (run, end) = plan_run(&state, cp, dp, packer, opts, resume_optimizer)?;
    let rank0 = comms.cp.rank() == 0 && comms.dp.as_ref().is_none_or(|d| d.rank() == 0);
    let writer = rank0.then(|| state.clone());
    let mut losses = Vec::new();
    let model = train_rank(model, &run, comms, writer, |r, l| {
        losses.push(l);
        if rank0 {
            on_step(r);
        }
    })?;
    state.losses.extend(losses);
    state.step = end;
    state.devices = dp;
    Ok((model, state))
}
