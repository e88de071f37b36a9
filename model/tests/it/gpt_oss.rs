//! gpt-oss's mixture-of-experts block (`burn_ascend_model::model::moe`), its MXFP4 dequantization
//! (`burn_ascend_model::model::mxfp4`) and its `config.json` reading. The whole-model cases
//! (`gpt_oss`, `gpt_oss_mxfp4`: logits, bf16, greedy, loss and gradients against
//! transformers) are `hf_checkpoint`'s; the comparison with OpenAI's reference implementation is
//! here.
//!
//! The fixture `model/tests/fixtures/hf/gpt_oss_moe_block.safetensors` (made by
//! `tools/fixtures/gen_moe_fixture.py` with transformers 5.24) holds layer 0's block of the
//! `gpt_oss` case alone: its weights, an input `x [10, 64]`, transformers' output, routing,
//! and one backward of `loss = Σ out · w`.
//!
//! Tolerances (absolute; gradients relative to the largest element of each tensor):
//! - block output against transformers, f32, NdArray and Ascend (simulation): [`MOE_OUT`]
//!   (only summation order differs; measured 1.9e-6 on NdArray, 7.6e-6 on Ascend with the
//!   experts as aclnnGroupedMatmulV4);
//! - routing weights: [`MOE_SCORES`] (measured at most 1.2e-7); expert indices: equal;
//! - gradients against transformers: [`MOE_GRADS`] (measured at most 1.9e-7 on NdArray, 8.0e-7
//!   on Ascend);
//! - f64 gradients against central finite differences (step [`FD_STEP`]):
//!   `|analytic − numeric| ≤ FD_ABS + FD_REL·|analytic|` (measured at most 0.33 of that);
//! - MXFP4 dequantization: bit for bit.

use std::path::Path;

use burn::backend::{Autodiff, NdArray};
use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Element, Int, Tensor, TensorData};
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::{GroupedMatmulBackend, MoeGatingBackend};
use burn_ascend_model::load::config::MoeKind;
use burn_ascend_model::model::moe::Moe;
use burn_ascend_model::{ModelConfig, Transformer};
use burn_ascend_test_support::max_abs_diff;
use safetensors::{Dtype, SafeTensors};

/// MoE block output against transformers, f32: about ten f32 ulps at the output's largest
/// magnitude (35.5 in the fixture, where one ulp is 3.8e-6).
const MOE_OUT: f32 = 4e-5;
/// Routing weights (in [0, 1]) against transformers, f32.
const MOE_SCORES: f32 = 1e-6;
/// MoE block gradients, f32, against transformers, relative to each tensor's largest element.
const MOE_GRADS: f32 = 2e-5;
/// Central finite differences in f64.
const FD_STEP: f64 = 1e-6;
const FD_ABS: f64 = 1e-7;
const FD_REL: f64 = 1e-6;

/// The aclnn op the experts' matmuls dispatch to on `Ascend`.
const GMM: &str = "aclnnGroupedMatmulV4";

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf");

/// transformers' `swiglu_limit` / `swiglu_alpha` of the fixture (its config.json).
const LIMIT: f64 = 7.0;
const ALPHA: f64 = 1.702;

fn block_bytes() -> Vec<u8> {
    std::fs::read(Path::new(FIXTURES).join("gpt_oss_moe_block.safetensors")).unwrap()
}

/// A tensor of the fixture as f64 values and shape.
fn tensor(st: &SafeTensors, name: &str) -> (Vec<f64>, Vec<usize>) {
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let v = match t.dtype() {
        Dtype::F32 => t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        Dtype::I64 => t
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        other => panic!("{name}: {other:?}"),
    };
    (v, t.shape().to_vec())
}

fn bytes(st: &SafeTensors, name: &str) -> (Vec<u8>, Vec<usize>) {
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), Dtype::U8, "{name}");
    (t.data().to_vec(), t.shape().to_vec())
}

