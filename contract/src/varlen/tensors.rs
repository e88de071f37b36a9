//! The tensors of one varlen call, generic over the tensor kind: the one carrier every layer
//! passes — Burn float primitives in the ops trait and `Autodiff`, `&aclTensor` handles in the
//! aclnn call builder. A new tensor input is one field here (and its shape in
//! [`super::VarlenShapes`]); every layer maps the carrier with [`VarlenInputs::map`] instead
//! of copying it field by field.

/// Inputs of the varlen forward (`aclnnFlashAttentionVarLenScoreV5`).
#[derive(Debug, Clone)]
pub struct VarlenInputs<T> {
    /// `query` `[Tq, N, D]`.
    pub query: T,
    /// `key` `[Tkv, Nkv, D]`.
    pub key: T,
    /// `value` `[Tkv, Nkv, Dv]`.
    pub value: T,
    /// `sink` `[N]` (f32 logits, unscaled).
    pub sink: Option<T>,
    /// `realShift`: an external pse (pseType 0 or 1) in the query's dtype, either the flat
    /// `[pseTotalLen]` (per sequence `[N, Sq_b, Skv_b]`, concatenated; under `Autodiff` it
    /// receives `dpse`) or CANN's ALiBi-compressed `[1|B, N, 1024, maxSkv]` (the last 1024
    /// rows of a Toeplitz ALiBi bias; not differentiated). It stays where it is (on the device
    /// for a device backend).
    pub pse: Option<T>,
    /// `attenMask` of an explicit mask (the spec's `atten_mask` is [`super::MaskSpec::Dense`];
    /// sparse modes 0 and 1): `[maxSq, maxSkv]` or `[B|1, N|1, maxSq, maxSkv]`, a float tensor
    /// holding 0 (attend) or 1 (masked). A device backend turns it into the op's mask dtype on
    /// the device; it is not differentiated. CANN's compressed masks are no tensor of the
    /// caller's (their content is fixed by the mode).
    pub atten_mask: Option<T>,
    /// `realShift` as ALiBi slopes (pseType 2 or 3), `[N]` or `[B, N]`: the op builds the bias
    /// `−slope·|Δ|` (or `−slope·√|Δ|`) itself. A field of its own rather than [`Self::pse`]:
    /// slopes are read as FLOAT whatever the query's dtype, are never differentiated, and the
    /// spec's `pseType` must agree with which of the two is given. A device backend casts them
    /// to FLOAT on the device if needed. At most one of `pse` and `alibi_slopes` is given (both
    /// are the op's one `realShift`).
    pub alibi_slopes: Option<T>,
    /// `dropMask`, read when `keepProb < 1`: CANN's bit-packed keep mask (bit `e % 8` of byte
    /// `e / 8` keeps score element `e`, LSB first; [`crate::dropout`]) as a 1-D float tensor
    /// holding the byte values 0..=255 (exact in f32, f16 and bf16), at least
    /// `⌈N·Σ Sq_b·Skv_b / 8⌉` long. A device backend casts it to UINT8 on the device; not
    /// differentiated.
    pub drop_mask: Option<T>,
}

impl<T> VarlenInputs<T> {
    /// Query, key and value; no optional input (set the fields that apply).
    pub fn new(query: T, key: T, value: T) -> Self {
        Self {
            query,
            key,
            value,
            sink: None,
            pse: None,
            atten_mask: None,
            alibi_slopes: None,
            drop_mask: None,
        }
    }

