//! Simulated incremental attention: `aclnnIncreFlashAttentionV4` over a contiguous KV, a
//! tensor list or a paged cache (block table), with int8 antiquant / post-quantisation, on the
//! CPU reference (`burn_ascend_kernels::reference::incre`).

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::incre::{
    Antiquant, IfaLayout, IfaMask, IfaPse, IncreFlashAttentionArgs, KvInput, PagedLayout,
};
use burn_ascend_kernels::reference::incre::{self as ifa};

use crate::state::{
    self, c_str, int_array, invalid, required, tensor, tensor_list, SimErr, SimResult, SimTensor,
};
use crate::wire::{
    check_attention_out, floats, floats_or_i8, half_query, ints, mask01, opt_floats, query_dtype,
    submit, unsupported, write_attention_out,
};

enum IncreKv {
    Contiguous {
        kv_seq: usize,
    },
    List,
    Paged {
        layout: PagedLayout,
        max_blocks: usize,
        block_size: usize,
        table: SimTensor,
    },
}

struct IncreCall {
    q: SimTensor,
    keys: Vec<SimTensor>,
    values: Vec<SimTensor>,
    kv: IncreKv,
    pse: Option<SimTensor>,
    mask: Option<SimTensor>,
    asl: Option<Vec<i64>>,
    quant_scale2: Option<SimTensor>,
    quant_offset2: Option<SimTensor>,
    antiquant_scale: Option<SimTensor>,
    antiquant_offset: Option<SimTensor>,
    /// One INT64, read by the kernel (so when the launch runs).
    kv_padding: Option<SimTensor>,
    layout: IfaLayout,
    batch: usize,
    n: usize,
    nkv: usize,
    d: usize,
    scale: f64,
    inner_precise: i64,
    out: SimTensor,
}

impl IncreCall {
    fn run(&self) -> SimResult<()> {
        let q = floats(&self.q, "query")?;
        let keys = self
            .keys
            .iter()
            .map(|t| floats_or_i8(t, "key"))
            .collect::<SimResult<Vec<_>>>()?;
        let values = self
            .values
            .iter()
            .map(|t| floats_or_i8(t, "value"))
            .collect::<SimResult<Vec<_>>>()?;
        let table: Vec<i32>;
        let (kr, vr): (Vec<&[f32]>, Vec<&[f32]>) = (
            keys.iter().map(Vec::as_slice).collect(),
            values.iter().map(Vec::as_slice).collect(),
        );
        let kv = match &self.kv {
            IncreKv::Contiguous { kv_seq } => KvInput::Contiguous {
                key: &keys[0],
                value: &values[0],
                kv_seq: *kv_seq,
            },
            IncreKv::List => KvInput::TensorList {
                key: &kr,
                value: &vr,
            },
            IncreKv::Paged {
                layout,
                max_blocks,
                block_size,
                table: t,
            } => {
                table = ints(t, "blocktable")?
                    .into_iter()
                    .map(|x| x as i32)
                    .collect();
                KvInput::Paged {
                    key_cache: &keys[0],
                    value_cache: &values[0],
                    layout: *layout,
                    block_table: &table,
                    max_blocks_per_seq: *max_blocks,
                    block_size: *block_size,
                }
            }
        };
        let mut a = IncreFlashAttentionArgs::new(
            &q[..],
            kv,
            self.layout,
            self.batch,
            self.n,
            self.d,
            self.scale,
        );
        a.num_key_value_heads = self.nkv;
        a.inner_precise = self.inner_precise;
        a.actual_seq_lengths = self.asl.as_deref();
        a.kv_padding_size = self
            .kv_padding
            .as_ref()
            .map(|t| ints(t, "kvPaddingSize").map(|v| v[0]))
            .transpose()?;
        let mask = self
            .mask
            .as_ref()
            .map(|m| mask01(m, "attenMask"))
            .transpose()?;
        if let (Some(data), Some(m)) = (&mask, &self.mask) {
            a.atten_mask = Some(IfaMask {
                data,
                cols: *m.dims.last().unwrap_or(&0),
            });
        }
        let pse = opt_floats(self.pse.as_ref(), "pseShift")?;
        if let (Some(data), Some(p)) = (&pse, &self.pse) {
            a.pse_shift = Some(IfaPse {
                data,
                batched: p.dims[0] != 1,
                cols: p.dims[3],
            });
        }
        let aq_scale = opt_floats(self.antiquant_scale.as_ref(), "antiquantScale")?;
        let aq_offset = opt_floats(self.antiquant_offset.as_ref(), "antiquantOffset")?;
        if let (Some(scale), Some(t)) = (&aq_scale, &self.antiquant_scale) {
            a.antiquant = Some(Antiquant {
                scale,
                offset: aq_offset.as_deref(),
                per_channel: t.dims.len() > 1,
            });
        }
        write_attention_out(
            (self.quant_scale2.as_ref(), self.quant_offset2.as_ref()),
            &self.out,
            |quant| ifa::incre_flash_attention_int8(&a, quant),
            || ifa::incre_flash_attention(&a),
        )
    }
}