/// `[r, c]` row-major transposed.
fn transposed(v: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..c)
        .flat_map(|j| (0..r).map(move |i| v[i * c + j]))
        .collect()
}

/// The block's parameters in transformers' layout and names (`router.weight` `[E, H]`).
const PARAMS: [&str; 6] = [
    "router.weight",
    "router.bias",
    "experts.gate_up_proj",
    "experts.gate_up_proj_bias",
    "experts.down_proj",
    "experts.down_proj_bias",
];

fn param<B: Backend, const D: usize>(
    (v, s): &(Vec<f64>, Vec<usize>),
    device: &B::Device,
) -> Param<Tensor<B, D>> {
    let shape: [usize; D] = s.clone().try_into().unwrap();
    Param::from_tensor(Tensor::from_data(
        TensorData::new(v.clone(), shape).convert::<B::FloatElem>(),
        (device, float_dtype::<B>()),
    ))
}

/// The block from parameters in transformers' layout, `params[i]` for `PARAMS[i]`.
fn moe<B: Backend>(params: &[(Vec<f64>, Vec<usize>)], device: &B::Device) -> Moe<B> {
    let (rw, rs) = &params[0];
    let (e, h) = (rs[0], rs[1]);
    Moe {
        router: Linear {
            weight: param(&(transposed(rw, e, h), vec![h, e]), device),
            bias: Some(param(&params[1], device)),
        },
        gate_up_proj: param(&params[2], device),
        gate_up_proj_bias: Some(param(&params[3], device)),
        down_proj: param(&params[4], device),
        down_proj_bias: Some(param(&params[5], device)),
        kind: MoeKind::GptOss,
        top_k: 2,
        limit: LIMIT,
        alpha: ALPHA,
    }
}

/// The backend's float element as a dtype: tensors are created in it explicitly, as
/// `from_data` otherwise takes the device's default float dtype (f32 on `NdArray<f64>` too).
fn float_dtype<B: Backend>() -> DType {
    <B::FloatElem as Element>::dtype()
}

fn fixture_params(st: &SafeTensors) -> Vec<(Vec<f64>, Vec<usize>)> {
    PARAMS
        .iter()
        .map(|p| tensor(st, &format!("weight.{p}")))
        .collect()
}

fn to_f64<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

/// Output, routing, `Σ out · w` and the gradients (x first, then `PARAMS`, in transformers'
/// layout) of the block on `A`.
struct Run {
    out: Vec<f64>,
    indices: Vec<i64>,
    scores: Vec<f64>,
    loss: f64,
    grads: Vec<Vec<f64>>,
}

fn run<A: AutodiffBackend + GroupedMatmulBackend + MoeGatingBackend>(
    params: &[(Vec<f64>, Vec<usize>)],
    (x, xs): &(Vec<f64>, Vec<usize>),
    (w, ws): &(Vec<f64>, Vec<usize>),
    device: &A::Device,
) -> Run {
    let m = moe::<A>(params, device);
    let x = Tensor::<A, 2>::from_data(
        TensorData::new(x.clone(), [xs[0], xs[1]]).convert::<A::FloatElem>(),
        (device, float_dtype::<A>()),
    )
    .require_grad();
    let w = Tensor::<A, 2>::from_data(
        TensorData::new(w.clone(), [ws[0], ws[1]]).convert::<A::FloatElem>(),
        (device, float_dtype::<A>()),
    );
    let routing = m.route(x.clone()).unwrap();
    let out = m.forward(x.clone()).unwrap();
    let loss = (out.clone() * w).sum();
    let loss_value = to_f64(loss.clone())[0];
    let g = loss.backward();
    let [e, h] = [params[0].1[0], params[0].1[1]];
    let grads = vec![
        to_f64(x.grad(&g).unwrap()),
        transposed(&to_f64(m.router.weight.val().grad(&g).unwrap()), h, e),
        to_f64(m.router.bias.as_ref().unwrap().val().grad(&g).unwrap()),
        to_f64(m.gate_up_proj.val().grad(&g).unwrap()),
        to_f64(
            m.gate_up_proj_bias
                .as_ref()
                .unwrap()
                .val()
                .grad(&g)
                .unwrap(),
        ),
        to_f64(m.down_proj.val().grad(&g).unwrap()),
        to_f64(m.down_proj_bias.as_ref().unwrap().val().grad(&g).unwrap()),
    ];
    Run {
        out: to_f64(out),
        indices: routing.indices,
        scores: to_f64(routing.weights),
        loss: loss_value,
        grads,
    }
}

