//! Host-buffer entry points: upload the inputs, build every descriptor, run the op through
//! [`super::ops`], synchronise and download the outputs. What the CLI's `--device sim|npu`
//! calls. Inputs are contiguous row-major little-endian bytes with an `aclDataType`; nothing
//! here knows element types beyond their size.

use super::error::{AclError, Result};
use super::ffi::DataType;
use super::ops;
use super::runtime::Runtime;
use super::tensor::{DeviceTensor, IntArray, Tensor, TensorDesc, TensorList};

/// A contiguous host tensor.
#[derive(Debug, Clone, Copy)]
pub struct HostArg<'a> {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions (row-major, contiguous).
    pub dims: &'a [usize],
    /// Little-endian element bytes.
    pub bytes: &'a [u8],
}

impl HostArg<'_> {
    fn desc(&self) -> Result<TensorDesc> {
        TensorDesc::contiguous(self.dims, self.dtype)
    }
}

/// A downloaded output tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOut {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions.
    pub dims: Vec<usize>,
    /// Little-endian element bytes.
    pub bytes: Vec<u8>,
}

fn up(rt: &Runtime, a: &HostArg<'_>) -> Result<DeviceTensor> {
    rt.upload(a.desc()?, a.bytes)
}

fn up_opt(rt: &Runtime, a: Option<&HostArg<'_>>) -> Result<Option<DeviceTensor>> {
    a.map(|a| up(rt, a)).transpose()
}

fn handle(t: &Option<DeviceTensor>) -> Result<Option<Tensor<'_>>> {
    t.as_ref().map(DeviceTensor::handle).transpose()
}

fn ints(rt: &Runtime, v: Option<&[i64]>) -> Result<Option<IntArray>> {
    v.map(|v| IntArray::new(rt.api(), v)).transpose()
}

fn down(t: &DeviceTensor) -> Result<HostOut> {
    Ok(HostOut {
        dtype: t.desc.dtype,
        dims: t.desc.dims.iter().map(|&d| d as usize).collect(),
        bytes: t.download()?,
    })
}

fn out(rt: &Runtime, dims: &[usize], dtype: DataType) -> Result<DeviceTensor> {
    rt.zeros(TensorDesc::contiguous(dims, dtype)?)
}

fn rank3(a: &HostArg<'_>, name: &str) -> Result<[usize; 3]> {
    match *a.dims {
        [x, y, z] => Ok([x, y, z]),
        _ => Err(AclError::invalid(
            name,
            format!("must be rank 3 [T, N, D], got {:?}", a.dims),
        )),
    }
}

/// Attributes shared by varlen forward and backward.
#[derive(Debug, Clone, PartialEq)]
pub struct VarlenAttrs {
    pub scale_value: f64,
    pub keep_prob: f64,
    pub pre_tokens: i64,
    pub next_tokens: i64,
    pub head_num: i64,
    pub input_layout: String,
    pub inner_precise: i64,
    pub sparse_mode: i64,
    pub pse_type: i64,
    /// `softmaxOutLayout` (forward) / `softmaxInLayout` (backward).
    pub softmax_layout: String,
}

/// Inputs shared by varlen forward and backward (TND).
#[derive(Debug, Clone, Copy)]
pub struct VarlenInputs<'a> {
    pub query: HostArg<'a>,
    pub key: HostArg<'a>,
    pub value: HostArg<'a>,
    pub real_shift: Option<HostArg<'a>>,
    pub drop_mask: Option<HostArg<'a>>,
    pub atten_mask: Option<HostArg<'a>>,
    /// `sink` (forward) / `sinkIn` (backward), FLOAT `[headNum]`.
    pub sink: Option<HostArg<'a>>,
    pub prefix: Option<&'a [i64]>,
    pub actual_seq_q_len: &'a [i64],
    pub actual_seq_kv_len: &'a [i64],
    pub q_start_idx: Option<i64>,
    pub kv_start_idx: Option<i64>,
}

