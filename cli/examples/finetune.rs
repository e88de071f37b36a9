//! Fine-tune a small gpt-oss / Llama style transformer on packed variable-length batches with
//! learned attention sinks and alternating sliding-window / full causal layers, then sample
//! from it through the paged KV cache.
//!
//! `cargo run --release --example finetune [-- --steps N --data PATH --device cpu --resume
//!  --checkpoint HF_DIR --out DIR --batch-tokens N --seq-len N --lr X --seed N
//!  --stop-after N --no-samples --profile --checkpointing [block|balanced]]`
//!
//! `--checkpointing` (one device, or with `--devices N --zero 3`, which then gathers each
//! block's weights only while the block runs) keeps only each transformer block's input and
//! recomputes the block in backward (`burn_ascend_model::train::recompute`; the same gradients
//! bit for bit);
//! `--checkpointing balanced` is Burn's `BalancedCheckpointing` instead (it raises this model's
//! peak; kept for comparison).
//!
//! `--data` is a text file, a JSONL of `{"text": …}` records, or a JSONL of chat records
//! (`{"messages": [{"role", "content"}, …]}`, as Hugging Face's chat datasets hold them),
//! rendered with `--checkpoint`'s chat template and learned on the assistant's tokens only.
//!
//! With no arguments: a ≈3.0 M-parameter byte-level model on the bundled Shakespeare text,
//! AdamW with warmup + cosine decay and gradient clipping, on CPU. Writes `runs/finetune/`:
//! each checkpoint (every `--save-every` steps and at the end) into its own folder
//! `checkpoints/step-NNNNNN/` (`config.json` + `model.safetensors` with Hugging Face names,
//! Burn records of the model and the optimizer `model.mpk`, `optim.mpk` — under `--zero`, one
//! shard per rank of the master weights and moments instead — `state.json`, `loss.csv`,
//! `manifest.json`), published through the pointer file `LATEST`, which
//! `--resume` follows and verifies; the published `config.json`, `model.safetensors` and
//! `loss.csv` also in `runs/finetune/` itself, with `loss.png`. `--device sim` trains
//! `Autodiff<Ascend>` on the host simulation of the ACL ABI, `--device ascend` on a real NPU. On CPU the last line is `finetune: loss <first> -> <last>
//! over <steps> steps` (first step's loss, mean of the last ten steps); on `sim` / `ascend` it
//! is followed by `finetune: device <launches> launches, <syncs> syncs, <fallbacks> host
//! fallbacks per step` (means over the steps), and `--profile` prints the dispatch per op and,
//! on `sim`, the modelled Atlas A2 time of the top ops with `finetune: per step <L> launches,
//! host <H> µs, modelled device <D> µs (Atlas A2 roofline), host / device <R>`. `--dry-run`
//! (sim, with `--profile`) runs the steps with the simulated kernels off and writes nothing:
//! the modelled time of a model too large to compute here (`--model-config FILE` for a fresh
//! model of another config.json).
//! `--graph` (sim / ascend, one device, with `--pack fixed`: rows of exactly `--seq-len`
//! tokens, so every batch has the same shape) captures one whole training step as an ACL graph
//! after a warm-up step and replays it per step, printing `finetune: training launches per
//! step <x>`; what it cannot capture is refused as `unsupported: --graph with …`. With
//! `--graph`, the counters' means and `--profile` cover the replayed steps only (not the
//! warm-up and the capture), and the modelled device time counts the tasks each replay runs.
//! `--cp N` trains context-parallel (each step's batch split across N ranks; `--check-cp`
//! compares with one device). Under torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `MASTER_ADDR`, `MASTER_PORT` set) each process is one rank on device `LOCAL_RANK`
//! (`finetune/launch.rs`).

use std::path::PathBuf;
use std::time::Instant;

use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing as Balanced;
use burn::backend::{Autodiff, NdArray};
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_ascend::backend::collective::ProcessGroup;
use burn_ascend::backend::{is_available, Ascend, AscendDevice};
use burn_ascend::kernels::cpu::on_worker;
use burn_ascend::TrainingBackend;
// The command line (clap; in the library so that the tests parse it): `--help` for the flags.
use burn_ascend_cli::args::{Checkpointing, ExampleDevice, FinetuneArgs as Args, Pack};
use burn_ascend_model::load::budget;
use burn_ascend_model::load::data::training_packer;
use burn_ascend_model::model::hf_checkpoint::save_hf;
use burn_ascend_model::model::hf_checkpoint::LoadOptions;
use burn_ascend_model::model::lora::{self, LoraSettings, LoraTarget};
use burn_ascend_model::model::peft;
use burn_ascend_model::parallel::cp::{
    replicate, train_context_parallel, Comm, CpBackend, HcclComm, HostComm, RankComms,
};
use burn_ascend_model::parallel::ddp::{materialize, DEFAULT_BUCKET_BYTES};
use burn_ascend_model::parallel::ranks::{train_data_parallel, train_zero};
use burn_ascend_model::parallel::zero::{check_zero, ZeroStage};
use burn_ascend_model::profile::{self as dispatch, DispatchCounts};
use burn_ascend_model::train::graph::{train_graph, WARMUP_STEPS};
use burn_ascend_model::train::{
    init_model_with, train, train_with, Batches, GradientSync, Init, StepReport, TrainOptions,
    TrainState,
};
use burn_ascend_model::{ModelConfig, Packer, Tokenizer, Transformer};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

