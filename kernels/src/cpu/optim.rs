//! AdamW (`aclnnApplyAdamWV2`) in one pass over f32 slices, in place, on all cores (each
//! element's update is independent of the others, so the split changes no bit): what
//! `NdArray` and the simulation run. Same formula as [`crate::reference::optim::adamw`], in f32.

use rayon::prelude::*;

use burn_ascend_contract::optim::AdamWHyper;

/// One AdamW step at 1-based `step` over `var`, `m`, `v` (updated) from `grad`.
pub fn adamw(
    var: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    grad: &[f32],
    step: u64,
    h: &AdamWHyper,
) {
    let (lr, b1, b2, eps) = (h.lr, h.beta1, h.beta2, h.eps);
    let decay = 1.0 - lr * h.weight_decay;
    let step = step.min(i32::MAX as u64) as i32;
    let bc1 = 1.0 - b1.powi(step);
    let bc2 = 1.0 - b2.powi(step);
    let n = var.len();
    let (m, v, grad) = (&mut m[..n], &mut v[..n], &grad[..n]);
    // Chunks of 64 Ki elements: a quarter MiB of each of the four streams per task.
    const CHUNK: usize = 1 << 16;
    var.par_chunks_mut(CHUNK)
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .zip(grad.par_chunks(CHUNK))
        .for_each(|(((var, m), v), grad)| {
            for i in 0..var.len() {
                let g = grad[i];
                let mi = b1 * m[i] + (1.0 - b1) * g;
                let vi = b2 * v[i] + (1.0 - b2) * g * g;
                m[i] = mi;
                v[i] = vi;
                var[i] = var[i] * decay - lr * (mi / bc1) / ((vi / bc2).sqrt() + eps);
            }
        });
}

/// `v ← v · s` in place, on all cores (the clip of a global gradient norm): the same
/// product of each element as a single multiplication, whatever the split.
pub fn scale(v: &mut [f32], s: f32) {
    v.par_chunks_mut(1 << 16)
        .for_each(|c| c.iter_mut().for_each(|x| *x *= s));
}

/// Elements per task of [`squares_sum`]: the chunks, and so the order of the sum, depend on the
/// length only.
const SQUARES_CHUNK: usize = 1 << 16;

/// `Σ v²` of `v`, each chunk of [`SQUARES_CHUNK`] summed in f32 lanes then f64, the chunks'
/// sums added in order: the same value for any thread count.
pub fn squares_sum(v: &[f32]) -> f64 {
    let partial: Vec<f64> = v
        .par_chunks(SQUARES_CHUNK)
        .map(|c| {
            let mut lanes = [0.0f32; 16];
            let mut it = c.chunks_exact(16);
            for block in &mut it {
                for (l, &x) in lanes.iter_mut().zip(block) {
                    *l += x * x;
                }
            }
            let tail: f64 = it
                .remainder()
                .iter()
                .map(|&x| (x as f64) * (x as f64))
                .sum();
            lanes.iter().map(|&l| l as f64).sum::<f64>() + tail
        })
        .collect();
    partial.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;

    #[test]
    fn adamw_cpu_kernel_equals_the_f64_reference_over_three_steps() {
        let h = AdamWHyper {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.99,
            weight_decay: 0.1,
            eps: 1e-6,
        };
        let n = 37;
        let mut var: Vec<f32> = (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
        let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
        let mut rvar: Vec<f64> = var.iter().map(|&x| x as f64).collect();
        let (mut rm, mut rv) = (vec![0.0f64; n], vec![0.0f64; n]);
        for step in 1..=3u64 {
            let grad: Vec<f32> = (0..n)
                .map(|i| (((i as u64 * 13 + step * 5) % 17) as f32 - 8.0) / 3.0)
                .collect();
            let rgrad: Vec<f64> = grad.iter().map(|&x| x as f64).collect();
            adamw(&mut var, &mut m, &mut v, &grad, step, &h);
            reference::optim::adamw(&mut rvar, &mut rm, &mut rv, &rgrad, step, &h);
        }
        for i in 0..n {
            // f32 against f64 over three steps of size ~lr: a few f32 ulps of the values.
            assert!(
                (var[i] as f64 - rvar[i]).abs() <= 1e-6,
                "var[{i}] {} vs {}",
                var[i],
                rvar[i]
            );
            assert!((m[i] as f64 - rm[i]).abs() <= 1e-6, "m[{i}]");
            assert!(
                (v[i] as f64 - rv[i]).abs() <= 1e-5 * rv[i].abs().max(1e-3),
                "v[{i}]"
            );
        }
    }
}
