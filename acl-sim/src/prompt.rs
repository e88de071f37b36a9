//! Simulated prompt attention: `aclnnPromptFlashAttentionV3` and its V1
//! `aclnnPromptFlashAttention` (no KV lengths, quantisation, sparse mode or innerPrecise), on
//! the CPU reference (`burn_ascend_kernels::reference::prompt`), with int8 post-quantisation.

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::prompt::{PfaLayout, PromptFlashAttentionArgs, PseShift};
use burn_ascend_contract::varlen::lengths_from_cumulative;
use burn_ascend_kernels::reference::prompt::{self as pfa};

use crate::state::{
    self, c_str, int_array, invalid, required, tensor, SimErr, SimResult, SimTensor,
};
use crate::wire::{
    check_attention_out, check_rank, floats, half_query, mask01, opt_floats, query_dtype, submit,
    unsupported, write_attention_out,
};

struct PromptCall {
    q: SimTensor,
    k: SimTensor,
    v: SimTensor,
    pse: Option<SimTensor>,
    mask: Option<SimTensor>,
    asl: Option<Vec<i64>>,
    asl_kv: Option<Vec<i64>>,
    quant_scale2: Option<SimTensor>,
    quant_offset2: Option<SimTensor>,
    layout: PfaLayout,
    batch: usize,
    q_seq: usize,
    kv_seq: usize,
    n: usize,
    nkv: usize,
    d: usize,
    dv: usize,
    scale: f64,
    pre: i64,
    next: i64,
    sparse: i64,
    inner_precise: i64,
    out: SimTensor,
}

impl PromptCall {
    fn run(&self) -> SimResult<()> {
        let (q, k, v) = (
            floats(&self.q, "query")?,
            floats(&self.k, "key")?,
            floats(&self.v, "value")?,
        );
        let mut a = PromptFlashAttentionArgs::new(
            &q[..],
            &k[..],
            &v[..],
            self.layout,
            self.batch,
            self.q_seq,
            self.kv_seq,
            self.n,
            self.d,
            self.scale,
        );
        a.head_dim_v = self.dv;
        a.num_key_value_heads = self.nkv;
        a.pre_tokens = self.pre;
        a.next_tokens = self.next;
        a.sparse_mode = burn_ascend_contract::prompt::PfaSparseMode::from_attr(self.sparse)
            .unwrap_or(burn_ascend_contract::prompt::PfaSparseMode::DefaultMask);
        a.inner_precise = self.inner_precise;
        a.actual_seq_lengths = self.asl.as_deref();
        a.actual_seq_lengths_kv = self.asl_kv.as_deref();
        let mask = match &self.mask {
            Some(m) if !(2..=4).contains(&self.sparse) => {
                Some((mask01(m, "attenMask")?, m.dims.clone()))
            }
            _ => None,
        };
        a.atten_mask = match (&self.mask, &mask) {
            (None, _) => None,
            // Modes 2-4 never read the mask's contents.
            (Some(_), None) => Some(burn_ascend_contract::prompt::PfaMask {
                data: &[],
                batched: false,
                rows: 0,
                cols: 0,
            }),
            (Some(_), Some((data, shape))) => {
                let (mb, rows, cols) = match *shape.as_slice() {
                    [r, c] => (1, r, c),
                    [b, r, c] | [b, _, r, c] => (b, r, c),
                    _ => unreachable!("checked in the first stage"),
                };
                Some(burn_ascend_contract::prompt::PfaMask {
                    data,
                    batched: mb != 1,
                    rows,
                    cols,
                })
            }
        };
        let pse = opt_floats(self.pse.as_ref(), "pseShift")?;
        if let (Some(data), Some(p)) = (&pse, &self.pse) {
            a.pse_shift = Some(PseShift {
                data,
                batched: p.dims[0] != 1,
                rows: p.dims[2],
                cols: p.dims[3],
            });
        }
        write_attention_out(
            (self.quant_scale2.as_ref(), self.quant_offset2.as_ref()),
            &self.out,
            |quant| pfa::prompt_flash_attention_int8(&a, quant),
            || pfa::prompt_flash_attention(&a),
        )
    }
}

fn parse_pfa_layout(s: &str) -> SimResult<PfaLayout> {
    match PfaLayout::from_attr(s) {
        Some(l) => Ok(l),
        None => invalid(format!(
            "inputLayout \"{s}\" is not BSH, BSND, BNSD, BNSD_BSND or TND"
        )),
    }
}