// The end-of-run report, in a folder so that Cargo does not take it for an example.
#[path = "finetune/report.rs"]
mod report;
// One process per rank under torchrun.
#[path = "finetune/launch.rs"]
mod launch;
use report::{plot_losses, print_samples};

/// mimalloc, keeping the memory a step frees for the next one (see
/// `burn_ascend_cli::host_alloc`); not in the test binary that includes this file.
#[cfg(not(test))]
#[global_allocator]
static GLOBAL: burn_ascend_cli::host_alloc::CountingAlloc =
    burn_ascend_cli::host_alloc::CountingAlloc;

fn main() {
    #[cfg(not(test))]
    burn_ascend_cli::host_alloc::keep_freed_memory();
    if let Err(e) = run(std::env::args_os()) {
        eprintln!("finetune: {e}");
        std::process::exit(2);
    }
}

/// The example on the command line `argv` (its first item the program name); the
/// integration tests run it in a child process through this.
pub fn run(argv: impl IntoIterator<Item = std::ffi::OsString>) -> Result<(), String> {
    let mut args = Args::parse_from(argv);
    burn_ascend_cli::release::apply_to_example(args.cann_release.as_deref(), args.device)?;
    // One process of a torchrun-style launch; refused here where it cannot train as one.
    let launch = launch::launch_of(&args)?;
    // An elastic restart runs the same command line: `--resume` before the first checkpoint
    // was published starts over.
    if args.resume
        && burn_ascend_model::run_state::published::published_step(&args.out)
            .map_err(|e| e.to_string())?
            .is_none()
    {
        if launch::is_reporter() {
            println!(
                "finetune: --resume: no checkpoint published in {} yet; starting from step 0",
                args.out.display()
            );
        }
        args.resume = false;
    }
    // LoRA's flags are checked, and a resumed LoRA run's base found, before anything runs.
    if let Some((base, _)) = lora_of(&args)? {
        args.checkpoint = Some(base);
    } else if args.merge_lora {
        return Err("--merge-lora needs a LoRA run (--lora-rank R)".into());
    }
    let resume = args.resume;
    if args.devices == 0 {
        return Err("--devices must be at least 1".into());
    }
    let ranks = launch
        .as_ref()
        .map_or(args.devices, |l| l.world_size as usize);
    if args.check_ddp && ranks < 2 {
        return Err("--check-ddp needs --devices N with N >= 2".into());
    }
    if args.check_ddp && args.resume {
        return Err("--check-ddp compares a fresh run; it cannot be combined with --resume".into());
    }
    // Under a launch, `--cp N` splits the WORLD_SIZE processes into context-parallel groups
    // of N, data-parallel across the groups.
    if let Some(e) = args.cp_refusal(launch.as_ref().map(|l| l.world_size as usize)) {
        return Err(e);
    }
    if let Some(e) = args.graph_refusal(launch.is_some()) {
        return Err(e);
    }
    let balanced = args.checkpointing == Some(Checkpointing::Balanced);
    // Per-block checkpointing with data parallelism only as ZeRO-3's per-block gathering.
    let zero3_blocks = args.checkpointing == Some(Checkpointing::Block) && args.zero == 3;
    if args.checkpointing.is_some()
        && (args.cp > 1 || ((args.devices > 1 || launch.is_some()) && !zero3_blocks))
    {
        return Err(
            "unsupported: --checkpointing with data or context parallelism (one device, or \
             --checkpointing block with --devices N --zero 3, which gathers the weights one \
             block at a time)"
                .into(),
        );
    }
    if args.dry_run {
        return run_dry(args, launch.is_some());
    }
    if args.zero > 0 {
        if args.cp > 1 {
            return Err(
                "unsupported: --zero with --cp (ZeRO shards plain data parallelism)".into(),
            );
        }
        if matches!(args.device, ExampleDevice::Cpu) {
            return Err(format!(
                "invalid --zero: --zero {} needs --device sim|ascend (the shards move over HCCL)",
                args.zero
            ));
        }
        // The training loop's optimizer is AdamW, which ZeRO shards (element-wise).
        check_zero(args.zero, ranks).map_err(|e| e.to_string())?;
    }
    if let Some(env) = launch {
        return launch::run_rank(args, env);
    }
    if args.cp > 1 {
        return run_context_parallel(args);
    }
    match args.device {
        ExampleDevice::Sim if balanced => run_on::<Autodiff<Ascend, Balanced>>(
            args,
            AscendDevice::sim(),
            Some(AscendDevice::sim()),
            single_device(resume),
        ),
        ExampleDevice::Cpu if args.dtype.float_dtype().is_some() => {
            Err("--dtype bf16|f16 needs --device sim|ascend (NdArray computes in f32 only)".into())
        }
        ExampleDevice::Cpu if args.devices > 1 => {
            Err("--devices N needs --device sim|ascend (data parallelism runs over HCCL)".into())
        }
        // The CPU's work driven from a rayon worker (see `cpu::on_worker`).
        ExampleDevice::Cpu if balanced => on_worker(move || {
            run_on::<Autodiff<NdArray, Balanced>>(
                args,
                Default::default(),
                None,
                single_device(resume),
            )
        }),
        ExampleDevice::Cpu => on_worker(move || {
            run_on::<Autodiff<NdArray>>(args, Default::default(), None, single_device(resume))
        }),
        // The Ascend backend on the host simulation of the ACL ABI (not CANN; slow: its
        // kernels are the CPU reference's).
        ExampleDevice::Sim if args.devices > 1 => {
            burn_ascend::backend::collective::simulate_devices(args.devices as u32);
            let device = AscendDevice::sim();
            let gap = std::rc::Rc::new(std::cell::Cell::new(None));
            let trainer = data_parallel(&args, device, gap.clone());
            let (n, zero) = (args.devices, args.zero);
            run_on::<Autodiff<Ascend>>(args, device, Some(device), trainer)?;
            print_ddp(n, zero, gap.get());
            Ok(())
        }
        ExampleDevice::Sim if args.graph => run_on::<Autodiff<Ascend>>(
            args,
            AscendDevice::sim(),
            Some(AscendDevice::sim()),
            graph_trainer(resume),
        ),
        ExampleDevice::Sim => run_on::<Autodiff<Ascend>>(
            args,
            AscendDevice::sim(),
            Some(AscendDevice::sim()),
            single_device(resume),
        ),
        ExampleDevice::Ascend => {
            let index = burn_ascend_cann::acl::default_device_id().map_err(|e| e.to_string())?;
            let device = AscendDevice::npu(index as u32);
            is_available(&device)?;
            if args.devices > 1 {
                let gap = std::rc::Rc::new(std::cell::Cell::new(None));
                let trainer = data_parallel(&args, device, gap.clone());
                let (n, zero) = (args.devices, args.zero);
                run_on::<Autodiff<Ascend>>(args, device, Some(device), trainer)?;
                print_ddp(n, zero, gap.get());
                return Ok(());
            }
            if balanced {
                return run_on::<Autodiff<Ascend, Balanced>>(
                    args,
                    device,
                    Some(device),
                    single_device(resume),
                );
            }
            if args.graph {
                return run_on::<Autodiff<Ascend>>(
                    args,
                    device,
                    Some(device),
                    graph_trainer(resume),
                );
            }
            run_on::<Autodiff<Ascend>>(args, device, Some(device), single_device(resume))
        }
    }
}

