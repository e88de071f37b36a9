//! The mixture-of-experts keys of `config.json` — gpt-oss's (`GptOssConfig`), Qwen3-MoE's
//! (`Qwen3MoeConfig`) and ours — typed, and read into a [`MoeConfig`] with each class's
//! defaults.

use serde::Deserialize;

use super::model_config::{MoeConfig, MoeKind};
use burn_ascend::AttnError;

/// The expert keys, every one optional; flattened into the raw config (so declared before its
/// catch-all map, which sees only the keys left over).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawMoeKeys {
    num_local_experts: Option<usize>,
    /// Qwen3-MoE's name of the expert count: `Qwen3MoeConfig.attribute_map` maps
    /// `num_local_experts` (what transformers 5 writes) onto it, the Hub's configs say
    /// `num_experts`.
    num_experts: Option<usize>,
    num_experts_per_tok: Option<usize>,
    /// openai/gpt-oss-* configs' own name of `num_experts_per_tok`; transformers keeps it as
    /// an inert attribute.
    experts_per_token: Option<usize>,
    swiglu_limit: Option<f64>,
    swiglu_alpha: Option<f64>,
    router_aux_loss_coef: Option<f64>,
    output_router_logits: Option<bool>,
    moe_intermediate_size: Option<usize>,
    norm_topk_prob: Option<bool>,
    decoder_sparse_step: Option<usize>,
    #[serde(default, deserialize_with = "explicit")]
    mlp_only_layers: Option<Option<Vec<usize>>>,
    /// Ours: which block (`gpt_oss`, the default, or `qwen3_moe`).
    moe_kind: Option<String>,
}

