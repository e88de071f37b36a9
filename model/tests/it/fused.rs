//! The model's fused path (RMSNorm, RoPE, SwiGLU and the loss through the fused ops)
//! equals the unfused one on `Autodiff<Ascend>` (the simulation), where each fused op is one
//! aclnn launch each way: the loss and every checked gradient of one step; the fused RoPE gives
//! the composite's q and k for every RoPE variant the model reads, on Ascend and NdArray.

use burn::backend::{Autodiff, NdArray};
use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::backend::{fallback_counts, Ascend, AscendDevice};
use burn_ascend::kernels::reference::fused::rotary as rotary_ref;
use burn_ascend::{rotary_embedding, RotaryMode, TrainingBackend};
use burn_ascend_model::load::config::{LayerType, RopeScaling};
use burn_ascend_model::model::rope::Rope;
use burn_ascend_model::{cross_entropy, cross_entropy_fused, ModelConfig, Transformer};
use burn_ascend_test_support::max_abs_diff;

type A = Autodiff<Ascend>;

fn cfg() -> ModelConfig {
    ModelConfig {
        vocab_size: 64,
        hidden_size: 32,
        intermediate_size: 24,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        sliding_window: Some(5),
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

fn host<const D: usize>(t: Tensor<burn_ascend::backend::Ascend, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

#[test]
fn fused_norms_swiglu_and_loss_on_ascend_give_the_unfused_loss_and_gradients() {
    let device = AscendDevice::sim();
    let c = cfg();
    let model = Transformer::<A>::new(&c, &device).unwrap();
    // Non-trivial norm weights, so dgamma and the scaling are both exercised.
    let mut model = model;
    for (i, l) in model.layers.iter_mut().enumerate() {
        let g: Vec<f32> = (0..32)
            .map(|j| 1.0 + 0.01 * ((i * 7 + j) % 5) as f32)
            .collect();
        l.post_attention_layernorm.gamma =
            Param::from_tensor(Tensor::from_floats(g.as_slice(), &device));
    }
    let tokens: Vec<i64> = (0..9).map(|i| (i * 13 + 5) % 64).collect();
    let targets: Vec<i64> = (0..9).map(|i| (i * 29 + 3) % 64).collect();
    let ids = |v: &[i64], s: Vec<usize>| {
        Tensor::<A, 1, Int>::from_data(TensorData::new(v.to_vec(), s), &device)
    };
    let fallbacks_before: u64 = fallback_counts().values().sum();

    // Fused: packed forward (fused norms and SwiGLU), fused loss.
    let logits = model
        .forward_packed(ids(&tokens, vec![9]), &[0, 9])
        .unwrap();
    let loss_fused = cross_entropy_fused(logits, ids(&targets, vec![9])).unwrap();
    let g_fused = loss_fused.backward();
    // Unfused: the padded forward (Burn's RmsNorm, silu · up, composite attention), Burn's loss.
    let logits = model
        .forward_padded(ids(&tokens, vec![9]).reshape([1, 9]), &[9])
        .reshape([9, c.vocab_size]);
    let loss_plain = cross_entropy(logits, ids(&targets, vec![9]));
    let g_plain = loss_plain.backward();

    let (lf, lp) = (host(loss_fused.inner()), host(loss_plain.inner()));
    assert!(
        (lf[0] - lp[0]).abs() < 1e-5,
        "loss fused {lf:?} vs unfused {lp:?}"
    );
    let check = |name: &str, a: Tensor<Ascend, 1>, b: Tensor<Ascend, 1>| {
        let (a, b) = (host(a), host(b));
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-3);
        let d = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(d <= 2e-4 * scale, "{name}: max |Δgrad| {d} (scale {scale})");
    };
    let flat2 = |p: &Param<Tensor<A, 2>>, g| p.val().grad(g).unwrap().flatten::<1>(0, 1);
    let flat1 = |p: &Param<Tensor<A, 1>>, g| p.val().grad(g).unwrap();
    check(
        "norm",
        flat1(&model.norm.gamma, &g_fused),
        flat1(&model.norm.gamma, &g_plain),
    );
    for (i, l) in model.layers.iter().enumerate() {
        let m = l.mlp.dense().unwrap();
        for (n, p) in [
            ("gate", &m.gate_proj.weight),
            ("up", &m.up_proj.weight),
            ("down", &m.down_proj.weight),
        ] {
            check(
                &format!("{i}.{n}_proj"),
                flat2(p, &g_fused),
                flat2(p, &g_plain),
            );
        }
        for (n, p) in [
            ("input", &l.input_layernorm.gamma),
            ("post", &l.post_attention_layernorm.gamma),
        ] {
            check(
                &format!("{i}.{n}_layernorm"),
                flat1(p, &g_fused),
                flat1(p, &g_plain),
            );
        }
        check(
            "q_proj",
            flat2(&l.self_attn.q_proj.weight, &g_fused),
            flat2(&l.self_attn.q_proj.weight, &g_plain),
        );
    }
    let fallbacks: u64 = fallback_counts().values().sum();
    assert_eq!(
        fallbacks,
        fallbacks_before,
        "no host fallback: {:?}",
        fallback_counts()
    );
    for op in [
        "aclnnRmsNorm",
        "aclnnRmsNormGrad",
        "aclnnRotaryPositionEmbedding",
        "aclnnRotaryPositionEmbeddingGrad",
        "aclnnSwiGlu",
        "aclnnSwiGluGrad",
        "aclnnCrossEntropyLoss",
        "aclnnCrossEntropyLossGrad",
    ] {
        assert!(
            burn_ascend_acl_sim::launches(op) > 0,
            "{op} was not launched"
        );
    }
}

fn values<Bk: Backend, const D: usize>(t: Tensor<Bk, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

fn wave(n: usize, k: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 + k * 11) % 29) as f32 / 9.0 - 1.5)
        .collect()
}

