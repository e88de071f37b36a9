//! `Autodiff<B, C>`: each fused op is one graph node whose backward calls the inner backend's
//! fused backward (`rms_norm_bwd`, `rotary_embedding_bwd`, `swiglu_bwd` / `swiglu_pair_bwd`,
//! `cross_entropy_bwd`)
//! once. The forward's
//! inputs and side outputs (`rstd`, `logProb`) are kept in the node's state; the side outputs
//! are constants to the graph.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::Autodiff;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::{FloatTensor, IntTensor};

use super::{
    validate, CrossEntropyOutputs, FusedBackend, RmsNormGrads, RmsNormOutputs, RotaryMode,
};
use crate::common::autodiff::stateful_node;
use crate::error::{AttnError, Result};

#[derive(Debug)]
struct RmsNormBackward;

#[derive(Debug, Clone)]
struct RmsNormState<B: FusedBackend> {
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    rstd: FloatTensor<B>,
}

impl<B: FusedBackend> Backward<B, 2> for RmsNormBackward {
    type State = RmsNormState<B>;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let s = ops.state;
        // The forward validated the same shapes, so a failure here is a backend fault.
        let RmsNormGrads { dx, dgamma } = B::rms_norm_bwd(dy, s.x, s.rstd, s.gamma)
            .unwrap_or_else(|e| panic!("rms_norm backward failed: {e}"));
        let [px, pg] = ops.parents;
        if let Some(node) = px {
            grads.register::<B>(node.id, dx);
        }
        if let Some(node) = pg {
            grads.register::<B>(node.id, dgamma);
        }
    }
}

#[derive(Debug)]
struct RotaryBackward;

impl<B: FusedBackend> Backward<B, 1> for RotaryBackward {
    type State = (FloatTensor<B>, FloatTensor<B>, RotaryMode);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let (cos, sin, mode) = ops.state;
        // The forward validated the backward's shapes, so a failure here is a backend fault.
        let dx = B::rotary_embedding_bwd(dy, cos, sin, mode)
            .unwrap_or_else(|e| panic!("rotary_embedding backward failed: {e}"));
        if let [Some(node)] = ops.parents {
            grads.register::<B>(node.id, dx);
        }
    }
}

#[derive(Debug)]
struct SwiGluBackward;

impl<B: FusedBackend> Backward<B, 1> for SwiGluBackward {
    type State = (FloatTensor<B>, i64);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let (x, dim) = ops.state;
        let dx =
            B::swiglu_bwd(dy, x, dim).unwrap_or_else(|e| panic!("swiglu backward failed: {e}"));
        if let [Some(node)] = ops.parents {
            grads.register::<B>(node.id, dx);
        }
    }
}

#[derive(Debug)]
struct SwiGluPairBackward;

impl<B: FusedBackend> Backward<B, 2> for SwiGluPairBackward {
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let (gate, up) = ops.state;
        // The forward validated the same shapes, so a failure here is a backend fault.
        let (dgate, dup) = B::swiglu_pair_bwd(dy, gate, up)
            .unwrap_or_else(|e| panic!("swiglu backward failed: {e}"));
        let [pg, pu] = ops.parents;
        if let Some(node) = pg {
            grads.register::<B>(node.id, dgate);
        }
        if let Some(node) = pu {
            grads.register::<B>(node.id, dup);
        }
    }
}

#[derive(Debug)]
struct CrossEntropyBackward;

#[derive(Debug, Clone)]
struct CrossEntropyState<B: FusedBackend> {
    log_prob: FloatTensor<B>,
    target: IntTensor<B>,
    ignore_index: i64,
}

impl<B: FusedBackend> Backward<B, 1> for CrossEntropyBackward {
    type State = CrossEntropyState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let g = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let dx = B::cross_entropy_bwd(g, s.log_prob, s.target, s.ignore_index)
            .unwrap_or_else(|e| panic!("cross_entropy backward failed: {e}"));
        if let [Some(node)] = ops.parents {
            grads.register::<B>(node.id, dx);
        }
    }
}

impl<B: FusedBackend, C: CheckpointStrategy> FusedBackend for Autodiff<B, C> {
    fn rms_norm_fwd(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
    ) -> Result<RmsNormOutputs<Self>> {
        let constant = <Self as AutodiffBackend>::from_inner;
        let prep = stateful_node::<C, _, _, _>(RmsNormBackward, [&x, &gamma]);
        let out = B::rms_norm_fwd(x.primitive.clone(), gamma.primitive.clone(), epsilon)?;
        Ok(match prep {
            OpsKind::Tracked(prep) => {
                let state = RmsNormState {
                    x: x.primitive,
                    gamma: gamma.primitive,
                    rstd: out.rstd.clone(),
                };
                RmsNormOutputs {
                    y: prep.finish(state, out.y),
                    rstd: constant(out.rstd),
                }
            }
            OpsKind::UnTracked(prep) => RmsNormOutputs {
                y: prep.finish(out.y),
                rstd: constant(out.rstd),
            },
        })
    }

