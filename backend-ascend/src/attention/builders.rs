//! One aclnn call builder per attention op: the validated contract spec plus the device tensors
//! in (the op's carrier, tensor-valued inputs such as prompt's masks and pse and every varlen
//! tensor included), one aclnn call out. Each builder owns everything the spec still carries
//! as host data (IFA's and FIA's masks and pse, block tables, scales, index tensors, the
//! `aclIntArray`s) and CANN's compressed masks (runtime constants), the attribute
//! strings (from the contract's `as_attr`), the empty reserved outputs torch_npu passes, and —
//! through [`burn_ascend_cann::acl::aclnn`] — the version fallback.
//!
//! Both callers go through here: the `Ascend` backend (its tensors as strided views) and the
//! op-replay CLI's `--device sim|npu` (the bundle's tensors uploaded as they are), so the CLI's
//! and the NPU tests' calls are the backend's own.
//!
//! Nothing here knows Burn. Each builder queues its call and returns without waiting: the
//! uploads it owns are stream-ordered (`Runtime::upload`), so dropping them at the end frees
//! them only after the stream's next synchronisation.

use std::sync::Arc;

use half::{bf16, f16};

use burn_ascend_cann::acl::{
    aclnn, AclError, DataType, DeviceTensor, IntArray, Result, Runtime, Tensor, TensorDesc,
    TensorList,
};
use burn_ascend_contract::incre::{BlockTable, IncreInputs, IncreSpec};
use burn_ascend_contract::prompt::{PromptInputs, PromptMaskKind, PromptSpec, PFA_COMPRESSED_MASK};
use burn_ascend_contract::scatter::{
    CacheMode, ScatterDims, ScatterInputs, ScatterKind, ScatterSpec,
};
use burn_ascend_contract::varlen::{
    compressed_mask, MaskSpec, VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs,
    VarlenSpec, VARLEN_LAYOUT,
};

pub(super) fn upload(
    rt: &Runtime,
    bytes: &[u8],
    dims: &[usize],
    dtype: DataType,
) -> Result<DeviceTensor> {
    rt.upload(TensorDesc::contiguous(dims, dtype)?, bytes)
}

/// f32 host values as a tensor of the float `dtype` (the op's own: pse).
pub(super) fn upload_float(
    rt: &Runtime,
    v: &[f32],
    dims: &[usize],
    dtype: DataType,
) -> Result<DeviceTensor> {
    let bytes: Vec<u8> = match dtype {
        DataType::Float => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DataType::Float16 => v
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect(),
        DataType::Bf16 => v
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect(),
        other => {
            return Err(AclError::Invalid {
                param: "dtype".into(),
                rule: format!("float input in {other:?}: must be FLOAT, FLOAT16 or BFLOAT16"),
            })
        }
    };
    upload(rt, &bytes, dims, dtype)
}

/// A `blockTable` on the device: INT32, as IFA and FIA take it.
pub(super) fn upload_block_table(rt: &Runtime, t: &BlockTable) -> Result<DeviceTensor> {
    let bytes: Vec<u8> = t.data.iter().flat_map(|x| x.to_le_bytes()).collect();
    upload(rt, &bytes, &t.shape, DataType::Int32)
}

pub(super) fn upload_i64(rt: &Runtime, v: &[i64], dims: &[usize]) -> Result<DeviceTensor> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    upload(rt, &bytes, dims, DataType::Int64)
}

fn handle<T: AsRef<DeviceTensor>>(t: &Option<T>) -> Result<Option<Tensor<'_>>> {
    t.as_ref().map(|t| t.as_ref().handle()).transpose()
}

/// [`handle`] for the sibling call builders.
pub(super) fn handle_of<T: AsRef<DeviceTensor>>(t: &Option<T>) -> Result<Option<Tensor<'_>>> {
    handle(t)
}

/// A device input of a call that is a runtime constant shared by every call (CANN's compressed
/// masks, empty outputs); the caller's tensors come as handles.
pub(super) type Held = Arc<DeviceTensor>;

/// A constant `UINT8` mask cached on the runtime under `key` (CANN's compressed masks are
/// 2048×2048 and the same for every call).
pub(super) fn constant_mask(
    rt: &Runtime,
    key: &str,
    make: impl FnOnce() -> (Vec<u8>, Vec<usize>),
) -> Result<Arc<DeviceTensor>> {
    rt.constant(key, || {
        let (bytes, dims) = make();
        Ok((TensorDesc::contiguous(&dims, DataType::Uint8)?, bytes))
    })
}

