//! Fused inference attention on plain `Tensor<B, D>`: an inference op, forward-only under
//! `Autodiff` (its outputs are constants).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;

use super::{FiaBackend, FiaInputs, FiaKv, FiaOutputs, FiaSpec};
use crate::common::tensor::{unwrap as prim, wrap as tensor};
use crate::error::Result;

/// Burn-tensor constructors of [`FiaKv`] (the contract's carrier is generic over the tensor
/// kind; these take `Tensor<B, K>` of any rank and keep its float primitive):
/// `FiaKv::contiguous(key, value)` with this trait in scope.
pub trait FiaKvFromTensors<B: Backend>: Sized {
    /// Key/value in the input layout.
    fn contiguous<const K: usize>(key: Tensor<B, K>, value: Tensor<B, K>) -> Self;

    /// Paged caches `(blocknum, blockSize, H)` (`K = 3`) or `(blocknum, Nkv, blockSize, D)`
    /// (`K = 4`); the spec carries the `blockTable`.
    fn paged<const K: usize>(key_cache: Tensor<B, K>, value_cache: Tensor<B, K>) -> Self;
}

impl<B: Backend> FiaKvFromTensors<B> for FiaKv<FloatTensor<B>> {
    fn contiguous<const K: usize>(key: Tensor<B, K>, value: Tensor<B, K>) -> Self {
        Self::Contiguous {
            key: prim(key),
            value: prim(value),
        }
    }

    fn paged<const K: usize>(key_cache: Tensor<B, K>, value_cache: Tensor<B, K>) -> Self {
        Self::Paged {
            key_cache: prim(key_cache),
            value_cache: prim(value_cache),
        }
    }
}

/// `aclnnFusedInferAttentionScoreV4` (FIA): prefill (query S > 1) and decode (S = 1) in one op
/// with GQA, paged KV, masks (sparse modes 0–4 with pre/next tokens), pseShift, left padding,
/// int8 KV (antiquant), a learnable sink (`learnable_sink`, `[N]`) and the softmax LSE. Returns `attentionOut` (the
/// query's rank `D`; D of value) and, with `spec.softmax_lse_flag`, `softmaxLse` of rank `L`:
/// `[B, N, Q_S, 1]` (`L = 4`) or, for TND, `[T, N, 1]` (`L = 3`); f32 values, `+inf` for rows
/// with nothing to attend. A different `L` is a typed error naming `softmaxLseFlag`.
/// Forward-only under `Autodiff`. Without a mask tensor, pse or int8 KV;
/// [`fused_infer_attention_with`] takes those.
pub fn fused_infer_attention<B: FiaBackend, const D: usize, const L: usize>(
    query: Tensor<B, D>,
    kv: FiaKv<FloatTensor<B>>,
    learnable_sink: Option<Tensor<B, 1>>,
    spec: &FiaSpec,
) -> Result<(Tensor<B, D>, Option<Tensor<B, L>>)> {
    fused_infer_attention_with(
        FiaInputs::new(prim(query), kv, learnable_sink.map(prim)),
        spec,
    )
}

/// [`fused_infer_attention`] with the whole carrier: the dense `attenMask` (a float tensor
/// holding 0/1, non-zero = masked, with [`crate::fia::FiaMask::Dense`]), `pseShift` and the
/// antiquant scales / offsets (int8 KV as float tensors holding the int8 values) are tensors
/// like the query — on a device backend they stay on the device. `D`: the query's rank,
/// `L`: the LSE's.
pub fn fused_infer_attention_with<B: FiaBackend, const D: usize, const L: usize>(
    inputs: FiaInputs<FloatTensor<B>>,
    spec: &FiaSpec,
) -> Result<(Tensor<B, D>, Option<Tensor<B, L>>)> {
    let FiaOutputs {
        attention_out,
        softmax_lse,
    } = B::fia_fwd(inputs, spec)?;
    let lse = match softmax_lse {
        Some(l) => {
            let rank = burn::tensor::TensorMetadata::shape(&l).num_dims();
            if rank != L {
                return Err(crate::error::AttnError::invalid(
                    "softmaxLseFlag",
                    format!(
                        "softmaxLse is rank {rank} for inputLayout {}, asked for rank {L}",
                        spec.input_layout.as_attr()
                    ),
                ));
            }
            Some(tensor(l))
        }
        None => None,
    };
    Ok((tensor(attention_out), lse))
}
