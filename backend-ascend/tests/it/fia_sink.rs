//! F16 and BF16 models through FIA with a `learnableSink` on `Ascend` (simulation), in every
//! layout and on both CANN sink rules (its dtype follows the path and the release): the backend sends the sink — f32 values in the
//! spec, whatever the model keeps it in — in the dtype the path reads on the release the
//! device reports (BFLOAT16 on FIA v3, the query's on 9.x's TND split-fuse path), the
//! simulation (which refuses any other, as CANN does) runs it, and the output matches the
//! reference with the sink rounded to that dtype. Serving through the paged cache does the same.

use burn::tensor::{DType, Tensor, TensorData};
use burn_ascend_ops::FiaKvFromTensors;
use half::{bf16, f16};

use burn_ascend_acl_sim as sim;
use burn_ascend_backend::{fallback_count, Ascend, AscendDevice};
use burn_ascend_cann::acl::DataType;
use burn_ascend_contract::fia::{
    CannRelease, FiaHostValues, FiaKvShapes, FiaShapes, FiaSpec, PfaLayout,
};
use burn_ascend_kernels::reference::fia::fused_infer_attention as reference;
use burn_ascend_ops::{fused_infer_attention, AttendOptions, AttendPath, FiaKv, PagedKvCache};

/// Not representable in BF16 or F16, so the sent dtype rounds them.
const SINKS: [f32; 2] = [0.3137, -0.6543];

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            ((x >> 7) % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// `v` rounded to `dt` and back.
fn round(v: &[f32], dt: DataType) -> Vec<f32> {
    v.iter()
        .map(|&x| match dt {
            DataType::Float16 => f16::from_f32(x).to_f32(),
            DataType::Bf16 => bf16::from_f32(x).to_f32(),
            _ => x,
        })
        .collect()
}

fn burn_dtype(dt: DataType) -> DType {
    match dt {
        DataType::Float16 => DType::F16,
        DataType::Bf16 => DType::BF16,
        _ => DType::F32,
    }
}

fn shape(layout: PfaLayout, s: usize, n: usize, d: usize) -> Vec<usize> {
    match layout {
        PfaLayout::Bsh => vec![1, s, n * d],
        PfaLayout::Bsnd => vec![1, s, n, d],
        PfaLayout::Bnsd | PfaLayout::BnsdBsnd => vec![1, n, s, d],
        PfaLayout::Tnd => vec![s, n, d],
    }
}

fn tensor<const R: usize>(v: &[f32], shape: &[usize], dt: DataType) -> Tensor<Ascend, R> {
    let dims: [usize; R] = shape.try_into().unwrap();
    Tensor::<Ascend, R>::from_data(TensorData::new(v.to_vec(), dims), &AscendDevice::sim())
        .cast(burn_dtype(dt))
}

/// One FIA call (S 5, N 2, MHA, head dim `d`) in `layout` with a query of `q`, on the
/// simulation pretending to be `release`: the sink dtype the simulation received, and the
/// largest difference from the reference run with the sink rounded to that dtype.
fn run<const R: usize>(
    release: CannRelease,
    layout: PfaLayout,
    d: usize,
    q: DataType,
) -> (Option<DataType>, f64) {
    let (s, n) = (5usize, 2usize);
    let sh = shape(layout, s, n, d);
    let len: usize = sh.iter().product();
    let (qv, kv, vv) = (
        round(&values(len, 1), q),
        round(&values(len, 2), q),
        round(&values(len, 3), q),
    );
    let mut spec = FiaSpec::new(n, 1.0 / (d as f64).sqrt(), layout);
    // The model's sinks: an f32 tensor on the device, cast there to the path's dtype.
    let sinks =
        Tensor::<Ascend, 1>::from_data(TensorData::new(SINKS.to_vec(), [n]), &AscendDevice::sim());
    if layout == PfaLayout::Tnd {
        spec.actual_seq_lengths = Some(vec![2, 5]);
        spec.actual_seq_lengths_kv = Some(vec![2, 5]);
    }
    sim::set_cann_release(Some(release));
    let before = fallback_count("fia_fwd");
    let (out, _) = fused_infer_attention::<Ascend, R, 4>(
        tensor::<R>(&qv, &sh, q),
        FiaKv::contiguous(tensor::<R>(&kv, &sh, q), tensor::<R>(&vv, &sh, q)),
        Some(sinks),
        &spec,
    )
    .unwrap_or_else(|e| panic!("{release:?} {layout:?} D {d} {q:?}: {e}"));
    assert_eq!(fallback_count("fia_fwd"), before, "ran on the device");
    let sent = sim::last_learnable_sink_dtype();
    sim::set_cann_release(None);
    assert_eq!(out.dtype(), burn_dtype(q));
    let got: Vec<f32> = out.cast(DType::F32).into_data().to_vec().unwrap();
    let want_sinks = round(&SINKS, sent.unwrap_or(DataType::Float));
    let dims = spec
        .validate(&FiaShapes::new(
            sh.clone(),
            FiaKvShapes::Contiguous {
                key: sh.clone(),
                value: sh,
            },
            false,
            Some(vec![n]),
        ))
        .unwrap();
    let host = FiaHostValues {
        learnable_sink: Some(&want_sinks),
        ..Default::default()
    };
    let want = reference(&spec.args(&dims, &qv, &kv, &vv, host)).attention_out;
    assert_eq!(got.len(), want.len());
    let err = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (f64::from(g) - w).abs())
        .fold(0.0, f64::max);
    (sent, err)
}

