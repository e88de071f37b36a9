//! A representative set of the `Ascend` backend's native Burn ops (matmul, the MoE grouped matmul, the
//! AdamW step, softmax,
//! elementwise and unary math, reductions, index/gather/select, cat, casts, random fills) on
//! the device against `NdArray` on the same values. Inputs are multiples of 1/8 in [-2, 2),
//! exact in f32, f16 and bf16, so the reference sees the device's inputs exactly. A case also
//! fails when the backend's counted host fallback ran during it: the point is the aclnn path.

use std::time::Instant;

use burn::backend::NdArray;
use burn::tensor::TensorCreationOptions;
use burn::tensor::{activation, DType, Distribution, Int, Tensor, TensorData, TensorPrimitive};

use super::attention::{guarded, Tolerance};
use super::report::{CaseResult, Status};
use crate::{CliError, Device};
use burn_ascend::backend::{fallback_counts, Ascend, AscendDevice};
use burn_ascend::{AdamWHyper, AdamWTensors, OptimBackend};

type A = Ascend;
type N = NdArray;

/// The Burn device of an aclnn `Device`.
fn ascend(device: Device) -> Result<AscendDevice, CliError> {
    Ok(match device {
        Device::Npu => AscendDevice::npu(burn_ascend_cann::acl::default_device_id()? as u32),
        _ => AscendDevice::sim(),
    })
}

pub(super) fn data(shape: &[usize], seed: u32) -> TensorData {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            (x % 32) as f32 / 8.0 - 2.0
        })
        .collect();
    TensorData::new(v, shape.to_vec())
}

/// The same values on the device (in `dtype`) and on the reference (f32).
pub(super) fn pair<const D: usize>(
    shape: [usize; D],
    seed: u32,
    dev: &AscendDevice,
    dtype: DType,
) -> (Tensor<A, D>, Tensor<N, D>) {
    let d = data(&shape, seed);
    (
        Tensor::<A, D>::from_data(d.clone(), dev).cast(dtype),
        Tensor::<N, D>::from_data(d, &Default::default()),
    )
}

pub(super) fn host<const D: usize>(t: Tensor<A, D>) -> Vec<f32> {
    t.into_data()
        .convert_dtype(DType::F32)
        .to_vec::<f32>()
        .unwrap_or_default()
}

pub(super) fn reference<const D: usize>(t: Tensor<N, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap_or_default()
}

fn ints<const D: usize, B: burn::tensor::backend::Backend>(t: Tensor<B, D, Int>) -> Vec<f32> {
    t.into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .unwrap_or_default()
        .into_iter()
        .map(|x| x as f32)
        .collect()
}

/// `(device result, reference)` of one case, as f32.
type Outcome = (Vec<f32>, Vec<f32>);
pub(super) type CaseFn = fn(&AscendDevice, DType) -> Outcome;

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

/// The cases: `(op, name, tolerance, function)`.
fn cases() -> Vec<(&'static str, &'static str, Tolerance, CaseFn)> {
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
                // aclnnGroupedMatmulV4 (groupType 0), an empty expert in the middle.
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
                // aclnnApplyAdamWV2 with the step count as the kernel reads it (it adds 1 before
                // the bias corrections; backend-ascend/src/optim.rs): a CANN that took the docs'
                // `t` instead would differ from step 1 on. Training keeps f32 master weights and
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
                let f = |a: Tensor<A, 1>| {
                    Tensor::cat(
                        vec![
                            a.clone().exp(),
                            a.clone().tanh(),
                            a.clone().abs().sqrt(),
                            activation::sigmoid(a),
                        ],
                        0,
                    )
                };
                let g = |a: Tensor<N, 1>| {
                    Tensor::cat(
                        vec![
                            a.clone().exp(),
                            a.clone().tanh(),
                            a.clone().abs().sqrt(),
                            activation::sigmoid(a),
                        ],
                        0,
                    )
                };
                (host(f(a)), reference(g(n)))
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

/// Host fallback counts that moved between two snapshots.
fn moved(
    before: &std::collections::BTreeMap<&'static str, u64>,
    after: &std::collections::BTreeMap<&'static str, u64>,
) -> Vec<String> {
    after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, _)| (*k).to_string())
        .collect()
}

/// Every native case in f32, f16 and bf16.
pub fn run_all(device: Device) -> Vec<CaseResult> {
    let mut out = Vec::new();
    let dev = match ascend(device) {
        Ok(d) => d,
        Err(e) => {
            out.push(CaseResult {
                op: "native".into(),
                name: "open_device".into(),
                dtype: "-".into(),
                status: Status::Fail,
                max_abs_err: f64::NAN,
                tol: f64::NAN,
                ms: f64::NAN,
                note: Some(e.to_string()),
            });
            return out;
        }
    };
    for (dtype, dname) in [
        (DType::F32, "f32"),
        (DType::F16, "f16"),
        (DType::BF16, "bf16"),
    ] {
        for (op, name, tol, f) in cases().into_iter().chain(super::fused::cases()) {
            let mut res = CaseResult {
                op: op.into(),
                name: name.into(),
                dtype: dname.into(),
                status: Status::Fail,
                max_abs_err: f64::NAN,
                tol: f64::NAN,
                ms: f64::NAN,
                note: None,
            };
            let runs = if device == Device::Npu { 2 } else { 1 };
            let mut outcome = None;
            for i in 0..runs {
                let before = fallback_counts();
                let t0 = Instant::now();
                let r = guarded(|| Ok(f(&dev, dtype)));
                res.ms = t0.elapsed().as_secs_f64() * 1e3;
                let fell_back = moved(&before, &fallback_counts());
                if i == 0 {
                    outcome = Some((r, fell_back));
                }
            }
            let (r, fell_back) = outcome.expect("ran at least once");
            match r {
                Err(e) => res.note = Some(format!("device failed: {e}")),
                Ok((got, want)) => {
                    let rel = tol.of(match dtype {
                        DType::F16 => safetensors::Dtype::F16,
                        DType::BF16 => safetensors::Dtype::BF16,
                        _ => safetensors::Dtype::F32,
                    });
                    let scale = if op == "random" {
                        1.0
                    } else {
                        want.iter().fold(1.0f64, |m, &x| m.max(f64::from(x).abs()))
                    };
                    let t = rel * scale;
                    let err = if got.len() != want.len() {
                        f64::INFINITY
                    } else {
                        got.iter()
                            .zip(&want)
                            .map(|(&a, &b)| {
                                let e = (f64::from(a) - f64::from(b)).abs();
                                if e.is_nan() {
                                    f64::INFINITY
                                } else {
                                    e
                                }
                            })
                            .fold(0.0, f64::max)
                    };
                    res.max_abs_err = err;
                    res.tol = t;
                    if !fell_back.is_empty() {
                        res.note = Some(format!("host fallback ran: {}", fell_back.join(", ")));
                    } else if got.len() != want.len() {
                        res.note = Some(format!("{} values, reference {}", got.len(), want.len()));
                    } else if err > t {
                        res.note = Some(format!("max |got − ref| {err:.3e} > {t:.3e}"));
                    } else {
                        res.status = Status::Pass;
                    }
                }
            }
            out.push(res);
        }
    }
    out
}
