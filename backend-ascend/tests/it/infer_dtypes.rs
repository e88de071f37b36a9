//! The inference attention ops by dtype on `Ascend` (simulation, device 10): CANN's Atlas A2/A3
//! PFA, IFA, FIA and ScatterPaKvCache take no FLOAT (their `*_def.cpp`; the simulation refuses
//! it as CANN does), so an f32 call gives NdArray's f32 answer through the counted composite
//! on the native ops, while an f16 call is one aclnn launch (the scatter's after its slot
//! upload) with no composite and no host fallback. Tensor-valued inputs (prompt's mask and pse,
//! varlen's explicit mask) are made what the op takes on the device: no host upload per call.

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorData, Tolerance};
use burn_ascend_backend::collective::simulate_devices;
use burn_ascend_backend::{device_counters, fallback_counts, Ascend, AscendDevice, AscendKind};
use burn_ascend_ops::prompt::{PfaLayout, PromptMaskKind, PromptSpec};
use burn_ascend_ops::FiaKvFromTensors;
use burn_ascend_ops::IncreKvFromTensors;
use burn_ascend_ops::{
    fused_infer_attention, incre_flash_attention, prompt_flash_attention,
    prompt_flash_attention_with, scatter_pa_kv_cache, AttentionBackend, FiaKv, FiaSpec, IfaLayout,
    IncreKv, IncreSpec, ScatterSpec,
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

/// Prompt attention with a dense mask `[B, S, S]` (0/1 floats) and a pse `[1, N, S, S]` (f32,
/// the query f16) on `B`: the output as f32, with the launches and uploads `counters()` saw
/// across the call alone (its inputs made first).
fn prompt_with_mask_and_pse<B: AttentionBackend>(
    dt: FloatDType,
    dev: &B::Device,
    counters: impl Fn() -> (u64, u64),
) -> (Vec<f32>, (u64, u64)) {
    let (b, s, n, d) = (2, 5, 2, 64);
    let q4 = |seed| t::<B, 4>(b * s * n * d, seed, [b, s, n, d], dev).cast(dt);
    let (q, k, v) = (q4(1), q4(2), q4(3));
    // Column 0 never masked: no row is fully masked.
    let mask: Vec<f32> = (0..b * s * s)
        .map(|e| f32::from(u8::from(e % s != 0 && e % 3 == 1)))
        .collect();
    let mask = Tensor::<B, 3>::from_data(TensorData::new(mask, [b, s, s]), dev);
    let pse = t::<B, 4>(n * s * s, 5, [1, n, s, s], dev);
    let mut spec = PromptSpec::new(n, 0.125, PfaLayout::Bsnd);
    spec.sparse_mode = 1;
    spec.atten_mask = PromptMaskKind::Dense;
    let start = counters();
    let out = prompt_flash_attention_with(q, k, v, Some(mask), Some(pse), &spec).unwrap();
    let end = counters();
    let got = out
        .cast(FloatDType::F32)
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    (got, (end.0 - start.0, end.1 - start.1))
}

#[test]
fn prompt_with_a_dense_mask_and_pse_on_the_device_uploads_nothing_and_matches_ndarray() {
    let _lock = crate::exclusive();
    let d = dev();
    let counters = || {
        let c = device_counters(&d);
        (c.launches, c.uploads)
    };
    let (want, _) =
        prompt_with_mask_and_pse::<NdArray>(FloatDType::F32, &Default::default(), || (0, 0));
    let ((got, (launches, uploads)), moved) =
        counted(|| prompt_with_mask_and_pse::<Ascend>(FloatDType::F16, &d, counters));
    assert!(moved.is_empty(), "nothing fell back to the host: {moved:?}");
    // The mask compared with 0 into BOOL, the pse cast to f16, the PFA launch: all on the
    // device, nothing uploaded from the host (the mask and pse once were, every call).
    assert_eq!(uploads, 0, "no host upload");
    assert_eq!(launches, 3, "compare, cast, PFA");
    close(
        &got,
        &want,
        Tolerance::rel_abs(1e-2, 2e-3),
        "prompt mask+pse",
    );
}

/// The device inputs of [`varlen_call`]: an explicit mask, or ALiBi slopes with a dropout mask.
#[derive(Clone, Copy)]
enum VarlenExtra {
    Mask,
    SlopesAndDropout,
}

/// Varlen forward and backward on `B` through the trait, with an explicit mask `[maxSq,
/// maxSkv]` (0/1 floats, mode 0) or ALiBi slopes `[N]` (pseType 2) and the seeded dropout mask
/// (keepProb 0.8), all made on the device before the calls: (attentionOut, dq, dk, dv) as f32,
/// with the uploads `uploads()` saw across the second of two calls (the first may make the
/// runtime's constants).
fn varlen_call<B: AttentionBackend>(
    dev: &B::Device,
    extra: VarlenExtra,
    uploads: impl Fn() -> u64,
) -> (Vec<Vec<f32>>, u64) {
    use burn_ascend_ops::varlen::{MaskSpec, VarlenSpec};
    use burn_ascend_ops::{PseType, VarlenGradInputs, VarlenInputs};
    let (n, d, seq) = (2, 16, [3usize, 5]);
    let t = seq.iter().sum::<usize>();
    let prim = |v: Vec<f32>, s: &[usize]| B::float_from_data(TensorData::new(v, s.to_vec()), dev);
    let mut spec = VarlenSpec::from_lengths(&seq, &seq, n, 0.25);
    // Column 0 never masked: no row is fully masked.
    let mask: Vec<f32> = (0..25)
        .map(|e| f32::from(u8::from(e % 5 != 0 && e % 3 == 2)))
        .collect();
    match extra {
        VarlenExtra::Mask => {
            spec.atten_mask = MaskSpec::Dense;
            spec.attrs.pre_tokens = 4;
            spec.attrs.next_tokens = 1;
        }
        VarlenExtra::SlopesAndDropout => {
            spec.attrs.pse_type = PseType::InnerMulAdd;
            spec.attrs.keep_prob = 0.8;
        }
    }
    let inputs = || {
        let x = VarlenInputs::new(
            prim(values(t * n * d, 1), &[t, n, d]),
            prim(values(t * n * d, 2), &[t, n, d]),
            prim(values(t * n * d, 3), &[t, n, d]),
        );
        match extra {
            VarlenExtra::Mask => VarlenInputs {
                atten_mask: Some(prim(mask.clone(), &[5, 5])),
                ..x
            },
            VarlenExtra::SlopesAndDropout => VarlenInputs {
                alibi_slopes: Some(prim(vec![0.5, 0.125], &[n])),
                drop_mask: Some(
                    burn_ascend_ops::dropout_mask::<B>(&spec, 5, dev)
                        .unwrap()
                        .into_primitive()
                        .tensor(),
                ),
                ..x
            },
        }
    };
    let read = |x| {
        Tensor::<B, 3>::from_primitive(burn::tensor::TensorPrimitive::Float(x))
            .into_data()
            .to_vec::<f32>()
            .unwrap()
    };
    let mut last = (Vec::new(), 0);
    for _ in 0..2 {
        let (x, gx, dy) = (inputs(), inputs(), prim(values(t * n * d, 4), &[t, n, d]));
        let start = uploads();
        let out = B::varlen_fwd(x, &spec).unwrap();
        let g = B::varlen_bwd(
            VarlenGradInputs {
                inputs: gx,
                dy,
                attention_in: out.attention_out.clone(),
                softmax_max: out.softmax_max,
                softmax_sum: out.softmax_sum,
            },
            &spec,
        )
        .unwrap();
        let ran = uploads() - start;
        last = (
            vec![read(out.attention_out), read(g.dq), read(g.dk), read(g.dv)],
            ran,
        );
    }
    last
}

#[test]
fn varlen_with_an_explicit_mask_on_the_device_uploads_nothing_and_matches_ndarray() {
    varlen_uploads_nothing_and_matches_ndarray(VarlenExtra::Mask, "varlen mask");
}

/// The slopes are cast to FLOAT and the dropout mask's byte values to UINT8 on the device:
/// once both were uploaded from the spec's host copies at every call.
#[test]
fn varlen_with_alibi_slopes_and_a_dropout_mask_on_the_device_uploads_nothing_and_matches_ndarray() {
    varlen_uploads_nothing_and_matches_ndarray(
        VarlenExtra::SlopesAndDropout,
        "varlen slopes+dropout",
    );
}

fn varlen_uploads_nothing_and_matches_ndarray(extra: VarlenExtra, what: &str) {
    let _lock = crate::exclusive();
    let d = dev();
    let (want, _) = varlen_call::<NdArray>(&Default::default(), extra, || 0);
    let ((got, uploads), moved) =
        counted(|| varlen_call::<Ascend>(&d, extra, || device_counters(&d).uploads));
    assert!(
        moved.is_empty(),
        "{what}: nothing fell back to the host: {moved:?}"
    );
    // The caller's tensors are converted on the device (compared with 0, or cast).
    assert_eq!(uploads, 0, "{what}: no host upload");
    for (g, w) in got.iter().zip(&want) {
        close(g, w, Tolerance::rel_abs(1e-4, 1e-5), what);
    }
}