fn moe_block_matches_transformers<A: AutodiffBackend + GroupedMatmulBackend + MoeGatingBackend>(
    device: &A::Device,
    backend: &str,
) {
    let bytes = block_bytes();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let params = fixture_params(&st);
    let r = run::<A>(&params, &tensor(&st, "x"), &tensor(&st, "w"), device);
    let want_idx: Vec<i64> = tensor(&st, "router_indices")
        .0
        .iter()
        .map(|&i| i as i64)
        .collect();
    assert_eq!(r.indices, want_idx, "{backend}: expert indices");
    let gs = max_abs_diff(&r.scores, &tensor(&st, "router_scores").0);
    let go = max_abs_diff(&r.out, &tensor(&st, "out").0);
    eprintln!("moe block on {backend}: output gap {go:.2e}, routing weights gap {gs:.2e}");
    assert!(
        gs <= MOE_SCORES as f64,
        "{backend}: routing weights gap {gs}"
    );
    assert!(go <= MOE_OUT as f64, "{backend}: output gap {go}");
    let names = std::iter::once("x".to_string()).chain(PARAMS.iter().map(|p| p.to_string()));
    let mut worst = 0f64;
    for (name, got) in names.zip(&r.grads) {
        let want = tensor(&st, &format!("grad.{name}")).0;
        let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
        assert!(scale > 0.0, "grad.{name} is not trivial");
        let rel = max_abs_diff(got, &want) / scale;
        worst = worst.max(rel);
        assert!(
            rel <= MOE_GRADS as f64,
            "{backend}: grad of {name} off by {rel} of its max"
        );
    }
    eprintln!("moe block on {backend}: worst gradient gap {worst:.2e} of the tensor's max");
}

#[test]
fn the_moe_block_computes_transformers_output_routing_and_gradients_on_ndarray() {
    moe_block_matches_transformers::<Autodiff<NdArray>>(&Default::default(), "NdArray");
}

#[test]
fn the_moe_block_computes_transformers_output_routing_and_gradients_on_ascend_simulation() {
    let before = burn_ascend_acl_sim::launches(GMM);
    moe_block_matches_transformers::<Autodiff<Ascend>>(&AscendDevice::sim(), "Ascend sim");
    // gate_up and down forward, and per projection dx, dW and dbias in the backward: every
    // expert matmul ran as the aclnn op (the counter is this thread's).
    assert_eq!(
        burn_ascend_acl_sim::launches(GMM) - before,
        8,
        "{GMM} launches"
    );
}

#[test]
fn the_fixture_exercises_the_swiglu_clamp_and_every_expert() {
    let bytes = block_bytes();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let clamped: usize = meta.metadata().as_ref().unwrap()["clamped_entries_all_experts"]
        .parse()
        .unwrap();
    assert!(clamped > 0);
    let idx = tensor(&st, "router_indices").0;
    for e in 0..4 {
        assert!(idx.contains(&(e as f64)), "expert {e} gets tokens");
    }
}

