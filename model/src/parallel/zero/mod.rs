//! Sharded training state over HCCL: `--zero 1|2|3`, ZeRO's stages
//! (Rajbhandari et al., 2020; DeepSpeed's and MindSpeed's distributed optimizer, FSDP for
//! stage 3) on top of the data-parallel loop of [`crate::parallel::ddp`].
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
//! Stage 3 alone gathers the whole model for the step: Burn 0.21's autodiff keeps every weight a
//! matmul read until the backward pass reaches it and offers no hook between blocks of one backward
//! pass. With per-block checkpointing (`--zero 3 --checkpointing block`) backward is a chain of
//! per-part passes ([`crate::train::recompute::loss_and_grads_with`]) and [`Zero`] implements
//! FSDP's per-block gathering through its [`PartHooks`](crate::train::recompute::PartHooks): each
//! unit all-gathered just before its part runs and freed after, its gradients reduce-scattered as
//! soon as its backward produced them ([`BlockSharding`]).
//!
//! **Checkpoints** are sharded ([`checkpoint`]): each rank writes its own slice of the master
//! weights and moments into the step folder, and rank 0 publishes the folder once every rank's
//! shard is durable; `--resume` reads each rank's ranges on any rank count. The whole-record
//! path ([`record`]: the per-parameter record a replicated run writes, `optim.mpk`) remains for
//! resuming checkpoints of the whole-state format.

pub mod checkpoint;
/// The units' layout lives beside the loop, which reads a sharded checkpoint whole for a
/// replicated run ([`crate::train::zero_resume`]).
pub use crate::train::zero_layout as layout;
pub mod record;
pub mod sharded;

use burn_ascend::AttnError;

pub use crate::train::sync::{BlockSharding, ShardedOptimizer, ZeroStage};
pub use sharded::Zero;

/// Checks `--zero k` over `ranks` ranks before any step: a stage of 1–3 needs at least 2
/// ranks. The state it shards is [`crate::train::optim::FusedAdamW`]'s, the training loop's only
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