/// `--cp N` (× `--devices M`): the ranks as threads of this process — on cpu
/// `Autodiff<NdArray>` replicas with host collectives (the emulation), on sim / ascend one
/// device per rank over HCCL, rank `k` = data-parallel group `k / N`, context-parallel rank
/// `k mod N` — then, with `--check-cp`, the line comparing the first steps with one device.
fn run_context_parallel(args: Args) -> Result<(), String> {
    let (n, m) = (args.cp, args.devices.max(1));
    let gap = std::rc::Rc::new(std::cell::Cell::new(None));
    match args.device {
        ExampleDevice::Cpu => {
            args.cp_devices(0, |_| Ok(()))?;
            let arc = |c: HostComm| std::sync::Arc::new(c) as Comm<NdArray>;
            let cp: Vec<Vec<HostComm>> = (0..m).map(|_| HostComm::group(n)).collect();
            let dp: Vec<Vec<HostComm>> = (0..n).map(|_| HostComm::group(m)).collect();
            let comms = (0..n * m)
                .map(|k| RankComms {
                    cp: arc(cp[k / n][k % n].clone()),
                    dp: (m > 1).then(|| arc(dp[k % n][k / n].clone())),
                })
                .collect();
            let devices = vec![Default::default(); n * m];
            let trainer = context_parallel::<Autodiff<NdArray>>(&args, devices, comms, gap.clone());
            run_on::<Autodiff<NdArray>>(args, Default::default(), None, trainer)?;
        }
        ExampleDevice::Sim | ExampleDevice::Ascend => {
            let kind = if matches!(args.device, ExampleDevice::Sim) {
                // The simulation grows to N·M devices unless $BURN_ASCEND_SIM_DEVICES fixes
                // its count (then a group past it is refused, as on a real node).
                if std::env::var_os("BURN_ASCEND_SIM_DEVICES").is_none() {
                    burn_ascend::backend::collective::simulate_devices((n * m) as u32);
                }
                burn_ascend::backend::AscendKind::Simulation
            } else {
                burn_ascend::backend::AscendKind::Npu
            };
            let first = match kind {
                burn_ascend::backend::AscendKind::Npu => {
                    burn_ascend_cann::acl::default_device_id().map_err(|e| e.to_string())? as u32
                }
                _ => 0,
            };
            let device = |index| AscendDevice { kind, index };
            let ids = args.cp_devices(first, |d| is_available(&device(d)))?;
            let devices: Vec<AscendDevice> = ids.into_iter().map(device).collect();
            let groups = |ds: Vec<AscendDevice>| -> Result<Vec<Comm<Ascend>>, String> {
                Ok(ProcessGroup::local(&ds)
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|g| std::sync::Arc::new(HcclComm::new(g)) as Comm<Ascend>)
                    .collect())
            };
            let mut cp = Vec::new();
            for i in 0..m {
                cp.push(groups(devices[i * n..(i + 1) * n].to_vec())?);
            }
            let mut dp = Vec::new();
            for j in 0..n {
                dp.push(if m > 1 {
                    groups((0..m).map(|i| devices[i * n + j]).collect())?
                } else {
                    Vec::new()
                });
            }
            let comms = (0..n * m)
                .map(|k| RankComms {
                    cp: cp[k / n][k % n].clone(),
                    dp: (m > 1).then(|| dp[k % n][k / n].clone()),
                })
                .collect();
            let first = devices[0];
            let trainer = context_parallel::<Autodiff<Ascend>>(&args, devices, comms, gap.clone());
            run_on::<Autodiff<Ascend>>(args, first, Some(first), trainer)?;
        }
    }
    if let Some(gap) = gap.get() {
        let what = if m > 1 {
            format!("{n} devices × data-parallel {m}")
        } else {
            format!("{n} devices")
        };
        println!("finetune: context-parallel {what}, max |Δloss| vs 1 device {gap:.3e}");
    }
    Ok(())
}

