//! Reading `config.json` as transformers reads it: the raw keys deserialised (typed, every key
//! accounted for), then interpreted per model family with transformers' defaults into a
//! [`ModelConfig`]; see the parent module's documentation for the rules.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::model_config::{LayerType, ModelConfig, RopeScaling};
use super::moe_keys::{explicit, RawMoeKeys};
use burn_ascend::AttnError;

/// The generic attributes of transformers' `PretrainedConfig`: keys any model type's
/// `config.json` may carry, none of which changes the arithmetic of a forward or backward
/// pass here. Taken from transformers 5.25's `configuration_utils.py` and 4.57's (see
/// `tools/notes_pretrained_config.md`): the 10 dataclass fields of `PreTrainedConfig`, the
/// keys its `__post_init__` consumes without keeping them as fields, the keyword arguments
/// transformers 4 declared on every config (which 5 keeps as plain attributes), the token id
/// `unk_token_id` that transformers' own GGUF conversion writes, and the generation defaults
/// `GenerationConfig` lists (popped and dropped by transformers 5 unless the class declares
/// them). Keys beginning with `_` (`_name_or_path`, `_commit_hash`,
/// `_attn_implementation_autoset`, …) are transformers' private metadata and accepted too.
pub const GENERIC_ATTRIBUTES: &[&str] = &[
    // PreTrainedConfig's dataclass fields.
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
    // Consumed by PreTrainedConfig.__post_init__ (the RoPE keys are typed fields here).
    "output_attentions",
    "attn_implementation",
    "experts_implementation",
    "num_labels",
    "name_or_path",
    "torch_dtype",
    // Transformers 4's generic keyword arguments.
    "torchscript",
    "pruned_heads",
    // (`tie_word_embeddings`, also one of them, is a typed key here: it is honoured.)
    "is_decoder",
    "cross_attention_hidden_size",
    "add_cross_attention",
    "tie_encoder_decoder",
    "finetuning_task",
    "task_specific_params",
    "tokenizer_class",
    "prefix",
    "bos_token_id",
    "pad_token_id",
    "eos_token_id",
    "sep_token_id",
    "unk_token_id",
    "decoder_start_token_id",
    "gradient_checkpointing",
    "tf_legacy_loss",
    "use_bfloat16",
    // GenerationConfig's defaults.
    "max_length",
    "min_length",
    "do_sample",
    "use_cache",
    "early_stopping",
    "num_beams",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    "epsilon_cutoff",
    "eta_cutoff",
    "encoder_repetition_penalty",
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
    "assistant_lookbehind",
    "target_lookbehind",
    "num_beam_groups",
    "diversity_penalty",
];

/// Keys of the model families' own config classes that do not change the arithmetic here:
/// identification, initialisation (a checkpoint brings its weights) and transformers 4's
/// `use_return_dict`. Accepted silently, as [`GENERIC_ATTRIBUTES`] are.
pub const METADATA_KEYS: &[&str] = &[
    "model_type",
    "initializer_range",
    "max_position_embeddings",
    "use_return_dict",
];

/// Keys transformers would apply that change the arithmetic and that no family here
/// follows: refused whatever the model type (`per_layer_config` is
/// `PreTrainedConfig.__post_init__`'s per-layer overrides).
const REFUSED_KEYS: &[&str] = &["per_layer_config"];

/// Whether `key` is metadata: a generic attribute, a family's metadata key, or private
/// (beginning with `_`).
pub fn is_metadata_key(key: &str) -> bool {
    key.starts_with('_') || GENERIC_ATTRIBUTES.contains(&key) || METADATA_KEYS.contains(&key)
}

/// The `config.json` keys a load ignored: neither metadata nor used by `model_type`'s
/// config class here (transformers keeps such keys as inert attributes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IgnoredKeys {
    /// The `model_type` the keys were read for.
    pub model_type: String,
    /// The ignored keys, sorted.
    pub keys: Vec<String>,
}

