//! Varlen flash attention on the device (`VarlenBackend for Ascend`) and its aclnn argument
//! builder.
//!
//! Forward and backward run natively: the device tensors are handed to
//! `aclnnFlashAttentionVarLenScore` / `aclnnFlashAttentionUnpaddingScoreGrad` (the `V5` ops
//! with a sink, as torch_npu chooses) as they are (strided views included), outputs are
//! allocated on the device. The backward's dpse, and its dsink before CANN 9.1.0, are computed
//! on the device with the backend's own tensor ops (no arch32 kernel writes dpse; the older
//! releases' dsink is wrong past a size threshold); from 9.1.0 CANN's dsink is taken. Under `Autodiff<Ascend>` the ops crate's fused backward calls
//! [`VarlenBackend::varlen_bwd`] here. An explicit mask (`VarlenInputs::atten_mask`, 0/1
//! floats) is compared with 0 into BOOL on the device; a pse tensor is handed over as a view,
//! ALiBi slopes as FLOAT and the dropout mask (`VarlenInputs::drop_mask`, byte values) as
//! UINT8, each cast on the device when needed — nothing of the call is uploaded but CANN's
//! compressed masks (runtime constants); a non-f32 sink or mixed dtypes take the CPU kernels
//! through the counted host fallback (`varlen_fwd` / `varlen_bwd`).
//!
//! The builder half ([`varlen_fwd`], [`varlen_grad`]) knows no Burn: the validated spec plus
//! aclnn handles in, one aclnn call out; the op-replay CLI's `--device sim|npu` calls it too.

use burn_ascend_cann::acl::{
    aclnn, AclError, DataType, IntArray, Result as AclResult, Runtime, Tensor,
};
use burn_ascend_contract::varlen::{compressed_mask, VARLEN_LAYOUT};
use burn_ascend_ops::error::Result;
use burn_ascend_ops::varlen::composite::{dpse_factor_of, dsink_from_stats, varlen_dpse};
use burn_ascend_ops::varlen::ndarray::{cpu_varlen_bwd, cpu_varlen_fwd};
use burn_ascend_ops::varlen::{
    grad_shapes, MaskSpec, VarlenBackend, VarlenGradInputs, VarlenGrads, VarlenInputs,
    VarlenOutputs, VarlenSpec,
};
use burn_backend::{DType, Shape};

use super::common::{
    constant_mask, empty, handle_of, ints, on_device, same_device, view_handle, Held,
};
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{device_error, AscendTensor};
use crate::Ascend;

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

/// The pse tensor as the op describes it: a flat `[pseTotalLen]` with
/// [`dense_pse_dims`] (a view of the same device storage, no copy), the
/// ALiBi-compressed `[1|B, N, 1024, maxSkv]` as it is.
fn pse_view(pse: &AscendTensor, grad: bool) -> AscendTensor {
    if pse.shape.num_dims() != 1 {
        return pse.clone();
    }
    let dims = dense_pse_dims(pse.shape.num_elements(), grad);
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
    crate::tensor_ops::native_elementwise::cast(slopes, DType::F32)
}

/// A `dropMask` tensor (byte values as floats) as the UINT8 tensor the op reads, cast on the
/// device (`aclnnCast`); `None` without a device kernel.
fn drop_mask_u8(mask: &AscendTensor) -> Option<AscendTensor> {
    crate::tensor_ops::native_elementwise::cast(mask, DType::U8)
}

/// Labels of the varlen calls in error messages.
const FWD: &str = "varlen_fwd";
const BWD: &str = "varlen_bwd";

