//! The tensors of one prompt attention call, generic over the tensor kind: the one carrier the
//! ops trait (Burn float primitives) and the aclnn call builder (`&aclTensor` handles) share.

/// Inputs of prompt attention, in the spec's `inputLayout` (rank 3 for BSH/TND, else 4).
///
/// The tensor-valued optional inputs stay tensors too (on the device for a device backend):
/// the spec only says which mask kind the call has.
#[derive(Debug, Clone)]
pub struct PromptInputs<T> {
    /// `query`.
    pub query: T,
    /// `key`.
    pub key: T,
    /// `value`.
    pub value: T,
    /// `attenMask` of a dense mask (the spec's `atten_mask` is
    /// [`super::PromptMaskKind::Dense`]; sparse modes 0 and 1): shape `(Sq, Skv)`,
    /// `(1|B, Sq, Skv)` or `(1|B, 1, Sq, Skv)`, a float tensor holding 0 (attend) or 1
    /// (masked). A device backend turns it into the op's BOOL on the device. CANN's
    /// compressed mask (modes 2–4) is no tensor of the caller's: its content is fixed.
    pub atten_mask: Option<T>,
    /// `pseShift` `(1|B, N, Qs, KVs)` (`Qs >=` query S, `KVs >=` key S), added to the scaled
    /// scores; a device backend uses it in the query's dtype.
    pub pse_shift: Option<T>,
}

impl<T> PromptInputs<T> {
    /// Each tensor through `f`, in the order query, key, value, attenMask, pseShift.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PromptInputs<U> {
        PromptInputs {
            query: f(self.query),
            key: f(self.key),
            value: f(self.value),
            atten_mask: self.atten_mask.map(&mut f),
            pse_shift: self.pse_shift.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> PromptInputs<&T> {
        PromptInputs {
            query: &self.query,
            key: &self.key,
            value: &self.value,
            atten_mask: self.atten_mask.as_ref(),
            pse_shift: self.pse_shift.as_ref(),
        }
    }

    /// Every tensor given, in the order of [`Self::map`].
    pub fn all(&self) -> Vec<&T> {
        let mut v = vec![&self.query, &self.key, &self.value];
        v.extend(self.atten_mask.as_ref());
        v.extend(self.pse_shift.as_ref());
        v
    }
}
