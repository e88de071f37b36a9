//! The elementwise ops made native on the device (comparisons, masks, bool logic, casts, max/min
//! reductions, activations, unary math, pow/clamp by a scalar, random fills) on `Ascend` (the
//! host simulation) against `NdArray`, each check also asserting that the op's host-fallback
//! count did not move, i.e. the aclnn path ran. Operands include transposed (strided) views,
//! broadcast shapes and f16.
//!
//! Tolerances: f32 results `rel_abs(1e-5, 1e-5)` (the simulation computes in f64 and rounds
//! once; NdArray in f32); f16 results against NdArray's f32 `rel_abs(2e-3, 2e-3)` (one f16
//! rounding); exact equality for bool, int and index results.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::Backend;
use burn::tensor::{activation, DType, Distribution, Int, Tensor, TensorData, Tolerance};
use burn_ascend_backend::{fallback_count, Ascend, AscendDevice};

type A = Ascend;
type N = NdArray;

fn dev() -> AscendDevice {
    AscendDevice::sim()
}

fn data(shape: &[usize], seed: u32) -> TensorData {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            // multiples of 1/8 in [-2, 2): exact in f16, with ties for max/min and equality
            (x % 32) as f32 / 8.0 - 2.0
        })
        .collect();
    TensorData::new(v, shape.to_vec())
}

fn both<const D: usize>(shape: [usize; D], seed: u32) -> (Tensor<A, D>, Tensor<N, D>) {
    let d = data(&shape, seed);
    (
        Tensor::from_data(d.clone(), &dev()),
        Tensor::from_data(d, &Default::default()),
    )
}

fn both_int<const D: usize>(
    shape: [usize; D],
    seed: u32,
) -> (Tensor<A, D, Int>, Tensor<N, D, Int>) {
    let d = data(&shape, seed).convert::<f32>();
    let v: Vec<i64> = d
        .to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(|x| (x * 4.0) as i64)
        .collect();
    let d = TensorData::new(v, shape.to_vec());
    (
        Tensor::from_data(d.clone(), &dev()),
        Tensor::from_data(d, &Default::default()),
    )
}

fn close<const D: usize, B1: Backend, B2: Backend>(a: Tensor<B1, D>, b: Tensor<B2, D>) {
    a.into_data()
        .assert_approx_eq::<f32>(&b.into_data(), Tolerance::rel_abs(1e-5, 1e-5));
}

fn close_f16<const D: usize, B2: Backend>(a: Tensor<A, D>, b: Tensor<B2, D>) {
    assert_eq!(a.dtype(), DType::F16);
    a.into_data()
        .convert_dtype(DType::F32)
        .assert_approx_eq::<f32>(&b.into_data(), Tolerance::rel_abs(2e-3, 2e-3));
}

fn same<const D: usize, K, B1: Backend, B2: Backend>(a: Tensor<B1, D, K>, b: Tensor<B2, D, K>)
where
    K: burn::tensor::BasicOps<B1> + burn::tensor::BasicOps<B2>,
{
    assert_eq!(a.into_data(), b.into_data());
}

/// Runs `f` and asserts none of `names` went through the host fallback meanwhile.
fn native<R>(names: &[&str], f: impl FnOnce() -> R) -> R {
    let before: Vec<u64> = names.iter().map(|n| fallback_count(n)).collect();
    let r = f();
    let after: Vec<u64> = names.iter().map(|n| fallback_count(n)).collect();
    assert_eq!(before, after, "host fallback ran for one of {names:?}");
    r
}

