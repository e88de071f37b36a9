//! Rotary position embedding in Hugging Face Llama's convention ("rotate half": dimension `i`
//! pairs with `i + D/2`), so Llama / Qwen2 checkpoints load unchanged. Positions are explicit,
//! one per token, because packed sequences restart at 0 and cached decoding continues at the
//! cache length.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

/// Cos/sin tables for a list of token positions.
#[derive(Debug, Clone)]
pub struct Rope<B: Backend> {
    cos: Tensor<B, 3>,
    sin: Tensor<B, 3>,
}

impl<B: Backend> Rope<B> {
    /// Tables `[T, 1, D/2]` for `positions` (length T), head size `head_dim`, base `theta`.
    pub fn new(positions: &[usize], head_dim: usize, theta: f64, device: &B::Device) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            for i in 0..half {
                let inv_freq = theta.powf(-((2 * i) as f64) / head_dim as f64);
                let angle = p as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let shape = [positions.len(), 1, half];
        Self {
            cos: Tensor::from_data(TensorData::new(cos, shape), device),
            sin: Tensor::from_data(TensorData::new(sin, shape), device),
        }
    }

    /// Rotates `x [T, H, D]`: `(x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin)`.
    pub fn apply(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [t, h, d] = x.dims();
        let half = d / 2;
        // In `x`'s dtype (mixed precision computes RoPE in the low one, as Hugging Face does).
        let cos = self.cos.clone().cast(x.dtype()).expand([t, h, half]);
        let sin = self.sin.clone().cast(x.dtype()).expand([t, h, half]);
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
