//! A captured training step on the simulation (`finetune --graph`): eager and
//! graph runs of the same seed and fixed-row data give the same losses and weights, each
//! replayed step is one launch, the capture rules are enforced with typed errors, and the
//! CLI refuses what it cannot capture naming the flag.

use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_ascend::backend::collective::simulate_devices;
use burn_ascend::backend::graph::{
    capture, reserve_workspace, task_group, update_task_group, write_in_place, GraphError,
};
use burn_ascend::backend::{adamw_step_in_place, Ascend, AscendDevice, AscendKind, AscendTensor};
use burn_ascend::AdamWHyper;
use burn_ascend_model::load::config::LayerType;
use burn_ascend_model::load::data::{documents_from_text, BUNDLED_CORPUS};
use burn_ascend_model::model::lora::{self, LoraSettings, LoraTarget};
use burn_ascend_model::train::graph::{train_graph, GraphTrainStats};
use burn_ascend_model::train::{train, TrainOptions, TrainState};
use burn_ascend_model::{ModelConfig, Packer, Tokenizer, Transformer};
use burn_ascend_test_support::max_abs_diff;

type Ad = Autodiff<Ascend>;

/// This suite's simulated devices (the process is shared: other suites use other indices, and
/// a capture must not see another test's work on its device): 17 for the training runs, 18
/// for the capture-rule checks, 19 for the refusals (whose eager warm-up step would otherwise
/// run beside the training run's capture).
fn device_at(index: u32) -> AscendDevice {
    simulate_devices(20);
    AscendDevice {
        kind: AscendKind::Simulation,
        index,
    }
}

fn device() -> AscendDevice {
    device_at(17)
}

/// gpt-oss's shape in small: sinks, a sliding layer and a full one, grouped KV heads.
fn tiny() -> ModelConfig {
    ModelConfig {
        vocab_size: 256,
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        head_dim: 16,
        sliding_window: Some(8),
        layer_types: LayerType::alternating(2),
        ..ModelConfig::small_byte_model()
    }
}

/// 3 rows of 16 tokens per batch.
fn packer() -> Packer {
    let docs = documents_from_text(BUNDLED_CORPUS);
    Packer::new(&docs[..40], &Tokenizer::Bytes, 48, 16, 5)
        .unwrap()
        .with_fixed_rows()
}

fn params(model: &Transformer<Ad>) -> Vec<f32> {
    struct Collect<'a>(&'a mut Vec<f32>);
    impl ModuleVisitor<Ad> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<Ad, D>>) {
            // (LoRA's frozen base is bf16: widened exactly.)
            self.0.extend(
                p.val()
                    .into_data()
                    .convert::<f32>()
                    .to_vec::<f32>()
                    .unwrap(),
            );
        }
    }
    let mut out = Vec::new();
    model.visit(&mut Collect(&mut out));
    out
}

/// Options of a `steps`-step run at learning rate `lr` writing below `dir/name`.
fn run_opts(dir: &std::path::Path, name: &str, steps: usize, lr: f64) -> TrainOptions {
    TrainOptions {
        warmup_steps: None,
        total_steps: steps,
        stop_after: None,
        lr,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: 5,
        out: dir.join(name),
        save_every: 100,
    }
}

/// `start` trained eagerly and captured, each on a fresh `packer()`:
/// `(eager, eager state, graph, graph state, graph stats)`.
fn eager_and_captured(
    start: &Transformer<Ad>,
    packer: impl Fn() -> Packer,
    opts: impl Fn(&str) -> TrainOptions,
) -> (
    Transformer<Ad>,
    TrainState,
    Transformer<Ad>,
    TrainState,
    GraphTrainStats,
) {
    let fresh = TrainState::default;
    let (eager, eager_state) = train(
        start.clone(),
        fresh(),
        false,
        &mut packer(),
        &opts("eager"),
        |_| {},
    )
    .unwrap();
    let (graph, graph_state, stats) = train_graph(
        start.clone(),
        fresh(),
        false,
        &mut packer(),
        &opts("graph"),
        |_| {},
    )
    .unwrap();
    (eager, eager_state, graph, graph_state, stats)
}

/// The replay runs the eager step's ops on the same values in the same order: on the
/// simulation the losses agree to the bit. 1e-5 relative leaves room for a device whose
/// reductions reassociate differently between two launches of the same kernel; the loss
/// moves by ~1e-2 per step, so a replay of stale inputs, a missed rate update or a lost step
/// count would exceed it by orders of magnitude.
fn assert_same_losses(eager: &TrainState, graph: &TrainState) {
    assert_eq!(eager.losses.len(), graph.losses.len());
    for (i, (e, g)) in eager.losses.iter().zip(&graph.losses).enumerate() {
        assert!(
            (e - g).abs() <= 1e-5 * e.abs(),
            "step {i}: eager loss {e}, graph {g}"
        );
    }
}

