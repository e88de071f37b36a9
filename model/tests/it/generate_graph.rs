//! Decoding through a captured ACL graph on the simulation (`generate --graph`): every decode
//! step is one replay (one launch per generated token) and the tokens are exactly the eager
//! path's, in BF16 (CANN's FIA takes no FLOAT query); each replay's attention reads every
//! sequence's cached tokens only (its `actualSeqLengthsKv` re-issued through a task-group update
//! per layer); `--graph` off an Ascend device, with an f32 model or with a mixture-of-experts
//! model (its router is read on the host) is refused naming it.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn_ascend::backend::collective::simulate_devices;
use burn_ascend::backend::graph::{
    capture, reserve_workspace, task_group, update_task_group, GraphError,
};
use burn_ascend::backend::{reserve_small, Ascend, AscendDevice, AscendKind};
use burn_ascend_model::load::config::{LayerType, RopeScaling};
use burn_ascend_model::load::data::SplitMix;
use burn_ascend_model::serve::generate_graph::DecodeGraph;
use burn_ascend_model::{
    generate_batch, generate_batch_graph, Generator, ModelConfig, Sampling, Transformer,
};

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
    let (_guard, device) = device_11();
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

/// This suite's own simulated device for the captures it inspects (other suites use others).
/// The simulated device of this module's captures, one test at a time: a capture records
/// whatever is queued on its device's stream, so no other test may use the device meanwhile
/// (the backend makes other threads' later ops wait for a capture, but an op already past
/// that wait when the capture begins would enter it).
fn device_11() -> (std::sync::MutexGuard<'static, ()>, AscendDevice) {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    simulate_devices(12);
    (
        guard,
        AscendDevice {
            kind: AscendKind::Simulation,
            index: 11,
        },
    )
}

#[test]
fn each_replayed_decode_attends_every_sequences_cached_tokens_only_with_the_eager_logits() {
    let (_guard, device) = device_11();
    // Layer 0 slides (a window mask and the lengths), layer 1 attends fully (the lengths
    // alone), both with sinks.
    let cfg = config(true, Some(4));
    let model = Transformer::<Ascend>::new(&cfg, &device).unwrap();
    model.visit(&mut Materialise);
    let prompts = [vec![1u32, 5, 9], vec![3u32; 21], vec![7u32]];
    // BF16 attention, as served on an NPU (CANN's FIA takes no FLOAT query).
    let bf16 = |g: Generator<Ascend>| g.with_attention_dtype(FloatDType::BF16).unwrap();
    let mut eager = bf16(Generator::new(model.clone(), 64, 16, &device).unwrap());
    let mut graphed = bf16(Generator::new(model, 64, 16, &device).unwrap());
    let mut tokens = Vec::new();
    for p in &prompts {
        let (_, want) = eager.add(p).unwrap();
        let (_, got) = graphed.add(p).unwrap();
        assert_eq!(got, want);
        tokens.push(argmax(&want));
    }
    let seqs = [0usize, 1, 2];
    let (steps, layers) = (6usize, cfg.num_hidden_layers);
    let mut graph: Option<DecodeGraph> = None;
    let mut stats = Default::default();
    for step in 0..steps {
        let want = eager.step(&seqs, &tokens).unwrap();
        let got = graphed
            .step_graph(&mut graph, &mut stats, &seqs, &tokens, steps - step)
            .unwrap();
        let gap = got
            .iter()
            .flatten()
            .zip(want.iter().flatten())
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(gap <= 1e-5, "step {step}: logits differ by {gap}");
        // The replay just read (the logits): its FIA calls held the lengths the sequences
        // have now — 4, 22 and 2 tokens at the first step — not the reserved blocks' width.
        let lens: Vec<(usize, usize)> = seqs.iter().map(|&s| (1, eager.len(s))).collect();
        assert_eq!(lens[0], (1, 4 + step), "step {step}");
        let attention = graph.as_ref().unwrap().recorded_attention().unwrap();
        assert_eq!(attention, vec![lens; layers], "step {step}");
        tokens = want.iter().map(|l| argmax(l)).collect();
    }
    assert_eq!(stats.steps, steps as u64);
    assert_eq!(stats.captures, 1, "{stats:?}");
    // Each replayed step re-issues every layer's attention (the capture's step holds its own
    // lengths already), recorded into the graph: still one launch per token.
    assert_eq!(
        stats.attention_updates,
        ((steps - 1) * layers) as u64,
        "{stats:?}"
    );
    assert_eq!(stats.launches, stats.steps, "{stats:?}");
}

fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap() as u32
}

#[test]
fn a_task_group_update_that_would_allocate_is_refused_naming_the_update() {
    let (_guard, device) = device_11();
    reserve_small(&device, 1 << 20).unwrap();
    reserve_workspace(&device, 1 << 20).unwrap();
    let x = Tensor::<Ascend, 1>::from_data(TensorData::new(vec![1f32, 2.0], [2]), &device);
    // Captured, the op's output block comes from the reserved pool and stays the graph's; an
    // update re-issuing it would take a new block the pool hands out again once dropped.
    let (_graph, (group, _y)) =
        capture(&device, || task_group(&device, || x.clone() * 2.0).unwrap()).unwrap();
    match update_task_group(&device, group, || x.clone() * 3.0) {
        Err(GraphError::Failed(m)) => {
            assert!(
                m.contains("refused") && m.contains("task-group update"),
                "{m}"
            )
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn graph_decoding_of_a_mixture_of_experts_model_is_refused_naming_it() {
    let (_guard, device) = device_11();
    let cfg = ModelConfig {
        moe: Some(burn_ascend_model::load::config::MoeConfig {
            kind: burn_ascend_model::load::config::MoeKind::GptOss,
            moe_intermediate_size: config(true, None).intermediate_size,
            dense_layers: Vec::new(),
            num_local_experts: 4,
            num_experts_per_tok: 2,
            swiglu_limit: 7.0,
            swiglu_alpha: 1.702,
            mxfp4: false,
            output_router_logits: false,
        }),
        ..config(true, None)
    };
    let model = Transformer::<Ascend>::new(&cfg, &device).unwrap();
    let mut gen = Generator::new(model, 64, 16, &device)
        .unwrap()
        .with_attention_dtype(FloatDType::BF16)
        .unwrap();
    let e = generate_batch_graph(
        &mut gen,
        &[vec![1u32, 5, 9]],
        3,
        &[Sampling::Greedy],
        &mut SplitMix(3),
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(&e, burn_ascend::AttnError::Unsupported(m) if m.contains("mixture-of-experts")),
        "{e}"
    );
}
