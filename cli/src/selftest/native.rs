//! A representative set of the `Ascend` backend's native Burn ops (matmul, the MoE grouped
//! matmul, the AdamW step, softmax, elementwise and unary math, reductions,
//! index/gather/select, cat, casts, random fills), run by the backend harness on the device
//! against `NdArray` on the same values.

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::TensorCreationOptions;
use burn::tensor::{activation, DType, Distribution, Int, Tensor, TensorData, TensorPrimitive};

use super::backend_harness::{host, pair, reference, BackendCase};
use super::harness::Tolerance;
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::{AdamWHyper, AdamWTensors, OptimBackend};

type A = Ascend;
type N = NdArray;

fn ints<const D: usize, B: Backend>(t: Tensor<B, D, Int>) -> Vec<f32> {
    t.into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .unwrap_or_default()
        .into_iter()
        .map(|x| x as f32)
        .collect()
}

/// Mean and (population) variance.
fn moments(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var)
}

/// Draws for the random cases: the moments' standard errors are about 1/256.
const DRAWS: usize = 1 << 16;

fn random_moments(dev: &AscendDevice, dtype: DType, dist: Distribution) -> Vec<f32> {
    let opts = TensorCreationOptions::new(*dev).with_dtype(dtype);
    let t = Tensor::<A, 1>::random([DRAWS], dist, opts);
    let (m, v) = moments(&host(t));
    vec![m as f32, v as f32]
}

/// exp, tanh, sqrt(|x|) and sigmoid of `a`, one after the other: the same ops on either
/// backend.
fn unary_chain<B: Backend>(a: Tensor<B, 1>) -> Tensor<B, 1> {
    Tensor::cat(
        vec![
            a.clone().exp(),
            a.clone().tanh(),
            a.clone().abs().sqrt(),
            activation::sigmoid(a),
        ],
        0,
    )
}