#[test]
fn rotary_embedding_on_ascend_matches_the_f64_reference_forward_and_backward() {
    let device = AscendDevice::sim();
    let (xs, cs) = ([1, 5, 3, 8], [1, 5, 1, 8]);
    let (x, c, s, w) = (wave(120, 1), wave(40, 2), wave(40, 3), wave(120, 4));
    let t = |v: &[f32], shape: [usize; 4]| {
        Tensor::<A, 4>::from_data(TensorData::new(v.to_vec(), shape), &device)
    };
    let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let dims = burn_ascend::fused::rotary::validate_fwd(&xs, &cs, &cs, RotaryMode::Half).unwrap();
    let before = (
        burn_ascend_acl_sim::launches("aclnnRotaryPositionEmbedding"),
        burn_ascend_acl_sim::launches("aclnnRotaryPositionEmbeddingGrad"),
    );
    let xa = t(&x, xs).require_grad();
    let y = rotary_embedding(xa.clone(), t(&c, cs), t(&s, cs), RotaryMode::Half).unwrap();
    let grads = (y.clone() * t(&w, xs)).sum().backward();
    let ry = rotary_ref::rotary_fwd(&f64s(&x), &f64s(&c), &f64s(&s), &dims, RotaryMode::Half);
    let rdx = rotary_ref::rotary_bwd(&f64s(&w), &f64s(&c), &f64s(&s), &dims, RotaryMode::Half);
    assert!(max_abs_diff(&values(y.inner()), &ry) < 1e-6);
    assert!(max_abs_diff(&values(xa.grad(&grads).unwrap()), &rdx) < 1e-6);
    assert!(burn_ascend_acl_sim::launches("aclnnRotaryPositionEmbedding") > before.0);
    assert!(burn_ascend_acl_sim::launches("aclnnRotaryPositionEmbeddingGrad") > before.1);
}

/// q and k of layer 0 through the composite and the fused RoPE, for `positions` that restart
/// (packed sequences) and reach past the original context (where Llama 3 / YaRN rescale).
fn qk_gap<Bk: TrainingBackend>(c: &ModelConfig, device: &Bk::Device) -> f64 {
    let model = Transformer::<Bk>::new(c, device).unwrap();
    let positions = [0, 1, 2, 3, 0, 1, 2, 4000, 9000];
    let rope = Rope::<Bk>::new(&positions, c, device);
    let h = Tensor::<Bk, 2>::from_data(
        TensorData::new(wave(9 * c.hidden_size, 5), [9, c.hidden_size]),
        device,
    );
    let attn = &model.layers[0].self_attn;
    let (q, k, _) = attn.qkv(h.clone(), &rope, c);
    let (qf, kf, _) = attn.qkv_fused(h, &rope, c).unwrap();
    max_abs_diff(&values(q), &values(qf)).max(max_abs_diff(&values(k), &values(kf)))
}

#[test]
fn fused_rope_gives_the_composite_q_k_and_logits_for_every_rope_variant() {
    let device = AscendDevice::sim();
    let variants = [
        RopeScaling::Default,
        RopeScaling::Linear { factor: 4.0 },
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 64.0,
        },
        RopeScaling::Yarn {
            factor: 32.0,
            original_max_position_embeddings: 64.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: 1.35,
            truncate: false,
        },
    ];
    for rope_scaling in variants {
        let c = ModelConfig {
            rope_scaling: rope_scaling.clone(),
            qk_norm: true,
            ..cfg()
        };
        // NdArray's CPU kernel does the composite's f32 operations: the same bits.
        let cpu = qk_gap::<NdArray>(&c, &Default::default());
        assert!(
            cpu == 0.0,
            "{rope_scaling:?}: NdArray q/k differ by {cpu:e}"
        );
        // The simulation computes in f64 and rounds once: within f32 rounding of |q| ≲ 10.
        let sim = qk_gap::<Ascend>(&c, &device);
        assert!(
            sim <= 2e-6,
            "{rope_scaling:?}: Ascend q/k differ by {sim:e}"
        );
        // The model's logits: fused path (packed, fused RoPE) vs composite (padded).
        let model = Transformer::<Ascend>::new(&c, &device).unwrap();
        let tokens: Vec<i64> = (0..9).map(|i| (i * 13 + 5) % 64).collect();
        let ids = Tensor::<Ascend, 1, Int>::from_data(TensorData::new(tokens, [9]), &device);
        let fused = model.forward_packed(ids.clone(), &[0, 9]).unwrap();
        let plain = model.forward_padded(ids.reshape([1, 9]), &[9]);
        let gap = max_abs_diff(&values(fused), &values(plain.reshape([9, c.vocab_size])));
        assert!(gap <= 1e-5, "{rope_scaling:?}: logits differ by {gap:e}");
    }
}
