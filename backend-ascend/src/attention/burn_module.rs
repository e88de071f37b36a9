//! Burn's `ModuleOps::attention` on `Ascend`: one `aclnnPromptFlashAttentionV3` launch where
//! CANN computes exactly what Burn's composite (`burn_backend::ops::attention::attention_fallback`)
//! computes, Burn's composite over this backend's native ops otherwise (counted as
//! `attention_composite` in [`crate::fallback_counts`]).
//!
//! Burn's semantics, read from `attention_fallback`: `s = scale·QKᵀ` (scale default `1/√D`),
//! `softcap·tanh(s/softcap)` if asked, `−∞` where the bool mask is `true` or (causal) where
//! `j > i + Sk − Sq` (aligned bottom-right), then `+ attn_bias`, then a softmax that gives a
//! fully masked row zeros, then `·V`. PFA's (spec §5, reference `aclnnPromptFlashAttentionV3`):
//! `s = scaleValue·QKᵀ + pseShift` — the bias after the scale, as in Burn — masked scores
//! replaced by −FLT_MAX where `attenMask` is 1 (`true` = masked, Burn's polarity); sparse mode 3
//! masks `j > i + Skv − Sq` (bottom-right, Burn's alignment); innerPrecise 2 zeroes rows
//! whose used mask part is all 1 (Burn's fully masked row). So the call is:
//!
//! - layout BNSD, `numHeads = N`, `numKeyValueHeads = 1` for a key/value of one head that Burn
//!   broadcasts over the query heads, `scaleValue` = Burn's scale, `innerPrecise = 2`;
//! - no mask, not causal: sparse mode 0 without a mask;
//! - causal without a mask: sparse mode 3 with CANN's compressed 2048×2048 mask;
//! - a bool mask (OR-ed on the device with the causal mask `[1, 1, Sq, Sk]` if causal, one
//!   `aclnnLogicalOr`): sparse mode 1 (the mask alone). PFA's mask has no head axis (`(B|1, 1,
//!   Sq, Sk)`), so a mask shared by the heads (one head, or a head stride of 0, e.g. from
//!   `expand`) is passed as that view; a mask that differs per head folds the heads into the
//!   batch (`[B·N, 1, S, D]` views, one head each; a copy first for non-contiguous inputs);
//! - `attn_bias` `[B|1, N|1, Sq, Sk]` is `pseShift` (broadcast over heads as a stride-0 view).
//!
//! Burn's composite runs instead (counted) where PFA cannot give Burn's answer:
//! - `softcap` (PFA has no softcap);
//! - a value head dim other than the query's (PFA needs `Dv = D` outside TND);
//! - dtypes other than F16/BF16 in all of query, key, value and bias (CANN's PFA takes
//!   FLOAT16/BFLOAT16/INT8 only — the simulation also runs FLOAT, real CANN refuses it — and a
//!   pse in the query's dtype), or a mask stored other than as native bool;
//! - shapes PFA does not take or Burn only broadcasts: an empty dimension, key/value batch or
//!   heads differing from the query's other than one broadcast kv head (and that one not with
//!   a per-head mask), mask/bias shapes other than `[B|1, N|1, Sq, Sk]`, and whatever the
//!   contract's PFA validation refuses (N > 256, D > 512, B (or B·N when folded) > 65536, or >
//!   128 when D is not a multiple of 16, a scale that is not a finite f32);
//! - tensors on different devices, or a CANN without `aclnnPromptFlashAttentionV3` (V1 has no
//!   pse, sparse mode or innerPrecise).
//!
//! Under `Autodiff<Ascend>` none of this runs: Burn's autodiff backend implements `attention`
//! as the composite over its own (differentiable) ops, so training keeps Burn's gradients.
//!
//! Not equal by construction and not checked (the values are on the device): a bias holding
//! ±∞ or NaN. Burn adds the bias to a masked `−∞` (a `+∞` bias gives NaN) where CANN overwrites
//! the masked score, and a row that only the bias masks (`−∞` everywhere) is zeros in Burn but
//! not an invalid row for CANN, which only looks at the mask. With finite biases both give a
//! masked position weight 0 and a fully masked row zeros. (The simulation zeroes fully masked
//! rows whatever innerPrecise says; that CANN does so with innerPrecise 2 is the spec's §2
//! reading of the kernel, unconfirmed on hardware here.)

use burn_ascend_cann::acl::aclnn;
use burn_ascend_contract::prompt::{
    PfaLayout, PfaSparseMode, PromptMaskKind, PromptShapes, PromptSpec, INT_MAX_TOKENS,
};
use burn_backend::ops::{AttentionModuleOptions, BoolTensorOps};
use burn_backend::{BoolStore, DType, Shape, TensorData};

