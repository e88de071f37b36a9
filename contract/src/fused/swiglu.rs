//! `aclnnSwiGlu` / `aclnnSwiGluGrad`: `x` split in halves along `dimOptional`; the first half
//! is the gate (`silu(A) · B`).

use crate::ensure;
use crate::error::Result;

/// `x` as `[outer, 2·half, inner]` around the split dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwiGluDims {
    /// The product of the dimensions before the split one.
    pub outer: usize,
    /// Half the split dimension.
    pub half: usize,
    /// The product of the dimensions after it.
    pub inner: usize,
    /// The split dimension, non-negative.
    pub dim: usize,
}

impl SwiGluDims {
    /// The output's shape: `x`'s with the split dimension halved.
    pub fn out_shape(&self, x: &[usize]) -> Vec<usize> {
        let mut s = x.to_vec();
        s[self.dim] = self.half;
        s
    }
}

/// Validates the forward: `x` rank 1–7 (the docs: more than 0, less than 8 dimensions),
/// `dimOptional` in `[-rank, rank)`, the split dimension even.
pub fn validate_fwd(x: &[usize], dim: i64) -> Result<SwiGluDims> {
    ensure!(
        (1..8).contains(&x.len()),
        "x",
        "rank must be 1 to 7, got shape {x:?}"
    );
    let r = x.len() as i64;
    ensure!(
        (-r..r).contains(&dim),
        "dimOptional",
        "must be in [{}, {}] for x {x:?}, got {dim}",
        -r,
        r - 1
    );
    let d = if dim < 0 { dim + r } else { dim } as usize;
    ensure!(
        x[d].is_multiple_of(2) && x[d] > 0,
        "x",
        "dimension {d} (dimOptional {dim}) must be even and non-zero to split in halves, got {}",
        x[d]
    );
    Ok(SwiGluDims {
        outer: x[..d].iter().product(),
        half: x[d] / 2,
        inner: x[d + 1..].iter().product(),
        dim: d,
    })
}

/// Validates the backward: the forward's rules on `x`, `yGrad` the forward output's shape.
pub fn validate_bwd(dy: &[usize], x: &[usize], dim: i64) -> Result<SwiGluDims> {
    let dims = validate_fwd(x, dim)?;
    let want = dims.out_shape(x);
    ensure!(
        dy == want.as_slice(),
        "yGrad",
        "must be {want:?} (x {x:?} halved along dimOptional {dim}), got {dy:?}"
    );
    Ok(dims)
}

/// Validates SwiGLU of the halves held apart (the gate and up projections as two tensors, the
/// concatenation `aclnnSwiGlu` splits never built): one shape, rank 1–7 as the fused call's
/// `x`. Returns the shape every input and the output have.
pub fn validate_pair(gate: &[usize], up: &[usize]) -> Result<Vec<usize>> {
    ensure!(
        (1..8).contains(&gate.len()),
        "gate",
        "rank must be 1 to 7, got shape {gate:?}"
    );
    ensure!(
        up == gate,
        "up",
        "must have the gate's shape {gate:?}, got {up:?}"
    );
    Ok(gate.to_vec())
}

/// Validates the backward of [`validate_pair`]: `yGrad` the output's shape.
pub fn validate_pair_bwd(dy: &[usize], gate: &[usize], up: &[usize]) -> Result<Vec<usize>> {
    let shape = validate_pair(gate, up)?;
    ensure!(
        dy == shape.as_slice(),
        "yGrad",
        "must have the gate's shape {shape:?}, got {dy:?}"
    );
    Ok(shape)
}
