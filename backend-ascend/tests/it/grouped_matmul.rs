//! The grouped matmul on the simulation: `aclnnGroupedMatmulV4` runs (the simulation's launch
//! counter, this thread's) and gives the composite's numbers, forward and — under
//! `Autodiff<Ascend>` — backward; f64, which aclnn has no grouped matmul for, takes the counted
//! composite. The tests read the fallback counter, so they hold [`crate::exclusive`].
//!
//! Tolerances against `NdArray` (the composite, f32): f32 `1e-5` absolute (inputs in [-1, 1],
//! K ≤ 6; the simulation accumulates in f64 and rounds once); bf16 `3e-2` (two bf16 roundings
//! of the inputs and one of the output, |y| < 4).

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};
use burn_ascend_backend::{fallback_count, Ascend, AscendDevice};
use burn_ascend_ops::grouped_matmul::{grouped_matmul, grouped_matmul_k, GroupedMatmulSpec};

const GMM: &str = "aclnnGroupedMatmulV4";

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 500.0) - 1.0)
        .collect()
}

fn t<B: Backend, const D: usize>(
    v: &[f32],
    shape: [usize; D],
    dev: &B::Device,
    dt: DType,
) -> Tensor<B, D> {
    Tensor::<B, D>::from_data(TensorData::new(v.to_vec(), shape), dev).cast(dt)
}

fn host<B: Backend, const D: usize>(x: Tensor<B, D>) -> Vec<f32> {
    x.into_data().convert::<f32>().to_vec().unwrap()
}

