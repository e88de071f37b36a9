//! Data-parallel training over the simulated HCCL (not CANN's) on simulated devices: the
//! averaged gradients of N ranks equal one device's gradients of the whole global batch, the
//! losses of N = 2 and N = 4 ranks track one device within 1e-4, checkpoints are written once
//! by rank 0 and resume exactly with the same N; the 1/N scale and the rank-0 broadcast are
//! each shown to matter (mutation switches); a world of 4 ranks splits into the sub-communicators
//! of context × data parallelism.

use std::sync::{Mutex, MutexGuard, PoisonError};

use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::backend::collective::{simulate_devices, ProcessGroup};
use burn_ascend::backend::{Ascend, AscendDevice, AscendKind};
use burn_ascend_model::load::config::{LayerType, RopeScaling};
use burn_ascend_model::load::data::{concat_batches, documents_from_text};
use burn_ascend_model::parallel::ddp::{materialize, test_hooks, DataParallel};
use burn_ascend_model::parallel::ranks::train_data_parallel;
use burn_ascend_model::train::{train_with, Batches, GradientSync, TrainOptions, TrainState};
use burn_ascend_model::{cross_entropy, ModelConfig, PackedBatch, Packer, Tokenizer, Transformer};

type B = Autodiff<Ascend>;

/// The mutation switches are process-wide: these tests take turns.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn cfg() -> ModelConfig {
    ModelConfig {
        vocab_size: 256,
        hidden_size: 32,
        intermediate_size: 40,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        // 9 keys including the query: the 8 tokens before it, as before the window semantics
        // changed.
        sliding_window: Some(9),
        layer_types: LayerType::alternating(2),
        attention_sinks: true,
        attention_bias: false,
        attention_output_bias: false,
        mlp_bias: false,
        qk_norm: false,
        rope_theta: 10_000.0,
        rope_scaling: RopeScaling::Default,
        rms_norm_eps: 1e-5,
        tie_word_embeddings: false,
        attention_dropout: 0.0,
        moe: None,
    }
}

pub(crate) fn device(i: u32) -> AscendDevice {
    AscendDevice {
        kind: AscendKind::Simulation,
        index: i,
    }
}

/// One replica per rank, each on its own simulated device and each initialised differently
/// (as separate processes would be): only the broadcast makes them equal.
pub(crate) fn replicas(n: u32) -> Vec<Transformer<B>> {
    replicas_from(0, n)
}

/// [`replicas`] on simulated devices `first..first + n`: a test that measures a device's pool
/// takes devices no other test allocates on while it runs.
pub(crate) fn replicas_from(first: u32, n: u32) -> Vec<Transformer<B>> {
    simulate_devices(first + n);
    (first..first + n)
        .map(|i| {
            let m = Transformer::<B>::new(&cfg(), &device(i)).unwrap();
            // Cloned for the references below: initialise now (see `materialize`).
            materialize(&m);
            m
        })
        .collect()
}

pub(crate) fn packer() -> Packer {
    let docs = documents_from_text(&burn_ascend_model::load::data::BUNDLED_CORPUS[..20_000]);
    Packer::new(&docs, &Tokenizer::Bytes, 64, 32, 5).unwrap()
}

pub(crate) fn opts(out: &std::path::Path, steps: usize, stop_after: Option<usize>) -> TrainOptions {
    TrainOptions {
        warmup_steps: None,
        total_steps: steps,
        stop_after,
        lr: 3e-3,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: 5,
        out: out.into(),
        save_every: 100,
    }
}

/// The mean next-token loss of `model` on `batch` (a graph to differentiate).
fn loss_on(model: &Transformer<B>, batch: &PackedBatch) -> Tensor<B, 1> {
    let device = model.embed_tokens.weight.val().device();
    let t = batch.tokens.len();
    let tokens =
        Tensor::<B, 1, Int>::from_data(TensorData::new(batch.tokens.clone(), [t]), &device);
    let targets =
        Tensor::<B, 1, Int>::from_data(TensorData::new(batch.targets.clone(), [t]), &device);
    cross_entropy(
        model.forward_packed(tokens, &batch.cu_seqlens).unwrap(),
        targets,
    )
}

fn grads_of(model: &Transformer<B>, batch: &PackedBatch) -> GradientsParams {
    GradientsParams::from_grads(loss_on(model, batch).backward(), model)
}

/// Every gradient on the host, in module order (replicas' parameter ids differ).
struct Host<'a> {
    grads: &'a GradientsParams,
    out: Vec<Vec<f32>>,
}

impl ModuleVisitor<B> for Host<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.get::<Ascend, D>(param.id) {
            self.out.push(g.into_data().to_vec::<f32>().unwrap());
        }
    }
}

