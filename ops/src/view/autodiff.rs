//! `Autodiff<B, C>`: one node whose backward views the gradient under the input's shape
//! through the inner backend's [`ViewBackend::reshape_view`] (no copy on `NdArray` either).
//!
//! Lives in the crate that defines the trait (Rust's orphan rule).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::Autodiff;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, TensorMetadata};

use super::ViewBackend;
use crate::common::autodiff::stateful_node;

#[derive(Debug)]
struct ReshapeBackward;

impl<B: ViewBackend> Backward<B, 1> for ReshapeBackward {
    /// The input's shape.
    type State = Shape;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        if let [Some(node)] = ops.parents {
            grads.register::<B>(node.id, B::reshape_view(dy, ops.state));
        }
    }
}

impl<B: ViewBackend, C: CheckpointStrategy> ViewBackend for Autodiff<B, C> {
    fn reshape_view(t: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        let input_shape = t.primitive.shape();
        match stateful_node::<C, _, _, _>(ReshapeBackward, [&t]) {
            OpsKind::Tracked(prep) => prep.finish(input_shape, B::reshape_view(t.primitive, shape)),
            OpsKind::UnTracked(prep) => prep.finish(B::reshape_view(t.primitive, shape)),
        }
    }
}
