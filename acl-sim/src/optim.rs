//! The simulated optimizer op (the update a training step runs on the device): `aclnnApplyAdamWV2`.
//! First stage: the docs' rules — a null `varRef`, `mRef`, `vRef`, `grad` or `step` → 161001
//! (`maxGradNormOptionalRef` too when `amsgrad`); `varRef`, `mRef`, `vRef`, `grad` not all of one
//! dtype among FLOAT16 / BFLOAT16 / FLOAT32, shapes that differ (the contract,
//! `burn_ascend_contract::optim`, the same rules the Burn paths apply), `step` not one INT64 /
//! FLOAT32 element, an attribute out of range, or in-place references that overlap each other
//! or `grad` → 161002. `amsgrad` and `maximize` are not modelled (161002, "unsupported").
//! Launch: the f64 reference of `burn_ascend_kernels::reference::optim`, rounded once to the
//! tensors' dtype, written back in place, with `t = step + 1` as the AICore kernel computes it
//! (`step_ += 1` before the bias corrections; the op's golden in `hicann/ops-nn` and MindSpore's
//! 0-based `state_step` agree, the docs' "t, greater than 0" does not). A negative or fractional
//! `step` fails the launch (561000), as the host cannot see device values at the first stage.

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::optim::{validate, AdamWHyper};
use burn_ascend_kernels::reference::optim as reference;

use crate::state::{self, invalid, required, tensor, SimErr, SimResult, SimTensor};
use crate::wire::{encode_f64, floats, ints, submit, unsupported};

const FLOAT3: &[DataType] = &[DataType::Float, DataType::Float16, DataType::Bf16];

/// The device bytes a view's storage covers.
fn span(t: &SimTensor) -> (usize, usize) {
    let bytes = t.storage_dims.iter().product::<usize>() * t.dtype.size();
    (t.data, t.data + bytes)
}

fn f64s(t: &SimTensor, name: &str) -> SimResult<Vec<f64>> {
    Ok(floats(t, name)?.into_iter().map(f64::from).collect())
}

first_stage!(apply_adam_w_v2, |p| {
    const OP: &str = names::apply_adam_w_v2;
    state::guard(|| {
        let var = required(p.var_ref, "varRef")?;
        let m = required(p.m_ref, "mRef")?;
        let v = required(p.v_ref, "vRef")?;
        let g = required(p.grad, "grad")?;
        let s = required(p.step, "step")?;
        let max = tensor(p.max_grad_norm_optional_ref, "maxGradNormOptionalRef")?;
        if p.amsgrad && max.is_none() {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "maxGradNormOptionalRef is null with amsgrad true".into(),
            ));
        }
        if !FLOAT3.contains(&var.dtype) {
            return invalid(format!(
                "{OP}: varRef dtype must be one of {FLOAT3:?}, got {:?}",
                var.dtype
            ));
        }
        for (t, n) in [(&m, "mRef"), (&v, "vRef"), (&g, "grad")] {
            if t.dtype != var.dtype {
                return invalid(format!(
                    "{OP}: {n} dtype must equal varRef's {:?}, got {:?}",
                    var.dtype, t.dtype
                ));
            }
        }
        if !matches!(s.dtype, DataType::Int64 | DataType::Float) || s.numel() != 1 {
            return invalid(format!(
                "{OP}: step must be one INT64 or FLOAT element, got {:?} of shape {:?}",
                s.dtype, s.dims
            ));
        }
        let h = AdamWHyper {
            lr: p.lr,
            beta1: p.beta1,
            beta2: p.beta2,
            weight_decay: p.weight_decay,
            eps: p.eps,
        };
        // The p.step's value is on the device: its rule is checked at launch.
        validate(&var.dims, &m.dims, &v.dims, &g.dims, 1, &h)
            .map_err(|e| SimErr(ACLNN_ERR_PARAM_INVALID, format!("{OP}: {e}")))?;
        let refs = [(&var, "varRef"), (&m, "mRef"), (&v, "vRef"), (&g, "grad")];
        for (i, (a, an)) in refs.iter().enumerate() {
            for (b, bn) in &refs[i + 1..] {
                let (x, y) = (span(a), span(b));
                if x.0 < y.1 && y.0 < x.1 {
                    return invalid(format!(
                        "{OP}: {an} and {bn} overlap in device memory (in-place references must be distinct)"
                    ));
                }
            }
        }
        if p.amsgrad {
            return unsupported(&format!("{OP}: amsgrad true"));
        }
        if p.maximize {
            return unsupported(&format!("{OP}: maximize true"));
        }
        let job = move || {
            let t = match s.dtype {
                DataType::Float => floats(&s, "step")?[0] as f64,
                _ => ints(&s, "step")?[0] as f64,
            };
            if !(t >= 0.0 && t.fract() == 0.0) {
                return Err(SimErr(
                    ACLNN_ERR_INNER,
                    format!("step: must be a whole number at least 0 (the kernel adds 1), got {t}"),
                ));
            }
            let t = t + 1.0;
            let (mut pv, mut mv, mut vv) =
                (f64s(&var, "varRef")?, f64s(&m, "mRef")?, f64s(&v, "vRef")?);
            reference::adamw(&mut pv, &mut mv, &mut vv, &f64s(&g, "grad")?, t as u64, &h);
            var.write("varRef", &encode_f64(&pv, var.dtype, "varRef")?)?;
            m.write("mRef", &encode_f64(&mv, m.dtype, "mRef")?)?;
            v.write("vRef", &encode_f64(&vv, v.dtype, "vRef")?)
        };
        submit(OP, job, p.workspace_size, p.executor)
    })
});