/// The trainer of `--cp N` over `devices` / `comms` (rank `k` on `devices[k]`): replicas of
/// the model `run_on` built; with `--check-cp`, the first 3 (global) batches then trained on
/// one device from the same initial weights, the largest loss difference going to `gap`.
fn context_parallel<'a, B>(
    args: &Args,
    devices: Vec<B::Device>,
    comms: Vec<RankComms<B::InnerBackend>>,
    gap: std::rc::Rc<std::cell::Cell<Option<f32>>>,
) -> Trainer<'a, B>
where
    B: CpBackend + TrainingBackend,
    B::InnerBackend: TrainingBackend,
    Transformer<B>: Send,
{
    let (check, resume, m) = (args.check_cp, args.resume, args.devices.max(1));
    Box::new(move |model0, state, packer, opts, on_step| {
        let err = |e: burn_ascend::AttnError| e.to_string();
        materialize(&model0);
        let reference = check.then(|| (model0.clone(), packer.clone()));
        let models = replicate(&model0, &devices);
        drop(model0);
        let (model, state) =
            train_context_parallel(models, comms, state, resume, packer, opts, |r| on_step(r))
                .map_err(err)?;
        if let Some((reference, mut p)) = reference {
            let k = state.losses.len().min(3);
            let tmp = opts.out.join(".check-cp-1-device");
            let ref_opts = TrainOptions {
                stop_after: Some(k),
                out: tmp.clone(),
                ..opts.clone()
            };
            let (_, single) = train_with(
                reference,
                TrainState::default(),
                false,
                &mut Batches::global(&mut p, m),
                &ref_opts,
                None,
                |_| {},
            )
            .map_err(err)?;
            let _ = std::fs::remove_dir_all(&tmp);
            gap.set(Some(
                state.losses[..k]
                    .iter()
                    .zip(&single.losses)
                    .fold(0f32, |m, (a, b)| m.max((a - b).abs())),
            ));
        }
        Ok((model, state))
    })
}

/// How `run_on` trains: the model and state it built, the packer, the options and the
/// per-step callback in; the trained model and state out.
type Trainer<'a, B> = Box<
    dyn FnOnce(
            Transformer<B>,
            TrainState,
            &mut Packer,
            &TrainOptions,
            &mut dyn FnMut(&StepReport),
        ) -> Result<(Transformer<B>, TrainState), String>
        + 'a,
>;

fn single_device<'a, B: AutodiffBackend + TrainingBackend>(resume: bool) -> Trainer<'a, B>
where
    B::InnerBackend: TrainingBackend,
{
    Box::new(move |model, state, packer, opts, on_step| {
        train(model, state, resume, packer, opts, on_step).map_err(|e| e.to_string())
    })
}

