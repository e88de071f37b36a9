//! The composite incremental attention: per batch, gather the valid KV window (contiguous,
//! tensor list, or paged through the block table with `select`), dequantise int8 values,
//! scores from Burn matmuls, the mask *replacing* scores with −1e12 (spec §5), softmax, P·V.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bool, Int, Tensor, TensorData, TensorMetadata};

use burn_ascend_contract::incre::{IfaLayout, PagedLayout, IFA_MASKED_SCORE};

use crate::backend::{IncreInputs, IncreKv};
use crate::error::{AttnError, Result};
use crate::incre::{IncreDims, IncreShapes, IncreSpec, KvDims};
use crate::prompt::composite::{expand_gqa, unwrap, wrap};

type T3<B> = Tensor<B, 3>;

fn dims_of<B: Backend>(t: &FloatTensor<B>) -> Vec<usize> {
    t.shape().to_vec()
}

/// The shapes of a call's tensors. In the Burn API int8 KV travels as float tensors holding the
/// int8 values, so `kv_int8` is "antiquantScale is given".
pub fn shapes<B: Backend>(i: &IncreInputs<FloatTensor<B>>, spec: &IncreSpec) -> IncreShapes {
    i.shapes(dims_of::<B>, spec.antiquant.is_some())
}

/// `[Nkv, S, D]` rows of batch `b` from a contiguous `(B, …)` tensor in the input layout.
fn heads_major<B: Backend>(t: &FloatTensor<B>, layout: IfaLayout, b: usize, nkv: usize) -> T3<B> {
    match layout {
        IfaLayout::Bsh => {
            let t: T3<B> = wrap(t.clone());
            let [_, s, h] = t.dims();
            t.narrow(0, b, 1).reshape([s, nkv, h / nkv]).swap_dims(0, 1)
        }
        IfaLayout::Bsnd => {
            let t: Tensor<B, 4> = wrap(t.clone());
            let [_, s, n, d] = t.dims();
            t.narrow(0, b, 1).reshape([s, n, d]).swap_dims(0, 1)
        }
        IfaLayout::Bnsd => {
            let t: Tensor<B, 4> = wrap(t.clone());
            let [_, n, s, d] = t.dims();
            t.narrow(0, b, 1).reshape([n, s, d])
        }
    }
}

/// `[Nkv, len, D]`: the first `len` tokens of batch `b` from a paged cache.
pub(crate) fn paged_rows<B: Backend>(
    cache: &FloatTensor<B>,
    layout: PagedLayout,
    ids: &[i32],
    len: usize,
    nkv: usize,
) -> T3<B> {
    let device = B::float_device(cache);
    let idx = Tensor::<B, 1, Int>::from_data(
        TensorData::new(
            ids.iter().map(|&x| x as i64).collect::<Vec<_>>(),
            [ids.len()],
        ),
        &device,
    );
    match layout {
        PagedLayout::Bsh => {
            let c: T3<B> = wrap(cache.clone());
            let [_, bs, h] = c.dims();
            c.select(0, idx)
                .reshape([ids.len() * bs, nkv, h / nkv])
                .narrow(0, 0, len)
                .swap_dims(0, 1)
        }
        PagedLayout::Bnsd => {
            let c: Tensor<B, 4> = wrap(cache.clone());
            let [_, n, bs, d] = c.dims();
            c.select(0, idx)
                .swap_dims(0, 1)
                .reshape([n, ids.len() * bs, d])
                .narrow(1, 0, len)
        }
    }
}

/// `(x + offset) · scale` for K (`which = 0`) or V (`which = 1`), `x` `[Nkv, len, D]`.
fn dequant<B: Backend>(spec: &IncreSpec, x: T3<B>, which: usize) -> T3<B> {
    let Some(aq) = &spec.antiquant else {
        return x;
    };
    let [nkv, _, d] = x.dims();
    let device = x.device();
    if !spec.antiquant_per_channel() {
        let off = aq.offset.as_ref().map_or(0.0, |o| o[which]);
        return x.add_scalar(off).mul_scalar(aq.scale[which]);
    }
    let c = nkv * d;
    let pick = |v: &[f32]| {
        T3::<B>::from_data(
            TensorData::new(v[which * c..(which + 1) * c].to_vec(), [nkv, 1, d]),
            &device,
        )
    };
    let x = match &aq.offset {
        Some(o) => x + pick(o),
        None => x,
    };
    x * pick(&aq.scale)
}

