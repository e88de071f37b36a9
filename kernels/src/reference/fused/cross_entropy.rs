//! Softmax cross-entropy with mean reduction over class indices (`aclnnCrossEntropyLoss` with
//! `reductionOptional = "mean"`, no weight, no label smoothing, no z-loss):
//! `logProb = x − logsumexp(x)` per row, `loss = −Σ logProb[n, t_n] / |{n : t_n ≠ ignoreIndex}|`;
//! and its gradient from `logProb` in one pass (`aclnnCrossEntropyLossGrad`):
//! `dx[n, c] = gradLoss / count · (exp(logProb[n, c]) − [c = t_n])`, zero on ignored rows.
//! With every row ignored the mean is 0/0 = NaN, as torch's.

/// `(loss, logProb [n·c])`.
pub fn cross_entropy_fwd(
    x: &[f64],
    target: &[i64],
    n: usize,
    c: usize,
    ignore_index: i64,
) -> (f64, Vec<f64>) {
    let mut log_prob = vec![0.0; n * c];
    let (mut sum, mut count) = (0.0, 0usize);
    for r in 0..n {
        let row = &x[r * c..(r + 1) * c];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        for j in 0..c {
            log_prob[r * c + j] = row[j] - lse;
        }
        if target[r] != ignore_index {
            sum -= log_prob[r * c + target[r] as usize];
            count += 1;
        }
    }
    (sum / count as f64, log_prob)
}

/// `dx [n·c]`.
pub fn cross_entropy_bwd(
    grad_loss: f64,
    log_prob: &[f64],
    target: &[i64],
    n: usize,
    c: usize,
    ignore_index: i64,
) -> Vec<f64> {
    let count = target.iter().filter(|&&t| t != ignore_index).count() as f64;
    let mut dx = vec![0.0; n * c];
    for r in 0..n {
        if target[r] == ignore_index {
            continue;
        }
        for j in 0..c {
            let onehot = if j as i64 == target[r] { 1.0 } else { 0.0 };
            dx[r * c + j] = grad_loss / count * (log_prob[r * c + j].exp() - onehot);
        }
    }
    dx
}