/// `--graph`: every step after the warm-up replayed from one captured graph
/// (`burn_ascend_model::train::graph`); prints `finetune: training launches per step <x>` (the
/// replayed steps') and what the graph did.
fn graph_trainer<'a>(resume: bool) -> Trainer<'a, Autodiff<Ascend>> {
    Box::new(move |model, state, packer, opts, on_step| {
        let (model, state, s) =
            train_graph(model, state, resume, packer, opts, on_step).map_err(|e| e.to_string())?;
        println!(
            "finetune: graph: {} eager warm-up step(s), {} replayed, {} recorded tasks \
             holding {:.1} MiB (the eager step's peak: {:.1} MiB), {} learning-rate update(s) \
             of the optimizer's task group, host {:.0} µs per replayed step (input writes, \
             update, replay)",
            s.eager_steps,
            s.replayed_steps,
            s.recorded_tasks,
            s.graph_bytes as f64 / (1 << 20) as f64,
            s.eager_step_bytes as f64 / (1 << 20) as f64,
            s.lr_updates,
            s.host_us_per_step()
        );
        println!(
            "finetune: training launches per step {}",
            (s.launches_per_step() * 10.0).round() / 10.0
        );
        Ok((model, state))
    })
}

/// `--dry-run`: one device of the simulation, its kernels off for the steps.
fn run_dry(args: Args, launched: bool) -> Result<(), String> {
    if !matches!(args.device, ExampleDevice::Sim) {
        return Err("--dry-run needs --device sim (it turns the simulated kernels off)".into());
    }
    if args.devices > 1 || args.cp > 1 || launched {
        return Err("unsupported: --dry-run with --devices / --cp (one device only)".into());
    }
    if args.resume || args.merge_lora || args.checkpointing.is_some() {
        return Err(
            "unsupported: --dry-run with --resume, --merge-lora or --checkpointing (it writes \
             nothing and trains one device's plain step)"
                .into(),
        );
    }
    let device = AscendDevice::sim();
    run_on::<Autodiff<Ascend>>(args, device, Some(device), dry_trainer())
}

/// `--dry-run`'s trainer: `train_with`'s steps as on one device, through a
/// [`GradientSync`] of one rank that is not the writer, so no checkpoint is written and the
/// loss is not read apart (the step's one read is the gradient norm; the single-device path
/// reads the loss with it through one `cat` more).
fn dry_trainer<'a>() -> Trainer<'a, Autodiff<Ascend>> {
    Box::new(move |model, state, packer, opts, on_step| {
        let mut sync = NoCheckpoints;
        train_with(
            model,
            state,
            false,
            &mut Batches::single(packer),
            opts,
            Some(&mut sync),
            on_step,
        )
        .map_err(|e| e.to_string())
    })
}

/// One rank of one that is not rank 0: `train_with` then writes nothing.
struct NoCheckpoints;

impl<B: AutodiffBackend> GradientSync<B> for NoCheckpoints {
    fn rank(&self) -> usize {
        1
    }
    fn size(&self) -> usize {
        1
    }
    fn broadcast_model(
        &mut self,
        model: Transformer<B>,
    ) -> Result<Transformer<B>, burn_ascend::contract::AttnError> {
        Ok(model)
    }
    fn average_loss(
        &mut self,
        _loss: Tensor<B, 1>,
    ) -> Result<f32, burn_ascend::contract::AttnError> {
        // The kernels are off: the loss means nothing, and reading it would add a wait.
        Ok(0.0)
    }
    fn wait(&mut self) -> Result<(), burn_ascend::contract::AttnError> {
        Ok(())
    }
    fn average_gradients(
        &mut self,
        _model: &Transformer<B>,
        grads: burn::optim::GradientsParams,
    ) -> Result<burn::optim::GradientsParams, burn_ascend::contract::AttnError> {
        Ok(grads)
    }
}

fn print_ddp(n: usize, zero: u8, gap: Option<f32>) {
    if let Some(gap) = gap {
        let zero = if zero > 0 {
            format!(" (zero {zero})")
        } else {
            String::new()
        };
        println!("finetune: data-parallel {n} devices{zero}, max |Δloss| vs 1 device {gap:.3e}");
    }
}