use super::common::{compressed_prompt_mask, view_handle};
use crate::device::{runtime, AscendDevice};
use crate::fallback::count;
use crate::tensor::{fail, AscendTensor};
use crate::tensor_ops::base::{expand, reshape};
use crate::Ascend;

/// The counter (in [`crate::fallback_counts`]) of calls that run Burn's composite.
pub const COMPOSITE: &str = "attention_composite";

/// Label of the call in panics.
const OP: &str = "attention";

/// Burn's `ModuleOps::attention` for `Ascend` (see the module docs).
pub(crate) fn attention(
    query: AscendTensor,
    key: AscendTensor,
    value: AscendTensor,
    mask: Option<AscendTensor>,
    attn_bias: Option<AscendTensor>,
    options: AttentionModuleOptions,
) -> AscendTensor {
    match plan(
        &query,
        &key,
        &value,
        mask.as_ref(),
        attn_bias.as_ref(),
        &options,
    ) {
        Some(p) => launch(p, query, key, value, mask, attn_bias),
        None => {
            count(COMPOSITE);
            burn_backend::ops::attention::attention_fallback::<Ascend>(
                query, key, value, mask, attn_bias, options,
            )
        }
    }
}

/// A call PFA takes: the dimensions and attributes.
struct Plan {
    device: AscendDevice,
    /// `[B, N, Sq, Sk, D]` of Burn's call.
    dims: [usize; 5],
    /// Key/value heads (N, or 1 broadcast).
    kv_heads: usize,
    scale: f64,
    causal: bool,
    /// The mask differs per head: heads folded into the batch.
    fold: bool,
}

fn dims4(t: &AscendTensor) -> Option<[usize; 4]> {
    <[usize; 4]>::try_from(&t.shape[..]).ok()
}

/// `Some` when PFA computes Burn's answer for this call (module docs), else `None`.
fn plan(
    q: &AscendTensor,
    k: &AscendTensor,
    v: &AscendTensor,
    mask: Option<&AscendTensor>,
    bias: Option<&AscendTensor>,
    options: &AttentionModuleOptions,
) -> Option<Plan> {
    if options.softcap.is_some() {
        return None;
    }
    let dtype = q.dtype;
    let floats = [Some(k), Some(v), bias];
    if !matches!(dtype, DType::F16 | DType::BF16)
        || floats.iter().flatten().any(|t| t.dtype != dtype)
        || mask.is_some_and(|m| m.dtype != DType::Bool(BoolStore::Native))
    {
        return None;
    }
    let device = q.device();
    let mut all = vec![k, v];
    all.extend(mask);
    all.extend(bias);
    if all.iter().any(|t| t.device() != device) {
        return None;
    }
    let [b, n, sq, d] = dims4(q)?;
    let [kb, nkv, sk, kd] = dims4(k)?;
    if dims4(v)? != [kb, nkv, sk, kd]
        || kb != b
        || kd != d
        || (nkv != n && nkv != 1)
        || [b, n, sq, sk, d].contains(&0)
    {
        return None;
    }
    let fits = |t: &AscendTensor| {
        dims4(t).is_some_and(|[tb, tn, ts, tk]| {
            (tb == b || tb == 1) && (tn == n || tn == 1) && ts == sq && tk == sk
        })
    };
    if !mask.is_none_or(fits) || !bias.is_none_or(fits) {
        return None;
    }
    let fold = mask.is_some_and(|m| n > 1 && m.shape[1] == n && m.strides[1] != 0);
    if fold && nkv != n {
        return None;
    }
    let scale = options.scale.unwrap_or(1.0 / (d as f64).sqrt());
    // The contract's PFA rules on the shapes as launched (the mask and pse are shaped here to
    // fit them, so only query/key/value and the attributes are left to check).
    let (rows, heads, kv_heads) = if fold { (b * n, 1, 1) } else { (b, n, nkv) };
    let mut spec = PromptSpec::new(heads, scale, PfaLayout::Bnsd);
    spec.num_key_value_heads = kv_heads;
    spec.inner_precise = 2;
    if options.is_causal && mask.is_none() {
        spec.sparse_mode = PfaSparseMode::RightDownCausal.as_attr();
        spec.atten_mask = PromptMaskKind::Compressed;
    }
    let shapes = PromptShapes::qkv(
        vec![rows, heads, sq, d],
        vec![rows, kv_heads, sk, d],
        vec![rows, kv_heads, sk, d],
    );
    spec.validate(&shapes).ok()?;
    // V1 has no pseShift, sparse mode or innerPrecise.
    crate::device::try_runtime(&device).ok()?.api().pfa_v3?;
    Some(Plan {
        device,
        dims: [b, n, sq, sk, d],
        kv_heads: nkv,
        scale,
        causal: options.is_causal,
        fold,
    })
}

