//! `prompt`: CANN's prompt flash attention (`ffi::names::pfa_v3`, and V1) on a safetensors
//! bundle: the f64 reference
//! (`--device reference`), else the public ops API on `NdArray` (`cpu`) or `Ascend` (`sim`,
//! `npu`). The output is in the query's dtype, or int8 with `quantScale2` / `quantOffset2`
//! (the reference on the host devices, CANN's int8 output on `sim` / `npu`: Burn's float
//! tensors cannot carry it).

use burn::tensor::TensorData;
use safetensors::Dtype;

use crate::device::{
    acl_runtime, data, download, host_primitive, mask_data, on_backend, output, primitive, upload,
    OnBackend,
};
use crate::io::{Bundle, HostTensor};
use crate::names::{concat, OpNames};
use crate::op::bundle_checks::{
    float_dtype, int8_f32_refusal, is_compressed_mask, not_the_compressed_mask, post_quant,
    refuse_int8_query, same_dtype, PROMPT_INCRE_ATTRS, PROMPT_INCRE_TENSORS,
};
use crate::{CliError, Device};
use burn_ascend::backend::attention::builders;
use burn_ascend::kernels::reference::prompt::{
    prompt_flash_attention, prompt_flash_attention_int8,
};
use burn_ascend::ops::prompt::{
    parse_pfa_layout, PromptDims, PromptInputs, PromptMaskKind, PromptShapes, PromptSpec,
    INT_MAX_TOKENS, PFA_COMPRESSED_MASK,
};
use burn_ascend::{AttentionBackend, AttnError};
use burn_ascend_cann::acl::ffi::names;
use burn_ascend_cann::acl::DataType;

/// The names `prompt` reads. The full-quantisation scales are known so that they get their
/// "unsupported" error rather than "unknown".
pub const NAMES: OpNames = OpNames {
    tensors: &TENSORS,
    tensor_lists: &[],
    attributes: &ATTRS,
};

/// This op's line of `run --help` (what it reads of its own, what it writes).
pub const HELP: &str = "prompt attention → attentionOut";

const TENSORS: [&str; 12] = concat(
    PROMPT_INCRE_TENSORS,
    [
        "actualSeqLengthsKv",
        "quantScale2",
        "quantOffset2",
        "deqScale1",
        "quantScale1",
        "deqScale2",
    ],
);

const ATTRS: [&str; 8] = concat(
    PROMPT_INCRE_ATTRS,
    ["preTokens", "nextTokens", "sparseMode", "innerPrecise"],
);

/// The bundle's tensor-valued optional inputs: a dense `attenMask` (its checked 0/1 bytes)
/// and `pseShift`. CANN's compressed mask is no input of the call's (the spec's kind).
struct Extras<'b> {
    atten_mask: Option<(Vec<u8>, &'b HostTensor)>,
    pse_shift: Option<&'b HostTensor>,
}

fn spec_from(b: &Bundle, qdt: Dtype) -> Result<(PromptSpec, Extras<'_>), AttnError> {
    let layout = parse_pfa_layout(b.attr_str("inputLayout", "BSH"))?;
    let mut spec = PromptSpec::new(
        b.attr_required("numHeads")?,
        b.attr("scaleValue", 1.0)?,
        layout,
    );
    spec.num_key_value_heads = b.attr("numKeyValueHeads", 0)?;
    spec.pre_tokens = b.attr("preTokens", INT_MAX_TOKENS)?;
    spec.next_tokens = b.attr("nextTokens", 0)?;
    spec.sparse_mode = b.attr("sparseMode", 0)?;
    spec.inner_precise = b.attr("innerPrecise", 1)?;
    spec.actual_seq_lengths = b.opt_i64("actualSeqLengths")?;
    spec.actual_seq_lengths_kv = b.opt_i64("actualSeqLengthsKv")?;
    let mut extras = Extras {
        atten_mask: None,
        pse_shift: None,
    };
    if let Some(m) = b.optional(&["attenMask"]) {
        let data = m.mask01_values("attenMask")?;
        spec.atten_mask = if (2..=4).contains(&spec.sparse_mode) {
            if m.shape != PFA_COMPRESSED_MASK || !is_compressed_mask(&data) {
                return Err(not_the_compressed_mask(
                    spec.sparse_mode,
                    &format!("{PFA_COMPRESSED_MASK:?}"),
                    &m.shape,
                ));
            }
            PromptMaskKind::Compressed
        } else {
            extras.atten_mask = Some((data, m));
            PromptMaskKind::Dense
        };
    }
    if let Some(p) = b.optional(&["pseShift"]) {
        same_dtype(p, "pseShift", qdt)?;
        extras.pse_shift = Some(p);
    }
    spec.post_quant = post_quant(b, qdt)?;
    Ok((spec, extras))
}

