//! `finetune` as one process per NPU, the way torchrun and Atlas clusters launch it: `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT` name this process's rank, the
//! number of processes, its device on its node and where rank 0's rendezvous listens. The
//! global rank is the HCCL rank, the local rank the device, so several nodes form one job.
//! Every process builds the model, joins the communicator (`HcclGetRootInfo` on rank 0, the
//! root info over the rendezvous, `HcclCommInitRootInfo`), and trains its share; rank 0 alone
//! reports, checks and writes. `WORLD_SIZE=1` trains alone.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use burn::backend::Autodiff;
use burn_ascend::backend::collective::ProcessGroup;
use burn_ascend::backend::{is_available, Ascend, AscendDevice, AscendKind};
use burn_ascend_cann::hccl::LaunchEnv;
use burn_ascend_cli::args::{ExampleDevice, FinetuneArgs as Args};
use burn_ascend_model::parallel::cp::{
    share_weights, train_context_parallel_rank, Comm, HcclComm, RankComms,
};
use burn_ascend_model::parallel::ddp::{materialize, DataParallel, DEFAULT_BUCKET_BYTES};
use burn_ascend_model::parallel::zero::{Zero, ZeroStage};
use burn_ascend_model::train::{train_with, Batches, TrainOptions, TrainState};
use burn_ascend_model::{Packer, Transformer};

use super::{print_ddp, run_on, Trainer};

type Ad = Autodiff<Ascend>;

/// The launch this process is one rank of (`None`: not launched, or `WORLD_SIZE=1`), refused
/// before anything runs where `args` cannot train as one.
pub fn launch_of(args: &Args) -> Result<Option<LaunchEnv>, String> {
    let Some(env) = LaunchEnv::from_env().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    if env.world_size == 1 {
        return Ok(None);
    }
    if args.device == ExampleDevice::Cpu {
        return Err(format!(
            "--device cpu cannot train as one process of a launch (RANK={}, WORLD_SIZE={}, \
             LOCAL_RANK={}, MASTER_ADDR and MASTER_PORT are set, as torchrun sets them): the \
             ranks' gradients meet over HCCL; use --device sim (the simulation) or --device \
             ascend, or unset WORLD_SIZE and RANK to train alone",
            env.rank, env.world_size, env.local_rank
        ));
    }
    if args.devices > 1 {
        return Err(format!(
            "--devices {} with WORLD_SIZE={}: in a launch each process drives one device \
             (LOCAL_RANK); start one process per device instead (torchrun --nproc-per-node N)",
            args.devices, env.world_size
        ));
    }
    Ok(Some(env))
}

/// Whether this process reports and writes: not launched, or rank 0.
pub fn is_reporter() -> bool {
    LaunchEnv::from_env()
        .ok()
        .flatten()
        .is_none_or(|l| l.rank == 0 || l.world_size == 1)
}

