//! Qwen3-MoE (`model_type: qwen3_moe`) beyond the fixture's logits, greedy tokens, loss and
//! gradients (`hf_checkpoint`'s `qwen3_moe` cases): the router against transformers' own
//! router outputs, `norm_topk_prob` honoured, `Qwen3MoeConfig`'s keys and defaults, dense
//! layers (`decoder_sparse_step`, `mlp_only_layers`), the fused expert names, and fine-tuning
//! (full and LoRA) from the checkpoint.
//!
//! The fixture (`tools/fixtures/gen_qwen3_moe_fixture.py`, transformers 5.25's
//! `Qwen3MoeForCausalLM`): 2 layers, 8 experts, top-2, `norm_topk_prob`, every routed token's
//! k-th and (k+1)-th f32 probabilities at least 1e-3 apart, so an f32 router picks its experts.

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, NdArray};
use burn::module::{AutodiffModule, Module};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::TrainingBackend;
use burn_ascend_model::load::config::{LayerType, MoeKind};
use burn_ascend_model::load::data::documents_from_text;
use burn_ascend_model::model::hf_checkpoint::{load_hf, load_weights, named_weights, save_hf};
use burn_ascend_model::model::lora::{LoraSettings, LoraTarget};
use burn_ascend_model::model::peft::init_lora;
use burn_ascend_model::train::{init_model, train, Init, TrainOptions};
use burn_ascend_model::{ModelConfig, Packer, Tokenizer, Transformer};
use burn_ascend_test_support::max_abs_diff;
use safetensors::{Dtype, SafeTensors};

/// f32 logits against transformers' (`hf_checkpoint`'s bound; measured 1.3e-6).
const F32_LOGITS: f32 = 2e-5;
/// The router's f32 logits and weights against transformers' (measured: below 1e-6).
const ROUTER: f32 = 1e-5;

fn case_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/qwen3_moe")
}

fn read_json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(case_dir().join(name)).unwrap()).unwrap()
}

fn expected_bytes() -> Vec<u8> {
    std::fs::read(case_dir().join("expected.safetensors")).unwrap()
}

