//! `Autodiff<B, C>`: the varlen forward is one graph node whose backward calls the inner
//! backend's fused `varlen_bwd` (dq, dk, dv, dsink and, for a pse given as a tensor, dpse at
//! once).
//!
//! This impl lives in the crate that defines [`VarlenBackend`] because Rust's orphan rule
//! allows `impl VarlenBackend for Autodiff<B, C>` nowhere else.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{
    VarlenBackend, VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs, VarlenSpec,
};
use crate::common::autodiff::stateful_node;
use crate::error::Result;

#[cfg(any(test, feature = "test-hooks"))]
pub mod test_hooks {
    //! Deliberate corruption of the fused backward, so tests can prove they would catch it.
    use std::cell::Cell;
    thread_local! {
        /// When set, the backward doubles dsink.
        pub static CORRUPT_DSINK: Cell<bool> = const { Cell::new(false) };
    }
}

#[derive(Debug)]
struct VarlenBackward;

/// Saved for the backward: checkpointed q, k, v, (sink), (pse), the outputs and the spec.
#[derive(Debug, Clone)]
struct VarlenState<B: VarlenBackend> {
    inputs: VarlenInputs<NodeId>,
    outputs: VarlenOutputs<FloatTensor<B>>,
    spec: VarlenSpec,
}

impl<B: VarlenBackend> Backward<B, 5> for VarlenBackward {
    type State = VarlenState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 5>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let dy = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let pse_tracked = s.inputs.pse.is_some();
        let inputs = VarlenGradInputs {
            inputs: s.inputs.map(|id| checkpointer.retrieve_node_output(id)),
            dy,
            attention_in: s.outputs.attention_out,
            softmax_max: s.outputs.softmax_max,
            softmax_sum: s.outputs.softmax_sum,
        };
        // The forward validated the same shapes, so a failure here is a backend fault.
        let g = B::varlen_bwd(inputs, &s.spec)
            .unwrap_or_else(|e| panic!("varlen backward failed: {e}"));
        #[cfg(any(test, feature = "test-hooks"))]
        let g = VarlenGrads {
            dsink: g
                .dsink
                .map(|d| match test_hooks::CORRUPT_DSINK.with(|c| c.get()) {
                    true => B::float_mul_scalar(d, 2.0.into()),
                    false => d,
                }),
            ..g
        };
        let [pq, pk, pv, ps, pp] = ops.parents;
        // Only a flat pse tensor has a dpse (the compressed pse and ALiBi slopes have none).
        let dpse = g.dpse.filter(|_| pse_tracked);
        for (parent, grad) in [
            (pq, Some(g.dq)),
            (pk, Some(g.dk)),
            (pv, Some(g.dv)),
            (ps, g.dsink),
            (pp, dpse),
        ] {
            if let (Some(node), Some(grad)) = (parent, grad) {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// The varlen forward as one graph node with parents q, k, v, sink and pse (an absent sink or
/// pse is an untracked placeholder parent that never receives a gradient).
fn varlen_node<B: VarlenBackend, C: CheckpointStrategy>(
    inputs: VarlenInputs<FloatTensor<Autodiff<B, C>>>,
    spec: &VarlenSpec,
) -> Result<VarlenOutputs<FloatTensor<Autodiff<B, C>>>> {
    // An absent sink or pse is the query's node again, an untracked parent for this op.
    let parents = [
        &inputs.query,
        &inputs.key,
        &inputs.value,
        inputs.sink.as_ref().unwrap_or(&inputs.query),
        inputs.pse.as_ref().unwrap_or(&inputs.query),
    ];
    let prep = stateful_node::<C, _, _, _>(VarlenBackward, parents);
    let inner = |inputs: VarlenInputs<FloatTensor<Autodiff<B, C>>>| {
        B::varlen_fwd(inputs.map(|t| t.primitive), spec)
    };
    let constant = <Autodiff<B, C> as AutodiffBackend>::from_inner;
    match prep {
        OpsKind::Tracked(mut prep) => {
            let ids = inputs.as_ref().map(|t| prep.checkpoint(t));
            let out = inner(inputs)?;
            let state = VarlenState {
                inputs: ids,
                outputs: out.clone(),
                spec: spec.clone(),
            };
            Ok(VarlenOutputs {
                attention_out: prep.finish(state, out.attention_out),
                // The statistics are constants: gradients flow through attentionOut only.
                softmax_max: constant(out.softmax_max),
                softmax_sum: constant(out.softmax_sum),
            })
        }
        OpsKind::UnTracked(prep) => {
            let out = inner(inputs)?;
            Ok(VarlenOutputs {
                attention_out: prep.finish(out.attention_out),
                softmax_max: constant(out.softmax_max),
                softmax_sum: constant(out.softmax_sum),
            })
        }
    }
}

impl<B: VarlenBackend, C: CheckpointStrategy> VarlenBackend for Autodiff<B, C> {
    /// A pse tensor becomes the node's fifth parent and receives `dpse`.
    fn varlen_fwd(
        inputs: VarlenInputs<FloatTensor<Self>>,
        spec: &VarlenSpec,
    ) -> Result<VarlenOutputs<FloatTensor<Self>>> {
        varlen_node::<B, C>(inputs, spec)
    }

    /// No double backward: runs on the inner backend and returns constants.
    fn varlen_bwd(
        inputs: VarlenGradInputs<FloatTensor<Self>>,
        spec: &VarlenSpec,
    ) -> Result<VarlenGrads<FloatTensor<Self>>> {
        let i = <Self as AutodiffBackend>::inner;
        let c = <Self as AutodiffBackend>::from_inner;
        let g = B::varlen_bwd(inputs.map(i), spec)?;
        Ok(g.map(c))
    }
}
