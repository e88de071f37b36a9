//! The model's hyper-parameters, saved as `config.json` next to the weights. Reads our own
//! format and Hugging Face Llama / Qwen2 `config.json` files (same key names, ours adds the
//! sink and window keys).

use serde_json::{json, Value};

use burn_ascend::AttnError;

/// A decoder-only transformer in the style of gpt-oss / Llama.
#[derive(Debug, Clone, PartialEq)]
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
        json!({
            "architectures": ["BurnAscendForCausalLM"],
            "model_type": "burn-ascend",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "sliding_window": self.sliding_window,
            "alternate_sliding": self.alternate_sliding,
            "attention_sinks": self.attention_sinks,
            "attention_bias": self.attention_bias,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
        })
    }

    /// Parses our `config.json` or a Hugging Face Llama / Qwen2 one. Qwen2 has q/k/v biases
    /// and, unless `use_sliding_window`, no window; Llama neither.
    pub fn from_json(v: &Value) -> Result<Self, AttnError> {
        let model_type = v["model_type"].as_str().unwrap_or("llama");
        let usize_key = |k: &'static str| -> Result<usize, AttnError> {
            v[k].as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| AttnError::invalid("config.json", format!("needs integer '{k}'")))
        };
        let heads = usize_key("num_attention_heads")?;
        let hidden = usize_key("hidden_size")?;
        let ours = model_type == "burn-ascend";
        let qwen = model_type.starts_with("qwen2");
        let window = if ours || v["use_sliding_window"].as_bool().unwrap_or(false) {
            v["sliding_window"].as_u64().map(|x| x as usize)
        } else {
            None
        };
        if !ours && !matches!(model_type, "llama" | "qwen2" | "mistral") {
            return Err(AttnError::Unsupported(format!(
                "unsupported: model_type '{model_type}' (llama, qwen2, mistral, burn-ascend)"
            )));
        }
        if v.get("rope_scaling").is_some_and(|r| !r.is_null()) {
            return Err(AttnError::Unsupported(
                "unsupported: rope_scaling in config.json (plain RoPE only)".into(),
            ));
        }
        let cfg = Self {
            vocab_size: usize_key("vocab_size")?,
            hidden_size: hidden,
            intermediate_size: usize_key("intermediate_size")?,
            num_hidden_layers: usize_key("num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: v["num_key_value_heads"]
                .as_u64()
                .map_or(heads, |x| x as usize),
            head_dim: v["head_dim"]
                .as_u64()
                .map_or(hidden / heads.max(1), |x| x as usize),
            sliding_window: window,
            alternate_sliding: ours && v["alternate_sliding"].as_bool().unwrap_or(false),
            attention_sinks: ours && v["attention_sinks"].as_bool().unwrap_or(false),
            attention_bias: v["attention_bias"].as_bool().unwrap_or(qwen),
            rope_theta: v["rope_theta"].as_f64().unwrap_or(10_000.0),
            rms_norm_eps: v["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            tie_word_embeddings: v["tie_word_embeddings"].as_bool().unwrap_or(false),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}