/// Varlen forward outputs.
#[derive(Debug, Clone)]
pub struct VarlenFwdOut {
    /// `[T, N, Dv]`, the query's dtype.
    pub attention_out: HostOut,
    /// `[T, N, 8]` FLOAT.
    pub softmax_max: HostOut,
    /// `[T, N, 8]` FLOAT.
    pub softmax_sum: HostOut,
}

/// `aclnnFlashAttentionVarLenScoreV5` on host buffers.
pub fn varlen_fwd(rt: &Runtime, x: &VarlenInputs<'_>, a: &VarlenAttrs) -> Result<VarlenFwdOut> {
    let [t, n, _] = rank3(&x.query, "query")?;
    let [_, _, dv] = rank3(&x.value, "value")?;
    let (q, k, v) = (up(rt, &x.query)?, up(rt, &x.key)?, up(rt, &x.value)?);
    let pse = up_opt(rt, x.real_shift.as_ref())?;
    let drop = up_opt(rt, x.drop_mask.as_ref())?;
    let mask = up_opt(rt, x.atten_mask.as_ref())?;
    let sink = up_opt(rt, x.sink.as_ref())?;
    let o = out(rt, &[t, n, dv], x.query.dtype)?;
    let smax = out(rt, &[t, n, 8], DataType::Float)?;
    let ssum = out(rt, &[t, n, 8], DataType::Float)?;
    // softmaxOutOut is reserved ("预留参数，暂未使用"): an empty tensor, as torch_npu passes.
    let sm_out = out(rt, &[0], x.query.dtype)?;
    {
        let api = rt.api();
        let (qh, kh, vh) = (q.handle()?, k.handle()?, v.handle()?);
        let (pse_h, drop_h, mask_h, sink_h) = (
            handle(&pse)?,
            handle(&drop)?,
            handle(&mask)?,
            handle(&sink)?,
        );
        let (oh, maxh, sumh, smh) = (
            o.handle()?,
            smax.handle()?,
            ssum.handle()?,
            sm_out.handle()?,
        );
        let prefix = ints(rt, x.prefix)?;
        let cum_q = IntArray::new(api, x.actual_seq_q_len)?;
        let cum_kv = IntArray::new(api, x.actual_seq_kv_len)?;
        let q_start = ints(rt, x.q_start_idx.as_ref().map(std::slice::from_ref))?;
        let kv_start = ints(rt, x.kv_start_idx.as_ref().map(std::slice::from_ref))?;
        ops::varlen_fwd(
            rt,
            &ops::VarlenFwdArgs {
                query: &qh,
                query_rope: None,
                key: &kh,
                key_rope: None,
                value: &vh,
                real_shift: pse_h.as_ref(),
                drop_mask: drop_h.as_ref(),
                padding_mask: None,
                atten_mask: mask_h.as_ref(),
                sink: sink_h.as_ref(),
                prefix: prefix.as_ref(),
                actual_seq_q_len: Some(&cum_q),
                actual_seq_kv_len: Some(&cum_kv),
                q_start_idx: q_start.as_ref(),
                kv_start_idx: kv_start.as_ref(),
                scale_value: a.scale_value,
                keep_prob: a.keep_prob,
                pre_tokens: a.pre_tokens,
                next_tokens: a.next_tokens,
                head_num: a.head_num,
                input_layout: &a.input_layout,
                inner_precise: a.inner_precise,
                sparse_mode: a.sparse_mode,
                pse_type: a.pse_type,
                softmax_out_layout: &a.softmax_layout,
                softmax_max: &maxh,
                softmax_sum: &sumh,
                softmax_out: Some(&smh),
                attention_out: &oh,
            },
        )?;
    }
    rt.synchronize()?;
    Ok(VarlenFwdOut {
        attention_out: down(&o)?,
        softmax_max: down(&smax)?,
        softmax_sum: down(&ssum)?,
    })
}

/// The forward results the backward reads.
#[derive(Debug, Clone, Copy)]
pub struct VarlenSaved<'a> {
    pub dy: HostArg<'a>,
    pub attention_in: HostArg<'a>,
    pub softmax_max: HostArg<'a>,
    pub softmax_sum: HostArg<'a>,
}

