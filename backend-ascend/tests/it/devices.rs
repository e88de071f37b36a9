//! Device selection and faults: mixed-device tensors are refused with a message naming both
//! devices; a real NPU is exercised when present (otherwise the test says why it skipped).

use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_ascend_backend::fallback::Fallback;
use burn_ascend_backend::{is_available, Ascend, AscendDevice, AscendKind};

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let e = std::panic::catch_unwind(f).expect_err("should panic");
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn mixed_devices_are_rejected_with_both_names() {
    let _lock = crate::shared();
    let msg = panic_message(|| {
        let mut cx = Fallback::new("float_remainder");
        cx.on(AscendDevice::sim());
        cx.on(AscendDevice::npu(3));
    });
    assert!(
        msg.contains("float_remainder")
            && msg.contains("different devices")
            && msg.contains("ascend-sim:0")
            && msg.contains("npu:3"),
        "{msg}"
    );
}

#[test]
fn device_selection_from_the_environment_and_ids() {
    use burn::tensor::backend::DeviceOps;
    use burn_backend::Device;
    assert_eq!(AscendDevice::sim().kind, AscendKind::Simulation);
    let d = AscendDevice::npu(2);
    assert_eq!(AscendDevice::from_id(d.to_id()), d);
    assert_eq!(
        AscendDevice::from_id(AscendDevice::sim().id()),
        AscendDevice::sim()
    );
}

#[test]
fn a_missing_npu_is_a_clear_error() {
    let _lock = crate::shared();
    let d = AscendDevice::npu(0);
    match is_available(&d) {
        Ok(()) => eprintln!("an NPU is present: see real_npu_runs_the_native_ops"),
        Err(e) => assert!(e.contains("npu:0"), "{e}"),
    }
}

#[test]
fn real_npu_runs_the_native_ops() {
    let _lock = crate::shared();
    let d = AscendDevice::npu(burn_ascend_cann::acl::default_device_id().unwrap_or(0) as u32);
    if let Err(why) = is_available(&d) {
        eprintln!("skipped: no Ascend NPU here ({why})");
        return;
    }
    let a = TensorData::new(vec![1f32, 2., 3., 4., 5., 6.], [2, 3]);
    let b = TensorData::new(vec![1f32, 0., 0., 1., 1., 1.], [3, 2]);
    let x: Tensor<Ascend, 2> = Tensor::from_data(a.clone(), &d);
    let y: Tensor<Ascend, 2> = Tensor::from_data(b, &d);
    let z = (x.clone().matmul(y) + 1.0).exp().log() - 1.0;
    z.into_data().assert_approx_eq::<f32>(
        &TensorData::new(vec![4f32, 5., 10., 11.], [2, 2]),
        Tolerance::rel_abs(1e-4, 1e-4),
    );
}