#[test]
fn float_comparisons_broadcast_and_read_views() {
    let _lock = crate::exclusive();
    let names = [
        "float_equal",
        "float_not_equal",
        "float_greater",
        "float_greater_equal",
        "float_lower",
        "float_lower_equal",
        "float_equal_elem",
        "float_not_equal_elem",
        "float_greater_elem",
        "float_greater_equal_elem",
        "float_lower_elem",
        "float_lower_equal_elem",
    ];
    native(&names, || {
        let (a, n) = both([3, 4, 5], 1);
        let (b, m) = both([1, 5, 1], 2);
        // a transposed view against a broadcast operand
        let (at, nt) = (a.clone().swap_dims(1, 2), n.clone().swap_dims(1, 2));
        same(at.clone().equal(b.clone()), nt.clone().equal(m.clone()));
        same(
            at.clone().not_equal(b.clone()),
            nt.clone().not_equal(m.clone()),
        );
        same(at.clone().greater(b.clone()), nt.clone().greater(m.clone()));
        same(
            at.clone().greater_equal(b.clone()),
            nt.clone().greater_equal(m.clone()),
        );
        same(at.clone().lower(b.clone()), nt.clone().lower(m.clone()));
        same(
            at.clone().lower_equal(b.clone()),
            nt.clone().lower_equal(m.clone()),
        );
        same(at.clone().equal_elem(0.5), nt.clone().equal_elem(0.5));
        same(
            at.clone().not_equal_elem(0.5),
            nt.clone().not_equal_elem(0.5),
        );
        same(at.clone().greater_elem(0.25), nt.clone().greater_elem(0.25));
        same(
            at.clone().greater_equal_elem(0.25),
            nt.clone().greater_equal_elem(0.25),
        );
        same(at.clone().lower_elem(-1.0), nt.clone().lower_elem(-1.0));
        same(
            at.clone().lower_equal_elem(-1.0),
            nt.clone().lower_equal_elem(-1.0),
        );
        // f16 operands
        let (h, g) = (at.clone().cast(DType::F16), b.clone().cast(DType::F16));
        same(h.clone().greater(g), nt.clone().greater(m.clone()));
        same(h.lower_equal_elem(0.5), nt.clone().lower_equal_elem(0.5));
    });
}

#[test]
fn int_comparisons_masks_and_casts() {
    let _lock = crate::exclusive();
    let names = [
        "int_equal",
        "int_greater",
        "int_greater_equal",
        "int_lower",
        "int_lower_equal",
        "int_equal_elem",
        "int_greater_elem",
        "int_lower_equal_elem",
        "int_mask_where",
        "int_mask_fill",
        "int_into_float",
        "int_cast",
        "float_into_int",
    ];
    native(&names, || {
        let (a, n) = both_int([4, 6], 3);
        let (b, m) = both_int([1, 6], 4);
        let (at, nt) = (a.clone().transpose(), n.clone().transpose());
        same(a.clone().equal(b.clone()), n.clone().equal(m.clone()));
        same(a.clone().greater(b.clone()), n.clone().greater(m.clone()));
        same(
            a.clone().greater_equal(b.clone()),
            n.clone().greater_equal(m.clone()),
        );
        same(a.clone().lower(b.clone()), n.clone().lower(m.clone()));
        same(
            a.clone().lower_equal(b.clone()),
            n.clone().lower_equal(m.clone()),
        );
        same(at.clone().equal_elem(2), nt.clone().equal_elem(2));
        same(at.clone().greater_elem(-3), nt.clone().greater_elem(-3));
        same(
            at.clone().lower_equal_elem(0),
            nt.clone().lower_equal_elem(0),
        );
        let (ma, mn) = (at.clone().greater_elem(0), nt.clone().greater_elem(0));
        same(
            at.clone().mask_where(ma.clone(), at.clone() * 2 - 7),
            nt.clone().mask_where(mn.clone(), nt.clone() * 2 - 7),
        );
        same(
            at.clone().mask_fill(ma.clone(), 99),
            nt.clone().mask_fill(mn.clone(), 99),
        );
        close(at.clone().float(), nt.clone().float());
        same(at.clone().cast(DType::I32), nt.clone().cast(DType::I32));
        let (f, g) = both([4, 6], 5);
        same((f.clone() * 3.0).int(), (g.clone() * 3.0).int());
    });
}

#[test]
fn int_add_sub_mul_and_scalar_forms() {
    let _lock = crate::exclusive();
    let names = [
        "int_add",
        "int_sub",
        "int_mul",
        "int_add_scalar",
        "int_sub_scalar",
        "int_mul_scalar",
    ];
    native(&names, || {
        let (a, n) = both_int([3, 5], 12);
        let (b, m) = both_int([1, 5], 13);
        let (at, nt) = (a.clone().transpose(), n.clone().transpose());
        same(a.clone() + b.clone(), n.clone() + m.clone());
        same(a.clone() - b.clone(), n.clone() - m.clone());
        same(a.clone() * b.clone(), n.clone() * m.clone());
        same(at.clone() + 7, nt.clone() + 7);
        same(at.clone() - 7, nt.clone() - 7);
        same(at.clone() * -3, nt.clone() * -3);
        let (c, d) = (a.clone().cast(DType::I32), n.clone().cast(DType::I32));
        same(c.clone() * c.clone() + 1, d.clone() * d.clone() + 1);
    });
}

