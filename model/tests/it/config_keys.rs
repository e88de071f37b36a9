//! `config.json` keys as transformers reads them: `PretrainedConfig`'s generic attributes and
//! private `_` keys are accepted silently, a key no class here uses is ignored with one
//! warning line, and a key the model type's class uses that the arithmetic here does not
//! follow is still refused naming it.

use std::path::Path;

use burn_ascend_model::load::config::{IgnoredKeys, GENERIC_ATTRIBUTES, METADATA_KEYS};
use burn_ascend_model::ModelConfig;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf");

fn fixture(case: &str) -> serde_json::Value {
    let path = Path::new(FIXTURES).join(case).join("config.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The llama fixture's config with `keys` added (each `null` unless given), and what it
/// reads as next to the fixture itself.
fn with_keys(pairs: &[(&str, serde_json::Value)]) -> (ModelConfig, IgnoredKeys, ModelConfig) {
    let mut v = fixture("llama");
    let (base, none) = ModelConfig::from_json_with_ignored(&v).unwrap();
    assert_eq!(none.keys, Vec::<String>::new());
    for (k, val) in pairs {
        v[*k] = val.clone();
    }
    let (got, ignored) = ModelConfig::from_json_with_ignored(&v)
        .unwrap_or_else(|e| panic!("{:?}: {e}", pairs.iter().map(|p| p.0).collect::<Vec<_>>()));
    (got, ignored, base)
}

#[test]
fn every_generic_attribute_is_accepted_silently() {
    for key in GENERIC_ATTRIBUTES
        .iter()
        .chain(METADATA_KEYS)
        .filter(|k| **k != "model_type")
    {
        let (got, ignored, base) = with_keys(&[(key, serde_json::Value::Null)]);
        assert_eq!(ignored.keys, Vec::<String>::new(), "{key}");
        assert_eq!(ignored.warning(), None, "{key}");
        assert_eq!(got, base, "{key} changed the config");
    }
}

#[test]
fn the_list_of_generic_attributes_holds_transformers_fields_and_v4_keys() {
    // PreTrainedConfig's 10 dataclass fields in transformers 5, and transformers 4 generic
    // keys real folders carry (a GGUF conversion writes unk_token_id and
    // chunk_size_feed_forward).
    for key in [
        "transformers_version",
        "architectures",
        "output_hidden_states",
        "return_dict",
        "dtype",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
        "id2label",
        "label2id",
        "problem_type",
        "torchscript",
        "tokenizer_class",
        "sep_token_id",
        "unk_token_id",
        "pruned_heads",
        "is_decoder",
        "prefix",
        "use_bfloat16",
        "output_attentions",
        "torch_dtype",
        "max_length",
        "num_beams",
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
    ] {
        assert!(GENERIC_ATTRIBUTES.contains(&key), "{key}");
    }
}

#[test]
fn private_keys_are_accepted_silently() {
    let (got, ignored, base) = with_keys(&[
        ("_model_name_or_path", "Llama-3.2-1B".into()),
        ("_attn_implementation_autoset", true.into()),
        ("_anything", serde_json::json!({"x": [1, 2]})),
    ]);
    assert_eq!(ignored.warning(), None);
    assert_eq!(got, base);
}

#[test]
fn a_folder_transformers_wrote_from_a_gguf_file_loads_silently() {
    let (got, ignored, base) = with_keys(&[
        ("_model_name_or_path", "Llama 3.2 1B Instruct".into()),
        ("chunk_size_feed_forward", 0.into()),
        ("unk_token_id", 0.into()),
        ("dtype", "float32".into()),
    ]);
    assert_eq!(ignored.warning(), None);
    assert_eq!(got, base);
}

#[test]
fn unknown_keys_load_with_one_warning_naming_them() {
    let (got, ignored, base) = with_keys(&[
        ("unsloth_version", "2025.3.1".into()),
        ("transformers.js_config", serde_json::json!({"dtype": "q4"})),
        ("attn_logit_softcapping", 50.0.into()),
        ("_attn_implementation_autoset", true.into()),
    ]);
    assert_eq!(got, base);
    assert_eq!(
        ignored.keys,
        [
            "attn_logit_softcapping",
            "transformers.js_config",
            "unsloth_version"
        ]
    );
    assert_eq!(
        ignored.warning().unwrap(),
        "warning: config.json: ignored keys not used by llama: \
         attn_logit_softcapping, transformers.js_config, unsloth_version"
    );
    // `from_json` prints that line and loads the same config.
    let mut v = fixture("llama");
    v["unsloth_version"] = "2025.3.1".into();
    assert_eq!(ModelConfig::from_json(&v).unwrap(), base);
}

/// An edit of a fixture's config.
type Edit = Box<dyn FnOnce(&mut serde_json::Value)>;

fn refused(case: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v = fixture(case);
    edit(&mut v);
    ModelConfig::from_json_with_ignored(&v)
        .expect_err("must be refused")
        .to_string()
}

#[test]
fn a_key_the_family_uses_that_the_arithmetic_does_not_follow_is_still_refused() {
    let cases: [(&str, &str, Edit); 5] = [
        // LlamaConfig's pretraining_tp above 1 slices the MLP matmuls.
        (
            "llama",
            "pretraining_tp",
            Box::new(|v| v["pretraining_tp"] = 2.into()),
        ),
        // A RoPE kind the arithmetic here does not have.
        (
            "llama",
            "rope_type dynamic",
            Box::new(|v| {
                v["rope_parameters"] =
                    serde_json::json!({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
            }),
        ),
        // Quantized weights other than gpt-oss's MXFP4 experts.
        (
            "llama",
            "quantization_config",
            Box::new(|v| v["quantization_config"] = serde_json::json!({"quant_method": "gptq"})),
        ),
        // A sliding window where the family's model has none.
        (
            "llama",
            "sliding_window",
            Box::new(|v| v["sliding_window"] = 16.into()),
        ),
        // PreTrainedConfig's per-layer overrides.
        (
            "llama",
            "per_layer_config",
            Box::new(|v| v["per_layer_config"] = serde_json::json!({})),
        ),
    ];
    for (case, key, edit) in cases {
        let e = refused(case, edit);
        assert!(e.starts_with(&format!("unsupported: {key}")), "{key}: {e}");
    }
}
