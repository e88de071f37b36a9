//! Incremental (decode) attention on the device: `aclnnIncreFlashAttentionV4` over contiguous
//! KV, the tensor-list form or the paged caches with their block table. The spec's host-side
//! inputs (mask, pse, block table, `kvPaddingSize`) are uploaded for the call. An f32 call runs
//! the composite on the native ops (counted as [`INCRE_COMPOSITE`]): CANN's IFA takes no FLOAT.
//!
//! int8 KV reaches the Burn API as float tensors holding the int8 values (exact); with
//! `antiquant` the key and value are cast to INT8 on the device (`aclnnCast`) and the scale /
//! offset uploaded in the query's dtype, so the op runs its own dequantisation. The cast reads
//! the KV once more per call: a cache kept in int8 Burn tensors would avoid it, but Burn's
//! float-tensor API for this op does not carry one.

use burn_ascend_cann::acl::{Runtime, TensorDesc, TensorList};
use burn_ascend_ops::backend::{IncreInputs, IncreKv};
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::incre::composite::{self, shapes};
use burn_ascend_ops::incre::IncreSpec;
use burn_ascend_ops::ndarray::cpu_incre_fwd;
use burn_backend::{DType, Shape};

use super::{builders, handle, same_device, INCRE_COMPOSITE};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::ops::native_elementwise;
use crate::tensor::{device_error, fail, AscendTensor};
use crate::Ascend;

/// Label of the call in error messages.
const OP: &str = "incre_fwd";

fn list<'a>(rt: &Runtime, ts: &[&'a AscendTensor], ds: &[TensorDesc]) -> TensorList<'a> {
    let hs = ts.iter().zip(ds).map(|(t, d)| handle(t, d, OP)).collect();
    TensorList::new(rt.api(), hs).unwrap_or_else(|e| fail(OP, e))
}

pub(super) fn incre_fwd(inputs: IncreInputs<Ascend>, spec: &IncreSpec) -> Result<AscendTensor> {
    spec.validate(&shapes(&inputs, spec))?;
    if spec.post_quant.is_some() {
        return Err(AttnError::Unsupported(
            "int8 attentionOut (quantScale2) on the Burn API: use the host path \
             (burn-ascend run incre --device npu)"
                .into(),
        ));
    }
    let (keys, values): (Vec<&AscendTensor>, Vec<&AscendTensor>) = match &inputs.kv {
        IncreKv::Contiguous { key, value } => (vec![key], vec![value]),
        IncreKv::List { key, value } => (key.iter().collect(), value.iter().collect()),
        IncreKv::Paged {
            key_cache,
            value_cache,
        } => (vec![key_cache], vec![value_cache]),
    };
    let q = &inputs.query;
    let mut all = vec![q];
    all.extend(keys.iter().chain(&values).copied());
    let device = same_device(OP, &all)?;
    let dtype = q.dtype;
    if !is_acl_float(dtype) || all.iter().any(|t| t.dtype != dtype) {
        count(OP);
        return cpu_incre_fwd::<Ascend>(inputs, spec);
    }
    if dtype == DType::F32 {
        // CANN's IFA takes FLOAT16 / BFLOAT16 queries only (`incre_flash_attention_def.cpp`).
        count(INCRE_COMPOSITE);
        return composite::incre_fwd::<Ascend>(inputs, spec);
    }
    // int8 KV (antiquant) goes to the op as INT8, cast on the device; other KV as it is.
    let device_kv = |ts: &[&AscendTensor]| -> Option<Vec<AscendTensor>> {
        ts.iter()
            .map(|&t| match spec.antiquant {
                Some(_) => native_elementwise::cast(t, DType::I8),
                None => Some(t.clone()),
            })
            .collect()
    };
    let (Some(keys), Some(values)) = (device_kv(&keys), device_kv(&values)) else {
        count(OP);
        return cpu_incre_fwd::<Ascend>(inputs, spec);
    };
    let (keys, values): (Vec<&AscendTensor>, Vec<&AscendTensor>) =
        (keys.iter().collect(), values.iter().collect());
    let rt = runtime(&device);
    let out = AscendTensor::alloc(Shape::from(q.shape.to_vec()), dtype, &device);
    {
        let d = |x: &AscendTensor| x.desc(OP);
        let (qd, od) = (d(q), d(&out));
        let kds: Vec<_> = keys.iter().map(|t| d(t)).collect();
        let vds: Vec<_> = values.iter().map(|t| d(t)).collect();
        let (kl, vl) = (list(&rt, &keys, &kds), list(&rt, &values, &vds));
        builders::incre(
            &rt,
            spec,
            &builders::IncreTensors {
                dtype: q.acl_dtype(OP),
                query: &handle(q, &qd, OP),
                key: &kl,
                value: &vl,
                attention_out: &handle(&out, &od, OP),
            },
        )
        .map_err(|e| device_error(OP, e))?;
    }
    Ok(out)
}