fn f32s(st: &SafeTensors, name: &str) -> Vec<f32> {
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), Dtype::F32, "{name}");
    t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn i64s(st: &SafeTensors, name: &str) -> Vec<i64> {
    st.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn host<Bk: Backend, const D: usize>(t: Tensor<Bk, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

/// The fixture's prompt batch `[2, 12]` packed: tokens and `cu_seqlens`.
fn prompt<Bk: Backend>(device: &Bk::Device) -> (Tensor<Bk, 1, Int>, Vec<i64>) {
    let b = expected_bytes();
    let ids = i64s(&SafeTensors::deserialize(&b).unwrap(), "input_ids");
    let n = ids.len();
    let tokens = Tensor::from_data(TensorData::new(ids, [n]), device);
    (tokens, vec![0, 12, 24])
}

fn logits<Bk: TrainingBackend>(m: &Transformer<Bk>) -> Vec<f32> {
    let device = m.embed_tokens.weight.val().device();
    let (tokens, cu) = prompt::<Bk>(&device);
    host(m.forward_packed(tokens, &cu).unwrap())
}

fn transformers_logits() -> Vec<f32> {
    f32s(
        &SafeTensors::deserialize(&expected_bytes()).unwrap(),
        "logits",
    )
}

fn router_matches_transformers<Bk: TrainingBackend>(device: &Bk::Device, backend: &str) {
    let m = load_hf::<Bk>(&case_dir(), device).unwrap();
    let b = expected_bytes();
    let st = SafeTensors::deserialize(&b).unwrap();
    let (tokens, cu) = prompt::<Bk>(device);
    let mut layers = 0;
    m.forward_packed_observed(tokens, &cu, |i, h| {
        let moe = m.layers[i].mlp.experts().expect("every layer is sparse");
        let routing = moe.route(h.clone()).unwrap();
        let logits = host(moe.router_logits(h.clone()));
        assert_eq!(
            routing.indices,
            i64s(&st, &format!("router_indices.{i}")),
            "{backend}: layer {i}'s experts"
        );
        let gl = max_abs_diff(&logits, &f32s(&st, &format!("router_logits.{i}")));
        let gw = max_abs_diff(
            &host(routing.weights),
            &f32s(&st, &format!("router_weights.{i}")),
        );
        eprintln!(
            "qwen3_moe router layer {i} on {backend}: logits gap {gl:.1e}, weights gap {gw:.1e}"
        );
        assert!(
            gl <= ROUTER && gw <= ROUTER,
            "{backend}: layer {i}: {gl}, {gw}"
        );
        layers += 1;
    })
    .unwrap();
    assert_eq!(layers, 2);
}

#[test]
fn the_router_picks_transformers_experts_and_weights_on_ndarray() {
    router_matches_transformers::<NdArray>(&Default::default(), "NdArray");
}

#[test]
fn the_router_picks_transformers_experts_and_weights_on_ascend_simulation() {
    // On Ascend the router is CANN's `aclnnMoeGatingTopKSoftmaxV2` (renorm 1 on the f32
    // logits, as norm_topk_prob is set): one launch per layer (the launch counter is this
    // thread's).
    const OP: &str = "aclnnMoeGatingTopKSoftmaxV2";
    let before = burn_ascend_acl_sim::launches(OP);
    router_matches_transformers::<Ascend>(&AscendDevice::sim(), "Ascend sim");
    // The packed forward routes once per layer, the test's own route once more.
    assert_eq!(burn_ascend_acl_sim::launches(OP), before + 4);
}

#[test]
fn norm_topk_prob_false_changes_the_logits_by_what_it_changes_in_transformers() {
    // The script measured transformers' own logits with norm_topk_prob false against the
    // fixture's (true): max |Δ| 0.4481. Ours with the key flipped must differ by as much.
    let want = read_json("info.json")["feature_off"]["max_abs_logit_diff_vs_feature_on"]
        .as_f64()
        .unwrap() as f32;
    let mut v = read_json("config.json");
    v["norm_topk_prob"] = false.into();
    let c = ModelConfig::from_json(&v).unwrap();
    assert_eq!(
        c.moe.as_ref().unwrap().kind,
        MoeKind::Qwen3 {
            norm_topk_prob: false
        }
    );
    let m = load_weights::<NdArray>(&case_dir(), c, &Default::default()).unwrap();
    let gap = max_abs_diff(&logits(&m), &transformers_logits());
    eprintln!("qwen3_moe norm_topk_prob false: gap {gap:.4} (transformers: {want:.4})");
    assert!((gap - want).abs() <= 1e-4, "{gap} vs {want}");
}

#[test]
fn transformers_in_memory_fused_expert_names_load_to_the_same_logits() {
    // transformers 5 holds the experts as `mlp.experts.gate_up_proj [E, 2I, H]` (each
    // expert's gate rows, then its up rows) and `down_proj [E, H, I]`: a file in that form
    // loads to the same model as the per-expert names.
    let bytes = std::fs::read(case_dir().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for name in st.names() {
        if !name.contains(".mlp.experts.") {
            out.push((
                name.to_string(),
                st.tensor(name).unwrap().shape().to_vec(),
                f32s(&st, name),
            ));
        }
    }
    for layer in 0..2 {
        let p = format!("model.layers.{layer}.mlp.experts");
        let (mut gate_up, mut down) = (Vec::new(), Vec::new());
        for e in 0..8 {
            gate_up.extend(f32s(&st, &format!("{p}.{e}.gate_proj.weight")));
            gate_up.extend(f32s(&st, &format!("{p}.{e}.up_proj.weight")));
            down.extend(f32s(&st, &format!("{p}.{e}.down_proj.weight")));
        }
        out.push((format!("{p}.gate_up_proj"), vec![8, 16, 32], gate_up));
        out.push((format!("{p}.down_proj"), vec![8, 32, 8], down));
    }
    let raw: Vec<(String, Vec<usize>, Vec<u8>)> = out
        .into_iter()
        .map(|(n, s, d)| (n, s, d.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<_> = raw
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("model.safetensors"),
        safetensors::serialize(views, None).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        case_dir().join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    let m = load_hf::<NdArray>(dir.path(), &Default::default()).unwrap();
    let gap = max_abs_diff(&logits(&m), &transformers_logits());
    assert!(gap <= F32_LOGITS, "fused names: gap {gap}");
}

// ---- config ----------------------------------------------------------------------------

#[test]
fn qwen3_moe_configs_read_as_transformers_reads_them() {
    let (c, ignored) = ModelConfig::from_json_with_ignored(&read_json("config.json")).unwrap();
    assert!(ignored.keys.is_empty(), "{ignored:?}");
    let m = c.moe.clone().unwrap();
    assert_eq!(
        m.kind,
        MoeKind::Qwen3 {
            norm_topk_prob: true
        }
    );
    assert_eq!(
        (
            m.num_local_experts,
            m.num_experts_per_tok,
            m.moe_intermediate_size
        ),
        (8, 2, 8)
    );
    assert!(m.dense_layers.is_empty());
    assert!(c.qk_norm && !c.attention_bias && !c.attention_sinks && !c.mlp_bias);
    assert_eq!(
        (c.head_dim, c.intermediate_size, c.rope_theta),
        (16, 48, 1e6)
    );
    assert_eq!(
        (c.sliding_window, c.layer_types.clone()),
        (None, vec![LayerType::Full; 2])
    );
    // The Hub's form: `num_experts`, top-level rope_theta, and max_window_layers (not a
    // Qwen3MoeConfig key: ignored with a warning, as transformers keeps it inert).
    let (hub, ignored) =
        ModelConfig::from_json_with_ignored(&read_json("config.hub.json")).unwrap();
    assert_eq!(hub, c);
    assert_eq!(ignored.keys, vec!["max_window_layers".to_string()]);
    // Our own format round-trips the block.
    assert_eq!(ModelConfig::from_json(&c.to_json()).unwrap(), c);
}

fn minimal(extra: serde_json::Value) -> Result<ModelConfig, String> {
    let mut v = serde_json::json!({
        "model_type": "qwen3_moe", "vocab_size": 8, "hidden_size": 64,
        "intermediate_size": 8, "num_hidden_layers": 4, "num_attention_heads": 8,
    });
    for (k, val) in extra.as_object().unwrap() {
        v[k] = val.clone();
    }
    ModelConfig::from_json(&v).map_err(|e| e.to_string())
}

#[test]
fn missing_qwen3_moe_keys_take_qwen3_moe_config_defaults() {
    let c = minimal(serde_json::json!({})).unwrap();
    // Qwen3MoeConfig: no head_dim field (hidden / heads), 4 kv heads, 128 experts top 8,
    // moe_intermediate_size 768, norm_topk_prob false, every layer sparse.
    assert_eq!((c.head_dim, c.num_key_value_heads), (8, 4));
    let m = c.moe.unwrap();
    assert_eq!(
        (
            m.num_local_experts,
            m.num_experts_per_tok,
            m.moe_intermediate_size
        ),
        (128, 8, 768)
    );
    assert_eq!(
        m.kind,
        MoeKind::Qwen3 {
            norm_topk_prob: false
        }
    );
    assert!(m.dense_layers.is_empty());
}

#[test]
fn dense_layers_follow_decoder_sparse_step_and_mlp_only_layers_as_transformers() {
    // Qwen3MoeDecoderLayer: sparse iff i not in mlp_only_layers and (i + 1) % step == 0.
    let dense = |extra| minimal(extra).unwrap().moe.map(|m| m.dense_layers);
    assert_eq!(
        dense(serde_json::json!({"decoder_sparse_step": 2})),
        Some(vec![0, 2])
    );
    assert_eq!(
        dense(serde_json::json!({"decoder_sparse_step": 2, "mlp_only_layers": [1]})),
        Some(vec![0, 1, 2])
    );
    assert_eq!(
        dense(serde_json::json!({"mlp_only_layers": [0, 3]})),
        Some(vec![0, 3])
    );
    // No sparse layer left (or no experts): a dense model.
    assert_eq!(dense(serde_json::json!({"num_experts": 0})), None);
    assert_eq!(dense(serde_json::json!({"decoder_sparse_step": 5})), None);
    // use_sliding_window puts the window on every layer.
    let c = minimal(serde_json::json!({"use_sliding_window": true, "sliding_window": 6})).unwrap();
    assert_eq!(
        (c.sliding_window, c.layer_types),
        (Some(6), vec![LayerType::Sliding; 4])
    );
}

#[test]
fn contradicting_or_impossible_qwen3_moe_keys_are_refused_naming_them() {
    let e = minimal(serde_json::json!({"num_experts": 8, "num_local_experts": 4})).unwrap_err();
    assert!(
        e.contains("'num_experts'") && e.contains("'num_local_experts'"),
        "{e}"
    );
    let e = minimal(serde_json::json!({"decoder_sparse_step": 0})).unwrap_err();
    assert!(e.contains("decoder_sparse_step"), "{e}");
    let e = minimal(serde_json::json!({"num_experts_per_tok": 9, "num_experts": 8})).unwrap_err();
    assert!(e.contains("num_experts_per_tok"), "{e}");
    // gpt-oss's clamp is not a Qwen3-MoE key, and Qwen3-MoE's keys are not Llama's.
    let e = minimal(serde_json::json!({"swiglu_limit": 7.0})).unwrap_err();
    assert!(e.contains("unsupported: swiglu_limit"), "{e}");
    let mut v = serde_json::json!({
        "model_type": "llama", "vocab_size": 8, "hidden_size": 64,
        "intermediate_size": 8, "num_hidden_layers": 4, "num_attention_heads": 8,
    });
    v["norm_topk_prob"] = true.into();
    let e = ModelConfig::from_json(&v).unwrap_err().to_string();
    assert!(e.contains("unsupported: norm_topk_prob"), "{e}");
}

// ---- a model with dense and sparse layers ----------------------------------------------

#[test]
fn a_checkpoint_with_dense_and_sparse_layers_saves_in_hf_names_and_reloads_exactly() {
    // Layer 0 dense (decoder_sparse_step 2), layer 1 sparse: saved under transformers'
    // names, reloaded from transformers' config.json form and from ours.
    let mut hf = read_json("config.json");
    hf["decoder_sparse_step"] = 2.into();
    let c = ModelConfig::from_json(&hf).unwrap();
    assert_eq!(c.moe.as_ref().unwrap().dense_layers, vec![0]);
    let device = Default::default();
    let m = Transformer::<NdArray>::new(&c, &device).unwrap();
    assert!(m.layers[0].mlp.dense().is_some() && m.layers[1].mlp.experts().is_some());
    assert_eq!(m.num_params(), c.num_params());
    let names: Vec<String> = named_weights(&m).into_iter().map(|(n, _)| n).collect();
    for want in [
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.1.mlp.gate.weight",
        "model.layers.1.mlp.experts.7.up_proj.weight",
        "model.layers.1.mlp.experts.0.down_proj.weight",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    let before = logits(&m);
    let ours = tempfile::tempdir().unwrap();
    save_hf(&m, ours.path()).unwrap();
    let back = load_hf::<NdArray>(ours.path(), &device).unwrap();
    assert_eq!(logits(&back), before, "our format");
    std::fs::write(ours.path().join("config.json"), hf.to_string()).unwrap();
    let back = load_hf::<NdArray>(ours.path(), &device).unwrap();
    assert_eq!(logits(&back), before, "transformers' config.json");
}

// ---- fine-tuning -----------------------------------------------------------------------

/// The bundled text upper-cased and cut to bytes below the fixture's vocabulary of 96.
fn docs() -> Vec<String> {
    let text: String = burn_ascend_model::load::data::BUNDLED_CORPUS[..12_000]
        .to_uppercase()
        .chars()
        .map(|c| if (c as u32) < 96 { c } else { ' ' })
        .collect();
    documents_from_text(&text)
}

fn opts(out: &Path, lr: f64) -> TrainOptions {
    TrainOptions {
        total_steps: 8,
        stop_after: None,
        lr,
        weight_decay: 0.0,
        clip_norm: 1.0,
        seed: 5,
        out: out.into(),
        save_every: 100,
        warmup_steps: None,
    }
}

type Ad = Autodiff<NdArray>;

#[test]
fn full_fine_tuning_from_the_checkpoint_lowers_the_loss_and_publishes_a_loadable_model() {
    let device = Default::default();
    let out = tempfile::tempdir().unwrap();
    let (model, state) =
        init_model::<Ad>(&Init::Checkpoint(case_dir()), out.path(), &device).unwrap();
    let mut packer = Packer::new(&docs(), &Tokenizer::Bytes, 96, 48, 5).unwrap();
    let (model, state) = train(
        model,
        state,
        false,
        &mut packer,
        &opts(out.path(), 1e-2),
        |_| {},
    )
    .unwrap();
    let l = &state.losses;
    eprintln!("qwen3_moe full fine-tune losses {l:?}");
    assert!(l[7] < 0.8 * l[0], "loss did not fall: {l:?}");
    // The published checkpoint (our config format, transformers' tensor names) reloads to the
    // trained model.
    let published = burn_ascend_model::run_state::published::Published::open(out.path()).unwrap();
    let back = load_hf::<NdArray>(&published.dir, &device).unwrap();
    assert_eq!(logits(&back), logits(&model.valid()));
}

#[test]
fn lora_fine_tuning_of_the_attention_lowers_the_loss_and_experts_are_refused_as_targets() {
    let device = Default::default();
    let out = tempfile::tempdir().unwrap();
    let settings = |targets: &str| LoraSettings {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: LoraTarget::parse_list(targets, "--lora-targets").unwrap(),
        base_model: case_dir().display().to_string(),
    };
    let (model, state) = init_lora::<Ad>(
        &case_dir(),
        Some(&settings("q_proj,k_proj,v_proj,o_proj")),
        1,
        out.path(),
        &device,
    )
    .unwrap();
    let mut packer = Packer::new(&docs(), &Tokenizer::Bytes, 96, 48, 5).unwrap();
    let (_, state) = train(
        model,
        state,
        false,
        &mut packer,
        &opts(out.path(), 2e-2),
        |_| {},
    )
    .unwrap();
    let l = &state.losses;
    eprintln!("qwen3_moe LoRA losses {l:?}");
    assert!(l[7] < 0.9 * l[0], "loss did not fall: {l:?}");
    // The experts are no nn.Linear in transformers 5 (PEFT's all-linear skips them too): an
    // MLP target on a sparse layer is refused naming the flag.
    let other = tempfile::tempdir().unwrap();
    let e = init_lora::<Ad>(
        &case_dir(),
        Some(&settings("gate_proj")),
        1,
        other.path(),
        &device,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--lora-targets gate_proj"), "{e}");
}
