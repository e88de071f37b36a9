//! Learning-rate schedule: linear warmup then cosine decay to a floor.

/// Warmup + cosine decay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupCosine {
    /// Peak learning rate.
    pub peak: f64,
    /// Final learning rate.
    pub floor: f64,
    /// Warmup steps (linear from `peak / warmup`).
    pub warmup: usize,
    /// Total steps.
    pub total: usize,
}

impl WarmupCosine {
    /// Learning rate at `step` (0-based).
    pub fn lr(&self, step: usize) -> f64 {
        if step < self.warmup {
            return self.peak * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1);
        let t = ((step - self.warmup) as f64 / span as f64).min(1.0);
        self.floor + 0.5 * (self.peak - self.floor) * (1.0 + (std::f64::consts::PI * t).cos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warms_up_then_decays_to_the_floor() {
        let s = WarmupCosine {
            peak: 1e-3,
            floor: 1e-4,
            warmup: 10,
            total: 110,
        };
        assert!((s.lr(0) - 1e-4).abs() < 1e-12);
        assert!((s.lr(9) - 1e-3).abs() < 1e-12);
        assert!((s.lr(10) - 1e-3).abs() < 1e-12);
        assert!((s.lr(60) - 5.5e-4).abs() < 1e-9);
        assert!((s.lr(110) - 1e-4).abs() < 1e-12);
        assert!((s.lr(500) - 1e-4).abs() < 1e-12);
    }
}