impl VarlenBackend for Ascend {
    fn varlen_fwd(
        inputs: VarlenInputs<AscendTensor>,
        spec: &VarlenSpec,
    ) -> Result<VarlenOutputs<AscendTensor>> {
        let dims = spec.validate_fwd(&burn_ascend_ops::varlen::shapes(&inputs))?;
        let device = same_device(FWD, &inputs.all())?;
        let slopes = on_device(&inputs.alibi_slopes, slopes_f32);
        let drop = on_device(&inputs.drop_mask, drop_mask_u8);
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
            varlen_fwd(
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
        let dims = spec.validate_bwd(
            &burn_ascend_ops::varlen::shapes(&inputs.inputs),
            &burn_ascend_ops::varlen::bwd_shapes(&inputs),
        )?;
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
        let slopes = on_device(&f.alibi_slopes, slopes_f32);
        let drop = on_device(&f.drop_mask, drop_mask_u8);
        if !varlen_native_ok(f, &[&inputs.dy, &inputs.attention_in])
            || !stats_f32
            || slopes.is_none()
            || drop.is_none()
        {
            count("varlen_bwd");
            return cpu_varlen_bwd::<Self>(inputs, spec);
        }
        let rt = runtime(&device);
        let [dq_shape, dk_shape, dv_shape] = grad_shapes(&dims);
        let n = dims.head_num;
        let dtype = f.query.dtype;
        let alloc = |s: Vec<usize>, dt| AscendTensor::alloc(Shape::from(s), dt, &device);
        let (slopes, drop) = (slopes.flatten(), drop.flatten());
        let pse = f.pse.as_ref().map(|p| pse_view(p, true));
        // dpseOut and dsinkOut are the kernel's scratch: both are replaced below. dpseOut is
        // shaped like the realShift the op is given (pse or slopes), as torch_npu allocates it.
        let real_shift = pse.as_ref().or(slopes.as_ref());
        let kernel = VarlenGrads {
            dq: alloc(dq_shape.to_vec(), dtype),
            dk: alloc(dk_shape.to_vec(), dtype),
            dv: alloc(dv_shape.to_vec(), dtype),
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
            varlen_grad(
                &rt,
                spec,
                n,
                f.query.acl_dtype(BWD),
                &x.as_ref(),
                &g.as_ref(),
            )
            .map_err(|e| device_error("varlen_bwd", e))?;
        }
        // dsink: up to CANN 9.0.0 the post step reduces its partial sums per chunk of
        // `2·postUbBaseSize` bytes — 8.5.0-beta.1 keeps only the last chunk, 8.5.0 and 9.0.0
        // drop the last one when the size is an exact multiple (`flash_attention_score_grad_post.h`
        // ~1029–1080; the simulation reproduces each) — and its partial-sum slots may collide
        // between sequences of different block counts (`…_s1s2_bn2gs1s2_sab.h` ~3799–3815).
        // There the kernel's dsink is replaced by one computed here on the device from the
        // statistics: O(T·N·Dv) element-wise work and reductions, nothing next to the
        // O(T·S·D) backward, and no threshold to get wrong. From 9.1.0 (`ce9556718`) the post
        // step is one reduction of per-core partials, right at every size: CANN's `dsinkOut`
        // is taken as it is (`selftest`'s dsink probe compares both on hardware).
        let p = spec.problem(dims, None);
        let cann_dsink = crate::release::cann_release(&rt)?
            .dsink_post_step()
            .right_at_every_size();
        let dsink = match (&f.sink, kernel.dsink) {
            (Some(_), Some(d)) if cann_dsink => Some(d),
            (Some(sink), _) => Some(dsink_from_stats::<Self>(
                &p,
                inputs.dy.clone(),
                inputs.attention_in.clone(),
                inputs.softmax_max.clone(),
                inputs.softmax_sum.clone(),
                sink.clone(),
            )),
            (None, _) => None,
        };
        // dpse: no arch32 grad kernel writes dpseOut (spec Appendix), so a dense pse's
        // gradient is computed here on the device from dS alone (`varlen_dpse`: P from the
        // statistics, dS = P∘(dP − rowsum(dO∘O)), times the pseType's factor): two matmuls
        // per sequence and O(N·Sq·Skv) element-wise work, the size of the pse itself — the pse
        // tensor read where it lies, no dq/dk/dv recomputed.
        let dpse = match dpse_factor_of(&p, f) {
            Some(_) => varlen_dpse::<Self>(inputs, spec)?,
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
}

/// The varlen inputs the spec implies (CANN's compressed mask, a runtime constant) and its int
/// arrays.
struct VarlenExtras {
    atten_mask: Option<Held>,
    prefix: Option<IntArray>,
    cum_q: IntArray,
    cum_kv: IntArray,
    q_start: Option<IntArray>,
    kv_start: Option<IntArray>,
}

/// The shape a dense TND pse (`[pseTotalLen]` in the spec) is described with, per op — the
/// forward and the backward tilings disagree:
/// - forward: `flash_attention_score/op_host/arch32/flash_attention_score_tiling_general.cpp`
///   classifies the pse by dim 0 alone (`AnalyzeOptionalInput` ~1524–1527: `N·Σ Sq·Skv` is
///   the per-sequence `[N, Sq, Skv]` layout) but every template's `SetPseAlibiParams` (~3876)
///   refuses fewer than 2 dims and reads dim −2 = 1024 as the compressed ALiBi pse: so
///   `[pseTotalLen, 1, 1]` (dim −2 is 1, never 1024; a flat `[pseTotalLen]` would be refused);
/// - backward: `flash_attention_score_grad/op_host/arch32/…_s1s2_bn2gs1s2_sab.cpp`
///   (`ProcessPseInfo` ~528) and `…_s1s2_bn2gs1s2.cpp` (~465) take a TND outer pse only 1-D:
///   `[pseTotalLen]` — and `dpseOut` gets the same shape (torch_npu passes a pse-shaped one).
///
/// A pse given as a device tensor (`VarlenInputs::pse`) is described with these dims by its
/// owner (the `Ascend` backend) over its own storage: no copy.
pub fn dense_pse_dims(total: usize, grad: bool) -> Vec<usize> {
    if grad {
        vec![total]
    } else {
        vec![total, 1, 1]
    }
}

fn varlen_extras(rt: &Runtime, spec: &VarlenSpec) -> AclResult<VarlenExtras> {
    let atten_mask = match &spec.atten_mask {
        // An explicit mask is the caller's device tensor (`VarlenInputs::atten_mask`).
        MaskSpec::None | MaskSpec::Dense => None,
        // Built on the host only for the runtime's first call of the mode: 4–6 MiB of mask
        // per call was most of a training step's host time (a 0.5 B model at 8k tokens).
        MaskSpec::Compressed if spec.attrs.sparse_mode.takes_compressed_mask() => {
            let mode = spec.attrs.sparse_mode;
            let key = format!("varlen compressed mask {mode:?}");
            Some(constant_mask(rt, &key, || {
                let (m, shape) = compressed_mask(mode).expect("the mode takes one");
                (m, shape.to_vec())
            })?)
        }
        MaskSpec::Compressed => None,
    };
    Ok(VarlenExtras {
        atten_mask,
        prefix: ints(rt, spec.prefix.as_deref())?,
        cum_q: IntArray::new(rt.api(), &spec.actual_seq_q_len)?,
        cum_kv: IntArray::new(rt.api(), &spec.actual_seq_kv_len)?,
        q_start: ints(rt, spec.q_start_idx.as_ref().map(std::slice::from_ref))?,
        kv_start: ints(rt, spec.kv_start_idx.as_ref().map(std::slice::from_ref))?,
    })
}

/// The varlen carrier over aclnn handles (the contract's one carrier per call). `pse` and
/// `alibi_slopes` are the op's one `realShift` (at most one is given): a flat pse must be
/// described with [`dense_pse_dims`] for the op (forward or grad), an ALiBi-compressed one as
/// its `[1|B, N, 1024, maxSkv]`, both in the query's dtype; the slopes FLOAT. An explicit mask
/// (`atten_mask`) is in a mask dtype (BOOL or UINT8), the dropout mask (`drop_mask`) UINT8.
pub type VarlenHandles<'a> = VarlenInputs<&'a Tensor<'a>>;

/// `aclnnFlashAttentionVarLenScore` without a sink, `…V5` with one (the choice and the
/// fallbacks are `aclnn::varlen_fwd`'s) for a validated spec; `head_num` is the query's N and
/// `dtype` its (and the output's) float dtype.
pub fn varlen_fwd(
    rt: &Runtime,
    spec: &VarlenSpec,
    head_num: usize,
    dtype: DataType,
    x: &VarlenHandles<'_>,
    out: &VarlenOutputs<&Tensor<'_>>,
) -> AclResult<()> {
    let ex = varlen_extras(rt, spec)?;
    // softmaxOutOut is reserved ("预留参数，暂未使用"): an empty tensor, as torch_npu passes.
    let softmax_out = empty(rt, dtype)?;
    {
        let mask = handle_of(&ex.atten_mask)?;
        let softmax_out = softmax_out.as_ref().handle()?;
        let a = &spec.attrs;
        aclnn::varlen_fwd(
            rt,
            &aclnn::VarlenFwdArgs {
                query: x.query,
                query_rope: None,
                key: x.key,
                key_rope: None,
                value: x.value,
                real_shift: x.pse.or(x.alibi_slopes),
                drop_mask: x.drop_mask,
                padding_mask: None,
                atten_mask: x.atten_mask.or(mask.as_ref()),
                sink: x.sink,
                prefix: ex.prefix.as_ref(),
                actual_seq_q_len: Some(&ex.cum_q),
                actual_seq_kv_len: Some(&ex.cum_kv),
                q_start_idx: ex.q_start.as_ref(),
                kv_start_idx: ex.kv_start.as_ref(),
                scale_value: a.scale,
                keep_prob: a.keep_prob,
                pre_tokens: a.pre_tokens,
                next_tokens: a.next_tokens,
                head_num: head_num as i64,
                input_layout: VARLEN_LAYOUT,
                inner_precise: a.inner_precise,
                sparse_mode: a.sparse_mode.as_attr(),
                pse_type: a.pse_type.as_attr(),
                softmax_out_layout: a.softmax_layout.as_attr(),
                softmax_max: out.softmax_max,
                softmax_sum: out.softmax_sum,
                softmax_out: Some(&softmax_out),
                attention_out: out.attention_out,
            },
        )?;
    }
    Ok(())
}

/// `aclnnFlashAttentionUnpaddingScoreGrad` without a sink, `…GradV5` with one (the choice and
/// the fallbacks are `aclnn::varlen_grad`'s) for a validated spec. `g.dpse` is the `dpseOut`
/// the op writes, required with a `realShift` (pse or slopes): described like it (the op
/// view-copies its dpse into it), in the query's dtype; without one an empty tensor is passed.
pub fn varlen_grad(
    rt: &Runtime,
    spec: &VarlenSpec,
    head_num: usize,
    dtype: DataType,
    x: &VarlenGradInputs<&Tensor<'_>>,
    g: &VarlenGrads<&Tensor<'_>>,
) -> AclResult<()> {
    let ex = varlen_extras(rt, spec)?;
    // Unused outputs (no rope): empty tensors, as torch_npu passes. `dpseOut` has the pse's
    // shape ([0] without one), as torch_npu allocates it (op-plugin
    // `FlashAttentionKernelNpuOpApi.cpp` ~1119–1123): the op view-copies its pse-shaped dpse
    // into it. No arch32 grad kernel writes dpse (spec Appendix), so its content is not read:
    // the backend computes dpse itself (`burn_ascend_backend::attention`).
    let unused = empty(rt, dtype)?;
    let real_shift = x.inputs.pse.or(x.inputs.alibi_slopes);
    if real_shift.is_some() && g.dpse.is_none() {
        return Err(AclError::Invalid {
            param: "dpseOut".into(),
            rule: "required with a realShift: shaped like it (the op view-copies its dpse into it)"
                .into(),
        });
    }
    {
        let mask = handle_of(&ex.atten_mask)?;
        let (dq_rope, dk_rope, dpse) = (
            unused.as_ref().handle()?,
            unused.as_ref().handle()?,
            unused.as_ref().handle()?,
        );
        let a = &spec.attrs;
        aclnn::varlen_grad(
            rt,
            &aclnn::VarlenGradArgs {
                query: x.inputs.query,
                query_rope: None,
                key: x.inputs.key,
                key_rope: None,
                value: x.inputs.value,
                dy: x.dy,
                pse_shift: real_shift,
                drop_mask: x.inputs.drop_mask,
                padding_mask: None,
                atten_mask: x.inputs.atten_mask.or(mask.as_ref()),
                softmax_max: Some(x.softmax_max),
                softmax_sum: Some(x.softmax_sum),
                softmax_in: None,
                attention_in: Some(x.attention_in),
                sink_in: x.inputs.sink,
                prefix: ex.prefix.as_ref(),
                actual_seq_q_len: Some(&ex.cum_q),
                actual_seq_kv_len: Some(&ex.cum_kv),
                q_start_idx: ex.q_start.as_ref(),
                kv_start_idx: ex.kv_start.as_ref(),
                scale_value: a.scale,
                keep_prob: a.keep_prob,
                pre_tokens: a.pre_tokens,
                next_tokens: a.next_tokens,
                head_num: head_num as i64,
                input_layout: VARLEN_LAYOUT,
                inner_precise: a.inner_precise,
                sparse_mode: a.sparse_mode.as_attr(),
                pse_type: a.pse_type.as_attr(),
                softmax_in_layout: a.softmax_layout.as_attr(),
                dq: g.dq,
                dq_rope: Some(&dq_rope),
                dk: g.dk,
                dk_rope: Some(&dk_rope),
                dv: g.dv,
                dpse: Some(g.dpse.unwrap_or(&dpse)),
                dsink: g.dsink,
            },
        )?;
    }
    Ok(())
}
