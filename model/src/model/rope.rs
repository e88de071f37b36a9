//! Rotary position embedding in Hugging Face Llama's convention ("rotate half": dimension `i`
//! pairs with `i + D/2`), so Llama / Qwen / Mistral checkpoints load unchanged. Positions are
//! explicit, one per token, because packed sequences restart at 0 and cached decoding
//! continues at the cache length.
//!
//! The inverse frequencies follow transformers' `modeling_rope_utils.py`
//! (`_compute_default_rope_parameters`, `_compute_linear_scaling_rope_parameters`,
//! `_compute_llama3_parameters`, `_compute_yarn_parameters`), in f32 as torch computes them;
//! the attention factor they return scales cos and sin (`LlamaRotaryEmbedding.forward`:
//! `cos = emb.cos() * self.attention_scaling`), so q·k gains its square.
//!
//! Every variant differs only in the tables, so the fused op ([`Rope::apply_fused`]:
//! `aclnnRotaryPositionEmbedding` in half mode on Ascend, one node under `Autodiff`) serves
//! them all with the numbers of the composite [`Rope::apply`]; `partial_rotary_factor` (a
//! rotation over part of the head) is refused when the config is read, so no variant falls
//! back to the composite.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_ascend::{AttnError, FusedBackend, RotaryMode, ViewBackend};

use crate::load::config::{ModelConfig, RopeScaling};

/// Per rotated pair `i < D/2`, the inverse frequency, and the attention factor, as
/// transformers' RoPE init functions return them.
pub fn inv_freq(head_dim: usize, theta: f64, scaling: &RopeScaling) -> (Vec<f32>, f64) {
    let dim = head_dim;
    let half = dim / 2;
    // `base ** (torch.arange(0, dim, 2).float() / dim)` in f32.
    let pos_freq = |i: usize| (theta.powf(((2 * i) as f32 / dim as f32) as f64)) as f32;
    let default: Vec<f32> = (0..half).map(|i| 1.0 / pos_freq(i)).collect();
    match *scaling {
        RopeScaling::Default => (default, 1.0),
        RopeScaling::Linear { factor } => {
            (default.iter().map(|f| f / factor as f32).collect(), 1.0)
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old,
        } => {
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            let f = default
                .iter()
                .map(|&inv| {
                    let wavelen = 2.0 * std::f64::consts::PI / inv as f64;
                    if wavelen < high_wavelen {
                        inv
                    } else if wavelen > low_wavelen {
                        (inv as f64 / factor) as f32
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        ((1.0 - smooth) * inv as f64 / factor + smooth * inv as f64) as f32
                    }
                })
                .collect();
            (f, 1.0)
        }
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings: orig,
            beta_fast,
            beta_slow,
            attention_factor,
            truncate,
        } => {
            let d = dim as f64;
            let correction_dim = |rot: f64| {
                (d * (orig / (rot * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * theta.ln())
            };
            let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
            if truncate {
                low = low.floor();
                high = high.ceil();
            }
            let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
            if low == high {
                high += 0.001; // transformers' "prevent singularity"
            }
            let f = (0..half)
                .map(|i| {
                    let p = pos_freq(i);
                    let extrapolation = 1.0 / p;
                    let interpolation = 1.0 / (factor as f32 * p);
                    let ramp =
                        ((i as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
                    let extrapolation_factor = 1.0 - ramp;
                    interpolation * (1.0 - extrapolation_factor)
                        + extrapolation * extrapolation_factor
                })
                .collect();
            (f, attention_factor)
        }
    }
}

/// Cos/sin tables for a list of token positions.
#[derive(Debug, Clone)]
pub struct Rope<B: Backend> {
    /// `[T, 1, D]`: each half the pair's angle (Hugging Face's `cat((freqs, freqs))`), the
    /// layout `aclnnRotaryPositionEmbedding` takes.
    cos: Tensor<B, 3>,
    sin: Tensor<B, 3>,
}

impl<B: Backend> Rope<B> {
    /// Tables `[T, 1, D]` for `positions` (length T) of the model `config`.
    pub fn new(positions: &[usize], config: &ModelConfig, device: &B::Device) -> Self {
        let (cos, sin, shape) = Self::tables(positions, config);
        Self {
            cos: Tensor::from_data(TensorData::new(cos, shape), device),
            sin: Tensor::from_data(TensorData::new(sin, shape), device),
        }
    }

    /// A rope over cos / sin tables already on the device (`[T, 1, D]`, as
    /// [`Self::tables`] computes them): a captured decode step's, rewritten per token.
    pub fn from_tables(cos: Tensor<B, 3>, sin: Tensor<B, 3>) -> Self {
        Self { cos, sin }
    }

    /// The cos and sin tables of `positions` (`[T, 1, D]` each, row-major) that
    /// [`Self::new`] uploads.
    pub fn tables(positions: &[usize], config: &ModelConfig) -> (Vec<f32>, Vec<f32>, [usize; 3]) {
        let (freqs, scale) = inv_freq(config.head_dim, config.rope_theta, &config.rope_scaling);
        let d = 2 * freqs.len();
        let mut cos = Vec::with_capacity(positions.len() * d);
        let mut sin = Vec::with_capacity(positions.len() * d);
        for &p in positions {
            // `inv_freq @ position_ids` in f32, then cos / sin, times the attention factor.
            let angles = freqs.iter().map(|&f| (p as f32 * f) as f64);
            let (c, s): (Vec<f32>, Vec<f32>) = angles
                .map(|a| ((a.cos() * scale) as f32, (a.sin() * scale) as f32))
                .unzip();
            for _ in 0..2 {
                cos.extend_from_slice(&c);
                sin.extend_from_slice(&s);
            }
        }
        (cos, sin, [positions.len(), 1, d])
    }

    /// Rotates `x [T, H, D]`: `(x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin)`, composed of
    /// Burn ops (any backend).
    pub fn apply(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [t, h, d] = x.dims();
        let half = d / 2;
        // In `x`'s dtype (mixed precision computes RoPE in the low one, as Hugging Face does).
        let cos = self.cos.clone().narrow(2, 0, half);
        let sin = self.sin.clone().narrow(2, 0, half);
        let cos = cos.cast(x.dtype()).expand([t, h, half]);
        let sin = sin.cast(x.dtype()).expand([t, h, half]);
        let x1 = x.clone().narrow(2, 0, half);
        let x2 = x.narrow(2, half, half);
        Tensor::cat(
            vec![
                x1.clone() * cos.clone() - x2.clone() * sin.clone(),
                x2 * cos + x1 * sin,
            ],
            2,
        )
    }
}

impl<B: FusedBackend + ViewBackend> Rope<B> {
    /// [`Rope::apply`] through the fused op (`aclnnRotaryPositionEmbedding`, half mode, `x` as
    /// BSND `[1, T, H, D]` with the tables `[1, T, 1, D]`; one node under `Autodiff`, whose
    /// backward is `aclnnRotaryPositionEmbeddingGrad`). The tables are cast to `x`'s dtype first,
    /// as the composite does. The 4-D shapes are views of the same memory (`burn_ascend::reshape`).
    pub fn apply_fused(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, AttnError> {
        let [t, h, d] = x.dims();
        let dt = x.dtype();
        let table = |c: &Tensor<B, 3>| burn_ascend::reshape(c.clone().cast(dt), [1, t, 1, d]);
        let y = burn_ascend::rotary_embedding(
            burn_ascend::reshape(x, [1, t, h, d])?,
            table(&self.cos)?,
            table(&self.sin)?,
            RotaryMode::Half,
        )?;
        burn_ascend::reshape(y, [t, h, d])
    }
}
