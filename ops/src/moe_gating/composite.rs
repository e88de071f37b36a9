//! The composite router: the top-k chosen on the host (the order `torch.topk` gives:
//! descending, ties to the lower index), the weights gathered and soft-maxed by the backend's
//! own ops, so they stay differentiable. Validation runs first.

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{activation::softmax, Int, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use super::{validate, GatingOrder};
use crate::error::Result;

/// Per row of `scores` (`[T, e]`, row-major), the indices of its `k` largest entries,
/// descending, ties to the lower index: `[T·k]`.
pub fn top_k_indices(scores: &[f32], e: usize, k: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(scores.len() / e.max(1) * k);
    let mut order: Vec<usize> = Vec::with_capacity(e);
    for row in scores.chunks_exact(e.max(1)) {
        order.clear();
        order.extend(0..e);
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        out.extend(order[..k].iter().map(|&j| j as i64));
    }
    out
}

/// [`super::MoeGatingBackend::moe_gating_top_k_softmax`] from Burn primitives.
pub fn moe_gating_top_k_softmax<B: Backend>(
    x: FloatTensor<B>,
    k: usize,
    order: GatingOrder,
) -> Result<(FloatTensor<B>, IntTensor<B>)> {
    let shape = x.shape().to_vec();
    let d = validate(&shape, k as i64, None)?;
    if shape.len() != 2 {
        return Err(crate::error::AttnError::invalid(
            "x",
            format!("must be the router logits [T, E] (rank 2) here, got {shape:?}"),
        ));
    }
    let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
    let device = x.device();
    let scores = match order {
        GatingOrder::SoftmaxThenTopK => softmax(x.clone(), 1),
        GatingOrder::TopKThenSoftmax => x.clone(),
    };
    let host = scores
        .clone()
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("f32 after convert");
    let idx = Tensor::<B, 2, Int>::from_data(
        TensorData::new(top_k_indices(&host, d.experts, d.k), [d.rows, d.k]),
        &device,
    );
    let y = match order {
        GatingOrder::SoftmaxThenTopK => scores.gather(1, idx.clone()),
        GatingOrder::TopKThenSoftmax => softmax(x.gather(1, idx.clone()), 1),
    };
    Ok((y.into_primitive().tensor(), idx.into_primitive()))
}
