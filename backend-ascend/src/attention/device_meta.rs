//! The paged-cache calls of a **captured decode step**, whose per-token metadata live in
//! device tensors instead of host vectors: the cache scatter with its slot mapping on the
//! device, and fused inference attention with its block table and mask on the device. A
//! graph records the calls once; before each replay the caller rewrites those tensors in
//! place ([`crate::graph::write_in_place`]) — the token's slots, the grown block table, the
//! mask that hides the cache positions not yet written — as vllm-ascend updates its ACL
//! graphs' attention metadata between replays. `actualSeqLengthsKv`, a host `aclIntArray`
//! baked into the recorded call, is the block table's full width; the mask does the rest.
//!
//! Both write or read the caches **where they lie**: the scatter updates the cache's buffer
//! whether or not other handles share it (a decode graph owns its caches' contents), unlike
//! the functional `scatter_pa_kv_cache`, which copies a shared cache first.

use burn_ascend_ops::backend::{FiaInputs, FiaKv};
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::fia::composite::shapes;
use burn_ascend_ops::fia::FiaSpec;
use burn_ascend_ops::scatter::{ScatterShapes, ScatterSpec};
use burn_backend::{DType, Shape};

use super::fia::{cann_release, fused_infer_attention_with, FiaDeviceMeta, FiaTensors};
use super::{builders, handle, same_device};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::ops::native_elementwise;
use crate::tensor::{device_error, AscendTensor};

const SCATTER: &str = "scatter_kv_slots";
const FIA: &str = "fia_decode_paged";

fn unsupported(op: &str, why: String) -> AttnError {
    AttnError::Unsupported(format!("{op}: {why}"))
}

fn contiguous_whole(op: &str, name: &str, t: &AscendTensor) -> Result<()> {
    if t.is_contiguous() {
        Ok(())
    } else {
        Err(unsupported(op, format!("{name} must be contiguous")))
    }
}

/// Writes `key` / `value` `[T, Nkv, D]` into the caches `[blocks, blockSize, Nkv, D]` at the
/// slots `slots` (INT64 `[T]`, on the device), in place (`aclnnScatterPaKvCache`, Norm mode).
pub fn scatter_kv_slots(
    key: &AscendTensor,
    value: &AscendTensor,
    key_cache: &AscendTensor,
    value_cache: &AscendTensor,
    slots: &AscendTensor,
) -> Result<()> {
    let device = same_device(SCATTER, &[key, value, key_cache, value_cache, slots])?;
    let dtype = key.dtype;
    if !is_acl_float(dtype)
        || [value, key_cache, value_cache]
            .iter()
            .any(|t| t.dtype != dtype)
    {
        return Err(unsupported(
            SCATTER,
            format!("key, value and caches must share one float dtype, got {dtype:?}"),
        ));
    }
    if slots.dtype != DType::I64 || slots.shape.num_dims() != 1 {
        return Err(AttnError::invalid(
            "slotMapping",
            format!("must be INT64 [T], got {:?} {:?}", slots.dtype, slots.shape),
        ));
    }
    for (name, t) in [("key_cache", key_cache), ("value_cache", value_cache)] {
        contiguous_whole(SCATTER, name, t)?;
    }
    let t = key.shape[0];
    // The spec's host slots (0..T) only give the shape; the device's are used.
    let spec = ScatterSpec::new((0..t as i64).collect());
    spec.validate(&ScatterShapes {
        key: key.shape.to_vec(),
        value: Some(value.shape.to_vec()),
        key_cache: key_cache.shape.to_vec(),
        value_cache: Some(value_cache.shape.to_vec()),
        dtypes: [Some(key.acl_dtype(SCATTER)); 4],
    })?;
    if slots.shape[0] != t {
        return Err(AttnError::invalid(
            "slotMapping",
            format!("must hold one slot per token ({t}), got {}", slots.shape[0]),
        ));
    }
    let rt = runtime(&device);
    let d = |x: &AscendTensor| x.desc(SCATTER);
    let (kd, vd, kcd, vcd, sd) = (d(key), d(value), d(key_cache), d(value_cache), d(slots));
    builders::scatter_with_slots(
        &rt,
        &spec,
        &burn_ascend_ops::backend::ScatterInputs {
            key: &handle(key, &kd, SCATTER),
            key_cache: &handle(key_cache, &kcd, SCATTER),
            value: Some(&handle(value, &vd, SCATTER)),
            value_cache: Some(&handle(value_cache, &vcd, SCATTER)),
        },
        Some(&handle(slots, &sd, SCATTER)),
    )
    .map_err(|e| device_error(SCATTER, e))
}