pub(super) fn ints(rt: &Runtime, v: Option<&[i64]>) -> Result<Option<IntArray>> {
    v.map(|v| IntArray::new(rt.api(), v)).transpose()
}

/// An empty tensor for an output the call does not use (as torch_npu passes).
/// An empty tensor of `dtype` for an unused output: a runtime constant shared by every call
/// (nothing is written to zero elements), so that a graph capture, which may not allocate,
/// can record the call.
fn empty(rt: &Runtime, dtype: DataType) -> Result<Held> {
    rt.constant(&format!("empty {dtype:?}"), || {
        Ok((TensorDesc::contiguous(&[0], dtype)?, Vec::new()))
    })
}

/// The varlen inputs the spec implies (CANN's compressed mask, a runtime constant) and its int
/// arrays.
struct VarlenExtras {
    atten_mask: Option<Held>,
    prefix: Option<IntArray>,
    cum_q: IntArray,
    cum_kv: IntArray,
    q_start: Option<IntArray>,
    kv_start: Option<IntArray>,
}

/// The shape a dense TND pse (`[pseTotalLen]` in the spec) is described with, per op — the
/// forward and the backward tilings disagree:
/// - forward: `flash_attention_score/op_host/arch32/flash_attention_score_tiling_general.cpp`
///   classifies the pse by dim 0 alone (`AnalyzeOptionalInput` ~1524–1527: `N·Σ Sq·Skv` is
///   the per-sequence `[N, Sq, Skv]` layout) but every template's `SetPseAlibiParams` (~3876)
///   refuses fewer than 2 dims and reads dim −2 = 1024 as the compressed ALiBi pse: so
///   `[pseTotalLen, 1, 1]` (dim −2 is 1, never 1024; a flat `[pseTotalLen]` would be refused);
/// - backward: `flash_attention_score_grad/op_host/arch32/…_s1s2_bn2gs1s2_sab.cpp`
///   (`ProcessPseInfo` ~528) and `…_s1s2_bn2gs1s2.cpp` (~465) take a TND outer pse only 1-D:
///   `[pseTotalLen]` — and `dpseOut` gets the same shape (torch_npu passes a pse-shaped one).
///
/// A pse given as a device tensor (`VarlenInputs::pse`) is described with these dims by its
/// owner (the `Ascend` backend) over its own storage: no copy.
pub fn dense_pse_dims(total: usize, grad: bool) -> Vec<usize> {
    if grad {
        vec![total]
    } else {
        vec![total, 1, 1]
    }
}

fn varlen_extras(rt: &Runtime, spec: &VarlenSpec) -> Result<VarlenExtras> {
    let atten_mask = match &spec.atten_mask {
        // An explicit mask is the caller's device tensor (`VarlenInputs::atten_mask`).
        MaskSpec::None | MaskSpec::Dense => None,
        // Built on the host only for the runtime's first call of the mode: 4–6 MiB of mask
        // per call was most of a training step's host time (a 0.5 B model at 8k tokens).
        MaskSpec::Compressed if spec.attrs.sparse_mode.takes_compressed_mask() => {
            let mode = spec.attrs.sparse_mode;
            let key = format!("varlen compressed mask {mode:?}");
            Some(constant_mask(rt, &key, || {
                let (m, shape) = compressed_mask(mode).expect("the mode takes one");
                (m, shape.to_vec())
            })?)
        }
        MaskSpec::Compressed => None,
    };
    Ok(VarlenExtras {
        atten_mask,
        prefix: ints(rt, spec.prefix.as_deref())?,
        cum_q: IntArray::new(rt.api(), &spec.actual_seq_q_len)?,
        cum_kv: IntArray::new(rt.api(), &spec.actual_seq_kv_len)?,
        q_start: ints(rt, spec.q_start_idx.as_ref().map(std::slice::from_ref))?,
        kv_start: ints(rt, spec.kv_start_idx.as_ref().map(std::slice::from_ref))?,
    })
}

/// The varlen carrier over aclnn handles (the contract's one carrier per call). `pse` and
/// `alibi_slopes` are the op's one `realShift` (at most one is given): a flat pse must be
/// described with [`dense_pse_dims`] for the op (forward or grad), an ALiBi-compressed one as
/// its `[1|B, N, 1024, maxSkv]`, both in the query's dtype; the slopes FLOAT. An explicit mask
/// (`atten_mask`) is in a mask dtype (BOOL or UINT8), the dropout mask (`drop_mask`) UINT8.
pub type VarlenHandles<'a> = VarlenInputs<&'a Tensor<'a>>;

