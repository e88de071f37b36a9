//! The fused AdamW step on `Ascend` (the simulation): one `aclnnApplyAdamWV2`
//! launch per call, in place over the tensors it owns alone, equal to the f64 reference;
//! shared tensors are left as they were; bad shapes are typed errors naming the aclnn
//! parameter.

use burn::tensor::TensorData;
use burn_ascend::backend::{Ascend, AscendDevice, AscendTensor};
use burn_ascend::cann::acl::names;
use burn_ascend::kernels::reference::optim as reference;
use burn_ascend::{AdamWHyper, AdamWTensors, OptimBackend};

const H: AdamWHyper = AdamWHyper {
    lr: 1e-2,
    beta1: 0.9,
    beta2: 0.99,
    weight_decay: 0.1,
    eps: 1e-6,
};

fn upload(v: &[f32], device: &AscendDevice) -> AscendTensor {
    AscendTensor::from_data(TensorData::new(v.to_vec(), [3, 5]), device)
}

fn host(t: &AscendTensor) -> Vec<f32> {
    t.to_data().convert::<f32>().to_vec::<f32>().unwrap()
}

fn values(seed: u64) -> Vec<f32> {
    (0..15)
        .map(|i| (((i * 7 + seed * 5) % 13) as f32 - 6.0) / 4.0)
        .collect()
}

#[test]
fn ascend_adamw_step_is_one_in_place_launch_equal_to_the_f64_reference() {
    let device = AscendDevice::sim();
    let var0 = values(1);
    let mut state = AdamWTensors::<Ascend> {
        var: upload(&var0, &device),
        m: upload(&[0.0; 15], &device),
        v: upload(&[0.0; 15], &device),
    };
    let mut r_var: Vec<f64> = var0.iter().map(|&x| x as f64).collect();
    let (mut r_m, mut r_v) = (vec![0.0f64; 15], vec![0.0f64; 15]);
    let launches = burn_ascend_acl_sim::launches(names::apply_adam_w_v2);
    for step in 1..=3u64 {
        let g = values(step + 3);
        let ptr = state.var.storage_ptr();
        state = Ascend::adamw_step(state, upload(&g, &device), step, &H).unwrap();
        assert_eq!(state.var.storage_ptr(), ptr, "step {step}: not in place");
        let g64: Vec<f64> = g.iter().map(|&x| x as f64).collect();
        reference::adamw(&mut r_var, &mut r_m, &mut r_v, &g64, step, &H);
    }
    assert_eq!(
        burn_ascend_acl_sim::launches(names::apply_adam_w_v2) - launches,
        3
    );
    for (name, got, want) in [
        ("var", host(&state.var), &r_var),
        ("m", host(&state.m), &r_m),
        ("v", host(&state.v), &r_v),
    ] {
        for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
            // The simulation computes in f64 and rounds once to f32.
            assert!(
                (*g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{name}[{i}]: {g} vs {w}"
            );
        }
    }
}

#[test]
fn ascend_adamw_step_leaves_a_shared_parameter_as_it_was() {
    let device = AscendDevice::sim();
    let var = upload(&values(2), &device);
    let alias = var.clone();
    let state = AdamWTensors::<Ascend> {
        var,
        m: upload(&[0.0; 15], &device),
        v: upload(&[0.0; 15], &device),
    };
    let out = Ascend::adamw_step(state, upload(&values(5), &device), 1, &H).unwrap();
    assert_ne!(out.var.storage_ptr(), alias.storage_ptr());
    assert_eq!(host(&alias), values(2));
    assert_ne!(host(&out.var), values(2));
}

#[test]
fn ascend_adamw_step_refuses_bad_shapes_and_steps_naming_the_aclnn_parameter() {
    let device = AscendDevice::sim();
    let state = || AdamWTensors::<Ascend> {
        var: upload(&values(1), &device),
        m: upload(&[0.0; 15], &device),
        v: upload(&[0.0; 15], &device),
    };
    let flat = AscendTensor::from_data(TensorData::new(values(1), [15]), &device);
    let mut bad_m = state();
    bad_m.m = flat.clone();
    let e = Ascend::adamw_step(bad_m, upload(&values(3), &device), 1, &H).unwrap_err();
    assert_eq!(e.param(), Some("mRef"), "{e}");
    let e = Ascend::adamw_step(state(), flat, 1, &H).unwrap_err();
    assert_eq!(e.param(), Some("grad"), "{e}");
    let e = Ascend::adamw_step(state(), upload(&values(3), &device), 0, &H).unwrap_err();
    assert_eq!(e.param(), Some("step"), "{e}");
    let bad = AdamWHyper { beta2: 1.0, ..H };
    let e = Ascend::adamw_step(state(), upload(&values(3), &device), 1, &bad).unwrap_err();
    assert_eq!(e.param(), Some("beta2"), "{e}");
}
