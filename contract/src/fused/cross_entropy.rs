//! `aclnnCrossEntropyLoss` / `aclnnCrossEntropyLossGrad` with `reductionOptional = "mean"`,
//! no `weightOptional`, `labelSmoothing` 0 and no z-loss: the form a language model's
//! next-token loss takes.

use crate::ensure;
use crate::error::Result;

/// `input` `[n, c]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrossEntropyDims {
    /// Rows (tokens).
    pub n: usize,
    /// Classes (vocabulary).
    pub c: usize,
}

/// Validates the forward's shapes and `ignoreIndex` (must be below `c`; negative means none
/// can match a valid class).
pub fn validate_fwd(
    input: &[usize],
    target: &[usize],
    ignore_index: i64,
) -> Result<CrossEntropyDims> {
    ensure!(
        input.len() == 2 && input[1] > 0,
        "input",
        "must be [N, C] with C > 0, got {input:?}"
    );
    let (n, c) = (input[0], input[1]);
    ensure!(
        target == [n],
        "target",
        "must be [{n}] (input {input:?}), got {target:?}"
    );
    ensure!(
        ignore_index < c as i64,
        "ignoreIndex",
        "must be below C = {c}, got {ignore_index}"
    );
    Ok(CrossEntropyDims { n, c })
}

/// Validates the targets' values: each in `[0, C)` or `ignoreIndex`.
pub fn validate_targets(target: &[i64], c: usize, ignore_index: i64) -> Result<()> {
    if let Some((i, t)) = target
        .iter()
        .enumerate()
        .find(|(_, &t)| t != ignore_index && !(0..c as i64).contains(&t))
    {
        return Err(crate::error::AttnError::invalid(
            "target",
            format!("target[{i}] = {t} is outside [0, {c}) and not ignoreIndex {ignore_index}"),
        ));
    }
    Ok(())
}

/// Validates the backward: `gradLoss` one element (`[]` or `[1]`), `logProb` `[n, c]`,
/// `target` `[n]`.
pub fn validate_bwd(
    grad_loss: &[usize],
    log_prob: &[usize],
    target: &[usize],
    ignore_index: i64,
) -> Result<CrossEntropyDims> {
    ensure!(
        grad_loss.iter().product::<usize>() == 1 && grad_loss.len() <= 1,
        "gradLoss",
        "must be a scalar ([] or [1]) for the mean reduction, got {grad_loss:?}"
    );
    ensure!(
        log_prob.len() == 2 && log_prob[1] > 0,
        "logProb",
        "must be [N, C] with C > 0, got {log_prob:?}"
    );
    validate_fwd(log_prob, target, ignore_index)
}