/// `aclnnFlashAttentionVarLenScore` without a sink, `…V5` with one (the choice and the
/// fallbacks are `aclnn::varlen_fwd`'s) for a validated spec; `head_num` is the query's N and
/// `dtype` its (and the output's) float dtype.
pub fn varlen_fwd(
    rt: &Runtime,
    spec: &VarlenSpec,
    head_num: usize,
    dtype: DataType,
    x: &VarlenHandles<'_>,
    out: &VarlenOutputs<&Tensor<'_>>,
) -> Result<()> {
    let ex = varlen_extras(rt, spec)?;
    // softmaxOutOut is reserved ("预留参数，暂未使用"): an empty tensor, as torch_npu passes.
    let softmax_out = empty(rt, dtype)?;
    {
        let mask = handle(&ex.atten_mask)?;
        let softmax_out = softmax_out.as_ref().handle()?;
        let a = &spec.attrs;
        aclnn::varlen_fwd(
            rt,
            &aclnn::VarlenFwdArgs {
                query: x.query,
                query_rope: None,
                key: x.key,
                key_rope: None,
                value: x.value,
                real_shift: x.pse.or(x.alibi_slopes),
                drop_mask: x.drop_mask,
                padding_mask: None,
                atten_mask: x.atten_mask.or(mask.as_ref()),
                sink: x.sink,
                prefix: ex.prefix.as_ref(),
                actual_seq_q_len: Some(&ex.cum_q),
                actual_seq_kv_len: Some(&ex.cum_kv),
                q_start_idx: ex.q_start.as_ref(),
                kv_start_idx: ex.kv_start.as_ref(),
                scale_value: a.scale,
                keep_prob: a.keep_prob,
                pre_tokens: a.pre_tokens,
                next_tokens: a.next_tokens,
                head_num: head_num as i64,
                input_layout: VARLEN_LAYOUT,
                inner_precise: a.inner_precise,
                sparse_mode: a.sparse_mode.as_attr(),
                pse_type: a.pse_type.as_attr(),
                softmax_out_layout: a.softmax_layout.as_attr(),
                softmax_max: out.softmax_max,
                softmax_sum: out.softmax_sum,
                softmax_out: Some(&softmax_out),
                attention_out: out.attention_out,
            },
        )?;
    }
    Ok(())
}

/// `aclnnFlashAttentionUnpaddingScoreGrad` without a sink, `…GradV5` with one (the choice and
/// the fallbacks are `aclnn::varlen_grad`'s) for a validated spec. `g.dpse` is the `dpseOut`
/// the op writes, required with a `realShift` (pse or slopes): described like it (the op
/// view-copies its dpse into it), in the query's dtype; without one an empty tensor is passed.
pub fn varlen_grad(
    rt: &Runtime,
    spec: &VarlenSpec,
    head_num: usize,
    dtype: DataType,
    x: &VarlenGradInputs<&Tensor<'_>>,
    g: &VarlenGrads<&Tensor<'_>>,
) -> Result<()> {
    let ex = varlen_extras(rt, spec)?;
    // Unused outputs (no rope): empty tensors, as torch_npu passes. `dpseOut` has the pse's
    // shape ([0] without one), as torch_npu allocates it (op-plugin
    // `FlashAttentionKernelNpuOpApi.cpp` ~1119–1123): the op view-copies its pse-shaped dpse
    // into it. No arch32 grad kernel writes dpse (spec Appendix), so its content is not read:
    // the backend computes dpse itself (`burn_ascend_backend::attention`).
    let unused = empty(rt, dtype)?;
    let real_shift = x.inputs.pse.or(x.inputs.alibi_slopes);
    if real_shift.is_some() && g.dpse.is_none() {
        return Err(AclError::Invalid {
            param: "dpseOut".into(),
            rule: "required with a realShift: shaped like it (the op view-copies its dpse into it)"
                .into(),
        });
    }
    {
        let mask = handle(&ex.atten_mask)?;
        let (dq_rope, dk_rope, dpse) = (
            unused.as_ref().handle()?,
            unused.as_ref().handle()?,
            unused.as_ref().handle()?,
        );
        let a = &spec.attrs;
        aclnn::varlen_grad(
            rt,
            &aclnn::VarlenGradArgs {
                query: x.inputs.query,
                query_rope: None,
                key: x.inputs.key,
                key_rope: None,
                value: x.inputs.value,
                dy: x.dy,
                pse_shift: real_shift,
                drop_mask: x.inputs.drop_mask,
                padding_mask: None,
                atten_mask: x.inputs.atten_mask.or(mask.as_ref()),
                softmax_max: Some(x.softmax_max),
                softmax_sum: Some(x.softmax_sum),
                softmax_in: None,
                attention_in: Some(x.attention_in),
                sink_in: x.inputs.sink,
                prefix: ex.prefix.as_ref(),
                actual_seq_q_len: Some(&ex.cum_q),
                actual_seq_kv_len: Some(&ex.cum_kv),
                q_start_idx: ex.q_start.as_ref(),
                kv_start_idx: ex.kv_start.as_ref(),
                scale_value: a.scale,
                keep_prob: a.keep_prob,
                pre_tokens: a.pre_tokens,
                next_tokens: a.next_tokens,
                head_num: head_num as i64,
                input_layout: VARLEN_LAYOUT,
                inner_precise: a.inner_precise,
                sparse_mode: a.sparse_mode.as_attr(),
                pse_type: a.pse_type.as_attr(),
                softmax_in_layout: a.softmax_layout.as_attr(),
                dq: g.dq,
                dq_rope: Some(&dq_rope),
                dk: g.dk,
                dk_rope: Some(&dk_rope),
                dv: g.dv,
                dpse: Some(g.dpse.unwrap_or(&dpse)),
                dsink: g.dsink,
            },
        )?;
    }
    Ok(())
}