#[test]
fn float_masks_and_bool_logic() {
    let _lock = crate::exclusive();
    let names = [
        "float_mask_where",
        "float_mask_fill",
        "bool_not",
        "bool_and",
        "bool_or",
        "bool_equal",
        "bool_into_float",
        "bool_into_int",
    ];
    native(&names, || {
        let (a, n) = both([2, 3, 4], 6);
        let (at, nt) = (a.clone().permute([2, 0, 1]), n.clone().permute([2, 0, 1]));
        let (ma, mn) = (at.clone().greater_elem(0.0), nt.clone().greater_elem(0.0));
        // a broadcast value [1, 1, 3]; a broadcast mask [4, 1, 1] for mask_fill
        let (mb, mbn) = (
            at.clone().slice([0..4, 0..1, 0..1]).lower_elem(0.0),
            nt.clone().slice([0..4, 0..1, 0..1]).lower_elem(0.0),
        );
        let (v, w) = both([1, 1, 3], 7);
        close(
            at.clone().mask_where(ma.clone(), v.clone()),
            nt.clone().mask_where(mn.clone(), w.clone()),
        );
        close(
            at.clone().mask_where(ma.clone(), at.clone() * 3.0),
            nt.clone().mask_where(mn.clone(), nt.clone() * 3.0),
        );
        close(
            at.clone().mask_fill(ma.clone(), -1e9),
            nt.clone().mask_fill(mn.clone(), -1e9),
        );
        close(
            at.clone().mask_fill(mb.clone(), f32::NEG_INFINITY),
            nt.clone().mask_fill(mbn.clone(), f32::NEG_INFINITY),
        );
        same(ma.clone().bool_not(), mn.clone().bool_not());
        let (mc, mcn) = (at.clone().lower_elem(0.5), nt.clone().lower_elem(0.5));
        same(
            ma.clone().bool_and(mc.clone()),
            mn.clone().bool_and(mcn.clone()),
        );
        same(
            ma.clone().bool_or(mc.clone()),
            mn.clone().bool_or(mcn.clone()),
        );
        same(
            ma.clone().equal(ma.clone().bool_not()),
            mn.clone().equal(mn.clone().bool_not()),
        );
        close(ma.clone().float(), mn.clone().float());
        same(ma.clone().int(), mn.clone().int());
        // f16 tensor, f16 value
        let h = at.clone().cast(DType::F16);
        close_f16(
            h.clone().mask_where(ma.clone(), h.clone() * 2.0),
            nt.clone().mask_where(mn.clone(), nt.clone() * 2.0),
        );
        close_f16(h.mask_fill(ma, 0.5), nt.mask_fill(mn, 0.5));
    });
}

#[test]
fn float_casts_between_f32_f16_bf16() {
    let _lock = crate::exclusive();
    native(&["float_cast"], || {
        let (a, n) = both([3, 7], 8);
        let h = a.clone().transpose().cast(DType::F16);
        assert_eq!(h.dtype(), DType::F16);
        close_f16(h.clone(), n.clone().transpose());
        let b = h.clone().cast(DType::BF16);
        assert_eq!(b.dtype(), DType::BF16);
        let f = b.cast(DType::F32);
        assert_eq!(f.dtype(), DType::F32);
        // multiples of 1/8 in [-2, 2) are exact in f16 and bf16
        close(f, n.transpose());
        let same_dtype = a.clone().cast(DType::F32);
        close(same_dtype, both([3, 7], 8).1);
    });
}

