//! KV cache scatter on the device: `aclnnScatterPaKvCache` updates the caches in place.
//!
//! Burn's op is functional (caches in, updated caches out). A cache whose device buffer is
//! held by nothing else (the usual case: the caller moved its only handle in) is updated where
//! it lies, so appending a token costs the token, not the cache; a shared or strided cache is
//! first copied into a fresh buffer so no other handle sees the write.
//!
//! An f32 cache runs the composite on the native ops (counted as [`SCATTER_COMPOSITE`]): CANN's
//! op takes no FLOAT key on Atlas A2/A3; the composite writes a new cache rather than in place.
//!
//! The builder half ([`scatter`], [`scatter_with_slots`] and the descriptors) knows no Burn: the
//! validated spec plus aclnn handles in, one aclnn call out; the op-replay CLI calls it too.

use std::sync::Arc;

use burn_ascend_cann::acl::{
    aclnn, AclError, DataType, IntArray, Result as AclResult, Runtime, Tensor, TensorDesc,
};
use burn_ascend_ops::error::Result;
use burn_ascend_ops::scatter::ndarray::cpu_scatter_kv;
use burn_ascend_ops::scatter::{
    composite, CacheMode, ScatterBackend, ScatterDims, ScatterInputs, ScatterKind, ScatterOutputs,
    ScatterSpec,
};
use burn_backend::DType;

use super::common::{handle, handle_of, same_device, upload_i64};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{device_error, fail, AscendTensor};
use crate::tensor_ops::native_index;
use crate::Ascend;

/// f32 KV cache scatters through the composite (see [`super::PROMPT_COMPOSITE`]).
pub const SCATTER_COMPOSITE: &str = "scatter_composite";

/// Label of the call in error messages.
const OP: &str = "scatter_kv";

/// `cache` itself when its buffer is unshared and it covers it contiguously from offset 0,
/// else a contiguous copy in a fresh buffer (`aclnnInplaceCopy` on the device).
fn owned(mut cache: AscendTensor) -> AscendTensor {
    let whole = cache.offset == 0
        && cache.is_contiguous()
        && cache.storage.len() == cache.numel() * cache.dtype.size();
    if whole && Arc::get_mut(&mut cache.storage).is_some() {
        return cache;
    }
    native_index::contiguous(&cache).unwrap_or_else(|| {
        let device = cache.device();
        AscendTensor::from_data(cache.to_data(), &device)
    })
}

/// `t` itself when contiguous, else a contiguous copy.
fn contiguous(t: AscendTensor) -> AscendTensor {
    if t.is_contiguous() {
        return t;
    }
    native_index::contiguous(&t).unwrap_or_else(|| {
        let device = t.device();
        AscendTensor::from_data(t.to_data(), &device)
    })
}

/// The descriptor of key (`which = 0`) / value: its view, or with Nct the view `[T, N, D]`
/// strided by `strides[0]` over its storage ([`nct_source_desc`]).
fn source_desc(
    t: &AscendTensor,
    spec: &ScatterSpec,
    dims: &ScatterDims,
    which: usize,
) -> TensorDesc {
    if spec.scatter_mode != ScatterKind::Nct {
        return t.desc(OP);
    }
    let elems = t.storage.len() / t.dtype.size();
    nct_source_desc(dims, which, t.offset, elems, t.acl_dtype(OP)).unwrap_or_else(|e| fail(OP, e))
}

/// The descriptor of a cache tensor as the op reads it in `mode` ([`cache_desc`] for PA_NZ).
fn cache_view_desc(t: &AscendTensor, mode: CacheMode) -> TensorDesc {
    match mode {
        CacheMode::PaNz => {
            cache_desc(mode, &t.shape, t.acl_dtype(OP)).unwrap_or_else(|e| fail(OP, e))
        }
        _ => t.desc(OP),
    }
}