/// `quantScale2` / `quantOffset2` (int8 output) on the device, FLOAT `[len]`.
fn post_quant(
    rt: &Runtime,
    q: Option<&burn_ascend_contract::prompt::PostQuantSpec>,
) -> Result<(Option<DeviceTensor>, Option<DeviceTensor>)> {
    let Some(q) = q else {
        return Ok((None, None));
    };
    let scale = upload_float(rt, &q.scale, &[q.scale.len()], DataType::Float)?;
    let offset = q
        .offset
        .as_ref()
        .map(|o| upload_float(rt, o, &[o.len()], DataType::Float))
        .transpose()?;
    Ok((Some(scale), offset))
}

/// CANN's compressed 2048×2048 `attenMask` of PFA / FIA sparse modes 2–4 (1 strictly above the
/// diagonal): a runtime constant, uploaded once per runtime.
pub(super) fn compressed_prompt_mask(rt: &Runtime) -> Result<Held> {
    constant_mask(rt, "prompt compressed mask", || {
        let [rows, cols] = PFA_COMPRESSED_MASK;
        let m: Vec<u8> = (0..rows * cols)
            .map(|x| u8::from(x % cols > x / cols))
            .collect();
        (m, PFA_COMPRESSED_MASK.to_vec())
    })
}

/// `aclnnPromptFlashAttentionV3` (or V1) for a validated spec: query/key/value in the
/// query's float dtype (`pseShift` too), `attention_out` in it as well, or INT8 with
/// `quantScale2`. The dense `attenMask` is the caller's device tensor in a mask dtype (BOOL,
/// INT8 or UINT8); CANN's compressed mask (sparse modes 2–4) is a runtime constant.
pub fn prompt(
    rt: &Runtime,
    spec: &PromptSpec,
    x: &PromptInputs<&Tensor<'_>>,
    attention_out: &Tensor<'_>,
) -> Result<()> {
    let compressed = match spec.atten_mask {
        PromptMaskKind::Compressed => Some(compressed_prompt_mask(rt)?),
        PromptMaskKind::None | PromptMaskKind::Dense => None,
    };
    let (qs2, qo2) = post_quant(rt, spec.post_quant.as_ref())?;
    {
        let compressed = handle(&compressed)?;
        let mask = x.atten_mask.or(compressed.as_ref());
        let (qs2, qo2) = (handle(&qs2)?, handle(&qo2)?);
        let asl = ints(rt, spec.actual_seq_lengths.as_deref())?;
        let asl_kv = ints(rt, spec.actual_seq_lengths_kv.as_deref())?;
        aclnn::prompt(
            rt,
            &aclnn::PromptArgs {
                query: x.query,
                key: x.key,
                value: x.value,
                pse_shift: x.pse_shift,
                atten_mask: mask,
                actual_seq_lengths: asl.as_ref(),
                actual_seq_lengths_kv: asl_kv.as_ref(),
                deq_scale1: None,
                quant_scale1: None,
                deq_scale2: None,
                quant_scale2: qs2.as_ref(),
                quant_offset2: qo2.as_ref(),
                num_heads: spec.num_heads as i64,
                scale_value: spec.scale_value,
                pre_tokens: spec.pre_tokens,
                next_tokens: spec.next_tokens,
                input_layout: spec.input_layout.as_attr(),
                num_key_value_heads: spec.num_key_value_heads as i64,
                sparse_mode: spec.sparse_mode,
                inner_precise: spec.inner_precise,
                attention_out,
            },
        )?;
    }
    Ok(())
}

