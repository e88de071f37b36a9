//! The composite prompt attention: per batch, dense scores from Burn matmuls, the sparse mode's
//! mask built on the host from the same rule as the CPU reference and OR-ed with the dense
//! `attenMask` tensor where it lies (compared with 0 on its device), softmax, P·V. O(Sq·Skv)
//! memory per batch — the fallback every backend can run, not a fast path.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bool, Tensor, TensorData, TensorMetadata};

use burn_ascend_contract::prompt::PfaLayout;

use crate::common::tensor::{bnsd, expand_gqa, unwrap, wrap};
use crate::error::{AttnError, Result};
use crate::prompt::{PromptDims, PromptInputs, PromptSpec};

type T3<B> = Tensor<B, 3>;
type T4<B> = Tensor<B, 4>;

/// A validated dense mask tensor (0/1 floats) as `[1|B, rows, cols]`.
fn mask_3d<B: Backend>(m: FloatTensor<B>) -> T3<B> {
    let (mb, rows, cols) = match *m.shape().to_vec().as_slice() {
        [r, c] => (1, r, c),
        [b, r, c] | [b, _, r, c] => (b, r, c),
        _ => unreachable!("validated"),
    };
    wrap(B::float_reshape(m, [mb, rows, cols].into()))
}

/// Softmax over the last dim with excluded entries; fully excluded rows give 0.
pub(crate) fn masked_softmax<B: Backend>(s: T3<B>, masked: Option<Tensor<B, 3, Bool>>) -> T3<B> {
    let s = match &masked {
        Some(m) => s.mask_fill(m.clone(), f32::MIN),
        None => s,
    };
    let m = s.clone().max_dim(2);
    let e = (s - m).exp();
    let e = match masked {
        Some(mask) => e.mask_fill(mask, 0.0),
        None => e,
    };
    let l = e.clone().sum_dim(2);
    let l = l.clone().mask_fill(l.equal_elem(0.0), f32::MAX);
    e / l
}

/// One batch: query `[N, rows, D]`, key `[Nkv, skv, D]`, value `[Nkv, skv, Dv]` → `[N, rows, Dv]`.
#[allow(clippy::too_many_arguments)]
fn attend_batch<B: Backend>(
    spec: &PromptSpec,
    dims: &PromptDims,
    pse: Option<&T4<B>>,
    dense: Option<&T3<B>>,
    b: usize,
    (sq, skv): (usize, usize),
    q: T3<B>,
    k: T3<B>,
    v: T3<B>,
) -> T3<B> {
    let [n, rows, _] = q.dims();
    let device = q.device();
    if rows == 0 || skv == 0 {
        return T3::<B>::zeros([n, rows, dims.head_dim_v], &device);
    }
    let g = dims.num_heads / dims.kv_heads;
    let (k, v) = (expand_gqa(k, g), expand_gqa(v, g));
    let mut s = q.matmul(k.swap_dims(1, 2)).mul_scalar(spec.scale_value);
    if let Some(p) = pse {
        let bb = if p.dims()[0] == 1 { 0 } else { b };
        let p = p
            .clone()
            .narrow(0, bb, 1)
            .narrow(2, 0, rows)
            .narrow(3, 0, skv)
            .reshape([n, rows, skv]);
        s = s + p;
    }
    let masked: Vec<bool> = (0..rows)
        .flat_map(|i| (0..skv).map(move |j| (i, j)))
        .map(|(i, j)| i >= sq || spec.rule_masked(i, j, sq, skv))
        .collect();
    let rule = masked
        .iter()
        .any(|&x| x)
        .then(|| Tensor::<B, 3, Bool>::from_data(TensorData::new(masked, [1, rows, skv]), &device));
    // The dense mask's top-left [rows, skv] corner of batch b, compared where it lies.
    let dense = dense.map(|m| {
        let bb = if m.dims()[0] == 1 { 0 } else { b };
        m.clone()
            .narrow(0, bb, 1)
            .narrow(1, 0, rows)
            .narrow(2, 0, skv)
            .not_equal_elem(0.0)
    });
    let mask = match (rule, dense) {
        (Some(r), Some(d)) => Some(r.bool_or(d)),
        (r, d) => r.or(d),
    }
    .map(|m| m.expand([n, rows, skv]));
    masked_softmax(s, mask).matmul(v)
}

