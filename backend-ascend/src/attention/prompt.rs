//! Prompt (prefill) attention on the device: `aclnnPromptFlashAttentionV3` (V1 when V3 is
//! absent and the call needs nothing only V3 has) over the query/key/value views as they are.
//! The spec's host-side inputs (mask, pse) are uploaded for the call.

use burn_ascend_kernels::acl::ops;
use burn_ascend_ops::backend::PromptInputs;
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::ndarray::cpu_prompt_fwd;
use burn_ascend_ops::prompt::composite::shapes;
use burn_ascend_ops::prompt::{PromptMask, PromptSpec};
use burn_ascend_ops::PfaLayout;
use burn_backend::{DType, Shape};

use super::{handle, ints, opt_handle, same_device, upload, upload_float};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{fail, AscendTensor};
use crate::Ascend;

const OP: &str = "aclnnPromptFlashAttentionV3";

/// Side of CANN's compressed causal mask (sparse modes 2, 3, 4).
const COMPRESSED: usize = 2048;

pub(super) fn layout_attr(layout: PfaLayout) -> &'static str {
    match layout {
        PfaLayout::Bsh => "BSH",
        PfaLayout::Bsnd => "BSND",
        PfaLayout::Bnsd => "BNSD",
        PfaLayout::BnsdBsnd => "BNSD_BSND",
        PfaLayout::Tnd => "TND",
    }
}

pub(super) fn prompt_fwd(inputs: PromptInputs<Ascend>, spec: &PromptSpec) -> Result<AscendTensor> {
    let dims = spec.validate(&shapes(&inputs))?;
    if spec.post_quant.is_some() {
        return Err(AttnError::Unsupported(
            "int8 attentionOut (quantScale2) on the Burn API: Burn float tensors cannot hold it; \
             use the host path (burn-ascend run prompt --device npu)"
                .into(),
        ));
    }
    let (q, k, v) = (&inputs.query, &inputs.key, &inputs.value);
    let device = same_device("prompt_fwd", &[q, k, v])?;
    let dtype = q.dtype;
    if !is_acl_float(dtype) || k.dtype != dtype || v.dtype != dtype {
        count("prompt_fwd");
        return cpu_prompt_fwd::<Ascend>(inputs, spec);
    }
    let rt = runtime(&device);
    let out = AscendTensor::alloc(Shape::from(dims.out_shape()), dtype, &device);
    let mask = match &spec.atten_mask {
        PromptMask::None => None,
        PromptMask::Dense { data, shape } => Some(upload(data.to_vec(), shape, DType::U8, &device)),
        PromptMask::Compressed => {
            let m: Vec<u8> = (0..COMPRESSED * COMPRESSED)
                .map(|x| u8::from(x % COMPRESSED > x / COMPRESSED))
                .collect();
            Some(upload(m, &[COMPRESSED, COMPRESSED], DType::U8, &device))
        }
    };
    let pse = spec
        .pse_shift
        .as_ref()
        .map(|p| upload_float(&p.data, &p.shape, dtype, &device));
    {
        let d = |x: &AscendTensor| x.desc(OP);
        let (qd, kd, vd, od) = (d(q), d(k), d(v), d(&out));
        let (mask_d, pse_d) = (mask.as_ref().map(d), pse.as_ref().map(d));
        let qh = handle(q, &qd, OP);
        let kh = handle(k, &kd, OP);
        let vh = handle(v, &vd, OP);
        let oh = handle(&out, &od, OP);
        let mask_h = opt_handle(mask.as_ref(), mask_d.as_ref(), OP);
        let pse_h = opt_handle(pse.as_ref(), pse_d.as_ref(), OP);
        let asl = spec.actual_seq_lengths.as_ref().map(|s| ints(&rt, s, OP));
        let asl_kv = spec
            .actual_seq_lengths_kv
            .as_ref()
            .map(|s| ints(&rt, s, OP));
        ops::prompt(
            &rt,
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
                quant_scale2: None,
                quant_offset2: None,
                num_heads: spec.num_heads as i64,
                scale_value: spec.scale_value,
                pre_tokens: spec.pre_tokens,
                next_tokens: spec.next_tokens,
                input_layout: layout_attr(spec.input_layout),
                num_key_value_heads: spec.num_key_value_heads as i64,
                sparse_mode: spec.sparse_mode,
                inner_precise: spec.inner_precise,
                attention_out: &oh,
            },
        )
        .unwrap_or_else(|e| fail("prompt_fwd", e));
    }
    rt.synchronize().unwrap_or_else(|e| fail("prompt_fwd", e));
    Ok(out)
}