/// `aclnnIncreFlashAttentionV4` for a validated spec: the call's tensors as aclnn handles (the
/// key / value tensor lists are made here from the carrier's
/// [`IncreKv`](burn_ascend_contract::incre::IncreKv); the mask BOOL/INT8/UINT8, pse and
/// antiquant scales in the query's float dtype); `attention_out` in it too, or INT8 with
/// `quantScale2`. Only the spec's host metadata is uploaded here (block table,
/// `kvPaddingSize`, `quantScale2`).
pub fn incre(
    rt: &Runtime,
    spec: &IncreSpec,
    x: IncreInputs<Tensor<'_>>,
    attention_out: &Tensor<'_>,
) -> Result<()> {
    let (keys, values) = x.kv.into_lists();
    let (key, value) = (
        TensorList::new(rt.api(), keys)?,
        TensorList::new(rt.api(), values)?,
    );
    let table = spec
        .block_table
        .as_ref()
        .map(|t| upload_block_table(rt, t))
        .transpose()?;
    // kvPaddingSize is an INT64 tensor of one element.
    let pad = spec
        .kv_padding_size
        .map(|p| upload_i64(rt, &[p], &[1]))
        .transpose()?;
    let (qs2, qo2) = post_quant(rt, spec.post_quant.as_ref())?;
    {
        let (table, pad) = (handle(&table)?, handle(&pad)?);
        let (qs2, qo2) = (handle(&qs2)?, handle(&qo2)?);
        let asl = ints(rt, spec.actual_seq_lengths.as_deref())?;
        aclnn::incre(
            rt,
            &aclnn::IncreArgs {
                query: &x.query,
                key: &key,
                value: &value,
                pse_shift: x.pse_shift.as_ref(),
                atten_mask: x.atten_mask.as_ref(),
                actual_seq_lengths: asl.as_ref(),
                dequant_scale1: None,
                quant_scale1: None,
                dequant_scale2: None,
                quant_scale2: qs2.as_ref(),
                quant_offset2: qo2.as_ref(),
                antiquant_scale: x.antiquant_scale.as_ref(),
                antiquant_offset: x.antiquant_offset.as_ref(),
                blocktable: table.as_ref(),
                kv_padding_size: pad.as_ref(),
                num_heads: spec.num_heads as i64,
                scale_value: spec.scale_value,
                input_layout: spec.input_layout.as_attr(),
                num_key_value_heads: spec.num_key_value_heads as i64,
                block_size: spec.block_size as i64,
                inner_precise: spec.inner_precise,
                attention_out,
            },
        )?;
    }
    Ok(())
}

/// The descriptor of a cache of `dims` for `mode`: contiguous ND for every mode, PA_NZ caches
/// over `[nb, N·D/last, bs, last]` (why not FRACTAL_NZ: [`TensorDesc::pa_nz_cache`]).
pub fn cache_desc(mode: CacheMode, dims: &[usize], dtype: DataType) -> Result<TensorDesc> {
    match mode {
        CacheMode::PaNz => TensorDesc::pa_nz_cache(dims, dtype),
        CacheMode::Norm | CacheMode::Nhsd => TensorDesc::contiguous(dims, dtype),
    }
}

