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

/// Inputs of incremental attention.
#[derive(Debug, Clone)]
pub struct IncreInputs<T> {
    /// `query` `(B, N, 1, D)`, `(B, 1, N, D)` or `(B, 1, H)`.
    pub query: T,
    /// `key` / `value`.
    pub kv: IncreKv<T>,
}

impl<T> IncreInputs<T> {
    /// Each tensor through `f`, in the order query, keys, values.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> IncreInputs<U> {
        IncreInputs {
            query: f(self.query),
            kv: self.kv.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> IncreInputs<&T> {
        IncreInputs {
            query: &self.query,
            kv: self.kv.as_ref(),
        }
    }

    /// Every tensor given, in the order of [`Self::map`].
    pub fn all(&self) -> Vec<&T> {
        let mut v = vec![&self.query];
        let (k, val) = self.kv.as_ref().into_lists();
        v.extend(k);
        v.extend(val);
        v
    }

    /// The call's shapes, each tensor's through `shape`; `kv_int8`: whether key/value hold
    /// int8 values (the Burn API's float KV: an antiquant is given).
    pub fn shapes(&self, mut shape: impl FnMut(&T) -> Vec<usize>, kv_int8: bool) -> IncreShapes {
        IncreShapes {
            query: shape(&self.query),
            kv: self.kv.shapes(&mut shape),
            kv_int8,
        }
    }
}