/// Decode attention (`S = 1`, BSND query `[B, 1, N, D]`) over the paged caches
/// `[blocks, blockSize, Nkv·D]` with the block table (INT32 `[B, max blocks]`) and the dense
/// mask (UINT8 `[B, max blocks · blockSize]`, 1 = hidden) on the device; `spec` carries the
/// attributes (heads, scale, block size, sparse mode 0) and host placeholders of the same
/// shapes for validation; `actualSeqLengthsKv` must be the mask's width for every sequence.
pub fn fia_decode_paged(
    query: &AscendTensor,
    key_cache: &AscendTensor,
    value_cache: &AscendTensor,
    sinks: Option<&AscendTensor>,
    block_table: &AscendTensor,
    mask: &AscendTensor,
    spec: &FiaSpec,
) -> Result<AscendTensor> {
    let device = same_device(FIA, &[query, key_cache, value_cache, block_table, mask])?;
    let dtype = query.dtype;
    if !is_acl_float(dtype) || key_cache.dtype != dtype || value_cache.dtype != dtype {
        return Err(unsupported(
            FIA,
            format!("query and caches must share one float dtype, got {dtype:?}"),
        ));
    }
    if block_table.dtype != DType::I32 || mask.dtype != DType::U8 {
        return Err(AttnError::invalid(
            "blockTable",
            format!(
                "the block table must be INT32 and the mask UINT8, got {:?} and {:?}",
                block_table.dtype, mask.dtype
            ),
        ));
    }
    let inputs = FiaInputs::<crate::Ascend> {
        query: query.clone(),
        kv: FiaKv::Paged {
            key_cache: key_cache.clone(),
            value_cache: value_cache.clone(),
        },
        learnable_sink: sinks.cloned(),
    };
    let dims = spec.validate(&shapes(&inputs, spec))?;
    let rt = runtime(&device);
    let acl_dtype = query.acl_dtype(FIA);
    let sink = match sinks {
        None => None,
        Some(s) => {
            let want = spec.learnable_sink_dtype(&dims, acl_dtype, cann_release(&rt))?;
            let to = match want {
                burn_ascend_cann::acl::DataType::Bf16 => DType::BF16,
                burn_ascend_cann::acl::DataType::Float16 => DType::F16,
                _ => DType::F32,
            };
            Some(native_elementwise::cast(s, to).ok_or_else(|| {
                unsupported(
                    FIA,
                    format!("the sink cannot be cast to {to:?} on the device"),
                )
            })?)
        }
    };
    let out = AscendTensor::alloc(Shape::from(dims.out_shape()), dtype, &device);
    {
        let d = |x: &AscendTensor| x.desc(FIA);
        let (qd, od, kd, vd, bd, md) = (
            d(query),
            d(&out),
            d(key_cache),
            d(value_cache),
            d(block_table),
            d(mask),
        );
        let sd = sink.as_ref().map(d);
        let list = |t, desc| {
            burn_ascend_cann::acl::TensorList::new(rt.api(), vec![handle(t, desc, FIA)])
                .map_err(|e| device_error(FIA, e))
        };
        let (kl, vl) = (list(key_cache, &kd)?, list(value_cache, &vd)?);
        let sh = sink
            .as_ref()
            .zip(sd.as_ref())
            .map(|(s, d)| handle(s, d, FIA));
        let (bh, mh) = (handle(block_table, &bd, FIA), handle(mask, &md, FIA));
        fused_infer_attention_with(
            &rt,
            spec,
            &FiaTensors {
                dtype: acl_dtype,
                query: &handle(query, &qd, FIA),
                key: &kl,
                value: &vl,
                learnable_sink: sh.as_ref(),
                attention_out: &handle(&out, &od, FIA),
                softmax_lse: None,
            },
            FiaDeviceMeta {
                block_table: Some(&bh),
                atten_mask: Some(&mh),
            },
        )
        .map_err(|e| device_error(FIA, e))?;
    }
    Ok(out)
}