/// `--devices N`: ranks on devices `first.index .. first.index + N` of `first`'s kind, one
/// thread each; rank 0 is the model `run_on` built (on `first`), the others are initialised
/// on their own devices (with their own seeds: the broadcast from rank 0 makes them equal).
/// With `--check-ddp`, the first 3 global batches are then trained on `first` alone from
/// rank 0's initial weights and the largest loss difference goes to `gap`.
fn data_parallel<'a>(
    args: &Args,
    first: AscendDevice,
    gap: std::rc::Rc<std::cell::Cell<Option<f32>>>,
) -> Trainer<'a, Autodiff<Ascend>> {
    let (n, check, seed, dtype, out, resume) = (
        args.devices,
        args.check_ddp,
        args.seed,
        args.dtype.float_dtype(),
        args.out.clone(),
        args.resume,
    );
    // Checked in `run` before anything ran.
    let stage = ZeroStage::from_flag(args.zero).ok().flatten();
    let checkpoint_blocks = args.checkpointing == Some(Checkpointing::Block);
    let args_of_ranks = args.clone();
    Box::new(move |model0, state, packer, opts, on_step| {
        let err = |e: burn_ascend::AttnError| e.to_string();
        materialize(&model0);
        let reference = check.then(|| model0.clone());
        let mut models = vec![model0];
        for i in 1..n {
            let device = AscendDevice {
                kind: first.kind,
                index: first.index + i as u32,
            };
            is_available(&device)?;
            <Autodiff<Ascend> as burn::tensor::backend::Backend>::seed(
                &device,
                seed.wrapping_add(i as u64),
            );
            let (m, _) = model_of::<Autodiff<Ascend>>(&args_of_ranks, &device)?;
            models.push(
                m.with_compute_dtype(dtype)
                    .with_block_checkpointing(checkpoint_blocks),
            );
        }
        let simulated = first.kind == burn_ascend::backend::AscendKind::Simulation;
        let run = match stage {
            Some(stage) => {
                let run =
                    train_zero(models, state, resume, packer, opts, stage, on_step).map_err(err)?;
                let s = run.stats;
                let per = |x: u64| x.checked_div(s.steps).unwrap_or(0);
                println!(
                    "finetune: zero {} over {n} devices (HCCL{}): per step {} all-reduce(s), {} \
                     reduce-scatter(s) of {:.1} MiB of gradients and {} all-gather(s); AdamW state \
                     per rank {} B (measured from the memory pool, rank order)",
                    stage.number(),
                    if simulated { ", simulated" } else { "" },
                    per(s.all_reduces),
                    per(s.reduce_scatters),
                    per(s.gradient_bytes) as f64 / (1 << 20) as f64,
                    per(s.all_gathers),
                    run.optimizer_state_bytes
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(" / ")
                );
                burn_ascend_model::parallel::ranks::DataParallelRun {
                    model: run.model,
                    state: run.state,
                    stats: Default::default(),
                }
            }
            None => train_data_parallel(
                models,
                state,
                resume,
                packer,
                opts,
                DEFAULT_BUCKET_BYTES,
                on_step,
            )
            .map_err(err)?,
        };
        let s = run.stats;
        if let Some(per_step) = s.gradient_all_reduces.checked_div(s.steps) {
            println!(
                "finetune: data-parallel over {n} devices (HCCL{}): {} all-reduce(s) of {:.1} MiB of gradients per step, buckets of {} MiB",
                if simulated { ", simulated" } else { "" },
                per_step,
                s.gradient_bytes as f64 / s.steps as f64 / (1 << 20) as f64,
                DEFAULT_BUCKET_BYTES >> 20
            );
        }
        if let Some(reference) = reference {
            let k = run
                .state
                .losses
                .len()
                .min(if stage.is_some() { 5 } else { 3 });
            let tmp = out.join(".check-ddp-1-device");
            let ref_opts = TrainOptions {
                stop_after: Some(k),
                out: tmp.clone(),
                ..opts.clone()
            };
            let mut p = packer.clone();
            let (_, single) = train_with(
                reference,
                TrainState::default(),
                false,
                &mut Batches::global(&mut p, n),
                &ref_opts,
                None,
                |_| {},
            )
            .map_err(err)?;
            let _ = std::fs::remove_dir_all(&tmp);
            gap.set(Some(
                run.state.losses[..k]
                    .iter()
                    .zip(&single.losses)
                    .fold(0f32, |m, (a, b)| m.max((a - b).abs())),
            ));
        }
        Ok((run.model, run.state))
    })
}

/// A LoRA run's base checkpoint and, for a fresh run, its adapters' settings (`None`: resume
/// the adapters in --out). `None` for a full fine-tune.
fn lora_of(args: &Args) -> Result<Option<(PathBuf, Option<LoraSettings>)>, String> {
    let saved = args.out.join("adapter_config.json");
    if args.resume && saved.exists() {
        let base = match &args.checkpoint {
            Some(dir) => dir.clone(),
            None => peft::base_of_run(&args.out).map_err(|e| e.to_string())?,
        };
        return Ok(Some((base, None)));
    }
    let Some(rank) = args.lora_rank else {
        return Ok(None);
    };
    if args.resume {
        return Err(format!(
            "--resume --lora-rank: {} has no adapter_config.json (not a LoRA run)",
            args.out.display()
        ));
    }
    let Some(base) = args.checkpoint.clone() else {
        return Err(
            "--lora-rank needs --checkpoint HF_DIR: the base model the adapters train on".into(),
        );
    };
    let settings = LoraSettings {
        rank,
        alpha: args.lora_alpha,
        dropout: args.lora_dropout,
        targets: LoraTarget::parse_list(&args.lora_targets, "--lora-targets")
            .map_err(|e| e.to_string())?,
        base_model: base.display().to_string(),
    };
    settings.validate().map_err(|e| e.to_string())?;
    Ok(Some((base, Some(settings))))
}