/// Varlen backward outputs.
#[derive(Debug, Clone)]
pub struct VarlenGradOut {
    pub dq: HostOut,
    pub dk: HostOut,
    pub dv: HostOut,
    /// With a sink: FLOAT `[N]`.
    pub dsink: Option<HostOut>,
}

/// `aclnnFlashAttentionUnpaddingScoreGradV5` on host buffers.
pub fn varlen_grad(
    rt: &Runtime,
    x: &VarlenInputs<'_>,
    s: &VarlenSaved<'_>,
    a: &VarlenAttrs,
) -> Result<VarlenGradOut> {
    let [_, n, _] = rank3(&x.query, "query")?;
    let (q, k, v) = (up(rt, &x.query)?, up(rt, &x.key)?, up(rt, &x.value)?);
    let (dy, o) = (up(rt, &s.dy)?, up(rt, &s.attention_in)?);
    let (smax, ssum) = (up(rt, &s.softmax_max)?, up(rt, &s.softmax_sum)?);
    let pse = up_opt(rt, x.real_shift.as_ref())?;
    let drop = up_opt(rt, x.drop_mask.as_ref())?;
    let mask = up_opt(rt, x.atten_mask.as_ref())?;
    let sink = up_opt(rt, x.sink.as_ref())?;
    let dq = out(rt, x.query.dims, x.query.dtype)?;
    let dk = out(rt, x.key.dims, x.query.dtype)?;
    let dv = out(rt, x.value.dims, x.query.dtype)?;
    let dsink = x.sink.map(|_| out(rt, &[n], DataType::Float)).transpose()?;
    // Unused outputs (no rope, no pse gradient): empty tensors, as torch_npu passes.
    let empty = out(rt, &[0], x.query.dtype)?;
    {
        let api = rt.api();
        let (qh, kh, vh) = (q.handle()?, k.handle()?, v.handle()?);
        let (dyh, oh, maxh, sumh) = (dy.handle()?, o.handle()?, smax.handle()?, ssum.handle()?);
        let (pse_h, drop_h, mask_h, sink_h) = (
            handle(&pse)?,
            handle(&drop)?,
            handle(&mask)?,
            handle(&sink)?,
        );
        let (dqh, dkh, dvh, dsh) = (dq.handle()?, dk.handle()?, dv.handle()?, handle(&dsink)?);
        let (e1, e2, e3) = (empty.handle()?, empty.handle()?, empty.handle()?);
        let prefix = ints(rt, x.prefix)?;
        let cum_q = IntArray::new(api, x.actual_seq_q_len)?;
        let cum_kv = IntArray::new(api, x.actual_seq_kv_len)?;
        let q_start = ints(rt, x.q_start_idx.as_ref().map(std::slice::from_ref))?;
        let kv_start = ints(rt, x.kv_start_idx.as_ref().map(std::slice::from_ref))?;
        ops::varlen_grad(
            rt,
            &ops::VarlenGradArgs {
                query: &qh,
                query_rope: None,
                key: &kh,
                key_rope: None,
                value: &vh,
                dy: &dyh,
                pse_shift: pse_h.as_ref(),
                drop_mask: drop_h.as_ref(),
                padding_mask: None,
                atten_mask: mask_h.as_ref(),
                softmax_max: Some(&maxh),
                softmax_sum: Some(&sumh),
                softmax_in: None,
                attention_in: Some(&oh),
                sink_in: sink_h.as_ref(),
                prefix: prefix.as_ref(),
                actual_seq_q_len: Some(&cum_q),
                actual_seq_kv_len: Some(&cum_kv),
                q_start_idx: q_start.as_ref(),
                kv_start_idx: kv_start.as_ref(),
                scale_value: a.scale_value,
                keep_prob: a.keep_prob,
                pre_tokens: a.pre_tokens,
                next_tokens: a.next_tokens,
                head_num: a.head_num,
                input_layout: &a.input_layout,
                inner_precise: a.inner_precise,
                sparse_mode: a.sparse_mode,
                pse_type: a.pse_type,
                softmax_in_layout: &a.softmax_layout,
                dq: &dqh,
                dq_rope: Some(&e1),
                dk: &dkh,
                dk_rope: Some(&e2),
                dv: &dvh,
                dpse: Some(&e3),
                dsink: dsh.as_ref(),
            },
        )?;
    }
    rt.synchronize()?;
    Ok(VarlenGradOut {
        dq: down(&dq)?,
        dk: down(&dk)?,
        dv: down(&dv)?,
        dsink: dsink.as_ref().map(down).transpose()?,
    })
}