#[test]
fn captured_training_steps_replay_one_launch_each_with_the_eager_losses_and_weights() {
    let device = device();
    let dir = tempfile::tempdir().unwrap();
    // Warmup over step 0, then cosine: the learning rate changes at every step, so every
    // replay after the first needs the optimizer's task group updated.
    let opts = |name: &str| run_opts(dir.path(), name, 5, 3e-3);
    let start = Transformer::<Ad>::new(&tiny(), &device).unwrap();
    // Materialised once, so that both runs start from these weights.
    let initial = params(&start);
    let (eager, eager_state, graph, graph_state, stats) = eager_and_captured(&start, packer, opts);
    // One warm-up step, then 4 replays of one launch each; 3 input writes per replay (tokens,
    // targets, AdamW's step count); the rate updated before each replay whose rate changed.
    assert_eq!(
        (stats.eager_steps, stats.replayed_steps),
        (1, 4),
        "{stats:?}"
    );
    assert_eq!(stats.launches, 4, "{stats:?}");
    assert_eq!(stats.uploads, 12, "{stats:?}");
    assert_eq!(stats.lr_updates, 3, "{stats:?}");
    assert!(stats.recorded_tasks > 100, "{stats:?}");
    assert_eq!(eager_state.losses.len(), 5);
    assert_same_losses(&eager_state, &graph_state);
    // Weights: five AdamW steps move them by up to ~1.5e-2 (lr 3e-3 each); 1e-6 absolute is
    // f32 rounding of a few updates, far below one step's change.
    let (a, b) = (params(&eager), params(&graph));
    assert!(
        max_abs_diff(&a, &initial) > 1e-3,
        "the weights did not train"
    );
    let gap = max_abs_diff(&a, &b);
    assert!(
        gap <= 1e-6,
        "largest weight difference eager vs graph {gap}"
    );
    // The published checkpoint carries the graph's optimizer state: a resumed eager run
    // continues it as it continues an eager run's.
    assert!(dir.path().join("graph/LATEST").exists());
}

