//! Sharded training state over HCCL (issue 28 item 2): `--zero 1|2|3`, ZeRO's stages
//! (Rajbhandari et al., 2020; DeepSpeed's and MindSpeed's distributed optimizer, FSDP for
//! stage 3) on top of the data-parallel loop of [`crate::ddp`].
//!
//! **Layout.** The trainable parameters are grouped into *units*, FSDP's wrapping of a
//! transformer: the embedding, each block, and the final norm with the output head. A unit's
//! parameters are flattened in module order into one f32 buffer padded with zeros to a multiple
//! of the rank count N, so every rank owns one contiguous slice of `padded / N` elements of
//! every unit ([`layout::Layout`]). Because of the padding no rank count has to divide any
//! parameter's size. Frozen parameters (a LoRA run's base) are not in any unit: they have no
//! gradient or optimizer state and stay replicated.
//!
//! **A step.** After the backward pass each unit's gradients are flattened into one buffer and
//! summed across ranks — stage 1 with `HcclAllReduce` (then the rank keeps its slice), stages
//! 2 and 3 with `HcclReduceScatter` (the rank receives only its slice) — and scaled by 1/N, as
//! plain data parallelism does, so the averaged gradient of an element is the same sum in the
//! same rank order either way. The global gradient norm is the square root of the all-reduced
//! sum of the shards' sums of squares; the clip scales the shard. AdamW, element-wise, then
//! updates the rank's slice of the f32 master weights with moments held for that slice only,
//! and `HcclAllGather` brings every rank the whole updated unit, which becomes the model's
//! parameters again (stages 1 and 2). Stage 3 keeps the weights sharded at rest: after the
//! update the model's trainable parameters are replaced by empty placeholders and each unit is
//! all-gathered again just before the next forward ([`ShardedOptimizer::whole`]).
//!
//! Stage 3 alone gathers the whole model for the step: Burn 0.21's autodiff keeps every weight
//! a matmul read until the backward pass reaches it and offers no hook between blocks of one
//! backward pass. With per-block checkpointing (`--zero 3 --checkpointing block`) backward is a
//! chain of per-part passes ([`crate::checkpointing::loss_and_grads_with`]) and [`Zero`]
//! implements FSDP's per-block gathering through its [`PartHooks`]: each unit all-gathered just
//! before its part runs and freed after, its gradients reduce-scattered as soon as its
//! backward produced them ([`BlockSharding`]).
//!
//! **Checkpoints** are written whole: every rank takes part in gathering the moments into the
//! per-parameter record a replicated run writes (`optim.mpk`, Burn's AdamW record keyed by the
//! parameters' ids), so a sharded run resumes on another rank count, with or without `--zero`.

pub mod layout;
pub mod record;
pub mod sharded;

use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn_ascend::AttnError;

use super::checkpointing::PartHooks;
use super::transformer::Transformer;

pub use sharded::Zero;

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

/// Checks `--zero k` over `ranks` ranks before any step: a stage of 1–3 needs at least 2
/// ranks. The state it shards is [`crate::optim::FusedAdamW`]'s, the training loop's only
/// optimizer: element-wise, so the update of a slice of a flattened parameter is the whole
/// parameter's update restricted to that slice (an optimizer reading a whole matrix at once —
/// Muon, Adafactor — would need another layout; there is none to choose, so no rule refuses it).
pub fn check_zero(k: u8, ranks: usize) -> Result<Option<ZeroStage>, AttnError> {
    let Some(stage) = ZeroStage::from_flag(k)? else {
        return Ok(None);
    };
    if ranks < 2 {
        return Err(AttnError::invalid(
            "--zero",
            format!(
                "--zero {k} shards the training state over data-parallel ranks: it needs \
                 --devices N with N >= 2, got {ranks}"
            ),
        ));
    }
    Ok(Some(stage))
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
    /// shards; every rank gets the bytes, rank 0 writes them).
    fn optimizer_bytes(&mut self, model: &Transformer<B>) -> Result<Vec<u8>, AttnError>;
    /// Takes this rank's slice of the whole optimizer state `bytes` (a replicated or sharded
    /// run's `optim.mpk`, of any rank count), `path` naming it in errors.
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
/// rank's shard as soon as its backward pass has produced them; see [`crate::checkpointing`].
pub trait BlockSharding<B: AutodiffBackend> {
    /// `model` with its trainable parameters released (after a checkpoint gathered them whole).
    fn begin(&mut self, model: Transformer<B>) -> Result<Transformer<B>, AttnError>;
    /// The hooks [`crate::checkpointing::loss_and_grads_with`] calls.
    fn hooks(&mut self) -> &mut dyn PartHooks<B>;
    /// After the chain: the global gradient norm before clipping from the reduced shards
    /// (as [`ShardedOptimizer::reduce`] returns it); [`ShardedOptimizer::step`] follows.
    fn finish(&mut self) -> Result<f32, AttnError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_stage_needs_two_ranks_naming_the_flag() {
        assert_eq!(check_zero(0, 1).unwrap(), None);
        assert_eq!(check_zero(2, 4).unwrap(), Some(ZeroStage::Two));
        let one = check_zero(1, 1).unwrap_err().to_string();
        assert!(one.contains("--zero") && one.contains("N >= 2"), "{one}");
        let four = check_zero(4, 2).unwrap_err().to_string();
        assert!(four.contains("--zero") && four.contains("got 4"), "{four}");
    }
}