#[test]
fn max_min_and_arg_reductions() {
    let _lock = crate::exclusive();
    let names = [
        "float_max",
        "float_min",
        "float_max_dim",
        "float_min_dim",
        "float_argmax",
        "float_argmin",
        "float_max_dim_with_indices",
        "float_min_dim_with_indices",
    ];
    native(&names, || {
        let (a, n) = both([3, 4, 5], 9);
        let (at, nt) = (a.clone().swap_dims(0, 2), n.clone().swap_dims(0, 2));
        for d in 0..3 {
            close(at.clone().max_dim(d), nt.clone().max_dim(d));
            close(at.clone().min_dim(d), nt.clone().min_dim(d));
            // ties (values are multiples of 1/8): the first index, as NdArray
            same(at.clone().argmax(d), nt.clone().argmax(d));
            same(at.clone().argmin(d), nt.clone().argmin(d));
            let ((v, i), (w, j)) = (
                at.clone().max_dim_with_indices(d),
                nt.clone().max_dim_with_indices(d),
            );
            close(v, w);
            same(i, j);
            let ((v, i), (w, j)) = (
                at.clone().min_dim_with_indices(d),
                nt.clone().min_dim_with_indices(d),
            );
            close(v, w);
            same(i, j);
        }
        close(at.clone().max(), nt.clone().max());
        close(at.clone().min(), nt.clone().min());
        let h = at.clone().cast(DType::F16);
        close_f16(h.clone().max_dim(1), nt.clone().max_dim(1));
        same(h.argmin(2), nt.argmin(2));
        // softmax (max_dim of a detached input) stays on the device end to end
        close(
            activation::softmax(at.clone(), 1),
            activation::softmax(n.clone().swap_dims(0, 2), 1),
        );
    });
}

#[test]
fn activations_and_unary_math() {
    let _lock = crate::exclusive();
    let names = [
        "relu",
        "gelu",
        "sigmoid",
        "float_neg",
        "float_recip",
        "float_sin",
        "float_cos",
        "float_erf",
        "float_powf_scalar_impl",
        "float_clamp",
        "float_clamp_min",
        "float_clamp_max",
        "float_mask_fill",
        "float_lower_equal_elem",
    ];
    native(&names, || {
        let (a, n) = both([4, 6], 10);
        let (at, nt) = (a.clone().transpose(), n.clone().transpose());
        close(activation::relu(at.clone()), activation::relu(nt.clone()));
        close(activation::gelu(at.clone()), activation::gelu(nt.clone()));
        close(
            activation::sigmoid(at.clone()),
            activation::sigmoid(nt.clone()),
        );
        close(-at.clone(), -nt.clone());
        close(
            (at.clone().abs() + 0.5).recip(),
            (nt.clone().abs() + 0.5).recip(),
        );
        close(at.clone().sin(), nt.clone().sin());
        close(at.clone().cos(), nt.clone().cos());
        close(at.clone().erf(), nt.clone().erf());
        close(
            (at.clone().abs() + 0.1).powf_scalar(2.5),
            (nt.clone().abs() + 0.1).powf_scalar(2.5),
        );
        close(at.clone().powf_scalar(3.0), nt.clone().powf_scalar(3.0));
        close(at.clone().clamp(-0.5, 0.75), nt.clone().clamp(-0.5, 0.75));
        close(at.clone().clamp_min(0.25), nt.clone().clamp_min(0.25));
        close(at.clone().clamp_max(-0.25), nt.clone().clamp_max(-0.25));
        // f16
        let h = at.clone().cast(DType::F16);
        close_f16(activation::gelu(h.clone()), activation::gelu(nt.clone()));
        close_f16(
            activation::sigmoid(h.clone()),
            activation::sigmoid(nt.clone()),
        );
        close_f16(activation::relu(h.clone()), activation::relu(nt.clone()));
        close_f16(h.clone().sin(), nt.clone().sin());
        close_f16(h.clamp(-0.5, 0.75), nt.clamp(-0.5, 0.75));
    });
}

#[test]
fn activation_gradients_match_ndarray() {
    let _lock = crate::exclusive();
    type AD = Autodiff<A>;
    type ND = Autodiff<N>;
    let d = data(&[3, 5], 11);
    let x: Tensor<AD, 2> = Tensor::from_data(d.clone(), &dev()).require_grad();
    let y: Tensor<ND, 2> = Tensor::from_data(d, &Default::default()).require_grad();
    let fa = |t: Tensor<AD, 2>| {
        (activation::gelu(t.clone()) + activation::relu(t.clone()) * activation::sigmoid(t.clone()))
            .clamp(-1.0, 1.5)
            .sum()
    };
    let fb = |t: Tensor<ND, 2>| {
        (activation::gelu(t.clone()) + activation::relu(t.clone()) * activation::sigmoid(t.clone()))
            .clamp(-1.0, 1.5)
            .sum()
    };
    let ga = fa(x.clone()).backward();
    let gb = fb(y.clone()).backward();
    // Burn's gelu backward is the tanh-form derivative on both backends.
    close(x.grad(&ga).unwrap(), y.grad(&gb).unwrap());
}

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

