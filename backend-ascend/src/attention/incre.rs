//! Incremental (decode) attention on the device: `aclnnIncreFlashAttentionV4` over contiguous
//! KV, the tensor-list form or the paged caches with their block table. The spec's host-side
//! inputs (mask, pse, block table, `kvPaddingSize`) are uploaded for the call.
//!
//! int8 KV reaches the Burn API as float tensors holding the int8 values (exact); with
//! `antiquant` the key and value are cast to INT8 on the device (`aclnnCast`) and the scale /
//! offset uploaded in the query's dtype, so the op runs its own dequantisation. The cast reads
//! the KV once more per call: a cache kept in int8 Burn tensors would avoid it, but Burn's
//! float-tensor API for this op does not carry one.

use burn_ascend_kernels::acl::{ops, Runtime, TensorDesc, TensorList};
use burn_ascend_ops::backend::{IncreInputs, IncreKv};
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::incre::composite::shapes;
use burn_ascend_ops::incre::IncreSpec;
use burn_ascend_ops::ndarray::cpu_incre_fwd;
use burn_ascend_ops::IfaLayout;
use burn_backend::{DType, Shape};

use super::{handle, ints, opt_handle, same_device, upload, upload_float};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::ops::native_elementwise;
use crate::tensor::{fail, AscendTensor};
use crate::Ascend;

const OP: &str = "aclnnIncreFlashAttentionV4";

fn layout_attr(layout: IfaLayout) -> &'static str {
    match layout {
        IfaLayout::Bsh => "BSH",
        IfaLayout::Bsnd => "BSND",
        IfaLayout::Bnsd => "BNSD",
    }
}

fn list<'a>(rt: &Runtime, ts: &[&'a AscendTensor], ds: &[TensorDesc]) -> TensorList<'a> {
    let hs = ts.iter().zip(ds).map(|(t, d)| handle(t, d, OP)).collect();
    TensorList::new(rt.api(), hs).unwrap_or_else(|e| fail("incre_fwd", e))
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
    let device = same_device("incre_fwd", &all)?;
    let dtype = q.dtype;
    if !is_acl_float(dtype) || all.iter().any(|t| t.dtype != dtype) {
        count("incre_fwd");
        return cpu_incre_fwd::<Ascend>(inputs, spec);
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
        count("incre_fwd");
        return cpu_incre_fwd::<Ascend>(inputs, spec);
    };
    let (keys, values): (Vec<&AscendTensor>, Vec<&AscendTensor>) =
        (keys.iter().collect(), values.iter().collect());
    let aq_scale = spec
        .antiquant
        .as_ref()
        .map(|a| upload_float(&a.scale, &a.shape, dtype, &device));
    let aq_offset = spec.antiquant.as_ref().and_then(|a| {
        a.offset
            .as_ref()
            .map(|o| upload_float(o, &a.shape, dtype, &device))
    });
    let rt = runtime(&device);
    let out = AscendTensor::alloc(Shape::from(q.shape.to_vec()), dtype, &device);
    let mask = spec
        .atten_mask
        .as_ref()
        .map(|m| upload(m.data.to_vec(), &m.shape, DType::U8, &device));
    let pse = spec
        .pse_shift
        .as_ref()
        .map(|p| upload_float(&p.data, &p.shape, dtype, &device));
    let table = spec.block_table.as_ref().map(|t| {
        let bytes = t.data.iter().flat_map(|x| x.to_le_bytes()).collect();
        upload(bytes, &t.shape, DType::I32, &device)
    });
    let pad = spec
        .kv_padding_size
        .map(|p| upload(p.to_le_bytes().to_vec(), &[1], DType::I64, &device));
    {
        let d = |x: &AscendTensor| x.desc(OP);
        let (qd, od) = (d(q), d(&out));
        let kds: Vec<_> = keys.iter().map(|t| d(t)).collect();
        let vds: Vec<_> = values.iter().map(|t| d(t)).collect();
        let (mask_d, pse_d) = (mask.as_ref().map(d), pse.as_ref().map(d));
        let (table_d, pad_d) = (table.as_ref().map(d), pad.as_ref().map(d));
        let (aqs_d, aqo_d) = (aq_scale.as_ref().map(d), aq_offset.as_ref().map(d));
        let qh = handle(q, &qd, OP);
        let oh = handle(&out, &od, OP);
        let (kl, vl) = (list(&rt, &keys, &kds), list(&rt, &values, &vds));
        let mask_h = opt_handle(mask.as_ref(), mask_d.as_ref(), OP);
        let pse_h = opt_handle(pse.as_ref(), pse_d.as_ref(), OP);
        let table_h = opt_handle(table.as_ref(), table_d.as_ref(), OP);
        let pad_h = opt_handle(pad.as_ref(), pad_d.as_ref(), OP);
        let aqs_h = opt_handle(aq_scale.as_ref(), aqs_d.as_ref(), OP);
        let aqo_h = opt_handle(aq_offset.as_ref(), aqo_d.as_ref(), OP);
        let asl = spec.actual_seq_lengths.as_ref().map(|s| ints(&rt, s, OP));
        ops::incre(
            &rt,
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
                quant_scale2: None,
                quant_offset2: None,
                antiquant_scale: aqs_h.as_ref(),
                antiquant_offset: aqo_h.as_ref(),
                blocktable: table_h.as_ref(),
                kv_padding_size: pad_h.as_ref(),
                num_heads: spec.num_heads as i64,
                scale_value: spec.scale_value,
                input_layout: layout_attr(spec.input_layout),
                num_key_value_heads: spec.num_key_value_heads as i64,
                block_size: spec.block_size as i64,
                inner_precise: spec.inner_precise,
                attention_out: &oh,
            },
        )
        .unwrap_or_else(|e| fail("incre_fwd", e));
    }
    rt.synchronize().unwrap_or_else(|e| fail("incre_fwd", e));
    Ok(out)
}
