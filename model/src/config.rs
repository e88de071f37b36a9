//! The model's hyper-parameters, saved as `config.json` next to the weights. Reads our own
//! format and Hugging Face Llama / Qwen2 `config.json` files (same key names, ours adds the
//! sink and window keys).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use burn_ascend::AttnError;

/// A decoder-only transformer in the style of gpt-oss / Llama. Serialised under these names
/// (Hugging Face's, plus ours for the sinks and windows) into our `config.json`
/// ([`ModelConfig::to_json`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    /// Vocabulary size (256 for the byte-level tokenizer).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// SwiGLU inner width.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA: divides `num_attention_heads`).
    pub num_key_value_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// Sliding-window size `W` (a query sees itself and the `W` tokens before it) of the
    /// layers that use it; `None` makes every layer full causal.
    pub sliding_window: Option<usize>,
    /// Which layers slide: even layers when `true` (gpt-oss alternates sliding and full).
    pub alternate_sliding: bool,
    /// Learned per-head attention sinks (gpt-oss); Llama / Qwen2 checkpoints have none.
    pub attention_sinks: bool,
    /// Bias on the q/k/v projections (Qwen2).
    pub attention_bias: bool,
    /// RoPE base.
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Output head shares the embedding matrix.
    pub tie_word_embeddings: bool,
}

impl ModelConfig {
    /// The default small model of the `finetune` example (≈ 3.0 M parameters).
    pub fn small_byte_model() -> Self {
        Self {
            vocab_size: 256,
            hidden_size: 256,
            intermediate_size: 688,
            num_hidden_layers: 4,
            // Head size 64, as gpt-oss: CANN's FIA takes a learnableSink for head dims 64
            // and 128 only, so serving this model runs FIA natively.
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 64,
            sliding_window: Some(64),
            alternate_sliding: true,
            attention_sinks: true,
            attention_bias: false,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
        }
    }

    /// The window of layer `layer`, `None` for a full causal layer.
    pub fn layer_window(&self, layer: usize) -> Option<usize> {
        match self.sliding_window {
            Some(w) if !self.alternate_sliding || layer.is_multiple_of(2) => Some(w),
            _ => None,
        }
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        let (h, n, nkv, d) = (
            self.hidden_size,
            self.num_attention_heads,
            self.num_key_value_heads,
            self.head_dim,
        );
        let attn = h * n * d * 2
            + h * nkv * d * 2
            + if self.attention_bias {
                n * d + 2 * nkv * d
            } else {
                0
            }
            + if self.attention_sinks { n } else { 0 };
        let mlp = 3 * h * self.intermediate_size;
        let layer = attn + mlp + 2 * h;
        let head = if self.tie_word_embeddings {
            0
        } else {
            self.vocab_size * h
        };
        self.vocab_size * h + self.num_hidden_layers * layer + h + head
    }

    /// Checks the structural rules the model relies on.
    pub fn validate(&self) -> Result<(), AttnError> {
        let bad = |param: &'static str, rule: String| Err(AttnError::invalid(param, rule));
        if self.vocab_size == 0 || self.hidden_size == 0 || self.num_hidden_layers == 0 {
            return bad(
                "config",
                "vocab_size, hidden_size and num_hidden_layers must be positive".into(),
            );
        }
        if self.num_key_value_heads == 0
            || !self
                .num_attention_heads
                .is_multiple_of(self.num_key_value_heads)
        {
            return bad(
                "num_key_value_heads",
                format!(
                    "must divide num_attention_heads = {}, got {}",
                    self.num_attention_heads, self.num_key_value_heads
                ),
            );
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(
                "head_dim",
                format!("must be even (RoPE rotates pairs), got {}", self.head_dim),
            );
        }
        Ok(())
    }