fn host_grads(model: &Transformer<B>, grads: &GradientsParams) -> Vec<Vec<f32>> {
    let mut h = Host {
        grads,
        out: Vec::new(),
    };
    model.visit(&mut h);
    h.out
}

/// Max over parameters of max |a − b| / max(1e-3, max |b|).
fn max_rel(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    b.iter()
        .zip(a)
        .map(|(want, got)| {
            let scale = want.iter().fold(1e-3f32, |m, x| m.max(x.abs()));
            got.iter()
                .zip(want)
                .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
                / scale
        })
        .fold(0f32, f32::max)
}

/// Rank 0's averaged gradients of one step of `n` ranks (broadcast first) vs one device's
/// gradients of the concatenated global batch, from rank 0's initial weights.
fn gradient_gap(n: u32) -> f32 {
    let models = replicas(n);
    let reference = models[0].clone();
    let mut p = packer();
    let parts: Vec<PackedBatch> = (0..n).map(|_| p.next_batch()).collect();
    let devices: Vec<AscendDevice> = (0..n).map(device).collect();
    let groups = ProcessGroup::local(&devices).unwrap();
    let averaged = std::thread::scope(|s| {
        let handles: Vec<_> = models
            .into_iter()
            .zip(groups)
            .zip(parts.clone())
            .map(|((model, group), batch)| {
                s.spawn(move || {
                    let mut sync = DataParallel::new(group, 4096);
                    let model = sync.broadcast_model(model).unwrap();
                    let grads = grads_of(&model, &batch);
                    let grads = sync.average_gradients(&model, grads).unwrap();
                    (sync.rank(), host_grads(&model, &grads), sync.stats())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let want = host_grads(&reference, &grads_of(&reference, &concat_batches(&parts)));
    let (_, rank0, stats) = &averaged[0];
    // Small tensors fused: buckets of ≥ 4 KiB (the norms and sinks share them), not one
    // all-reduce per parameter.
    let params = want.len() as u64;
    assert!(
        stats.gradient_all_reduces > 1 && stats.gradient_all_reduces < params,
        "{} buckets for {params} parameters",
        stats.gradient_all_reduces
    );
    // Every rank holds the same averaged gradients.
    for (r, g, _) in &averaged[1..] {
        assert_eq!(max_rel(g, rank0), 0.0, "rank {r}");
    }
    max_rel(rank0, &want)
}

#[test]
fn averaged_gradients_of_two_ranks_equal_one_devices_gradients_of_the_global_batch() {
    let _g = serial();
    let gap = gradient_gap(2);
    assert!(gap < 1e-4, "max relative gradient gap {gap}");
}

#[test]
fn dropping_the_one_over_n_scale_or_the_rank_zero_broadcast_breaks_the_gradients() {
    let _g = serial();
    test_hooks::drop_gradient_scale(true);
    let unscaled = gradient_gap(2);
    test_hooks::drop_gradient_scale(false);
    // Summed, not averaged: twice the global batch's gradient.
    assert!((unscaled - 1.0).abs() < 0.05, "gap without 1/N: {unscaled}");
    test_hooks::drop_parameter_broadcast(true);
    let unbroadcast = gradient_gap(2);
    test_hooks::drop_parameter_broadcast(false);
    assert!(
        unbroadcast > 0.01,
        "gap without the broadcast: {unbroadcast}"
    );
}

/// Losses of the first steps: `n` ranks vs one device on the global batches; and rank 0's
/// loss on the first batch before and after the data-parallel steps.
fn loss_gap(n: u32, steps: usize) -> (Vec<f32>, Vec<f32>, [f32; 2]) {
    let models = replicas(n);
    let reference = models[0].clone();
    let first = packer().next_batch();
    let before = loss_on(&reference, &first).into_scalar();
    let dir = tempfile::tempdir().unwrap();
    let run = train_data_parallel(
        models,
        TrainState::default(),
        false,
        &packer(),
        &opts(&dir.path().join("dp"), steps, None),
        4096,
        |_| {},
    )
    .unwrap();
    let mut p = packer();
    let (_, single) = train_with(
        reference,
        TrainState::default(),
        false,
        &mut Batches::global(&mut p, n as usize),
        &opts(&dir.path().join("one"), steps, None),
        None,
        |_| {},
    )
    .unwrap();
    let after = loss_on(&run.model, &first).into_scalar();
    (run.state.losses, single.losses, [before, after])
}

#[test]
fn two_and_four_simulated_devices_track_one_device_within_1e_4_over_three_steps() {
    let _g = serial();
    for n in [2, 4] {
        let (dp, one, [before, after]) = loss_gap(n, 3);
        let gap = dp
            .iter()
            .zip(&one)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(gap < 1e-4, "N = {n}: {dp:?} vs {one:?}");
        // The run trains: on the first global batch (rank 0's first) the loss falls. The
        // per-step losses are of other batches each step and may rise over three steps for an
        // unlucky initialisation (the device's random fills are unseeded), as one CI run saw:
        // [5.665, 5.682, 5.718].
        assert!(
            after < before,
            "N = {n}: the first batch's loss did not fall: {before} -> {after}"
        );
    }
}

#[test]
fn a_data_parallel_checkpoint_is_written_by_rank_zero_and_resumes_exactly_with_the_same_n() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let start = replicas(2);
    let reference: Vec<Transformer<B>> = start.to_vec();
    let whole = train_data_parallel(
        start,
        TrainState::default(),
        false,
        &packer(),
        &opts(&dir.path().join("a"), 4, None),
        4096,
        |_| {},
    )
    .unwrap();
    let out = dir.path().join("b");
    let first = train_data_parallel(
        reference,
        TrainState::default(),
        false,
        &packer(),
        &opts(&out, 4, Some(2)),
        4096,
        |_| {},
    )
    .unwrap();
    assert_eq!(first.state.losses.len(), 2);
    // The published checkpoint records the rank count.
    let saved = burn_ascend_model::run_state::published::Published::open(&out).unwrap();
    let state: serde_json::Value =
        serde_json::from_slice(&saved.read("state.json").unwrap()).unwrap();
    assert_eq!(state["devices"], 2);
    // Every rank loads the checkpoint, as separate processes would.
    let resumed_models: Vec<Transformer<B>> = (0..2)
        .map(|i| {
            burn_ascend_model::train::init_model::<B>(
                &burn_ascend_model::train::Init::Resume,
                &out,
                &device(i),
            )
            .unwrap()
            .0
        })
        .collect();
    let state = TrainState::load(&saved.dir).unwrap();
    let resumed = train_data_parallel(
        resumed_models,
        state.clone(),
        true,
        &packer(),
        &opts(&out, 4, None),
        4096,
        |_| {},
    )
    .unwrap();
    let gap = whole
        .state
        .losses
        .iter()
        .zip(&resumed.state.losses)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        gap < 1e-5,
        "{:?} vs {:?}",
        whole.state.losses,
        resumed.state.losses
    );
    // Another rank count is refused, naming the flag.
    let (model, _) = burn_ascend_model::train::init_model::<B>(
        &burn_ascend_model::train::Init::Resume,
        &out,
        &device(0),
    )
    .unwrap();
    let err = train_with(
        model,
        state,
        true,
        &mut Batches::single(&mut packer()),
        &opts(&out, 6, None),
        None,
        |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("invalid --devices: the run in") && err.contains("trained on 2 device(s)"),
        "{err}"
    );
}

#[test]
fn a_world_of_four_ranks_splits_into_context_and_data_parallel_groups_that_sum_their_own_ranks() {
    let _g = serial();
    simulate_devices(4);
    let devices: Vec<AscendDevice> = (0..4).map(device).collect();
    let world = ProcessGroup::local(&devices).unwrap();
    // Groups that do not partition the world are refused naming them, before any collective.
    let e = world[0].split(&[vec![0, 1], vec![1, 2, 3]]).unwrap_err();
    assert!(e.to_string().contains("groups"), "{e}");
    let cp = vec![vec![0, 1], vec![2, 3]];
    let dp = vec![vec![0, 2], vec![1, 3]];
    let sums = std::thread::scope(|s| {
        let handles: Vec<_> = world
            .into_iter()
            .map(|w| {
                let (cp, dp) = (&cp, &dp);
                s.spawn(move || {
                    let (c, d) = (w.split(cp).unwrap(), w.split(dp).unwrap());
                    let rank = w.rank() as f32;
                    let sum = |g: &ProcessGroup| {
                        let t = Tensor::<Ascend, 1>::from_data(
                            TensorData::new(vec![rank], [1]),
                            &g.device(),
                        );
                        let out = g
                            .all_reduce_sum(t.into_primitive().tensor())
                            .unwrap()
                            .to_data();
                        out.to_vec::<f32>().unwrap()[0]
                    };
                    ((c.rank(), c.size()), (d.rank(), d.size()), sum(&c), sum(&d))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    // World rank k = data-parallel group k / 2, context-parallel rank k mod 2.
    assert_eq!(
        sums,
        vec![
            ((0, 2), (0, 2), 1.0, 2.0),
            ((1, 2), (0, 2), 1.0, 4.0),
            ((0, 2), (1, 2), 5.0, 2.0),
            ((1, 2), (1, 2), 5.0, 4.0),
        ]
    );
}
