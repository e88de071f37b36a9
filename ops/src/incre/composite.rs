//! The composite incremental attention: per batch, gather the valid KV window (contiguous,
//! tensor list, or paged through the block table with `select`), dequantise int8 values,
//! scores from Burn matmuls, the mask *replacing* scores with −1e12 (spec §5), softmax, P·V.
//! The mask, pse and antiquant scales are the carrier's tensors, sliced where they lie.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorMetadata};

use burn_ascend_contract::incre::{IfaLayout, IFA_MASKED_SCORE};

use crate::common::tensor::{expand_gqa, paged_rows, unwrap, wrap};
use crate::error::{AttnError, Result};
use crate::incre::{IncreDims, IncreInputs, IncreKv, IncreSpec, KvDims};

type T3<B> = Tensor<B, 3>;

fn dims_of<B: Backend>(t: &FloatTensor<B>) -> Vec<usize> {
    t.shape().to_vec()
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

/// Row `which` (0: K, 1: V) of an antiquant scale or offset, shaped to broadcast over
/// `[Nkv, len, D]` rows in `x`'s dtype: `[1, 1, 1]` per tensor, `[Nkv, 1, D]` per channel.
fn antiquant_row<B: Backend>(t: &FloatTensor<B>, which: usize, x: &T3<B>) -> T3<B> {
    let [nkv, _, d] = x.dims();
    let len = dims_of::<B>(t).iter().product::<usize>();
    let t: Tensor<B, 1> = wrap::<B, 1>(B::float_reshape(t.clone(), [len].into()));
    let per = t.dims()[0] / 2;
    let row = t.narrow(0, which * per, per).cast(x.dtype());
    if per == 1 {
        row.reshape([1, 1, 1])
    } else {
        row.reshape([nkv, 1, d])
    }
}

/// `(x + offset) · scale` for K (`which = 0`) or V (`which = 1`), `x` `[Nkv, len, D]`.
fn dequant<B: Backend>(i: &IncreInputs<FloatTensor<B>>, x: T3<B>, which: usize) -> T3<B> {
    let Some(scale) = &i.antiquant_scale else {
        return x;
    };
    let x = match &i.antiquant_offset {
        Some(o) => {
            let o = antiquant_row(o, which, &x);
            x + o
        }
        None => x,
    };
    let s = antiquant_row(scale, which, &x);
    x * s
}

/// Composite `aclnnIncreFlashAttentionV4` (float output; int8 output is host-only).
pub fn incre_fwd<B: Backend>(
    inputs: IncreInputs<FloatTensor<B>>,
    spec: &IncreSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&crate::incre::shapes::<B>(&inputs))?;
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
    let q: T3<B> = wrap::<B, 3>(B::float_reshape(inputs.query.clone(), [batch, n, d].into()));
    // pse `[B|1, N, S]` and mask `[B, S]` (non-zero = masked) as given: on the device for a
    // device backend.
    let pse = inputs.pse_shift.as_ref().map(|p| {
        let [pb, _, _, cols] = dims.pse_shape.expect("validated");
        wrap::<B, 3>(B::float_reshape(p.clone(), [pb, n, cols].into()))
    });
    let mask = inputs.atten_mask.as_ref().map(|m| {
        let cols = dims.mask_cols.expect("validated");
        wrap::<B, 2>(B::float_reshape(m.clone(), [batch, cols].into()))
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
        let k = expand_gqa(dequant(&inputs, k, 0), g);
        let v = expand_gqa(dequant(&inputs, v, 1), g);
        let qb = q.clone().narrow(0, b, 1).reshape([n, 1, d]);
        let mut s = qb.matmul(k.swap_dims(1, 2)).mul_scalar(spec.scale_value);
        if let Some(p) = &pse {
            let bb = if p.dims()[0] == 1 { 0 } else { b };
            let p = p.clone().narrow(0, bb, 1).narrow(2, start, len);
            let dt = s.dtype();
            s = s + p.reshape([n, 1, len]).cast(dt);
        }
        if let Some(m) = &mask {
            let row = m.clone().narrow(0, b, 1).narrow(1, start, len);
            let masked = row
                .not_equal_elem(0.0)
                .reshape([1, 1, len])
                .expand([n, 1, len]);
            s = s.mask_fill(masked, IFA_MASKED_SCORE as f32);
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
