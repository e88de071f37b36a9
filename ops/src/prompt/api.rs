//! Prompt attention on plain `Tensor<B, D>`: an inference op, forward-only under `Autodiff`
//! (its output is a constant). Host-only features (int8 `attentionOut` via `quantScale2`)
//! return [`crate::AttnError::Unsupported`] here; the CLI (`burn-ascend run`) runs them.

use burn::tensor::Tensor;

use super::{PromptBackend, PromptInputs, PromptSpec};
use crate::common::tensor::{unwrap as prim, wrap as tensor};
use crate::error::Result;

/// `aclnnPromptFlashAttentionV3`: query/key/value in `spec.input_layout` (rank `D` = 3 for
/// BSH/TND, 4 otherwise); returns `attentionOut` (BNSD_BSND → BSND). Forward-only under
/// `Autodiff`. A call without a dense mask or pse; those are
/// [`prompt_flash_attention_with`]'s.
pub fn prompt_flash_attention<B: PromptBackend, const D: usize>(
    query: Tensor<B, D>,
    key: Tensor<B, D>,
    value: Tensor<B, D>,
    spec: &PromptSpec,
) -> Result<Tensor<B, D>> {
    prompt_flash_attention_with::<B, D, 4>(query, key, value, None, None, spec)
}

/// [`prompt_flash_attention`] with the tensor-valued optional inputs: `atten_mask`, a dense
/// mask of rank `M` (`(Sq, Skv)`, `(1|B, Sq, Skv)` or `(1|B, 1, Sq, Skv)`, floats 0 = attend,
/// 1 = masked; `spec.atten_mask` is then [`crate::prompt::PromptMaskKind::Dense`]) and
/// `pse_shift` `(1|B, N, Qs, KVs)`. Both stay where they are (on the device for a device
/// backend: no host round trip).
pub fn prompt_flash_attention_with<B: PromptBackend, const D: usize, const M: usize>(
    query: Tensor<B, D>,
    key: Tensor<B, D>,
    value: Tensor<B, D>,
    atten_mask: Option<Tensor<B, M>>,
    pse_shift: Option<Tensor<B, 4>>,
    spec: &PromptSpec,
) -> Result<Tensor<B, D>> {
    let out = B::prompt_fwd(
        PromptInputs {
            query: prim(query),
            key: prim(key),
            value: prim(value),
            atten_mask: atten_mask.map(prim),
            pse_shift: pse_shift.map(prim),
        },
        spec,
    )?;
    Ok(tensor(out))
}
