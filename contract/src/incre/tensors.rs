//! The tensors of one incremental attention call, generic over the tensor kind: the one carrier
//! the ops trait (Burn float primitives), `Autodiff` and the aclnn call builder (`aclTensor`
//! handles, the lists made there) share. A new tensor input is one field here (and its shape in
//! [`super::IncreShapes`]); every layer maps the carrier with [`IncreInputs::map`].

use super::{IncreKvShapes, IncreShapes};

/// Key/value in one of IFA V4's three forms. int8 KV travels as float tensors holding the int8
/// values (exact), dequantised with the antiquant scale / offset.
#[derive(Debug, Clone)]
pub enum IncreKv<T> {
    /// One tensor each, `(B, S, H)`, `(B, S, N, D)` or `(B, N, S, D)` per `inputLayout`.
    Contiguous {
        /// `key`.
        key: T,
        /// `value`.
        value: T,
    },
    /// The tensor-list form: one `(1, S_b, …)` tensor per batch.
    List {
        /// `key[b]`.
        key: Vec<T>,
        /// `value[b]`.
        value: Vec<T>,
    },
    /// Page attention (the spec's `blocktable`): caches `(blocknum, blockSize, H)` or
    /// `(blocknum, Nkv, blockSize, D)`.
    Paged {
        /// The key cache.
        key_cache: T,
        /// The value cache.
        value_cache: T,
    },
}

impl<T> IncreKv<T> {
    /// Each tensor through `f`, keys before values.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> IncreKv<U> {
        match self {
            Self::Contiguous { key, value } => IncreKv::Contiguous {
                key: f(key),
                value: f(value),
            },
            Self::List { key, value } => IncreKv::List {
                key: key.into_iter().map(&mut f).collect(),
                value: value.into_iter().map(f).collect(),
            },
            Self::Paged {
                key_cache,
                value_cache,
            } => IncreKv::Paged {
                key_cache: f(key_cache),
                value_cache: f(value_cache),
            },
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> IncreKv<&T> {
        match self {
            Self::Contiguous { key, value } => IncreKv::Contiguous { key, value },
            Self::List { key, value } => IncreKv::List {
                key: key.iter().collect(),
                value: value.iter().collect(),
            },
            Self::Paged {
                key_cache,
                value_cache,
            } => IncreKv::Paged {
                key_cache,
                value_cache,
            },
        }
    }

    /// The keys and the values (one each, or one per batch), as the op's two tensor lists.
    pub fn into_lists(self) -> (Vec<T>, Vec<T>) {
        match self {
            Self::Contiguous { key, value } => (vec![key], vec![value]),
            Self::List { key, value } => (key, value),
            Self::Paged {
                key_cache,
                value_cache,
            } => (vec![key_cache], vec![value_cache]),
        }
    }

    /// The shapes of the form, each tensor's through `shape`.
    pub fn shapes(&self, mut shape: impl FnMut(&T) -> Vec<usize>) -> IncreKvShapes {
        match self {
            Self::Contiguous { key, value } => IncreKvShapes::Contiguous {
                key: shape(key),
                value: shape(value),
            },
            Self::List { key, value } => IncreKvShapes::List {
                key: key.iter().map(&mut shape).collect(),
                value: value.iter().map(shape).collect(),
            },
            Self::Paged {
                key_cache,
                value_cache,
            } => IncreKvShapes::Paged {
                key_cache: shape(key_cache),
                value_cache: shape(value_cache),
            },
        }
    }
}

/// Inputs of incremental attention. The optional ones are tensors like the query: on a device
/// backend they stay on the device (a mask travels as a float tensor holding 0/1, converted
/// there to the dtype the op takes).
#[derive(Debug, Clone)]
pub struct IncreInputs<T> {
    /// `query` `(B, N, 1, D)`, `(B, 1, N, D)` or `(B, 1, H)`.
    pub query: T,
    /// `key` / `value`.
    pub kv: IncreKv<T>,
    /// `attenMask` `(B, S)`, `(B, 1, S)` or `(B, 1, 1, S)`: non-zero = masked (score → −1e12).
    pub atten_mask: Option<T>,
    /// `pseShift` `(B|1, N, 1, S)`, added to the scaled scores.
    pub pse_shift: Option<T>,
    /// `antiquantScale` (int8 KV: `x = (x_int8 + offset) · scale`): `(2)` per tensor,
    /// `(2, Nkv, 1, D)` (BNSD), `(2, Nkv, D)` (BSND), `(2, H)` (BSH) per channel; row 0 is
    /// the key's, row 1 the value's.
    pub antiquant_scale: Option<T>,
    /// `antiquantOffset`: the scale's shape; absent = 0.
    pub antiquant_offset: Option<T>,
}

impl<T> IncreInputs<T> {
    /// Query and key/value only.
    pub fn new(query: T, kv: IncreKv<T>) -> Self {
        Self {
            query,
            kv,
            atten_mask: None,
            pse_shift: None,
            antiquant_scale: None,
            antiquant_offset: None,
        }
    }

    /// Each tensor through `f`, in the order query, keys, values, mask, pse, antiquant scale,
    /// antiquant offset.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> IncreInputs<U> {
        IncreInputs {
            query: f(self.query),
            kv: self.kv.map(&mut f),
            atten_mask: self.atten_mask.map(&mut f),
            pse_shift: self.pse_shift.map(&mut f),
            antiquant_scale: self.antiquant_scale.map(&mut f),
            antiquant_offset: self.antiquant_offset.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> IncreInputs<&T> {
        IncreInputs {
            query: &self.query,
            kv: self.kv.as_ref(),
            atten_mask: self.atten_mask.as_ref(),
            pse_shift: self.pse_shift.as_ref(),
            antiquant_scale: self.antiquant_scale.as_ref(),
            antiquant_offset: self.antiquant_offset.as_ref(),
        }
    }

    /// Every tensor given, in the order of [`Self::map`].
    pub fn all(&self) -> Vec<&T> {
        let mut v = vec![&self.query];
        let (k, val) = self.kv.as_ref().into_lists();
        v.extend(k);
        v.extend(val);
        v.extend(self.atten_mask.as_ref());
        v.extend(self.pse_shift.as_ref());
        v.extend(self.antiquant_scale.as_ref());
        v.extend(self.antiquant_offset.as_ref());
        v
    }

    /// The call's shapes, each tensor's through `shape`; `kv_int8`: whether key/value hold
    /// int8 values (on the Burn API, whose KV is float: whether an antiquant scale is given).
    pub fn shapes(&self, mut shape: impl FnMut(&T) -> Vec<usize>, kv_int8: bool) -> IncreShapes {
        IncreShapes {
            query: shape(&self.query),
            kv: self.kv.shapes(&mut shape),
            kv_int8,
            atten_mask: self.atten_mask.as_ref().map(&mut shape),
            pse_shift: self.pse_shift.as_ref().map(&mut shape),
            antiquant_scale: self.antiquant_scale.as_ref().map(&mut shape),
            antiquant_offset: self.antiquant_offset.as_ref().map(shape),
        }
    }
}
