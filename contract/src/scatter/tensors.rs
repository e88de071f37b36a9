//! The tensors of one cache scatter, generic over the tensor kind: the one carrier the ops
//! trait (Burn float primitives) and the aclnn call builder (`&aclTensor` handles) share.

/// Inputs of the cache scatter (`aclnnScatterPaKvCache`).
#[derive(Debug, Clone)]
pub struct ScatterInputs<T> {
    /// `key` `[T, N, Dk]` (Nct: the strided storage).
    pub key: T,
    /// `value` `[T, N, Dv]`, `None` for key-only.
    pub value: Option<T>,
    /// `keyCacheRef`.
    pub key_cache: T,
    /// `valueCacheRef`, `None` for key-only.
    pub value_cache: Option<T>,
}

impl<T> ScatterInputs<T> {
    /// Each tensor through `f`, in the order key, value, key cache, value cache.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> ScatterInputs<U> {
        ScatterInputs {
            key: f(self.key),
            value: self.value.map(&mut f),
            key_cache: f(self.key_cache),
            value_cache: self.value_cache.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> ScatterInputs<&T> {
        ScatterInputs {
            key: &self.key,
            value: self.value.as_ref(),
            key_cache: &self.key_cache,
            value_cache: self.value_cache.as_ref(),
        }
    }
}

/// The updated caches.
#[derive(Debug, Clone)]
pub struct ScatterOutputs<T> {
    /// `keyCacheRef` after the scatter.
    pub key_cache: T,
    /// `valueCacheRef` after the scatter.
    pub value_cache: Option<T>,
}

impl<T> ScatterOutputs<T> {
    /// Each tensor through `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> ScatterOutputs<U> {
        ScatterOutputs {
            key_cache: f(self.key_cache),
            value_cache: self.value_cache.map(f),
        }
    }
}
