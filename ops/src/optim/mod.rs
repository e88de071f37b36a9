//! Optimizer steps as a Burn backend extension, part of the fused ops of a training step: AdamW
//! as one call per parameter (`aclnnApplyAdamWV2` on `Ascend`) instead of the dozen elementwise launches Burn's `AdamW`
//! composes. The default body is the composite (Burn primitives, any backend); `NdArray` runs
//! the one-pass CPU kernel ([`burn_ascend_kernels::cpu::optim`]); `Autodiff<B, C>` hands the
//! call to `B` on the inner tensors (an optimizer step is not differentiated, so no node is
//! recorded); `Ascend` launches the aclnn.
//!
//! [`crate::TrainingBackend`] bundles this trait with the attention ops, the fused ops and the
//! grouped matmul for the example model's training.

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;

use crate::error::Result;

pub mod composite;
pub mod ndarray;

pub use burn_ascend_contract::optim::{validate as validate_adamw, AdamWHyper};

/// A parameter with its AdamW moments: `varRef`, `mRef`, `vRef` of `aclnnApplyAdamWV2`, all
/// of one shape and dtype.
#[derive(Debug, Clone)]
pub struct AdamWTensors<B: Backend> {
    /// The parameter (`varRef`).
    pub var: FloatTensor<B>,
    /// The first moment (`mRef`).
    pub m: FloatTensor<B>,
    /// The second moment (`vRef`).
    pub v: FloatTensor<B>,
}

/// Optimizer steps as a Burn backend extension (see the [module docs](self)).
pub trait OptimBackend: Backend {
    /// `aclnnApplyAdamWV2` (`amsgrad` and `maximize` false): one AdamW step at the 1-based
    /// `step` from `grad`; returns the updated parameter and moments (a backend may update
    /// the given tensors in place when it owns them alone).
    fn adamw_step(
        state: AdamWTensors<Self>,
        grad: FloatTensor<Self>,
        step: u64,
        hyper: &AdamWHyper,
    ) -> Result<AdamWTensors<Self>> {
        composite::adamw_step::<Self>(state, grad, step, hyper)
    }

    /// `Σ_t Σ_i t_i²` over every element of `tensors` (the gradients of a global-norm clip),
    /// `[1]` in f32 on the tensors' device; `None` for no tensors. By default the tensors are
    /// flattened and concatenated in groups (few launches on a device); the CPU reads each
    /// where it lies.
    fn squares_sum(tensors: Vec<FloatTensor<Self>>) -> Option<FloatTensor<Self>> {
        composite::squares_sum::<Self>(tensors)
    }

    /// `tensor` times `factor` (`[1]`, on its device; the factor of a global-norm clip). By
    /// default a broadcast multiplication; a backend may scale the tensor in place when it owns
    /// it alone (the CPU, which would otherwise allocate and write a copy of every gradient per
    /// step).
    fn scale_by(tensor: FloatTensor<Self>, factor: FloatTensor<Self>) -> FloatTensor<Self> {
        composite::scale_by::<Self>(tensor, factor)
    }
}

impl<B: OptimBackend, C: CheckpointStrategy> OptimBackend for Autodiff<B, C> {
    fn adamw_step(
        state: AdamWTensors<Self>,
        grad: FloatTensor<Self>,
        step: u64,
        hyper: &AdamWHyper,
    ) -> Result<AdamWTensors<Self>> {
        // Not differentiated: the inner backend's step, the results untracked.
        let out = B::adamw_step(
            AdamWTensors {
                var: state.var.primitive,
                m: state.m.primitive,
                v: state.v.primitive,
            },
            grad.primitive,
            step,
            hyper,
        )?;
        let wrap = <Self as AutodiffBackend>::from_inner;
        Ok(AdamWTensors {
            var: wrap(out.var),
            m: wrap(out.m),
            v: wrap(out.v),
        })
    }

    fn squares_sum(tensors: Vec<FloatTensor<Self>>) -> Option<FloatTensor<Self>> {
        // Not differentiated: the inner backend's sum, untracked.
        B::squares_sum(tensors.into_iter().map(|t| t.primitive).collect())
            .map(<Self as AutodiffBackend>::from_inner)
    }

    fn scale_by(tensor: FloatTensor<Self>, factor: FloatTensor<Self>) -> FloatTensor<Self> {
        // Not differentiated: the inner backend's product, untracked.
        <Self as AutodiffBackend>::from_inner(B::scale_by(tensor.primitive, factor.primitive))
    }
}
