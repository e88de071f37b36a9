//! Simulated KV-cache scatter: `aclnnScatterPaKvCache` (Norm / PA_NZ caches, None / Nct and
//! the compressed Alibi / Rope / Omni modes), on the CPU reference
//! (`burn_ascend_kernels::reference::scatter`). The caches are updated in place.
//!
//! The first stage refuses what CANN's op_host refuses or what would make the kernel read or
//! write out of range (ops-transformer `attention/scatter_pa_kv_cache`; there is no
//! hand-written op_api: `op_host/CMakeLists.txt` generates it from `scatter_pa_kv_cache_def.cpp`,
//! whose `strides` / `offsets` are OPTIONAL ListInt attributes defaulting to `[1, 1]` /
//! `[0, 0]`, so null arrays are accepted outside Nct).

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::scatter::ScatterKind;
use burn_ascend_contract::scatter::{
    check_compressed_scatter, check_scatter, CacheMode, CompressMode, CompressedScatterArgs,
    PlainScatterArgs as RefScatterArgs, ScatterMode,
};
use burn_ascend_kernels::reference::scatter::{
    scatter_pa_kv_cache as reference_scatter, scatter_pa_kv_cache_compressed,
};
use half::{bf16, f16};

use crate::state::{
    self, c_str, int_array, invalid, read_device, required, tensor, SimErr, SimResult, SimTensor,
};
use crate::wire::{encode, ints, submit, typed, Wire, IA};

struct ScatterCall {
    key: SimTensor,
    key_cache: SimTensor,
    slots: SimTensor,
    value: Option<SimTensor>,
    value_cache: Option<SimTensor>,
    compress_lens: Option<SimTensor>,
    compress_seq_offset: Option<SimTensor>,
    seq_lens: Option<SimTensor>,
    cache_mode: CacheMode,
    compress: Option<CompressMode>,
    nct: Option<([usize; 2], [usize; 2])>,
    num_tokens: usize,
    num_heads: usize,
    dk: usize,
    dv: usize,
    num_blocks: usize,
    block_size: usize,
}

impl ScatterCall {
    fn run(&self) -> SimResult<()> {
        // The first stage let FLOAT16, BFLOAT16 and INT8 through, nothing else.
        match self.key.dtype {
            DataType::Float16 => self.run_typed::<f16>(),
            DataType::Bf16 => self.run_typed::<bf16>(),
            _ => self.run_typed::<i8>(),
        }
    }

    fn run_typed<W: Wire>(&self) -> SimResult<()> {
        // Nct: the kernel addresses the source from its base with its own strides
        // (`t·strideK_ + offset`), not through the descriptor's view strides.
        let source = |t: &SimTensor, name: &str| {
            if self.nct.is_some() {
                storage_from_view::<W>(t, name)
            } else {
                typed::<W>(t, name)
            }
        };
        let key = source(&self.key, "key")?;
        let value = self
            .value
            .as_ref()
            .map(|t| source(t, "value"))
            .transpose()?;
        let mut kc = typed::<W>(&self.key_cache, "keyCacheRef")?;
        let mut vc = self
            .value_cache
            .as_ref()
            .map(|t| typed::<W>(t, "valueCacheRef"))
            .transpose()?;
        let slots = ints(&self.slots, "slotMapping")?;
        let vlen = vc.as_ref().map(Vec::len);
        let fail = |e: String| SimErr(ACLNN_ERR_PARAM_INVALID, format!("slotMapping: {e}"));
        if let Some(mode) = self.compress {
            let get =
                |t: &Option<SimTensor>, name: &str| t.as_ref().map(|t| ints(t, name)).transpose();
            let clens = get(&self.compress_lens, "compressLens")?.unwrap_or_default();
            let seq_lens = get(&self.seq_lens, "seqLens")?.unwrap_or_default();
            let offs = get(&self.compress_seq_offset, "compressSeqOffset")?;
            let a = CompressedScatterArgs {
                key: &key,
                value: value.as_deref(),
                slot_mapping: &slots,
                compress_lens: &clens,
                seq_lens: &seq_lens,
                compress_seq_offset: offs.as_deref(),
                num_heads: self.num_heads,
                k_head_size: self.dk,
                v_head_size: self.dv,
                num_blocks: self.num_blocks,
                block_size: self.block_size,
                mode,
            };
            check_compressed_scatter(&a, kc.len(), vlen).map_err(fail)?;
            scatter_pa_kv_cache_compressed(&a, &mut kc, vc.as_deref_mut());
        } else {
            let a = RefScatterArgs {
                key: &key,
                value: value.as_deref(),
                slot_mapping: &slots,
                num_tokens: self.num_tokens,
                num_heads: self.num_heads,
                k_head_size: self.dk,
                v_head_size: self.dv,
                num_blocks: self.num_blocks,
                block_size: self.block_size,
                cache_mode: self.cache_mode,
                scatter_mode: match self.nct {
                    Some((strides, offsets)) => ScatterMode::Nct { strides, offsets },
                    None => ScatterMode::None,
                },
            };
            check_scatter(&a, kc.len(), vlen).map_err(fail)?;
            reference_scatter(&a, &mut kc, vc.as_deref_mut());
        }
        self.key_cache.write("keyCacheRef", &encode(&kc))?;
        if let (Some(t), Some(vc)) = (&self.value_cache, &vc) {
            t.write("valueCacheRef", &encode(vc))?;
        }
        Ok(())
    }
}

