//! Tensor ops on `Ascend` (the host simulation) against `NdArray`: each check builds the same
//! computation on both backends from the same data and compares.

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::{s, Bool, Int, Tensor, TensorData, Tolerance};
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
            (x % 2000) as f32 / 1000.0 - 1.0
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

fn close<const D: usize, B1: Backend, B2: Backend>(a: Tensor<B1, D>, b: Tensor<B2, D>) {
    a.into_data()
        .assert_approx_eq::<f32>(&b.into_data(), Tolerance::rel_abs(1e-5, 1e-5));
}

#[test]
fn round_trip_and_views() {
    let _lock = crate::shared();
    let (a, n) = both([2, 3, 4], 1);
    assert_eq!(a.to_data(), n.to_data());
    // zero-copy views read back correctly
    close(a.clone().permute([2, 0, 1]), n.clone().permute([2, 0, 1]));
    close(a.clone().swap_dims(0, 2), n.clone().swap_dims(0, 2));
    close(
        a.clone().slice(s![.., 1..3, 1..;2]),
        n.clone().slice(s![.., 1..3, 1..;2]),
    );
    close(
        a.clone().slice(s![.., .., ..;-1]),
        n.clone().slice(s![.., .., ..;-1]),
    );
    close(
        a.clone().swap_dims(1, 2).reshape([2, 12]),
        n.clone().swap_dims(1, 2).reshape([2, 12]),
    );
    let (b, m) = both([1, 3, 1], 2);
    close(b.expand([2, 3, 4]), m.expand([2, 3, 4]));
}

#[test]
fn arithmetic_matmul_reductions() {
    let _lock = crate::shared();
    let (a, n) = both([2, 3, 4], 3);
    let (b, m) = both([2, 4, 5], 4);
    close(a.clone().matmul(b.clone()), n.clone().matmul(m.clone()));
    let (c, o) = both([2, 3, 4], 5);
    close(a.clone() + c.clone(), n.clone() + o.clone());
    close(a.clone() - c.clone(), n.clone() - o.clone());
    close(a.clone() * c.clone(), n.clone() * o.clone());
    close(
        a.clone() / (c.clone().abs() + 1.0),
        n.clone() / (o.clone().abs() + 1.0),
    );
    // broadcasting and strided operands
    let (r, q) = both([1, 3, 1], 6);
    close(a.clone() + r.clone(), n.clone() + q.clone());
    close(
        a.clone().swap_dims(1, 2) * c.clone().swap_dims(1, 2),
        n.clone().swap_dims(1, 2) * o.clone().swap_dims(1, 2),
    );
    close(a.clone().sum_dim(1), n.clone().sum_dim(1));
    close(a.clone().mean_dim(2), n.clone().mean_dim(2));
    close(a.clone().max_dim(2), n.clone().max_dim(2));
    close(a.clone().exp().log(), n.clone().exp().log());
    close(
        burn::tensor::activation::softmax(a.clone(), 2),
        burn::tensor::activation::softmax(n.clone(), 2),
    );
    assert_eq!(
        a.clone().argmax(2).into_data(),
        n.clone().argmax(2).into_data()
    );
}

#[test]
fn gather_select_cat_masks() {
    let _lock = crate::shared();
    let (a, n) = both([4, 3], 7);
    let idx = TensorData::new(vec![3i64, 0, 2], [3]);
    let ia: Tensor<A, 1, Int> = Tensor::from_data(idx.clone(), &dev());
    let in_: Tensor<N, 1, Int> = Tensor::from_data(idx, &Default::default());
    close(
        a.clone().select(0, ia.clone()),
        n.clone().select(0, in_.clone()),
    );
    let g = TensorData::new(vec![0i64, 2, 1, 1, 0, 2, 2, 2, 0, 1, 1, 1], [4, 3]);
    let ga: Tensor<A, 2, Int> = Tensor::from_data(g.clone(), &dev());
    let gn: Tensor<N, 2, Int> = Tensor::from_data(g, &Default::default());
    close(a.clone().gather(1, ga), n.clone().gather(1, gn));
    close(
        Tensor::cat(vec![a.clone(), a.clone() * 2.0], 1),
        Tensor::cat(vec![n.clone(), n.clone() * 2.0], 1),
    );
    let ma: Tensor<A, 2, Bool> = a.clone().greater_elem(0.0);
    let mn: Tensor<N, 2, Bool> = n.clone().greater_elem(0.0);
    assert_eq!(ma.to_data(), mn.to_data());
    close(
        a.clone().mask_fill(ma.clone(), -9.0),
        n.clone().mask_fill(mn.clone(), -9.0),
    );
    close(
        a.clone().mask_where(ma.bool_not(), a.clone() * 3.0),
        n.clone().mask_where(mn.bool_not(), n.clone() * 3.0),
    );
    close(
        a.clone()
            .slice_assign(s![1..3, 0..2], Tensor::ones([2, 2], &dev())),
        n.clone()
            .slice_assign(s![1..3, 0..2], Tensor::ones([2, 2], &Default::default())),
    );
}