impl IgnoredKeys {
    /// The one warning line for the ignored keys, or `None` when there are none.
    pub fn warning(&self) -> Option<String> {
        (!self.keys.is_empty()).then(|| {
            format!(
                "warning: config.json: ignored keys not used by {}: {}",
                self.model_type,
                self.keys.join(", ")
            )
        })
    }
}

/// The keys of `config.json` this loader knows, typed. Every field is optional: which ones a
/// model type needs, and their defaults, are [`RawConfig::interpret`]'s concern. `Option<
/// Option<T>>` fields tell a missing key (outer `None`) from an explicit `null`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawConfig {
    model_type: Option<String>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    #[serde(default, deserialize_with = "explicit")]
    num_key_value_heads: Option<Option<usize>>,
    #[serde(default, deserialize_with = "explicit")]
    head_dim: Option<Option<usize>>,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
    tie_word_embeddings: Option<bool>,
    rope_theta: Option<f64>,
    #[serde(default, deserialize_with = "explicit")]
    rope_scaling: Option<Option<Map<String, Value>>>,
    #[serde(default, deserialize_with = "explicit")]
    rope_parameters: Option<Option<Map<String, Value>>>,
    partial_rotary_factor: Option<f64>,
    attention_bias: Option<bool>,
    attention_output_bias: Option<bool>,
    mlp_bias: Option<bool>,
    qk_norm: Option<bool>,
    #[serde(default, deserialize_with = "explicit")]
    attention_dropout: Option<Option<f64>>,
    use_sliding_window: Option<bool>,
    #[serde(default, deserialize_with = "explicit")]
    sliding_window: Option<Option<usize>>,
    max_window_layers: Option<usize>,
    #[serde(default, deserialize_with = "explicit")]
    layer_types: Option<Option<Vec<LayerType>>>,
    #[serde(default, deserialize_with = "explicit")]
    pretraining_tp: Option<Option<usize>>,
    #[serde(default, deserialize_with = "explicit")]
    quantization_config: Option<Option<Value>>,
    attention_sinks: Option<bool>,
    alternate_sliding: Option<bool>,
    /// openai/gpt-oss-* configs' name of the YaRN `original_max_position_embeddings`; inert in
    /// transformers (the rope dict carries it).
    initial_context_length: Option<Value>,
    /// The experts' keys (before `rest`: a flattened struct takes its keys, the map then sees
    /// the others).
    #[serde(flatten)]
    moe: RawMoeKeys,
    /// Every other key: metadata, refused or ignored.
    #[serde(flatten)]
    rest: BTreeMap<String, Value>,
}

/// The typed keys of a RoPE dict (`rope_parameters` / `rope_scaling`), transformers'
/// `RopeParameters`.
#[derive(Debug, Default, Deserialize)]
struct RawRope {
    rope_type: Option<String>,
    /// The Hub's legacy name of `rope_type`.
    #[serde(rename = "type")]
    legacy_type: Option<String>,
    rope_theta: Option<f64>,
    factor: Option<f64>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
    original_max_position_embeddings: Option<f64>,
    #[serde(default, deserialize_with = "explicit")]
    attention_factor: Option<Option<f64>>,
    #[serde(default, deserialize_with = "explicit")]
    beta_fast: Option<Option<f64>>,
    #[serde(default, deserialize_with = "explicit")]
    beta_slow: Option<Option<f64>>,
    #[serde(default, deserialize_with = "explicit")]
    mscale: Option<Option<f64>>,
    #[serde(default, deserialize_with = "explicit")]
    mscale_all_dim: Option<Option<f64>>,
    truncate: Option<bool>,
    partial_rotary_factor: Option<f64>,
    #[serde(flatten)]
    rest: BTreeMap<String, Value>,
}