/// Composite `aclnnPromptFlashAttentionV3` (float output; int8 output is host-only).
pub fn prompt_fwd<B: Backend>(
    inputs: PromptInputs<FloatTensor<B>>,
    spec: &PromptSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&crate::prompt::shapes(&inputs))?;
    unsupported_on_burn(spec)?;
    let device = B::float_device(&inputs.query);
    let (n, nkv, dv) = (dims.num_heads, dims.kv_heads, dims.head_dim_v);
    let pse: Option<T4<B>> = inputs.pse_shift.map(wrap);
    let dense = inputs.atten_mask.map(mask_3d::<B>);
    let seqs = dims.sequences(spec);
    // One batch's attention, whichever layout its slices come from.
    let attend = |b, lens, qb, kb, vb| {
        attend_batch(
            spec,
            &dims,
            pse.as_ref(),
            dense.as_ref(),
            b,
            lens,
            qb,
            kb,
            vb,
        )
    };
    if dims.layout == PfaLayout::Tnd {
        let (q, k, v): (T3<B>, T3<B>, T3<B>) =
            (wrap(inputs.query), wrap(inputs.key), wrap(inputs.value));
        let mut outs = Vec::new();
        let mut written = 0;
        for (b, &(qo, sq, ko, skv)) in seqs.iter().enumerate() {
            written = qo + sq;
            if sq == 0 {
                continue;
            }
            if skv == 0 {
                // Burn cannot narrow to length 0: an empty KV gives zeros.
                outs.push(T3::<B>::zeros([sq, n, dv], &device));
                continue;
            }
            let qb = q.clone().narrow(0, qo, sq).swap_dims(0, 1);
            let kb = k.clone().narrow(0, ko, skv).swap_dims(0, 1);
            let vb = v.clone().narrow(0, ko, skv).swap_dims(0, 1);
            let o = attend(b, (sq, skv), qb, kb, vb);
            outs.push(o.swap_dims(0, 1));
        }
        if written < dims.q_seq {
            outs.push(T3::<B>::zeros([dims.q_seq - written, n, dv], &device));
        }
        let out = if outs.is_empty() {
            T3::<B>::zeros([dims.q_seq, n, dv], &device)
        } else {
            Tensor::cat(outs, 0)
        };
        return Ok(unwrap(out));
    }
    let q = bnsd(inputs.query, dims.layout, n);
    let k = bnsd(inputs.key, dims.layout, nkv);
    let v = bnsd(inputs.value, dims.layout, nkv);
    let (qs, d) = (dims.q_seq, dims.head_dim);
    let mut outs = Vec::with_capacity(dims.batch);
    for (b, &(_, sq, _, skv)) in seqs.iter().enumerate() {
        if skv == 0 || qs == 0 {
            // Burn cannot narrow to length 0: an empty KV gives zeros.
            outs.push(T4::<B>::zeros([1, n, qs, dv], &device));
            continue;
        }
        let qb = q.clone().narrow(0, b, 1).reshape([n, qs, d]);
        let kb = k
            .clone()
            .narrow(0, b, 1)
            .narrow(2, 0, skv)
            .reshape([nkv, skv, d]);
        let vb = v
            .clone()
            .narrow(0, b, 1)
            .narrow(2, 0, skv)
            .reshape([nkv, skv, dv]);
        let o = attend(b, (sq, skv), qb, kb, vb);
        outs.push(o.reshape([1, n, qs, dv]));
    }
    let out = if outs.is_empty() {
        T4::<B>::zeros([0, n, qs, dv], &device)
    } else {
        Tensor::cat(outs, 0)
    };
    Ok(match dims.layout {
        PfaLayout::Bnsd => unwrap(out),
        PfaLayout::Bsnd | PfaLayout::BnsdBsnd => unwrap(out.swap_dims(1, 2)),
        PfaLayout::Bsh => unwrap(out.swap_dims(1, 2).reshape([dims.batch, qs, n * dv])),
        PfaLayout::Tnd => unreachable!(),
    })
}

/// What the Burn-level API refuses (host-only features).
pub(crate) fn unsupported_on_burn(spec: &PromptSpec) -> Result<()> {
    if spec.post_quant.is_some() {
        return Err(AttnError::Unsupported(
            "int8 attentionOut (quantScale2) on the Burn API: Burn float tensors cannot hold it; \
             use the host path (burn-ascend run prompt)"
                .into(),
        ));
    }
    Ok(())
}
