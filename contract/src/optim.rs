//! `aclnnApplyAdamWV2`: one AdamW step of a parameter, in place (`varRef`, `mRef`, `vRef`),
//! from its gradient `grad` and the 1-based step count `step`. The hyperparameters are the
//! aclnn's float attributes; every error names the aclnn parameter it is about.
//!
//! The update (CANN's docs, torch's `AdamW` with `maximize` and `amsgrad` false):
//! `m = β1·m + (1−β1)·g`, `v = β2·v + (1−β2)·g²`,
//! `var = var − lr·λ·var − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)`.

use crate::ensure;
use crate::error::Result;

/// The float attributes of `aclnnApplyAdamWV2`, in prototype order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWHyper {
    /// `lr`: the learning rate η.
    pub lr: f32,
    /// `beta1`: the first moment's decay.
    pub beta1: f32,
    /// `beta2`: the second moment's decay.
    pub beta2: f32,
    /// `weightDecay`: the decoupled weight decay λ (the parameter shrinks by `lr·λ` per step).
    pub weight_decay: f32,
    /// `eps`: added to the bias-corrected second moment's square root.
    pub eps: f32,
}

/// Validates one call: `varRef` rank 1–8 (the docs' table), `mRef`, `vRef` and `grad` of its
/// shape, `step` at least 1, the attributes finite with `beta1`, `beta2` in `[0, 1)`, `lr`,
/// `weightDecay` non-negative and `eps` positive (a zero `eps` divides by zero where a
/// gradient is zero). Returns the element count.
pub fn validate(
    var: &[usize],
    m: &[usize],
    v: &[usize],
    grad: &[usize],
    step: u64,
    h: &AdamWHyper,
) -> Result<usize> {
    ensure!(
        (1..=8).contains(&var.len()),
        "varRef",
        "rank must be 1 to 8, got shape {var:?}"
    );
    for (name, s) in [("mRef", m), ("vRef", v), ("grad", grad)] {
        ensure!(
            s == var,
            name,
            "must have varRef's shape {var:?}, got {s:?}"
        );
    }
    ensure!(
        step >= 1,
        "step",
        "must be at least 1 (1-based), got {step}"
    );
    for (name, x) in [
        ("lr", h.lr),
        ("beta1", h.beta1),
        ("beta2", h.beta2),
        ("weightDecay", h.weight_decay),
        ("eps", h.eps),
    ] {
        ensure!(x.is_finite(), name, "must be finite, got {x}");
    }
    for (name, b) in [("beta1", h.beta1), ("beta2", h.beta2)] {
        ensure!((0.0..1.0).contains(&b), name, "must be in [0, 1), got {b}");
    }
    ensure!(
        h.lr.is_finite() && h.lr >= 0.0,
        "lr",
        "must be non-negative, got {}",
        h.lr
    );
    ensure!(
        h.weight_decay.is_finite() && h.weight_decay >= 0.0,
        "weightDecay",
        "must be non-negative, got {}",
        h.weight_decay
    );
    ensure!(
        h.eps.is_finite() && h.eps > 0.0,
        "eps",
        "must be positive, got {}",
        h.eps
    );
    Ok(var.iter().product())
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: AdamWHyper = AdamWHyper {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        weight_decay: 0.01,
        eps: 1e-8,
    };

    #[test]
    fn adamw_validation_names_the_aclnn_parameter_of_each_broken_rule() {
        let s = [2usize, 3];
        assert_eq!(validate(&s, &s, &s, &s, 1, &H).unwrap(), 6);
        let param = |r: Result<usize>| r.unwrap_err().param().unwrap();
        assert_eq!(param(validate(&[], &[], &[], &[], 1, &H)), "varRef");
        assert_eq!(param(validate(&s, &[3, 2], &s, &s, 1, &H)), "mRef");
        assert_eq!(param(validate(&s, &s, &[6], &s, 1, &H)), "vRef");
        assert_eq!(param(validate(&s, &s, &s, &[2], 1, &H)), "grad");
        assert_eq!(param(validate(&s, &s, &s, &s, 0, &H)), "step");
        let with = |f: fn(&mut AdamWHyper)| {
            let mut h = H;
            f(&mut h);
            param(validate(&s, &s, &s, &s, 1, &h))
        };
        assert_eq!(with(|h| h.lr = f32::NAN), "lr");
        assert_eq!(with(|h| h.lr = -1.0), "lr");
        assert_eq!(with(|h| h.beta1 = 1.0), "beta1");
        assert_eq!(with(|h| h.beta2 = -0.1), "beta2");
        assert_eq!(with(|h| h.weight_decay = -0.1), "weightDecay");
        assert_eq!(with(|h| h.eps = 0.0), "eps");
    }
}
