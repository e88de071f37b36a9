//! What the training loop asks of a group of data-parallel ranks, as traits the parallel
//! strategies implement (`crate::parallel`: plain data parallelism, ZeRO's stages): averaging
//! gradients and losses ([`GradientSync`]), and for ZeRO the optimizer step on this rank's
//! shard ([`ShardedOptimizer`]) and the per-block gathering of the weights
//! ([`BlockSharding`]). Here, below the strategies, so the loop calls them without importing
//! the strategies (which run the loop on each rank).

use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_ascend::AttnError;

use crate::model::transformer::Transformer;
use crate::train::recompute::PartHooks;

/// What the training loop needs from a data-parallel group; `None` in [`crate::train::train_with`]
/// is one device.
pub trait GradientSync<B: AutodiffBackend> {
    /// This rank.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// Rank 0's parameters on every rank.
    fn broadcast_model(&mut self, model: Transformer<B>) -> Result<Transformer<B>, AttnError>;
    /// The mean over ranks of each rank's loss (a host read: waits for every rank).
    fn average_loss(&mut self, loss: Tensor<B, 1>) -> Result<f32, AttnError>;
    /// Waits for the queued collectives (before a checkpoint is read back, and at the end),
    /// turning a failed one into this rank's typed error.
    fn wait(&mut self) -> Result<(), AttnError>;
    /// Every gradient averaged over ranks (queued on the device stream).
    fn average_gradients(
        &mut self,
        model: &Transformer<B>,
        grads: GradientsParams,
    ) -> Result<GradientsParams, AttnError>;
    /// The sharded optimizer when the group owns the optimizer state (ZeRO, `--zero K`): the
    /// loop then reduces the gradients and steps through it instead of averaging them and
    /// stepping its own optimizer. `None` (plain data parallelism) by default.
    fn sharded(&mut self) -> Option<&mut dyn ShardedOptimizer<B>> {
        None
    }
}

/// A ZeRO stage (`--zero K`, K of 1–3; 0 is plain data parallelism).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ZeroStage {
    /// The optimizer state partitioned (gradients all-reduced, each rank keeps its slice).
    One = 1,
    /// The gradients partitioned too (reduce-scattered).
    Two = 2,
    /// The weights too: stored sharded at rest, gathered per unit for the step.
    Three = 3,
}

impl ZeroStage {
    /// The stage of `--zero k`; `None` for 0.
    pub fn from_flag(k: u8) -> Result<Option<Self>, AttnError> {
        match k {
            0 => Ok(None),
            1 => Ok(Some(Self::One)),
            2 => Ok(Some(Self::Two)),
            3 => Ok(Some(Self::Three)),
            _ => Err(AttnError::invalid(
                "--zero",
                format!("the ZeRO stage is 0, 1, 2 or 3, got {k}"),
            )),
        }
    }

    /// `K` of `--zero K`.
    pub fn number(self) -> u8 {
        self as u8
    }
}

/// The part of a training step a ZeRO group does in place of the loop's optimizer (see the
/// module docs); every rank calls each method in the same order (they run collectives).
pub trait ShardedOptimizer<B: AutodiffBackend> {
    /// The stage.
    fn stage(&self) -> ZeroStage;
    /// Reduces the step's gradients into this rank's shard (keeping it for [`Self::step`]) and
    /// returns the global gradient norm before clipping (a host read).
    fn reduce(&mut self, model: &Transformer<B>, grads: GradientsParams) -> Result<f32, AttnError>;
    /// Clips and applies AdamW to this rank's shard at `lr`; stages 1 and 2 return the model
    /// with the whole updated weights gathered, stage 3 with its trainable parameters
    /// released (gathered again by [`Self::whole`]).
    fn step(&mut self, lr: f64, model: Transformer<B>) -> Result<Transformer<B>, AttnError>;
    /// Stage 3 with per-block checkpointing: the weights gathered one part at a time inside
    /// the chain of per-block passes ([`BlockSharding`]); `None` at other stages.
    fn per_block(&mut self) -> Option<&mut dyn BlockSharding<B>> {
        None
    }
    /// The model with its whole weights (stage 3: all-gathered unit by unit; otherwise, and
    /// when already gathered, `model` itself).
    fn whole(&mut self, model: Transformer<B>) -> Result<Transformer<B>, AttnError>;
    /// The whole optimizer state as a replicated run's `optim.mpk` holds it (gathered from the
    /// shards; every rank gets the bytes). Checkpoints do not use it (each rank writes its
    /// shard, [`Self::publish_sharded`]); it shows what the shards hold.
    fn optimizer_bytes(&mut self, model: &Transformer<B>) -> Result<Vec<u8>, AttnError>;
    /// Saves this rank's shard of the sharded state (master weights and moments) into the
    /// checkpoint of `step` in `out`; the rank given its whole `files` (rank 0: the exported
    /// weights, the loss curve, `state.json`) writes them too and publishes the checkpoint once
    /// every rank's shard is durable. Every rank calls it at the same step.
    fn publish_sharded(
        &mut self,
        out: &std::path::Path,
        step: usize,
        files: Option<Vec<(&'static str, Vec<u8>)>>,
    ) -> Result<(), AttnError>;
    /// Takes this rank's ranges of the sharded state of the verified checkpoint `saved`
    /// (saved over any rank count), reading nothing else of it.
    fn load_sharded(
        &mut self,
        model: &Transformer<B>,
        saved: &crate::run_state::published::Published,
    ) -> Result<(), AttnError>;
    /// Takes this rank's slice of the whole optimizer state `bytes` (a replicated run's
    /// `optim.mpk`, or a ZeRO run's of the whole-state format, of any rank count), `path`
    /// naming it in errors.
    fn load_optimizer(
        &mut self,
        model: &Transformer<B>,
        bytes: &[u8],
        path: &std::path::Path,
    ) -> Result<(), AttnError>;
}

/// ZeRO-3 as FSDP with per-block checkpointing (`finetune --zero 3 --checkpointing`): each
/// part's weights are all-gathered just before it runs (forward, then again for its
/// recomputation in backward) and freed after, and its gradients reduce-scattered into this
/// rank's shard as soon as its backward pass has produced them; see [`crate::train::recompute`].
pub trait BlockSharding<B: AutodiffBackend> {
    /// `model` with its trainable parameters released (after a checkpoint gathered them whole).
    fn begin(&mut self, model: Transformer<B>) -> Result<Transformer<B>, AttnError>;
    /// The hooks [`crate::train::recompute::loss_and_grads_with`] calls.
    fn hooks(&mut self) -> &mut dyn PartHooks<B>;
    /// After the chain: the global gradient norm before clipping from the reduced shards
    /// (as [`ShardedOptimizer::reduce`] returns it); [`ShardedOptimizer::step`] follows.
    fn finish(&mut self) -> Result<f32, AttnError>;
}