/// Burn's causal mask `[1, 1, Sq, Sk]` (`true` where `j > i + Sk − Sq`), uploaded.
fn causal_mask(sq: usize, sk: usize, device: &AscendDevice) -> AscendTensor {
    let offset = sk as i64 - sq as i64;
    let m: Vec<bool> = (0..sq * sk)
        .map(|x| (x % sk) as i64 > (x / sk) as i64 + offset)
        .collect();
    AscendTensor::from_data(TensorData::new(m, [1, 1, sq, sk]), device)
}

/// `t` `[tb, tn, Sq, Sk]` with its heads folded into the batch: `[B·N, 1, Sq, Sk]`.
fn fold_heads(t: AscendTensor, [b, n, sq, sk]: [usize; 4]) -> AscendTensor {
    let full = expand(t, Shape::new([b, n, sq, sk]));
    reshape(full, Shape::new([b * n, 1, sq, sk]))
}

fn launch(
    p: Plan,
    q: AscendTensor,
    k: AscendTensor,
    v: AscendTensor,
    mask: Option<AscendTensor>,
    bias: Option<AscendTensor>,
) -> AscendTensor {
    let [b, n, sq, sk, d] = p.dims;
    let scores = [b, n, sq, sk];
    // The mask as PFA reads it: no head axis.
    let mask = mask.map(|m| {
        if p.fold {
            m
        } else {
            let shape = Shape::new([m.shape[0], 1, sq, sk]);
            let strides = vec![m.strides[0], 0, m.strides[2], m.strides[3]];
            m.view(shape, strides, m.offset)
        }
    });
    let mask = match (mask, p.causal) {
        (Some(m), true) => Some(<Ascend as BoolTensorOps<Ascend>>::bool_or(
            m,
            causal_mask(sq, sk, &p.device),
        )),
        (m, _) => m,
    };
    let (q, k, v, mask, bias, heads, kv_heads) = if p.fold {
        let rows = |t: AscendTensor, s: usize| reshape(t, Shape::new([b * n, 1, s, d]));
        (
            rows(q, sq),
            rows(k, sk),
            rows(v, sk),
            mask.map(|m| fold_heads(m, scores)),
            bias.map(|t| fold_heads(t, scores)),
            1,
            1,
        )
    } else {
        let bias = bias.map(|t| {
            let pb = t.shape[0];
            expand(t, Shape::new([pb, n, sq, sk]))
        });
        (q, k, v, mask, bias, n, p.kv_heads)
    };
    let sparse = match (&mask, p.causal) {
        (Some(_), _) => PfaSparseMode::AllMask,
        (None, true) => PfaSparseMode::RightDownCausal,
        (None, false) => PfaSparseMode::DefaultMask,
    };
    let rt = runtime(&p.device);
    let out = AscendTensor::alloc(q.shape.clone(), q.dtype, &p.device);
    {
        let compressed = if sparse == PfaSparseMode::RightDownCausal {
            Some(compressed_prompt_mask(&rt).unwrap_or_else(|e| fail(OP, e)))
        } else {
            None
        };
        let compressed = compressed
            .as_ref()
            .map(|c| c.as_ref().handle().unwrap_or_else(|e| fail(OP, e)));
        fn view(t: &AscendTensor) -> burn_ascend_cann::acl::Tensor<'_> {
            view_handle(t, OP)
        }
        let (qh, kh, vh, oh) = (view(&q), view(&k), view(&v), view(&out));
        let mh = mask.as_ref().map(view);
        let ph = bias.as_ref().map(view);
        aclnn::prompt(
            &rt,
            &aclnn::PromptArgs {
                query: &qh,
                key: &kh,
                value: &vh,
                pse_shift: ph.as_ref(),
                atten_mask: mh.as_ref().or(compressed.as_ref()),
                actual_seq_lengths: None,
                actual_seq_lengths_kv: None,
                deq_scale1: None,
                quant_scale1: None,
                deq_scale2: None,
                quant_scale2: None,
                quant_offset2: None,
                num_heads: heads as i64,
                scale_value: p.scale,
                pre_tokens: INT_MAX_TOKENS,
                next_tokens: INT_MAX_TOKENS,
                input_layout: PfaLayout::Bnsd.as_attr(),
                num_key_value_heads: kv_heads as i64,
                sparse_mode: sparse.as_attr(),
                inner_precise: 2,
                attention_out: &oh,
            },
        )
        .unwrap_or_else(|e| fail(OP, e));
    }
    if p.fold {
        reshape(out, Shape::new([b, n, sq, d]))
    } else {
        out
    }
}