/// One test for the moments and the seeding: the generator state is process-wide.
#[test]
fn random_fills_run_on_the_device_with_the_right_moments_and_replay_a_seed() {
    let _lock = crate::exclusive();
    const N: usize = 100_000;
    native(&["float_random"], || {
        let u: Tensor<A, 1> = Tensor::random([N], Distribution::Uniform(-2.0, 4.0), &dev());
        let v = u.into_data().to_vec::<f32>().unwrap();
        assert!(v.iter().all(|x| (-2.0..4.0).contains(x)));
        let (m, var) = moments(&v);
        // standard errors: mean 0.0055, variance 0.0095; tolerances ~5 of them
        assert!((m - 1.0).abs() < 0.03, "uniform mean {m}");
        assert!((var - 3.0).abs() < 0.05, "uniform variance {var}");

        let z: Tensor<A, 2> =
            Tensor::random([N / 100, 100], Distribution::Normal(-1.0, 2.0), &dev());
        let (m, var) = moments(&z.into_data().to_vec::<f32>().unwrap());
        assert!((m + 1.0).abs() < 0.03, "normal mean {m}");
        assert!((var - 4.0).abs() < 0.1, "normal variance {var}");

        let b: Tensor<A, 1> = Tensor::random([N], Distribution::Bernoulli(0.2), &dev());
        let v = b.into_data().to_vec::<f32>().unwrap();
        assert!(v.iter().all(|&x| x == 0.0 || x == 1.0));
        let (m, _) = moments(&v);
        assert!((m - 0.2).abs() < 0.01, "bernoulli mean {m}");

        let d: Tensor<A, 1> = Tensor::random([N], Distribution::Default, (&dev(), DType::F16));
        assert_eq!(d.dtype(), DType::F16);
        let v = d
            .into_data()
            .convert_dtype(DType::F32)
            .to_vec::<f32>()
            .unwrap();
        assert!(v.iter().all(|x| (0.0..=1.0).contains(x)));
        let (m, var) = moments(&v);
        assert!((m - 0.5).abs() < 0.01, "default mean {m}");
        assert!((var - 1.0 / 12.0).abs() < 0.01, "default variance {var}");

        // successive fills differ
        let p: Tensor<A, 1> = Tensor::random([64], Distribution::Default, &dev());
        let q: Tensor<A, 1> = Tensor::random([64], Distribution::Default, &dev());
        assert_ne!(p.into_data(), q.into_data());

        // seeding replays the sequence (in this test: the generator state is process-wide)
        let draw = || {
            let x: Tensor<A, 1> = Tensor::random([257], Distribution::Normal(0.0, 1.0), &dev());
            let y: Tensor<A, 1> = Tensor::random([31], Distribution::Uniform(0.0, 1.0), &dev());
            (x.into_data(), y.into_data())
        };
        A::seed(&dev(), 1234);
        let first = draw();
        A::seed(&dev(), 1234);
        assert_eq!(draw(), first);
        A::seed(&dev(), 1235);
        assert_ne!(draw().0, first.0);
    });
}

/// `mean` is one device reduction accumulating in f32: the mean of f16 values whose sum
/// overflows f16 (4096 · 100 > 65504) is 100, not Burn's default `sum / n` = inf.
#[test]
fn the_mean_of_f16_values_whose_sum_overflows_f16_is_finite() {
    let _lock = crate::exclusive();
    native(&["float_mean", "float_sum"], || {
        let x: Tensor<A, 2> = Tensor::from_data(
            TensorData::new(vec![100.0f32; 4096], [64, 64]),
            (&dev(), DType::F16),
        );
        assert_eq!(x.dtype(), DType::F16);
        let m = x
            .mean()
            .into_data()
            .convert_dtype(DType::F32)
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(m, vec![100.0]);
    });
}
