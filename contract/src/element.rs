//! Element types the kernels read and write (f32, f16, bf16 on the device; f64 for gradient checks).

/// A floating-point element converted to f64 for accumulation and back on output.
pub trait Element: Copy + Send + Sync + 'static {
    /// Widen to f64.
    fn to_f64(self) -> f64;
    /// Round from f64 (round-to-nearest-even for the narrow types).
    fn from_f64(x: f64) -> Self;
}

impl Element for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

impl Element for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
}

impl Element for half::f16 {
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn from_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
}

impl Element for half::bf16 {
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
}

/// int8 (KV caches, quantised outputs): rounds half to even and saturates to [−128, 127]
/// (`as` saturates; NaN becomes 0).
impl Element for i8 {
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x.round_ties_even() as i8
    }
}