fn gap(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// `(x, weight, bias)` values of a call over `counts`.
fn call(counts: &[usize], k: usize, n: usize) -> [Vec<f32>; 3] {
    let (g, m) = (counts.len(), counts.iter().sum::<usize>());
    [values(m * k, 1), values(g * k * n, 2), values(g * n, 3)]
}

fn run<B: burn_ascend_ops::GroupedMatmulBackend>(
    counts: &[usize],
    k: usize,
    n: usize,
    dev: &B::Device,
    dt: DType,
) -> Vec<f32> {
    let (g, m) = (counts.len(), counts.iter().sum::<usize>());
    let [x, w, b] = call(counts, k, n);
    host(
        grouped_matmul::<B>(
            t(&x, [m, k], dev, dt),
            t(&w, [g, k, n], dev, dt),
            Some(t(&b, [g, n], dev, dt)),
            &GroupedMatmulSpec::from_counts(counts),
        )
        .unwrap(),
    )
}

#[test]
fn grouped_matmul_on_the_simulation_runs_the_aclnn_op_and_equals_the_composite() {
    let _lock = crate::exclusive();
    let dev = AscendDevice::sim();
    let host_dev = Default::default();
    let fallbacks = fallback_count("grouped_matmul");
    for counts in [&[3usize, 0, 4][..], &[0, 0, 5, 0], &[6], &[1, 1, 0, 2]] {
        let want = run::<NdArray>(counts, 6, 5, &host_dev, DType::F32);
        let before = burn_ascend_acl_sim::launches(GMM);
        let got = run::<Ascend>(counts, 6, 5, &dev, DType::F32);
        assert_eq!(burn_ascend_acl_sim::launches(GMM) - before, 1, "{counts:?}");
        let d = gap(&got, &want);
        assert!(d <= 1e-5, "{counts:?} f32: gap {d}");
        // bf16: the bias goes to CANN as FLOAT32 (A2 / A3's table).
        let got = run::<Ascend>(counts, 6, 5, &dev, DType::BF16);
        let d = gap(&got, &want);
        assert!(d <= 3e-2, "{counts:?} bf16: gap {d}");
    }
    // groupType 2, x given row-major: the backend passes the transposed view the op wants.
    let counts = [2usize, 0, 3];
    let (x, w) = (values(4 * 5, 5), values(5 * 3, 6));
    let k_call = |dev: &_| {
        grouped_matmul_k::<Ascend>(
            t(&x, [4, 5], dev, DType::F32),
            t(&w, [5, 3], dev, DType::F32),
            &GroupedMatmulSpec::from_counts(&counts),
        )
        .unwrap()
    };
    let before = burn_ascend_acl_sim::launches(GMM);
    let got = host(k_call(&dev));
    assert_eq!(burn_ascend_acl_sim::launches(GMM) - before, 1);
    let want = host(
        grouped_matmul_k::<NdArray>(
            t(&x, [4, 5], &host_dev, DType::F32),
            t(&w, [5, 3], &host_dev, DType::F32),
            &GroupedMatmulSpec::from_counts(&counts),
        )
        .unwrap(),
    );
    let d = gap(&got, &want);
    assert!(d <= 1e-5, "groupType 2: gap {d}");
    assert_eq!(fallback_count("grouped_matmul"), fallbacks, "no fallback");
}

#[test]
fn grouped_matmul_backward_on_the_simulation_is_three_more_aclnn_calls_with_ndarrays_gradients() {
    let _lock = crate::exclusive();
    let counts = [2usize, 0, 3, 1];
    let (k, n) = (4, 3);
    let (g, m) = (counts.len(), counts.iter().sum::<usize>());
    let [x, w, b] = call(&counts, k, n);
    let probe = values(m * n, 9);
    fn grads<B: burn::tensor::backend::AutodiffBackend + burn_ascend_ops::GroupedMatmulBackend>(
        v: [&[f32]; 4],
        shape: (usize, usize, usize, usize),
        counts: &[usize],
        dev: &B::Device,
    ) -> [Vec<f32>; 3] {
        let (m, k, n, g) = shape;
        let x = t::<B, 2>(v[0], [m, k], dev, DType::F32).require_grad();
        let w = t::<B, 3>(v[1], [g, k, n], dev, DType::F32).require_grad();
        let b = t::<B, 2>(v[2], [g, n], dev, DType::F32).require_grad();
        let y = grouped_matmul::<B>(
            x.clone(),
            w.clone(),
            Some(b.clone()),
            &GroupedMatmulSpec::from_counts(counts),
        )
        .unwrap();
        let gr = (y * t::<B, 2>(v[3], [m, n], dev, DType::F32))
            .sum()
            .backward();
        [
            host(x.grad(&gr).unwrap()),
            host(w.grad(&gr).unwrap()),
            host(b.grad(&gr).unwrap()),
        ]
    }
    let v = [&x[..], &w[..], &b[..], &probe[..]];
    let want = grads::<Autodiff<NdArray>>(v, (m, k, n, g), &counts, &Default::default());
    let before = burn_ascend_acl_sim::launches(GMM);
    let fallbacks = fallback_count("grouped_matmul");
    let got = grads::<Autodiff<Ascend>>(v, (m, k, n, g), &counts, &AscendDevice::sim());
    assert_eq!(
        burn_ascend_acl_sim::launches(GMM) - before,
        4,
        "forward, dx, dW and dbias"
    );
    assert_eq!(fallback_count("grouped_matmul"), fallbacks);
    for (name, (a, e)) in ["x", "weight", "bias"].iter().zip(got.iter().zip(&want)) {
        let d = gap(a, e);
        assert!(d <= 1e-5, "d{name}: gap {d}");
    }
}

#[test]
fn f64_grouped_matmul_on_ascend_takes_the_counted_composite() {
    let _lock = crate::exclusive();
    let dev = AscendDevice::sim();
    let before = (
        fallback_count("grouped_matmul"),
        burn_ascend_acl_sim::launches(GMM),
    );
    let got = run::<Ascend>(&[2, 1], 3, 2, &dev, DType::F64);
    let want = run::<NdArray<f64>>(&[2, 1], 3, 2, &Default::default(), DType::F64);
    assert_eq!(
        (
            fallback_count("grouped_matmul"),
            burn_ascend_acl_sim::launches(GMM)
        ),
        (before.0 + 1, before.1)
    );
    assert!(gap(&got, &want) <= 1e-6);
}