/// Gradients of `Σ out · w` in f64 against central finite differences of the same block on
/// `NdArray<f64>`, for a spread of elements of x, the router and every expert tensor. The
/// routing must not change under the step (else the difference straddles a switch).
#[test]
fn moe_block_gradients_equal_central_finite_differences_in_f64() {
    type B = NdArray<f64>;
    let bytes = block_bytes();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let params = fixture_params(&st);
    let x = tensor(&st, "x");
    let w = tensor(&st, "w");
    let device = Default::default();
    let base = run::<Autodiff<B>>(&params, &x, &w, &device);
    assert_eq!(float_dtype::<B>(), DType::F64);
    // Each tensor: x first, then the parameters.
    let mut all = vec![x.clone()];
    all.extend(params.iter().cloned());
    let loss_at = |which: usize, i: usize, delta: f64| -> (f64, Vec<i64>) {
        let mut t = all.clone();
        t[which].0[i] += delta;
        let m = moe::<B>(&t[1..], &device);
        let f64s = (&device, DType::F64);
        let xt = Tensor::<B, 2>::from_data(TensorData::new(t[0].0.clone(), [10, 64]), f64s);
        let wt = Tensor::<B, 2>::from_data(TensorData::new(w.0.clone(), [10, 64]), f64s);
        let indices = m.route(xt.clone()).unwrap().indices;
        (to_f64((m.forward(xt).unwrap() * wt).sum())[0], indices)
    };
    let names = [
        "x", PARAMS[0], PARAMS[1], PARAMS[2], PARAMS[3], PARAMS[4], PARAMS[5],
    ];
    let mut worst = 0f64;
    let mut checked = 0;
    for (which, name) in names.iter().enumerate() {
        let len = all[which].0.len();
        // 24 elements per tensor (all of the router bias), spread by a fixed stride.
        let picks: Vec<usize> = (0..24.min(len)).map(|k| (k * 7919 + 13) % len).collect();
        for i in picks {
            let (lp, ip) = loss_at(which, i, FD_STEP);
            let (lm, im) = loss_at(which, i, -FD_STEP);
            assert!(
                ip == base.indices && im == base.indices,
                "{name}[{i}]: the step changes the routing"
            );
            let numeric = (lp - lm) / (2.0 * FD_STEP);
            let analytic = base.grads[which][i];
            let gap = (analytic - numeric).abs();
            let bound = FD_ABS + FD_REL * analytic.abs();
            if gap / bound > worst {
                worst = gap / bound;
                eprintln!("{name}[{i}]: analytic {analytic:e}, gap {gap:.2e}");
            }
            checked += 1;
            assert!(
                gap <= bound,
                "{name}[{i}]: analytic {analytic} vs finite differences {numeric}"
            );
        }
        let nonzero = base.grads[which].iter().filter(|g| g.abs() > 1e-3).count();
        assert!(nonzero > 0, "{name}: the gradient is not trivial");
    }
    eprintln!(
        "moe block f64: {checked} elements against finite differences, worst gap {worst:.2} of its bound, loss {}",
        base.loss
    );
}

#[test]
fn mxfp4_experts_dequantize_bit_for_bit_as_transformers() {
    let b = block_bytes();
    let st = SafeTensors::deserialize(&b).unwrap();
    for proj in ["gate_up_proj", "down_proj"] {
        let (blocks, bs) = bytes(&st, &format!("mxfp4.blocks.{proj}"));
        let (scales, ss) = bytes(&st, &format!("mxfp4.scales.{proj}"));
        let (got, shape) =
            burn_ascend_model::model::mxfp4::dequantize(proj, &blocks, &bs, &scales, &ss).unwrap();
        let want = st.tensor(&format!("mxfp4.{proj}")).unwrap();
        assert_eq!(shape, want.shape(), "{proj}");
        let want: Vec<u32> = want
            .data()
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
        let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{proj}: {differ} elements differ in their bits");
    }
}

#[test]
fn mxfp4_blocks_and_scales_of_mismatched_shapes_are_an_error() {
    let e = burn_ascend_model::model::mxfp4::dequantize(
        "w",
        &[0; 32],
        &[1, 2, 1, 16],
        &[0; 3],
        &[1, 3, 1],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("w: blocks must be"), "{e}");
}

// ---- the whole model against OpenAI's reference implementation --------------------------

