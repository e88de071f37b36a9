//! KV cache scatter on the device: `aclnnScatterPaKvCache` updates the caches in place.
//!
//! Burn's op is functional (caches in, updated caches out). A cache whose device buffer is
//! held by nothing else (the usual case: the caller moved its only handle in) is updated where
//! it lies, so appending a token costs the token, not the cache; a shared or strided cache is
//! first copied into a fresh buffer so no other handle sees the write.

use std::sync::Arc;

use burn_ascend_kernels::acl::{ops, TensorDesc};
use burn_ascend_ops::backend::{ScatterInputs, ScatterOutputs};
use burn_ascend_ops::error::Result;
use burn_ascend_ops::ndarray::cpu_scatter_kv;
use burn_ascend_ops::scatter::composite::shapes;
use burn_ascend_ops::scatter::{CacheMode, ScatterKind, ScatterSpec};

use super::{handle, ints, opt_handle, same_device, upload_i64};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::ops::native_index;
use crate::tensor::{fail, AscendTensor};
use crate::Ascend;

const OP: &str = "aclnnScatterPaKvCache";

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

fn cache_desc(t: &AscendTensor, mode: CacheMode) -> TensorDesc {
    match mode {
        CacheMode::PaNz => {
            let dt = t.acl_dtype(OP);
            TensorDesc::pa_nz_cache(&t.shape, dt).unwrap_or_else(|e| panic!("{OP}: {e}"))
        }
        _ => t.desc(OP),
    }
}

fn scatter_mode(kind: ScatterKind) -> &'static str {
    match kind {
        ScatterKind::None => "None",
        ScatterKind::Nct => "Nct",
        ScatterKind::Alibi => "Alibi",
        ScatterKind::Rope => "Rope",
        ScatterKind::Omni => "Omni",
    }
}

pub(super) fn scatter_kv(
    inputs: ScatterInputs<Ascend>,
    spec: &ScatterSpec,
) -> Result<ScatterOutputs<Ascend>> {
    let shapes = shapes(&inputs);
    spec.validate(&shapes)?;
    let mut all = vec![&inputs.key, &inputs.key_cache];
    all.extend(inputs.value.as_ref());
    all.extend(inputs.value_cache.as_ref());
    let device = same_device("scatter_kv", &all)?;
    let dtype = inputs.key.dtype;
    // NHSD caches are the spec's, not confirmed against an aclnn string: the host path runs them.
    if !is_acl_float(dtype)
        || all.iter().any(|t| t.dtype != dtype)
        || spec.cache_mode == CacheMode::Nhsd
    {
        count("scatter_kv");
        return cpu_scatter_kv::<Ascend>(inputs, spec);
    }
    let ScatterInputs {
        key,
        value,
        key_cache,
        value_cache,
    } = inputs;
    // Everything is validated: from here on nothing fails before the write.
    let key_cache = owned(key_cache);
    let value_cache = value_cache.map(owned);
    let rt = runtime(&device);
    let slots = upload_i64(&spec.slot_mapping, &spec.slot_mapping_shape, &device);
    let vec1 = |v: &Option<Vec<i64>>| v.as_ref().map(|v| upload_i64(v, &[v.len()], &device));
    let (clens, cso, seq_lens) = (
        vec1(&spec.compress_lens),
        vec1(&spec.compress_seq_offset),
        vec1(&spec.seq_lens),
    );
    {
        let d = |x: &AscendTensor| x.desc(OP);
        let (kd, sd) = (d(&key), d(&slots));
        let kcd = cache_desc(&key_cache, spec.cache_mode);
        let vd = value.as_ref().map(d);
        let vcd = value_cache.as_ref().map(|c| cache_desc(c, spec.cache_mode));
        let (cld, csod, sld) = (
            clens.as_ref().map(d),
            cso.as_ref().map(d),
            seq_lens.as_ref().map(d),
        );
        let kh = handle(&key, &kd, OP);
        let kch = handle(&key_cache, &kcd, OP);
        let sh = handle(&slots, &sd, OP);
        let vh = opt_handle(value.as_ref(), vd.as_ref(), OP);
        let vch = opt_handle(value_cache.as_ref(), vcd.as_ref(), OP);
        let clh = opt_handle(clens.as_ref(), cld.as_ref(), OP);
        let csoh = opt_handle(cso.as_ref(), csod.as_ref(), OP);
        let slh = opt_handle(seq_lens.as_ref(), sld.as_ref(), OP);
        let strides = spec.strides.as_ref().map(|s| ints(&rt, s, OP));
        let offsets = spec.offsets.as_ref().map(|s| ints(&rt, s, OP));
        let cache_mode = match spec.cache_mode {
            CacheMode::PaNz => "PA_NZ",
            _ => "Norm",
        };
        ops::scatter(
            &rt,
            &ops::ScatterArgs {
                key: &kh,
                key_cache: &kch,
                slot_mapping: &sh,
                value: vh.as_ref(),
                value_cache: vch.as_ref(),
                compress_lens: clh.as_ref(),
                compress_seq_offset: csoh.as_ref(),
                seq_lens: slh.as_ref(),
                cache_mode,
                scatter_mode: scatter_mode(spec.scatter_mode),
                strides: strides.as_ref(),
                offsets: offsets.as_ref(),
            },
        )
        .unwrap_or_else(|e| fail("scatter_kv", e));
    }
    rt.synchronize().unwrap_or_else(|e| fail("scatter_kv", e));
    Ok(ScatterOutputs {
        key_cache,
        value_cache,
    })
}