    /// Each tensor through `f`, in the order query, key, value, sink, pse, attenMask, ALiBi
    /// slopes, dropMask.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> VarlenInputs<U> {
        VarlenInputs {
            query: f(self.query),
            key: f(self.key),
            value: f(self.value),
            sink: self.sink.map(&mut f),
            pse: self.pse.map(&mut f),
            atten_mask: self.atten_mask.map(&mut f),
            alibi_slopes: self.alibi_slopes.map(&mut f),
            drop_mask: self.drop_mask.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> VarlenInputs<&T> {
        VarlenInputs {
            query: &self.query,
            key: &self.key,
            value: &self.value,
            sink: self.sink.as_ref(),
            pse: self.pse.as_ref(),
            atten_mask: self.atten_mask.as_ref(),
            alibi_slopes: self.alibi_slopes.as_ref(),
            drop_mask: self.drop_mask.as_ref(),
        }
    }

    /// Every tensor given, in the order of [`Self::map`].
    pub fn all(&self) -> Vec<&T> {
        let mut v = vec![&self.query, &self.key, &self.value];
        v.extend(self.sink.as_ref());
        v.extend(self.pse.as_ref());
        v.extend(self.atten_mask.as_ref());
        v.extend(self.alibi_slopes.as_ref());
        v.extend(self.drop_mask.as_ref());
        v
    }
}

/// Outputs of the varlen forward.
#[derive(Debug, Clone)]
pub struct VarlenOutputs<T> {
    /// `attentionOut` `[Tq, N, Dv]`.
    pub attention_out: T,
    /// `softmaxMax` `[Tq, N, 8]` in the spec's `softmaxOutLayout`.
    pub softmax_max: T,
    /// `softmaxSum` `[Tq, N, 8]`.
    pub softmax_sum: T,
}

impl<T> VarlenOutputs<T> {
    /// Each tensor through `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> VarlenOutputs<U> {
        VarlenOutputs {
            attention_out: f(self.attention_out),
            softmax_max: f(self.softmax_max),
            softmax_sum: f(self.softmax_sum),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> VarlenOutputs<&T> {
        VarlenOutputs {
            attention_out: &self.attention_out,
            softmax_max: &self.softmax_max,
            softmax_sum: &self.softmax_sum,
        }
    }
}

/// Inputs of the varlen backward (`aclnnFlashAttentionUnpaddingScoreGradV5`): the forward's
/// inputs, its outputs and `dy`.
#[derive(Debug, Clone)]
pub struct VarlenGradInputs<T> {
    /// The forward's inputs.
    pub inputs: VarlenInputs<T>,
    /// `dy` `[Tq, N, Dv]`.
    pub dy: T,
    /// `attentionIn`: the forward's `attentionOut`.
    pub attention_in: T,
    /// The forward's `softmaxMax`.
    pub softmax_max: T,
    /// The forward's `softmaxSum`.
    pub softmax_sum: T,
}

impl<T> VarlenGradInputs<T> {
    /// Each tensor through `f`: the forward's inputs first, then dy, attentionIn, softmaxMax,
    /// softmaxSum.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> VarlenGradInputs<U> {
        VarlenGradInputs {
            inputs: self.inputs.map(&mut f),
            dy: f(self.dy),
            attention_in: f(self.attention_in),
            softmax_max: f(self.softmax_max),
            softmax_sum: f(self.softmax_sum),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> VarlenGradInputs<&T> {
        VarlenGradInputs {
            inputs: self.inputs.as_ref(),
            dy: &self.dy,
            attention_in: &self.attention_in,
            softmax_max: &self.softmax_max,
            softmax_sum: &self.softmax_sum,
        }
    }
}

/// Outputs of the varlen backward.
#[derive(Debug, Clone)]
pub struct VarlenGrads<T> {
    /// `dqOut`.
    pub dq: T,
    /// `dkOut`.
    pub dk: T,
    /// `dvOut`.
    pub dv: T,
    /// `dpseOut`, `[pseTotalLen]` (laid out as the pse), when the call has a flat external pse
    /// ([`VarlenInputs::pse`], pseType 0/1): dS for pseType 0, scale·dS for pseType 1. The
    /// ALiBi-compressed pse and ALiBi slopes are not differentiated.
    pub dpse: Option<T>,
    /// `dsinkOut`, when a sink was given.
    pub dsink: Option<T>,
}

impl<T> VarlenGrads<T> {
    /// Each tensor through `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> VarlenGrads<U> {
        VarlenGrads {
            dq: f(self.dq),
            dk: f(self.dk),
            dv: f(self.dv),
            dpse: self.dpse.map(&mut f),
            dsink: self.dsink.map(f),
        }
    }

    /// The same carrier over references.
    pub fn as_ref(&self) -> VarlenGrads<&T> {
        VarlenGrads {
            dq: &self.dq,
            dk: &self.dk,
            dv: &self.dv,
            dpse: self.dpse.as_ref(),
            dsink: self.dsink.as_ref(),
        }
    }
}
