//! The tensors of one fused inference attention call, generic over the tensor kind: the one
//! carrier the ops trait (Burn float primitives), `Autodiff` and the aclnn call builder
//! (`aclTensor` handles, the one-tensor lists made there) share. A new tensor input is one
//! field here (and its shape in [`super::FiaShapes`]); every layer maps the carrier with
//! [`FiaInputs::map`]. (The reference's host-slice view of key/value is
//! [`super::FiaKvSlices`].)

use super::{FiaKvShapes, FiaShapes};

/// Key/value: one tensor each in the input layout, or paged caches (the spec's `blockTable`).
/// int8 KV travels as float tensors holding the int8 values, dequantised with the antiquant.
/// (CANN's tensor-list form is not supported.)
#[derive(Debug, Clone)]
pub enum FiaKv<T> {
    /// `key` / `value` in `inputLayout` (TND: `[T2, Nkv, D]`).
    Contiguous {
        /// `key`.
        key: T,
        /// `value`.
        value: T,
    },
    /// Caches `(blocknum, blockSize, H)` or `(blocknum, Nkv, blockSize, D)`.
    Paged {
        /// The key cache.
        key_cache: T,
        /// The value cache.
        value_cache: T,
    },
}

impl<T> FiaKv<T> {
    /// Each tensor through `f`, key before value.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> FiaKv<U> {
        match self {
            Self::Contiguous { key, value } => FiaKv::Contiguous {
                key: f(key),
                value: f(value),
            },
            Self::Paged {
                key_cache,
                value_cache,
            } => FiaKv::Paged {
                key_cache: f(key_cache),
                value_cache: f(value_cache),
            },
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> FiaKv<&T> {
        match self {
            Self::Contiguous { key, value } => FiaKv::Contiguous { key, value },
            Self::Paged {
                key_cache,
                value_cache,
            } => FiaKv::Paged {
                key_cache,
                value_cache,
            },
        }
    }

    /// Key (or key cache) and value (or value cache).
    pub fn into_pair(self) -> (T, T) {
        match self {
            Self::Contiguous { key, value } => (key, value),
            Self::Paged {
                key_cache,
                value_cache,
            } => (key_cache, value_cache),
        }
    }

    /// Whether these are paged caches.
    pub fn is_paged(&self) -> bool {
        matches!(self, Self::Paged { .. })
    }

    /// The shapes of the form, each tensor's through `shape`.
    pub fn shapes(&self, mut shape: impl FnMut(&T) -> Vec<usize>) -> FiaKvShapes {
        match self {
            Self::Contiguous { key, value } => FiaKvShapes::Contiguous {
                key: shape(key),
                value: shape(value),
            },
            Self::Paged {
                key_cache,
                value_cache,
            } => FiaKvShapes::Paged {
                key_cache: shape(key_cache),
                value_cache: shape(value_cache),
            },
        }
    }
}

/// Inputs of fused inference attention.
#[derive(Debug, Clone)]
pub struct FiaInputs<T> {
    /// `query` in `inputLayout`.
    pub query: T,
    /// `key` / `value`.
    pub kv: FiaKv<T>,
    /// `learnableSink` `[N]`, a tensor like the query: a model's trained sinks reach the op
    /// from its device, never through the host.
    pub learnable_sink: Option<T>,
}

impl<T> FiaInputs<T> {
    /// Each tensor through `f`, in the order query, key, value, learnable sink.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> FiaInputs<U> {
        FiaInputs {
            query: f(self.query),
            kv: self.kv.map(&mut f),
            learnable_sink: self.learnable_sink.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> FiaInputs<&T> {
        FiaInputs {
            query: &self.query,
            kv: self.kv.as_ref(),
            learnable_sink: self.learnable_sink.as_ref(),
        }
    }

    /// Every tensor given, in the order of [`Self::map`].
    pub fn all(&self) -> Vec<&T> {
        let (k, v) = self.kv.as_ref().into_pair();
        let mut all = vec![&self.query, k, v];
        all.extend(self.learnable_sink.as_ref());
        all
    }

    /// The call's shapes, each tensor's through `shape`; `kv_int8`: whether key/value hold
    /// int8 values (the Burn API's float KV: an antiquant is given).
    pub fn shapes(&self, mut shape: impl FnMut(&T) -> Vec<usize>, kv_int8: bool) -> FiaShapes {
        FiaShapes {
            query: shape(&self.query),
            kv: self.kv.shapes(&mut shape),
            kv_int8,
            learnable_sink: self.learnable_sink.as_ref().map(shape),
        }
    }
}

/// Outputs of fused inference attention.
#[derive(Debug, Clone)]
pub struct FiaOutputs<T> {
    /// `attentionOut`: the query's shape with value's D (BNSD_BSND → BSND).
    pub attention_out: T,
    /// `softmaxLse` `[B, N, Q_S, 1]` (TND `[T, N, 1]`) when `softmaxLseFlag` is set; `+inf`
    /// marks rows with nothing to attend.
    pub softmax_lse: Option<T>,
}

impl<T> FiaOutputs<T> {
    /// Each tensor through `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> FiaOutputs<U> {
        FiaOutputs {
            attention_out: f(self.attention_out),
            softmax_lse: self.softmax_lse.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> FiaOutputs<&T> {
        FiaOutputs {
            attention_out: &self.attention_out,
            softmax_lse: self.softmax_lse.as_ref(),
        }
    }
}
