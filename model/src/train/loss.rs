//! The training losses over a mask of the targets: chat data trains only on the assistant's
//! tokens. Here and not in the loop because activation recomputation (`recompute.rs`) computes
//! the same loss at the end of its chain.

use burn::tensor::{Int, Tensor, TensorData};

/// Mean next-token cross-entropy over the targets `mask` keeps (chat data: the assistant's
/// tokens): each kept target weighs `1 / kept`, the others 0, so they add nothing to the loss
/// or its gradient. A batch keeping none has loss 0.
pub fn masked_cross_entropy<B: burn::tensor::backend::Backend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    mask: &[bool],
) -> Tensor<B, 1> {
    let t = targets.dims()[0];
    let weights =
        Tensor::<B, 1>::from_data(TensorData::new(loss_weights(mask), [t]), &logits.device());
    weighted_cross_entropy(logits, targets, weights)
}

/// Each target's weight in [`masked_cross_entropy`]: `1 / kept` where the mask keeps it,
/// else 0 (all 0 when it keeps none).
pub fn loss_weights(mask: &[bool]) -> Vec<f32> {
    let kept = mask.iter().filter(|&&m| m).count().max(1) as f32;
    mask.iter()
        .map(|&m| if m { 1.0 / kept } else { 0.0 })
        .collect()
}

/// `−Σ weights[i] · log_softmax(logits)[i, targets[i]]`: [`masked_cross_entropy`] with the
/// weights as a tensor (a captured step rewrites them in place per batch).
pub fn weighted_cross_entropy<B: burn::tensor::backend::Backend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    weights: Tensor<B, 1>,
) -> Tensor<B, 1> {
    let t = targets.dims()[0];
    let logp = burn::tensor::activation::log_softmax(logits, 1);
    (logp.gather(1, targets.reshape([t, 1])).reshape([t]) * weights)
        .sum()
        .neg()
}
