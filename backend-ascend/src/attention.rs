//! The attention ops of this project on Ascend (`burn_ascend_ops::AttentionBackend`).
//!
//! - varlen forward and backward run natively: the device tensors are handed to
//!   `aclnnFlashAttentionVarLenScore` / `aclnnFlashAttentionUnpaddingScoreGrad` (the `V5` ops
//!   with a sink, as torch_npu chooses) as they are (strided views included), outputs are
//!   allocated on the device. The backward's dsink and dpse are computed on the device with
//!   the backend's own tensor ops (CANN's dsink is wrong past a size threshold, and no arch32
//!   kernel writes dpse). Under
//!   `Autodiff<Ascend>` the ops crate's fused backward calls [`AttentionBackend::varlen_bwd`]
//!   here. An explicit mask (`VarlenInputs::atten_mask`, 0/1 floats) is compared with 0 into
//!   BOOL on the device; a pse tensor is handed over as a view, ALiBi slopes as FLOAT and the
//!   dropout mask (`VarlenInputs::drop_mask`, byte values) as UINT8, each cast on the device
//!   when needed — nothing of the call is uploaded but CANN's compressed masks (runtime
//!   constants); a non-f32 sink or mixed dtypes take the CPU kernels through the counted host
//!   fallback (`varlen_fwd` / `varlen_bwd`).
//! - prompt, incremental attention and the KV cache scatter run natively
//!   (`aclnnPromptFlashAttentionV3`, `aclnnIncreFlashAttentionV4` over contiguous, listed or
//!   paged KV, `aclnnScatterPaKvCache` in place on an unshared cache): [`prompt`], [`incre`],
//!   [`scatter`]; int8 KV (antiquant) is cast to INT8 on the device first. Integer dtypes and
//!   NHSD caches take the counted host fallback (`incre_fwd`, `prompt_fwd`, `scatter_kv`).
//! - **f32** prompt, incremental and fused inference attention and f32 cache scatters run the
//!   ops crate's composite (Burn tensor ops over this backend's native aclnn ops, which take
//!   FLOAT), counted as [`PROMPT_COMPOSITE`], [`INCRE_COMPOSITE`], [`FIA_COMPOSITE`] and
//!   [`SCATTER_COMPOSITE`] in [`crate::fallback_counts`] (no host round trip): CANN's Atlas
//!   A2/A3 definitions of PFA, IFA, FIA and ScatterPaKvCache list FLOAT16, BFLOAT16 (and INT8)
//!   only (`*_def.cpp` in ops-transformer; the simulation refuses FLOAT as CANN does), and
//!   casting around the op would change an f32 caller's numbers. f16 / bf16 calls go to aclnn.
//!
//! Shapes and attributes are validated by the ops crate's spec first (typed [`AttnError`]s);
//! a failing aclnn launch (or its stream synchronisation) then returns [`AttnError::Device`]
//! naming the op, the call and its status; other device failures (allocating a Burn tensor)
//! panic with the call, its status and CANN's message, as Burn's tensor API cannot return one.

use burn_ascend_cann::acl::{Tensor, TensorDesc};
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

/// Counters (in [`crate::fallback_counts`]) of f32 calls that ran the ops crate's composite on
/// this backend's native ops because CANN's op takes no FLOAT query / key (see the module docs).
pub const PROMPT_COMPOSITE: &str = "prompt_composite";
/// f32 incremental attention through the composite (see [`PROMPT_COMPOSITE`]).
pub const INCRE_COMPOSITE: &str = "incre_composite";
/// f32 fused inference attention through the composite (see [`PROMPT_COMPOSITE`]).
pub const FIA_COMPOSITE: &str = "fia_composite";
/// f32 KV cache scatters through the composite (see [`PROMPT_COMPOSITE`]).
pub const SCATTER_COMPOSITE: &str = "scatter_composite";

pub mod builders;
pub(crate) mod burn_module;
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

/// [`native_ok`] for a varlen call: a pse tensor in the query's dtype too (ALiBi slopes are
/// cast to FLOAT on the device instead).
fn varlen_native_ok(x: &VarlenInputs<AscendTensor>, more: &[&AscendTensor]) -> bool {
    let mut floats = vec![&x.query, &x.key, &x.value];
    floats.extend(x.pse.as_ref());
    floats.extend(more);
    native_ok(&floats, x.sink.as_ref())
}