/// Prompt attention inputs (`aclnnPromptFlashAttentionV3`).
#[derive(Debug, Clone, Copy)]
pub struct PromptInputs<'a> {
    pub query: HostArg<'a>,
    pub key: HostArg<'a>,
    pub value: HostArg<'a>,
    pub pse_shift: Option<HostArg<'a>>,
    pub atten_mask: Option<HostArg<'a>>,
    pub actual_seq_lengths: Option<&'a [i64]>,
    pub actual_seq_lengths_kv: Option<&'a [i64]>,
    pub quant_scale2: Option<HostArg<'a>>,
    pub quant_offset2: Option<HostArg<'a>>,
    pub num_heads: i64,
    pub scale_value: f64,
    pub pre_tokens: i64,
    pub next_tokens: i64,
    pub input_layout: &'a str,
    pub num_key_value_heads: i64,
    pub sparse_mode: i64,
    pub inner_precise: i64,
}

/// `aclnnPromptFlashAttentionV3` (or V1) on host buffers; `out` is the output's shape and
/// dtype (the query's, or INT8 with `quantScale2`).
pub fn prompt(
    rt: &Runtime,
    x: &PromptInputs<'_>,
    out_dims: &[usize],
    out_dtype: DataType,
) -> Result<HostOut> {
    let (q, k, v) = (up(rt, &x.query)?, up(rt, &x.key)?, up(rt, &x.value)?);
    let pse = up_opt(rt, x.pse_shift.as_ref())?;
    let mask = up_opt(rt, x.atten_mask.as_ref())?;
    let qs2 = up_opt(rt, x.quant_scale2.as_ref())?;
    let qo2 = up_opt(rt, x.quant_offset2.as_ref())?;
    let o = out(rt, out_dims, out_dtype)?;
    {
        let (qh, kh, vh, oh) = (q.handle()?, k.handle()?, v.handle()?, o.handle()?);
        let (pse_h, mask_h, qs2_h, qo2_h) =
            (handle(&pse)?, handle(&mask)?, handle(&qs2)?, handle(&qo2)?);
        let asl = ints(rt, x.actual_seq_lengths)?;
        let asl_kv = ints(rt, x.actual_seq_lengths_kv)?;
        ops::prompt(
            rt,
            &ops::PromptArgs {
                query: &qh,
                key: &kh,
                value: &vh,
                pse_shift: pse_h.as_ref(),
                atten_mask: mask_h.as_ref(),
                actual_seq_lengths: asl.as_ref(),
                actual_seq_lengths_kv: asl_kv.as_ref(),
                deq_scale1: None,
                quant_scale1: None,
                deq_scale2: None,
                quant_scale2: qs2_h.as_ref(),
                quant_offset2: qo2_h.as_ref(),
                num_heads: x.num_heads,
                scale_value: x.scale_value,
                pre_tokens: x.pre_tokens,
                next_tokens: x.next_tokens,
                input_layout: x.input_layout,
                num_key_value_heads: x.num_key_value_heads,
                sparse_mode: x.sparse_mode,
                inner_precise: x.inner_precise,
                attention_out: &oh,
            },
        )?;
    }
    rt.synchronize()?;
    down(&o)
}

