//! The optimizer step of a training step on Ascend (`burn_ascend_ops::OptimBackend`): AdamW as one
//! `aclnnApplyAdamWV2` launch per parameter, in place over the parameter and its moments,
//! queued on the device's stream, nothing read back. Shapes and attributes are validated by
//! the contract first (typed [`AttnError`]s naming the aclnn parameter); dtypes outside the
//! docs' table (f64, mixed) take the CPU kernel through the counted host fallback
//! (`adamw_step`).
//!
//! In place: a tensor that shares its storage (another view or clone is alive) is copied first
//! (one `aclnnInplaceCopy`), so no other tensor sees the update. The step count is a
//! one-element FLOAT32 device tensor, uploaded once per step value and device and shared by
//! every parameter's call of that step.
//!
//! `step` is the kernel's: the 0-based count `t − 1`. The docs call it `t` ("需要大于0",
//! `optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md`), but the AICore kernel adds 1 before the
//! bias corrections (`step_ += 1`; the op's golden `optim/apply_adam_w_v2/tests/assets/golden.py`
//! in `hicann/ops-nn` states it was checked against `op_kernel/apply_adam_w_v2_fp.h`), and
//! MindSpore's `mint.optim.AdamW`, which launches this op, starts its `state_step` at −1 and
//! adds 1 before each call, so its first call passes 0. The simulation models the kernel.
//! `selftest`'s AdamW case on an NPU compares one step with the f64 reference at `t = 1`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use burn_ascend_cann::acl::aclnn::{self, ApplyAdamWV2Args};
use burn_ascend_cann::acl::names;
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::optim::ndarray::cpu_adamw_step;
use burn_ascend_ops::optim::{validate_adamw, AdamWHyper, AdamWTensors, OptimBackend};
use burn_backend::{Shape, TensorData};

use crate::device::{runtime, AscendDevice};
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{device_error, same_device, AscendTensor};
use crate::tensor_ops::native_index;
use crate::Ascend;

/// The last step count uploaded per device (`step` of every call of that step).
static STEPS: Mutex<Option<HashMap<AscendDevice, (u64, AscendTensor)>>> = Mutex::new(None);

fn step_tensor(device: &AscendDevice, step: u64) -> AscendTensor {
    let mut g = STEPS.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some((s, t)) = map.get(device) {
        if *s == step {
            return t.clone();
        }
    }
    // FLOAT32 holds every step count below 2^24 exactly.
    let t = AscendTensor::from_data(TensorData::new(vec![step as f32], Shape::new([1])), device);
    map.insert(*device, (step, t.clone()));
    t
}

/// `t` if the update may write its storage: contiguous, covering its whole storage, owned
/// alone; else a fresh copy.
fn owned(mut t: AscendTensor) -> AscendTensor {
    let whole = t.offset == 0 && t.is_contiguous() && t.numel() * t.dtype.size() == t.storage.len();
    if whole && Arc::get_mut(&mut t.storage).is_some() {
        return t;
    }
    native_index::contiguous(&t).expect("a float tensor of rank 1 to 8 can be copied on the device")
}

impl OptimBackend for Ascend {
    fn adamw_step(
        state: AdamWTensors<Self>,
        grad: AscendTensor,
        step: u64,
        hyper: &AdamWHyper,
    ) -> Result<AdamWTensors<Self>> {
        const OP: &str = names::apply_adam_w_v2;
        let shape = state.var.shape.to_vec();
        validate_adamw(
            &shape,
            &state.m.shape.to_vec(),
            &state.v.shape.to_vec(),
            &grad.shape.to_vec(),
            step,
            hyper,
        )?;
        let device = same_device(OP, &[&state.var, &state.m, &state.v, &grad])?;
        let dt = state.var.dtype;
        let same = [&state.m, &state.v, &grad].iter().all(|t| t.dtype == dt);
        if !is_acl_float(dt) || !same || step >= 1 << 24 {
            count("adamw_step");
            return cpu_adamw_step::<Self>(state, grad, step, hyper);
        }
        let (var, m, v) = (owned(state.var), owned(state.m), owned(state.v));
        // The kernel adds 1 (module docs): `t − 1`, with `t ≥ 1` checked by the contract above.
        let s = step_tensor(&device, step - 1);
        launch([&var, &m, &v, &grad, &s], hyper)?;
        Ok(AdamWTensors { var, m, v })
    }
}

