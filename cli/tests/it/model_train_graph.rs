//! `finetune --graph` end to end on the simulation: the CLI refuses what it cannot capture
//! naming the flag, and the example prints one training launch per step, full and LoRA. The
//! captured training step itself is tested in `model/tests/it/train_graph.rs`.

use std::time::Duration;

use burn::backend::Autodiff;
use burn_ascend::backend::collective::simulate_devices;
use burn_ascend::backend::{Ascend, AscendDevice, AscendKind};
use burn_ascend_cli::args::FinetuneArgs;
use burn_ascend_model::load::config::LayerType;
use burn_ascend_model::load::data::{documents_from_text, BUNDLED_CORPUS};
use burn_ascend_model::train::graph::train_graph;
use burn_ascend_model::train::{TrainOptions, TrainState};
use burn_ascend_model::{ModelConfig, Packer, Tokenizer, Transformer};
use clap::Parser;

use crate::model_examples::{run_example, tiny_checkpoint};

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

#[test]
fn graph_training_refuses_varlen_batches_and_the_cli_names_the_flag() {
    let device = device_at(19);
    let model = Transformer::<Ad>::new(&tiny(), &device).unwrap();
    let docs = documents_from_text(BUNDLED_CORPUS);
    let mut varlen = Packer::new(&docs[..40], &Tokenizer::Bytes, 48, 16, 5).unwrap();
    let opts = TrainOptions {
        warmup_steps: None,
        total_steps: 2,
        stop_after: None,
        lr: 3e-3,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: 5,
        out: tempfile::tempdir().unwrap().path().join("never"),
        save_every: 100,
    };
    let e = train_graph(
        model,
        TrainState::default(),
        false,
        &mut varlen,
        &opts,
        |_| {},
    )
    .unwrap_err();
    assert_eq!(e.param(), Some("--graph"), "{e}");
    assert!(e.to_string().contains("--pack fixed"), "{e}");
    // Each flag the captured step cannot take, refused before anything runs.
    let refusal = |extra: &[&str]| {
        let argv = [&["finetune", "--graph", "--pack", "fixed"][..], extra].concat();
        FinetuneArgs::parse_from(argv).graph_refusal(false)
    };
    for (extra, flag) in [
        (&["--device", "cpu"][..], "--device cpu"),
        (&["--device", "sim", "--devices", "2"][..], "--devices"),
        (
            &["--device", "sim", "--devices", "2", "--zero", "1"][..],
            "--devices",
        ),
        (&["--device", "sim", "--zero", "1"][..], "--zero"),
        (&["--device", "sim", "--cp", "2"][..], "--cp"),
        (
            &["--device", "sim", "--checkpointing"][..],
            "--checkpointing",
        ),
        (
            &[
                "--device",
                "sim",
                "--lora-rank",
                "4",
                "--lora-dropout",
                "0.1",
            ][..],
            "--lora-dropout",
        ),
    ] {
        let e = refusal(extra).unwrap_or_else(|| panic!("{extra:?} accepted"));
        assert!(
            e.starts_with("unsupported: --graph with ") && e.contains(flag),
            "{extra:?}: {e}"
        );
    }
    assert_eq!(refusal(&["--device", "sim"]), None);
    assert_eq!(refusal(&["--device", "sim", "--lora-rank", "4"]), None);
    let e = FinetuneArgs::parse_from(["finetune", "--graph", "--device", "sim"])
        .graph_refusal(false)
        .unwrap();
    assert!(
        e.starts_with("invalid --graph") && e.contains("--pack fixed"),
        "{e}"
    );
    // The example: exit 2 with the one line, no step run.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let r = run_example(
        "finetune",
        &[
            "--graph",
            "--pack",
            "fixed",
            "--steps",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
        false,
    );
    assert_eq!(r.code(), Some(2), "{}", r.tail());
    assert!(
        r.stderr.contains("unsupported: --graph with --device cpu"),
        "{}",
        r.tail()
    );
    assert!(!r.stdout.contains("step "), "{}", r.stdout);
}

#[test]
fn finetune_graph_on_sim_prints_one_training_launch_per_step_full_and_lora() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    tiny_checkpoint(&ckpt);
    for (extra, weights) in [
        (&[][..], "model.safetensors"),
        (&["--lora-rank", "4"][..], "adapter_model.safetensors"),
    ] {
        let out = tmp.path().join(format!("out{}", extra.len()));
        let base = [
            "--device",
            "sim",
            "--graph",
            "--pack",
            "fixed",
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--steps",
            "4",
            "--batch-tokens",
            "32",
            "--seq-len",
            "16",
            "--no-samples",
            "--out",
            out.to_str().unwrap(),
        ];
        let r = run_example(
            "finetune",
            &[&base[..], extra].concat(),
            &[],
            Duration::from_secs(60),
            false,
        );
        assert!(r.ok(), "{extra:?}: {}", r.tail());
        assert!(
            r.stdout
                .contains("finetune: training launches per step 1\n"),
            "{extra:?}: {}",
            r.stdout
        );
        assert!(r.stdout.contains("finetune: device "), "{}", r.stdout);
        assert!(out.join("loss.csv").exists(), "{extra:?}");
        assert!(out.join(weights).exists(), "{extra:?}: no {weights}");
    }
}
