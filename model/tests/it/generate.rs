//! Generation through the paged cache equals recomputing the full sequence (packed varlen
//! forward), for every combination of sinks and sliding windows.

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn_ascend::AttendPath;
use burn_ascend_model::load::config::{LayerType, RopeScaling};
use burn_ascend_model::load::data::SplitMix;
use burn_ascend_model::{
    generate_batch, max_logit_gap, Generator, ModelConfig, Sampling, Transformer,
};

fn tiny(sinks: bool, window: Option<usize>) -> ModelConfig {
    tiny_d(sinks, window, 8)
}

/// `tiny` with head dim `d` (64 and 128 are the ones FIA's learnableSink takes).
fn tiny_d(sinks: bool, window: Option<usize>, head_dim: usize) -> ModelConfig {
    ModelConfig {
        vocab_size: 64,
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim,
        // Windows count keys including the query (transformers' `W`); the callers pass one
        // more than before the semantics changed, so every number here is unchanged.
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

fn gap(cfg: ModelConfig, seed: u64) -> f32 {
    gap_on(cfg, seed, None, 16)
}

/// The largest cached-vs-full logit gap with pages of `block_size` tokens; `path`: the attend
/// path the generator must have picked (asserted).
fn gap_on(cfg: ModelConfig, seed: u64, path: Option<AttendPath>, block_size: usize) -> f32 {
    let device = Default::default();
    NdArray::<f32>::seed(&device, seed);
    let mut model = Transformer::<NdArray>::new(&cfg, &device).unwrap();
    // Non-zero sinks so their term matters.
    for (i, layer) in model.layers.iter_mut().enumerate() {
        if let Some(s) = &mut layer.self_attn.sinks {
            *s = burn::module::Param::from_tensor(burn::tensor::Tensor::from_floats(
                [1.5, -0.5, 0.25 * i as f32, 3.0],
                &device,
            ));
        }
    }
    let mut gen = Generator::new(model, 64, block_size, &device).unwrap();
    if let Some(p) = path {
        assert_eq!(gen.attend_path(), p);
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
    let run = generate_batch(&mut gen, &prompts, 12, &sampling, &mut SplitMix(seed)).unwrap();
    assert!(run.generated.iter().all(|g| g.len() == 12));
    max_logit_gap(gen.model(), &run).unwrap()
}

#[test]
fn cached_decoding_equals_full_recompute_plain() {
    let g = gap(tiny(false, None), 1);
    assert!(g < 1e-4, "gap {g}");
}

#[test]
fn cached_decoding_equals_full_recompute_sinks() {
    let g = gap(tiny(true, None), 2);
    assert!(g < 1e-4, "gap {g}");
}

#[test]
fn cached_decoding_equals_full_recompute_window() {
    let g = gap(tiny(false, Some(5)), 3);
    assert!(g < 1e-4, "gap {g}");
}

#[test]
fn cached_decoding_equals_full_recompute_sinks_and_window() {
    // Head dim 8: FIA's learnableSink does not take it, so the sinks ride on a placeholder.
    let g = gap_on(tiny(true, Some(6)), 4, Some(AttendPath::PromptIncre), 16);
    assert!(g < 1e-4, "gap {g}");
}

#[test]
fn cached_decoding_through_fused_inference_attention_equals_full_recompute() {
    for (sinks, window, seed) in [(true, Some(6), 6), (true, None, 7), (false, Some(4), 8)] {
        let g = gap_on(tiny_d(sinks, window, 64), seed, Some(AttendPath::Fused), 16);
        assert!(g < 1e-4, "sinks {sinks} window {window:?}: gap {g}");
    }
    // A window-only model of another head dim runs FIA on pages of 128 tokens (CANN's rule
    // for its prefill), and prompt / incremental attention on smaller ones.
    let g = gap_on(tiny(false, Some(5)), 9, Some(AttendPath::Fused), 128);
    assert!(g < 1e-4, "gap {g}");
    let g = gap_on(tiny(false, Some(5)), 9, Some(AttendPath::PromptIncre), 16);
    assert!(g < 1e-4, "gap {g}");
}

/// The same checkpoint served on the `Ascend` backend (host simulation of the ACL ABI: prompt
/// attention, the cache scatter and paged incremental attention as aclnn calls — or FIA for
/// head dim 64) generates the same greedy tokens as on NdArray, with logits within 1e-4, and
/// no attention op falls back.
#[test]
fn serving_on_the_ascend_simulation_matches_ndarray() {
    use burn_ascend::backend::{fallback_count, Ascend, AscendDevice};
    use burn_ascend_model::model::hf_checkpoint::{load_hf, save_hf};

    for (cfg, path) in [
        (tiny(true, Some(5)), AttendPath::PromptIncre),
        (tiny_d(true, Some(5), 64), AttendPath::Fused),
    ] {
        let device = Default::default();
        NdArray::<f32>::seed(&device, 5);
        let model = Transformer::<NdArray>::new(&cfg, &device).unwrap();
        let dir = tempfile::tempdir().unwrap();
        save_hf(&model, dir.path()).unwrap();
        let prompts = vec![vec![1u32, 5, 9, 2, 7], vec![3u32; 9]];
        let sampling = vec![Sampling::Greedy; 2];

        let mut gen = Generator::new(model, 16, 16, &device).unwrap();
        let want = generate_batch(&mut gen, &prompts, 8, &sampling, &mut SplitMix(1)).unwrap();

        let sim = AscendDevice::sim();
        let ops = ["prompt_fwd", "incre_fwd", "fia_fwd", "scatter_kv"];
        let before = ops.map(fallback_count);
        let model = load_hf::<Ascend>(dir.path(), &sim).unwrap();
        let mut gen = Generator::new(model, 16, 16, &sim).unwrap();
        assert_eq!(gen.attend_path(), path);
        let got = generate_batch(&mut gen, &prompts, 8, &sampling, &mut SplitMix(1)).unwrap();
        assert_eq!(ops.map(fallback_count), before, "an attention op fell back");

        assert_eq!(got.generated, want.generated);
        for (g, w) in got
            .logits
            .iter()
            .flatten()
            .zip(want.logits.iter().flatten())
        {
            let gap = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(gap < 1e-4, "logits differ by {gap}");
        }
    }
}

#[test]
fn the_attend_path_can_only_change_before_the_first_sequence() {
    let device = Default::default();
    let model = Transformer::<NdArray>::new(&tiny_d(true, Some(5), 64), &device).unwrap();
    let gen = Generator::new(model, 8, 16, &device).unwrap();
    let mut gen = gen.with_attend_path(AttendPath::PromptIncre).unwrap();
    assert_eq!(gen.attend_path(), AttendPath::PromptIncre);
    gen.add(&[1, 2, 3]).unwrap();
    let e = gen.with_attend_path(AttendPath::Fused).unwrap_err();
    assert!(e.to_string().contains("invalid path"), "{e}");
}

#[test]
fn f16_and_bf16_serving_through_fia_sends_a_bf16_sink_and_tracks_the_f32_logits() {
    use burn::tensor::FloatDType;
    use burn_ascend::backend::{fallback_count, Ascend, AscendDevice};
    use burn_ascend::cann::acl::DataType;

    let cfg = tiny_d(true, Some(5), 64);
    let sim = AscendDevice::sim();
    // CANN 8.5.0's sink rule: a BF16 sink in every layout (this thread only).
    burn_ascend_acl_sim::set_cann_release(Some(burn_ascend::contract::CannRelease::V8_5_0));
    let prompts = vec![vec![1u32, 5, 9, 2, 7], vec![3u32; 9]];
    let sampling = vec![Sampling::Greedy; 2];
    let run = |dtype: Option<FloatDType>| {
        Ascend::seed(&sim, 5);
        let model = Transformer::<Ascend>::new(&cfg, &sim).unwrap();
        let mut gen = Generator::new(model, 16, 16, &sim).unwrap();
        if let Some(dt) = dtype {
            gen = gen.with_attention_dtype(dt).unwrap();
        }
        assert_eq!(gen.attend_path(), AttendPath::Fused);
        generate_batch(&mut gen, &prompts, 6, &sampling, &mut SplitMix(1)).unwrap()
    };
    let composite = fallback_count("fia_composite");
    let want = run(None);
    // CANN's FIA takes no FLOAT query: the f32 model attends through the counted composite,
    // and no FIA call reaches the simulation.
    assert!(fallback_count("fia_composite") > composite);
    assert_eq!(burn_ascend_acl_sim::last_learnable_sink_dtype(), None);
    let ops = ["prompt_fwd", "incre_fwd", "fia_fwd", "scatter_kv"];
    // Half precision over 6 decode steps of a random model: the logits (of order 1) stay
    // within 5e-2 of the f32 run's (bf16 keeps 8 bits of mantissa, f16 11).
    for (dt, sink, bound) in [
        (FloatDType::BF16, DataType::Bf16, 5e-2),
        (FloatDType::F16, DataType::Bf16, 1e-2),
    ] {
        let before = ops.map(fallback_count);
        let got = run(Some(dt));
        assert_eq!(ops.map(fallback_count), before, "an attention op fell back");
        // CANN 8.5.0 (set above): every layout takes a BF16 sink only.
        assert_eq!(burn_ascend_acl_sim::last_learnable_sink_dtype(), Some(sink));
        // Step by step while both runs generated the same tokens (after a different token
        // the contexts differ); the first step of each prompt is always compared.
        for (seq, (gl, wl)) in got.logits.iter().zip(&want.logits).enumerate() {
            for (step, (g, w)) in gl.iter().zip(wl).enumerate() {
                let gap = g
                    .iter()
                    .zip(w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(
                    gap < bound,
                    "{dt:?}: prompt {seq} step {step}: logits differ from f32 by {gap}"
                );
                if got.generated[seq][step] != want.generated[seq][step] {
                    break;
                }
            }
        }
    }
    burn_ascend_acl_sim::set_cann_release(None);
}
