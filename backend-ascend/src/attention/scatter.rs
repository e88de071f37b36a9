//! KV cache scatter on the device: `aclnnScatterPaKvCache` updates the caches in place.
//!
//! Burn's op is functional (caches in, updated caches out). A cache whose device buffer is
//! held by nothing else (the usual case: the caller moved its only handle in) is updated where
//! it lies, so appending a token costs the token, not the cache; a shared or strided cache is
//! first copied into a fresh buffer so no other handle sees the write.
//!
//! An f32 cache runs the composite on the native ops (counted as [`SCATTER_COMPOSITE`]): CANN's
//! op takes no FLOAT key on Atlas A2/A3; the composite writes a new cache rather than in place.

use std::sync::Arc;

use burn_ascend_cann::acl::TensorDesc;
use burn_ascend_ops::backend::{ScatterInputs, ScatterOutputs};
use burn_ascend_ops::error::Result;
use burn_ascend_ops::ndarray::cpu_scatter_kv;
use burn_ascend_ops::scatter::composite::{self, shapes};
use burn_ascend_ops::scatter::{CacheMode, ScatterDims, ScatterKind, ScatterSpec};
use burn_backend::DType;

use super::{builders, handle, same_device, SCATTER_COMPOSITE};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::ops::native_index;
use crate::tensor::{device_error, fail, AscendTensor};
use crate::Ascend;

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
/// strided by `strides[0]` over its storage ([`builders::nct_source_desc`]).
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
    builders::nct_source_desc(dims, which, t.offset, elems, t.acl_dtype(OP))
        .unwrap_or_else(|e| fail(OP, e))
}

fn cache_desc(t: &AscendTensor, mode: CacheMode) -> TensorDesc {
    match mode {
        CacheMode::PaNz => {
            builders::cache_desc(mode, &t.shape, t.acl_dtype(OP)).unwrap_or_else(|e| fail(OP, e))
        }
        _ => t.desc(OP),
    }
}

pub(super) fn scatter_kv(
    inputs: ScatterInputs<AscendTensor>,
    spec: &ScatterSpec,
) -> Result<ScatterOutputs<AscendTensor>> {
    let shapes = shapes(&inputs);
    let dims = spec.validate(&shapes)?;
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
        let kcd = cache_desc(&key_cache, spec.cache_mode);
        let vcd = value_cache.as_ref().map(|c| cache_desc(c, spec.cache_mode));
        let vh = value
            .as_ref()
            .zip(vd.as_ref())
            .map(|(t, d)| handle(t, d, OP));
        let vch = value_cache
            .as_ref()
            .zip(vcd.as_ref())
            .map(|(t, d)| handle(t, d, OP));
        builders::scatter(
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