/// This rank's device: `LOCAL_RANK` of the node, refused naming the variable when the node
/// has no such device. A simulated node has `$BURN_ASCEND_SIM_DEVICES` devices, else
/// `$LOCAL_WORLD_SIZE` (torchrun's processes on this node), else 8 (an Atlas 800T A2).
fn rank_device(args: &Args, env: &LaunchEnv) -> Result<AscendDevice, String> {
    let kind = if args.device == ExampleDevice::Sim {
        if std::env::var_os("BURN_ASCEND_SIM_DEVICES").is_none() {
            let n = std::env::var("LOCAL_WORLD_SIZE")
                .ok()
                .and_then(|v| v.trim().parse::<u32>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(8);
            burn_ascend::backend::collective::simulate_devices(n);
        }
        AscendKind::Simulation
    } else {
        AscendKind::Npu
    };
    let device = AscendDevice {
        kind,
        index: env.local_rank,
    };
    is_available(&device).map_err(|e| {
        format!(
            "invalid LOCAL_RANK: {} is not a device of this node ({e}; {})",
            env.local_rank,
            if kind == AscendKind::Simulation {
                "the simulated node has $BURN_ASCEND_SIM_DEVICES, else $LOCAL_WORLD_SIZE devices"
            } else {
                "ASCEND_RT_VISIBLE_DEVICES limits the visible NPUs"
            }
        )
    })?;
    Ok(device)
}

/// Trains this process's rank of the launch `env`: context-parallel with `--cp N`
/// (`WORLD_SIZE = N`, or `N·M`: context × data parallel), else data-parallel (ZeRO with
/// `--zero K`, LoRA's adapters alike).
pub fn run_rank(args: Args, env: LaunchEnv) -> Result<(), String> {
    let device = rank_device(&args, &env)?;
    let gap = Rc::new(Cell::new(None));
    let n = env.world_size as usize;
    if args.cp > 1 {
        let (cp, m) = (args.cp, n / args.cp);
        let trainer = context_parallel_rank(&args, env, device, gap.clone());
        run_on::<Ad>(args, device, Some(device), trainer)?;
        if let Some(gap) = gap.get() {
            // The line of the threads' run (`run_context_parallel`).
            let what = if m > 1 {
                format!("{cp} devices × data-parallel {m}")
            } else {
                format!("{cp} devices")
            };
            println!("finetune: context-parallel {what}, max |Δloss| vs 1 device {gap:.3e}");
        }
        return Ok(());
    }
    let zero = args.zero;
    let trainer = data_parallel_rank(&args, env, device, gap.clone());
    run_on::<Ad>(args, device, Some(device), trainer)?;
    print_ddp(n, zero, gap.get());
    Ok(())
}

/// The largest loss difference between `losses` (a run over `ranks` data-parallel ranks) and
/// `reference` trained on this device alone on the same global batches for `k` steps.
fn one_device_gap(
    reference: Transformer<Ad>,
    packer: &mut Packer,
    opts: &TrainOptions,
    ranks: usize,
    losses: &[f32],
    k: usize,
    folder: &str,
) -> Result<f32, String> {
    let tmp = opts.out.join(folder);
    let ref_opts = TrainOptions {
        stop_after: Some(k),
        out: tmp.clone(),
        ..opts.clone()
    };
    let (_, single) = train_with(
        reference,
        TrainState::default(),
        false,
        &mut Batches::global(packer, ranks),
        &ref_opts,
        None,
        |_| {},
    )
    .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(losses[..k]
        .iter()
        .zip(&single.losses)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs())))
}

/// Data parallelism (or ZeRO at `--zero K`) with this process as rank `env.rank`: at step `s`
/// it trains on batch `s·N + rank` of the stream, as the threads of `--devices N` do. With
/// `--check-ddp`, rank 0 then trains the first global batches alone from its initial weights.
fn data_parallel_rank<'a>(
    args: &Args,
    env: LaunchEnv,
    device: AscendDevice,
    gap: Rc<Cell<Option<f32>>>,
) -> Trainer<'a, Ad> {
    let (resume, check) = (args.resume, args.check_ddp);
    // Checked in `run` before anything ran.
    let stage = ZeroStage::from_flag(args.zero).ok().flatten();
    Box::new(move |model, state, packer, opts, on_step| {
        let n = env.world_size as usize;
        let rank0 = env.rank == 0;
        let reference = (check && rank0).then(|| {
            materialize(&model);
            (model.clone(), packer.clone())
        });
        let group = ProcessGroup::from_launch(&env, device.kind).map_err(|e| e.to_string())?;
        let simulated = if device.kind == AscendKind::Simulation {
            ", simulated"
        } else {
            ""
        };
        let mut batches = Batches::rank(packer, env.rank as usize, n);
        let mut report = |r: &_| {
            if rank0 {
                on_step(r)
            }
        };
        let (model, state) = match stage {
            Some(stage) => {
                let mut zero = Zero::new(group, stage, opts.weight_decay, opts.clip_norm)
                    .map_err(|e| e.to_string())?;
                let out = train_with(
                    model,
                    state,
                    resume,
                    &mut batches,
                    opts,
                    Some(&mut zero),
                    &mut report,
                )
                .map_err(|e| e.to_string())?;
                let s = zero.stats();
                let held = zero.held_state_bytes();
                let bytes = zero.release_optimizer_state();
                // Every rank: what it held of the sharded state and its peak memory, so a
                // launch shows no process ever held the whole of it.
                eprintln!(
                    "finetune: rank {} of {n}: sharded state held {held} B of {} B whole; \
                     shard written {} B, read at resume {} B; AdamW state {bytes} B in the \
                     pool; peak resident memory {} kB (VmHWM)",
                    env.rank,
                    zero.whole_state_bytes(),
                    s.shard_bytes_written,
                    s.shard_bytes_read,
                    peak_resident_kb().map_or("unknown".into(), |k| k.to_string()),
                );
                if rank0 {
                    println!(
                        "finetune: zero {} over {n} processes (HCCL{simulated}): per step {} \
                         reduce-scatter(s), {} all-gather(s); rank 0's AdamW state {bytes} B \
                         (measured from its memory pool)",
                        stage.number(),
                        s.reduce_scatters.checked_div(s.steps).unwrap_or(0),
                        s.all_gathers.checked_div(s.steps).unwrap_or(0),
                    );
                }
                out
            }
            None => {
                let mut dp = DataParallel::new(group, DEFAULT_BUCKET_BYTES);
                let out = train_with(
                    model,
                    state,
                    resume,
                    &mut batches,
                    opts,
                    Some(&mut dp),
                    &mut report,
                )
                .map_err(|e| e.to_string())?;
                let s = dp.stats();
                if let (true, Some(per_step)) = (rank0, s.gradient_all_reduces.checked_div(s.steps))
                {
                    println!(
                        "finetune: data-parallel over {n} processes (HCCL{simulated}): {per_step} \
                         all-reduce(s) of gradients per step"
                    );
                }
                out
            }
        };
        if let Some((reference, mut p)) = reference {
            let k = state.losses.len().min(if stage.is_some() { 5 } else { 3 });
            let losses = state.losses.clone();
            gap.set(Some(one_device_gap(
                reference,
                &mut p,
                opts,
                n,
                &losses,
                k,
                ".check-ddp-1-device",
            )?));
        }
        Ok((model, state))
    })
}

