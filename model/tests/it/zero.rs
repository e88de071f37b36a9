//! ZeRO (`--zero 1|2|3`) on simulated devices over the simulated HCCL: the
//! sharded runs give plain data parallelism's losses and weights, each rank's AdamW state is
//! 1/N of the replicated one's in the memory pool, the checkpoint is written as one shard per
//! rank (plain data parallelism resumes it; another rank count re-shards it exactly), and the
//! flag's bad uses are refused before any step.

use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamWState, GradientsParams, Optimizer};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::backend::collective::ProcessGroup;
use burn_ascend::backend::{memory_stats, Ascend, AscendDevice};
use burn_ascend_model::parallel::ranks::{train_data_parallel, train_zero};
use burn_ascend_model::parallel::zero::record::OptimizerRecord;
use burn_ascend_model::parallel::zero::{ShardedOptimizer, Zero, ZeroStage};
use burn_ascend_model::run_state::published::Published;
use burn_ascend_model::train::optim::{grad_norm_squared, FusedAdamW};
use burn_ascend_model::train::zero_resume::whole_record_from_shards;
use burn_ascend_model::train::{init_model, Init, TrainOptions, TrainState};
use burn_ascend_model::{cross_entropy, Transformer};

use crate::ddp::{cfg, device, opts, packer, replicas, replicas_from, serial};
use burn_ascend_model::parallel::plan::{plan, PlanSpec};
use burn_ascend_test_support::max_abs_diff;

type B = Autodiff<Ascend>;

/// Every parameter on the host, in module order.
fn weights(model: &Transformer<B>) -> Vec<Vec<f32>> {
    struct Host(Vec<Vec<f32>>);
    impl ModuleVisitor<B> for Host {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
            self.0.push(p.val().into_data().to_vec::<f32>().unwrap());
        }
    }
    let mut h = Host(Vec::new());
    model.visit(&mut h);
    h.0
}

fn max_abs(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0f32, f32::max)
}

/// The replicated training loop's AdamW state for `model` after one step, measured as the
/// sharded one is: the pool's allocated bytes on its device before minus after dropping it;
/// and the norm of that step's gradient.
fn replicated_optimizer_bytes(model: Transformer<B>, o: &TrainOptions) -> (u64, f32) {
    let d = model.embed_tokens.weight.val().device();
    let batch = packer().next_batch();
    let t = batch.tokens.len();
    let tokens = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.tokens, [t]), &d);
    let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.targets, [t]), &d);
    let loss = cross_entropy(
        model.forward_packed(tokens, &batch.cu_seqlens).unwrap(),
        targets,
    );
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let norm = grad_norm_squared(&model, &grads)
        .unwrap()
        .into_scalar()
        .sqrt();
    let mut optim = FusedAdamW::<B>::new(o.weight_decay)
        .unwrap()
        .init::<Transformer<B>>();
    let model = optim.step(1e-3, model, grads);
    let before = memory_stats(&d).allocated_bytes;
    drop(optim);
    let after = memory_stats(&d).allocated_bytes;
    drop(model);
    ((before - after) as u64, norm)
}

