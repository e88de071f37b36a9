//! The Burn extension trait: the attention ops as backend methods whose default bodies are the
//! composite (built from Burn primitives), so every Burn backend runs them. A backend with
//! its own kernels overrides the methods: `NdArray` runs the CPU kernels, `Autodiff<B, C>`
//! records one node with a fused backward.

use burn::tensor::ops::FloatTensor;

use crate::error::Result;
use crate::fia::FiaSpec;
use crate::fused::FusedBackend;
use crate::incre::IncreSpec;
use crate::prompt::PromptSpec;
use crate::scatter::ScatterSpec;
use crate::varlen::{composite, VarlenSpec};

/// The varlen carriers: the contract's one carrier per call, generic over the tensor kind —
/// here over `B`'s float primitives (`VarlenInputs<FloatTensor<B>>`), in the aclnn builder over
/// `&aclTensor` handles. `VarlenInputs::pse` is the differentiable external pse
/// (`[pseTotalLen]`, pseType 0/1).
pub use burn_ascend_contract::varlen::{
    VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs,
};

/// Inputs of prompt attention: the contract's carrier (`PromptInputs<FloatTensor<B>>` here,
/// over `&aclTensor` handles in the aclnn builder).
pub use burn_ascend_contract::prompt::PromptInputs;

/// The incremental attention carriers: the contract's one carrier per call, generic over the
/// tensor kind (`IncreInputs<FloatTensor<B>>` here, over `aclTensor` handles in the aclnn
/// builder, which makes the op's tensor lists from `IncreKv`).
pub use burn_ascend_contract::incre::{IncreInputs, IncreKv};

/// The fused inference attention carriers: the contract's (`FiaInputs<FloatTensor<B>>` here,
/// over `aclTensor` handles in the aclnn builder).
pub use burn_ascend_contract::fia::{FiaInputs, FiaKv, FiaOutputs};

/// The cache scatter's carriers: the contract's (`ScatterInputs<FloatTensor<B>>` here, over
/// `&aclTensor` handles in the aclnn builder).
pub use burn_ascend_contract::scatter::{ScatterInputs, ScatterOutputs};

/// CANN's attention operators as a Burn backend extension (with the fused transformer ops of
/// [`FusedBackend`], the grouped matmul and the optimizer step as supertraits).
pub trait AttentionBackend:
    FusedBackend + crate::grouped_matmul::GroupedMatmulBackend + crate::optim::OptimBackend
{
    /// `aclnnFlashAttentionVarLenScoreV5`. A pse given as a tensor ([`VarlenInputs::pse`])
    /// stays where it is; `Autodiff` makes it a parent of the node, so it receives `dpse`.
    fn varlen_fwd(
        inputs: VarlenInputs<FloatTensor<Self>>,
        spec: &VarlenSpec,
    ) -> Result<VarlenOutputs<FloatTensor<Self>>> {
        composite::varlen_fwd::<Self>(inputs, spec)
    }

    /// `aclnnFlashAttentionUnpaddingScoreGradV5`.
    fn varlen_bwd(
        inputs: VarlenGradInputs<FloatTensor<Self>>,
        spec: &VarlenSpec,
    ) -> Result<VarlenGrads<FloatTensor<Self>>> {
        composite::varlen_bwd::<Self>(inputs, spec)
    }

    /// `aclnnPromptFlashAttentionV3` (V1 is the spec with V3's extras at their defaults):
    /// `attentionOut` in the output layout.
    fn prompt_fwd(
        inputs: PromptInputs<FloatTensor<Self>>,
        spec: &PromptSpec,
    ) -> Result<FloatTensor<Self>> {
        crate::prompt::composite::prompt_fwd::<Self>(inputs, spec)
    }

    /// `aclnnIncreFlashAttentionV4`: `attentionOut` with the query's shape.
    fn incre_fwd(
        inputs: IncreInputs<FloatTensor<Self>>,
        spec: &IncreSpec,
    ) -> Result<FloatTensor<Self>> {
        crate::incre::composite::incre_fwd::<Self>(inputs, spec)
    }

    /// `aclnnFusedInferAttentionScoreV4`: `attentionOut` and, with `softmaxLseFlag`,
    /// `softmaxLse`. An inference op (forward-only under `Autodiff`).
    fn fia_fwd(
        inputs: FiaInputs<FloatTensor<Self>>,
        spec: &FiaSpec,
    ) -> Result<FiaOutputs<FloatTensor<Self>>> {
        crate::fia::composite::fia_fwd::<Self>(inputs, spec)
    }

    /// Whether FIA takes a `learnableSink` on `device` (`aclnnFusedInferAttentionScoreV4`):
    /// serving falls back to the placeholder-token path
    /// ([`crate::AttendPath::PromptIncre`]) where it does not. Every backend's composite does;
    /// an Ascend device only on a CANN that exports V4.
    fn fia_sink_available(_device: &Self::Device) -> bool {
        true
    }

    /// `aclnnScatterPaKvCache`, functional: returns the updated caches. Validates everything
    /// before writing; on error nothing was written.
    fn scatter_kv(
        inputs: ScatterInputs<FloatTensor<Self>>,
        spec: &ScatterSpec,
    ) -> Result<ScatterOutputs<FloatTensor<Self>>> {
        crate::scatter::composite::scatter_kv::<Self>(inputs, spec)
    }
}