fn case_dir(case: &str) -> std::path::PathBuf {
    Path::new(FIXTURES).join(case)
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `input_ids [B, S]` and the named f32 tensor of a case's expected.safetensors.
fn expected(case: &str, name: &str) -> (Vec<i64>, [usize; 2], Vec<f64>) {
    let b = std::fs::read(case_dir(case).join("expected.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&b).unwrap();
    let (ids, s) = tensor(&st, "input_ids");
    (
        ids.iter().map(|&i| i as i64).collect(),
        [s[0], s[1]],
        tensor(&st, name).0,
    )
}

fn packed_logits<Bk: burn_ascend::TrainingBackend>(
    case: &str,
    device: &Bk::Device,
) -> (Vec<f64>, Vec<f64>) {
    let (ids, [b, s], reference) = expected(case, "logits_openai_ref");
    let m =
        burn_ascend_model::model::hf_checkpoint::load_hf::<Bk>(&case_dir(case), device).unwrap();
    let cu: Vec<i64> = (0..=b).map(|i| (i * s) as i64).collect();
    let tokens = Tensor::<Bk, 1, Int>::from_data(TensorData::new(ids, [b * s]), device);
    (to_f64(m.forward_packed(tokens, &cu).unwrap()), reference)
}

/// transformers' f32 logits of the fixture are bit-identical to those of OpenAI's reference
/// (`gpt_oss.torch.model`), so ours are held to the same f32 bound as against transformers
/// (`hf_checkpoint`'s 2e-5).
fn logits_match_openai_reference<Bk: burn_ascend::TrainingBackend>(
    device: &Bk::Device,
    backend: &str,
) {
    for case in ["gpt_oss", "gpt_oss_mxfp4"] {
        if !case_dir(case).join("expected.safetensors").exists() {
            continue;
        }
        let b = std::fs::read(case_dir(case).join("expected.safetensors")).unwrap();
        let st = SafeTensors::deserialize(&b).unwrap();
        if st.tensor("logits_openai_ref").is_err() {
            assert_ne!(case, "gpt_oss", "the gpt_oss case has OpenAI's logits");
            continue;
        }
        let (ours, reference) = packed_logits::<Bk>(case, device);
        let g = max_abs_diff(&ours, &reference);
        eprintln!("{case} f32 {backend}: gap to OpenAI's reference {g:.2e}");
        assert!(
            g <= 2e-5,
            "{case} on {backend}: gap {g} to OpenAI's reference"
        );
    }
}

#[test]
fn gpt_oss_logits_equal_openai_reference_in_f32_on_ndarray() {
    logits_match_openai_reference::<NdArray>(&Default::default(), "NdArray");
}

#[test]
fn gpt_oss_logits_equal_openai_reference_in_f32_on_ascend_simulation() {
    logits_match_openai_reference::<Ascend>(&AscendDevice::sim(), "Ascend sim");
}

#[test]
fn a_gpt_oss_model_saved_in_our_format_reloads_to_the_same_logits() {
    type B = NdArray;
    let device = Default::default();
    let m =
        burn_ascend_model::model::hf_checkpoint::load_hf::<B>(&case_dir("gpt_oss_mxfp4"), &device)
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    burn_ascend_model::model::hf_checkpoint::save_hf(&m, dir.path()).unwrap();
    let back = burn_ascend_model::model::hf_checkpoint::load_hf::<B>(dir.path(), &device).unwrap();
    let mut want = m.config.clone();
    // Saved dequantized, in f32.
    want.moe.as_mut().unwrap().mxfp4 = false;
    assert_eq!(back.config, want);
    let tokens =
        || Tensor::<B, 1, Int>::from_data(TensorData::new(vec![1i64, 5, 9, 2, 7], [5]), &device);
    let a = to_f64(m.forward_packed(tokens(), &[0, 5]).unwrap());
    let b = to_f64(back.forward_packed(tokens(), &[0, 5]).unwrap());
    assert_eq!(a, b);
    // And a fresh one of the same config has as many parameters as the config counts.
    let fresh = Transformer::<B>::new(&want, &device).unwrap();
    use burn::module::Module;
    assert_eq!(fresh.num_params(), want.num_params());
}

// ---- config ----------------------------------------------------------------------------

fn config_of(v: &serde_json::Value) -> Result<ModelConfig, String> {
    ModelConfig::from_json(v).map_err(|e| e.to_string())
}

#[test]
fn gpt_oss_configs_read_as_transformers_reads_them() {
    use burn_ascend_model::load::config::{LayerType, MoeConfig, RopeScaling};
    let c = config_of(&read_json(&case_dir("gpt_oss").join("config.json"))).unwrap();
    assert_eq!(
        c.moe,
        Some(MoeConfig {
            kind: MoeKind::GptOss,
            moe_intermediate_size: 16,
            dense_layers: Vec::new(),
            num_local_experts: 4,
            num_experts_per_tok: 2,
            swiglu_limit: 7.0,
            swiglu_alpha: 1.702,
            mxfp4: false,
            output_router_logits: false,
        })
    );
    assert!(c.attention_sinks && c.attention_bias && c.attention_output_bias);
    use LayerType::{Full, Sliding};
    assert_eq!(c.layer_types, vec![Sliding, Full, Sliding]);
    assert_eq!((c.sliding_window, c.rope_theta), (Some(4), 150_000.0));
    match c.rope_scaling {
        RopeScaling::Yarn {
            factor,
            truncate,
            original_max_position_embeddings,
            attention_factor,
            ..
        } => {
            assert_eq!(
                (factor, truncate, original_max_position_embeddings),
                (32.0, false, 4096.0)
            );
            assert!((attention_factor - (0.1 * 32f64.ln() + 1.0)).abs() < 1e-12);
        }
        ref other => panic!("{other:?}"),
    }
    // The Hub's form: no swiglu_alpha (transformers' default 1.702), openai's
    // experts_per_token / initial_context_length carried along.
    let hub = config_of(&read_json(&case_dir("gpt_oss").join("config.hub.json"))).unwrap();
    assert_eq!(hub, c);
    // The MXFP4 checkpoint.
    let q = config_of(&read_json(&case_dir("gpt_oss_mxfp4").join("config.json"))).unwrap();
    assert!(q.moe.as_ref().unwrap().mxfp4);
    assert_eq!(q.intermediate_size, 32);
}

#[test]
fn missing_gpt_oss_keys_take_gpt_oss_config_defaults() {
    use burn_ascend_model::load::config::{LayerType, RopeScaling};
    let v = serde_json::json!({
        "model_type": "gpt_oss", "vocab_size": 8, "hidden_size": 32, "intermediate_size": 8,
        "num_hidden_layers": 3, "num_attention_heads": 64,
    });
    let c = config_of(&v).unwrap();
    let m = c.moe.clone().unwrap();
    assert_eq!((m.num_local_experts, m.num_experts_per_tok), (128, 4));
    assert_eq!((m.swiglu_limit, m.swiglu_alpha), (7.0, 1.702));
    assert_eq!(
        (c.head_dim, c.num_key_value_heads, c.rms_norm_eps),
        (64, 8, 1e-5)
    );
    assert_eq!((c.sliding_window, c.rope_theta), (Some(128), 150_000.0));
    assert_eq!(c.layer_types, LayerType::alternating(3));
    assert!(c.attention_bias && c.attention_output_bias && c.attention_sinks);
    assert!(matches!(
        c.rope_scaling,
        RopeScaling::Yarn {
            factor: 32.0,
            truncate: false,
            original_max_position_embeddings: 4096.0,
            ..
        }
    ));
}

fn gpt_oss_refusal(edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v = read_json(&case_dir("gpt_oss").join("config.json"));
    edit(&mut v);
    config_of(&v).expect_err("must be refused")
}

fn assert_refused(msg: &str, key: &str) {
    assert!(
        msg.starts_with(&format!("unsupported: {key}")),
        "expected 'unsupported: {key}…', got '{msg}'"
    );
}

#[test]
fn output_router_logits_is_refused_when_training_as_the_auxiliary_loss_is_not_implemented() {
    use burn_ascend_model::load::data::documents_from_text;
    use burn_ascend_model::train::{train, TrainOptions, TrainState};
    use burn_ascend_model::{Packer, Tokenizer};
    let mut v = read_json(&case_dir("gpt_oss").join("config.json"));
    v["output_router_logits"] = true.into();
    let c = config_of(&v).unwrap();
    let device = Default::default();
    // Inference: the same logits, the flag only adds a loss term in training.
    let m = burn_ascend_model::model::hf_checkpoint::load_weights::<Autodiff<NdArray>>(
        &case_dir("gpt_oss"),
        c,
        &device,
    )
    .unwrap();
    let (ids, [b, s], want) = expected("gpt_oss", "logits");
    let cu: Vec<i64> = (0..=b).map(|i| (i * s) as i64).collect();
    let tokens =
        Tensor::<Autodiff<NdArray>, 1, Int>::from_data(TensorData::new(ids, [b * s]), &device);
    let got = to_f64(m.forward_packed(tokens, &cu).unwrap());
    assert!(max_abs_diff(&got, &want) <= 2e-5);
    let dir = tempfile::tempdir().unwrap();
    let docs = documents_from_text("SOME TEXT TO PACK INTO A BATCH OR TWO");
    let mut packer = Packer::new(&docs, &Tokenizer::Bytes, 16, 8, 1).unwrap();
    let opts = TrainOptions {
        warmup_steps: None,
        total_steps: 1,
        stop_after: None,
        lr: 1e-3,
        weight_decay: 0.0,
        clip_norm: 1.0,
        seed: 1,
        out: dir.path().into(),
        save_every: 1,
    };
    let e = train(m, TrainState::default(), false, &mut packer, &opts, |_| {}).unwrap_err();
    assert_refused(&e.to_string(), "output_router_logits");
}

#[test]
fn quantization_other_than_mxfp4_is_refused_for_gpt_oss() {
    let msg = gpt_oss_refusal(|v| {
        v["quantization_config"] = serde_json::json!({"quant_method": "bitsandbytes"})
    });
    assert_refused(&msg, "quantization_config");
    let msg = gpt_oss_refusal(|v| {
        v["quantization_config"] = serde_json::json!({"quant_method": "mxfp4", "group_size": 64})
    });
    assert_refused(&msg, "quantization_config.group_size");
}

#[test]
fn experts_per_token_contradicting_num_experts_per_tok_is_refused() {
    assert_refused(
        &gpt_oss_refusal(|v| v["experts_per_token"] = 3.into()),
        "experts_per_token",
    );
}

#[test]
fn expert_keys_on_a_dense_model_type_are_refused() {
    for key in ["num_local_experts", "swiglu_limit", "output_router_logits"] {
        let mut v = read_json(&case_dir("llama").join("config.json"));
        v[key] = 1.into();
        if key == "output_router_logits" {
            v[key] = false.into();
        }
        assert_refused(&config_of(&v).unwrap_err(), key);
    }
}

#[test]
fn mxfp4_tensors_without_quantization_config_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = case_dir("gpt_oss_mxfp4");
    std::fs::copy(
        src.join("model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    let mut v = read_json(&src.join("config.json"));
    v.as_object_mut().unwrap().remove("quantization_config");
    std::fs::write(dir.path().join("config.json"), v.to_string()).unwrap();
    let e = burn_ascend_model::model::hf_checkpoint::load_hf::<NdArray>(
        dir.path(),
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert_refused(&e, "tensor model.layers.");
    assert!(e.contains("has dtype U8"), "{e}");
}