/// `prompt`.
pub fn prompt(b: &Bundle, device: Device) -> Result<Bundle, CliError> {
    refuse_int8_query(b, ["deqScale1", "quantScale1", "deqScale2"])?;
    let (q, k, v) = (
        b.required("query")?,
        b.required("key")?,
        b.required("value")?,
    );
    let qdt = float_dtype(q, "query")?;
    same_dtype(k, "key", qdt)?;
    same_dtype(v, "value", qdt)?;
    let (spec, extras) = spec_from(b, qdt)?;
    let dims = spec.validate(&PromptShapes {
        query: q.shape.clone(),
        key: k.shape.clone(),
        value: v.shape.clone(),
        atten_mask: extras.atten_mask.as_ref().map(|(_, m)| m.shape.clone()),
        pse_shift: extras.pse_shift.map(|p| p.shape.clone()),
    })?;
    if q.is_empty() {
        // CANN returns at once for an empty query.
        let out = HostTensor::from_f64_as(&[], q.shape.clone(), qdt);
        return Ok(Bundle::of([("attentionOut", out)]));
    }
    if spec.post_quant.is_some() {
        // int8 attentionOut (quantScale2): a Burn float tensor cannot hold it, so the public
        // API refuses it; the host devices run the reference, `sim` / `npu` CANN's int8 path.
        if device.is_acl() {
            if q.dtype == Dtype::F32 {
                return Err(int8_f32_refusal(names::pfa_v3).into());
            }
            return int8_on_device(
                device,
                &spec,
                &dims,
                PromptInputs {
                    query: q,
                    key: k,
                    value: v,
                    atten_mask: extras.atten_mask.map(|(_, m)| m),
                    pse_shift: extras.pse_shift,
                },
            );
        }
    } else if device != Device::Reference {
        // The mask as the API takes it: a float tensor of 0/1 (exact in any float dtype).
        let mask = (extras.atten_mask.as_ref()).map(|(bytes, m)| mask_data(bytes, &m.shape, qdt));
        return on_backend(
            device,
            Prompt {
                spec,
                dtype: qdt,
                inputs: PromptInputs {
                    query: data(q, "query", qdt)?,
                    key: data(k, "key", qdt)?,
                    value: data(v, "value", qdt)?,
                    atten_mask: mask,
                    pse_shift: extras
                        .pse_shift
                        .map(|p| data(p, "pseShift", qdt))
                        .transpose()?,
                },
            },
        );
    }
    let (qv, kv, vv) = (
        q.f32_values("query")?,
        k.f32_values("key")?,
        v.f32_values("value")?,
    );
    let pse = extras
        .pse_shift
        .map(|p| Ok::<_, AttnError>((p.f32_values("pseShift")?, &p.shape[..])))
        .transpose()?;
    let a = spec.args(
        &dims,
        &qv,
        &kv,
        &vv,
        extras
            .atten_mask
            .as_ref()
            .map(|(bytes, m)| (&bytes[..], &m.shape[..])),
        pse.as_ref().map(|(values, shape)| (&values[..], *shape)),
    )?;
    let out = match spec.post_quant() {
        Some(pq) => HostTensor::from_i8(&prompt_flash_attention_int8(&a, &pq), dims.out_shape()),
        None => HostTensor::from_f64_as(&prompt_flash_attention(&a), dims.out_shape(), qdt),
    };
    Ok(Bundle::of([("attentionOut", out)]))
}

/// The validated prompt attention on a Burn backend
/// ([`burn_ascend::prompt_flash_attention`]).
struct Prompt {
    spec: PromptSpec,
    dtype: Dtype,
    /// The bundle's tensors (the mask as 0/1 floats), each of its own rank.
    inputs: PromptInputs<TensorData>,
}

impl OnBackend for Prompt {
    fn run<B: AttentionBackend>(self, dev: &B::Device) -> Result<Bundle, CliError> {
        let x = self.inputs.map(|d| primitive::<B>(d, dev));
        let out = host_primitive::<B>(B::prompt_fwd(x, &self.spec)?, self.dtype);
        Ok(Bundle::of([("attentionOut", out)]))
    }
}

/// int8 `attentionOut` on `sim` / `npu` through the backend's call builder (the one output the
/// Burn API cannot carry).
/// The bundle's tensors go up as they are: the mask in its own BOOL/INT8/UINT8 (0/1, checked),
/// the pse in the query's dtype.
fn int8_on_device(
    device: Device,
    spec: &PromptSpec,
    dims: &PromptDims,
    x: PromptInputs<&HostTensor>,
) -> Result<Bundle, CliError> {
    let rt = acl_runtime(device)?;
    let up = |t: Option<&HostTensor>, name| t.map(|t| upload(&rt, t, name)).transpose();
    let (qd, kd, vd) = (
        upload(&rt, x.query, "query")?,
        upload(&rt, x.key, "key")?,
        upload(&rt, x.value, "value")?,
    );
    let (md, pd) = (up(x.atten_mask, "attenMask")?, up(x.pse_shift, "pseShift")?);
    let x = PromptInputs {
        query: qd.handle()?,
        key: kd.handle()?,
        value: vd.handle()?,
        atten_mask: md.as_ref().map(|m| m.handle()).transpose()?,
        pse_shift: pd.as_ref().map(|p| p.handle()).transpose()?,
    };
    let o = output(&rt, &dims.out_shape(), DataType::Int8)?;
    builders::prompt(&rt, spec, &x.as_ref(), &o.handle()?)?;
    Ok(Bundle::of([("attentionOut", download(&o)?)]))
}
