//! The `Autodiff` node every op with a fused backward records: one node over the op's parent
//! tensors, compute-bound (a checkpointing strategy keeps its output rather than running the
//! fused forward again) and holding a state for the backward.

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::ops::{Backward, OpsKind};
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

/// `op`'s node over `parents` (a parent may stand twice: an absent optional input is passed as
/// another parent that never receives its gradient); tracked when a parent requires a gradient.
/// The checkpointing strategy `C` is named by the caller (`stateful_node::<C, _, _, _>`): the
/// parents' type does not carry it.
pub fn stateful_node<C, B, Op, const N: usize>(
    op: Op,
    parents: [&FloatTensor<Autodiff<B, C>>; N],
) -> OpsKind<Op, B, Op::State, C, N>
where
    B: Backend,
    C: CheckpointStrategy,
    Op: Backward<B, N>,
    Op::State: Clone + Send + std::fmt::Debug + 'static,
{
    op.prepare::<C>(parents.map(|t| t.node.clone()))
        .compute_bound()
        .stateful()
}
