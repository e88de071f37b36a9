//! Incremental and fused inference attention take their mask, pse and antiquant scales as
//! tensors of the call (never host data of the spec): on `Ascend` (simulation, device 21) they stay on the device
//! — converted there to the dtypes the aclnn op takes — so a call copies nothing between host
//! and device either way and counts no host fallback, and it gives NdArray's answer.

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{FloatDType, Tensor, TensorData, Tolerance};
use burn_ascend_backend::collective::simulate_devices;
use burn_ascend_backend::{device_counters, fallback_counts, Ascend, AscendDevice, AscendKind};
use burn_ascend_ops::fia::FiaMask;
use burn_ascend_ops::{
    fused_infer_attention_with, incre_flash_attention_with, AttentionBackend, FiaInputs, FiaKv,
    FiaSpec, IfaLayout, IncreInputs, IncreKv, IncreSpec,
};
use burn_ascend_ops::{FiaKvFromTensors, IncreKvFromTensors};

/// This suite's own simulated device: its copy counters are read before and after a call.
fn dev() -> AscendDevice {
    simulate_devices(22);
    AscendDevice {
        kind: AscendKind::Simulation,
        index: 21,
    }
}

const B: usize = 2;
const N: usize = 2;
const S: usize = 8;
const D: usize = 64;

/// f16-exact values below 1.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + seed * 13) % 29) as f32 / 32.0 - 0.4375)
        .collect()
}

/// A tensor of `values` (or of `v`) in `dt` on `dev`.
fn t<Bk: Backend, const K: usize>(
    v: Vec<f32>,
    shape: [usize; K],
    dt: FloatDType,
    dev: &Bk::Device,
) -> Tensor<Bk, K> {
    Tensor::<Bk, K>::from_data(TensorData::new(v, shape), dev).cast(dt)
}

fn prim<Bk: Backend, const K: usize>(x: Tensor<Bk, K>) -> FloatTensor<Bk> {
    x.into_primitive().tensor()
}

/// int8 values (as floats), the mask (every 3rd column of batch 1 hidden, batch 0 open) and
/// the antiquant's scale / offset `[2, Nkv, D]` (row 0 the key's).
fn int8s(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 + seed * 11) % 255) as f32 - 127.0)
        .collect()
}

fn mask(rows: usize) -> Vec<f32> {
    (0..B * rows * S)
        .map(|e| f32::from(u8::from(e >= rows * S && e % 3 == 1)))
        .collect()
}

fn scales() -> (Vec<f32>, Vec<f32>) {
    let scale = (0..2 * N * D).map(|i| 0.01 + 0.0001 * (i % 50) as f32);
    let offset = (0..2 * N * D).map(|i| (i % 7) as f32 - 3.0);
    (scale.collect(), offset.collect())
}

/// IFA decode (BSND) with mask, pse and per-channel int8 antiquant: inputs and spec.
fn incre<Bk: AttentionBackend>(
    dt: FloatDType,
    dev: &Bk::Device,
) -> (IncreInputs<FloatTensor<Bk>>, IncreSpec) {
    let (scale, offset) = scales();
    let kv = |seed| t::<Bk, 4>(int8s(B * S * N * D, seed), [B, S, N, D], dt, dev);
    let mut x = IncreInputs::new(
        prim(t::<Bk, 4>(values(B * N * D, 1), [B, 1, N, D], dt, dev)),
        IncreKv::contiguous(kv(2), kv(3)),
    );
    x.atten_mask = Some(prim(t::<Bk, 2>(mask(1), [B, S], dt, dev)));
    x.pse_shift = Some(prim(t::<Bk, 4>(values(N * S, 4), [1, N, 1, S], dt, dev)));
    x.antiquant_scale = Some(prim(t::<Bk, 3>(scale, [2, N, D], FloatDType::F32, dev)));
    x.antiquant_offset = Some(prim(t::<Bk, 3>(offset, [2, N, D], FloatDType::F32, dev)));
    (x, IncreSpec::new(N, 0.125, IfaLayout::Bsnd))
}

/// FIA prefill (BSND, Q_S = 4) with a dense mask, pse and the combined per-channel int8
/// antiquant: inputs and spec.
fn fia<Bk: AttentionBackend>(
    dt: FloatDType,
    dev: &Bk::Device,
) -> (FiaInputs<FloatTensor<Bk>>, FiaSpec) {
    let (scale, offset) = scales();
    let qs = 4;
    let kv = |seed| t::<Bk, 4>(int8s(B * S * N * D, seed), [B, S, N, D], dt, dev);
    let mut x = FiaInputs::new(
        prim(t::<Bk, 4>(
            values(B * qs * N * D, 5),
            [B, qs, N, D],
            dt,
            dev,
        )),
        FiaKv::contiguous(kv(6), kv(7)),
        None,
    );
    x.atten_mask = Some(prim(t::<Bk, 3>(mask(qs), [B, qs, S], dt, dev)));
    x.pse_shift = Some(prim(t::<Bk, 4>(
        values(N * qs * S, 8),
        [1, N, qs, S],
        dt,
        dev,
    )));
    x.antiquant_scale = Some(prim(t::<Bk, 3>(scale, [2, N, D], FloatDType::F32, dev)));
    x.antiquant_offset = Some(prim(t::<Bk, 3>(offset, [2, N, D], FloatDType::F32, dev)));
    let mut spec = FiaSpec::new(N, 0.125, burn_ascend_ops::PfaLayout::Bsnd);
    spec.atten_mask = FiaMask::Dense;
    (x, spec)
}

