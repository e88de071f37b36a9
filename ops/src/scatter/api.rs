//! The KV cache scatter on plain `Tensor<B, D>`: functional (caches in, updated caches out),
//! forward-only under `Autodiff`.

use burn::tensor::Tensor;

use super::{ScatterBackend, ScatterInputs, ScatterSpec};
use crate::common::tensor::{unwrap as prim, wrap as tensor};
use crate::error::Result;

/// `aclnnScatterPaKvCache`, functional: key `[T, N, Dk]` (and value `[T, N, Dv]`) into the
/// rank-4 caches; returns the updated caches. Everything is validated before any write.
pub fn scatter_pa_kv_cache<B: ScatterBackend>(
    key: Tensor<B, 3>,
    value: Option<Tensor<B, 3>>,
    key_cache: Tensor<B, 4>,
    value_cache: Option<Tensor<B, 4>>,
    spec: &ScatterSpec,
) -> Result<(Tensor<B, 4>, Option<Tensor<B, 4>>)> {
    let out = B::scatter_kv(
        ScatterInputs {
            key: prim(key),
            value: value.map(prim),
            key_cache: prim(key_cache),
            value_cache: value_cache.map(prim),
        },
        spec,
    )?;
    Ok((tensor(out.key_cache), out.value_cache.map(tensor)))
}
