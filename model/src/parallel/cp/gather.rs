//! The all-gather of keys and values as one `Autodiff` graph node whose backward is the
//! reduce-scatter of their gradients: rank `r`'s rows receive the sum over ranks of the
//! gradient every rank's queries sent into them (`dK`, `dV` summed over ranks, in rank
//! order).
//!
//! Every rank's backward must issue its reduce-scatters in the same order: each layer makes
//! exactly one gather (keys and values together), and layer `l + 1`'s gather depends on
//! layer `l`'s, so Burn's tape (nodes run by decreasing depth) reaches them in the same
//! order on every rank.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_ascend::AttnError;

use super::comm::CpComm;

/// A mutation switch proving the context-parallel tests can fail (process-wide; tests only).
#[doc(hidden)]
pub mod test_hooks {
    use super::*;

    pub(super) static LOCAL_KV_GRADIENT: AtomicBool = AtomicBool::new(false);

    /// The all-gather's backward keeps each rank's own block of the gradient instead of
    /// reduce-scattering it: the keys lose the gradient other ranks' queries sent them.
    pub fn keep_local_kv_gradient(on: bool) {
        LOCAL_KV_GRADIENT.store(on, Ordering::SeqCst);
    }
}

/// A communicator handle shared with the graph node.
pub type Comm<B> = Arc<dyn CpComm<B>>;

/// The autodiff backends context parallelism runs on.
pub trait CpBackend: AutodiffBackend {
    /// Every rank's `x [m, c]` stacked in rank order, `[size·m, c]`; the gradient flowing
    /// back is reduce-scattered.
    fn cp_all_gather(
        x: Tensor<Self, 2>,
        comm: &Comm<Self::InnerBackend>,
    ) -> Result<Tensor<Self, 2>, AttnError>;
}

#[derive(Debug)]
struct GatherBackward;

#[derive(Clone)]
struct GatherState<B: Backend> {
    comm: Comm<B>,
}

impl<B: Backend> std::fmt::Debug for GatherState<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GatherState({:?})", self.comm)
    }
}

impl<B: Backend> Backward<B, 1> for GatherBackward {
    type State = GatherState<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [parent] = ops.parents;
        let g = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(grad));
        // Every rank runs this node: a failure here (a peer that left) cannot be returned
        // from a backward step, and continuing would desynchronise the group.
        let comm = &ops.state.comm;
        let d = if test_hooks::LOCAL_KV_GRADIENT.load(Ordering::SeqCst) {
            let m = g.dims()[0] / comm.size();
            g.narrow(0, comm.rank() * m, m)
        } else {
            comm.reduce_scatter_sum(g)
                .unwrap_or_else(|e| panic!("context-parallel reduce-scatter failed: {e}"))
        };
        if let Some(node) = parent {
            grads.register::<B>(node.id, d.into_primitive().tensor());
        }
    }
}

impl<B: Backend, C: CheckpointStrategy> CpBackend for Autodiff<B, C> {
    fn cp_all_gather(x: Tensor<Self, 2>, comm: &Comm<B>) -> Result<Tensor<Self, 2>, AttnError> {
        let x = x.into_primitive().tensor();
        let gathered = comm
            .all_gather(Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(
                x.primitive.clone(),
            )))?
            .into_primitive()
            .tensor();
        let out = match GatherBackward
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(GatherState { comm: comm.clone() }, gathered),
            OpsKind::UnTracked(prep) => prep.finish(gathered),
        };
        Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
    }
}
