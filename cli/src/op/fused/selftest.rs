//! The fused transformer ops (one aclnn call each where the model would otherwise launch a
//! chain of elementwise ones) as training runs them: forward and backward under
//! `Autodiff<Ascend>` (RMSNorm, SwiGLU, rotary position embedding and softmax cross-entropy,
//! each a forward and a gradient call) against `Autodiff<NdArray>` on the same values. Each case returns the forward output and the input's
//! gradient of `sum(y · w)` for a fixed `w` (and `dgamma` for RMSNorm), so a wrong kernel
//! or a wrong argument in either direction fails it. The example model's training step checks
//! them together; these name the op that broke.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{DType, Int, Tensor, TensorData};

use crate::selftest::backend_harness::{data, host, pair, reference, BackendCase};
use crate::selftest::harness::Tolerance;
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::RotaryMode;

type A = Autodiff<Ascend>;
type N = Autodiff<NdArray>;

/// A constant weight of the loss `sum(y · w)` on both backends.
fn weight<const D: usize>(
    shape: [usize; D],
    seed: u32,
    dev: &AscendDevice,
    dtype: DType,
) -> (Tensor<A, D>, Tensor<N, D>) {
    let (a, n) = pair::<D>(shape, seed, dev, dtype);
    (Tensor::from_inner(a), Tensor::from_inner(n))
}

/// An input on both backends, tracked: a weight whose gradient the case checks.
fn tracked<const D: usize>(
    shape: [usize; D],
    seed: u32,
    dev: &AscendDevice,
    dtype: DType,
) -> (Tensor<A, D>, Tensor<N, D>) {
    let (a, n) = weight(shape, seed, dev, dtype);
    (a.require_grad(), n.require_grad())
}

/// `[y, dx…]` flattened, on the device and on the reference, or a failed
/// outcome when either side refused.
fn outcome<const D: usize, const E: usize>(
    got: burn_ascend::Result<Tensor<A, D>>,
    want: burn_ascend::Result<Tensor<N, D>>,
    (w, wn): (Tensor<A, D>, Tensor<N, D>),
    inputs: (Vec<Tensor<A, E>>, Vec<Tensor<N, E>>),
) -> (Vec<f32>, Vec<f32>) {
    let (Ok(y), Ok(yn)) = (got, want) else {
        return (Vec::new(), vec![f32::NAN]);
    };
    let g = (y.clone() * w).sum().backward();
    let gn = (yn.clone() * wn).sum().backward();
    let mut a = host(y.inner().flatten::<1>(0, D - 1));
    let mut n = reference(yn.inner().flatten::<1>(0, D - 1));
    for (x, xn) in inputs.0.iter().zip(&inputs.1) {
        match (x.grad(&g), xn.grad(&gn)) {
            (Some(dx), Some(dxn)) => {
                a.extend(host(dx.flatten::<1>(0, E - 1)));
                n.extend(reference(dxn.flatten::<1>(0, E - 1)));
            }
            _ => return (Vec::new(), vec![f32::NAN]),
        }
    }
    (a, n)
}

/// The cases: `(op, name, tolerance, function)`, run by the backend harness in f32, f16, bf16.
pub fn cases() -> Vec<BackendCase> {
    vec![
        (
            "rms_norm",
            "fwd_bwd_4x3x64_eps_1e-5",
            Tolerance::ACCUMULATING,
            |dev, dt| {
                let (x, xn) = tracked([4, 3, 64], 51, dev, dt);
                let (g, gn) = tracked([64], 52, dev, dt);
                let (w, wn) = weight([4, 3, 64], 53, dev, dt);
                let (Ok(y), Ok(yn)) = (
                    burn_ascend::rms_norm(x.clone(), g.clone(), 1e-5),
                    burn_ascend::rms_norm(xn.clone(), gn.clone(), 1e-5),
                ) else {
                    return (Vec::new(), vec![f32::NAN]);
                };
                let gr = (y.clone() * w).sum().backward();
                let grn = (yn.clone() * wn).sum().backward();
                let (Some(dx), Some(dxn), Some(dg), Some(dgn)) =
                    (x.grad(&gr), xn.grad(&grn), g.grad(&gr), gn.grad(&grn))
                else {
                    return (Vec::new(), vec![f32::NAN]);
                };
                let mut a = host(y.inner().flatten::<1>(0, 2));
                a.extend(host(dx.flatten::<1>(0, 2)));
                a.extend(host(dg));
                let mut n = reference(yn.inner().flatten::<1>(0, 2));
                n.extend(reference(dxn.flatten::<1>(0, 2)));
                n.extend(reference(dgn));
                (a, n)
            },
        ),
        (
            "swiglu",
            "fwd_bwd_6x2x96_dim_-1",
            Tolerance::ACCUMULATING,
            |dev, dt| {
                let (x, xn) = tracked([6, 2, 96], 61, dev, dt);
                let got = burn_ascend::swiglu(x.clone(), -1);
                let want = burn_ascend::swiglu(xn.clone(), -1);
                let w = weight([6, 2, 48], 62, dev, dt);
                outcome(got, want, w, (vec![x], vec![xn]))
            },
        ),
        (
            "rotary_embedding",
            "fwd_bwd_bsnd_2x5x3x64_half",
            Tolerance::ACCUMULATING,
            |dev, dt| {
                let (x, xn) = tracked([2, 5, 3, 64], 71, dev, dt);
                // Tables in [-1, 1) (multiples of 1/16), exact in every dtype.
                let table = |seed: u32| {
                    let d = data(&[1, 5, 1, 64], seed);
                    let v: Vec<f32> = d.to_vec::<f32>().unwrap_or_default();
                    TensorData::new(v.iter().map(|x| x / 2.0).collect(), [1, 5, 1, 64])
                };
                let (cos, sin) = (table(72), table(73));
                let c = Tensor::<A, 4>::from_data(cos.clone(), dev).cast(dt);
                let s = Tensor::<A, 4>::from_data(sin.clone(), dev).cast(dt);
                let cn = Tensor::<N, 4>::from_data(cos, &Default::default());
                let sn = Tensor::<N, 4>::from_data(sin, &Default::default());
                let got = burn_ascend::rotary_embedding(x.clone(), c, s, RotaryMode::Half);
                let want = burn_ascend::rotary_embedding(xn.clone(), cn, sn, RotaryMode::Half);
                let w = weight([2, 5, 3, 64], 74, dev, dt);
                outcome(got, want, w, (vec![x], vec![xn]))
            },
        ),
        (
            "cross_entropy",
            "fwd_bwd_7x33_mean",
            Tolerance::ACCUMULATING,
            |dev, dt| {
                let (x, xn) = tracked([7, 33], 81, dev, dt);
                let targets: Vec<i64> = (0..7).map(|i| (i * 5 + 2) % 33).collect();
                let t = Tensor::<A, 1, Int>::from_data(TensorData::new(targets.clone(), [7]), dev);
                let tn = Tensor::<N, 1, Int>::from_data(
                    TensorData::new(targets, [7]),
                    &Default::default(),
                );
                let got = burn_ascend::cross_entropy_loss(x.clone(), t);
                let want = burn_ascend::cross_entropy_loss(xn.clone(), tn);
                let w = weight([1], 82, dev, DType::F32);
                let w = (w.0.cast(dt), w.1);
                outcome(got, want, w, (vec![x], vec![xn]))
            },
        ),
    ]
}
