//! The inference attention ops by dtype on `Ascend` (simulation, device 10): CANN's Atlas A2/A3
//! PFA, IFA, FIA and ScatterPaKvCache take no FLOAT (their `*_def.cpp`; the simulation refuses
//! it as CANN does), so an f32 call gives NdArray's f32 answer through the counted composite
//! on the native ops, while an f16 call is one aclnn launch (the scatter's after its slot
//! upload) with no composite and no host fallback.

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorData, Tolerance};
use burn_ascend_backend::collective::simulate_devices;
use burn_ascend_backend::{device_counters, fallback_counts, Ascend, AscendDevice, AscendKind};
use burn_ascend_ops::prompt::{PfaLayout, PromptSpec};
use burn_ascend_ops::FiaKvFromTensors;
use burn_ascend_ops::IncreKvFromTensors;
use burn_ascend_ops::{
    fused_infer_attention, incre_flash_attention, prompt_flash_attention, scatter_pa_kv_cache,
    AttentionBackend, FiaKv, FiaSpec, IfaLayout, IncreKv, IncreSpec, ScatterSpec,
};

/// This suite's own simulated device: its launch counter is read before and after a call.
fn dev() -> AscendDevice {
    simulate_devices(11);
    AscendDevice {
        kind: AscendKind::Simulation,
        index: 10,
    }
}

/// f16-exact values below 1.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + seed * 13) % 29) as f32 / 32.0 - 0.4375)
        .collect()
}

fn t<B: Backend, const K: usize>(
    n: usize,
    seed: usize,
    s: [usize; K],
    dev: &B::Device,
) -> Tensor<B, K> {
    Tensor::from_data(TensorData::new(values(n, seed), s), dev)
}

/// One call of `op` (`prompt`, `incre`, `fia`, `scatter`) on `B` in `dt`, read back as f32,
/// with the launches `launches()` counted across the op alone (its inputs made first).
fn call<B: AttentionBackend>(
    op: &str,
    dt: FloatDType,
    dev: &B::Device,
    launches: impl Fn() -> u64,
) -> (Vec<f32>, u64) {
    let (b, s, n, d) = (2, 5, 2, 64);
    let q4 = |seed| t::<B, 4>(b * s * n * d, seed, [b, s, n, d], dev).cast(dt);
    let read = |x: Tensor<B, 4>| x.cast(FloatDType::F32).into_data().to_vec::<f32>().unwrap();
    let (q, k, v) = (q4(1), q4(2), q4(3));
    // scatter: key [T 3, N, D] into a contiguous cache [2 blocks, 16, N, D] (slots 3, 17, 0).
    let key = q.clone().reshape([b * s, n, d]).narrow(0, 0, 3);
    let cache = t::<B, 4>(2 * 16 * n * d, 4, [2, 16, n, d], dev).cast(dt);
    let q1 = q.clone().narrow(1, 0, 1);
    let start = launches();
    let out = match op {
        "prompt" => {
            let spec = PromptSpec::new(n, 0.125, PfaLayout::Bsnd);
            prompt_flash_attention(q, k, v, &spec).unwrap()
        }
        "incre" => {
            let spec = IncreSpec::new(n, 0.125, IfaLayout::Bsnd);
            incre_flash_attention(q1, IncreKv::contiguous(k, v), &spec).unwrap()
        }
        "fia" => {
            let spec = FiaSpec::new(n, 0.125, PfaLayout::Bsnd);
            fused_infer_attention::<B, 4, 4>(q, FiaKv::contiguous(k, v), None, &spec)
                .unwrap()
                .0
        }
        _ => {
            let spec = ScatterSpec::new(vec![3, 17, 0]);
            scatter_pa_kv_cache(key, None, cache, None, &spec)
                .unwrap()
                .0
        }
    };
    let ran = launches() - start;
    (read(out), ran)
}

/// The fallback counters that moved during `f`.
fn counted<R>(f: impl FnOnce() -> R) -> (R, Vec<&'static str>) {
    let before = fallback_counts();
    let got = f();
    let moved = fallback_counts()
        .into_iter()
        .filter(|(k, v)| before.get(k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    (got, moved)
}

fn close(got: &[f32], want: &[f32], tol: Tolerance<f32>, what: &str) {
    eprintln!("{what}");
    TensorData::new(got.to_vec(), [got.len()])
        .assert_approx_eq::<f32>(&TensorData::new(want.to_vec(), [want.len()]), tol);
}

#[test]
fn f32_inference_attention_runs_the_counted_composite_and_f16_is_one_aclnn_launch() {
    let _lock = crate::exclusive();
    let d = dev();
    let launches = || device_counters(&d).launches;
    for (op, composite) in [
        ("prompt", "prompt_composite"),
        ("incre", "incre_composite"),
        ("fia", "fia_composite"),
        ("scatter", "scatter_composite"),
    ] {
        let (want, _) = call::<NdArray>(op, FloatDType::F32, &Default::default(), || 0);
        // f32: CANN's op (and the simulation) refuses FLOAT, so an aclnn call could not have
        // succeeded; the composite on the native ops gives NdArray's f32 answer.
        let ((got, ran), moved) = counted(|| call::<Ascend>(op, FloatDType::F32, &d, launches));
        assert_eq!(moved, [composite], "{op} f32: the composite, counted");
        assert!(
            ran > 1,
            "{op} f32: the composite's native ops ({ran} launches)"
        );
        close(&got, &want, Tolerance::rel_abs(1e-5, 1e-6), op);
        // f16: the aclnn op itself, one launch, nothing counted.
        let ((got, ran), moved) = counted(|| call::<Ascend>(op, FloatDType::F16, &d, launches));
        assert!(moved.is_empty(), "{op} f16: {moved:?}");
        // The scatter uploads its host slotMapping first (a queued copy counts as a launch).
        let want_ran = if op == "scatter" { 2 } else { 1 };
        assert_eq!(ran, want_ran, "{op} f16: one aclnn launch");
        close(&got, &want, Tolerance::rel_abs(1e-2, 2e-3), op);
    }
}