/// The model and state `args` start from: a LoRA run's frozen base with its adapters, or
/// `init_model`'s.
fn model_of<B: AutodiffBackend + TrainingBackend>(
    args: &Args,
    device: &B::Device,
) -> Result<(Transformer<B>, TrainState), String> {
    match lora_of(args)? {
        Some((base, settings)) => {
            peft::init_lora::<B>(&base, settings.as_ref(), args.seed, &args.out, device)
        }
        None => {
            let load = LoadOptions {
                allow_non_finite_weights: args.allow_non_finite_weights,
                strict: args.strict,
            };
            init_model_with::<B>(&init_of(args)?, &args.out, device, load)
        }
    }
    .map_err(|e| e.to_string())
}

fn init_of(args: &Args) -> Result<Init, String> {
    Ok(if args.resume {
        Init::Resume
    } else if let Some(dir) = &args.checkpoint {
        Init::Checkpoint(dir.clone())
    } else if let Some(path) = &args.model_config {
        let text =
            std::fs::read(path).map_err(|e| format!("--model-config {}: {e}", path.display()))?;
        let v: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| format!("--model-config {}: {e}", path.display()))?;
        Init::Fresh(
            ModelConfig::from_json(&v)
                .map_err(|e| format!("--model-config {}: {e}", path.display()))?,
        )
    } else {
        Init::Fresh(ModelConfig::small_byte_model())
    })
}

