//! Incremental attention on plain `Tensor<B, D>`: an inference op, forward-only under
//! `Autodiff`. int8 KV travels as float tensors holding the int8 values, with the spec's
//! `antiquant`; host-only features (int8 `attentionOut` via `quantScale2`) return
//! [`crate::AttnError::Unsupported`] here.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;

use super::{IncreBackend, IncreInputs, IncreKv, IncreSpec};
use crate::common::tensor::{unwrap as prim, wrap as tensor};
use crate::error::Result;

/// Burn-tensor constructors of [`IncreKv`] (the contract's carrier is generic over the tensor
/// kind; these take `Tensor<B, K>` of any rank and keep its float primitive):
/// `IncreKv::contiguous(key, value)` with this trait in scope.
pub trait IncreKvFromTensors<B: Backend>: Sized {
    /// Contiguous key/value in the input layout.
    fn contiguous<const K: usize>(key: Tensor<B, K>, value: Tensor<B, K>) -> Self;

    /// The tensor-list form (one `(1, S_b, …)` tensor per batch).
    fn list<const K: usize>(key: Vec<Tensor<B, K>>, value: Vec<Tensor<B, K>>) -> Self;

    /// Paged caches `(blocknum, blockSize, H)` (`K = 3`) or `(blocknum, Nkv, blockSize, D)`
    /// (`K = 4`); the spec carries the `blocktable`.
    fn paged<const K: usize>(key_cache: Tensor<B, K>, value_cache: Tensor<B, K>) -> Self;
}

impl<B: Backend> IncreKvFromTensors<B> for IncreKv<FloatTensor<B>> {
    fn contiguous<const K: usize>(key: Tensor<B, K>, value: Tensor<B, K>) -> Self {
        Self::Contiguous {
            key: prim(key),
            value: prim(value),
        }
    }

    fn list<const K: usize>(key: Vec<Tensor<B, K>>, value: Vec<Tensor<B, K>>) -> Self {
        Self::List {
            key: key.into_iter().map(prim).collect(),
            value: value.into_iter().map(prim).collect(),
        }
    }

    fn paged<const K: usize>(key_cache: Tensor<B, K>, value_cache: Tensor<B, K>) -> Self {
        Self::Paged {
            key_cache: prim(key_cache),
            value_cache: prim(value_cache),
        }
    }
}

/// `aclnnIncreFlashAttentionV4`: query `(B,N,1,D)`, `(B,1,N,D)` or `(B,1,H)`; returns
/// `attentionOut` with the query's shape. Forward-only under `Autodiff`. Without a mask, pse or
/// int8 KV; [`incre_flash_attention_with`] takes those.
///
/// Unlike CANN, which ignores `kvPaddingSize` with a tensor list of several tensors, without
/// `actualSeqLengths` or with a block table, this refuses those combinations with a typed
/// error ([`IncreSpec::check_left_padding_applies`]).
pub fn incre_flash_attention<B: IncreBackend, const D: usize>(
    query: Tensor<B, D>,
    kv: IncreKv<FloatTensor<B>>,
    spec: &IncreSpec,
) -> Result<Tensor<B, D>> {
    incre_flash_attention_with(IncreInputs::new(prim(query), kv), spec)
}

/// [`incre_flash_attention`] with the whole carrier: the optional `attenMask` (a float tensor
/// holding 0/1, non-zero = masked), `pseShift` and `antiquantScale` / `antiquantOffset` (int8
/// KV as float tensors holding the int8 values) are tensors like the query — on a device
/// backend they stay on the device. `D`: the query's rank (the output's).
pub fn incre_flash_attention_with<B: IncreBackend, const D: usize>(
    inputs: IncreInputs<FloatTensor<B>>,
    spec: &IncreSpec,
) -> Result<Tensor<B, D>> {
    if spec.kv_padding_size.is_some() {
        let dims = spec.validate(&crate::incre::shapes::<B>(&inputs))?;
        spec.check_left_padding_applies(&dims)?;
    }
    Ok(tensor(B::incre_fwd(inputs, spec)?))
}