/// PFA's call from its (V3, or widened V1) parameters and the decoded `inputLayout`.
fn decode_prompt(p: &PfaV3Params, layout: Option<String>) -> SimResult<PromptCall> {
    let PfaV3Params {
        query,
        key,
        value,
        pse_shift,
        atten_mask,
        actual_seq_lengths: asl,
        actual_seq_lengths_kv: asl_kv,
        quant_scale2,
        quant_offset2,
        num_heads,
        scale_value: scale,
        pre_tokens: pre,
        next_tokens: next,
        num_key_value_heads: num_kv_heads,
        sparse_mode: sparse,
        inner_precise,
        attention_out,
        ..
    } = *p;
    let q = required(query, "query")?;
    let k = required(key, "key")?;
    let v = required(value, "value")?;
    let out = required(attention_out, "attentionOut")?;
    let layout = parse_pfa_layout(
        &layout.ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "inputLayout is null".into()))?,
    )?;
    // FLOAT16 / BFLOAT16 / INT8 query, never FLOAT (`prompt_flash_attention_def.cpp`).
    half_query(&q, names::pfa_v3, true)?;
    for (t, name) in [(&k, "key"), (&v, "value")] {
        if t.dtype != q.dtype {
            return invalid(format!("{name}: dtype must equal the query's"));
        }
    }
    if num_heads <= 0 || num_kv_heads < 0 {
        return invalid(format!(
            "numHeads {num_heads} / numKeyValueHeads {num_kv_heads} out of range"
        ));
    }
    let n = num_heads as usize;
    let nkv = if num_kv_heads == 0 {
        n
    } else {
        num_kv_heads as usize
    };
    if !n.is_multiple_of(nkv) {
        return invalid(format!(
            "numHeads {n} must be a multiple of numKeyValueHeads {nkv}"
        ));
    }
    let rank = match layout {
        PfaLayout::Bsh | PfaLayout::Tnd => 3,
        _ => 4,
    };
    let split = |t: &SimTensor, heads: usize, name: &str| -> SimResult<[usize; 4]> {
        check_rank(t, name, rank)?;
        let s = &t.dims;
        Ok(match layout {
            PfaLayout::Bsh => {
                if s[2] == 0 || !s[2].is_multiple_of(heads) {
                    return invalid(format!(
                        "{name}: H = {} is not a positive multiple of {heads}",
                        s[2]
                    ));
                }
                [s[0], s[1], heads, s[2] / heads]
            }
            PfaLayout::Bsnd => [s[0], s[1], s[2], s[3]],
            PfaLayout::Bnsd | PfaLayout::BnsdBsnd => [s[0], s[2], s[1], s[3]],
            PfaLayout::Tnd => [1, s[0], s[1], s[2]],
        })
    };
    let [qb, qs, qn, d] = split(&q, n, "query")?;
    let [kb, ks, kn, dk] = split(&k, nkv, "key")?;
    let [vb, vs, vn, dv] = split(&v, nkv, "value")?;
    let tnd = layout == PfaLayout::Tnd;
    if qn != n
        || kn != nkv
        || dk != d
        || [vb, vs, vn] != [kb, ks, kn]
        || (!tnd && (kb != qb || dv != d))
    {
        return invalid(format!(
            "query {:?}, key {:?}, value {:?} do not agree with numHeads {n}, numKeyValueHeads {nkv} and inputLayout {layout:?}",
            q.dims, k.dims, v.dims
        ));
    }
    let asl = int_array(asl, "actualSeqLengths")?;
    let asl_kv = int_array(asl_kv, "actualSeqLengthsKv")?;
    let batch = if tnd {
        match (&asl, &asl_kv) {
            (Some(a), Some(b)) if a.len() == b.len() && !a.is_empty() => a.len(),
            _ => return Err(SimErr(ACLNN_ERR_PARAM_NULLPTR, "actualSeqLengths and actualSeqLengthsKv are required (cumulative, same length) with TND".into())),
        }
    } else {
        for (name, l, full) in [
            ("actualSeqLengths", &asl, qs),
            ("actualSeqLengthsKv", &asl_kv, ks),
        ] {
            if let Some(l) = l {
                let used = if l.len() == 1 {
                    &l[..]
                } else {
                    &l[..qb.min(l.len())]
                };
                if !(l.len() == 1 || l.len() >= qb)
                    || used.iter().any(|&x| x < 0 || x > full as i64)
                {
                    return invalid(format!(
                        "{name}: {l:?} must have 1 or B entries in [0, {full}]"
                    ));
                }
            }
        }
        qb
    };
    if tnd {
        for (name, l, total) in [
            ("actualSeqLengths", &asl, qs),
            ("actualSeqLengthsKv", &asl_kv, ks),
        ] {
            let l = l.as_ref().expect("checked");
            if lengths_from_cumulative(l).is_none() || l.last().is_some_and(|&x| x as usize > total)
            {
                return invalid(format!(
                    "{name}: {l:?} must be cumulative and end at most at T = {total}"
                ));
            }
        }
    }
    if !(0..=4).contains(&sparse) {
        return invalid(format!(
            "sparseMode {sparse}: prompt attention supports 0-4"
        ));
    }
    let mask = tensor(atten_mask, "attenMask")?;
    if let Some(m) = &mask {
        if !matches!(m.dtype, DataType::Bool | DataType::Int8 | DataType::Uint8) {
            return invalid(format!(
                "attenMask: dtype must be BOOL, INT8 or UINT8, got {:?}",
                m.dtype
            ));
        }
        if !(2..=4).contains(&sparse) {
            let ok = match m.dims.as_slice() {
                [r, c] => *r >= qs && *c >= ks,
                [b, r, c] | [b, 1, r, c] => (*b == 1 || *b == batch) && *r >= qs && *c >= ks,
                _ => false,
            };
            if !ok {
                return invalid(format!("attenMask: shape {:?} must be (Sq, Skv), (B|1, Sq, Skv) or (B|1, 1, Sq, Skv) covering Sq = {qs}, Skv = {ks}", m.dims));
            }
        }
    }
    let pse = tensor(pse_shift, "pseShift")?;
    if let Some(p) = &pse {
        query_dtype(p, "pseShift", q.dtype)?;
        let ok = p.dims.len() == 4
            && (p.dims[0] == 1 || p.dims[0] == batch)
            && p.dims[1] == n
            && p.dims[2] >= qs
            && p.dims[3] >= ks;
        if !ok {
            return invalid(format!(
                "pseShift: shape {:?} must be (B|1, N, >=Sq, >=Skv)",
                p.dims
            ));
        }
    }
    let quant_scale2 = tensor(quant_scale2, "quantScale2")?;
    let quant_offset2 = tensor(quant_offset2, "quantOffset2")?;
    if quant_offset2.is_some() && quant_scale2.is_none() {
        return invalid("quantOffset2 needs quantScale2");
    }
    let out_dims = match layout {
        PfaLayout::Bsh => vec![batch, qs, n * dv],
        PfaLayout::Bsnd | PfaLayout::BnsdBsnd => vec![batch, qs, n, dv],
        PfaLayout::Bnsd => vec![batch, n, qs, dv],
        PfaLayout::Tnd => vec![qs, n, dv],
    };
    check_attention_out(&out, &out_dims, quant_scale2.is_some(), q.dtype)?;
    crate::cost::note_attention(|| {
        // Per-batch lengths (TND: cumulative ends), else the tensors' S.
        let tnd = layout == PfaLayout::Tnd;
        let lens = |a: &Option<Vec<i64>>, full| crate::cost::seq_lens(a, tnd, batch, full);
        crate::cost::Attention {
            seqs: lens(&asl, qs).into_iter().zip(lens(&asl_kv, ks)).collect(),
            heads: n,
            kv_heads: nkv,
            head_dim: d,
            value_dim: dv,
            keep: crate::cost::Keep::of_sparse_mode(sparse, pre, next),
            q_elem: q.dtype.size(),
            kv_elem: k.dtype.size(),
            backward: false,
            dtype: q.dtype,
        }
    });
    Ok(PromptCall {
        q,
        k,
        v,
        pse,
        mask,
        asl,
        asl_kv,
        quant_scale2,
        quant_offset2,
        layout,
        batch,
        q_seq: qs,
        kv_seq: ks,
        n,
        nkv,
        d,
        dv,
        scale,
        pre,
        next,
        sparse,
        inner_precise,
        out,
    })
}

/// PFA's first stage, for V3 or a V1 call widened to V3 (`op` names the op called; V1 has no
/// TND layout, `tnd` false).
fn pfa_stage(op: &'static str, p: PfaV3Params, tnd: bool) -> SimResult<()> {
    if !p.deq_scale1.is_null() || !p.quant_scale1.is_null() || !p.deq_scale2.is_null() {
        return unsupported("int8 query (deqScale1 / quantScale1 / deqScale2)");
    }
    // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
    let layout = unsafe { c_str(p.input_layout, "inputLayout")? };
    let call = decode_prompt(&p, layout)?;
    if !tnd && call.layout == PfaLayout::Tnd {
        return invalid(format!("inputLayout TND needs {}", names::pfa_v3));
    }
    submit(op, move || call.run(), p.workspace_size, p.executor)
}

first_stage!(pfa_v3, |p| {
    state::guard(|| pfa_stage(names::pfa_v3, p, true))
});

// V1: no KV lengths, no quantisation, sparse mode 0, innerPrecise 1 (what widening gives).
first_stage!(pfa_v1, |p| {
    state::guard(|| pfa_stage(names::pfa_v1, p.to_wide(), false))
});
