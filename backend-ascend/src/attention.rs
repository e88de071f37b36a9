//! The attention ops of this project on Ascend (`burn_ascend_ops::AttentionBackend`).
//!
//! - varlen forward and backward run natively: the device tensors are handed to
//!   `aclnnFlashAttentionVarLenScore` / `aclnnFlashAttentionUnpaddingScoreGrad` (the `V5` ops
//!   with a sink, as torch_npu chooses) as they are (strided views included), outputs are
//!   allocated on the device. The backward's dsink and dpse are computed on the device with
//!   the backend's own tensor ops (CANN's dsink is wrong past a size threshold, and no arch32
//!   kernel writes dpse). Under
//!   `Autodiff<Ascend>` the ops crate's fused backward calls [`AttentionBackend::varlen_bwd`]
//!   here. pse (dense or ALiBi slopes), dropout and masks travel in the spec and are uploaded by
//!   the call builder ([`aclnn`]); a non-f32 sink or mixed dtypes take the CPU kernels through
//!   the counted host fallback (`varlen_fwd` / `varlen_bwd`).
//! - prompt, incremental attention and the KV cache scatter run natively
//!   (`aclnnPromptFlashAttentionV3`, `aclnnIncreFlashAttentionV4` over contiguous, listed or
//!   paged KV, `aclnnScatterPaKvCache` in place on an unshared cache): [`prompt`], [`incre`],
//!   [`scatter`]; int8 KV (antiquant) is cast to INT8 on the device first. Integer dtypes and
//!   NHSD caches take the counted host fallback (`incre_fwd`, `prompt_fwd`, `scatter_kv`).
//!
//! Shapes and attributes are validated by the ops crate's spec first (typed [`AttnError`]s);
//! a failing aclnn launch (or its stream synchronisation) then returns [`AttnError::Device`]
//! naming the op, the call and its status; other device failures (allocating a Burn tensor)
//! panic with the call, its status and CANN's message, as Burn's tensor API cannot return one.

use burn_ascend_cann::acl::{Tensor, TensorDesc};
use burn_ascend_kernels::reference::varlen::dpse_factor;
use burn_ascend_ops::backend::{
    AttentionBackend, IncreInputs, PromptInputs, ScatterInputs, ScatterOutputs, VarlenGradInputs,
    VarlenGrads, VarlenInputs, VarlenOutputs,
};
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::incre::IncreSpec;
use burn_ascend_ops::ndarray::{cpu_varlen_bwd, cpu_varlen_fwd};
use burn_ascend_ops::prompt::PromptSpec;
use burn_ascend_ops::scatter::ScatterSpec;
use burn_ascend_ops::varlen::composite::{self, bwd_shapes, dsink_from_stats, shapes};
use burn_ascend_ops::varlen::VarlenSpec;
use burn_backend::{DType, Shape};

use crate::device::{runtime, AscendDevice};
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{device_error, fail, AscendTensor};
use crate::Ascend;

pub mod aclnn;
pub mod device_meta;
pub mod fia;
mod incre;
mod prompt;
mod scatter;

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
fn native_ok(qkv: &[&AscendTensor], sink: Option<&AscendTensor>) -> bool {
    let dt = qkv[0].dtype;
    is_acl_float(dt)
        && qkv.iter().all(|t| t.dtype == dt)
        && sink.is_none_or(|s| s.dtype == DType::F32)
}

fn handle<'a>(t: &'a AscendTensor, desc: &TensorDesc, op: &str) -> Tensor<'a> {
    Tensor::new(t.storage.buffer(), desc).unwrap_or_else(|e| fail(op, e))
}

/// Handles of `ts` (described as the views they are), in order.
fn handles<'a>(ts: &[&'a AscendTensor], descs: &'a [TensorDesc], op: &str) -> Vec<Tensor<'a>> {
    ts.iter()
        .zip(descs)
        .map(|(t, d)| handle(t, d, op))
        .collect()
}

fn descs(ts: &[&AscendTensor], op: &str) -> Vec<TensorDesc> {
    ts.iter().map(|t| t.desc(op)).collect()
}

/// Labels of the varlen calls in error messages.
const FWD: &str = "varlen_fwd";
const BWD: &str = "varlen_bwd";

