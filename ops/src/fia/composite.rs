//! The composite fused inference attention: per batch, gather the query rows and the valid KV
//! window (contiguous, or paged through the block table with `select`), dequantise int8 values,
//! dense scores from Burn matmuls plus the pse, the mask built on the host from the contract's
//! rule, the sink as one extra logit column with a zero value, softmax, P·V and the LSE.
//! O(Sq·Skv) memory per batch — the fallback every backend can run, not a fast path.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bool, Tensor, TensorData, TensorMetadata};

use burn_ascend_contract::fia::{FiaDims, FiaShapes, FiaSpec, PfaLayout};

use crate::backend::{FiaInputs, FiaKv, FiaOutputs};
use crate::error::Result;
use crate::incre::composite::paged_rows;
use crate::prompt::composite::{expand_gqa, unwrap, wrap};

type T3<B> = Tensor<B, 3>;
type T4<B> = Tensor<B, 4>;

fn dims_of<B: Backend>(t: &FloatTensor<B>) -> Vec<usize> {
    t.shape().to_vec()
}

/// The shapes of a call's tensors. int8 KV travels as float tensors holding the int8 values, so
/// `kv_int8` is "an antiquant is given".
pub fn shapes<B: Backend>(i: &FiaInputs<FloatTensor<B>>, spec: &FiaSpec) -> FiaShapes {
    i.shapes(dims_of::<B>, spec.quantised())
}

/// `[B, N, S, D]` view of a rank-3/4 tensor in a non-TND layout.
fn bnsd<B: Backend>(t: FloatTensor<B>, layout: PfaLayout, heads: usize) -> T4<B> {
    match layout {
        PfaLayout::Bsh => {
            let t: T3<B> = wrap(t);
            let [b, s, h] = t.dims();
            t.reshape([b, s, heads, h / heads]).swap_dims(1, 2)
        }
        PfaLayout::Bsnd => wrap::<B, 4>(t).swap_dims(1, 2),
        PfaLayout::Bnsd | PfaLayout::BnsdBsnd => wrap(t),
        PfaLayout::Tnd => {
            let t: T3<B> = wrap(t);
            let [s, n, d] = t.dims();
            t.swap_dims(0, 1).reshape([1, n, s, d])
        }
    }
}

/// `(x + offset) · scale` for K (`which = 0`) or V (`which = 1`), `x` `[Nkv, len, D]` holding
/// tokens `k0..k0 + len` of batch `b`.
fn dequant<B: Backend>(
    spec: &FiaSpec,
    dims: &FiaDims,
    x: T3<B>,
    which: usize,
    b: usize,
    k0: usize,
) -> T3<B> {
    let [nkv, len, d] = x.dims();
    let device = x.device();
    let (sep, mode) = if which == 0 {
        (&spec.key_antiquant, spec.key_antiquant_mode)
    } else {
        (&spec.value_antiquant, spec.value_antiquant_mode)
    };
    let (scale, offset, shape): (Vec<f32>, Option<Vec<f32>>, [usize; 3]) =
        match (sep, &spec.antiquant) {
            (Some(q), _) if mode == 1 => {
                let cols = *q.shape.last().expect("validated");
                let pick = |v: &[f32]| v[b * cols + k0..b * cols + k0 + len].to_vec();
                (pick(&q.scale), q.offset.as_deref().map(pick), [1, len, 1])
            }
            (Some(q), _) if q.scale.len() == 1 => (
                q.scale.to_vec(),
                q.offset.as_deref().map(<[f32]>::to_vec),
                [1, 1, 1],
            ),
            (Some(q), _) => (
                q.scale.to_vec(),
                q.offset.as_deref().map(<[f32]>::to_vec),
                [nkv, 1, d],
            ),
            (None, Some(aq)) => {
                let per = if aq.shape.len() == 1 {
                    1
                } else {
                    dims.kv_heads * dims.head_dim
                };
                let pick = |v: &[f32]| v[which * per..(which + 1) * per].to_vec();
                let shape = if per == 1 { [1, 1, 1] } else { [nkv, 1, d] };
                (pick(&aq.scale), aq.offset.as_deref().map(pick), shape)
            }
            (None, None) => return x,
        };
    let t = |v: Vec<f32>| T3::<B>::from_data(TensorData::new(v, shape), &device);
    let x = match offset {
        Some(o) => x + t(o),
        None => x,
    };
    x * t(scale)
}