impl RawMoeKeys {
    /// Each key and whether the file sets it, for the check of keys foreign to a family.
    pub(super) fn present(&self) -> [(&'static str, bool); 13] {
        [
            ("num_local_experts", self.num_local_experts.is_some()),
            ("num_experts", self.num_experts.is_some()),
            ("num_experts_per_tok", self.num_experts_per_tok.is_some()),
            ("experts_per_token", self.experts_per_token.is_some()),
            ("swiglu_limit", self.swiglu_limit.is_some()),
            ("swiglu_alpha", self.swiglu_alpha.is_some()),
            ("router_aux_loss_coef", self.router_aux_loss_coef.is_some()),
            ("output_router_logits", self.output_router_logits.is_some()),
            (
                "moe_intermediate_size",
                self.moe_intermediate_size.is_some(),
            ),
            ("norm_topk_prob", self.norm_topk_prob.is_some()),
            ("decoder_sparse_step", self.decoder_sparse_step.is_some()),
            ("mlp_only_layers", self.mlp_only_layers.is_some()),
            ("moe_kind", self.moe_kind.is_some()),
        ]
    }

    /// `GptOssConfig`'s experts: 128 experts, top 4, limit 7, alpha 1.702 by default, every
    /// layer sparse, each expert `intermediate_size` wide.
    pub(super) fn gpt_oss(&self, intermediate: usize, mxfp4: bool) -> Result<MoeConfig, AttnError> {
        let per_tok = self.num_experts_per_tok.unwrap_or(4);
        if let Some(e) = self.experts_per_token {
            if e != per_tok {
                return Err(AttnError::Unsupported(format!(
                    "experts_per_token {e} differing from num_experts_per_tok {per_tok} (transformers reads only the latter)"
                )));
            }
        }
        Ok(MoeConfig {
            kind: MoeKind::GptOss,
            num_local_experts: self.num_local_experts.unwrap_or(128),
            num_experts_per_tok: per_tok,
            moe_intermediate_size: intermediate,
            dense_layers: Vec::new(),
            swiglu_limit: self.swiglu_limit.unwrap_or(7.0),
            swiglu_alpha: self.swiglu_alpha.unwrap_or(1.702),
            mxfp4,
            output_router_logits: self.output_router_logits.unwrap_or(false),
        })
    }

    /// `Qwen3MoeConfig`'s experts (128 experts, top 8, `moe_intermediate_size` 768,
    /// `norm_topk_prob` false, `decoder_sparse_step` 1 by default), and which layers are dense
    /// as `Qwen3MoeDecoderLayer` decides it: layer `i` is sparse unless `i` is in
    /// `mlp_only_layers` or `(i + 1) % decoder_sparse_step != 0`. `None` when no layer is
    /// sparse (`num_experts` 0 included): the model is then dense.
    pub(super) fn qwen3_moe(&self, num_layers: usize) -> Result<Option<MoeConfig>, AttnError> {
        let experts = match (self.num_experts, self.num_local_experts) {
            (Some(a), Some(b)) if a != b => {
                return Err(AttnError::invalid(
                    "config.json",
                    format!(
                        "'num_experts' {a} and 'num_local_experts' {b} disagree (Qwen3MoeConfig maps the one onto the other)"
                    ),
                ))
            }
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => 128,
        };
        let step = self.decoder_sparse_step.unwrap_or(1);
        if step == 0 {
            // transformers' `(i + 1) % decoder_sparse_step` divides by it.
            return Err(AttnError::invalid(
                "decoder_sparse_step",
                "must be at least 1 (every step-th layer is sparse)".to_string(),
            ));
        }
        let mlp_only = self.mlp_only_layers.clone().flatten().unwrap_or_default();
        let dense_layers: Vec<usize> = (0..num_layers)
            .filter(|&i| mlp_only.contains(&i) || experts == 0 || (i + 1) % step != 0)
            .collect();
        if dense_layers.len() == num_layers {
            return Ok(None);
        }
        Ok(Some(MoeConfig {
            kind: MoeKind::Qwen3 {
                norm_topk_prob: self.norm_topk_prob.unwrap_or(false),
            },
            num_local_experts: experts,
            num_experts_per_tok: self.num_experts_per_tok.unwrap_or(8),
            moe_intermediate_size: self.moe_intermediate_size.unwrap_or(768),
            dense_layers,
            swiglu_limit: f64::INFINITY,
            swiglu_alpha: 1.0,
            mxfp4: false,
            output_router_logits: self.output_router_logits.unwrap_or(false),
        }))
    }

    /// Ours: the block of `moe_kind` when both `num_local_experts` and `num_experts_per_tok`
    /// are given, none when neither is.
    pub(super) fn ours(&self, intermediate: usize) -> Result<Option<MoeConfig>, AttnError> {
        let (e, k) = match (self.num_local_experts, self.num_experts_per_tok) {
            (None, None) => return Ok(None),
            (Some(e), Some(k)) => (e, k),
            _ => {
                return Err(AttnError::invalid(
                    "config.json",
                    "needs both 'num_local_experts' and 'num_experts_per_tok' or neither"
                        .to_string(),
                ))
            }
        };
        let kind = match self.moe_kind.as_deref() {
            None | Some("gpt_oss") => MoeKind::GptOss,
            Some("qwen3_moe") => MoeKind::Qwen3 {
                norm_topk_prob: self.norm_topk_prob.unwrap_or(false),
            },
            Some(other) => {
                return Err(AttnError::Unsupported(format!(
                    "moe_kind {other} (gpt_oss, qwen3_moe)"
                )))
            }
        };
        let mut dense_layers = self.mlp_only_layers.clone().flatten().unwrap_or_default();
        dense_layers.sort_unstable();
        dense_layers.dedup();
        // Qwen3-MoE's experts have no clamp: the limits are those of [`Self::qwen3_moe`].
        let (limit, alpha) = match kind {
            MoeKind::GptOss => (7.0, 1.702),
            MoeKind::Qwen3 { .. } => (f64::INFINITY, 1.0),
        };
        Ok(Some(MoeConfig {
            kind,
            num_local_experts: e,
            num_experts_per_tok: k,
            moe_intermediate_size: self.moe_intermediate_size.unwrap_or(intermediate),
            dense_layers,
            swiglu_limit: self.swiglu_limit.unwrap_or(limit),
            swiglu_alpha: self.swiglu_alpha.unwrap_or(alpha),
            mxfp4: false,
            output_router_logits: self.output_router_logits.unwrap_or(false),
        }))
    }
}

/// `Some(value)` for a present key, `null` included (`Some(None)`).
pub(super) fn explicit<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}