/// The `aclnnApplyAdamWV2` launch over `[var, m, v, grad, step]`, the first three updated in
/// place.
fn launch(ts: [&AscendTensor; 5], hyper: &AdamWHyper) -> Result<()> {
    const OP: &str = names::apply_adam_w_v2;
    let rt = runtime(&ts[0].device());
    let ds: Vec<_> = ts.iter().map(|t| t.desc(OP)).collect();
    let h: Vec<_> = ts.iter().zip(&ds).map(|(t, d)| t.handle(d, OP)).collect();
    aclnn::apply_adam_w_v2(
        &rt,
        &ApplyAdamWV2Args {
            var_ref: &h[0],
            m_ref: &h[1],
            v_ref: &h[2],
            max_grad_norm_optional_ref: None,
            grad: &h[3],
            step: &h[4],
            lr: hyper.lr,
            beta1: hyper.beta1,
            beta2: hyper.beta2,
            weight_decay: hyper.weight_decay,
            eps: hyper.eps,
            amsgrad: false,
            maximize: false,
        },
    )
    .map_err(|e| device_error(OP, e))
}

/// One AdamW step as **one** `aclnnApplyAdamWV2` launch that writes `var`, `m` and `v` in
/// place — their buffers, whoever else holds them (unlike [`OptimBackend::adamw_step`], which
/// copies a shared tensor first): what a captured training step records, so that every replay
/// updates the very buffers the next replay's forward reads. `step` is the kernel's 0-based
/// count `t − 1` as a one-element FLOAT32 device tensor (a graph input written per step);
/// nothing is uploaded or allocated. Refused (naming the parameter): shapes that differ,
/// dtypes other than one ACL float for all four, a tensor that is not contiguous over its
/// whole storage, tensors on several devices, a `step` of another shape or dtype; the
/// hyperparameters as the contract checks them.
pub fn adamw_step_in_place(
    var: &AscendTensor,
    m: &AscendTensor,
    v: &AscendTensor,
    grad: &AscendTensor,
    step: &AscendTensor,
    hyper: &AdamWHyper,
) -> Result<()> {
    const OP: &str = names::apply_adam_w_v2;
    validate_adamw(
        &var.shape.to_vec(),
        &m.shape.to_vec(),
        &v.shape.to_vec(),
        &grad.shape.to_vec(),
        1,
        hyper,
    )?;
    let device = var.device();
    if let Some(o) = [m, v, grad, step]
        .into_iter()
        .find(|t| t.device() != device)
    {
        return Err(AttnError::Unsupported(format!(
            "{OP}: tensors on different devices ({device} and {})",
            o.device()
        )));
    }
    let dt = var.dtype;
    if !is_acl_float(dt) || [m, v, grad].iter().any(|t| t.dtype != dt) {
        return Err(AttnError::invalid(
            "varRef",
            format!("in place: var, m, v and grad of one ACL float dtype, got {dt:?}"),
        ));
    }
    for (name, t) in [("varRef", var), ("mRef", m), ("vRef", v)] {
        let whole =
            t.offset == 0 && t.is_contiguous() && t.numel() * t.dtype.size() == t.storage.len();
        if !whole {
            return Err(AttnError::invalid(
                name,
                "in place: contiguous over its whole storage (a view would update bytes \
                 outside it)",
            ));
        }
    }
    if step.shape.to_vec() != [1] || step.dtype != burn_backend::DType::F32 {
        return Err(AttnError::invalid(
            "step",
            format!(
                "a one-element FLOAT32 tensor, got shape {:?} dtype {:?}",
                step.shape, step.dtype
            ),
        ));
    }
    launch([var, m, v, grad, step], hyper)
}
