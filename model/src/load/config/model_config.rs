//! The model's hyper-parameters ([`ModelConfig`]) and their own `config.json` form; reading a
//! Hugging Face `config.json` is [`super::hf`]'s.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use burn_ascend::AttnError;

/// Attention kind of one layer, transformers' `layer_types` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayerType {
    /// Full causal attention.
    #[serde(rename = "full_attention")]
    Full,
    /// Sliding-window causal attention (the config's `sliding_window`).
    #[serde(rename = "sliding_attention")]
    Sliding,
}

impl LayerType {
    /// `n` layers alternating sliding (even layers, from layer 0) and full, as gpt-oss.
    pub fn alternating(n: usize) -> Vec<Self> {
        (0..n)
            .map(|i| {
                if i % 2 == 0 {
                    Self::Sliding
                } else {
                    Self::Full
                }
            })
            .collect()
    }

    /// `n` layers of one kind.
    pub fn all(kind: Self, n: usize) -> Vec<Self> {
        vec![kind; n]
    }
}

/// How RoPE's inverse frequencies are derived from `rope_theta`: transformers'
/// `ROPE_INIT_FUNCTIONS` (`modeling_rope_utils.py`) for the types we implement.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// `_compute_default_rope_parameters`: `1 / θ^(2i/D)`.
    Default,
    /// `_compute_linear_scaling_rope_parameters`: the default frequencies divided by `factor`.
    Linear {
        /// Position interpolation factor.
        factor: f64,
    },
    /// `_compute_llama3_parameters` (Llama 3.1+).
    Llama3 {
        /// `factor` (8 in Llama 3.1).
        factor: f64,
        /// `low_freq_factor` (1).
        low_freq_factor: f64,
        /// `high_freq_factor` (4).
        high_freq_factor: f64,
        /// `original_max_position_embeddings` (8192).
        original_max_position_embeddings: f64,
    },
    /// `_compute_yarn_parameters`, with its attention factor scaling cos and sin.
    Yarn {
        /// `factor`.
        factor: f64,
        /// `original_max_position_embeddings` (transformers 5 defaults it to
        /// `max_position_embeddings`).
        original_max_position_embeddings: f64,
        /// `beta_fast` (32).
        beta_fast: f64,
        /// `beta_slow` (1).
        beta_slow: f64,
        /// The attention factor: `attention_factor` when given, else `get_mscale(factor)`
        /// (or the `mscale / mscale_all_dim` ratio), resolved at parse time.
        attention_factor: f64,
        /// `truncate` (true): floor / ceil the correction range (gpt-oss sets false).
        truncate: bool,
    },
}

/// Which mixture-of-experts block a model has: its router and its experts' arithmetic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MoeKind {
    /// gpt-oss (`GptOssTopKRouter`, `GptOssExperts`): a router with bias whose weights are a
    /// softmax over the top-k *logits*; experts with biases, gate and up interleaved, the
    /// clamped SwiGLU of [`MoeConfig::swiglu_limit`] / [`MoeConfig::swiglu_alpha`].
    GptOss,
    /// Qwen3-MoE (`Qwen3MoeTopKRouter`, `Qwen3MoeExperts`): a router without bias, a softmax
    /// over *all* experts in f32, its top-k, renormalised to sum 1 when `norm_topk_prob`;
    /// experts `down(silu(gate x) · up x)` without biases or clamping.
    Qwen3 {
        /// `norm_topk_prob`: divide the k probabilities by their sum.
        norm_topk_prob: bool,
    },
}

/// A mixture-of-experts MLP in place of SwiGLU (gpt-oss's `GptOssConfig` or Qwen3-MoE's
/// `Qwen3MoeConfig` expert keys), on every layer but [`Self::dense_layers`].
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// The router and experts' arithmetic.
    pub kind: MoeKind,
    /// `num_local_experts` (Qwen3-MoE's `num_experts`).
    pub num_local_experts: usize,
    /// `num_experts_per_tok` (top-k).
    pub num_experts_per_tok: usize,
    /// Each expert's inner width: gpt-oss's `intermediate_size`, Qwen3-MoE's
    /// `moe_intermediate_size` (its dense layers use [`ModelConfig::intermediate_size`]).
    pub moe_intermediate_size: usize,
    /// Layers whose MLP is the dense SwiGLU of [`ModelConfig::intermediate_size`], ascending:
    /// Qwen3-MoE's `mlp_only_layers` and the layers `decoder_sparse_step` skips; empty for
    /// gpt-oss.
    pub dense_layers: Vec<usize>,
    /// gpt-oss's `swiglu_limit`: the gate is clamped from above at it, the up projection to
    /// ±it (unused by Qwen3-MoE).
    pub swiglu_limit: f64,
    /// gpt-oss's `swiglu_alpha`: `glu = gate · σ(alpha · gate)` (unused by Qwen3-MoE).
    pub swiglu_alpha: f64,
    /// The checkpoint stores the experts in MXFP4 (`quantization_config.quant_method mxfp4`),
    /// dequantized on load.
    pub mxfp4: bool,
    /// `output_router_logits`: transformers then adds `router_aux_loss_coef` × the router's
    /// load-balancing loss to the training loss. Inference ignores it (the logits are the
    /// same); training refuses it (not implemented).
    pub output_router_logits: bool,
}

