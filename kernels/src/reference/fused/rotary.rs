//! Rotary position embedding (`aclnnRotaryPositionEmbedding`), as the docs state it:
//! - half (mode 0): `x1, x2 = x[..., :D/2], x[..., D/2:]`, `x_rotate = cat(-x2, x1)`;
//! - interleave (mode 1): `x1, x2 = x[..., ::2], x[..., 1::2]`,
//!   `x_rotate = stack(-x2, x1, dim=-1).reshape(x.shape)`;
//!
//! then `y = x · cos + x_rotate · sin`, `cos` / `sin` broadcast over `x`'s leading dimensions.
//! The backward (`aclnnRotaryPositionEmbeddingGrad`), half:
//! `dx = cat(cos1·dy1 + sin2·dy2, cos2·dy2 − sin1·dy1)` (`dy1, dy2`, `cos1, cos2`,
//! `sin1, sin2` the halves), interleave the same on the even / odd elements; `dcos = Σ dy · x`,
//! `dsin = Σ dy · x_rotate`, summed over the broadcast dimensions.
//!
//! Rows are `x`'s leading positions ([`RotaryDims`]); `cos` row `dims.cos_row(r)` serves row `r`.

use burn_ascend_contract::fused::{RotaryDims, RotaryMode};

/// `(x1, x2)` element indices of pair `j < D/2` within a row.
fn pair(mode: RotaryMode, j: usize, d: usize) -> (usize, usize) {
    match mode {
        RotaryMode::Half => (j, j + d / 2),
        RotaryMode::Interleave => (2 * j, 2 * j + 1),
    }
}

/// `y`, shaped as `x`.
pub fn rotary_fwd(
    x: &[f64],
    cos: &[f64],
    sin: &[f64],
    dims: &RotaryDims,
    mode: RotaryMode,
) -> Vec<f64> {
    let d = dims.d;
    let mut y = vec![0.0; x.len()];
    for r in 0..dims.rows() {
        let (xr, c0) = (r * d, dims.cos_row(r) * d);
        for j in 0..d / 2 {
            let (a, b) = pair(mode, j, d);
            let (x1, x2) = (x[xr + a], x[xr + b]);
            // x_rotate at a is −x2, at b is x1.
            y[xr + a] = x1 * cos[c0 + a] + -x2 * sin[c0 + a];
            y[xr + b] = x2 * cos[c0 + b] + x1 * sin[c0 + b];
        }
    }
    y
}

/// `dx`, shaped as `dy`.
pub fn rotary_bwd(
    dy: &[f64],
    cos: &[f64],
    sin: &[f64],
    dims: &RotaryDims,
    mode: RotaryMode,
) -> Vec<f64> {
    let d = dims.d;
    let mut dx = vec![0.0; dy.len()];
    for r in 0..dims.rows() {
        let (xr, c0) = (r * d, dims.cos_row(r) * d);
        for j in 0..d / 2 {
            let (a, b) = pair(mode, j, d);
            let (dy1, dy2) = (dy[xr + a], dy[xr + b]);
            dx[xr + a] = cos[c0 + a] * dy1 + sin[c0 + b] * dy2;
            dx[xr + b] = cos[c0 + b] * dy2 - sin[c0 + a] * dy1;
        }
    }
    dx
}

/// `(dcos, dsin)`, shaped as `cos`: the products summed over the broadcast rows.
pub fn rotary_bwd_tables(
    dy: &[f64],
    x: &[f64],
    dims: &RotaryDims,
    mode: RotaryMode,
) -> (Vec<f64>, Vec<f64>) {
    let d = dims.d;
    let mut dcos = vec![0.0; dims.cos_rows() * d];
    let mut dsin = vec![0.0; dims.cos_rows() * d];
    for r in 0..dims.rows() {
        let (xr, c0) = (r * d, dims.cos_row(r) * d);
        for j in 0..d / 2 {
            let (a, b) = pair(mode, j, d);
            dcos[c0 + a] += dy[xr + a] * x[xr + a];
            dcos[c0 + b] += dy[xr + b] * x[xr + b];
            dsin[c0 + a] += dy[xr + a] * -x[xr + b];
            dsin[c0 + b] += dy[xr + b] * x[xr + a];
        }
    }
    (dcos, dsin)
}
