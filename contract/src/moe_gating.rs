//! `aclnnMoeGatingTopKSoftmaxV2`: a mixture of experts' router in one launch (ops-transformer
//! `moe/moe_gating_top_k_softmax_v2`, Atlas A2 / A3). With `renorm = 0` the softmax over all
//! `E` experts, then its top `k` (`yOut` the k probabilities, `softmaxResultOutOptional` the
//! whole softmax in FLOAT when `outputSoftmaxResultFlag`); with `renorm = 1` the top `k` of
//! `x`, then a softmax over those `k` (no softmax output). `expertIdxOut` is INT32, `yOut` in
//! `x`'s dtype. The rules are the tiling's (`moe_gating_top_k_softmax_v2_tiling_base.cpp`),
//! which the docs' table loosens in one place: the docs allow `k = 0`, the tiling refuses it.

use crate::ensure;
use crate::error::Result;

/// The most experts a token may go to (the tiling's `MAX_K`).
pub const MAX_K: usize = 1024;

/// The order of softmax and top-k: the op's `renorm` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatingOrder {
    /// `renorm = 0`: softmax over all experts, then the top k of the probabilities
    /// (Qwen3-MoE without `norm_topk_prob`).
    SoftmaxThenTopK,
    /// `renorm = 1`: the top k of the logits, then a softmax over them (gpt-oss's router, and
    /// Qwen3-MoE's with `norm_topk_prob`: the renormalised top k of a softmax is the softmax
    /// of the top-k logits).
    TopKThenSoftmax,
}

impl GatingOrder {
    /// The `renorm` attribute.
    pub fn as_attr(self) -> i64 {
        match self {
            Self::SoftmaxThenTopK => 0,
            Self::TopKThenSoftmax => 1,
        }
    }

    /// From the `renorm` attribute (0 or 1, as the tiling accepts).
    pub fn from_attr(renorm: i64) -> Result<Self> {
        match renorm {
            0 => Ok(Self::SoftmaxThenTopK),
            1 => Ok(Self::TopKThenSoftmax),
            other => Err(crate::error::AttnError::invalid(
                "renorm",
                format!("must be 0 (softmax, then top-k) or 1 (top-k, then softmax), got {other}"),
            )),
        }
    }
}

/// `x` as `[rows, experts]` (a 3-D `x`'s first two dimensions flattened) and the top `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatingDims {
    /// Tokens: the product of `x`'s dimensions before the last.
    pub rows: usize,
    /// Experts: `x`'s last dimension.
    pub experts: usize,
    /// Experts per token.
    pub k: usize,
}

impl GatingDims {
    /// The shape of `yOut` and `expertIdxOut`: `x`'s with the last dimension `k`.
    pub fn out_shape(&self, x: &[usize]) -> Vec<usize> {
        let mut s = x.to_vec();
        *s.last_mut().expect("rank 2 or 3") = self.k;
        s
    }
}

/// Validates a call: `x` of rank 2 or 3 with a non-zero last dimension and every dimension
/// at most `i32::MAX`; `k` in `1 ..= min(E, 1024)`; `finishedOptional`, when given, of `x`'s
/// shape without the last dimension.
pub fn validate(x: &[usize], k: i64, finished: Option<&[usize]>) -> Result<GatingDims> {
    ensure!(
        x.len() == 2 || x.len() == 3,
        "x",
        "rank must be 2 or 3, got shape {x:?}"
    );
    let experts = x[x.len() - 1];
    ensure!(experts > 0, "x", "last dimension (experts) is 0 in {x:?}");
    ensure!(
        x.iter().all(|&d| d <= i32::MAX as usize),
        "x",
        "every dimension must be at most 2147483647, got {x:?}"
    );
    ensure!(
        k > 0 && k as usize <= experts && k as usize <= MAX_K,
        "k",
        "must be in 1 ..= min(experts = {experts}, {MAX_K}), got {k}"
    );
    if let Some(f) = finished {
        ensure!(
            f == &x[..x.len() - 1],
            "finishedOptional",
            "shape must be x's without the last dimension ({:?}), got {f:?}",
            &x[..x.len() - 1]
        );
    }
    Ok(GatingDims {
        rows: x[..x.len() - 1].iter().product(),
        experts,
        k: k as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tilings_rules_are_refused_naming_the_parameter() {
        let param = |r: Result<GatingDims>| r.unwrap_err().param().unwrap();
        assert_eq!(param(validate(&[4], 1, None)), "x");
        assert_eq!(param(validate(&[4, 0], 1, None)), "x");
        assert_eq!(param(validate(&[4, 8], 0, None)), "k");
        assert_eq!(param(validate(&[4, 8], 9, None)), "k");
        assert_eq!(param(validate(&[4, 2048], 1025, None)), "k");
        assert_eq!(
            param(validate(&[2, 3, 8], 2, Some(&[6]))),
            "finishedOptional"
        );
        assert_eq!(
            GatingOrder::from_attr(2).unwrap_err().param(),
            Some("renorm")
        );
        let d = validate(&[2, 3, 8], 2, Some(&[2, 3])).unwrap();
        assert_eq!((d.rows, d.experts, d.k), (6, 8, 2));
        assert_eq!(d.out_shape(&[2, 3, 8]), vec![2, 3, 2]);
    }
}
