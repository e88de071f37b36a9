//! `aclnnRmsNorm` / `aclnnRmsNormGrad` with a 1-D `gamma` (the norm over the last dimension,
//! the form transformers' RMSNorm has).

use crate::ensure;
use crate::error::Result;

/// `x` as `rows × cols`, `cols` the normalised (last) dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmsNormDims {
    /// The product of every dimension but the last.
    pub rows: usize,
    /// The last dimension, `gamma`'s length.
    pub cols: usize,
}

impl RmsNormDims {
    /// `rstd`'s shape as the forward writes it: `x`'s with the last dimension 1.
    pub fn rstd_shape(x: &[usize]) -> Vec<usize> {
        let mut s = x.to_vec();
        if let Some(l) = s.last_mut() {
            *l = 1;
        }
        s
    }
}

/// Validates the forward: `x` rank 1–8, `gamma` `[x.last]`, `epsilon` finite and > 0.
pub fn validate_fwd(x: &[usize], gamma: &[usize], epsilon: f64) -> Result<RmsNormDims> {
    ensure!(
        (1..=8).contains(&x.len()),
        "x",
        "rank must be 1 to 8, got shape {x:?}"
    );
    let cols = x[x.len() - 1];
    ensure!(
        gamma == [cols],
        "gamma",
        "must be [{cols}] (x's last dimension; x {x:?}), got {gamma:?}"
    );
    ensure!(
        epsilon.is_finite() && epsilon > 0.0,
        "epsilon",
        "must be finite and above 0, got {epsilon:e}"
    );
    Ok(RmsNormDims {
        rows: x[..x.len() - 1].iter().product(),
        cols,
    })
}

/// Validates the backward: `dy` as `x` (rank 2–8 per `aclnnRmsNormGrad`), `rstd` with `x`'s
/// leading dimensions (trailing 1 allowed), `gamma` `[x.last]`.
pub fn validate_bwd(
    dy: &[usize],
    x: &[usize],
    rstd: &[usize],
    gamma: &[usize],
) -> Result<RmsNormDims> {
    ensure!(
        (2..=8).contains(&x.len()),
        "x",
        "rank must be 2 to 8 (the backward op takes no other), got shape {x:?}"
    );
    ensure!(dy == x, "dy", "must have x's shape {x:?}, got {dy:?}");
    let lead = &x[..x.len() - 1];
    ensure!(
        rstd == lead || rstd == RmsNormDims::rstd_shape(x).as_slice(),
        "rstd",
        "must be {lead:?} or {:?} (x {x:?}), got {rstd:?}",
        RmsNormDims::rstd_shape(x)
    );
    let cols = x[x.len() - 1];
    ensure!(
        gamma == [cols],
        "gamma",
        "must be [{cols}] (x's last dimension; x {x:?}), got {gamma:?}"
    );
    Ok(RmsNormDims {
        rows: lead.iter().product(),
        cols,
    })
}