/// Context parallelism with this process as rank `env.rank` of `WORLD_SIZE = N·M` (`--cp N`):
/// its replica made rank 0's, then, as the threads of `--cp N --devices M` are laid out,
/// context-parallel rank `rank mod N` of data-parallel group `rank / N`, each step's batch of
/// a group split across its N processes. With M > 1 the world communicator is split into the
/// context-parallel groups (consecutive ranks) and the data-parallel groups (ranks `N` apart).
/// With `--check-cp`, rank 0 then trains the first (global) batches alone.
fn context_parallel_rank<'a>(
    args: &Args,
    env: LaunchEnv,
    device: AscendDevice,
    gap: Rc<Cell<Option<f32>>>,
) -> Trainer<'a, Ad> {
    let (resume, check, n) = (args.resume, args.check_cp, args.cp);
    Box::new(move |model, state, packer, opts, on_step| {
        let err = |e: burn_ascend::AttnError| e.to_string();
        let hccl = |e: burn_ascend::backend::HcclError| e.to_string();
        let rank0 = env.rank == 0;
        let world_size = env.world_size as usize;
        let m = world_size / n;
        let world = ProcessGroup::from_launch(&env, device.kind).map_err(hccl)?;
        let (cp, dp) = if m > 1 {
            let cp_groups: Vec<Vec<usize>> =
                (0..m).map(|i| (i * n..(i + 1) * n).collect()).collect();
            let dp_groups: Vec<Vec<usize>> = (0..n)
                .map(|j| (0..m).map(|i| i * n + j).collect())
                .collect();
            let cp = world.split(&cp_groups).map_err(hccl)?;
            let dp = world.split(&dp_groups).map_err(hccl)?;
            (Some(cp), Some(dp))
        } else {
            (None, None)
        };
        let world: Comm<Ascend> = Arc::new(HcclComm::new(world));
        materialize(&model);
        let model = share_weights(model, &world).map_err(err)?;
        let reference = (check && rank0).then(|| (model.clone(), packer.clone()));
        let arc = |g: ProcessGroup| Arc::new(HcclComm::new(g)) as Comm<Ascend>;
        let comms = match (cp, dp) {
            (Some(cp), Some(dp)) => {
                drop(world);
                RankComms {
                    cp: arc(cp),
                    dp: Some(arc(dp)),
                }
            }
            _ => RankComms {
                cp: world,
                dp: None,
            },
        };
        let (model, state) =
            train_context_parallel_rank(model, comms, state, resume, packer, opts, |r| on_step(r))
                .map_err(err)?;
        if let Some((reference, mut p)) = reference {
            let k = state.losses.len().min(3);
            let losses = state.losses.clone();
            gap.set(Some(one_device_gap(
                reference,
                &mut p,
                opts,
                m,
                &losses,
                k,
                ".check-cp-1-device",
            )?));
        }
        Ok((model, state))
    })
}

/// This process's peak resident memory in kB (`VmHWM` of `/proc/self/status`; Linux).
fn peak_resident_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