/// Plain data parallelism and ZeRO stages `stages` on `n` simulated devices from the same
/// initial weights, five steps each; a stage paired with `true` runs with per-block
/// checkpointing (ZeRO-3: each block's weights gathered only while it runs).
fn compare(n: u32, stages: &[(ZeroStage, bool)]) {
    // Devices 12.. : the pool measurements below (AdamW bytes, released weights) would count
    // other tests' allocations on the devices they share (0.., the plan tests' 7).
    let start = replicas_from(12, n);
    let dir = tempfile::tempdir().unwrap();
    // A clip the gradients exceed: the global norm is computed from the shards.
    let clip = 0.25;
    let opts = |dir: &std::path::Path| TrainOptions {
        clip_norm: clip,
        ..opts(dir, 5, None)
    };
    let o = opts(&dir.path().join("dp"));
    let dp = train_data_parallel(
        start.clone(),
        TrainState::default(),
        false,
        &packer(),
        &o,
        4096,
        |_| {},
    )
    .unwrap();
    let dp_weights = weights(&dp.model);
    let (replicated, norm) = replicated_optimizer_bytes(start[0].clone(), &o);
    assert!(
        norm > 2.0 * clip,
        "the first step's gradient norm {norm} is not clipped"
    );
    for &(stage, blocks) in stages {
        let o = opts(&dir.path().join(format!("z{}{blocks}", stage.number())));
        let models: Vec<Transformer<B>> = start
            .iter()
            .map(|m| m.clone().with_block_checkpointing(blocks))
            .collect();
        let z = train_zero(
            models,
            TrainState::default(),
            false,
            &packer(),
            &o,
            stage,
            |_| {},
        )
        .unwrap();
        let k = stage.number();
        let k = if blocks {
            format!("{k} per block")
        } else {
            k.to_string()
        };
        let loss_gap = max_abs_diff(&z.state.losses, &dp.state.losses);
        let weight_gap = max_abs(&weights(&z.model), &dp_weights);
        eprintln!(
            "N = {n}, zero {k}: max |Δloss| vs plain DP {loss_gap:.3e}, max |Δw| {weight_gap:.3e}, \
             AdamW bytes per rank {:?} vs replicated {replicated}",
            z.optimizer_state_bytes
        );
        assert!(
            loss_gap <= 1e-5,
            "N = {n}, zero {k}: {:?} vs {:?}",
            z.state.losses,
            dp.state.losses
        );
        assert!(
            z.state.losses[4] < z.state.losses[0],
            "{:?}",
            z.state.losses
        );
        // The weights after five AdamW steps: the sharded run's global norm sums the same
        // squares in another order, the only difference from plain data parallelism.
        assert!(
            weight_gap <= 1e-6,
            "N = {n}, zero {k}: max |Δw| {weight_gap}"
        );
        // 1/N of the replicated state, up to the pool's 512-byte rounding of each block (the
        // replicated run's small norms and sinks round up; a shard's tail does).
        assert_eq!(z.optimizer_state_bytes.len(), n as usize);
        // The memory plan's ZeRO-k optimizer bytes per rank (unrounded: 8 B per trained
        // parameter over N) against the pool.
        let planned = plan(
            &cfg(),
            &PlanSpec {
                tokens_per_rank: 64,
                seq_len: 32,
                ranks: n as usize,
                compute_bytes: 4,
                lora: None,
                zero: stage.number(),
                checkpointing: false,
            },
        )
        .optimizer;
        assert_eq!(planned, (8 * cfg().num_params() as u64).div_ceil(n as u64));
        for (r, &bytes) in z.optimizer_state_bytes.iter().enumerate() {
            let ratio = bytes as f64 * n as f64 / replicated as f64;
            assert!(
                (0.98..=1.02).contains(&ratio),
                "N = {n}, zero {k}, rank {r}: {bytes} B × {n} / {replicated} B = {ratio:.4}"
            );
            let vs_plan = bytes as f64 / planned as f64;
            assert!(
                (1.0..=1.03).contains(&vs_plan),
                "N = {n}, zero {k}, rank {r}: pool {bytes} B, plan {planned} B"
            );
        }
        let s = z.stats;
        let units = 4; // embedding, 2 blocks, final norm + head
        if blocks {
            // Per step, one gather per part run: the embedding, 2 blocks and the head forward,
            // the 2 blocks again and the embedding in backward; at the end the checkpoint's
            // whole weights for the export (4 units). The moments are never gathered: each
            // rank writes its own shard of them.
            assert_eq!(s.all_gathers, 5 * 7 + units, "{s:?}");
        } else if stage == ZeroStage::Three {
            // Between steps the gathered weights are freed: the whole model's f32 weights, up
            // to the padding of each unit and the pool's 512-byte rounding, less one 512-byte
            // block per placeholder (23 parameters).
            let whole = 4 * cfg().num_params() as u64;
            let placeholders = 23 * 512;
            eprintln!("N = {n}, zero 3: {} B of weights released after each update ({whole} B of f32 weights)", s.released_weight_bytes);
            assert!(
                (1.0..=1.02)
                    .contains(&((s.released_weight_bytes + placeholders) as f64 / whole as f64)),
                "released {} B of {whole} B",
                s.released_weight_bytes
            );
        }
        match stage {
            ZeroStage::One => assert_eq!((s.all_reduces, s.reduce_scatters), (5 * units, 0)),
            _ => assert_eq!((s.all_reduces, s.reduce_scatters), (0, 5 * units)),
        }
    }
}