fn run_incre<Bk: AttentionBackend>(
    x: IncreInputs<FloatTensor<Bk>>,
    spec: &IncreSpec,
) -> Tensor<Bk, 4> {
    incre_flash_attention_with(x, spec).unwrap()
}

fn run_fia<Bk: AttentionBackend>(x: FiaInputs<FloatTensor<Bk>>, spec: &FiaSpec) -> Tensor<Bk, 4> {
    fused_infer_attention_with::<Bk, 4, 4>(x, spec).unwrap().0
}

fn read<Bk: Backend>(out: Tensor<Bk, 4>) -> Vec<f32> {
    out.cast(FloatDType::F32).into_data().to_vec().unwrap()
}

/// What one call on the device adds, its inputs made before: host→device and device→host
/// bytes, and the fallback counters that moved.
struct Added {
    h2d: u64,
    d2h: u64,
    fallbacks: Vec<&'static str>,
}

fn added<R>(call: impl FnOnce() -> R) -> (R, Added) {
    let d = dev();
    let (before, counts) = (device_counters(&d), fallback_counts());
    let r = call();
    let after = device_counters(&d);
    let added = Added {
        h2d: after.h2d_bytes - before.h2d_bytes,
        d2h: after.d2h_bytes - before.d2h_bytes,
        fallbacks: fallback_counts()
            .into_iter()
            .filter(|(k, v)| counts.get(k) != Some(v))
            .map(|(k, _)| k)
            .collect(),
    };
    (r, added)
}

#[test]
fn incremental_and_fused_attention_keep_mask_pse_and_antiquant_on_the_device() {
    let _lock = crate::exclusive();
    let d = dev();
    let tol = Tolerance::rel_abs(1e-2, 2e-3);
    let nd = Default::default();
    let (x, spec) = incre::<NdArray>(FloatDType::F32, &nd);
    let want = read(run_incre::<NdArray>(x, &spec));
    // The first call makes the runtime's shared constants; the second is measured.
    let (x, spec) = incre::<Ascend>(FloatDType::F16, &d);
    run_incre::<Ascend>(x, &spec);
    let ((x, spec), made) = added(|| incre::<Ascend>(FloatDType::F16, &d));
    // The counter sees copies: making the inputs uploaded them.
    assert!(made.h2d > 0, "the inputs' uploads are counted");
    let (out, a) = added(|| run_incre::<Ascend>(x, &spec));
    assert!(
        a.fallbacks.is_empty(),
        "incre: no host fallback, {:?}",
        a.fallbacks
    );
    assert_eq!(
        (a.h2d, a.d2h),
        (0, 0),
        "incre: no copy between host and device"
    );
    TensorData::new(read(out), [want.len()])
        .assert_approx_eq::<f32>(&TensorData::new(want, [B * N * D]), tol);

    let (x, spec) = fia::<NdArray>(FloatDType::F32, &nd);
    let want = read(run_fia::<NdArray>(x, &spec));
    let (x, spec) = fia::<Ascend>(FloatDType::F16, &d);
    run_fia::<Ascend>(x, &spec);
    let (x, spec) = fia::<Ascend>(FloatDType::F16, &d);
    let (out, a) = added(|| run_fia::<Ascend>(x, &spec));
    assert!(
        a.fallbacks.is_empty(),
        "fia: no host fallback, {:?}",
        a.fallbacks
    );
    assert_eq!(
        (a.h2d, a.d2h),
        (0, 0),
        "fia: no copy between host and device"
    );
    let n = want.len();
    TensorData::new(read(out), [n]).assert_approx_eq::<f32>(&TensorData::new(want, [n]), tol);
}

#[test]
fn the_f32_composites_read_mask_pse_and_antiquant_as_device_tensors_without_host_fallback() {
    let _lock = crate::exclusive();
    let d = dev();
    let tol = Tolerance::rel_abs(1e-4, 1e-5);
    let nd = Default::default();
    // f32: CANN's ops take no FLOAT query, so the composite runs on the native ops (counted
    // under its own name) — and nothing else falls back to the host.
    let (x, spec) = incre::<NdArray>(FloatDType::F32, &nd);
    let want = read(run_incre::<NdArray>(x, &spec));
    let (x, spec) = incre::<Ascend>(FloatDType::F32, &d);
    let (out, a) = added(|| run_incre::<Ascend>(x, &spec));
    assert_eq!(a.fallbacks, ["incre_composite"], "incre f32");
    let n = want.len();
    TensorData::new(read(out), [n]).assert_approx_eq::<f32>(&TensorData::new(want, [n]), tol);

    let (x, spec) = fia::<NdArray>(FloatDType::F32, &nd);
    let want = read(run_fia::<NdArray>(x, &spec));
    let (x, spec) = fia::<Ascend>(FloatDType::F32, &d);
    let (out, a) = added(|| run_fia::<Ascend>(x, &spec));
    assert_eq!(a.fallbacks, ["fia_composite"], "fia f32");
    let n = want.len();
    TensorData::new(read(out), [n]).assert_approx_eq::<f32>(&TensorData::new(want, [n]), tol);
}
