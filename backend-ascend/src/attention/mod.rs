//! The attention ops of this project on Ascend: one module per op, each holding its
//! `burn_ascend_ops` extension trait's impl for [`Ascend`](crate::Ascend) and its aclnn argument
//! builder ([`varlen`], [`prompt`], [`incre`], [`scatter`], [`fia`]); what they share is
//! `common`'s. Together they make `Ascend` a `burn_ascend_ops::AttentionBackend`.
//!
//! - varlen forward and backward run natively: the device tensors are handed to
//!   `aclnnFlashAttentionVarLenScore` / `aclnnFlashAttentionUnpaddingScoreGrad` (the `V5` ops
//!   with a sink, as torch_npu chooses) as they are (strided views included), outputs are
//!   allocated on the device. The backward's dpse, and its dsink before CANN 9.1.0, are
//!   computed on the device with the backend's own tensor ops (no arch32 kernel writes dpse;
//!   the older releases' dsink is wrong past a size threshold); from 9.1.0 CANN's is taken. Under `Autodiff<Ascend>` the ops crate's fused backward calls
//!   `VarlenBackend::varlen_bwd` here ([`varlen`]). An explicit mask (`VarlenInputs::atten_mask`, 0/1 floats) is compared with 0 into
//!   BOOL on the device; a pse tensor is handed over as a view, ALiBi slopes as FLOAT and the
//!   dropout mask (`VarlenInputs::drop_mask`, byte values) as UINT8, each cast on the device
//!   when needed — nothing of the call is uploaded but CANN's compressed masks (runtime
//!   constants); a non-f32 sink or mixed dtypes take the CPU kernels through the counted host
//!   fallback (`varlen_fwd` / `varlen_bwd`).
//! - prompt, incremental attention and the KV cache scatter run natively
//!   (`aclnnPromptFlashAttentionV3`, `aclnnIncreFlashAttentionV4` over contiguous, listed or
//!   paged KV, `aclnnScatterPaKvCache` in place on an unshared cache): [`prompt`], [`incre`],
//!   [`scatter`]; int8 KV (antiquant) is cast to INT8 on the device first. Integer dtypes and
//!   NHSD caches take the counted host fallback (`incre_fwd`, `prompt_fwd`, `scatter_kv`).
//! - **f32** prompt, incremental and fused inference attention and f32 cache scatters run the
//!   ops crate's composite (Burn tensor ops over this backend's native aclnn ops, which take
//!   FLOAT), counted as [`PROMPT_COMPOSITE`], [`INCRE_COMPOSITE`], [`FIA_COMPOSITE`] and
//!   [`SCATTER_COMPOSITE`] in [`crate::fallback_counts`] (no host round trip): CANN's Atlas
//!   A2/A3 definitions of PFA, IFA, FIA and ScatterPaKvCache list FLOAT16, BFLOAT16 (and INT8)
//!   only (`*_def.cpp` in ops-transformer; the simulation refuses FLOAT as CANN does), and
//!   casting around the op would change an f32 caller's numbers. f16 / bf16 calls go to aclnn.
//!
//! Shapes and attributes are validated by the ops crate's spec first (typed [`AttnError`](burn_ascend_ops::AttnError)s);
//! a failing aclnn launch (or its stream synchronisation) then returns `AttnError::Device`
//! naming the op, the call and its status; other device failures (allocating a Burn tensor)
//! panic with the call, its status and CANN's message, as Burn's tensor API cannot return one.

pub(crate) mod burn_module;
mod common;
pub mod device_meta;
pub mod fia;
pub mod incre;
pub mod prompt;
pub mod scatter;
pub mod varlen;

pub use fia::FIA_COMPOSITE;
pub use incre::INCRE_COMPOSITE;
pub use prompt::PROMPT_COMPOSITE;
pub use scatter::SCATTER_COMPOSITE;

/// The aclnn argument builders of the attention ops, at the path the op-replay CLI, the
/// selftest and the simulation's tests name them by (each is defined in its op's module).
pub mod builders {
    pub use super::incre::incre;
    pub use super::prompt::prompt;
    pub use super::scatter::{
        cache_desc, nct_source_desc, scatter, scatter_strides_offsets, scatter_with_slots,
    };
    pub use super::varlen::{dense_pse_dims, varlen_fwd, varlen_grad, VarlenHandles};
}