#[test]
fn half_precision_round_trips_through_the_fallback() {
    let _lock = crate::shared();
    let d = data(&[3, 4], 9);
    let a: Tensor<A, 2> = Tensor::from_data(d.clone(), (&dev(), burn::tensor::DType::F16));
    let n: Tensor<N, 2> = Tensor::from_data(d, &Default::default());
    let out = a.tan();
    assert_eq!(out.dtype(), burn::tensor::DType::F16);
    out.into_data()
        .convert_dtype(burn::tensor::DType::F32)
        .assert_approx_eq::<f32>(&n.tan().into_data(), Tolerance::rel_abs(2e-3, 2e-3));
}

#[test]
fn fallback_calls_are_counted() {
    let _lock = crate::shared();
    let before = fallback_count("float_tan");
    let (a, _) = both([2, 2], 10);
    let _ = a.tan().into_data();
    assert!(fallback_count("float_tan") > before);
}

#[test]
fn matmul_and_binary_ops_take_the_device_path() {
    let _lock = crate::exclusive();
    let names = [
        "float_matmul",
        "float_add",
        "float_sub",
        "float_mul",
        "float_div",
    ];
    let before: Vec<u64> = names.iter().map(|n| fallback_count(n)).collect();
    let (a, n) = both([3, 2, 4], 11);
    let (b, m) = both([4, 5], 12);
    // broadcast batch, a transposed (strided) operand
    close(
        a.clone().matmul(b.clone().unsqueeze::<3>()),
        n.clone().matmul(m.clone().unsqueeze::<3>()),
    );
    close(
        a.clone().swap_dims(1, 2).matmul(a.clone()),
        n.clone().swap_dims(1, 2).matmul(n.clone()),
    );
    let (c, o) = both([1, 2, 4], 13);
    close(a.clone() + c.clone(), n.clone() + o.clone());
    close(a.clone() - c.clone(), n.clone() - o.clone());
    close(a.clone() * c.clone(), n.clone() * o.clone());
    close(c.clone() / (a.clone() + 3.0), o.clone() / (n.clone() + 3.0));
    let after: Vec<u64> = names.iter().map(|n| fallback_count(n)).collect();
    assert_eq!(before, after, "no host fallback for {names:?}");
}

#[test]
fn scalar_unary_and_reduction_ops_take_the_device_path() {
    let _lock = crate::exclusive();
    let names = [
        "float_add_scalar",
        "float_sub_scalar",
        "float_mul_scalar",
        "float_div_scalar",
        "float_exp",
        "float_log",
        "float_sqrt",
        "float_abs",
        "float_tanh",
        "float_sum_dim",
        "float_mean_dim",
        "float_sum",
    ];
    let before: Vec<u64> = names.iter().map(|n| fallback_count(n)).collect();
    let (a, n) = both([3, 4, 5], 21);
    let (at, nt) = (a.clone().swap_dims(0, 2), n.clone().swap_dims(0, 2));
    close(at.clone() + 1.5, nt.clone() + 1.5);
    close(at.clone() - 0.25, nt.clone() - 0.25);
    close(at.clone() * -3.0, nt.clone() * -3.0);
    // a true division, bit for bit (not a multiplication by 1/3)
    assert_eq!(
        (at.clone() / 3.0).into_data().to_vec::<f32>().unwrap(),
        (nt.clone() / 3.0).into_data().to_vec::<f32>().unwrap()
    );
    close(at.clone().exp(), nt.clone().exp());
    close(at.clone().abs().log(), nt.clone().abs().log());
    close(at.clone().abs().sqrt(), nt.clone().abs().sqrt());
    close(at.clone().tanh(), nt.clone().tanh());
    close(at.clone().sum_dim(1), nt.clone().sum_dim(1));
    close(at.clone().mean_dim(0), nt.clone().mean_dim(0));
    close(at.clone().sum(), nt.clone().sum());
    let after: Vec<u64> = names.iter().map(|n| fallback_count(n)).collect();
    assert_eq!(before, after, "no host fallback for {names:?}");
}