/// `ascend`: the same device as `device` when it is an `Ascend` one, for the dispatch counters
/// (launches, synchronisations, host fallbacks per step) and `--profile`.
fn run_on<B: AutodiffBackend + TrainingBackend>(
    args: Args,
    device: B::Device,
    ascend: Option<AscendDevice>,
    trainer: Trainer<'_, B>,
) -> Result<(), String>
where
    B::InnerBackend: TrainingBackend,
{
    B::seed(&device, args.seed);

    let tokenizer = match &args.checkpoint {
        Some(dir) if dir.join("tokenizer.json").exists() => {
            Tokenizer::from_file(&dir.join("tokenizer.json")).map_err(|e| e.to_string())?
        }
        _ => Tokenizer::Bytes,
    };
    let (model, state) = model_of::<B>(&args, &device)?;
    let model = model
        .with_compute_dtype(args.dtype.float_dtype())
        .with_block_checkpointing(args.checkpointing == Some(Checkpointing::Block));
    let config = model.config.clone();
    let budget = args.memory_budget.unwrap_or_else(budget::default_budget);
    if !args.dry_run {
        // A dry run touches almost none of the memory it allocates.
        budget::check_training(&config, args.batch_tokens, budget).map_err(|e| e.to_string())?;
    }
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(format!(
            "tokenizer has {} tokens but the model's vocab_size is {}",
            tokenizer.vocab_size(),
            config.vocab_size
        ));
    }
    // Text, or chat records rendered with the checkpoint's chat template (loss on the
    // assistant's tokens).
    let mut packer = training_packer(
        args.data.as_deref(),
        args.checkpoint.as_deref(),
        &tokenizer,
        args.batch_tokens,
        args.seq_len,
        args.seed,
    )
    .map_err(|e| e.to_string())?;
    if args.pack == Pack::Fixed {
        packer = packer.with_fixed_rows();
    }
    // Under a launch rank 0 alone reports and writes; the others train quietly.
    let reporter = launch::is_reporter();
    if reporter {
        println!(
            "finetune: {} parameters, {} documents ({} tokens), {} tokens per batch, steps {}..{}",
            config.num_params(),
            packer.documents(),
            packer.corpus_tokens(),
            args.batch_tokens,
            state.step,
            args.steps
        );
    }
    if state.step >= args.steps {
        return Err(format!(
            "the run in {} already did {} steps; pass a larger --steps to continue it",
            args.out.display(),
            state.step
        ));
    }
    let todo = args.stop_after.unwrap_or(args.steps).min(args.steps) - state.step.min(args.steps);
    let bar = if reporter {
        ProgressBar::new(todo as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise} < {eta_precise}] {msg}",
        )
        .expect("template"),
    );
    let started = Instant::now();
    let mut tokens_seen = 0usize;
    let schedule = args.lr_schedule();
    let opts = TrainOptions {
        warmup_steps: schedule.warmup_steps,
        total_steps: args.steps,
        stop_after: args.stop_after,
        lr: schedule.peak,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: args.seed,
        out: args.out.clone(),
        save_every: args.save_every,
    };
    if args.profile && ascend.is_some() {
        dispatch::start_profile();
    }
    if args.dry_run {
        dispatch::set_kernels(false);
    }
    // Counts after each step; a step's delta spans a checkpoint save when one ran before it
    // (every `save_every` steps), and such steps are left out of the means.
    let mut last_counts = ascend.as_ref().map(DispatchCounts::now);
    let mut step_counts: Vec<DispatchCounts> = Vec::new();
    let last_step = args.stop_after.unwrap_or(args.steps).min(args.steps);
    // With `--graph` the first steps are the eager warm-up and the capture: the means (and the
    // profile) cover the replayed steps only, which are what a long run is made of.
    let measured_from = if args.graph {
        state.step + WARMUP_STEPS + 1
    } else {
        state.step
    };
    if args.graph && args.profile && last_step <= measured_from {
        return Err(format!(
            "invalid --steps: --profile with --graph measures the replayed steps, so the run \
             needs more than {} steps ({WARMUP_STEPS} eager warm-up, 1 captured) after step {}",
            measured_from - state.step,
            state.step
        ));
    }
    let mut profile = None;
    let (model, state) = trainer(model, state, &mut packer, &opts, &mut |r: &StepReport| {
        if let (Some(dev), Some(last)) = (ascend.as_ref(), last_counts.as_mut()) {
            let now = DispatchCounts::now(dev);
            if r.step == 0 || !r.step.is_multiple_of(opts.save_every.max(1)) {
                step_counts.push(now.since(*last));
            }
            *last = now;
            if args.graph && r.step + 1 == measured_from {
                step_counts.clear();
                if args.profile {
                    dispatch::start_profile();
                }
            }
            if args.profile && r.step + 1 == last_step {
                // Before the final checkpoint save, which is not a training step.
                profile = Some(dispatch::stop_profile(dev));
            }
        }
        tokens_seen += r.tokens;
        bar.set_message(format!(
            "loss {:.3}  lr {:.2e}  {:.0} tok/s",
            r.loss,
            r.lr,
            tokens_seen as f64 / started.elapsed().as_secs_f64().max(1e-9)
        ));
        bar.inc(1);
        // Without a terminal the bar is hidden: print a line every 25 steps instead.
        if bar.is_hidden() && (r.step.is_multiple_of(25) || r.step + 1 == r.total_steps) {
            println!(
                "step {:4}/{}  loss {:.4}  lr {:.2e}  {:.0} tok/s",
                r.step + 1,
                r.total_steps,
                r.loss,
                r.lr,
                tokens_seen as f64 / started.elapsed().as_secs_f64().max(1e-9)
            );
        }
    })?;
    bar.finish();
    if !reporter {
        return Ok(());
    }
    if args.dry_run {
        dispatch::set_kernels(true);
    }
    let modelled = profile
        .as_ref()
        .map(|p| dispatch::format_modelled(p, step_counts.len(), 12, "finetune"));
    let profile = profile.map(|p| dispatch::format_profile(&p, step_counts.len()));
    if args.dry_run {
        print!("{}", profile.unwrap_or_default());
        print!("{}", modelled.unwrap_or_default());
        println!("{}", DispatchCounts::mean(&step_counts).line());
        println!(
            "finetune: dry run ({} steps, kernels off): nothing written to {}",
            step_counts.len(),
            args.out.display()
        );
        return Ok(());
    }
    // Drawn beside, then renamed into place: never a half-written plot.
    let plot = args.out.join(".loss.tmp.png");
    plot_losses(&state.losses, &plot)?;
    std::fs::rename(&plot, args.out.join("loss.png")).map_err(|e| format!("loss.png: {e}"))?;
    let weights = if lora::settings(&model).is_some() {
        "adapter_config.json, adapter_model.safetensors"
    } else {
        "config.json, model.safetensors"
    };
    println!(
        "finetune: {:.0} tokens/s, checkpoint in {} ({weights}, loss.csv, loss.png; the \
         resumable checkpoint in the folder LATEST names)",
        tokens_seen as f64 / started.elapsed().as_secs_f64().max(1e-9),
        args.out.display()
    );
    if args.merge_lora {
        let merged = args.out.join("merged");
        save_hf(&lora::merge(model.valid()), &merged).map_err(|e| e.to_string())?;
        println!(
            "finetune: base with the adapters merged in {}",
            merged.display()
        );
    }
    if !args.no_samples {
        print_samples(model.valid(), &tokenizer, args.seed)?;
    }
    let first = state.losses.first().copied().unwrap_or(f32::NAN);
    let tail = &state.losses[state.losses.len().saturating_sub(10)..];
    let last = tail.iter().sum::<f32>() / tail.len().max(1) as f32;
    println!(
        "finetune: loss {first:.4} -> {last:.4} over {} steps",
        state.losses.len()
    );
    if let Some(table) = profile {
        print!("{table}");
    }
    if let Some(table) = modelled {
        print!("{table}");
    }
    if ascend.is_some() {
        let mean = DispatchCounts::mean(&step_counts);
        let by_op: Vec<String> = burn_ascend::backend::fallback_counts()
            .iter()
            .map(|(op, n)| format!("{op} ×{n}"))
            .collect();
        println!(
            "{}; host fallbacks in the whole run: {}",
            mean.detail(),
            if by_op.is_empty() {
                "none".to_string()
            } else {
                by_op.join(", ")
            }
        );
        println!("{}", mean.line());
    }
    Ok(())
}
