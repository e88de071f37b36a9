//! Decoding through a captured ACL graph on the simulation (`generate --graph`): every decode
//! step is one replay (one launch per generated token) and the tokens are exactly the eager
//! path's, in BF16 (CANN's FIA takes no FLOAT query); `--graph` off an Ascend device or with an
//! f32 model is refused naming the flag.

use std::time::Duration;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{FloatDType, Tensor};
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend_model::config::{LayerType, RopeScaling};
use burn_ascend_model::data::SplitMix;
use burn_ascend_model::{
    generate_batch, generate_batch_graph, Generator, ModelConfig, Sampling, Transformer,
};

use crate::model_examples::{run_example, tiny_checkpoint};

fn config(sinks: bool, window: Option<usize>) -> ModelConfig {
    ModelConfig {
        vocab_size: 64,
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        // FIA takes a learnableSink for head dims 64 and 128.
        head_dim: 64,
        sliding_window: window,
        layer_types: LayerType::alternating(2),
        attention_sinks: sinks,
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

/// Initialises every parameter (reading it).
struct Materialise;

impl<B: burn::tensor::backend::Backend> ModuleVisitor<B> for Materialise {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}

#[test]
fn graph_decoding_replays_one_launch_per_token_and_yields_the_eager_tokens() {
    let device = AscendDevice::sim();
    // Sinks and a window (gpt-oss's shape, FIA on both paths), then neither (incremental
    // attention eagerly, FIA with a mask in the graph).
    for (sinks, window) in [(true, Some(4)), (false, None)] {
        let cfg = config(sinks, window);
        let mut model = Transformer::<Ascend>::new(&cfg, &device).unwrap();
        for (i, layer) in model.layers.iter_mut().enumerate() {
            if let Some(s) = &mut layer.self_attn.sinks {
                *s = Param::from_tensor(Tensor::from_floats(
                    [1.5, -0.5, 0.25 * i as f32, 3.0],
                    &device,
                ));
            }
        }
        let prompts = vec![vec![1u32, 5, 9], vec![3u32; 21], vec![7u32]];
        let sampling = vec![
            Sampling::Greedy,
            Sampling::TopP {
                top_p: 0.9,
                temperature: 1.0,
            },
            Sampling::Greedy,
        ];
        let max_new = 12;
        // Parameters are initialised lazily, a clone drawing its own: materialise them once so
        // that both generators get the same values.
        model.visit(&mut Materialise);
        // BF16 attention, as served on an NPU: CANN's FIA takes no FLOAT query.
        let bf16 = |g: Generator<Ascend>| g.with_attention_dtype(FloatDType::BF16).unwrap();
        let mut eager = bf16(Generator::new(model.clone(), 64, 16, &device).unwrap());
        let want =
            generate_batch(&mut eager, &prompts, max_new, &sampling, &mut SplitMix(3)).unwrap();
        let mut graphed = bf16(Generator::new(model, 64, 16, &device).unwrap());
        let (got, stats) = generate_batch_graph(
            &mut graphed,
            &prompts,
            max_new,
            &sampling,
            &mut SplitMix(3),
            &[],
        )
        .unwrap();
        let case = format!("sinks {sinks}, window {window:?}");
        assert_eq!(got.generated, want.generated, "{case}");
        // The same arithmetic where the same op runs: the graph's extra (masked) keys weigh
        // exactly zero.
        let gap = got
            .logits
            .iter()
            .flatten()
            .zip(want.logits.iter().flatten())
            .flat_map(|(a, b)| a.iter().zip(b))
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        // BF16: where the eager step runs incremental attention (no sinks, no window) and the
        // graph FIA, the two operators round their BF16 outputs apart.
        let bound = if sinks || window.is_some() {
            1e-5
        } else {
            2e-3
        };
        assert!(gap <= bound, "{case}: logits differ by {gap}");
        assert_eq!(stats.steps, max_new as u64 - 1, "{case}");
        assert_eq!(stats.captures, 1, "{case}: one batch shape, one capture");
        assert_eq!(stats.launches, stats.steps, "{case}: {stats:?}");
        assert!(stats.recorded_tasks > 50, "{case}: {stats:?}");
        // The caches' bookkeeping advanced as the eager path's did.
        for i in 0..prompts.len() {
            assert_eq!(graphed.len(i), eager.len(i), "{case}");
        }
    }
}

#[test]
fn generate_graph_on_the_simulation_prints_one_launch_per_token_and_the_eager_text() {
    let dir = std::env::temp_dir().join(format!("burn-ascend-graph-{}", std::process::id()));
    tiny_checkpoint(&dir);
    let c = dir.to_str().unwrap();
    let limit = Duration::from_secs(120);
    let args = [
        "--checkpoint",
        c,
        "--device",
        "sim",
        "--greedy",
        "--max-new",
        "6",
        "--dtype",
        "bf16",
    ];
    let eager = run_example("generate", &args, &[], limit, false);
    let graph_args: Vec<&str> = args.iter().copied().chain(["--graph"]).collect();
    let graph = run_example("generate", &graph_args, &[], limit, false);
    assert!(
        eager.ok() && graph.ok(),
        "{}\n{}",
        eager.stderr,
        graph.stderr
    );
    assert!(
        graph
            .stdout
            .contains("generate: decode launches per token 1 "),
        "{}",
        graph.stdout
    );
    let text = |out: &str| -> String {
        out.lines()
            .filter(|l| !l.starts_with("generate: "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(text(&graph.stdout), text(&eager.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn generate_graph_of_an_f32_model_is_refused_naming_the_dtype_fia_takes() {
    let r = run_example(
        "generate",
        &["--device", "sim", "--graph"],
        &[],
        Duration::from_secs(60),
        false,
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "unsupported: --graph with an f32 model: CANN's fused inference attention takes \
             FLOAT16/BFLOAT16 (use --dtype bf16)"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn generate_graph_on_the_cpu_is_refused_naming_the_flag() {
    let r = run_example(
        "generate",
        &["--device", "cpu", "--graph"],
        &[],
        Duration::from_secs(60),
        false,
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("unsupported: --graph") && r.stderr.contains("Ascend"),
        "{}",
        r.stderr
    );
}
