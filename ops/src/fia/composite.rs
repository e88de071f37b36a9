//! The composite fused inference attention: per batch, gather the query rows and the valid KV
//! window (contiguous, or paged through the block table with `select`), dequantise int8 values,
//! dense scores from Burn matmuls plus the pse, the mask — the sparse mode's rule built on the
//! host from the contract, ORed with the dense mask tensor where it lies (its values are never
//! read to the host) —, the sink as one extra logit column with a zero value, softmax, P·V and
//! the LSE. The pse and the antiquant scales are sliced where they lie too.
//! O(Sq·Skv) memory per batch — the fallback every backend can run, not a fast path.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bool, Tensor, TensorData, TensorMetadata};

use burn_ascend_contract::fia::{FiaDequantIndex, FiaDims, FiaSpec, PfaLayout};

use crate::common::tensor::{bnsd, expand_gqa, paged_rows, unwrap, wrap};
use crate::error::Result;
use crate::fia::{FiaInputs, FiaOutputs};

type T3<B> = Tensor<B, 3>;
type T4<B> = Tensor<B, 4>;

fn dims_of<B: Backend>(t: &FloatTensor<B>) -> Vec<usize> {
    t.shape().to_vec()
}

/// `(x + offset) · scale` for K (`which = 0`) or V (`which = 1`), `x` `[Nkv, len, D]` holding
/// tokens `k0..k0 + len` of batch `b`: the separate `keyAntiquant*` / `valueAntiquant*`
/// tensors, else row `which` of the combined ones, sliced on the tensors' device.
fn dequant<B: Backend>(
    i: &FiaInputs<FloatTensor<B>>,
    dims: &FiaDims,
    x: T3<B>,
    which: usize,
    b: usize,
    k0: usize,
) -> T3<B> {
    let Some(index) = dims.antiquant_index.map(|ix| ix[which]) else {
        return x;
    };
    let [nkv, len, d] = x.dims();
    let (sep_scale, sep_offset) = if which == 0 {
        (&i.key_antiquant_scale, &i.key_antiquant_offset)
    } else {
        (&i.value_antiquant_scale, &i.value_antiquant_offset)
    };
    let dt = x.dtype();
    let flat = |t: &FloatTensor<B>| -> Tensor<B, 1> {
        let n = dims_of::<B>(t).iter().product::<usize>();
        wrap::<B, 1>(B::float_reshape(t.clone(), [n].into()))
    };
    // `[1, 1, 1]`, `[Nkv, 1, D]` or `[1, len, 1]` to broadcast over x.
    let shaped = |v: Tensor<B, 1>| -> T3<B> {
        let v = v.cast(dt);
        match index {
            FiaDequantIndex::PerTensor => v.reshape([1, 1, 1]),
            FiaDequantIndex::PerChannel => v.reshape([nkv, 1, d]),
            FiaDequantIndex::PerToken { .. } => v.reshape([1, len, 1]),
        }
    };
    let pick = |t: &FloatTensor<B>, separate: bool| -> T3<B> {
        let v = flat(t);
        shaped(match (separate, index) {
            (true, FiaDequantIndex::PerToken { cols }) => v.narrow(0, b * cols + k0, len),
            (true, _) => v,
            (false, _) => {
                let per = v.dims()[0] / 2;
                v.narrow(0, which * per, per)
            }
        })
    };
    let (scale, offset) = match sep_scale {
        Some(s) => (pick(s, true), sep_offset.as_ref().map(|o| pick(o, true))),
        None => {
            let s = i.antiquant_scale.as_ref().expect("validated: an antiquant");
            (
                pick(s, false),
                i.antiquant_offset.as_ref().map(|o| pick(o, false)),
            )
        }
    };
    let x = match offset {
        Some(o) => x + o,
        None => x,
    };
    x * scale
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
    let dims = spec.validate(&crate::fia::shapes::<B>(&inputs))?;
    let device = B::float_device(&inputs.query);
    let (n, nkv, d, dv, qs) = (
        dims.num_heads,
        dims.kv_heads,
        dims.head_dim,
        dims.head_dim_v,
        dims.q_seq,
    );
    let tnd = dims.layout == PfaLayout::Tnd;
    let q = bnsd(inputs.query.clone(), dims.layout, n);
    let (key, value) = inputs.kv.clone().into_pair();
    // pse `[B|1, N, rows, cols]` and the dense mask `[1|B, rows, cols]` as given: on the device
    // for a device backend.
    let pse = inputs.pse_shift.as_ref().map(|p| {
        let shape = dims.pse_shape.expect("validated");
        wrap::<B, 4>(B::float_reshape(p.clone(), shape.into()))
    });
    let dense = inputs
        .atten_mask
        .as_ref()
        .zip(dims.mask)
        .map(|(m, (mb, rows, cols))| {
            wrap::<B, 3>(B::float_reshape(m.clone(), [mb, rows, cols].into()))
        });
    let sink = inputs
        .learnable_sink
        .clone()
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
        // The mode's mask from the host rule (masked (i, j)), the dense mask's values where
        // they are; rows with nothing to attend.
        let by_mode: Vec<bool> = (0..sq)
            .flat_map(|i| (0..skv).map(move |j| (i, j)))
            .map(|(i, j)| spec.masked_by_mode(&dims, (i, j), (sq, skv), || false))
            .collect();
        let all_dead = (0..sq).all(|i| by_mode[i * skv..(i + 1) * skv].iter().all(|&m| m));
        if skv == 0 || all_dead {
            pad(&mut outs[ob], &mut lses[ob], sq);
            continue;
        }
        let dead_by_mode: Vec<bool> = (0..sq)
            .map(|i| by_mode[i * skv..(i + 1) * skv].iter().all(|&m| m))
            .collect();
        let mut masked =
            Tensor::<B, 3, Bool>::from_data(TensorData::new(by_mode, [1, sq, skv]), &device);
        let mut dead =
            Tensor::<B, 3, Bool>::from_data(TensorData::new(dead_by_mode, [1, sq, 1]), &device);
        if let Some(m) = &dense {
            let bb = if m.dims()[0] == 1 { 0 } else { b };
            let r0 = if dims.decode() { 0 } else { q0 };
            let m = m
                .clone()
                .narrow(0, bb, 1)
                .narrow(1, r0, sq)
                .narrow(2, k0, skv);
            masked = masked.bool_or(m.not_equal_elem(0.0));
            // A row is dead when every column is masked: the least of its 0/1 flags is 1 (float
            // ops: the device backends reduce floats natively).
            dead = masked.clone().float().min_dim(2).greater_elem(0.5);
        }
        let qb = q
            .clone()
            .narrow(0, if tnd { 0 } else { b }, 1)
            .narrow(2, q0, sq)
            .reshape([n, sq, d]);
        let g = n / nkv;
        let k = kv_rows(spec, &dims, &key, b, (k0, skv));
        let k = expand_gqa(dequant(&inputs, &dims, k, 0, b, k0), g);
        let v = kv_rows(spec, &dims, &value, b, (k0, skv));
        let v = expand_gqa(dequant(&inputs, &dims, v, 1, b, k0), g);
        let mut s = qb.matmul(k.swap_dims(1, 2)).mul_scalar(spec.scale_value);
        if let Some(p) = &pse {
            let bb = if p.dims()[0] == 1 { 0 } else { b };
            let r0 = if dims.decode() { 0 } else { q0 };
            let p = p
                .clone()
                .narrow(0, bb, 1)
                .narrow(2, r0, sq)
                .narrow(3, k0, skv);
            let dt = s.dtype();
            s = s + p.reshape([n, sq, skv]).cast(dt);
        }
        let mut cols = skv;
        let mut mask = masked;
        if let Some(sk) = &sink {
            // The sink in the scores' dtype (a model's sinks are f32 parameters, its query may
            // be half); its column is never masked.
            let dt = s.dtype();
            s = Tensor::cat(vec![s, sk.clone().cast(dt).expand([n, sq, 1])], 2);
            cols += 1;
            let open = TensorData::new(vec![false; sq], [1, sq, 1]);
            mask = Tensor::cat(vec![mask, Tensor::from_data(open, &device)], 2);
        }
        let mask = mask.expand([n, sq, cols]);
        let s = s.mask_fill(mask.clone(), f32::MIN);
        let m = s.clone().max_dim(2);
        let e = (s - m.clone()).exp().mask_fill(mask, 0.0);
        let l = e.clone().sum_dim(2);
        let p = e.narrow(2, 0, skv) / l.clone();
        let mut o = p.matmul(v);
        let mut lse = (m + l.log()).reshape([n, sq]);
        // Rows with nothing to attend: zeros and an infinite LSE (the sink aside).
        o = o.mask_fill(dead.clone().expand([n, sq, dv]), 0.0);
        lse = lse.mask_fill(dead.reshape([1, sq]).expand([n, sq]), f32::INFINITY);
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