/// Where incremental attention's key/value come from.
#[derive(Debug, Clone)]
pub enum IncreKv<'a> {
    /// One key and one value tensor (contiguous `(B, S, …)`, or with a block table the paged
    /// caches).
    One {
        key: HostArg<'a>,
        value: HostArg<'a>,
    },
    /// The tensor-list form: one batch-1 tensor per batch.
    List {
        keys: Vec<HostArg<'a>>,
        values: Vec<HostArg<'a>>,
    },
}

/// Incremental attention inputs (`aclnnIncreFlashAttentionV4`).
#[derive(Debug, Clone)]
pub struct IncreInputs<'a> {
    pub query: HostArg<'a>,
    pub kv: IncreKv<'a>,
    pub pse_shift: Option<HostArg<'a>>,
    pub atten_mask: Option<HostArg<'a>>,
    pub actual_seq_lengths: Option<&'a [i64]>,
    pub quant_scale2: Option<HostArg<'a>>,
    pub quant_offset2: Option<HostArg<'a>>,
    pub antiquant_scale: Option<HostArg<'a>>,
    pub antiquant_offset: Option<HostArg<'a>>,
    /// INT32 `(B, maxBlocksPerSeq)`.
    pub blocktable: Option<HostArg<'a>>,
    /// Passed as an INT64 tensor of one element.
    pub kv_padding_size: Option<i64>,
    pub num_heads: i64,
    pub scale_value: f64,
    pub input_layout: &'a str,
    pub num_key_value_heads: i64,
    pub block_size: i64,
    pub inner_precise: i64,
}

/// `aclnnIncreFlashAttentionV4` on host buffers; the output has the query's shape and
/// `out_dtype`.
pub fn incre(rt: &Runtime, x: &IncreInputs<'_>, out_dtype: DataType) -> Result<HostOut> {
    let api = rt.api();
    let q = up(rt, &x.query)?;
    let (keys, values): (Vec<DeviceTensor>, Vec<DeviceTensor>) = match &x.kv {
        IncreKv::One { key, value } => (vec![up(rt, key)?], vec![up(rt, value)?]),
        IncreKv::List { keys, values } => (
            keys.iter().map(|a| up(rt, a)).collect::<Result<_>>()?,
            values.iter().map(|a| up(rt, a)).collect::<Result<_>>()?,
        ),
    };
    let pse = up_opt(rt, x.pse_shift.as_ref())?;
    let mask = up_opt(rt, x.atten_mask.as_ref())?;
    let qs2 = up_opt(rt, x.quant_scale2.as_ref())?;
    let qo2 = up_opt(rt, x.quant_offset2.as_ref())?;
    let aqs = up_opt(rt, x.antiquant_scale.as_ref())?;
    let aqo = up_opt(rt, x.antiquant_offset.as_ref())?;
    let table = up_opt(rt, x.blocktable.as_ref())?;
    let pad = x
        .kv_padding_size
        .map(|p| {
            rt.upload(
                TensorDesc::contiguous(&[1], DataType::Int64)?,
                &p.to_le_bytes(),
            )
        })
        .transpose()?;
    let o = out(rt, x.query.dims, out_dtype)?;
    {
        let (qh, oh) = (q.handle()?, o.handle()?);
        let kl = TensorList::new(
            api,
            keys.iter()
                .map(DeviceTensor::handle)
                .collect::<Result<_>>()?,
        )?;
        let vl = TensorList::new(
            api,
            values
                .iter()
                .map(DeviceTensor::handle)
                .collect::<Result<_>>()?,
        )?;
        let (pse_h, mask_h, qs2_h, qo2_h) =
            (handle(&pse)?, handle(&mask)?, handle(&qs2)?, handle(&qo2)?);
        let (aqs_h, aqo_h, table_h, pad_h) =
            (handle(&aqs)?, handle(&aqo)?, handle(&table)?, handle(&pad)?);
        let asl = ints(rt, x.actual_seq_lengths)?;
        ops::incre(
            rt,
            &ops::IncreArgs {
                query: &qh,
                key: &kl,
                value: &vl,
                pse_shift: pse_h.as_ref(),
                atten_mask: mask_h.as_ref(),
                actual_seq_lengths: asl.as_ref(),
                dequant_scale1: None,
                quant_scale1: None,
                dequant_scale2: None,
                quant_scale2: qs2_h.as_ref(),
                quant_offset2: qo2_h.as_ref(),
                antiquant_scale: aqs_h.as_ref(),
                antiquant_offset: aqo_h.as_ref(),
                blocktable: table_h.as_ref(),
                kv_padding_size: pad_h.as_ref(),
                num_heads: x.num_heads,
                scale_value: x.scale_value,
                input_layout: x.input_layout,
                num_key_value_heads: x.num_key_value_heads,
                block_size: x.block_size,
                inner_precise: x.inner_precise,
                attention_out: &oh,
            },
        )?;
    }
    rt.synchronize()?;
    down(&o)
}