first_stage!(ifa_v4, |params| {
    let IfaV4Params {
        query,
        key,
        value,
        pse_shift,
        atten_mask,
        actual_seq_lengths,
        dequant_scale1,
        quant_scale1,
        dequant_scale2,
        quant_scale2,
        quant_offset2,
        antiquant_scale,
        antiquant_offset,
        blocktable,
        kv_padding_size,
        num_heads,
        scale_value,
        input_layout,
        num_key_value_heads,
        block_size,
        inner_precise,
        attention_out,
        workspace_size,
        executor,
    } = params;
    const OP: &str = names::ifa_v4;
    state::guard(|| {
        if !dequant_scale1.is_null() || !quant_scale1.is_null() || !dequant_scale2.is_null() {
            return unsupported("int8 query (dequantScale1 / quantScale1 / dequantScale2)");
        }
        let q = required(query, "query")?;
        let keys = tensor_list(key, "key")?
            .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "key is null".into()))?;
        let values = tensor_list(value, "value")?
            .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "value is null".into()))?;
        let out = required(attention_out, "attentionOut")?;
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let layout = unsafe { c_str(input_layout, "inputLayout")? }
            .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "inputLayout is null".into()))?;
        let Some(layout) = IfaLayout::from_attr(&layout) else {
            return invalid(format!("inputLayout \"{layout}\" is not BSH, BSND or BNSD"));
        };
        // FLOAT16 / BFLOAT16 query only (`incre_flash_attention_def.cpp`: no FLOAT, no INT8).
        half_query(&q, OP, false)?;
        if num_heads <= 0 || num_key_value_heads < 0 {
            return invalid("numHeads / numKeyValueHeads out of range");
        }
        let n = num_heads as usize;
        let nkv = if num_key_value_heads == 0 {
            n
        } else {
            num_key_value_heads as usize
        };
        if !n.is_multiple_of(nkv) {
            return invalid(format!(
                "numHeads {n} must be a multiple of numKeyValueHeads {nkv}"
            ));
        }
        let (batch, qn, d) = match (layout, q.dims.as_slice()) {
            (IfaLayout::Bsh, [b, 1, h]) if *h % n == 0 => (*b, n, *h / n),
            (IfaLayout::Bsnd, [b, 1, qn, d]) | (IfaLayout::Bnsd, [b, qn, 1, d]) => (*b, *qn, *d),
            _ => {
                return invalid(format!(
                    "query: shape {:?} is not a single-token {layout:?} query with numHeads {n}",
                    q.dims
                ))
            }
        };
        if qn != n || d == 0 || batch == 0 {
            return invalid(format!(
                "query: shape {:?} does not match numHeads {n}",
                q.dims
            ));
        }
        if keys.is_empty() || keys.len() != values.len() {
            return invalid("key, value: non-empty tensor lists of equal length");
        }
        let kdt = keys[0].dtype;
        if !(kdt == q.dtype || kdt == DataType::Int8)
            || keys.iter().chain(&values).any(|t| t.dtype != kdt)
        {
            return invalid("key, value: dtype must be the query's or INT8, the same for all");
        }
        let antiquant_scale = tensor(antiquant_scale, "antiquantScale")?;
        let antiquant_offset = tensor(antiquant_offset, "antiquantOffset")?;
        for (t, name) in [
            (&antiquant_scale, "antiquantScale"),
            (&antiquant_offset, "antiquantOffset"),
        ] {
            if let Some(t) = t {
                query_dtype(t, name, q.dtype)?;
            }
        }
        if kdt == DataType::Int8 && antiquant_scale.is_none() {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "antiquantScale is null but key/value are INT8".into(),
            ));
        }
        let table = tensor(blocktable, "blocktable")?;
        let kv_row = |t: &SimTensor| -> Option<(usize, usize)> {
            // (batch, S) of a contiguous KV tensor in the layout, checking Nkv and D.
            match (layout, t.dims.as_slice()) {
                (IfaLayout::Bsh, [b, s, h]) if *h == nkv * d => Some((*b, *s)),
                (IfaLayout::Bsnd, [b, s, hn, hd]) if *hn == nkv && *hd == d => Some((*b, *s)),
                (IfaLayout::Bnsd, [b, hn, s, hd]) if *hn == nkv && *hd == d => Some((*b, *s)),
                _ => None,
            }
        };
        let kv = if let Some(table) = table {
            if keys.len() != 1 {
                return invalid("key: page attention takes one cache per list");
            }
            if table.dtype != DataType::Int32 || table.dims.len() != 2 || table.dims[0] != batch {
                return invalid(format!(
                    "blocktable: must be INT32 (B = {batch}, maxBlocks), got {:?} {:?}",
                    table.dtype, table.dims
                ));
            }
            if block_size <= 0 {
                return invalid(format!(
                    "blockSize {block_size} must be positive with page attention"
                ));
            }
            let bs = block_size as usize;
            let layout_p = match keys[0].dims.as_slice() {
                [_, s, h] if *s == bs && *h == nkv * d => PagedLayout::Bsh,
                [_, hn, s, hd] if *hn == nkv && *s == bs && *hd == d => PagedLayout::Bnsd,
                other => return invalid(format!("key: paged cache {other:?} is not (blocknum, blockSize, H) or (blocknum, Nkv, blockSize, D)")),
            };
            if values[0].dims != keys[0].dims {
                return invalid("value: paged cache must have the key cache's shape");
            }
            if actual_seq_lengths.is_null() {
                return Err(SimErr(
                    ACLNN_ERR_PARAM_NULLPTR,
                    "actualSeqLengths is required with page attention".into(),
                ));
            }
            IncreKv::Paged {
                layout: layout_p,
                max_blocks: table.dims[1],
                block_size: bs,
                table,
            }
        } else if keys.len() == 1 {
            match (kv_row(&keys[0]), kv_row(&values[0])) {
                (Some((kb, s)), Some(v)) if kb == batch && v == (kb, s) => {
                    IncreKv::Contiguous { kv_seq: s }
                }
                _ => {
                    return invalid(format!(
                        "key {:?} / value {:?} do not fit query {:?} in layout {layout:?}",
                        keys[0].dims, values[0].dims, q.dims
                    ))
                }
            }
        } else {
            if keys.len() != batch {
                return invalid(format!(
                    "key: a tensor list needs B = {batch} tensors, got {}",
                    keys.len()
                ));
            }
            for (kt, vt) in keys.iter().zip(&values) {
                match (kv_row(kt), kv_row(vt)) {
                    (Some((1, s)), Some((1, s2))) if s == s2 => {}
                    _ => return invalid(format!("key/value list entries must be batch-1 tensors in layout {layout:?}, got {:?} / {:?}", kt.dims, vt.dims)),
                }
            }
            IncreKv::List
        };
        let asl = int_array(actual_seq_lengths, "actualSeqLengths")?;
        let kv_padding = match tensor(kv_padding_size, "kvPaddingSize")? {
            None => None,
            Some(t) => {
                if t.dtype != DataType::Int64 || t.numel() != 1 {
                    return invalid(format!(
                        "kvPaddingSize: must be one INT64, got {:?} {:?}",
                        t.dtype, t.dims
                    ));
                }
                Some(t)
            }
        };
        let mask = tensor(atten_mask, "attenMask")?;
        if let Some(m) = &mask {
            if !matches!(m.dtype, DataType::Bool | DataType::Int8 | DataType::Uint8)
                || m.dims.first() != Some(&batch)
            {
                return invalid(format!(
                    "attenMask: must be BOOL/INT8/UINT8 (B, …, S), got {:?} {:?}",
                    m.dtype, m.dims
                ));
            }
        }
        let pse = tensor(pse_shift, "pseShift")?;
        if let Some(p) = &pse {
            query_dtype(p, "pseShift", q.dtype)?;
            if p.dims.len() != 4
                || !(p.dims[0] == 1 || p.dims[0] == batch)
                || p.dims[1] != n
                || p.dims[2] != 1
            {
                return invalid(format!(
                    "pseShift: must be (B|1, N, 1, S), got {:?}",
                    p.dims
                ));
            }
        }
        let quant_scale2 = tensor(quant_scale2, "quantScale2")?;
        let quant_offset2 = tensor(quant_offset2, "quantOffset2")?;
        check_attention_out(&out, &q.dims, quant_scale2.is_some(), q.dtype)?;
        crate::cost::note_attention(|| {
            // Each batch entry's key length: its actual length, else the KV tensors' S.
            let full = |b: usize| match &kv {
                IncreKv::Contiguous { kv_seq } => *kv_seq,
                IncreKv::List => kv_row(&keys[b]).map_or(0, |r| r.1),
                IncreKv::Paged {
                    max_blocks,
                    block_size,
                    ..
                } => max_blocks * block_size,
            };
            let len = |b: usize| {
                asl.as_ref()
                    .and_then(|a| a.get(b).or(a.last()))
                    .map_or(full(b), |&l| l.max(0) as usize)
            };
            crate::cost::Attention {
                seqs: (0..batch).map(|b| (1, len(b))).collect(),
                heads: n,
                kv_heads: nkv,
                head_dim: d,
                value_dim: d,
                keep: crate::cost::Keep::ALL,
                q_elem: q.dtype.size(),
                kv_elem: kdt.size(),
                backward: false,
                dtype: q.dtype,
            }
        });
        let call = IncreCall {
            q,
            keys,
            values,
            kv,
            pse,
            mask,
            asl,
            quant_scale2,
            quant_offset2,
            antiquant_scale,
            antiquant_offset,
            kv_padding,
            layout,
            batch,
            n,
            nkv,
            d,
            scale: scale_value,
            inner_precise,
            out,
        };
        submit(OP, move || call.run(), workspace_size, executor)
    })
});
