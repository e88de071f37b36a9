//! `Autodiff<B, C>`: the router is one graph node whose forward is the inner backend's (on
//! `Ascend`, `aclnnMoeGatingTopKSoftmaxV2`) and whose backward is composed of the inner
//! backend's ops, as CANN has no backward for this op (`aclnnMoeGatingTopKBackward` is the
//! sigmoid router's). With `y` the weights and `dy` their gradient (`[T, k]`):
//!
//! - top-k then softmax: the softmax's backward over the k, `y · (dy − Σ_k dy · y)`, scattered
//!   to the selected experts (zero elsewhere), as torch's `gather` / `topk` backward sends it;
//! - softmax then top-k: `dy` scattered to the selected experts (`g`, zero elsewhere), then the
//!   softmax's backward over all experts, `p · (g − Σ_E g · p)` with `p = softmax(x)`
//!   recomputed from the saved `x`.
//!
//! Lives in the crate that defines the trait (Rust's orphan rule).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::Autodiff;
use burn::tensor::activation::softmax;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorPrimitive};

use super::{GatingOrder, MoeGatingBackend};
use crate::common::autodiff::stateful_node;
use crate::error::Result;

#[derive(Debug)]
struct MoeGatingBackward;

/// Saved for the backward: the logits (softmax then top-k), the weights (top-k then
/// softmax), the experts and the order.
#[derive(Debug, Clone)]
struct MoeGatingState<B: MoeGatingBackend> {
    x: FloatTensor<B>,
    y: FloatTensor<B>,
    idx: IntTensor<B>,
    order: GatingOrder,
}

fn float<B: MoeGatingBackend>(t: FloatTensor<B>) -> Tensor<B, 2> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The gradient of the logits `x [T, E]` given the weights' gradient `dy [T, k]`, on the
/// inner backend's ops (see the module docs).
pub fn moe_gating_grad<B: MoeGatingBackend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    y: FloatTensor<B>,
    idx: IntTensor<B>,
    order: GatingOrder,
) -> FloatTensor<B> {
    let (dy, x, y) = (float::<B>(dy), float::<B>(x), float::<B>(y));
    let idx = Tensor::<B, 2, Int>::from_primitive(idx);
    let zeros = x.zeros_like();
    let dx = match order {
        GatingOrder::TopKThenSoftmax => {
            let ds = y.clone() * (dy.clone() - (dy * y).sum_dim(1));
            zeros.scatter(1, idx, ds, IndexingUpdateOp::Add)
        }
        GatingOrder::SoftmaxThenTopK => {
            let p = softmax(x, 1);
            let g = zeros.scatter(1, idx, dy.clone(), IndexingUpdateOp::Add);
            let dot = (dy * y).sum_dim(1);
            p * (g - dot)
        }
    };
    dx.into_primitive().tensor()
}

impl<B: MoeGatingBackend> Backward<B, 1> for MoeGatingBackward {
    type State = MoeGatingState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let dy = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let dx = moe_gating_grad::<B>(dy, s.x, s.y, s.idx, s.order);
        let [px] = ops.parents;
        if let Some(node) = px {
            grads.register::<B>(node.id, dx);
        }
    }
}

impl<B: MoeGatingBackend, C: CheckpointStrategy> MoeGatingBackend for Autodiff<B, C> {
    fn moe_gating_top_k_softmax(
        x: FloatTensor<Self>,
        k: usize,
        order: GatingOrder,
    ) -> Result<(FloatTensor<Self>, IntTensor<Self>)> {
        let prep = stateful_node::<C, _, _, _>(MoeGatingBackward, [&x]);
        let xp = x.primitive;
        let (y, idx) = B::moe_gating_top_k_softmax(xp.clone(), k, order)?;
        let out = match prep {
            OpsKind::Tracked(prep) => prep.finish(
                MoeGatingState {
                    x: xp,
                    y: y.clone(),
                    idx: idx.clone(),
                    order,
                },
                y,
            ),
            OpsKind::UnTracked(prep) => prep.finish(y),
        };
        Ok((out, idx))
    }
}