/// KV cache scatter inputs (`aclnnScatterPaKvCache`); the caches are read, updated in place on
/// the device and returned.
#[derive(Debug, Clone, Copy)]
pub struct ScatterInputs<'a> {
    pub key: HostArg<'a>,
    pub key_cache: HostArg<'a>,
    pub slot_mapping: HostArg<'a>,
    pub value: Option<HostArg<'a>>,
    pub value_cache: Option<HostArg<'a>>,
    pub compress_lens: Option<HostArg<'a>>,
    pub compress_seq_offset: Option<HostArg<'a>>,
    pub seq_lens: Option<HostArg<'a>>,
    pub cache_mode: &'a str,
    pub scatter_mode: &'a str,
    pub strides: Option<&'a [i64]>,
    pub offsets: Option<&'a [i64]>,
}

/// Updated caches.
#[derive(Debug, Clone)]
pub struct ScatterOut {
    pub key_cache: HostOut,
    pub value_cache: Option<HostOut>,
}

/// `aclnnScatterPaKvCache` on host buffers. PA_NZ caches are described as
/// `ACL_FORMAT_FRACTAL_NZ`, everything else ND.
pub fn scatter(rt: &Runtime, x: &ScatterInputs<'_>) -> Result<ScatterOut> {
    let cache = |a: &HostArg<'_>| -> Result<DeviceTensor> {
        let desc = if x.cache_mode == "PA_NZ" {
            TensorDesc::pa_nz_cache(a.dims, a.dtype)?
        } else {
            a.desc()?
        };
        rt.upload(desc, a.bytes)
    };
    let key = up(rt, &x.key)?;
    let kc = cache(&x.key_cache)?;
    let slots = up(rt, &x.slot_mapping)?;
    let value = up_opt(rt, x.value.as_ref())?;
    let vc = x.value_cache.as_ref().map(cache).transpose()?;
    let cl = up_opt(rt, x.compress_lens.as_ref())?;
    let cso = up_opt(rt, x.compress_seq_offset.as_ref())?;
    let sl = up_opt(rt, x.seq_lens.as_ref())?;
    {
        let (kh, kch, sh) = (key.handle()?, kc.handle()?, slots.handle()?);
        let (vh, vch) = (handle(&value)?, handle(&vc)?);
        let (clh, csoh, slh) = (handle(&cl)?, handle(&cso)?, handle(&sl)?);
        let strides = ints(rt, x.strides)?;
        let offsets = ints(rt, x.offsets)?;
        ops::scatter(
            rt,
            &ops::ScatterArgs {
                key: &kh,
                key_cache: &kch,
                slot_mapping: &sh,
                value: vh.as_ref(),
                value_cache: vch.as_ref(),
                compress_lens: clh.as_ref(),
                compress_seq_offset: csoh.as_ref(),
                seq_lens: slh.as_ref(),
                cache_mode: x.cache_mode,
                scatter_mode: x.scatter_mode,
                strides: strides.as_ref(),
                offsets: offsets.as_ref(),
            },
        )?;
    }
    rt.synchronize()?;
    Ok(ScatterOut {
        key_cache: down(&kc)?,
        value_cache: vc.as_ref().map(down).transpose()?,
    })
}
