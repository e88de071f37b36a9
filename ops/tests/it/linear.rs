//! The linear op: `NdArray`'s threaded kernel (f32) and the composite (f64) against a plain f64
//! triple loop written here, in both weight layouts, on contiguous and strided operands; its
//! `Autodiff` node's gradients against the same products (f32) and against central finite
//! differences (f64); a frozen weight gets no gradient; bad shapes are refused naming the
//! parameter.
//!
//! Tolerances: f32 against the f64 loop, `1e-5 · K` absolute (sums of K products of values in
//! [-1, 1], a few f32 ulps each); f64 gradients against central differences of step `1e-6`:
//! `|analytic − numeric| ≤ 1e-7` (the loss is linear in each input, so the difference is exact
//! up to rounding).

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

use burn_ascend_ops::{linear, AttnError, LinearBackend, WeightLayout};

type F32 = NdArray<f32>;
type F64 = NdArray<f64>;

/// Deterministic values in [-1, 1].
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

fn t<B: Backend, const D: usize>(v: &[f64], shape: [usize; D], dt: DType) -> Tensor<B, D> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), shape),
        (&Default::default(), dt),
    )
}

fn host<B: Backend, const D: usize>(x: Tensor<B, D>) -> Vec<f64> {
    x.into_data().convert::<f64>().to_vec().unwrap()
}

/// `a [m, k] · b [k, n]`, row-major, the plain loop.
fn product(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; a.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = a[r * cols + c];
        }
    }
    out
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let gap = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max);
    assert!(gap <= tol, "{what}: gap {gap} > {tol}");
}

/// The weight `w [k, n]` as a tensor in `layout` (`[n, k]` holds its transpose).
fn weight<B: Backend>(
    w: &[f64],
    k: usize,
    n: usize,
    layout: WeightLayout,
    dt: DType,
) -> Tensor<B, 2> {
    match layout {
        WeightLayout::InOut => t(w, [k, n], dt),
        WeightLayout::OutIn => t(&transpose(w, k, n), [n, k], dt),
    }
}

/// Shapes: one row (a decode step), rows > columns, columns > a band, a long head.
const SHAPES: [(usize, usize, usize); 4] = [(1, 24, 300), (70, 16, 12), (9, 40, 260), (2, 8, 1030)];

#[test]
fn linear_on_ndarray_equals_the_plain_product_in_both_layouts_with_and_without_bias() {
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let (x, w, b) = (
            values(m * k, i as u64),
            values(k * n, 10 + i as u64),
            values(n, 20),
        );
        let plain = product(&x, &w, m, k, n);
        let biased: Vec<f64> = plain
            .iter()
            .enumerate()
            .map(|(j, v)| v + b[j % n])
            .collect();
        for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
            for (bias, want) in [(None, &plain), (Some(&b), &biased)] {
                let y = linear::<F32, 2>(
                    t(&x, [m, k], DType::F32),
                    weight(&w, k, n, layout, DType::F32),
                    bias.map(|b| t(b, [n], DType::F32)),
                    layout,
                )
                .unwrap();
                let what = format!("{m}x{k}x{n} {layout:?} bias {}", bias.is_some());
                assert_close(&host(y), want, 1e-5 * k as f64, &what);
            }
        }
    }
}

#[test]
fn linear_reads_strided_operands_and_keeps_the_leading_dimensions() {
    let (m, k, n) = (6, 20, 140);
    let (x, w) = (values(m * k, 1), values(k * n, 2));
    let want = product(&x, &w, m, k, n);
    // x as the transpose of a row-major [k, m] array, split as [2, 3, k].
    let x_t = t::<F32, 2>(&transpose(&x, m, k), [k, m], DType::F32).transpose();
    let x3 = x_t.reshape([2, 3, k]);
    // The weight as a narrowed view (a gap after each row): the copied path.
    let wide: Vec<f64> = (0..k)
        .flat_map(|r| w[r * n..(r + 1) * n].iter().copied().chain([9.0, 9.0]))
        .collect();
    let w_view = t::<F32, 2>(&wide, [k, n + 2], DType::F32).narrow(1, 0, n);
    let y = linear::<F32, 3>(x3, w_view, None, WeightLayout::InOut).unwrap();
    assert_eq!(y.dims(), [2, 3, n]);
    assert_close(&host(y), &want, 1e-5 * k as f64, "strided operands");
}

/// `sum(y ⊙ probe)` for the linear op's `y`, with the gradients of x, the weight (in its
/// layout) and the bias.
fn loss_and_grads<B: burn::tensor::backend::AutodiffBackend + LinearBackend>(
    (x, w, b): (&[f64], &[f64], &[f64]),
    (m, k, n): (usize, usize, usize),
    probe: &[f64],
    layout: WeightLayout,
    dt: DType,
) -> (f64, [Vec<f64>; 3]) {
    let xt = t::<B, 2>(x, [m, k], dt).require_grad();
    let wt = weight::<B>(w, k, n, layout, dt).require_grad();
    let bt = t::<B, 1>(b, [n], dt).require_grad();
    let y = linear::<B, 2>(xt.clone(), wt.clone(), Some(bt.clone()), layout).unwrap();
    let loss = (y * t::<B, 2>(probe, [m, n], dt)).sum();
    let value = host(loss.clone())[0];
    let grads = loss.backward();
    let g = |x: Tensor<B, 2>| host(x.grad(&grads).unwrap());
    (value, [g(xt), g(wt), host(bt.grad(&grads).unwrap())])
}