#[test]
fn zero_one_two_three_give_plain_data_parallel_losses_within_1e_5_with_1_over_n_of_the_adamw_state()
{
    let _g = serial();
    let long = std::env::var_os("BURN_ASCEND_LONG").is_some();
    let all = [
        (ZeroStage::One, false),
        (ZeroStage::Two, false),
        (ZeroStage::Three, false),
        (ZeroStage::Three, true),
    ];
    if long {
        compare(2, &all);
        compare(4, &all);
    } else {
        // For CI's time: stage 2 on 2 ranks against plain data parallelism is the resume
        // test's (its continuation by plain DP).
        compare(2, &[(ZeroStage::One, false), (ZeroStage::Three, false)]);
        compare(4, &[(ZeroStage::Three, false), (ZeroStage::Three, true)]);
    }
}

/// Every parameter's AdamW moments in `record`, by module order.
fn moments(model: &Transformer<B>, record: OptimizerRecord) -> Vec<(usize, Vec<f32>, Vec<f32>)> {
    struct Get(OptimizerRecord, Vec<(usize, Vec<f32>, Vec<f32>)>);
    impl ModuleVisitor<B> for Get {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
            let s: AdamWState<Ascend, D> = self.0.remove(&p.id).unwrap().into_state::<D>();
            let m = s.momentum;
            self.1.push((
                m.time,
                m.moment_1.into_data().to_vec().unwrap(),
                m.moment_2.into_data().to_vec().unwrap(),
            ));
        }
    }
    let mut g = Get(record, Vec::new());
    model.visit(&mut g);
    assert!(g.0.is_empty(), "record entries for no parameter");
    g.1
}

fn decode(bytes: Vec<u8>, d: &AscendDevice) -> OptimizerRecord {
    NamedMpkBytesRecorder::<FullPrecisionSettings>::new()
        .load(bytes, d)
        .unwrap()
}