fn handle<'a>(t: &'a AscendTensor, desc: &TensorDesc, op: &str) -> Tensor<'a> {
    Tensor::new(t.storage.buffer(), desc).unwrap_or_else(|e| fail(op, e))
}

/// [`handle`] described as the view `t` is.
fn view_handle<'a>(t: &'a AscendTensor, op: &str) -> Tensor<'a> {
    handle(t, &t.desc(op), op)
}

/// The pse tensor as the op describes it: a flat `[pseTotalLen]` with
/// [`builders::dense_pse_dims`] (a view of the same device storage, no copy), the
/// ALiBi-compressed `[1|B, N, 1024, maxSkv]` as it is.
fn pse_view(pse: &AscendTensor, grad: bool) -> AscendTensor {
    if pse.shape.num_dims() != 1 {
        return pse.clone();
    }
    let dims = builders::dense_pse_dims(pse.shape.num_elements(), grad);
    let mut strides = vec![1; dims.len()];
    strides[0] = pse.strides[0];
    pse.view(Shape::from(dims), strides, pse.offset)
}

/// An explicit 0/1 float mask as the BOOL mask the op reads (1 = masked), made on the device.
fn bool_mask(m: &AscendTensor) -> AscendTensor {
    use burn_backend::ops::FloatTensorOps;
    Ascend::float_not_equal_elem(
        m.clone(),
        burn_backend::Scalar::from(0.0f32),
        burn_backend::BoolStore::Native,
    )
}

/// ALiBi slopes as the FLOAT tensor the op reads, cast on the device (`aclnnCast`) when they
/// are in another float dtype; `None` without a device kernel.
fn slopes_f32(slopes: &AscendTensor) -> Option<AscendTensor> {
    crate::ops::native_elementwise::cast(slopes, DType::F32)
}

/// A `dropMask` tensor (byte values as floats) as the UINT8 tensor the op reads, cast on the
/// device (`aclnnCast`); `None` without a device kernel.
fn drop_mask_u8(mask: &AscendTensor) -> Option<AscendTensor> {
    crate::ops::native_elementwise::cast(mask, DType::U8)
}

/// Labels of the varlen calls in error messages.
const FWD: &str = "varlen_fwd";
const BWD: &str = "varlen_bwd";

impl AttentionBackend for Ascend {
    fn varlen_fwd(
        inputs: VarlenInputs<AscendTensor>,
        spec: &VarlenSpec,
    ) -> Result<VarlenOutputs<AscendTensor>> {
        let dims = spec.validate_fwd(&shapes(&inputs))?;
        let device = same_device(FWD, &inputs.all())?;
        let slopes = incre::on_device(&inputs.alibi_slopes, slopes_f32);
        let drop = incre::on_device(&inputs.drop_mask, drop_mask_u8);
        if !varlen_native_ok(&inputs, &[]) || slopes.is_none() || drop.is_none() {
            count("varlen_fwd");
            return cpu_varlen_fwd::<Self>(inputs, spec);
        }
        let rt = runtime(&device);
        let (t, n, dv) = (dims.t_q(), dims.head_num, dims.value_dim);
        let dtype = inputs.query.dtype;
        let alloc = |s: Vec<usize>, dt| AscendTensor::alloc(Shape::from(s), dt, &device);
        let out = VarlenOutputs {
            attention_out: alloc(vec![t, n, dv], dtype),
            softmax_max: alloc(vec![t, n, 8], DType::F32),
            softmax_sum: alloc(vec![t, n, 8], DType::F32),
        };
        {
            let pse = inputs.pse.as_ref().map(|p| pse_view(p, false));
            let mask = inputs.atten_mask.as_ref().map(bool_mask);
            let x = VarlenInputs {
                pse: pse.as_ref(),
                atten_mask: mask.as_ref(),
                alibi_slopes: slopes.as_ref().and_then(Option::as_ref),
                drop_mask: drop.as_ref().and_then(Option::as_ref),
                ..inputs.as_ref()
            }
            .map(|t| view_handle(t, FWD));
            let o = out.as_ref().map(|t| view_handle(t, FWD));
            builders::varlen_fwd(
                &rt,
                spec,
                n,
                inputs.query.acl_dtype(FWD),
                &x.as_ref(),
                &o.as_ref(),
            )
            .map_err(|e| device_error("varlen_fwd", e))?;
        }
        Ok(out)
    }

