//! The attention ops of this project on Ascend (`burn_ascend_ops::AttentionBackend`).
//!
//! - varlen forward and backward run natively: the device tensors are handed to
//!   `aclnnFlashAttentionVarLenScoreV5` / `aclnnFlashAttentionUnpaddingScoreGradV5` as they
//!   are (strided views included), outputs are allocated on the device. Under
//!   `Autodiff<Ascend>` the ops crate's fused backward calls [`AttentionBackend::varlen_bwd`]
//!   here. An external pse, dropout or a non-f32 sink are not wired to the device yet: those
//!   calls take the CPU kernels through the counted host fallback (`varlen_fwd` / `varlen_bwd`).
//! - prompt, incremental attention and the KV cache scatter run natively
//!   (`aclnnPromptFlashAttentionV3`, `aclnnIncreFlashAttentionV4` over contiguous, listed or
//!   paged KV, `aclnnScatterPaKvCache` in place on an unshared cache): [`prompt`], [`incre`],
//!   [`scatter`]; int8 KV (antiquant) is cast to INT8 on the device first. Integer dtypes and
//!   NHSD caches take the counted host fallback (`incre_fwd`, `prompt_fwd`, `scatter_kv`).
//!
//! Shapes and attributes are validated by the ops crate's spec first (typed [`AttnError`]s);
//! a failing aclnn call then panics with the call, its status and CANN's message.

use burn_ascend_kernels::acl::{ops, IntArray, Runtime, Tensor, TensorDesc};
use burn_ascend_ops::backend::{
    AttentionBackend, IncreInputs, PromptInputs, ScatterInputs, ScatterOutputs, VarlenGradInputs,
    VarlenGrads, VarlenInputs, VarlenOutputs,
};
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::incre::IncreSpec;
use burn_ascend_ops::ndarray::{cpu_varlen_bwd, cpu_varlen_fwd};
use burn_ascend_ops::prompt::PromptSpec;
use burn_ascend_ops::scatter::ScatterSpec;
use burn_ascend_ops::varlen::composite::{bwd_shapes, shapes};
use burn_ascend_ops::varlen::{compressed_mask, MaskSpec, PseSpec, VarlenSpec};
use burn_ascend_ops::SparseMode;
use burn_backend::{DType, Shape};

use crate::device::{runtime, AscendDevice};
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{fail, AscendTensor};
use crate::Ascend;

mod incre;
mod prompt;
mod scatter;

/// Device-side extras of a varlen call (mask), owned for the duration of the call.
struct Extras {
    mask: Option<AscendTensor>,
}

fn same_device(op: &str, ts: &[&AscendTensor]) -> Result<AscendDevice> {
    let d = ts[0].device();
    if let Some(o) = ts.iter().find(|t| t.device() != d) {
        return Err(AttnError::Unsupported(format!(
            "{op}: tensors on different devices ({d} and {}); move them with `to_device` first",
            o.device()
        )));
    }
    Ok(d)
}

/// Whether the device path takes this call (else the host fallback runs the CPU kernels).
fn native_ok(spec: &VarlenSpec, qkv: &[&AscendTensor], sink: Option<&AscendTensor>) -> bool {
    let dt = qkv[0].dtype;
    is_acl_float(dt)
        && qkv.iter().all(|t| t.dtype == dt)
        && sink.is_none_or(|s| s.dtype == DType::F32)
        && spec.pse == PseSpec::None
        && spec.drop_mask.is_none()
        && spec.attrs.keep_prob == 1.0
}

fn extras(spec: &VarlenSpec, device: &AscendDevice) -> Extras {
    let mask = match &spec.atten_mask {
        MaskSpec::None => None,
        MaskSpec::Dense { data, shape } => Some(upload(data.to_vec(), shape, DType::U8, device)),
        MaskSpec::Compressed => compressed_mask(spec.attrs.sparse_mode)
            .map(|(m, shape)| upload(m, &shape, DType::U8, device)),
    };
    Extras { mask }
}

fn handle<'a>(t: &'a AscendTensor, desc: &TensorDesc, op: &str) -> Tensor<'a> {
    Tensor::new(t.storage.buffer(), desc).unwrap_or_else(|e| fail(op, e))
}