/// The table (CANN's answers, written out): BFLOAT16 everywhere on 8.5 and outside 9.x's TND
/// split-fuse path; on 9.x, TND with equal head dims takes the query's.
fn expected(release: CannRelease, layout: PfaLayout, q: DataType) -> DataType {
    match (release, layout) {
        (r, PfaLayout::Tnd) if r.fia_sink_per_path() => q,
        _ => DataType::Bf16,
    }
}

#[test]
fn f16_and_bf16_models_serve_through_fia_in_every_layout_with_the_sink_in_the_tables_dtype() {
    let _g = crate::shared();
    for release in CannRelease::KNOWN {
        for q in [DataType::Float16, DataType::Bf16] {
            // Output rounding of the query's dtype, on values below 1.
            let tol = if q == DataType::Bf16 { 8e-3 } else { 1e-3 };
            for layout in [
                PfaLayout::Bsh,
                PfaLayout::Bsnd,
                PfaLayout::Bnsd,
                PfaLayout::BnsdBsnd,
                PfaLayout::Tnd,
            ] {
                for d in [64, 128] {
                    let (sent, err) = match layout {
                        PfaLayout::Bsh | PfaLayout::Tnd => run::<3>(release, layout, d, q),
                        _ => run::<4>(release, layout, d, q),
                    };
                    let what = format!("{release:?} {layout:?} D {d} {q:?}");
                    assert_eq!(sent, Some(expected(release, layout, q)), "{what}");
                    assert!(err <= tol, "{what}: max err {err:.3e} > {tol:.0e}");
                }
            }
        }
    }
}

/// CANN's FIA takes no FLOAT query (nor does the simulation): an f32 call runs the counted
/// composite on the native ops with the model's f32 sink, and nothing reaches aclnn's FIA.
#[test]
fn an_f32_query_runs_the_counted_composite_with_its_f32_sink() {
    let _g = crate::shared();
    let before = fallback_count("fia_composite");
    let (sent, err) = run::<4>(CannRelease::V8_5_0, PfaLayout::Bsnd, 64, DataType::Float);
    assert_eq!(sent, None, "no FIA call reached the simulation");
    assert!(fallback_count("fia_composite") > before, "counted");
    assert!(err < 1e-5, "{err}");
}

#[test]
fn paged_serving_of_f16_and_bf16_caches_sends_a_bf16_sink_on_every_release() {
    let _g = crate::shared();
    let dev = AscendDevice::sim();
    let (n, nkv, d, bs) = (2usize, 1usize, 64usize, 16usize);
    for release in CannRelease::KNOWN {
        for q in [DataType::Float16, DataType::Bf16] {
            sim::set_cann_release(Some(release));
            let mut cache = PagedKvCache::<Ascend>::new(4, bs, n, nkv, d, 0.125, &dev)
                .and_then(|c| c.with_dtype(burn_dtype(q)))
                .unwrap();
            let cast = |t: Tensor<Ascend, 3>| t.cast(burn_dtype(q));
            let opts = AttendOptions {
                window: None,
                sinks: Some(Tensor::from_data(
                    TensorData::new(SINKS.to_vec(), [SINKS.len()]),
                    &dev,
                )),
                path: AttendPath::Fused,
            };
            let id = cache.add_sequence();
            let kv = |seed| {
                Tensor::<Ascend, 3>::from_data(
                    TensorData::new(values(3 * nkv * d, seed), [3, nkv, d]),
                    &dev,
                )
            };
            cache.append(id, cast(kv(1)), cast(kv(2))).unwrap();
            let query = Tensor::<Ascend, 4>::from_data(
                TensorData::new(values(n * d, 3), [1, 1, n, d]),
                &dev,
            )
            .cast(burn_dtype(q));
            let before = fallback_count("fia_fwd");
            let out = cache.attend_with(&[id], query, &opts).unwrap();
            assert_eq!(fallback_count("fia_fwd"), before, "ran on the device");
            assert_eq!(out.dtype(), burn_dtype(q));
            let what = format!("{release:?} {q:?}");
            // BSND paged decode: FIA v3, BFLOAT16 on every release.
            assert_eq!(
                sim::last_learnable_sink_dtype(),
                Some(DataType::Bf16),
                "{what}"
            );
            let v: Vec<f32> = out.cast(DType::F32).into_data().to_vec().unwrap();
            assert!(v.iter().all(|x| x.is_finite()), "{what}");
            sim::set_cann_release(None);
        }
    }
}