#[test]
fn a_zero_checkpoint_is_sharded_plain_data_parallelism_resumes_it_and_four_ranks_reshard_it_exactly(
) {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let start = replicas(2);
    let whole = train_zero(
        start.clone(),
        TrainState::default(),
        false,
        &packer(),
        &opts(&dir.path().join("a"), 4, None),
        ZeroStage::Two,
        |_| {},
    )
    .unwrap();
    let out = dir.path().join("b");
    train_zero(
        start,
        TrainState::default(),
        false,
        &packer(),
        &opts(&out, 4, Some(2)),
        ZeroStage::Two,
        |_| {},
    )
    .unwrap();
    let saved = Published::open(&out).unwrap();
    let state = TrainState::load(&saved.dir).unwrap();
    assert_eq!((state.step, state.devices), (2, 2));
    let resumed = |i: u32| init_model::<B>(&Init::Resume, &out, &device(i)).unwrap().0;

    // One shard per rank, no whole optimizer record.
    let zero = saved.manifest.zero.as_ref().expect("a sharded checkpoint");
    assert_eq!((zero.ranks, zero.adam_steps), (2, 2));
    assert!(!saved.manifest.files.contains_key("optim.mpk"));
    for f in zero.files() {
        assert!(saved.manifest.files.contains_key(f), "{f}");
    }
    // Four ZeRO ranks read their ranges of the 2-rank run's shards and gather them back:
    // every moment bit for bit the 2 shards' state.
    simulate(4);
    let reference = resumed(0);
    let want = moments(
        &reference,
        whole_record_from_shards(&reference, &saved).unwrap(),
    );
    let devices: Vec<AscendDevice> = (0..4).map(device).collect();
    let groups = ProcessGroup::local(&devices).unwrap();
    let got = std::thread::scope(|s| {
        let hs: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                let model = resumed(i as u32);
                let saved = &saved;
                s.spawn(move || {
                    let mut z = Zero::new(g, ZeroStage::One, 0.1, 1.0).unwrap();
                    z.load_sharded(&model, saved).unwrap();
                    let shard = z.layout().unwrap().shard_len(&z.layout().unwrap().units[0]);
                    // Keyed by this rank's model's parameters (a model built from the export
                    // has ids of its own), compared in module order.
                    let bytes = z.optimizer_bytes(&model).unwrap();
                    (shard, moments(&model, decode(bytes, &device(0))))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    // The embedding (256 × 32) in quarters.
    assert_eq!(got[0].0, 256 * 32 / 4);
    for (r, (_, back)) in got.into_iter().enumerate() {
        assert_eq!(back, want, "rank {r}");
    }

    // Plain data parallelism (same rank count) resumes the sharded run's checkpoint and
    // continues it as the uninterrupted sharded run.
    let copy = dir.path().join("b4");
    copy_dir(&out, &copy);
    let dp = train_data_parallel(
        vec![resumed(0), resumed(1)],
        state.clone(),
        true,
        &packer(),
        &opts(&out, 4, None),
        4096,
        |_| {},
    )
    .unwrap();
    let g = max_abs_diff(&dp.state.losses, &whole.state.losses);
    assert!(
        g <= 1e-5,
        "{:?} vs {:?}",
        dp.state.losses,
        whole.state.losses
    );

    // ZeRO-3 on four ranks resumes the 2-rank checkpoint too (each step's global batch is
    // now four batches, the stream continuing after the 2 × 2 batches the first run took).
    let more = train_zero(
        (0..4).map(resumed).collect(),
        state,
        true,
        &packer(),
        &opts(&copy, 3, None),
        ZeroStage::Three,
        |_| {},
    )
    .unwrap();
    assert_eq!(more.state.losses[..2], whole.state.losses[..2]);
    assert_eq!(more.state.devices, 4);
    assert_eq!(more.state.losses.len(), 3);
    assert!(more.state.losses[2].is_finite(), "{:?}", more.state.losses);
}

#[test]
fn a_whole_state_checkpoint_resumes_under_zero_on_half_the_ranks_keeping_the_global_batch() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let start = replicas(4);
    // Plain data parallelism on 4 ranks, uninterrupted, and stopped after 2 steps: the
    // whole-state format (model.mpk, optim.mpk), as ZeRO wrote it before it was sharded.
    let whole = train_data_parallel(
        start.clone(),
        TrainState::default(),
        false,
        &packer(),
        &opts(&dir.path().join("whole"), 4, None),
        4096,
        |_| {},
    )
    .unwrap();
    let out = dir.path().join("cut");
    train_data_parallel(
        start,
        TrainState::default(),
        false,
        &packer(),
        &opts(&out, 4, Some(2)),
        4096,
        |_| {},
    )
    .unwrap();
    let saved = Published::open(&out).unwrap();
    assert!(saved.manifest.zero.is_none() && saved.manifest.files.contains_key("optim.mpk"));
    let state = TrainState::load(&saved.dir).unwrap();
    // ZeRO-2 on 2 ranks: each reads the whole record once and keeps its slice, and takes 2 of
    // each step's 4 batches.
    let resumed = |i: u32| init_model::<B>(&Init::Resume, &out, &device(i)).unwrap().0;
    let z = train_zero(
        (0..2).map(resumed).collect(),
        state,
        true,
        &packer(),
        &opts(&out, 4, None),
        ZeroStage::Two,
        |_| {},
    )
    .unwrap();
    assert_eq!(z.state.losses[..2], whole.state.losses[..2]);
    let g = max_abs_diff(&z.state.losses[2..], &whole.state.losses[2..]);
    eprintln!(
        "whole-state checkpoint of 4 DP ranks resumed by 2 ZeRO-2 ranks: max |Δloss| {g:.2e}"
    );
    assert!(
        g <= 1e-5,
        "{:?} vs {:?}",
        z.state.losses,
        whole.state.losses
    );
    assert_eq!(z.state.devices, 4, "the global batch is still 4 batches");
    // Its own checkpoint is sharded, over 2 ranks.
    let saved = Published::open(&out).unwrap();
    assert_eq!(saved.manifest.zero.as_ref().map(|z| z.ranks), Some(2));
}

fn simulate(n: u32) {
    burn_ascend::backend::collective::simulate_devices(n);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}