fn opt_handle<'a>(
    t: Option<&'a AscendTensor>,
    desc: Option<&TensorDesc>,
    op: &str,
) -> Option<Tensor<'a>> {
    t.zip(desc).map(|(t, d)| handle(t, d, op))
}

/// Uploads host bytes of `dtype` as a contiguous `dims` tensor (an op's host-side input).
fn upload(bytes: Vec<u8>, dims: &[usize], dtype: DType, device: &AscendDevice) -> AscendTensor {
    AscendTensor::from_data(
        burn_backend::TensorData::from_bytes_vec(bytes, Shape::from(dims.to_vec()), dtype),
        device,
    )
}

/// Uploads f32 values converted to the float `dtype` of the call.
fn upload_float(v: &[f32], dims: &[usize], dtype: DType, device: &AscendDevice) -> AscendTensor {
    let data = burn_backend::TensorData::new(v.to_vec(), Shape::from(dims.to_vec()));
    AscendTensor::from_data(data.convert_dtype(dtype), device)
}

fn upload_i64(v: &[i64], dims: &[usize], device: &AscendDevice) -> AscendTensor {
    let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    upload(bytes, dims, DType::I64, device)
}

fn ints(rt: &Runtime, v: &[i64], op: &str) -> IntArray {
    IntArray::new(rt.api(), v).unwrap_or_else(|e| fail(op, e))
}

const FWD: &str = "aclnnFlashAttentionVarLenScoreV5";
const BWD: &str = "aclnnFlashAttentionUnpaddingScoreGradV5";

fn layout(spec: &VarlenSpec) -> &'static str {
    spec.attrs.softmax_layout.as_attr()
}

fn sparse(mode: SparseMode) -> i64 {
    mode as i64
}

impl AttentionBackend for Ascend {
    fn varlen_fwd(inputs: VarlenInputs<Self>, spec: &VarlenSpec) -> Result<VarlenOutputs<Self>> {
        let dims = spec.validate_fwd(&shapes(&inputs))?;
        let mut all = vec![&inputs.query, &inputs.key, &inputs.value];
        all.extend(inputs.sink.as_ref());
        let device = same_device("varlen_fwd", &all)?;
        if !native_ok(spec, &all[..3], inputs.sink.as_ref()) {
            count("varlen_fwd");
            return cpu_varlen_fwd::<Self>(inputs, spec);
        }
        let rt = runtime(&device);
        let (t, n, dv) = (dims.t_q(), dims.head_num, dims.value_dim);
        let dtype = inputs.query.dtype;
        let out = AscendTensor::alloc(Shape::from(vec![t, n, dv]), dtype, &device);
        let smax = AscendTensor::alloc(Shape::from(vec![t, n, 8]), DType::F32, &device);
        let ssum = AscendTensor::alloc(Shape::from(vec![t, n, 8]), DType::F32, &device);
        // softmaxOutOut is reserved: an empty tensor, as torch_npu passes.
        let sm_out = AscendTensor::alloc(Shape::from(vec![0]), dtype, &device);
        let ex = extras(spec, &device);
        {
            let d = |x: &AscendTensor| x.desc(FWD);
            let (qd, kd, vd) = (d(&inputs.query), d(&inputs.key), d(&inputs.value));
            let (od, maxd, sumd, smd) = (d(&out), d(&smax), d(&ssum), d(&sm_out));
            let q = handle(&inputs.query, &qd, FWD);
            let k = handle(&inputs.key, &kd, FWD);
            let v = handle(&inputs.value, &vd, FWD);
            let sink_d = inputs.sink.as_ref().map(d);
            let sink = inputs
                .sink
                .as_ref()
                .zip(sink_d.as_ref())
                .map(|(s, sd)| handle(s, sd, FWD));
            let mask_d = ex.mask.as_ref().map(d);
            let mask = ex
                .mask
                .as_ref()
                .zip(mask_d.as_ref())
                .map(|(m, md)| handle(m, md, FWD));
            let o = handle(&out, &od, FWD);
            let mx = handle(&smax, &maxd, FWD);
            let sm = handle(&ssum, &sumd, FWD);
            let so = handle(&sm_out, &smd, FWD);
            let prefix = spec.prefix.as_ref().map(|p| ints(&rt, p, FWD));
            let cum_q = ints(&rt, &spec.actual_seq_q_len, FWD);
            let cum_kv = ints(&rt, &spec.actual_seq_kv_len, FWD);
            let q_start = spec.q_start_idx.map(|x| ints(&rt, &[x], FWD));
            let kv_start = spec.kv_start_idx.map(|x| ints(&rt, &[x], FWD));
            let a = &spec.attrs;
            ops::varlen_fwd(
                &rt,
                &ops::VarlenFwdArgs {
                    query: &q,
                    query_rope: None,
                    key: &k,
                    key_rope: None,
                    value: &v,
                    real_shift: None,
                    drop_mask: None,
                    padding_mask: None,
                    atten_mask: mask.as_ref(),
                    sink: sink.as_ref(),
                    prefix: prefix.as_ref(),
                    actual_seq_q_len: Some(&cum_q),
                    actual_seq_kv_len: Some(&cum_kv),
                    q_start_idx: q_start.as_ref(),
                    kv_start_idx: kv_start.as_ref(),
                    scale_value: a.scale,
                    keep_prob: a.keep_prob,
                    pre_tokens: a.pre_tokens,
                    next_tokens: a.next_tokens,
                    head_num: n as i64,
                    input_layout: "TND",
                    inner_precise: a.inner_precise,
                    sparse_mode: sparse(a.sparse_mode),
                    pse_type: a.pse_type as i64,
                    softmax_out_layout: layout(spec),
                    softmax_max: &mx,
                    softmax_sum: &sm,
                    softmax_out: Some(&so),
                    attention_out: &o,
                },
            )
            .unwrap_or_else(|e| fail("varlen_fwd", e));
        }
        rt.synchronize().unwrap_or_else(|e| fail("varlen_fwd", e));
        Ok(VarlenOutputs {
            attention_out: out,
            softmax_max: smax,
            softmax_sum: ssum,
        })
    }