#[test]
fn graph_capture_rules_are_refused_with_typed_errors() {
    let device = device_at(18);
    // A capture may not grow the workspace: reserved first, as a training capture does.
    reserve_workspace(&device, 1 << 20).unwrap();
    let t = AscendTensor::from_data(TensorData::new(vec![0f32; 4], [4]), &device);
    // An input write of the wrong size names both sizes.
    match write_in_place(&t, &[0u8; 12]) {
        Err(GraphError::Failed(m)) => {
            assert!(m.contains("12 bytes") && m.contains("16 bytes"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // A host read inside the capture.
    let x = Tensor::<Ascend, 1>::from_data(TensorData::new(vec![1f32, 2.0], [2]), &device);
    match capture(&device, || (x.clone() * 2.0).into_data()) {
        Err(GraphError::Refused(m)) => assert!(
            m.contains("aclrtSynchronizeStream") || m.contains("capture"),
            "{m}"
        ),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // A task group outside a capture, and an update issuing fewer calls than the group holds.
    assert!(matches!(
        task_group(&device, || ()),
        Err(GraphError::Failed(_))
    ));
    let f = |v: Vec<f32>| AscendTensor::from_data(TensorData::new(v, [2]), &device);
    let hyper = |lr: f32| AdamWHyper {
        lr,
        beta1: 0.9,
        beta2: 0.999,
        weight_decay: 0.1,
        eps: 1e-8,
    };
    let (var, m, v, grad, step) = (
        f(vec![1.0, -2.0]),
        f(vec![0.0; 2]),
        f(vec![0.0; 2]),
        f(vec![0.5, 0.25]),
        AscendTensor::from_data(TensorData::new(vec![0f32], [1]), &device),
    );
    let adamw = |lr| adamw_step_in_place(&var, &m, &v, &grad, &step, &hyper(lr)).unwrap();
    let (graph, (group, ())) =
        capture(&device, || task_group(&device, || adamw(0.0)).unwrap()).unwrap();
    match update_task_group(&device, group, || ()) {
        Err(GraphError::Failed(m)) => assert!(m.contains("1 tasks but 0"), "{m}"),
        other => panic!("{other:?}"),
    }
    // The group's launch re-issued at another learning rate: the replay updates with it, as
    // the same call run eagerly on a copy does.
    update_task_group(&device, group, || adamw(0.1)).unwrap();
    graph.replay().unwrap();
    let (var2, m2, v2) = (f(vec![1.0, -2.0]), f(vec![0.0; 2]), f(vec![0.0; 2]));
    adamw_step_in_place(&var2, &m2, &v2, &grad, &step, &hyper(0.1)).unwrap();
    let read = |t: &AscendTensor| {
        Tensor::<Ascend, 1>::from_primitive(TensorPrimitive::Float(t.clone()))
            .into_data()
            .to_vec::<f32>()
            .unwrap()
    };
    let (replayed, eager) = (read(&var), read(&var2));
    assert_eq!(replayed, eager);
    // lr 0.1: the first AdamW step moves each weight by about lr (plus the decay's lr·wd·w).
    assert!(
        (replayed[0] - (1.0 - 0.1 - 0.01)).abs() < 1e-4,
        "{replayed:?}"
    );
    // An in-place update refuses a step count of the wrong shape, naming it.
    let bad = f(vec![0.0; 2]);
    let e = adamw_step_in_place(&var, &m, &v, &grad, &bad, &hyper(0.1)).unwrap_err();
    assert_eq!(e.param(), Some("step"), "{e}");
}

#[test]
fn captured_lora_steps_train_the_adapters_as_the_eager_loop_and_leave_the_base_bit_identical() {
    // A device of its own (22): this capture must not see another test's work.
    simulate_devices(23);
    let device = AscendDevice {
        kind: AscendKind::Simulation,
        index: 22,
    };
    let dir = tempfile::tempdir().unwrap();
    let settings = LoraSettings {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: LoraTarget::parse_list("q_proj,v_proj,down_proj", "--lora-targets").unwrap(),
        base_model: "tiny".into(),
    };
    let base = Transformer::<Ad>::new(&tiny(), &device).unwrap();
    let start = lora::freeze_base(lora::attach(base, &settings, 3, &device).unwrap());
    // Materialised once, so that both runs start from these weights.
    let initial = params(&start);
    let (eager, eager_state, graph, graph_state, stats) =
        eager_and_captured(&start, packer, |name| run_opts(dir.path(), name, 4, 1e-2));
    assert_eq!(
        (stats.eager_steps, stats.replayed_steps, stats.launches),
        (1, 3, 3),
        "{stats:?}"
    );
    assert_same_losses(&eager_state, &graph_state);
    // The adapters trained alike (lr 1e-2: they move by ~1e-2 per step; 1e-6 is f32
    // rounding), and every frozen weight is bit for bit the initial one in both runs.
    let adapter = |m: &Transformer<Ad>| -> Vec<f32> {
        lora::adapters(m)
            .iter()
            .flat_map(|(_, _, a)| {
                let mut v = a.lora_a.val().into_data().to_vec::<f32>().unwrap();
                v.extend(a.lora_b.val().into_data().to_vec::<f32>().unwrap());
                v
            })
            .collect()
    };
    let (a, b) = (adapter(&eager), adapter(&graph));
    let gap = max_abs_diff(&a, &b);
    assert!(
        gap <= 1e-6,
        "largest adapter difference eager vs graph {gap}"
    );
    let (pe, pg) = (params(&eager), params(&graph));
    let moved = |p: &[f32]| p.iter().zip(&initial).filter(|(x, y)| x != y).count();
    assert_eq!(moved(&pe), moved(&pg));
    assert!(
        moved(&pg) > 0 && moved(&pg) <= a.len(),
        "only adapter values may change: {} of {} values moved, {} adapter values",
        moved(&pg),
        pg.len(),
        a.len()
    );
}

#[test]
fn captured_steps_on_chat_data_weight_the_loss_by_the_assistant_mask_as_the_eager_loop() {
    // A device of its own (23).
    simulate_devices(24);
    let device = AscendDevice {
        kind: AscendKind::Simulation,
        index: 23,
    };
    // Conversations whose second half is the assistant's: the mask changes from batch to
    // batch, so a replay that kept the captured weights would train on the wrong targets.
    let chat = || {
        let docs = documents_from_text(BUNDLED_CORPUS);
        let examples = docs[..40]
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let ids: Vec<u32> = d.bytes().take(40).map(u32::from).collect();
                let from = ids.len() / 2 - i % 5;
                let assistant = (0..ids.len()).map(|j| j >= from).collect();
                burn_ascend_model::load::chat::instruct::ChatExample { ids, assistant }
            })
            .collect();
        Packer::chat(examples, 48, 16, 5).unwrap().with_fixed_rows()
    };
    let dir = tempfile::tempdir().unwrap();
    let start = Transformer::<Ad>::new(&tiny(), &device).unwrap();
    // Materialised once, so that both runs start from these weights.
    let _ = params(&start);
    let (eager, eager_state, graph, graph_state, stats) =
        eager_and_captured(&start, chat, |name| run_opts(dir.path(), name, 4, 3e-3));
    // Tokens, targets, the loss weights and AdamW's step count per replay.
    assert_eq!(stats.uploads, 3 * 4, "{stats:?}");
    assert_same_losses(&eager_state, &graph_state);
    let gap = max_abs_diff(&params(&eager), &params(&graph));
    assert!(
        gap <= 1e-6,
        "largest weight difference eager vs graph {gap}"
    );
}
