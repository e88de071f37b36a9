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

/// Inputs of fused inference attention. The optional ones are tensors like the query: on a
/// device backend they stay on the device (a mask travels as a float tensor holding 0/1,
/// converted there to the dtype the op takes).
#[derive(Debug, Clone)]
pub struct FiaInputs<T> {
    /// `query` in `inputLayout`.
    pub query: T,
    /// `key` / `value`.
    pub kv: FiaKv<T>,
    /// `learnableSink` `[N]`, a tensor like the query: a model's trained sinks reach the op
    /// from its device, never through the host.
    pub learnable_sink: Option<T>,
    /// `attenMask` with [`super::FiaMask::Dense`] (non-zero = masked): `(Q_S,KV_S)`,
    /// `(1|B,Q_S,KV_S)`, `(1|B,1,Q_S,KV_S)`; decode also `(B,KV_S)`.
    pub atten_mask: Option<T>,
    /// `pseShift` `(B|1, N, ≥Q_S, ≥KV_S)`.
    pub pse_shift: Option<T>,
    /// `antiquantScale` (combined K/V, row 0 the key's: `(2)`, `(2,Nkv,1,D)`, `(2,Nkv,D)`,
    /// `(2,H)`); int8 KV: `x = (x_int8 + offset) · scale`.
    pub antiquant_scale: Option<T>,
    /// `antiquantOffset` (the scale's shape; absent = 0).
    pub antiquant_offset: Option<T>,
    /// `keyAntiquantScale` (wins over `antiquantScale`; per channel or, with
    /// `keyAntiquantMode` 1, per token `(B, S)` / `(1, B, S)`).
    pub key_antiquant_scale: Option<T>,
    /// `keyAntiquantOffset`.
    pub key_antiquant_offset: Option<T>,
    /// `valueAntiquantScale`.
    pub value_antiquant_scale: Option<T>,
    /// `valueAntiquantOffset`.
    pub value_antiquant_offset: Option<T>,
}

impl<T> FiaInputs<T> {
    /// Query, key/value and the sink only.
    pub fn new(query: T, kv: FiaKv<T>, learnable_sink: Option<T>) -> Self {
        Self {
            query,
            kv,
            learnable_sink,
            atten_mask: None,
            pse_shift: None,
            antiquant_scale: None,
            antiquant_offset: None,
            key_antiquant_scale: None,
            key_antiquant_offset: None,
            value_antiquant_scale: None,
            value_antiquant_offset: None,
        }
    }

    /// Each tensor through `f`, in the order query, key, value, learnable sink, mask, pse,
    /// antiquant scale / offset, key's, value's.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> FiaInputs<U> {
        FiaInputs {
            query: f(self.query),
            kv: self.kv.map(&mut f),
            learnable_sink: self.learnable_sink.map(&mut f),
            atten_mask: self.atten_mask.map(&mut f),
            pse_shift: self.pse_shift.map(&mut f),
            antiquant_scale: self.antiquant_scale.map(&mut f),
            antiquant_offset: self.antiquant_offset.map(&mut f),
            key_antiquant_scale: self.key_antiquant_scale.map(&mut f),
            key_antiquant_offset: self.key_antiquant_offset.map(&mut f),
            value_antiquant_scale: self.value_antiquant_scale.map(&mut f),
            value_antiquant_offset: self.value_antiquant_offset.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> FiaInputs<&T> {
        FiaInputs {
            query: &self.query,
            kv: self.kv.as_ref(),
            learnable_sink: self.learnable_sink.as_ref(),
            atten_mask: self.atten_mask.as_ref(),
            pse_shift: self.pse_shift.as_ref(),
            antiquant_scale: self.antiquant_scale.as_ref(),
            antiquant_offset: self.antiquant_offset.as_ref(),
            key_antiquant_scale: self.key_antiquant_scale.as_ref(),
            key_antiquant_offset: self.key_antiquant_offset.as_ref(),
            value_antiquant_scale: self.value_antiquant_scale.as_ref(),
            value_antiquant_offset: self.value_antiquant_offset.as_ref(),
        }
    }

    /// The optional tensors after the sink (mask, pse, antiquants), in the order of
    /// [`Self::map`].
    pub fn optional(&self) -> [Option<&T>; 8] {
        [
            self.atten_mask.as_ref(),
            self.pse_shift.as_ref(),
            self.antiquant_scale.as_ref(),
            self.antiquant_offset.as_ref(),
            self.key_antiquant_scale.as_ref(),
            self.key_antiquant_offset.as_ref(),
            self.value_antiquant_scale.as_ref(),
            self.value_antiquant_offset.as_ref(),
        ]
    }

    /// The carrier with its optional tensors after the sink set to `optional`, in the order of
    /// [`Self::optional`].
    pub fn with_optional(self, optional: [Option<T>; 8]) -> Self {
        let [mask, pse, aqs, aqo, kqs, kqo, vqs, vqo] = optional;
        Self {
            atten_mask: mask,
            pse_shift: pse,
            antiquant_scale: aqs,
            antiquant_offset: aqo,
            key_antiquant_scale: kqs,
            key_antiquant_offset: kqo,
            value_antiquant_scale: vqs,
            value_antiquant_offset: vqo,
            ..self
        }
    }

    /// Every tensor given, in the order of [`Self::map`].
    pub fn all(&self) -> Vec<&T> {
        let (k, v) = self.kv.as_ref().into_pair();
        let mut all = vec![&self.query, k, v];
        all.extend(self.learnable_sink.as_ref());
        all.extend(self.optional().into_iter().flatten());
        all
    }

    /// Whether an antiquant is given (the Burn API's int8 KV, which travels as floats).
    pub fn quantised(&self) -> bool {
        self.antiquant_scale.is_some() || self.key_antiquant_scale.is_some()
    }

    /// The call's shapes, each tensor's through `shape`; `kv_int8`: whether key/value hold
    /// int8 values (the Burn API's float KV: [`Self::quantised`]).
    pub fn shapes(&self, mut shape: impl FnMut(&T) -> Vec<usize>, kv_int8: bool) -> FiaShapes {
        let mut opt = |t: &Option<T>| t.as_ref().map(&mut shape);
        FiaShapes {
            learnable_sink: opt(&self.learnable_sink),
            atten_mask: opt(&self.atten_mask),
            pse_shift: opt(&self.pse_shift),
            antiquant_scale: opt(&self.antiquant_scale),
            antiquant_offset: opt(&self.antiquant_offset),
            key_antiquant_scale: opt(&self.key_antiquant_scale),
            key_antiquant_offset: opt(&self.key_antiquant_offset),
            value_antiquant_scale: opt(&self.value_antiquant_scale),
            value_antiquant_offset: opt(&self.value_antiquant_offset),
            query: shape(&self.query),
            kv: self.kv.shapes(&mut shape),
            kv_int8,
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
