//! `aclnnMoeGatingTopKSoftmaxV2` in f64 (see `burn_ascend_contract::moe_gating`): per row of
//! `x [rows, experts]`, the top `k` (descending, ties to the lower expert index, as
//! `torch.topk` and the routing of the example model order them) of the softmax
//! ([`GatingOrder::SoftmaxThenTopK`]) or of the logits followed by a softmax over the `k`
//! ([`GatingOrder::TopKThenSoftmax`]).

use burn_ascend_contract::moe_gating::{GatingDims, GatingOrder};

/// The op's outputs: `yOut` and `expertIdxOut` (`[rows, k]`), and the whole softmax
/// (`[rows, experts]`, for `softmaxResultOutOptional`) under [`GatingOrder::SoftmaxThenTopK`].
#[derive(Debug, Clone, PartialEq)]
pub struct Gating {
    /// The routing weights.
    pub y: Vec<f64>,
    /// The experts, best first.
    pub expert_idx: Vec<i64>,
    /// The softmax over all experts (empty under [`GatingOrder::TopKThenSoftmax`]).
    pub softmax: Vec<f64>,
}

fn softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = row.iter().map(|&v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// The indices of the `k` largest entries of `row`, descending, ties to the lower index.
pub fn top_k(row: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}

/// The router of `x` (`d.rows · d.experts` values).
pub fn moe_gating_top_k_softmax(x: &[f64], d: &GatingDims, order: GatingOrder) -> Gating {
    let mut out = Gating {
        y: Vec::with_capacity(d.rows * d.k),
        expert_idx: Vec::with_capacity(d.rows * d.k),
        softmax: Vec::new(),
    };
    for row in x.chunks_exact(d.experts) {
        match order {
            GatingOrder::SoftmaxThenTopK => {
                let p = softmax(row);
                let idx = top_k(&p, d.k);
                out.y.extend(idx.iter().map(|&j| p[j]));
                out.expert_idx.extend(idx.iter().map(|&j| j as i64));
                out.softmax.extend(p);
            }
            GatingOrder::TopKThenSoftmax => {
                let idx = top_k(row, d.k);
                let sel: Vec<f64> = idx.iter().map(|&j| row[j]).collect();
                out.y.extend(softmax(&sel));
                out.expert_idx.extend(idx.iter().map(|&j| j as i64));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renorm_one_equals_the_renormalised_top_k_of_the_softmax() {
        let x = [0.3, -1.2, 2.0, 0.9, 0.9, -0.4];
        let d = GatingDims {
            rows: 1,
            experts: 6,
            k: 3,
        };
        let a = moe_gating_top_k_softmax(&x, &d, GatingOrder::TopKThenSoftmax);
        let b = moe_gating_top_k_softmax(&x, &d, GatingOrder::SoftmaxThenTopK);
        // The tie between experts 3 and 4 goes to the lower index.
        assert_eq!(a.expert_idx, vec![2, 3, 4]);
        assert_eq!(b.expert_idx, a.expert_idx);
        let s: f64 = b.y.iter().sum();
        for (ya, yb) in a.y.iter().zip(&b.y) {
            assert!((ya - yb / s).abs() < 1e-15);
        }
        assert!((b.softmax.iter().sum::<f64>() - 1.0).abs() < 1e-15);
        assert!(a.softmax.is_empty());
    }
}
