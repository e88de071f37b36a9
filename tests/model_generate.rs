//! Generation through the paged cache equals recomputing the full sequence (packed varlen
//! forward), for every combination of sinks and sliding windows.

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn_ascend::model::data::SplitMix;
use burn_ascend::model::{
    generate_batch, max_logit_gap, Generator, ModelConfig, Sampling, Transformer,
};

fn tiny(sinks: bool, window: Option<usize>) -> ModelConfig {
    ModelConfig {
        vocab_size: 64,
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        sliding_window: window,
        alternate_sliding: true,
        attention_sinks: sinks,
        attention_bias: false,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-5,
        tie_word_embeddings: false,
    }
}

fn gap(cfg: ModelConfig, seed: u64) -> f32 {
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
    let mut gen = Generator::new(model, 64, 16, &device).unwrap();
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
    let g = gap(tiny(false, Some(4)), 3);
    assert!(g < 1e-4, "gap {g}");
}

#[test]
fn cached_decoding_equals_full_recompute_sinks_and_window() {
    let g = gap(tiny(true, Some(5)), 4);
    assert!(g < 1e-4, "gap {g}");
}
