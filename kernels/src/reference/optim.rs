//! AdamW (`aclnnApplyAdamWV2`, torch's `AdamW`), one parameter, in f64, in place: the decoupled
//! decay first, then the bias-corrected moment step.

use burn_ascend_contract::optim::AdamWHyper;

/// One AdamW step at 1-based `step` over `var`, `m`, `v` (updated) from `grad`.
pub fn adamw(
    var: &mut [f64],
    m: &mut [f64],
    v: &mut [f64],
    grad: &[f64],
    step: u64,
    h: &AdamWHyper,
) {
    let (lr, b1, b2) = (h.lr as f64, h.beta1 as f64, h.beta2 as f64);
    let (wd, eps) = (h.weight_decay as f64, h.eps as f64);
    let bc1 = 1.0 - b1.powi(step as i32);
    let bc2 = 1.0 - b2.powi(step as i32);
    for i in 0..var.len() {
        let g = grad[i];
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        let update = (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps);
        var[i] = var[i] - lr * wd * var[i] - lr * update;
    }
}
