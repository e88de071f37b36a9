//! `Autodiff<B, C>`: the linear op is one graph node whose backward runs the inner backend's
//! `linear_bwd_x` / `linear_bwd_weight` — and only those a parent needs: a frozen weight (the
//! base of a LoRA layer) gets no weight gradient, an input that needs none (the first layer's
//! embedding when the embedding is frozen) no `dx`. The bias's gradient is the column sum of
//! `dy`.
//!
//! Lives in the crate that defines the trait (Rust's orphan rule).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::Autodiff;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use super::{LinearBackend, WeightLayout};
use crate::common::autodiff::stateful_node;
use crate::error::Result;

#[derive(Debug)]
struct LinearBackward;

/// Saved for the backward: what its gradients need of the inputs (inner primitives) — `x` only
/// when the weight wants a gradient, the weight only when `x` does, so a frozen LoRA base
/// keeps no activation alive — and the weight's layout.
#[derive(Debug, Clone)]
struct LinearState<B: LinearBackend> {
    x: Option<FloatTensor<B>>,
    weight: Option<FloatTensor<B>>,
    layout: WeightLayout,
    /// Whether the third parent is a bias (else it is `x` again, which gets no bias gradient).
    has_bias: bool,
}

impl<B: LinearBackend> Backward<B, 3> for LinearBackward {
    type State = LinearState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let dy = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let [px, pw, pb] = ops.parents;
        // The forward validated the same shapes, so a failure here is a backend fault.
        let fault = |e| panic!("linear backward failed: {e}");
        if let (Some(node), true) = (pb, s.has_bias) {
            let n = dy.shape().dims::<2>()[1];
            let db = B::float_reshape(B::float_sum_dim(dy.clone(), 0), [n].into());
            grads.register::<B>(node.id, db);
        }
        if let (Some(node), Some(x)) = (pw, s.x) {
            let dw = B::linear_bwd_weight(x, dy.clone(), s.layout).unwrap_or_else(fault);
            grads.register::<B>(node.id, dw);
        }
        if let (Some(node), Some(weight)) = (px, s.weight) {
            let dx = B::linear_bwd_x(dy, weight, s.layout).unwrap_or_else(fault);
            grads.register::<B>(node.id, dx);
        }
    }
}

impl<B: LinearBackend, C: CheckpointStrategy> LinearBackend for Autodiff<B, C> {
    fn linear_fwd(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        layout: WeightLayout,
    ) -> Result<FloatTensor<Self>> {
        // Without a bias the third parent is x again and never receives a gradient.
        let prep =
            stateful_node::<C, _, _, _>(LinearBackward, [&x, &weight, bias.as_ref().unwrap_or(&x)]);
        let (x_needs, w_needs) = (
            !x.node.requirement.is_none(),
            !weight.node.requirement.is_none(),
        );
        let (xp, wp) = (x.primitive, weight.primitive);
        let has_bias = bias.is_some();
        let out = B::linear_fwd(xp.clone(), wp.clone(), bias.map(|b| b.primitive), layout)?;
        Ok(match prep {
            OpsKind::Tracked(prep) => prep.finish(
                LinearState {
                    x: w_needs.then_some(xp),
                    weight: x_needs.then_some(wp),
                    layout,
                    has_bias,
                },
                out,
            ),
            OpsKind::UnTracked(prep) => prep.finish(out),
        })
    }
}
