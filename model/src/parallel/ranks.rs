//! Data-parallel runs in one process: one thread per rank, each with its own device and HCCL
//! communicator (`HcclCommInitAll`), training with plain data parallelism
//! ([`train_data_parallel`], [`DataParallel`]) or ZeRO's sharded state ([`train_zero`],
//! [`Zero`]). Above both strategies, which the loop itself reaches only through
//! [`crate::train::sync`].

use burn::backend::Autodiff;
use burn_ascend::backend::collective::ProcessGroup;
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::AttnError;

use crate::load::data::Packer;
use crate::model::transformer::Transformer;
use crate::parallel::ddp::{hccl, DataParallel, SyncStats};
use crate::parallel::zero::sharded::ZeroStats;
use crate::parallel::zero::{Zero, ZeroStage};
use crate::run_state::state::TrainState;
use crate::train::eager::{train_with, Batches, StepReport, TrainOptions};
use crate::train::sync::GradientSync;

type Ad = Autodiff<Ascend>;

/// The outcome of [`train_data_parallel`]: rank 0's model and loss curve (every rank's model
/// is the same), and rank 0's collective traffic.
pub struct DataParallelRun {
    /// Rank 0's trained model.
    pub model: Transformer<Ad>,
    /// The run's state (losses: the mean over ranks, i.e. the global batch's loss).
    pub state: TrainState,
    /// Rank 0's collective traffic.
    pub stats: SyncStats,
}

/// Trains `models` (one replica per rank, each on its own device, of one kind) data-parallel,
/// one thread per rank in this process (`HcclCommInitAll`): at step `s` rank `r` trains on
/// batch `s·N + r` of `packer`'s stream. Rank 0 reports each step to `on_step` and alone writes
/// the checkpoints. A rank that fails ends every rank (its communicator is destroyed, so the
/// others' next collective fails instead of waiting); the error names each failing rank.
pub fn train_data_parallel(
    models: Vec<Transformer<Ad>>,
    state: TrainState,
    resume_optimizer: bool,
    packer: &Packer,
    opts: &TrainOptions,
    bucket_bytes: usize,
    on_step: impl FnMut(&StepReport),
) -> Result<DataParallelRun, AttnError> {
    let (model, state, mut reports) = run_ranks(
        models,
        state,
        resume_optimizer,
        packer,
        opts,
        |group| Ok(DataParallel::new(group, bucket_bytes)),
        |sync| sync.stats(),
        on_step,
    )?;
    Ok(DataParallelRun {
        model,
        state,
        stats: reports.swap_remove(0),
    })
}

/// The outcome of [`train_zero`]: rank 0's model and loss curve, rank 0's collective traffic,
/// and each rank's optimizer-state bytes measured from its device's memory pool at the end.
pub struct ZeroRun {
    /// Rank 0's trained model (whole).
    pub model: Transformer<Ad>,
    /// The run's state.
    pub state: TrainState,
    /// Rank 0's collective traffic.
    pub stats: ZeroStats,
    /// Per rank: the bytes its sharded AdamW state held in the pool (see
    /// [`Zero::release_optimizer_state`]).
    pub optimizer_state_bytes: Vec<u64>,
}

/// [`train_data_parallel`] with the training state sharded at ZeRO `stage` ([`Zero`]).
pub fn train_zero(
    models: Vec<Transformer<Ad>>,
    state: TrainState,
    resume_optimizer: bool,
    packer: &Packer,
    opts: &TrainOptions,
    stage: ZeroStage,
    on_step: impl FnMut(&StepReport),
) -> Result<ZeroRun, AttnError> {
    let (model, state, reports) = run_ranks(
        models,
        state,
        resume_optimizer,
        packer,
        opts,
        |group| Zero::new(group, stage, opts.weight_decay, opts.clip_norm),
        |sync| (sync.stats(), sync.release_optimizer_state()),
        on_step,
    )?;
    Ok(ZeroRun {
        model,
        state,
        stats: reports[0].0,
        optimizer_state_bytes: reports.iter().map(|r| r.1).collect(),
    })
}

/// The ranks' threads: each makes its sync with `make` from its group, trains, and ends with
/// `report` of its sync; rank 0's model and state and every rank's report in rank order.
#[allow(clippy::too_many_arguments)]
fn run_ranks<S, R>(
    models: Vec<Transformer<Ad>>,
    state: TrainState,
    resume_optimizer: bool,
    packer: &Packer,
    opts: &TrainOptions,
    make: impl Fn(ProcessGroup) -> Result<S, AttnError> + Sync,
    report: impl Fn(&mut S) -> R + Sync,
    on_step: impl FnMut(&StepReport),
) -> Result<(Transformer<Ad>, TrainState, Vec<R>), AttnError>
where
    S: GradientSync<Ad>,
    R: Send,
{
    let devices: Vec<AscendDevice> = models
        .iter()
        .map(|m| m.embed_tokens.weight.val().device())
        .collect();
    let groups = ProcessGroup::local(&devices).map_err(hccl)?;
    let n = groups.len();
    let (make, report) = (&make, &report);
    std::thread::scope(|s| {
        let mut ranks = models.into_iter().zip(groups);
        let (model0, group0) = ranks.next().expect("at least one rank");
        let handles: Vec<_> = ranks
            .enumerate()
            .map(|(i, (model, group))| {
                let state = state.clone();
                let mut packer = packer.clone();
                s.spawn(move || {
                    let mut sync = make(group)?;
                    let mut batches = Batches::rank(&mut packer, i + 1, n);
                    let r = train_with(
                        model,
                        state,
                        resume_optimizer,
                        &mut batches,
                        opts,
                        Some(&mut sync),
                        |_| {},
                    );
                    r.map(|_| report(&mut sync))
                })
            })
            .collect();
        let mut packer0 = packer.clone();
        let mut batches = Batches::rank(&mut packer0, 0, n);
        let mut reports = Vec::with_capacity(n);
        // Rank 0's communicator is destroyed at the end of this (with its sync, or at once
        // when the sync could not be made): if rank 0 failed, the others stop waiting for it.
        let r0 = make(group0).and_then(|mut sync| {
            let r = train_with(
                model0,
                state,
                resume_optimizer,
                &mut batches,
                opts,
                Some(&mut sync),
                on_step,
            );
            reports.push(report(&mut sync));
            r
        });
        let mut failures: Vec<String> = Vec::new();
        if let Err(e) = &r0 {
            failures.push(format!("rank 0: {e}"));
        }
        for (i, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(r)) => reports.push(r),
                Ok(Err(e)) => failures.push(format!("rank {}: {e}", i + 1)),
                Err(p) => failures.push(format!(
                    "rank {}: panicked: {}",
                    i + 1,
                    p.downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied())
                        .unwrap_or("panic")
                )),
            }
        }
        match r0 {
            Ok((model, state)) if failures.is_empty() => Ok((model, state, reports)),
            _ => Err(AttnError::Device {
                op: "data-parallel".into(),
                call: "train".into(),
                status: None,
                message: failures.join("; "),
            }),
        }
    })
}
