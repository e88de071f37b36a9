//! The tensors of one prompt attention call, generic over the tensor kind: the one carrier the
//! ops trait (Burn float primitives) and the aclnn call builder (`&aclTensor` handles) share.

/// Inputs of prompt attention, in the spec's `inputLayout` (rank 3 for BSH/TND, else 4).
#[derive(Debug, Clone)]
pub struct PromptInputs<T> {
    /// `query`.
    pub query: T,
    /// `key`.
    pub key: T,
    /// `value`.
    pub value: T,
}

impl<T> PromptInputs<T> {
    /// Each tensor through `f`, in the order query, key, value.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PromptInputs<U> {
        PromptInputs {
            query: f(self.query),
            key: f(self.key),
            value: f(self.value),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> PromptInputs<&T> {
        PromptInputs {
            query: &self.query,
            key: &self.key,
            value: &self.value,
        }
    }
}
