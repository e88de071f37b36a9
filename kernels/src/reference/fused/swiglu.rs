//! SwiGLU (`aclnnSwiGlu`): `x` split in two halves `A`, `B` along `dimOptional`, the first
//! half is the gate: `out = silu(A) · B = A·σ(A) · B`; and its backward (`aclnnSwiGluGrad`):
//! `dA = dy · B · σ(A)·(1 + A·(1 − σ(A)))`, `dB = dy · A·σ(A)`, concatenated as `x` is.
//!
//! The split dimension is described as `x = [outer, 2·half, inner]` (row-major): element
//! `(o, i, k)` of `A` is `x[o, i, k]`, of `B` `x[o, half + i, k]`.

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// `out [outer·half·inner]`.
pub fn swiglu_fwd(x: &[f64], outer: usize, half: usize, inner: usize) -> Vec<f64> {
    let mut out = vec![0.0; outer * half * inner];
    for o in 0..outer {
        for i in 0..half {
            for k in 0..inner {
                let a = x[(o * 2 * half + i) * inner + k];
                let b = x[(o * 2 * half + half + i) * inner + k];
                out[(o * half + i) * inner + k] = a * sigmoid(a) * b;
            }
        }
    }
    out
}

/// `dx [outer·2·half·inner]` from `dy [outer·half·inner]`.
pub fn swiglu_bwd(dy: &[f64], x: &[f64], outer: usize, half: usize, inner: usize) -> Vec<f64> {
    let mut dx = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..half {
            for k in 0..inner {
                let ia = (o * 2 * half + i) * inner + k;
                let ib = (o * 2 * half + half + i) * inner + k;
                let g = dy[(o * half + i) * inner + k];
                let (a, b) = (x[ia], x[ib]);
                let s = sigmoid(a);
                dx[ia] = g * b * (s + s * (1.0 - s) * a);
                dx[ib] = g * a * s;
            }
        }
    }
    dx
}