/// The cases: `(op, name, tolerance, function)`.
pub fn cases() -> Vec<BackendCase> {
    vec![
        (
            "matmul",
            "batched_2x8x32_by_32x16",
            Tolerance::ACCUMULATING,
            |dev, dt| {
                let (a, n) = pair([2, 8, 32], 1, dev, dt);
                let (b, m) = pair([2, 32, 16], 2, dev, dt);
                (host(a.matmul(b)), reference(n.matmul(m)))
            },
        ),
        (
            "grouped_matmul",
            "moe_rows_3_0_5_by_3x16x8_with_bias",
            Tolerance::ACCUMULATING,
            |dev, dt| {
                // CANN's grouped matmul (`ffi::names::grouped_matmul_v4`, groupType 0), an empty
                // expert in the middle.
                let spec = burn_ascend::GroupedMatmulSpec::from_counts(&[3, 0, 5]);
                let (x, xn) = pair([8, 16], 31, dev, dt);
                let (w, wn) = pair([3, 16, 8], 32, dev, dt);
                let (b, bn) = pair([3, 8], 33, dev, dt);
                let got = burn_ascend::grouped_matmul(x, w, Some(b), &spec);
                let want = burn_ascend::grouped_matmul(xn, wn, Some(bn), &spec);
                match (got, want) {
                    (Ok(g), Ok(w)) => (host(g), reference(w)),
                    _ => (Vec::new(), vec![f32::NAN]),
                }
            },
        ),
        (
            "adamw_step",
            "f32_master_weights_4x8_steps_1_to_3",
            Tolerance::ELEMENTWISE,
            |dev, _dtype| {
                // CANN's AdamW (`ffi::names::apply_adam_w_v2`) with the step count as the kernel
                // reads it (it adds 1 before the bias corrections; backend-ascend/src/optim.rs):
                // a CANN that took the docs' `t` instead would differ from step 1 on. Training keeps f32 master weights and
                // moments, so the case is f32 under every dtype label.
                const H: AdamWHyper = AdamWHyper {
                    lr: 1e-2,
                    beta1: 0.9,
                    beta2: 0.99,
                    weight_decay: 0.1,
                    eps: 1e-6,
                };
                let (var, var_n) = pair([4, 8], 41, dev, DType::F32);
                let mut a = AdamWTensors::<A> {
                    var: var.into_primitive().tensor(),
                    m: Tensor::<A, 2>::zeros([4, 8], dev).into_primitive().tensor(),
                    v: Tensor::<A, 2>::zeros([4, 8], dev).into_primitive().tensor(),
                };
                let cpu = Default::default();
                let mut n = AdamWTensors::<N> {
                    var: var_n.into_primitive().tensor(),
                    m: Tensor::<N, 2>::zeros([4, 8], &cpu)
                        .into_primitive()
                        .tensor(),
                    v: Tensor::<N, 2>::zeros([4, 8], &cpu)
                        .into_primitive()
                        .tensor(),
                };
                for step in 1..=3u64 {
                    let (g, gn) = pair([4, 8], 41 + step as u32, dev, DType::F32);
                    let (Ok(x), Ok(y)) = (
                        A::adamw_step(a, g.into_primitive().tensor(), step, &H),
                        N::adamw_step(n, gn.into_primitive().tensor(), step, &H),
                    ) else {
                        return (Vec::new(), vec![f32::NAN]);
                    };
                    (a, n) = (x, y);
                }
                let got = [a.var, a.m, a.v]
                    .map(|t| Tensor::<A, 2>::from_primitive(TensorPrimitive::Float(t)));
                let want = [n.var, n.m, n.v]
                    .map(|t| Tensor::<N, 2>::from_primitive(TensorPrimitive::Float(t)));
                (
                    host(Tensor::cat(got.to_vec(), 0)),
                    reference(Tensor::cat(want.to_vec(), 0)),
                )
            },
        ),
        (
            "softmax",
            "last_dim_4x33",
            Tolerance::ACCUMULATING,
            |dev, dt| {
                let (a, n) = pair([4, 33], 3, dev, dt);
                (
                    host(activation::softmax(a, 1)),
                    reference(activation::softmax(n, 1)),
                )
            },
        ),
        (
            "add",
            "broadcast_3x4x5_plus_1x4x1",
            Tolerance::ELEMENTWISE,
            |dev, dt| {
                let (a, n) = pair([3, 4, 5], 4, dev, dt);
                let (b, m) = pair([1, 4, 1], 5, dev, dt);
                (host(a + b), reference(n + m))
            },
        ),
        (
            "mul-div",
            "transposed_view",
            Tolerance::ELEMENTWISE,
            |dev, dt| {
                let (a, n) = pair([6, 5], 6, dev, dt);
                let (b, m) = pair([5, 6], 7, dev, dt);
                let (bt, mt) = (b.transpose(), m.transpose());
                (
                    host(a.clone() * bt.clone() / (bt.abs() + 1.0)),
                    reference(n.clone() * mt.clone() / (mt.abs() + 1.0)),
                )
            },
        ),
        (
            "unary",
            "exp_tanh_sqrt_sigmoid",
            Tolerance::UNARY,
            |dev, dt| {
                let (a, n) = pair([64], 8, dev, dt);
                (host(unary_chain(a)), reference(unary_chain(n)))
            },
        ),
        ("activation", "gelu_relu", Tolerance::UNARY, |dev, dt| {
            let (a, n) = pair([64], 9, dev, dt);
            (
                host(Tensor::cat(
                    vec![activation::gelu(a.clone()), activation::relu(a)],
                    0,
                )),
                reference(Tensor::cat(
                    vec![activation::gelu(n.clone()), activation::relu(n)],
                    0,
                )),
            )
        }),
        (
            "reduce",
            "sum_mean_max_dim",
            Tolerance::ACCUMULATING,
            |dev, dt| {
                let (a, n) = pair([5, 7, 3], 10, dev, dt);
                (
                    host(Tensor::cat(
                        vec![a.clone().sum_dim(1), a.clone().mean_dim(1), a.max_dim(1)],
                        1,
                    )),
                    reference(Tensor::cat(
                        vec![n.clone().sum_dim(1), n.clone().mean_dim(1), n.max_dim(1)],
                        1,
                    )),
                )
            },
        ),
        ("argmax", "dim1", Tolerance::EXACT, |dev, dt| {
            // distinct values per row (no ties, whose winner is unspecified)
            let v: Vec<f32> = (0..24).map(|i| ((i * 7) % 24) as f32 / 8.0 - 1.5).collect();
            let d = TensorData::new(v, [4, 6]);
            let a = Tensor::<A, 2>::from_data(d.clone(), dev).cast(dt);
            let n = Tensor::<N, 2>::from_data(d, &Default::default());
            (ints(a.argmax(1)), ints(n.argmax(1)))
        }),
        (
            "select",
            "index_select_dim0",
            Tolerance::EXACT,
            |dev, dt| {
                let (a, n) = pair([5, 6], 11, dev, dt);
                let idx = TensorData::new(vec![4i64, 0, 2, 2], [4]);
                let (i, j) = (
                    Tensor::<A, 1, Int>::from_data(idx.clone(), dev),
                    Tensor::<N, 1, Int>::from_data(idx, &Default::default()),
                );
                (host(a.select(0, i)), reference(n.select(0, j)))
            },
        ),
        ("gather", "dim1", Tolerance::EXACT, |dev, dt| {
            let (a, n) = pair([3, 6], 12, dev, dt);
            let idx = TensorData::new(vec![5i64, 0, 1, 1, 2, 3, 4, 4, 0], [3, 3]);
            let (i, j) = (
                Tensor::<A, 2, Int>::from_data(idx.clone(), dev),
                Tensor::<N, 2, Int>::from_data(idx, &Default::default()),
            );
            (host(a.gather(1, i)), reference(n.gather(1, j)))
        }),
        ("cat", "dim1_three_inputs", Tolerance::EXACT, |dev, dt| {
            let (a, n) = pair([2, 3, 4], 13, dev, dt);
            let (b, m) = pair([2, 1, 4], 14, dev, dt);
            (
                host(Tensor::cat(vec![a.clone(), b, a], 1)),
                reference(Tensor::cat(vec![n.clone(), m, n], 1)),
            )
        }),
        (
            "cast",
            "round_trip_through_the_other_halves",
            Tolerance::EXACT,
            |dev, dt| {
                let (a, n) = pair([4, 9], 15, dev, dt);
                let other = if dt == DType::F16 {
                    DType::BF16
                } else {
                    DType::F16
                };
                (host(a.cast(other).cast(DType::F32)), reference(n))
            },
        ),
        (
            "random",
            "uniform_0_1_mean_var",
            Tolerance::MOMENT,
            |dev, dt| {
                (
                    random_moments(dev, dt, Distribution::Uniform(0.0, 1.0)),
                    vec![0.5, 1.0 / 12.0],
                )
            },
        ),
        (
            "random",
            "normal_0_1_mean_var",
            Tolerance::MOMENT,
            |dev, dt| {
                (
                    random_moments(dev, dt, Distribution::Normal(0.0, 1.0)),
                    vec![0.0, 1.0],
                )
            },
        ),
        (
            "random",
            "bernoulli_0.3_mean_var",
            Tolerance::MOMENT,
            |dev, dt| {
                (
                    random_moments(dev, dt, Distribution::Bernoulli(0.3)),
                    vec![0.3, 0.21],
                )
            },
        ),
    ]
}