/// Deserializes `map` into `T`; on failure finds the key whose value has the wrong type or
/// shape (serde's message alone does not name it) by deserializing one key at a time.
fn typed<T: serde::de::DeserializeOwned + Default>(
    map: &Map<String, Value>,
    prefix: &str,
) -> Result<T, AttnError> {
    serde_json::from_value(Value::Object(map.clone())).map_err(|e| {
        let key = map.iter().find_map(|(k, v)| {
            let one = Map::from_iter([(k.clone(), v.clone())]);
            serde_json::from_value::<T>(Value::Object(one))
                .err()
                .map(|e| (k.clone(), e))
        });
        match key {
            Some((k, e)) => AttnError::invalid("config.json", format!("key '{prefix}{k}': {e}")),
            None => AttnError::invalid("config.json", e.to_string()),
        }
    })
}

fn unsupported(what: String) -> AttnError {
    AttnError::Unsupported(what)
}

fn missing(key: &str, model_type: &str) -> AttnError {
    AttnError::invalid(
        "config.json",
        format!("needs '{key}' (model_type {model_type}: transformers has no default for it here)"),
    )
}

/// The model families this loader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Ours,
    Llama,
    Qwen2,
    Qwen3,
    Qwen3Moe,
    Mistral,
    GptOss,
}

impl RawConfig {
    pub(super) fn parse(map: &Map<String, Value>) -> Result<Self, AttnError> {
        typed(map, "")
    }