    fn rms_norm_bwd(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> Result<RmsNormGrads<Self>> {
        // The backward as a function of tensors (not differentiated again).
        let constant = <Self as AutodiffBackend>::from_inner;
        let g = B::rms_norm_bwd(dy.primitive, x.primitive, rstd.primitive, gamma.primitive)?;
        Ok(RmsNormGrads {
            dx: constant(g.dx),
            dgamma: constant(g.dgamma),
        })
    }

    fn rotary_embedding_fwd(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        mode: RotaryMode,
    ) -> Result<FloatTensor<Self>> {
        // The backward computes dx only (aclnnRotaryPositionEmbeddingGrad without xOptional):
        // tables that want a gradient would silently get none.
        for (t, name) in [(&cos, "cos"), (&sin, "sin")] {
            if !t.node.requirement.is_none() {
                return Err(AttnError::Unsupported(format!(
                    "rotary_embedding: a gradient of {name} (dcosOut / dsinOut); the tables must be constants"
                )));
            }
        }
        let prep = stateful_node::<C, _, _, _>(RotaryBackward, [&x]);
        // The backward's own rules (dy takes x's shape), checked now rather than at backward.
        validate::rotary_bwd(&x.primitive, &cos.primitive, &sin.primitive, mode)?;
        let out = B::rotary_embedding_fwd(
            x.primitive,
            cos.primitive.clone(),
            sin.primitive.clone(),
            mode,
        )?;
        Ok(match prep {
            OpsKind::Tracked(prep) => prep.finish((cos.primitive, sin.primitive, mode), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        })
    }

    fn rotary_embedding_bwd(
        dy: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        mode: RotaryMode,
    ) -> Result<FloatTensor<Self>> {
        let dx = B::rotary_embedding_bwd(dy.primitive, cos.primitive, sin.primitive, mode)?;
        Ok(<Self as AutodiffBackend>::from_inner(dx))
    }

    fn swiglu_fwd(x: FloatTensor<Self>, dim: i64) -> Result<FloatTensor<Self>> {
        let prep = stateful_node::<C, _, _, _>(SwiGluBackward, [&x]);
        let out = B::swiglu_fwd(x.primitive.clone(), dim)?;
        Ok(match prep {
            OpsKind::Tracked(prep) => prep.finish((x.primitive, dim), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        })
    }

    fn swiglu_bwd(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        dim: i64,
    ) -> Result<FloatTensor<Self>> {
        let dx = B::swiglu_bwd(dy.primitive, x.primitive, dim)?;
        Ok(<Self as AutodiffBackend>::from_inner(dx))
    }

    fn swiglu_pair_fwd(
        gate: FloatTensor<Self>,
        up: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>> {
        let prep = stateful_node::<C, _, _, _>(SwiGluPairBackward, [&gate, &up]);
        let out = B::swiglu_pair_fwd(gate.primitive.clone(), up.primitive.clone())?;
        Ok(match prep {
            OpsKind::Tracked(prep) => prep.finish((gate.primitive, up.primitive), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        })
    }

    fn swiglu_pair_bwd(
        dy: FloatTensor<Self>,
        gate: FloatTensor<Self>,
        up: FloatTensor<Self>,
    ) -> Result<(FloatTensor<Self>, FloatTensor<Self>)> {
        let (dgate, dup) = B::swiglu_pair_bwd(dy.primitive, gate.primitive, up.primitive)?;
        let constant = <Self as AutodiffBackend>::from_inner;
        Ok((constant(dgate), constant(dup)))
    }

    fn cross_entropy_fwd(
        input: FloatTensor<Self>,
        target: IntTensor<Self>,
        ignore_index: i64,
    ) -> Result<CrossEntropyOutputs<Self>> {
        let constant = <Self as AutodiffBackend>::from_inner;
        let prep = stateful_node::<C, _, _, _>(CrossEntropyBackward, [&input]);
        let out = B::cross_entropy_fwd(input.primitive, target.clone(), ignore_index)?;
        Ok(match prep {
            OpsKind::Tracked(prep) => {
                let state = CrossEntropyState {
                    log_prob: out.log_prob.clone(),
                    target,
                    ignore_index,
                };
                CrossEntropyOutputs {
                    loss: prep.finish(state, out.loss),
                    log_prob: constant(out.log_prob),
                }
            }
            OpsKind::UnTracked(prep) => CrossEntropyOutputs {
                loss: prep.finish(out.loss),
                log_prob: constant(out.log_prob),
            },
        })
    }

    fn cross_entropy_bwd(
        grad_loss: FloatTensor<Self>,
        log_prob: FloatTensor<Self>,
        target: IntTensor<Self>,
        ignore_index: i64,
    ) -> Result<FloatTensor<Self>> {
        let dx = B::cross_entropy_bwd(
            grad_loss.primitive,
            log_prob.primitive,
            target,
            ignore_index,
        )?;
        Ok(<Self as AutodiffBackend>::from_inner(dx))
    }
}
