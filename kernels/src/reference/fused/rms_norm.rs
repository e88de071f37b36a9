//! RMSNorm over the last `cols` elements of each of `rows` rows (`aclnnRmsNorm` with a 1-D
//! `gamma`): `rstd = 1 / sqrt(mean(x²) + epsilon)`, `y = x · rstd · gamma`; and its backward
//! (`aclnnRmsNormGrad`): `dx = rstd · (dy·gamma − x · rstd² · mean(dy·gamma·x))`,
//! `dgamma = Σ_rows dy · x · rstd`.

/// `(y [rows·cols], rstd [rows])`.
pub fn rms_norm_fwd(
    x: &[f64],
    gamma: &[f64],
    rows: usize,
    cols: usize,
    epsilon: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * cols];
    let mut rstd = vec![0.0; rows];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let mean_sq = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
        rstd[r] = 1.0 / (mean_sq + epsilon).sqrt();
        for c in 0..cols {
            y[r * cols + c] = row[c] * rstd[r] * gamma[c];
        }
    }
    (y, rstd)
}

/// `(dx [rows·cols], dgamma [cols])` from the forward's `rstd`.
pub fn rms_norm_bwd(
    dy: &[f64],
    x: &[f64],
    rstd: &[f64],
    gamma: &[f64],
    rows: usize,
    cols: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut dx = vec![0.0; rows * cols];
    let mut dgamma = vec![0.0; cols];
    for r in 0..rows {
        let o = r * cols;
        let s = rstd[r];
        let mean = (0..cols)
            .map(|c| dy[o + c] * gamma[c] * x[o + c])
            .sum::<f64>()
            / cols as f64;
        for c in 0..cols {
            dx[o + c] = s * (dy[o + c] * gamma[c] - x[o + c] * s * s * mean);
            dgamma[c] += dy[o + c] * x[o + c] * s;
        }
    }
    (dx, dgamma)
}