/// `[Nkv, skv, D]` key or value tokens `k0..k0 + skv` of batch `b`.
fn kv_rows<B: Backend>(
    spec: &FiaSpec,
    dims: &FiaDims,
    t: &FloatTensor<B>,
    b: usize,
    (k0, skv): (usize, usize),
) -> T3<B> {
    let nkv = dims.kv_heads;
    match dims.paged {
        Some(p) => {
            let table = &spec.block_table.as_ref().expect("validated").data;
            let ids = &table[b * p.max_blocks..b * p.max_blocks + skv.div_ceil(p.block_size)];
            paged_rows(t, p.layout, ids, skv, nkv)
        }
        None => {
            let t4 = bnsd(t.clone(), dims.layout, nkv);
            let [_, _, _, d] = t4.dims();
            let bb = if dims.layout == PfaLayout::Tnd { 0 } else { b };
            t4.narrow(0, bb, 1)
                .narrow(2, k0, skv)
                .reshape([nkv, skv, d])
        }
    }
}

/// Composite `aclnnFusedInferAttentionScoreV4`.
pub fn fia_fwd<B: Backend>(
    inputs: FiaInputs<FloatTensor<B>>,
    spec: &FiaSpec,
) -> Result<FiaOutputs<FloatTensor<B>>> {
    let dims = spec.validate(&shapes::<B>(&inputs, spec))?;
    let device = B::float_device(&inputs.query);
    let (n, nkv, d, dv, qs) = (
        dims.num_heads,
        dims.kv_heads,
        dims.head_dim,
        dims.head_dim_v,
        dims.q_seq,
    );
    let tnd = dims.layout == PfaLayout::Tnd;
    let q = bnsd(inputs.query, dims.layout, n);
    let (key, value) = match inputs.kv {
        FiaKv::Contiguous { key, value } => (key, value),
        FiaKv::Paged {
            key_cache,
            value_cache,
        } => (key_cache, value_cache),
    };
    let pse = spec.pse_shift.as_ref().map(|p| {
        let s: [usize; 4] = p.shape.clone().try_into().expect("validated");
        T4::<B>::from_data(TensorData::new(p.data.to_vec(), s), &device)
    });
    let sink = inputs
        .learnable_sink
        .map(|s| wrap::<B, 1>(s).reshape([n, 1, 1]));
    let batches = if tnd { 1 } else { dims.batch };
    // Per output batch (TND: one), `[N, rows, Dv]` / `[N, rows]` pieces in row order.
    let mut outs: Vec<Vec<T3<B>>> = (0..batches).map(|_| Vec::new()).collect();
    let mut lses: Vec<Vec<Tensor<B, 2>>> = (0..batches).map(|_| Vec::new()).collect();
    let mut written = vec![0usize; batches];
    let pad = |outs: &mut Vec<T3<B>>, lses: &mut Vec<Tensor<B, 2>>, rows: usize| {
        if rows > 0 {
            outs.push(T3::<B>::zeros([n, rows, dv], &device));
            lses.push(Tensor::<B, 2>::full([n, rows], f32::INFINITY, &device));
        }
    };
    for (b, (q0, sq, k0, skv)) in dims.sequences(spec).into_iter().enumerate() {
        let ob = if tnd { 0 } else { b };
        pad(&mut outs[ob], &mut lses[ob], q0 - written[ob]);
        written[ob] = q0 + sq;
        if sq == 0 {
            continue;
        }
        // Host mask: masked (i, j), and rows with nothing to attend.
        let masked: Vec<bool> = (0..sq)
            .flat_map(|i| (0..skv).map(move |j| (i, j)))
            .map(|(i, j)| spec.masked(&dims, b, (i, j), (q0 + i, k0 + j), (sq, skv)))
            .collect();
        let dead: Vec<bool> = (0..sq)
            .map(|i| masked[i * skv..(i + 1) * skv].iter().all(|&m| m))
            .collect();
        if skv == 0 || dead.iter().all(|&x| x) {
            pad(&mut outs[ob], &mut lses[ob], sq);
            continue;
        }
        let qb = q
            .clone()
            .narrow(0, if tnd { 0 } else { b }, 1)
            .narrow(2, q0, sq)
            .reshape([n, sq, d]);
        let g = n / nkv;
        let k = expand_gqa(
            dequant(
                spec,
                &dims,
                kv_rows(spec, &dims, &key, b, (k0, skv)),
                0,
                b,
                k0,
            ),
            g,
        );
        let v = expand_gqa(
            dequant(
                spec,
                &dims,
                kv_rows(spec, &dims, &value, b, (k0, skv)),
                1,
                b,
                k0,
            ),
            g,
        );
        let mut s = qb.matmul(k.swap_dims(1, 2)).mul_scalar(spec.scale_value);
        if let Some(p) = &pse {
            let bb = if p.dims()[0] == 1 { 0 } else { b };
            let r0 = if dims.decode() { 0 } else { q0 };
            s = s + p
                .clone()
                .narrow(0, bb, 1)
                .narrow(2, r0, sq)
                .narrow(3, k0, skv)
                .reshape([n, sq, skv]);
        }
        let mut cols = skv;
        let mut mask_bits = masked.clone();
        if let Some(sk) = &sink {
            // The sink in the scores' dtype (a model's sinks are f32 parameters, its query may
            // be half).
            let dt = s.dtype();
            s = Tensor::cat(vec![s, sk.clone().cast(dt).expand([n, sq, 1])], 2);
            cols += 1;
            mask_bits = (0..sq)
                .flat_map(|i| {
                    masked[i * skv..(i + 1) * skv]
                        .iter()
                        .copied()
                        .chain([false])
                })
                .collect();
        }
        let mask =
            Tensor::<B, 3, Bool>::from_data(TensorData::new(mask_bits, [1, sq, cols]), &device)
                .expand([n, sq, cols]);
        let s = s.mask_fill(mask.clone(), f32::MIN);
        let m = s.clone().max_dim(2);
        let e = (s - m.clone()).exp().mask_fill(mask, 0.0);
        let l = e.clone().sum_dim(2);
        let p = e.narrow(2, 0, skv) / l.clone();
        let mut o = p.matmul(v);
        let mut lse = (m + l.log()).reshape([n, sq]);
        if dead.iter().any(|&x| x) {
            let rows = Tensor::<B, 3, Bool>::from_data(TensorData::new(dead, [1, sq, 1]), &device);
            o = o.mask_fill(rows.clone().expand([n, sq, dv]), 0.0);
            lse = lse.mask_fill(rows.reshape([1, sq]).expand([n, sq]), f32::INFINITY);
        }
        outs[ob].push(o);
        lses[ob].push(lse);
    }
    for ob in 0..batches {
        pad(&mut outs[ob], &mut lses[ob], qs - written[ob]);
    }
    let cat3 = |v: Vec<T3<B>>| -> T3<B> {
        if v.is_empty() {
            T3::<B>::zeros([n, qs, dv], &device)
        } else {
            Tensor::cat(v, 1)
        }
    };
    let out: Vec<T3<B>> = outs.into_iter().map(cat3).collect();
    let lse: Vec<Tensor<B, 2>> = lses
        .into_iter()
        .map(|v| {
            if v.is_empty() {
                Tensor::<B, 2>::full([n, qs], f32::INFINITY, &device)
            } else {
                Tensor::cat(v, 1)
            }
        })
        .collect();
    let b = dims.batch;
    let attention_out = if tnd {
        unwrap(out.into_iter().next().expect("one").swap_dims(0, 1))
    } else {
        let o: T4<B> = if out.is_empty() {
            T4::<B>::zeros([0, n, qs, dv], &device)
        } else {
            Tensor::stack(out, 0)
        };
        match dims.layout {
            PfaLayout::Bnsd => unwrap(o),
            PfaLayout::Bsnd | PfaLayout::BnsdBsnd => unwrap(o.swap_dims(1, 2)),
            PfaLayout::Bsh => unwrap(o.swap_dims(1, 2).reshape([b, qs, n * dv])),
            PfaLayout::Tnd => unreachable!(),
        }
    };
    let softmax_lse = spec.softmax_lse_flag.then(|| {
        if tnd {
            unwrap(
                lse.into_iter()
                    .next()
                    .expect("one")
                    .swap_dims(0, 1)
                    .reshape([qs, n, 1]),
            )
        } else if lse.is_empty() {
            unwrap(Tensor::<B, 4>::zeros([0, n, qs, 1], &device))
        } else {
            unwrap(Tensor::stack::<3>(lse, 0).reshape([b, n, qs, 1]))
        }
    });
    Ok(FiaOutputs {
        attention_out,
        softmax_lse,
    })
}