    pub(super) fn interpret(self) -> Result<(ModelConfig, IgnoredKeys), AttnError> {
        let model_type = self.model_type.clone().ok_or_else(|| {
            AttnError::invalid(
                "config.json",
                "needs 'model_type' (llama, qwen2, qwen3, qwen3_moe, mistral, gpt_oss or burn-ascend)"
                    .to_string(),
            )
        })?;
        let family = match model_type.as_str() {
            "burn-ascend" => Family::Ours,
            "llama" => Family::Llama,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "qwen3_moe" => Family::Qwen3Moe,
            "mistral" => Family::Mistral,
            "gpt_oss" => Family::GptOss,
            other => {
                return Err(unsupported(format!(
                    "model_type {other} (llama, qwen2, qwen3, qwen3_moe, mistral, gpt_oss, burn-ascend)"
                )))
            }
        };
        // Unknown keys: refused when transformers would apply them, silent when metadata,
        // else ignored as transformers ignores them (kept as inert attributes), with a warning.
        if let Some(k) = self
            .rest
            .keys()
            .find(|k| REFUSED_KEYS.contains(&k.as_str()))
        {
            return Err(unsupported(format!(
                "{k} (a config.json key that changes the arithmetic; not followed here)"
            )));
        }
        let mut ignored = IgnoredKeys {
            model_type: model_type.clone(),
            keys: self
                .rest
                .keys()
                .filter(|k| !is_metadata_key(k))
                .cloned()
                .collect(),
        };
        // Qwen3MoeConfig has neither key (Qwen/Qwen3-*-A*B configs carry max_window_layers):
        // transformers keeps them as inert attributes and its model never reads them.
        if family == Family::Qwen3Moe {
            for (k, set) in [
                ("max_window_layers", self.max_window_layers.is_some()),
                ("layer_types", self.layer_types.is_some()),
            ] {
                if set {
                    ignored.keys.push(k.to_string());
                }
            }
            ignored.keys.sort();
        }
        // Keys each family's transformers config class does not have, refused rather than
        // guessed at (transformers would keep them as inert attributes).
        let foreign: &[(&str, bool)] = &[
            ("use_sliding_window", self.use_sliding_window.is_some()),
            ("max_window_layers", self.max_window_layers.is_some()),
            ("layer_types", self.layer_types.is_some()),
            ("sliding_window", self.sliding_window.is_some()),
            ("attention_bias", self.attention_bias.is_some()),
            ("mlp_bias", self.mlp_bias.is_some()),
            ("pretraining_tp", self.pretraining_tp.is_some()),
            (
                "attention_output_bias",
                self.attention_output_bias.is_some(),
            ),
            ("qk_norm", self.qk_norm.is_some()),
            ("attention_sinks", self.attention_sinks.is_some()),
            ("alternate_sliding", self.alternate_sliding.is_some()),
            (
                "initial_context_length",
                self.initial_context_length.is_some(),
            ),
        ];
        let moe_keys = self.moe.present();
        let foreign = foreign.iter().chain(moe_keys.iter());
        let allowed: &[&str] = match family {
            Family::Ours => &[
                "layer_types",
                "sliding_window",
                "attention_bias",
                "mlp_bias",
                "attention_output_bias",
                "qk_norm",
                "attention_sinks",
                "alternate_sliding",
                "num_local_experts",
                "num_experts_per_tok",
                "swiglu_limit",
                "swiglu_alpha",
                "output_router_logits",
                "moe_kind",
                "moe_intermediate_size",
                "norm_topk_prob",
                "mlp_only_layers",
            ],
            // LlamaConfig: attention_bias (q/k/v/o), mlp_bias, pretraining_tp.
            Family::Llama => &["attention_bias", "mlp_bias", "pretraining_tp"],
            // Qwen2Config: the biases are fixed (q/k/v yes, o no); `attention_bias` is not a
            // Qwen2 key, so Qwen2 ignores one and so do we.
            Family::Qwen2 => &[
                "use_sliding_window",
                "sliding_window",
                "max_window_layers",
                "layer_types",
                "attention_bias",
            ],
            Family::Qwen3 => &[
                "use_sliding_window",
                "sliding_window",
                "max_window_layers",
                "layer_types",
                "attention_bias",
            ],
            // Qwen3MoeConfig (configuration_qwen3_moe.py; `num_experts` is its name of
            // `num_local_experts`), plus the two inert keys warned about above.
            Family::Qwen3Moe => &[
                "use_sliding_window",
                "sliding_window",
                "max_window_layers",
                "layer_types",
                "attention_bias",
                "num_local_experts",
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "norm_topk_prob",
                "decoder_sparse_step",
                "mlp_only_layers",
                "router_aux_loss_coef",
                "output_router_logits",
            ],
            // MistralConfig has `sliding_window` only; it warns on `layer_types` and its
            // model ignores them, which we refuse rather than mirror.
            Family::Mistral => &["sliding_window"],
            // GptOssConfig (configuration_gpt_oss.py), plus the two keys openai/gpt-oss-*
            // configs carry that transformers keeps as inert attributes.
            Family::GptOss => &[
                "sliding_window",
                "layer_types",
                "attention_bias",
                "num_local_experts",
                "num_experts_per_tok",
                "experts_per_token",
                "initial_context_length",
                "swiglu_limit",
                "swiglu_alpha",
                "router_aux_loss_coef",
                "output_router_logits",
            ],
        };
        if let Some((k, _)) = foreign
            .into_iter()
            .find(|(k, set)| *set && !allowed.contains(k))
        {
            return Err(unsupported(format!(
                "{k} for model_type {model_type} (not a key of its transformers config)"
            )));
        }

        let mut mxfp4 = false;
        if let Some(Some(q)) = &self.quantization_config {
            // gpt-oss's MXFP4 experts (Mxfp4Config) are dequantized on load, as transformers
            // does on a machine without its triton kernels; any other quantization is refused.
            let method = q.get("quant_method").and_then(Value::as_str);
            if family != Family::GptOss || method != Some("mxfp4") {
                return Err(unsupported(format!(
                    "quantization_config (quant_method {}: only gpt_oss's mxfp4 experts are dequantized here)",
                    method.unwrap_or("missing")
                )));
            }
            // Mxfp4Config's keys: which modules stay unquantized (the file's dtypes say it
            // too; only `*_blocks` / `*_scales` pairs are dequantized) and whether to
            // dequantize (we always do). Anything else may change the arithmetic.
            let known = ["quant_method", "modules_to_not_convert", "dequantize"];
            if let Some(k) = q
                .as_object()
                .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
            {
                return Err(unsupported(format!(
                    "quantization_config.{k} (an MXFP4 key this loader does not know)"
                )));
            }
            mxfp4 = true;
        }
        match self.hidden_act.as_deref() {
            // transformers' ACT2FN: "silu" and "swish" are both nn.SiLU. Missing: every
            // family here defaults to "silu".
            None | Some("silu") | Some("swish") => {}
            Some(other) => {
                return Err(unsupported(format!(
                    "hidden_act {other} (SwiGLU with silu only)"
                )))
            }
        }
        if let Some(Some(tp)) = self.pretraining_tp {
            // Llama's pretraining_tp > 1 split the MLP matmuls into slices to reproduce the
            // pretraining rounding; 1 (what Llama 2 configs carry) is a no-op.
            if tp != 1 {
                return Err(unsupported(format!(
                    "pretraining_tp {tp} (only 1, unsliced matmuls)"
                )));
            }
        }
        if let Some(p) = self.partial_rotary_factor {
            if p != 1.0 {
                return Err(unsupported(format!(
                    "partial_rotary_factor {p} (RoPE over the whole head only)"
                )));
            }
        }

        let name = model_type.as_str();
        let need = |v: Option<usize>, key: &str| v.ok_or_else(|| missing(key, name));
        let vocab_size = need(self.vocab_size, "vocab_size")?;
        let hidden_size = need(self.hidden_size, "hidden_size")?;
        let intermediate_size = need(self.intermediate_size, "intermediate_size")?;
        let num_hidden_layers = need(self.num_hidden_layers, "num_hidden_layers")?;
        let num_attention_heads = need(self.num_attention_heads, "num_attention_heads")?;
        if num_attention_heads == 0 {
            return Err(AttnError::invalid(
                "num_attention_heads",
                "must be positive".to_string(),
            ));
        }
        // num_key_value_heads: null means "as many as the query heads" in every config class;
        // a missing key is the class default: None (→ heads) for Llama, 32 for Qwen2 / Qwen3,
        // 8 for Mistral.
        let num_key_value_heads = match self.num_key_value_heads {
            Some(Some(n)) => n,
            Some(None) => num_attention_heads,
            None => match family {
                Family::Ours | Family::Llama => num_attention_heads,
                Family::Qwen2 | Family::Qwen3 => 32,
                Family::Qwen3Moe => 4,
                Family::Mistral | Family::GptOss => 8,
            },
        };
        // head_dim: null or missing is hidden / heads, except Qwen3 whose class default is 128
        // (Qwen2 and Qwen3-MoE have no head_dim field: `getattr(config, "head_dim", hidden /
        // heads)` reads the key when the file has one).
        let head_dim = match (self.head_dim, family) {
            (Some(Some(d)), _) => d,
            (None, Family::Qwen3) => 128,
            // GptOssConfig: head_dim 64 (derived only when null).
            (None, Family::GptOss) => 64,
            _ => hidden_size / num_attention_heads,
        };
        // Every family's class default is 1e-6, gpt-oss's 1e-5.
        let rms_norm_eps =
            self.rms_norm_eps
                .unwrap_or(if family == Family::GptOss { 1e-5 } else { 1e-6 });
        let tie_word_embeddings = self.tie_word_embeddings.unwrap_or(false);
        let attention_dropout = self.attention_dropout.flatten().unwrap_or(0.0);

        let (rope_theta, rope_scaling) = self.rope(family, name)?;

        // Biases: Llama and Qwen3 put `attention_bias` on q/k/v and o; Qwen2 always has q/k/v
        // biases and no o bias; Mistral none (modeling_*.py's `*Attention.__init__`).
        let (attention_bias, attention_output_bias) = match family {
            Family::Ours => (
                self.attention_bias.unwrap_or(false),
                self.attention_output_bias.unwrap_or(false),
            ),
            Family::Llama | Family::Qwen3 | Family::Qwen3Moe => {
                let b = self.attention_bias.unwrap_or(false);
                (b, b)
            }
            // GptOssAttention: `bias=config.attention_bias` on q/k/v and o, default true.
            Family::GptOss => {
                let b = self.attention_bias.unwrap_or(true);
                (b, b)
            }
            Family::Qwen2 => (true, false),
            Family::Mistral => (false, false),
        };
        let mlp_bias = self.mlp_bias.unwrap_or(false);
        let qk_norm = match family {
            Family::Ours => self.qk_norm.unwrap_or(false),
            Family::Qwen3 | Family::Qwen3Moe => true,
            _ => false,
        };

        let (sliding_window, layer_types) = match family {
            Family::Ours => {
                match (self.alternate_sliding, self.layer_types.flatten()) {
                    (Some(_), Some(_)) => {
                        return Err(AttnError::invalid(
                            "config.json",
                            "has both 'alternate_sliding' (the old format) and 'layer_types'"
                                .to_string(),
                        ))
                    }
                    // The old format (before per-layer windows): its window `W` meant "the
                    // query and the W tokens before it", W + 1 keys; it is read as W + 1 keys
                    // in transformers' semantics so old checkpoints compute exactly what they
                    // did. Its layers slid on even layers when `alternate_sliding`, else all.
                    (Some(alternate), None) => {
                        let w = self.sliding_window.flatten().map(|w| w + 1);
                        let types = if alternate {
                            LayerType::alternating(num_hidden_layers)
                        } else {
                            LayerType::all(LayerType::Sliding, num_hidden_layers)
                        };
                        (w, types)
                    }
                    (None, Some(types)) => (self.sliding_window.flatten(), types),
                    (None, None) => (
                        self.sliding_window.flatten(),
                        LayerType::all(LayerType::Full, num_hidden_layers),
                    ),
                }
            }
            Family::Llama => (None, LayerType::all(LayerType::Full, num_hidden_layers)),
            // Qwen2Config / Qwen3Config.__post_init__: sliding_window := None unless
            // use_sliding_window (default false); class default window 4096; layer_types when
            // given, else sliding for layers i >= max_window_layers (default 28) when a
            // window is set.
            Family::Qwen2 | Family::Qwen3 => {
                let window = if self.use_sliding_window.unwrap_or(false) {
                    self.sliding_window.unwrap_or(Some(4096))
                } else {
                    None
                };
                let types = match self.layer_types.flatten() {
                    Some(t) => t,
                    None => {
                        let from = self.max_window_layers.unwrap_or(28);
                        (0..num_hidden_layers)
                            .map(|i| {
                                if window.is_some() && i >= from {
                                    LayerType::Sliding
                                } else {
                                    LayerType::Full
                                }
                            })
                            .collect()
                    }
                };
                (window, types)
            }
            // Qwen3MoeConfig.__post_init__: sliding_window := None unless use_sliding_window;
            // when set (default 4096) every layer slides (Qwen3MoeAttention passes it on all).
            Family::Qwen3Moe => {
                let window = if self.use_sliding_window.unwrap_or(false) {
                    self.sliding_window.unwrap_or(Some(4096))
                } else {
                    None
                };
                let kind = if window.is_some() {
                    LayerType::Sliding
                } else {
                    LayerType::Full
                };
                (window, LayerType::all(kind, num_hidden_layers))
            }
            // MistralConfig: sliding_window defaults to 4096 and applies to every layer
            // (MistralAttention passes `config.sliding_window` on all of them).
            Family::Mistral => {
                let window = self.sliding_window.unwrap_or(Some(4096));
                (
                    window,
                    LayerType::all(LayerType::Sliding, num_hidden_layers),
                )
            }
            // GptOssConfig: sliding_window 128; layer_types default to sliding on even layers
            // (`(i + 1) % 2`), full on odd ones.
            Family::GptOss => (
                self.sliding_window.unwrap_or(Some(128)),
                self.layer_types
                    .flatten()
                    .unwrap_or_else(|| LayerType::alternating(num_hidden_layers)),
            ),
        };
        // gpt-oss always has learned sinks (GptOssAttention.sinks).
        let attention_sinks = match family {
            Family::Ours => self.attention_sinks.unwrap_or(false),
            Family::GptOss => true,
            _ => false,
        };
        let moe = match family {
            Family::GptOss => Some(self.moe.gpt_oss(intermediate_size, mxfp4)?),
            Family::Qwen3Moe => self.moe.qwen3_moe(num_hidden_layers)?,
            Family::Ours => self.moe.ours(intermediate_size)?,
            _ => None,
        };

        let config = ModelConfig {
            vocab_size,
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            sliding_window,
            layer_types,
            attention_sinks,
            attention_bias,
            attention_output_bias,
            mlp_bias,
            qk_norm,
            rope_theta,
            rope_scaling,
            rms_norm_eps,
            tie_word_embeddings,
            attention_dropout,
            moe,
        };
        Ok((config, ignored))
    }

