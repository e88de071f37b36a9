//! The model's fused path (issue 27: RMSNorm, SwiGLU and the loss through the fused ops) equals
//! the unfused one on `Autodiff<Ascend>` (the simulation), where each fused op is one aclnn
//! launch each way: the loss and every checked gradient of one step.

use burn::backend::Autodiff;
use burn::module::Param;
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::backend::{fallback_counts, Ascend, AscendDevice};
use burn_ascend_model::config::{LayerType, RopeScaling};
use burn_ascend_model::{cross_entropy, cross_entropy_fused, ModelConfig, Transformer};

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