/// The descriptor of an Nct source (key `which = 0`, value `1`) whose storage, from element
/// `offset` of a buffer of `storage_elems`, is the validated `[rows, N, D]` array: the view
/// `[T, N, D]` with row stride `strides[0]`. CANN's tiling takes numTokens, N and D from the
/// key's dims (`scatter_pa_kv_cache_tiling.cpp`, `CheckInputDimUpdate`) and the kernel reads
/// token `t` at `t·strides[0] + offsets[which]` from the base (`scatter_pa_kv_cache_nd.h`).
pub fn nct_source_desc(
    dims: &ScatterDims,
    which: usize,
    offset: usize,
    storage_elems: usize,
    dtype: DataType,
) -> Result<TensorDesc> {
    let Some((strides, _)) = dims.nct else {
        return Err(AclError::Invalid {
            param: "scatterMode".into(),
            rule: "an Nct source descriptor needs scatterMode Nct".into(),
        });
    };
    let d = if which == 0 {
        dims.k_head_size
    } else {
        dims.v_head_size
    };
    TensorDesc::strided(
        &[dims.num_tokens, dims.num_heads, d],
        &[strides[0], d, 1],
        offset,
        storage_elems,
        dtype,
    )
}

/// The `strides` / `offsets` arrays passed to aclnnScatterPaKvCache: the spec's with Nct, else
/// `[1, 1]` / `[0, 0]` — never null, as torch_npu does (op-plugin
/// `op_plugin/ops/opapi/ScatterPaKvCacheNpuOpApi.cpp`, `strides_size = {1, 1}`,
/// `offsets_size = {0, 0}`) and as the op definition's defaults are.
pub fn scatter_strides_offsets(spec: &ScatterSpec) -> ([i64; 2], [i64; 2]) {
    let two = |v: &Option<Vec<i64>>, default: [i64; 2]| match v.as_deref() {
        Some(&[a, b]) if spec.scatter_mode == ScatterKind::Nct => [a, b],
        _ => default,
    };
    (two(&spec.strides, [1, 1]), two(&spec.offsets, [0, 0]))
}

/// `aclnnScatterPaKvCache` for a validated spec; the caches are updated in place. The key and
/// value are described with [`nct_source_desc`] for scatterMode Nct, the caches with
/// [`cache_desc`].
pub fn scatter(rt: &Runtime, spec: &ScatterSpec, x: &ScatterInputs<&Tensor<'_>>) -> Result<()> {
    scatter_with_slots(rt, spec, x, None)
}

/// [`scatter`] with the slot mapping already on the device (`slots`, INT64 `[T]`: a captured
/// graph's input) instead of the spec's host slots, which then only give the shape.
pub fn scatter_with_slots(
    rt: &Runtime,
    spec: &ScatterSpec,
    x: &ScatterInputs<&Tensor<'_>>,
    slots: Option<&Tensor<'_>>,
) -> Result<()> {
    let cache_mode = spec.cache_mode.as_attr().ok_or_else(|| {
        AclError::Unsupported("cacheMode NHSD has no confirmed aclnn attribute".into())
    })?;
    let uploaded = match slots {
        Some(_) => None,
        None => Some(upload_i64(
            rt,
            &spec.slot_mapping,
            &spec.slot_mapping_shape,
        )?),
    };
    let vec1 = |v: &Option<Vec<i64>>| {
        v.as_ref()
            .map(|v| upload_i64(rt, v, &[v.len()]))
            .transpose()
    };
    let (clens, cso, seq_lens) = (
        vec1(&spec.compress_lens)?,
        vec1(&spec.compress_seq_offset)?,
        vec1(&spec.seq_lens)?,
    );
    {
        let own = handle(&uploaded)?;
        let Some(slots) = slots.or(own.as_ref()) else {
            return Err(AclError::Invalid {
                param: "slotMapping".into(),
                rule: "missing".into(),
            });
        };
        let (clens, cso, seq_lens) = (handle(&clens)?, handle(&cso)?, handle(&seq_lens)?);
        let (strides, offsets) = scatter_strides_offsets(spec);
        let strides = IntArray::new(rt.api(), &strides)?;
        let offsets = IntArray::new(rt.api(), &offsets)?;
        aclnn::scatter(
            rt,
            &aclnn::ScatterArgs {
                key: x.key,
                key_cache: x.key_cache,
                slot_mapping: slots,
                value: x.value,
                value_cache: x.value_cache,
                compress_lens: clens.as_ref(),
                compress_seq_offset: cso.as_ref(),
                seq_lens: seq_lens.as_ref(),
                cache_mode,
                scatter_mode: spec.scatter_mode.as_attr(),
                strides: Some(&strides),
                offsets: Some(&offsets),
            },
        )?;
    }
    Ok(())
}