impl ScatterBackend for Ascend {
    fn scatter_kv(
        inputs: ScatterInputs<AscendTensor>,
        spec: &ScatterSpec,
    ) -> Result<ScatterOutputs<AscendTensor>> {
        let dims = spec.validate(&burn_ascend_ops::scatter::shapes(&inputs))?;
        let mut all = vec![&inputs.key, &inputs.key_cache];
        all.extend(inputs.value.as_ref());
        all.extend(inputs.value_cache.as_ref());
        let device = same_device(OP, &all)?;
        let dtype = inputs.key.dtype;
        // NHSD caches are the spec's, not confirmed against an aclnn string: the host path runs them.
        if !is_acl_float(dtype)
            || all.iter().any(|t| t.dtype != dtype)
            || spec.cache_mode == CacheMode::Nhsd
        {
            count(OP);
            return cpu_scatter_kv::<Ascend>(inputs, spec);
        }
        if dtype == DType::F32 {
            // Atlas A2/A3's ScatterPaKvCache takes FLOAT16 / BFLOAT16 / INT8 keys only
            // (`scatter_pa_kv_cache_def.cpp`): the composite writes an f32 cache with native ops.
            count(SCATTER_COMPOSITE);
            return composite::scatter_kv::<Ascend>(inputs, spec);
        }
        let ScatterInputs {
            key,
            value,
            key_cache,
            value_cache,
        } = inputs;
        // No token: nothing to write. CANN's tiling refuses numTokens = 0
        // (scatter_pa_kv_cache_tiling.cpp, CheckInputDimUpdate), every other path succeeds.
        if dims.num_tokens == 0 {
            return Ok(ScatterOutputs {
                key_cache,
                value_cache,
            });
        }
        // Nct reads the sources' storage from their first element on, in row-major order.
        let nct = spec.scatter_mode == ScatterKind::Nct;
        let key = if nct { contiguous(key) } else { key };
        let value = if nct { value.map(contiguous) } else { value };
        // Everything is validated: from here on nothing fails before the write.
        let key_cache = owned(key_cache);
        let value_cache = value_cache.map(owned);
        let rt = runtime(&device);
        {
            let kd = source_desc(&key, spec, &dims, 0);
            let vd = value.as_ref().map(|v| source_desc(v, spec, &dims, 1));
            let kcd = cache_view_desc(&key_cache, spec.cache_mode);
            let vcd = value_cache
                .as_ref()
                .map(|c| cache_view_desc(c, spec.cache_mode));
            let vh = value
                .as_ref()
                .zip(vd.as_ref())
                .map(|(t, d)| handle(t, d, OP));
            let vch = value_cache
                .as_ref()
                .zip(vcd.as_ref())
                .map(|(t, d)| handle(t, d, OP));
            scatter(
                &rt,
                spec,
                &ScatterInputs {
                    key: &handle(&key, &kd, OP),
                    key_cache: &handle(&key_cache, &kcd, OP),
                    value: vh.as_ref(),
                    value_cache: vch.as_ref(),
                },
            )
            .map_err(|e| device_error(OP, e))?;
        }
        Ok(ScatterOutputs {
            key_cache,
            value_cache,
        })
    }
}

/// The descriptor of a cache of `dims` for `mode`: contiguous ND for every mode, PA_NZ caches
/// over `[nb, N·D/last, bs, last]` (why not FRACTAL_NZ: [`TensorDesc::pa_nz_cache`]).
pub fn cache_desc(mode: CacheMode, dims: &[usize], dtype: DataType) -> AclResult<TensorDesc> {
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
) -> AclResult<TensorDesc> {
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
pub fn scatter(rt: &Runtime, spec: &ScatterSpec, x: &ScatterInputs<&Tensor<'_>>) -> AclResult<()> {
    scatter_with_slots(rt, spec, x, None)
}

/// [`scatter`] with the slot mapping already on the device (`slots`, INT64 `[T]`: a captured
/// graph's input) instead of the spec's host slots, which then only give the shape.
pub fn scatter_with_slots(
    rt: &Runtime,
    spec: &ScatterSpec,
    x: &ScatterInputs<&Tensor<'_>>,
    slots: Option<&Tensor<'_>>,
) -> AclResult<()> {
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
        let own = handle_of(&uploaded)?;
        let Some(slots) = slots.or(own.as_ref()) else {
            return Err(AclError::Invalid {
                param: "slotMapping".into(),
                rule: "missing".into(),
            });
        };
        let (clens, cso, seq_lens) = (handle_of(&clens)?, handle_of(&cso)?, handle_of(&seq_lens)?);
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