#[test]
fn linear_gradients_on_ndarray_equal_the_plain_products_in_both_layouts() {
    for &(m, k, n) in &[(1, 24, 300), (70, 16, 12), (9, 40, 260)] {
        let (x, w, b, probe) = (
            values(m * k, 3),
            values(k * n, 4),
            values(n, 5),
            values(m * n, 6),
        );
        // d/dx = probe · Wᵀ, d/dW = xᵀ · probe (its transpose in [out, in]), d/db = column sums.
        let dx = product(&probe, &transpose(&w, k, n), m, n, k);
        let dw = product(&transpose(&x, m, k), &probe, k, m, n);
        let db: Vec<f64> = (0..n)
            .map(|j| (0..m).map(|i| probe[i * n + j]).sum())
            .collect();
        for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
            let (_, [gx, gw, gb]) = loss_and_grads::<Autodiff<F32>>(
                (&x, &w, &b),
                (m, k, n),
                &probe,
                layout,
                DType::F32,
            );
            let what = format!("{m}x{k}x{n} {layout:?}");
            assert_close(&gx, &dx, 1e-5 * n as f64, &format!("{what} dx"));
            let dw = match layout {
                WeightLayout::InOut => dw.clone(),
                WeightLayout::OutIn => transpose(&dw, k, n),
            };
            assert_close(&gw, &dw, 1e-5 * m as f64, &format!("{what} dW"));
            assert_close(&gb, &db, 1e-5 * m as f64, &format!("{what} db"));
        }
    }
}

#[test]
fn linear_gradients_equal_central_finite_differences_in_f64() {
    let (m, k, n) = (3, 4, 5);
    let inputs = [values(m * k, 7), values(k * n, 8), values(n, 9)];
    let probe = values(m * n, 10);
    for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
        let run = |v: &[Vec<f64>; 3]| {
            loss_and_grads::<Autodiff<F64>>(
                (&v[0], &v[1], &v[2]),
                (m, k, n),
                &probe,
                layout,
                DType::F64,
            )
        };
        let (_, grads) = run(&inputs);
        let h = 1e-6;
        for (which, grad) in grads.iter().enumerate() {
            for i in 0..inputs[which].len() {
                let mut up = inputs.clone();
                up[which][i] += h;
                let mut down = inputs.clone();
                down[which][i] -= h;
                let numeric = (run(&up).0 - run(&down).0) / (2.0 * h);
                // The gradient of the weight is in its layout; the probe moved `w [k, n]`.
                let analytic = match (which, layout) {
                    (1, WeightLayout::OutIn) => grad[(i % n) * k + i / n],
                    _ => grad[i],
                };
                assert!(
                    (analytic - numeric).abs() <= 1e-7,
                    "{layout:?} input {which} element {i}: {analytic} vs {numeric}"
                );
            }
        }
    }
}

#[test]
fn a_frozen_weight_gets_no_gradient_while_the_input_does() {
    type A = Autodiff<F32>;
    let (m, k, n) = (4, 8, 6);
    let x = t::<A, 2>(&values(m * k, 11), [m, k], DType::F32).require_grad();
    let w = t::<A, 2>(&values(k * n, 12), [k, n], DType::F32);
    let y = linear::<A, 2>(x.clone(), w.clone(), None, WeightLayout::InOut).unwrap();
    let grads = y.sum().backward();
    assert!(w.grad(&grads).is_none(), "a constant weight got a gradient");
    let gx = host(x.grad(&grads).unwrap());
    // d sum(x·W)/dx[i][p] = Σ_j W[p][j].
    let wv = values(k * n, 12);
    let want: Vec<f64> = (0..m * k)
        .map(|i| (0..n).map(|j| wv[(i % k) * n + j]).sum())
        .collect();
    assert_close(&gx, &want, 1e-5 * n as f64, "dx with a frozen weight");
}

#[test]
fn linear_refuses_mismatched_shapes_and_dtypes_naming_the_parameter() {
    let x = t::<F32, 2>(&values(6, 1), [2, 3], DType::F32);
    let param = |r: Result<Tensor<F32, 2>, AttnError>| match r {
        Err(AttnError::Invalid { param, .. }) => param,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let w = |shape: [usize; 2]| t::<F32, 2>(&values(shape[0] * shape[1], 2), shape, DType::F32);
    assert_eq!(
        param(linear(x.clone(), w([4, 5]), None, WeightLayout::InOut)),
        "weight"
    );
    assert_eq!(
        param(linear(x.clone(), w([3, 5]), None, WeightLayout::OutIn)),
        "weight"
    );
    let bias = t::<F32, 1>(&values(4, 3), [4], DType::F32);
    assert_eq!(
        param(linear(
            x.clone(),
            w([3, 5]),
            Some(bias),
            WeightLayout::InOut
        )),
        "bias"
    );
    let w64 = w([3, 5]).cast(DType::F64);
    assert_eq!(param(linear(x, w64, None, WeightLayout::InOut)), "weight");
}