    fn varlen_bwd(inputs: VarlenGradInputs<Self>, spec: &VarlenSpec) -> Result<VarlenGrads<Self>> {
        let dims = spec.validate_bwd(&shapes(&inputs.inputs), &bwd_shapes(&inputs))?;
        let f = &inputs.inputs;
        let mut all = vec![
            &f.query,
            &f.key,
            &f.value,
            &inputs.dy,
            &inputs.attention_in,
            &inputs.softmax_max,
            &inputs.softmax_sum,
        ];
        all.extend(f.sink.as_ref());
        let device = same_device("varlen_bwd", &all)?;
        let stats_f32 = [&inputs.softmax_max, &inputs.softmax_sum]
            .iter()
            .all(|t| t.dtype == DType::F32);
        if !native_ok(spec, &all[..5], f.sink.as_ref()) || !stats_f32 {
            count("varlen_bwd");
            return cpu_varlen_bwd::<Self>(inputs, spec);
        }
        let rt = runtime(&device);
        let (tq, tkv, n, nkv, d, dvd) = (
            dims.t_q(),
            dims.t_kv(),
            dims.head_num,
            dims.kv_head_num,
            dims.head_dim,
            dims.value_dim,
        );
        let dtype = f.query.dtype;
        let alloc = |s: Vec<usize>, dt| AscendTensor::alloc(Shape::from(s), dt, &device);
        let dq = alloc(vec![tq, n, d], dtype);
        let dk = alloc(vec![tkv, nkv, d], dtype);
        let dv = alloc(vec![tkv, nkv, dvd], dtype);
        let dsink = f.sink.as_ref().map(|_| alloc(vec![n], DType::F32));
        let ex = extras(spec, &device);
        {
            let ds = |x: &AscendTensor| x.desc(BWD);
            let descs: Vec<TensorDesc> = [
                &f.query,
                &f.key,
                &f.value,
                &inputs.dy,
                &inputs.softmax_max,
                &inputs.softmax_sum,
                &inputs.attention_in,
                &dq,
                &dk,
                &dv,
            ]
            .iter()
            .map(|t| ds(t))
            .collect();
            let q = handle(&f.query, &descs[0], BWD);
            let k = handle(&f.key, &descs[1], BWD);
            let v = handle(&f.value, &descs[2], BWD);
            let dy = handle(&inputs.dy, &descs[3], BWD);
            let smax = handle(&inputs.softmax_max, &descs[4], BWD);
            let ssum = handle(&inputs.softmax_sum, &descs[5], BWD);
            let att = handle(&inputs.attention_in, &descs[6], BWD);
            let dqh = handle(&dq, &descs[7], BWD);
            let dkh = handle(&dk, &descs[8], BWD);
            let dvh = handle(&dv, &descs[9], BWD);
            let sink_d = f.sink.as_ref().map(ds);
            let sink = f
                .sink
                .as_ref()
                .zip(sink_d.as_ref())
                .map(|(s, sd)| handle(s, sd, BWD));
            let dsink_d = dsink.as_ref().map(ds);
            let dsink_h = dsink
                .as_ref()
                .zip(dsink_d.as_ref())
                .map(|(s, sd)| handle(s, sd, BWD));
            let mask_d = ex.mask.as_ref().map(ds);
            let mask = ex
                .mask
                .as_ref()
                .zip(mask_d.as_ref())
                .map(|(m, md)| handle(m, md, BWD));
            let prefix = spec.prefix.as_ref().map(|p| ints(&rt, p, BWD));
            let cum_q = ints(&rt, &spec.actual_seq_q_len, BWD);
            let cum_kv = ints(&rt, &spec.actual_seq_kv_len, BWD);
            let q_start = spec.q_start_idx.map(|x| ints(&rt, &[x], BWD));
            let kv_start = spec.kv_start_idx.map(|x| ints(&rt, &[x], BWD));
            let a = &spec.attrs;
            ops::varlen_grad(
                &rt,
                &ops::VarlenGradArgs {
                    query: &q,
                    query_rope: None,
                    key: &k,
                    key_rope: None,
                    value: &v,
                    dy: &dy,
                    pse_shift: None,
                    drop_mask: None,
                    padding_mask: None,
                    atten_mask: mask.as_ref(),
                    softmax_max: Some(&smax),
                    softmax_sum: Some(&ssum),
                    softmax_in: None,
                    attention_in: Some(&att),
                    sink_in: sink.as_ref(),
                    prefix: prefix.as_ref(),
                    actual_seq_q_len: Some(&cum_q),
                    actual_seq_kv_len: Some(&cum_kv),
                    q_start_idx: q_start.as_ref(),
                    kv_start_idx: kv_start.as_ref(),
                    scale_value: a.scale,
                    keep_prob: a.keep_prob,
                    pre_tokens: a.pre_tokens,
                    next_tokens: a.next_tokens,
                    head_num: n as i64,
                    input_layout: "TND",
                    inner_precise: a.inner_precise,
                    sparse_mode: sparse(a.sparse_mode),
                    pse_type: a.pse_type as i64,
                    softmax_in_layout: layout(spec),
                    dq: &dqh,
                    dq_rope: None,
                    dk: &dkh,
                    dk_rope: None,
                    dv: &dvh,
                    dpse: None,
                    dsink: dsink_h.as_ref(),
                },
            )
            .unwrap_or_else(|e| fail("varlen_bwd", e));
        }
        rt.synchronize().unwrap_or_else(|e| fail("varlen_bwd", e));
        Ok(VarlenGrads { dq, dk, dv, dsink })
    }

    fn prompt_fwd(inputs: PromptInputs<Self>, spec: &PromptSpec) -> Result<AscendTensor> {
        prompt::prompt_fwd(inputs, spec)
    }

    fn incre_fwd(inputs: IncreInputs<Self>, spec: &IncreSpec) -> Result<AscendTensor> {
        incre::incre_fwd(inputs, spec)
    }

    fn scatter_kv(inputs: ScatterInputs<Self>, spec: &ScatterSpec) -> Result<ScatterOutputs<Self>> {
        scatter::scatter_kv(inputs, spec)
    }
}