/// A decoder-only transformer in the style of gpt-oss / Llama / Qwen.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Vocabulary size (256 for the byte-level tokenizer).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// SwiGLU inner width (per expert with [`Self::moe`]).
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA: divides `num_attention_heads`).
    pub num_key_value_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// Sliding-window size `W` of the layers whose [`Self::layer_types`] entry slides, with
    /// transformers' semantics: a query sees `W` keys including itself (positions
    /// `i − W + 1 ..= i`). `None`: the sliding layers attend fully, as in transformers.
    pub sliding_window: Option<usize>,
    /// Per layer: full or sliding attention (`num_hidden_layers` entries).
    pub layer_types: Vec<LayerType>,
    /// Learned per-head attention sinks (gpt-oss); Llama / Qwen / Mistral have none.
    pub attention_sinks: bool,
    /// Bias on the q/k/v projections (Qwen2; Llama / Qwen3 with `attention_bias`).
    pub attention_bias: bool,
    /// Bias on the output projection (Llama / Qwen3 with `attention_bias`; not Qwen2).
    pub attention_output_bias: bool,
    /// Biases on the MLP's three projections (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Per-head RMSNorm of q and k over `head_dim` before RoPE (Qwen3's `q_norm` / `k_norm`).
    pub qk_norm: bool,
    /// RoPE base.
    pub rope_theta: f64,
    /// RoPE frequency scaling.
    pub rope_scaling: RopeScaling,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Output head shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Attention dropout probability of the checkpoint; inference ignores it (as transformers
    /// in eval mode), training refuses a non-zero one (not implemented).
    pub attention_dropout: f64,
    /// gpt-oss, Qwen3-MoE: a mixture of experts replaces the SwiGLU MLP of every layer but
    /// [`MoeConfig::dense_layers`].
    pub moe: Option<MoeConfig>,
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
            // 64 keys including the query, alternating with full layers, as gpt-oss does
            // with 128.
            sliding_window: Some(64),
            layer_types: LayerType::alternating(4),
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

    /// The window of layer `layer` in keys including the query (transformers' `W`), `None`
    /// for a full causal layer.
    pub fn layer_window(&self, layer: usize) -> Option<usize> {
        match self.layer_types.get(layer) {
            Some(LayerType::Sliding) => self.sliding_window,
            _ => None,
        }
    }

    /// Whether layer `layer`'s MLP is the mixture of experts (else the dense SwiGLU).
    pub fn is_sparse_layer(&self, layer: usize) -> bool {
        self.moe
            .as_ref()
            .is_some_and(|m| !m.dense_layers.contains(&layer))
    }

    /// Number of layers whose MLP is the mixture of experts.
    pub fn num_sparse_layers(&self) -> usize {
        (0..self.num_hidden_layers)
            .filter(|&i| self.is_sparse_layer(i))
            .count()
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
            + if self.attention_output_bias { h } else { 0 }
            + if self.qk_norm { 2 * d } else { 0 }
            + if self.attention_sinks { n } else { 0 };
        let dense = 3 * h * self.intermediate_size
            + if self.mlp_bias {
                2 * self.intermediate_size + h
            } else {
                0
            };
        let sparse = match &self.moe {
            Some(m) => {
                let i = m.moe_intermediate_size;
                match m.kind {
                    // Router weight and bias; per expert gate_up [H, 2I] + bias, down [I, H]
                    // + bias.
                    MoeKind::GptOss => m.num_local_experts * (h + 1 + 3 * h * i + 2 * i + h),
                    // Router weight; per expert gate, up [H, I] and down [I, H].
                    MoeKind::Qwen3 { .. } => m.num_local_experts * (h + 3 * h * i),
                }
            }
            None => 0,
        };
        let sparse_layers = self.num_sparse_layers();
        let layers = self.num_hidden_layers * (attn + 2 * h)
            + sparse_layers * sparse
            + (self.num_hidden_layers - sparse_layers) * dense;
        let head = if self.tie_word_embeddings {
            0
        } else {
            self.vocab_size * h
        };
        self.vocab_size * h + layers + h + head
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
        if self.layer_types.len() != self.num_hidden_layers {
            return bad(
                "layer_types",
                format!(
                    "needs one entry per layer ({}), got {}",
                    self.num_hidden_layers,
                    self.layer_types.len()
                ),
            );
        }
        // RMSNorm divides by sqrt(mean(x²) + eps) and RoPE raises theta to fractional powers:
        // a non-positive or non-finite value gives NaN or inf on the first token.
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return bad(
                "rms_norm_eps",
                format!("must be a finite number above 0, got {}", self.rms_norm_eps),
            );
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(
                "rope_theta",
                format!("must be a finite number above 0, got {}", self.rope_theta),
            );
        }
        if self.sliding_window == Some(0) {
            return bad(
                "sliding_window",
                "must be at least 1 (the query itself)".into(),
            );
        }
        if let Some(m) = &self.moe {
            if m.num_experts_per_tok == 0 || m.num_experts_per_tok > m.num_local_experts {
                return bad(
                    "num_experts_per_tok",
                    format!(
                        "must be 1 ..= num_local_experts = {}, got {}",
                        m.num_local_experts, m.num_experts_per_tok
                    ),
                );
            }
            if m.moe_intermediate_size == 0 {
                return bad("moe_intermediate_size", "must be positive".into());
            }
            if let Some(&l) = m
                .dense_layers
                .iter()
                .find(|&&l| l >= self.num_hidden_layers)
            {
                return bad(
                    "mlp_only_layers",
                    format!(
                        "layer {l} is past the last layer (num_hidden_layers {})",
                        self.num_hidden_layers
                    ),
                );
            }
        }
        Ok(())
    }

    /// `config.json` in our format: Hugging Face's key names (transformers 5's
    /// `rope_parameters`, `layer_types`) plus ours.
    pub fn to_json(&self) -> Value {
        let mut rope = Map::new();
        rope.insert("rope_theta".into(), json!(self.rope_theta));
        match &self.rope_scaling {
            RopeScaling::Default => {
                rope.insert("rope_type".into(), json!("default"));
            }
            RopeScaling::Linear { factor } => {
                rope.insert("rope_type".into(), json!("linear"));
                rope.insert("factor".into(), json!(factor));
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                rope.insert("rope_type".into(), json!("llama3"));
                rope.insert("factor".into(), json!(factor));
                rope.insert("low_freq_factor".into(), json!(low_freq_factor));
                rope.insert("high_freq_factor".into(), json!(high_freq_factor));
                rope.insert(
                    "original_max_position_embeddings".into(),
                    json!(original_max_position_embeddings),
                );
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
                truncate,
            } => {
                rope.insert("rope_type".into(), json!("yarn"));
                rope.insert("factor".into(), json!(factor));
                rope.insert(
                    "original_max_position_embeddings".into(),
                    json!(original_max_position_embeddings),
                );
                rope.insert("beta_fast".into(), json!(beta_fast));
                rope.insert("beta_slow".into(), json!(beta_slow));
                rope.insert("attention_factor".into(), json!(attention_factor));
                rope.insert("truncate".into(), json!(truncate));
            }
        }
        let mut v = json!({
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
            "layer_types": self.layer_types,
            "attention_sinks": self.attention_sinks,
            "attention_bias": self.attention_bias,
            "attention_output_bias": self.attention_output_bias,
            "mlp_bias": self.mlp_bias,
            "qk_norm": self.qk_norm,
            "rope_parameters": rope,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_dropout": self.attention_dropout,
        });
        if let Some(m) = &self.moe {
            // Saved weights are f32 (dequantized): no quantization_config.
            let o = v.as_object_mut().expect("object");
            o.insert("num_local_experts".into(), json!(m.num_local_experts));
            o.insert("num_experts_per_tok".into(), json!(m.num_experts_per_tok));
            o.insert("output_router_logits".into(), json!(m.output_router_logits));
            match m.kind {
                MoeKind::GptOss => {
                    o.insert("swiglu_limit".into(), json!(m.swiglu_limit));
                    o.insert("swiglu_alpha".into(), json!(m.swiglu_alpha));
                }
                MoeKind::Qwen3 { norm_topk_prob } => {
                    o.insert("moe_kind".into(), json!("qwen3_moe"));
                    o.insert("norm_topk_prob".into(), json!(norm_topk_prob));
                    o.insert(
                        "moe_intermediate_size".into(),
                        json!(m.moe_intermediate_size),
                    );
                    o.insert("mlp_only_layers".into(), json!(m.dense_layers));
                }
            }
        }
        v
    }
}