    /// RoPE's base and scaling as transformers 5 standardizes them
    /// (`RotaryEmbeddingConfigMixin.convert_rope_params_to_dict` / `standardize_rope_params`):
    /// the dict is `rope_scaling or rope_parameters`; `rope_theta` defaults to the top-level
    /// `rope_theta`, else 10 000 (`default_theta` of every family here); `rope_type` to the
    /// legacy `type`, else "default"; for llama3 and yarn `original_max_position_embeddings`
    /// to `max_position_embeddings`.
    fn rope(&self, family: Family, name: &str) -> Result<(f64, RopeScaling), AttnError> {
        let dict = match (&self.rope_scaling, &self.rope_parameters) {
            (Some(Some(d)), _) => Some(d.clone()),
            (_, Some(Some(d))) => Some(d.clone()),
            _ => None,
        };
        let key = if matches!(self.rope_scaling, Some(Some(_))) {
            "rope_scaling."
        } else {
            "rope_parameters."
        };
        let r: RawRope = match &dict {
            Some(d) => typed(d, key)?,
            // GptOssConfig.__post_init__'s rope dict when none is given.
            None if family == Family::GptOss => RawRope {
                rope_type: Some("yarn".into()),
                factor: Some(32.0),
                beta_fast: Some(Some(32.0)),
                beta_slow: Some(Some(1.0)),
                truncate: Some(false),
                original_max_position_embeddings: Some(4096.0),
                ..RawRope::default()
            },
            None => RawRope::default(),
        };
        if let Some(p) = r.partial_rotary_factor {
            if p != 1.0 {
                return Err(unsupported(format!(
                    "partial_rotary_factor {p} (RoPE over the whole head only)"
                )));
            }
        }
        // GptOssConfig.default_theta is 150 000; the other families' 10 000.
        let default_theta = if family == Family::GptOss {
            150_000.0
        } else {
            10_000.0
        };
        let theta = r.rope_theta.or(self.rope_theta).unwrap_or(default_theta);
        let rope_type = r
            .rope_type
            .clone()
            .or(r.legacy_type.clone())
            .unwrap_or_else(|| "default".into());
        let max_pos = self.max_position_embeddings.map(|m| m as f64).or(
            // The class defaults of max_position_embeddings.
            match family {
                Family::Llama => Some(2048.0),
                Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe => Some(32768.0),
                Family::Mistral | Family::GptOss => Some(131072.0),
                Family::Ours => None,
            },
        );
        let need = |v: Option<f64>, k: &str| {
            v.ok_or_else(|| {
                AttnError::invalid(
                    "config.json",
                    format!("rope_type {rope_type} needs '{key}{k}' (model_type {name})"),
                )
            })
        };
        let scaling = match rope_type.as_str() {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear {
                factor: need(r.factor, "factor")?,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: need(r.factor, "factor")?,
                low_freq_factor: need(r.low_freq_factor, "low_freq_factor")?,
                high_freq_factor: need(r.high_freq_factor, "high_freq_factor")?,
                original_max_position_embeddings: need(
                    r.original_max_position_embeddings.or(max_pos),
                    "original_max_position_embeddings",
                )?,
            },
            "yarn" => {
                let factor = need(r.factor, "factor")?;
                // _compute_yarn_parameters' get_mscale and its attention-factor default.
                let get_mscale = |scale: f64, mscale: f64| {
                    if scale <= 1.0 {
                        1.0
                    } else {
                        0.1 * mscale * scale.ln() + 1.0
                    }
                };
                let attention_factor = match r.attention_factor.flatten() {
                    Some(a) => a,
                    None => match (r.mscale.flatten(), r.mscale_all_dim.flatten()) {
                        // `if mscale and mscale_all_dim`: both truthy.
                        (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                            get_mscale(factor, m) / get_mscale(factor, all)
                        }
                        _ => get_mscale(factor, 1.0),
                    },
                };
                RopeScaling::Yarn {
                    factor,
                    original_max_position_embeddings: need(
                        r.original_max_position_embeddings.or(max_pos),
                        "original_max_position_embeddings",
                    )?,
                    // `rope_parameters_dict.get("beta_fast") or 32`: null or 0 is 32.
                    beta_fast: r.beta_fast.flatten().filter(|b| *b != 0.0).unwrap_or(32.0),
                    beta_slow: r.beta_slow.flatten().filter(|b| *b != 0.0).unwrap_or(1.0),
                    attention_factor,
                    truncate: r.truncate.unwrap_or(true),
                }
            }
            other => {
                return Err(unsupported(format!(
                    "rope_type {other} (default, linear, llama3, yarn)"
                )))
            }
        };
        // Checked after the type, so an unsupported type is named rather than its keys.
        if let Some(k) = r.rest.keys().next() {
            return Err(unsupported(format!(
                "{key}{k} (a RoPE key this loader does not know)"
            )));
        }
        // Keys the chosen type does not read would be ignored by transformers too, but a
        // mistyped key should not pass unseen: refuse them.
        let used: &[(&str, bool)] = &[
            ("factor", r.factor.is_some()),
            ("low_freq_factor", r.low_freq_factor.is_some()),
            ("high_freq_factor", r.high_freq_factor.is_some()),
            (
                "original_max_position_embeddings",
                r.original_max_position_embeddings.is_some(),
            ),
            ("attention_factor", r.attention_factor.is_some()),
            ("beta_fast", r.beta_fast.is_some()),
            ("beta_slow", r.beta_slow.is_some()),
            ("mscale", r.mscale.is_some()),
            ("mscale_all_dim", r.mscale_all_dim.is_some()),
            ("truncate", r.truncate.is_some()),
        ];
        let reads: &[&str] = match &scaling {
            RopeScaling::Default => &[],
            RopeScaling::Linear { .. } => &["factor"],
            RopeScaling::Llama3 { .. } => &[
                "factor",
                "low_freq_factor",
                "high_freq_factor",
                "original_max_position_embeddings",
            ],
            RopeScaling::Yarn { .. } => &[
                "factor",
                "original_max_position_embeddings",
                "attention_factor",
                "beta_fast",
                "beta_slow",
                "mscale",
                "mscale_all_dim",
                "truncate",
            ],
        };
        if let Some((k, _)) = used.iter().find(|(k, set)| *set && !reads.contains(k)) {
            return Err(unsupported(format!(
                "{key}{k} with rope_type {rope_type} (that type does not read it)"
            )));
        }
        Ok((theta, scaling))
    }
}

impl ModelConfig {
    /// Parses our `config.json` or a Hugging Face one (see the documentation of
    /// [`crate::load::config`]); prints the one warning line of [`IgnoredKeys::warning`] on
    /// stderr when keys were ignored.
    pub fn from_json(v: &Value) -> Result<Self, AttnError> {
        let (cfg, ignored) = Self::from_json_with_ignored(v)?;
        if let Some(w) = ignored.warning() {
            eprintln!("{w}");
        }
        Ok(cfg)
    }

    /// [`ModelConfig::from_json`] without the warning: the config and the keys it ignored.
    pub fn from_json_with_ignored(v: &Value) -> Result<(Self, IgnoredKeys), AttnError> {
        let map = v.as_object().ok_or_else(|| {
            AttnError::invalid("config.json", "must be a JSON object".to_string())
        })?;
        let raw = RawConfig::parse(map)?;
        let (cfg, ignored) = raw.interpret()?;
        cfg.validate()?;
        Ok((cfg, ignored))
    }
}