/// Composite `aclnnIncreFlashAttentionV4` (float output; int8 output is host-only).
pub fn incre_fwd<B: Backend>(
    inputs: IncreInputs<FloatTensor<B>>,
    spec: &IncreSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&shapes::<B>(&inputs, spec))?;
    if spec.post_quant.is_some() {
        return Err(AttnError::Unsupported(
            "int8 attentionOut (quantScale2) on the Burn API: Burn float tensors cannot hold it; \
             use the host path (burn-ascend run incre)"
                .into(),
        ));
    }
    let IncreDims {
        batch,
        num_heads: n,
        kv_heads: nkv,
        head_dim: d,
        ..
    } = dims;
    let q_shape = dims_of::<B>(&inputs.query);
    let device = B::float_device(&inputs.query);
    let q: T3<B> = wrap::<B, 3>(B::float_reshape(inputs.query, [batch, n, d].into()));
    let pse = spec.pse_shift.as_ref().map(|p| {
        T3::<B>::from_data(
            TensorData::new(p.data.to_vec(), [p.shape[0], n, p.shape[3]]),
            &device,
        )
    });
    let mut outs = Vec::with_capacity(batch);
    for b in 0..batch {
        let (start, len) = spec.window(&dims, b);
        if len == 0 {
            outs.push(T3::<B>::zeros([1, n, d], &device));
            continue;
        }
        let (k, v) = match (&inputs.kv, &dims.kv) {
            (IncreKv::Contiguous { key, value }, _) => (
                heads_major(key, spec.input_layout, b, nkv).narrow(1, start, len),
                heads_major(value, spec.input_layout, b, nkv).narrow(1, start, len),
            ),
            (IncreKv::List { key, value }, _) => (
                heads_major(&key[b], spec.input_layout, 0, nkv).narrow(1, start, len),
                heads_major(&value[b], spec.input_layout, 0, nkv).narrow(1, start, len),
            ),
            (
                IncreKv::Paged {
                    key_cache,
                    value_cache,
                },
                KvDims::Paged {
                    layout,
                    max_blocks,
                    block_size,
                    ..
                },
            ) => {
                let table = &spec.block_table.as_ref().expect("validated").data;
                let ids = &table[b * max_blocks..b * max_blocks + len.div_ceil(*block_size)];
                (
                    paged_rows(key_cache, *layout, ids, len, nkv),
                    paged_rows(value_cache, *layout, ids, len, nkv),
                )
            }
            (IncreKv::Paged { .. }, _) => unreachable!("validated"),
        };
        let g = n / nkv;
        let k = expand_gqa(dequant(spec, k, 0), g);
        let v = expand_gqa(dequant(spec, v, 1), g);
        let qb = q.clone().narrow(0, b, 1).reshape([n, 1, d]);
        let mut s = qb.matmul(k.swap_dims(1, 2)).mul_scalar(spec.scale_value);
        if let Some(p) = &pse {
            let bb = if p.dims()[0] == 1 { 0 } else { b };
            s = s + p
                .clone()
                .narrow(0, bb, 1)
                .narrow(2, start, len)
                .reshape([n, 1, len]);
        }
        if let Some(m) = &spec.atten_mask {
            let cols = *m.shape.last().expect("validated");
            let row: Vec<bool> = m.data[b * cols + start..b * cols + start + len]
                .iter()
                .map(|&x| x != 0)
                .collect();
            if row.iter().any(|&x| x) {
                let mask =
                    Tensor::<B, 3, Bool>::from_data(TensorData::new(row, [1, 1, len]), &device)
                        .expand([n, 1, len]);
                s = s.mask_fill(mask, IFA_MASKED_SCORE as f32);
            }
        }
        let m = s.clone().max_dim(2);
        let e = (s - m).exp();
        let p = e.clone() / e.sum_dim(2);
        outs.push(p.matmul(v).reshape([1, n, d]));
    }
    let out = if outs.is_empty() {
        T3::<B>::zeros([0, n, d], &device)
    } else {
        Tensor::cat(outs, 0)
    };
    Ok(B::float_reshape(unwrap(out), q_shape.into()))
}