    fn varlen_bwd(
        inputs: VarlenGradInputs<AscendTensor>,
        spec: &VarlenSpec,
    ) -> Result<VarlenGrads<AscendTensor>> {
        let dims = spec.validate_bwd(&shapes(&inputs.inputs), &bwd_shapes(&inputs))?;
        let f = &inputs.inputs;
        let mut all = f.all();
        all.extend([
            &inputs.dy,
            &inputs.attention_in,
            &inputs.softmax_max,
            &inputs.softmax_sum,
        ]);
        let device = same_device(BWD, &all)?;
        let stats_f32 = [&inputs.softmax_max, &inputs.softmax_sum]
            .iter()
            .all(|t| t.dtype == DType::F32);
        let slopes = incre::on_device(&f.alibi_slopes, slopes_f32);
        let drop = incre::on_device(&f.drop_mask, drop_mask_u8);
        if !varlen_native_ok(f, &[&inputs.dy, &inputs.attention_in])
            || !stats_f32
            || slopes.is_none()
            || drop.is_none()
        {
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
        let (slopes, drop) = (slopes.flatten(), drop.flatten());
        let pse = f.pse.as_ref().map(|p| pse_view(p, true));
        // dpseOut and dsinkOut are the kernel's scratch: both are replaced below. dpseOut is
        // shaped like the realShift the op is given (pse or slopes), as torch_npu allocates it.
        let real_shift = pse.as_ref().or(slopes.as_ref());
        let kernel = VarlenGrads {
            dq: alloc(vec![tq, n, d], dtype),
            dk: alloc(vec![tkv, nkv, d], dtype),
            dv: alloc(vec![tkv, nkv, dvd], dtype),
            dpse: real_shift.map(|p| alloc(p.shape.to_vec(), dtype)),
            dsink: f.sink.as_ref().map(|_| alloc(vec![n], DType::F32)),
        };
        {
            let mask = f.atten_mask.as_ref().map(bool_mask);
            let x = VarlenGradInputs {
                inputs: VarlenInputs {
                    pse: pse.as_ref(),
                    atten_mask: mask.as_ref(),
                    alibi_slopes: slopes.as_ref(),
                    drop_mask: drop.as_ref(),
                    ..f.as_ref()
                },
                ..inputs.as_ref()
            }
            .map(|t| view_handle(t, BWD));
            let g = kernel.as_ref().map(|t| view_handle(t, BWD));
            builders::varlen_grad(
                &rt,
                spec,
                n,
                f.query.acl_dtype(BWD),
                &x.as_ref(),
                &g.as_ref(),
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
        // gradient is computed here on the device from dS alone (`varlen_dpse`: P from the
        // statistics, dS = P∘(dP − rowsum(dO∘O)), times the pseType's factor): two matmuls
        // per sequence and O(N·Sq·Skv) element-wise work, the size of the pse itself — the pse
        // tensor read where it lies, no dq/dk/dv recomputed.
        let dpse = match composite::dpse_factor_of(&p, f) {
            Some(_) => composite::varlen_dpse::<Self>(inputs, spec)?,
            None => None,
        };
        Ok(VarlenGrads {
            dq: kernel.dq,
            dk: kernel.dk,
            dv: kernel.dv,
            dpse,
            dsink,
        })
    }

    fn prompt_fwd(inputs: PromptInputs<AscendTensor>, spec: &PromptSpec) -> Result<AscendTensor> {
        prompt::prompt_fwd(inputs, spec)
    }

    fn incre_fwd(inputs: IncreInputs<AscendTensor>, spec: &IncreSpec) -> Result<AscendTensor> {
        incre::incre_fwd(inputs, spec)
    }

    fn scatter_kv(
        inputs: ScatterInputs<AscendTensor>,
        spec: &ScatterSpec,
    ) -> Result<ScatterOutputs<AscendTensor>> {
        scatter::scatter_kv(inputs, spec)
    }

    fn fia_fwd(
        inputs: burn_ascend_ops::backend::FiaInputs<AscendTensor>,
        spec: &burn_ascend_ops::fia::FiaSpec,
    ) -> Result<burn_ascend_ops::backend::FiaOutputs<AscendTensor>> {
        fia::fia_fwd(inputs, spec)
    }

    fn fia_sink_available(device: &AscendDevice) -> bool {
        crate::device::try_runtime(device).is_ok_and(|rt| rt.api().fia_v4.is_some())
    }
}