/// The elements of `t`'s storage from its view's first element on.
fn storage_from_view<W: Wire>(t: &SimTensor, name: &str) -> SimResult<Vec<W>> {
    let es = t.dtype.size();
    let bytes = read_device(t.data, t.storage_dims.iter().product::<usize>() * es, name)?;
    Ok(bytes
        .get(t.offset * es..)
        .unwrap_or_default()
        .chunks_exact(es)
        .map(W::get)
        .collect())
}

first_stage!(scatter_pa_kv_cache, |params| {
    let ScatterPaKvCacheParams {
        key,
        key_cache_ref,
        slot_mapping,
        value,
        value_cache_ref,
        compress_lens,
        compress_seq_offset,
        seq_lens,
        cache_mode,
        scatter_mode,
        strides,
        offsets,
        workspace_size,
        executor,
    } = params;
    const OP: &str = names::scatter_pa_kv_cache;
    state::guard(|| {
        let key = required(key, "key")?;
        let key_cache = required(key_cache_ref, "keyCacheRef")?;
        let slots = required(slot_mapping, "slotMapping")?;
        // Scenario 6: value and valueCache empty.
        let nonempty = |t: Option<SimTensor>| t.filter(|t| !t.dims.is_empty() && t.numel() > 0);
        let value = nonempty(tensor(value, "value")?);
        let value_cache = nonempty(tensor(value_cache_ref, "valueCacheRef")?);
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let (cm, sm) = unsafe {
            (
                c_str(cache_mode, "cacheMode")?,
                c_str(scatter_mode, "scatterMode")?,
            )
        };
        // A null attribute reads as the empty string: Norm / None.
        let (cm, sm) = (cm.unwrap_or_default(), sm.unwrap_or_default());
        let Some(cache_mode) = CacheMode::from_attr(&cm) else {
            return invalid(format!("cacheMode \"{cm}\" is not Norm or PA_NZ"));
        };
        let Some(kind) = ScatterKind::from_attr(&sm) else {
            return invalid(format!(
                "scatterMode \"{sm}\" is not None, Nct, Alibi, Rope or Omni"
            ));
        };
        let (nct, compress) = (kind == ScatterKind::Nct, kind.compressed());
        let kd = key.dtype;
        // Atlas A2/A3 lists FLOAT16, BFLOAT16 and INT8 keys only (`scatter_pa_kv_cache_def.cpp`
        // `keyDataType`; the seeds doc: "数据类型仅支持FLOAT16、BFLOAT16、INT8"); FLOAT and the
        // wider list are 910_95's (`DataType_910_95`).
        if !matches!(kd, DataType::Float16 | DataType::Bf16 | DataType::Int8) {
            return invalid(format!(
                "key: dtype must be FLOAT16, BFLOAT16 or INT8 ({OP} on Atlas A2/A3 takes no \
                 FLOAT), got {kd:?}"
            ));
        }
        // `op_kernel/scatter_pa_kv_cache.cpp` has no INT8 tiling key for Nct, Rope or Omni.
        if kd == DataType::Int8
            && matches!(
                kind,
                ScatterKind::Nct | ScatterKind::Rope | ScatterKind::Omni
            )
        {
            return invalid(format!(
                "scatterMode {sm}: no INT8 kernel (FLOAT16 / BFLOAT16 only)"
            ));
        }
        if key_cache.dtype != kd || value.iter().chain(&value_cache).any(|t| t.dtype != kd) {
            return invalid("keyCacheRef, value, valueCacheRef: dtype must equal key's");
        }
        if value.is_some() != value_cache.is_some() {
            return invalid("value and valueCacheRef must both be given or both be empty");
        }
        if !matches!(slots.dtype, DataType::Int32 | DataType::Int64) || slots.dims.len() != 1 {
            return invalid(format!(
                "slotMapping: must be 1-D INT32 or INT64, got {:?} {:?}",
                slots.dtype, slots.dims
            ));
        }
        // Every cache is ND, PA_NZ included: `scatter_pa_kv_cache_def.cpp` declares FORMAT_ND
        // only for key_cache / value_cache, every shipped binary
        // (`op_host/config/ascend910b/scatter_pa_kv_cache_binary.json`) is ND, the tiling reads
        // the origin (view) shape `[nb, N·D/last, bs, last]` and the NZ kernel
        // (`scatter_pa_kv_cache_normal_nz_fully_load.h`) addresses it as that contiguous array;
        // the docs' PA_NZ example passes ACL_FORMAT_ND.
        for t in std::iter::once(&key_cache).chain(&value_cache) {
            if t.format != Format::Nd {
                return invalid(format!(
                    "cache format must be Nd (the op declares only ND), got {:?}",
                    t.format
                ));
            }
        }
        if key.dims.len() != 3 {
            return Err(SimErr(
                ACLNN_ERR_INNER_TILING_ERROR,
                format!("key: must be rank 3, got {:?}", key.dims),
            ));
        }
        if key_cache.dims.len() != 4 || value_cache.as_ref().is_some_and(|c| c.dims.len() != 4) {
            return Err(SimErr(
                ACLNN_ERR_INNER_TILING_ERROR,
                "caches must be rank 4".into(),
            ));
        }
        let kc = key_cache.dims.clone();
        let last = 32 / kd.size();
        let (n, dk) = (key.dims[1], key.dims[2]);
        let (num_blocks, block_size, cn, cdk) = match cache_mode {
            CacheMode::Norm if compress.is_some() => (kc[0], kc[1], n, kc[3]),
            CacheMode::Norm => (kc[0], kc[1], kc[2], kc[3]),
            _ => {
                if kc[3] != last || kc[1] * last != n * dk {
                    return invalid(format!(
                        "keyCacheRef: PA_NZ cache must be [nb, N·D/{last}, bs, {last}], got {kc:?}"
                    ));
                }
                (kc[0], kc[2], n, dk)
            }
        };
        // The tiling takes N and D from the key (Nct: the view `[T, N, D]` over the storage).
        if cn != n || cdk != dk {
            return invalid(format!(
                "keyCacheRef {kc:?} does not match key {:?}",
                key.dims
            ));
        }
        let tiling = |msg: String| Err(SimErr(ACLNN_ERR_INNER_TILING_ERROR, msg));
        // scatter_pa_kv_cache_tiling.cpp, CheckInputDimUpdate: numTokens is the key's dim 0.
        let num_tokens = key.dims[0];
        if num_tokens == 0 {
            return tiling("numTokens (key dim 0) is 0".into());
        }
        if num_blocks
            .checked_mul(block_size)
            .is_none_or(|m| m < num_tokens)
        {
            return tiling(format!(
                "numBlocks·blockSize = {num_blocks}·{block_size} is smaller than numTokens {num_tokens}"
            ));
        }
        // CheckInputDimNumUpdate: "dim0 and dim1 of key and value should be same".
        if let Some(v) = &value {
            if v.dims.len() != 3 || v.dims[..2] != key.dims[..2] {
                return tiling(format!(
                    "value {:?}: dims 0 and 1 must be the key's {:?}",
                    v.dims,
                    &key.dims[..2]
                ));
            }
        }
        // The non-compressed kernels read slotMapping[i] for every i < numTokens.
        if compress.is_none() && slots.dims[0] != num_tokens {
            return invalid(format!(
                "slotMapping: {} entries for the key's {num_tokens} tokens",
                slots.dims[0]
            ));
        }
        let dv = match (&value, &value_cache) {
            (Some(v), Some(vc)) => match cache_mode {
                CacheMode::Norm => vc.dims[3],
                _ => v.dims.get(2).copied().unwrap_or(0),
            },
            _ => 0,
        };
        let two = |p: IA, name: &str| -> SimResult<Option<[usize; 2]>> {
            match int_array(p, name)? {
                None => Ok(None),
                Some(v) if v.len() == 2 && v.iter().all(|&x| x >= 0) => {
                    Ok(Some([v[0] as usize, v[1] as usize]))
                }
                Some(v) => invalid(format!(
                    "{name}: must hold 2 non-negative values, got {v:?}"
                )),
            }
        };
        // Nct: the tiling reads `strides->GetData()[0..2]` / `offsets->GetData()[0..2]` without a
        // null or length check (GetShapeAttrsInfo), so a null or short array faults on CANN.
        let nct = if nct {
            match (two(strides, "strides")?, two(offsets, "offsets")?) {
                (Some(s), Some(o)) => Some((s, o)),
                _ => {
                    return Err(SimErr(
                        ACLNN_ERR_PARAM_NULLPTR,
                        "strides and offsets are required with scatterMode Nct".into(),
                    ))
                }
            }
        } else {
            None
        };
        let call = ScatterCall {
            num_tokens,
            key,
            key_cache,
            slots,
            value,
            value_cache,
            compress_lens: tensor(compress_lens, "compressLens")?,
            compress_seq_offset: tensor(compress_seq_offset, "compressSeqOffset")?,
            seq_lens: tensor(seq_lens, "seqLens")?,
            cache_mode,
            compress,
            nct,
            num_heads: cn,
            dk: cdk,
            dv,
            num_blocks,
            block_size,
        };
        submit(OP, move || call.run(), workspace_size, executor)
    })
});