    /// `config.json` in Hugging Face's key names plus ours.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(OurConfigJson {
            architectures: ["BurnAscendForCausalLM"],
            model_type: OURS,
            config: self,
        })
        .expect("a config of numbers and booleans serialises")
    }

    /// Parses our `config.json` or a Hugging Face Llama / Qwen2 one. Qwen2 has q/k/v biases
    /// and, unless `use_sliding_window`, no window; Llama neither.
    pub fn from_json(v: &Value) -> Result<Self, AttnError> {
        let file = HfConfigJson::deserialize(v)
            .map_err(|e| AttnError::invalid("config.json", e.to_string()))?;
        Self::from_file(file)
    }

    /// The config of a parsed `config.json` (see [`ModelConfig::from_json`]).
    pub(crate) fn from_file(v: HfConfigJson) -> Result<Self, AttnError> {
        let model_type = v.model_type.as_deref().unwrap_or("llama");
        let required = |x: Option<usize>, k: &'static str| {
            x.ok_or_else(|| AttnError::invalid("config.json", format!("needs integer '{k}'")))
        };
        let heads = required(v.num_attention_heads, "num_attention_heads")?;
        let hidden = required(v.hidden_size, "hidden_size")?;
        let ours = model_type == OURS;
        let qwen = model_type.starts_with("qwen2");
        let window = if ours || v.use_sliding_window.unwrap_or(false) {
            v.sliding_window
        } else {
            None
        };
        if !ours && !matches!(model_type, "llama" | "qwen2" | "mistral") {
            return Err(AttnError::Unsupported(format!(
                "unsupported: model_type '{model_type}' (llama, qwen2, mistral, burn-ascend)"
            )));
        }
        if v.rope_scaling.as_ref().is_some_and(|r| !r.is_null()) {
            return Err(AttnError::Unsupported(
                "unsupported: rope_scaling in config.json (plain RoPE only)".into(),
            ));
        }
        let cfg = Self {
            vocab_size: required(v.vocab_size, "vocab_size")?,
            hidden_size: hidden,
            intermediate_size: required(v.intermediate_size, "intermediate_size")?,
            num_hidden_layers: required(v.num_hidden_layers, "num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: v.num_key_value_heads.unwrap_or(heads),
            head_dim: v.head_dim.unwrap_or(hidden / heads.max(1)),
            sliding_window: window,
            alternate_sliding: ours && v.alternate_sliding.unwrap_or(false),
            attention_sinks: ours && v.attention_sinks.unwrap_or(false),
            attention_bias: v.attention_bias.unwrap_or(qwen),
            rope_theta: v.rope_theta.unwrap_or(10_000.0),
            rms_norm_eps: v.rms_norm_eps.unwrap_or(1e-6),
            tie_word_embeddings: v.tie_word_embeddings.unwrap_or(false),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Our `model_type`.
const OURS: &str = "burn-ascend";

/// Our `config.json`: the config under its own names, after the two keys `transformers`
/// reads first.
#[derive(Serialize)]
struct OurConfigJson<'a> {
    architectures: [&'static str; 1],
    model_type: &'static str,
    #[serde(flatten)]
    config: &'a ModelConfig,
}

/// The keys of a `config.json` (ours or a Hugging Face Llama / Qwen2 / Mistral one) that are
/// read; every one may be absent or `null` (the rules for which are required, and the defaults
/// by `model_type`, are [`ModelConfig::from_json`]'s). Other keys (`architectures`,
/// `torch_dtype`, `bos_token_id`, …) are ignored, as `transformers` writes many.
#[derive(Deserialize)]
pub(crate) struct HfConfigJson {
    model_type: Option<String>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    /// Honoured for ours, and for Qwen2 / others only with `use_sliding_window`.
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    /// Ours only.
    alternate_sliding: Option<bool>,
    /// Ours only.
    attention_sinks: Option<bool>,
    attention_bias: Option<bool>,
    rope_theta: Option<f64>,
    rms_norm_eps: Option<f64>,
    tie_word_embeddings: Option<bool>,
    /// Refused unless `null`: plain RoPE only.
    rope_scaling: Option<Value>,
}