impl AttentionBackend for Ascend {
    fn varlen_fwd(inputs: VarlenInputs<Self>, spec: &VarlenSpec) -> Result<VarlenOutputs<Self>> {
        let dims = spec.validate_fwd(&shapes(&inputs))?;
        let mut all = vec![&inputs.query, &inputs.key, &inputs.value];
        all.extend(inputs.sink.as_ref());
        let device = same_device("varlen_fwd", &all)?;
        if !native_ok(&all[..3], inputs.sink.as_ref()) {
            count("varlen_fwd");
            return cpu_varlen_fwd::<Self>(inputs, spec);
        }
        let rt = runtime(&device);
        let (t, n, dv) = (dims.t_q(), dims.head_num, dims.value_dim);
        let dtype = inputs.query.dtype;
        let alloc = |s: Vec<usize>, dt| AscendTensor::alloc(Shape::from(s), dt, &device);
        let out = alloc(vec![t, n, dv], dtype);
        let smax = alloc(vec![t, n, 8], DType::F32);
        let ssum = alloc(vec![t, n, 8], DType::F32);
        {
            let ts = [
                &inputs.query,
                &inputs.key,
                &inputs.value,
                &out,
                &smax,
                &ssum,
            ];
            let ds = descs(&ts, FWD);
            let h = handles(&ts, &ds, FWD);
            let sink_d = inputs.sink.as_ref().map(|s| s.desc(FWD));
            let sink = inputs
                .sink
                .as_ref()
                .zip(sink_d.as_ref())
                .map(|(s, d)| handle(s, d, FWD));
            aclnn::varlen_fwd(
                &rt,
                spec,
                n,
                &aclnn::VarlenFwdTensors {
                    dtype: inputs.query.acl_dtype(FWD),
                    query: &h[0],
                    key: &h[1],
                    value: &h[2],
                    sink: sink.as_ref(),
                    attention_out: &h[3],
                    softmax_max: &h[4],
                    softmax_sum: &h[5],
                },
            )
            .map_err(|e| device_error("varlen_fwd", e))?;
        }
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
        if !native_ok(&all[..5], f.sink.as_ref()) || !stats_f32 {
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
        {
            let ts = [
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
            ];
            let ds = descs(&ts, BWD);
            let h = handles(&ts, &ds, BWD);
            let opt = [f.sink.as_ref(), dsink.as_ref()];
            let opt_d: Vec<Option<TensorDesc>> =
                opt.iter().map(|t| t.map(|t| t.desc(BWD))).collect();
            let opt_h: Vec<Option<Tensor<'_>>> = opt
                .iter()
                .zip(&opt_d)
                .map(|(t, d)| t.zip(d.as_ref()).map(|(t, d)| handle(t, d, BWD)))
                .collect();
            aclnn::varlen_grad(
                &rt,
                spec,
                n,
                &aclnn::VarlenGradTensors {
                    dtype: f.query.acl_dtype(BWD),
                    query: &h[0],
                    key: &h[1],
                    value: &h[2],
                    dy: &h[3],
                    softmax_max: &h[4],
                    softmax_sum: &h[5],
                    attention_in: &h[6],
                    sink: opt_h[0].as_ref(),
                    dq: &h[7],
                    dk: &h[8],
                    dv: &h[9],
                    dsink: opt_h[1].as_ref(),
                },
            )
            .map_err(|e| device_error("varlen_bwd", e))?;
        }
        // dsink: CANN's post step keeps only the last chunk of its partial sums once
        // `B·s1Pad·s2Pad/baseMN·4 > 2·postUbBaseSize` (`flash_attention_score_grad_post.h`
        // ~1029–1077; the simulation reproduces it), and its partial-sum slots may collide
        // between sequences of different block counts (`…_s1s2_bn2gs1s2_sab.h` ~3799–3815).
        // So the kernel's dsink is replaced, always, by one computed here on the device from
        // the statistics: O(T·N·Dv) element-wise work and reductions, nothing next to the
        // O(T·S·D) backward, and no threshold to get wrong.
        let p = spec.problem(dims, None);
        drop(dsink); // the kernel's, written by the call above
        let dsink = f.sink.as_ref().map(|sink| {
            dsink_from_stats::<Self>(
                &p,
                inputs.dy.clone(),
                inputs.attention_in.clone(),
                inputs.softmax_max.clone(),
                inputs.softmax_sum.clone(),
                sink.clone(),
            )
        });
        // dpse: no arch32 grad kernel writes dpseOut (spec Appendix), so a dense pse's
        // gradient is recomputed here on the device with the composite's Burn ops (P per
        // sequence from the statistics, dS = P∘(dP − rowsum(dO∘O)), times the pseType's
        // factor): O(N·Sq·Skv) per sequence, the size of the pse itself.
        let dpse = match dpse_factor(&p) {
            Some(_) => composite::varlen_bwd::<Self>(inputs, spec)?.dpse,
            None => None,
        };
        Ok(VarlenGrads {
            dq,
            dk,
            dv,
            dpse,
            dsink,
        })
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

    fn fia_fwd(
        inputs: burn_ascend_ops::backend::FiaInputs<Self>,
        spec: &burn_ascend_ops::fia::FiaSpec,
    ) -> Result<burn_ascend_ops::backend::FiaOutputs<Self>> {
        fia::fia_fwd(inputs, spec)
    }

    fn fia_sink_available(device: &AscendDevice) -> bool {
        crate::device::try_runtime(device).is_ok_and(|rt| rt.api().fia_v4.is_some())
    }
}
