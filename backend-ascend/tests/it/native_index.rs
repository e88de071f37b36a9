//! The native indexing and layout ops of `Ascend` (the host simulation) against `NdArray`:
//! select / select_add (embedding and its gradient), gather / scatter_add, cat, slice_assign,
//! contiguous copies, repeat_dim and flip — on non-contiguous and expanded (stride-0) views,
//! with i32 and i64 indices, duplicates, f16 — each asserting that its op did not run through
//! the host fallback. Copies must match exactly; adds are compared with the tolerance stated
//! at each check. Ends with an Embedding + Linear model trained 3 Adam steps on
//! `Autodiff<Ascend>` vs `Autodiff<NdArray>`.
//!
//! No test here makes one of these ops fall back (fallback counts are process-wide and the
//! tests run in parallel).

use burn::backend::{Autodiff, NdArray};
use burn::module::{Module, Param};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{
    s, Bool, DType, ElementConversion, IndexingUpdateOp, Int, Tensor, TensorCreationOptions,
    TensorData, Tolerance,
};
use burn_ascend_backend::{fallback_count, Ascend, AscendDevice};

type A = Ascend;
type N = NdArray;

fn dev() -> AscendDevice {
    AscendDevice::sim()
}

/// Runs `f` and asserts none of `ops` ran through the host fallback meanwhile.
fn native<R>(ops: &[&str], f: impl FnOnce() -> R) -> R {
    let before: Vec<u64> = ops.iter().map(|o| fallback_count(o)).collect();
    let r = f();
    for (o, b) in ops.iter().zip(before) {
        assert_eq!(fallback_count(o), b, "{o} ran through the host fallback");
    }
    r
}

/// Values that f16 represents exactly (multiples of 1/8 in [-4, 4)).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            (x % 64) as f32 / 8.0 - 4.0
        })
        .collect()
}

fn both<const D: usize>(shape: [usize; D], seed: u32) -> (Tensor<A, D>, Tensor<N, D>) {
    let d = TensorData::new(values(shape.iter().product(), seed), shape.to_vec());
    (
        Tensor::from_data(d.clone(), &dev()),
        Tensor::from_data(d, &Default::default()),
    )
}

fn f16_of<const D: usize>(shape: [usize; D], seed: u32) -> Tensor<A, D> {
    let d = TensorData::new(values(shape.iter().product(), seed), shape.to_vec());
    let t = Tensor::<A, D>::from_data(d, TensorCreationOptions::new(dev()).with_dtype(DType::F16));
    assert_eq!(t.dtype(), DType::F16);
    t
}

fn idx<const D: usize>(
    v: &[i64],
    shape: [usize; D],
    dtype: DType,
) -> (Tensor<A, D, Int>, Tensor<N, D, Int>) {
    let d = TensorData::new(v.to_vec(), shape.to_vec());
    let a = Tensor::<A, D, Int>::from_data(
        d.clone(),
        TensorCreationOptions::new(dev()).with_dtype(dtype),
    );
    assert_eq!(a.dtype(), dtype);
    (a, Tensor::from_data(d, &Default::default()))
}

fn exact<const D: usize, K1, K2>(a: Tensor<A, D, K1>, n: Tensor<N, D, K2>)
where
    K1: burn::tensor::BasicOps<A>,
    K2: burn::tensor::BasicOps<N>,
{
    let (a, n) = (a.into_data(), n.into_data());
    assert_eq!(a.shape, n.shape);
    assert_eq!(
        a.convert::<f64>().to_vec::<f64>().unwrap(),
        n.convert::<f64>().to_vec::<f64>().unwrap()
    );
}

fn close<const D: usize>(a: Tensor<A, D>, n: Tensor<N, D>, tol: f64) {
    a.into_data()
        .convert::<f32>()
        .assert_approx_eq::<f32>(&n.into_data(), Tolerance::absolute(tol));
}

#[test]
fn select_with_i64_and_i32_indices_on_views_and_f16() {
    let _lock = crate::exclusive();
    native(&["float_select", "int_select", "bool_select"], || {
        let (a, n) = both([5, 4], 1);
        for dt in [DType::I64, DType::I32] {
            let (ia, in_) = idx(&[4, 0, 4, 2], [4], dt);
            exact(
                a.clone().select(0, ia.clone()),
                n.clone().select(0, in_.clone()),
            );
            // a transposed view (dim 1 of [4, 5])
            exact(
                a.clone().swap_dims(0, 1).select(1, ia.clone()),
                n.clone().swap_dims(0, 1).select(1, in_.clone()),
            );
            // an expanded (stride-0) view
            exact(
                a.clone()
                    .slice(s![1..2, ..])
                    .expand([3, 4])
                    .select(1, ia.clone().slice(s![1..4]).clamp(0, 3)),
                n.clone()
                    .slice(s![1..2, ..])
                    .expand([3, 4])
                    .select(1, in_.clone().slice(s![1..4]).clamp(0, 3)),
            );
        }
        // f16: a copy, so exact against the f32 result on values f16 represents
        let (ia, in_) = idx(&[1, 3, 1], [3], DType::I64);
        let h = f16_of([5, 4], 1);
        exact(h.select(0, ia.clone()), n.clone().select(0, in_.clone()));
        // int and bool
        let (ti, tn) = idx(&[5, 6, 7, 8, 9, 10], [3, 2], DType::I64);
        let (ia, in_) = idx(&[1, 2, 1, 0], [4], DType::I32);
        exact(
            ti.clone().select(0, ia.clone()),
            tn.clone().select(0, in_.clone()),
        );
        exact(
            ti.greater_elem(7).select(0, ia),
            tn.greater_elem(7).select(0, in_),
        );
    });
}

#[test]
fn select_add_accumulates_duplicates_like_ndarray() {
    let _lock = crate::exclusive();
    native(&["float_select_add"], || {
        let (t, tn) = both([6, 3], 2);
        let (v, vn) = both([5, 3], 3);
        for dt in [DType::I64, DType::I32] {
            let (ia, in_) = idx(&[2, 0, 2, 5, 2], [5], dt);
            // f32: accumulation in index order, as NdArray: tolerance 1e-6 (exact in practice)
            close(
                t.clone()
                    .select_assign(0, ia.clone(), v.clone(), IndexingUpdateOp::Add),
                tn.clone()
                    .select_assign(0, in_.clone(), vn.clone(), IndexingUpdateOp::Add),
                1e-6,
            );
            // along dim 1 with a non-contiguous value ([3, 5] viewed from a transpose)
            let (ia1, in1) = idx(&[1, 1, 0], [3], dt);
            let (w, wn) = both([3, 6], 4);
            close(
                w.clone().select_assign(
                    1,
                    ia1,
                    t.clone().slice(s![0..3, ..]).swap_dims(0, 1),
                    IndexingUpdateOp::Add,
                ),
                wn.clone().select_assign(
                    1,
                    in1,
                    tn.clone().slice(s![0..3, ..]).swap_dims(0, 1),
                    IndexingUpdateOp::Add,
                ),
                1e-6,
            );
        }
        // f16: values and sums of these multiples of 1/8 stay exact in f16 (|sum| < 32)
        let (ia, in_) = idx(&[2, 0, 2, 5, 2], [5], DType::I64);
        let h = f16_of([6, 3], 2).select_assign(0, ia, f16_of([5, 3], 3), IndexingUpdateOp::Add);
        assert_eq!(h.dtype(), DType::F16);
        close(h, tn.select_assign(0, in_, vn, IndexingUpdateOp::Add), 1e-3);
    });
}

#[test]
fn gather_and_scatter_add_on_views() {
    let _lock = crate::exclusive();
    native(
        &[
            "float_gather",
            "int_gather",
            "float_scatter_add",
            "int_scatter_add",
            "contiguous",
        ],
        || {
            let (a, n) = both([3, 5], 5);
            let iv = [4, 0, 0, 3, 1, 2, 2, 2, 4, 4, 0, 1];
            for dt in [DType::I64, DType::I32] {
                let (ia, in_) = idx(&iv, [3, 4], dt);
                exact(
                    a.clone().gather(1, ia.clone()),
                    n.clone().gather(1, in_.clone()),
                );
                // dim 0 of the transposed view [5, 3] with indices [4, 3]
                let (it, itn) = (
                    ia.clone().swap_dims(0, 1).clamp(0, 2),
                    in_.clone().swap_dims(0, 1).clamp(0, 2),
                );
                exact(
                    a.clone().swap_dims(0, 1).gather(0, it.clone()),
                    n.clone().swap_dims(0, 1).gather(0, itn.clone()),
                );
                // scatter_add with duplicates and a non-contiguous value: tolerance 1e-6
                let (v, vn) = both([4, 3], 6);
                close(
                    a.clone().scatter(
                        1,
                        ia.clone(),
                        v.clone().swap_dims(0, 1),
                        IndexingUpdateOp::Add,
                    ),
                    n.clone().scatter(
                        1,
                        in_.clone(),
                        vn.clone().swap_dims(0, 1),
                        IndexingUpdateOp::Add,
                    ),
                    1e-6,
                );
                // int
                let (ti, tn) = idx(&(0..15).collect::<Vec<_>>(), [3, 5], DType::I64);
                exact(
                    ti.clone().gather(1, ia.clone()),
                    tn.clone().gather(1, in_.clone()),
                );
                let (vi, vin) = idx(&(100..112).collect::<Vec<_>>(), [3, 4], DType::I64);
                exact(
                    ti.scatter(1, ia, vi, IndexingUpdateOp::Add),
                    tn.scatter(1, in_, vin, IndexingUpdateOp::Add),
                );
            }
        },
    );
}

#[test]
fn cat_of_views_for_float_int_bool() {
    let _lock = crate::exclusive();
    native(&["float_cat", "int_cat", "bool_cat"], || {
        let (a, n) = both([2, 3], 7);
        let (b, bn) = both([3, 2], 8);
        exact(
            Tensor::cat(
                vec![
                    a.clone(),
                    b.clone().swap_dims(0, 1),
                    a.clone().slice(s![0..1, ..]).expand([2, 3]),
                ],
                1,
            ),
            Tensor::cat(
                vec![
                    n.clone(),
                    bn.clone().swap_dims(0, 1),
                    n.clone().slice(s![0..1, ..]).expand([2, 3]),
                ],
                1,
            ),
        );
        exact(
            Tensor::cat(vec![a.clone(), b.clone().swap_dims(0, 1)], 0),
            Tensor::cat(vec![n.clone(), bn.clone().swap_dims(0, 1)], 0),
        );
        let h = Tensor::cat(vec![f16_of([2, 3], 7), f16_of([2, 3], 9)], 0);
        assert_eq!(h.dtype(), DType::F16);
        exact(h, Tensor::cat(vec![n.clone(), both::<2>([2, 3], 9).1], 0));
        let (i, in_) = idx(&[1, 2, 3, 4, 5, 6], [2, 3], DType::I32);
        exact(
            Tensor::cat(vec![i.clone(), i.clone().flip([1])], 1),
            Tensor::cat(vec![in_.clone(), in_.clone().flip([1])], 1),
        );
        let (m, mn): (Tensor<A, 2, Bool>, Tensor<N, 2, Bool>) =
            (a.greater_elem(0.0), n.greater_elem(0.0));
        exact(
            Tensor::cat(
                vec![m.clone(), m.clone().swap_dims(0, 1).swap_dims(0, 1)],
                0,
            ),
            Tensor::cat(vec![mn.clone(), mn.clone()], 0),
        );
    });
}

#[test]
fn slice_assign_and_contiguous_copies() {
    let _lock = crate::exclusive();
    native(
        &[
            "float_slice_assign",
            "int_slice_assign",
            "bool_slice_assign",
            "contiguous",
        ],
        || {
            let (a, n) = both([4, 6], 10);
            let (v, vn) = both([2, 3], 11);
            exact(
                a.clone().slice_assign(s![1..3, 0..6;2], v.clone()),
                n.clone().slice_assign(s![1..3, 0..6;2], vn.clone()),
            );
            // into a transposed tensor, with a transposed value
            exact(
                a.clone()
                    .swap_dims(0, 1)
                    .slice_assign(s![2..5, 1..3], v.clone().swap_dims(0, 1)),
                n.clone()
                    .swap_dims(0, 1)
                    .slice_assign(s![2..5, 1..3], vn.clone().swap_dims(0, 1)),
            );
            // reshape of a non-contiguous view: a native contiguous copy
            exact(
                a.clone().swap_dims(0, 1).reshape([3, 8]),
                n.clone().swap_dims(0, 1).reshape([3, 8]),
            );
            let h = f16_of([4, 6], 10).slice_assign(s![0..2, 1..4], f16_of([2, 3], 11));
            exact(h, n.clone().slice_assign(s![0..2, 1..4], vn.clone()));
            let (i, in_) = idx(&(0..24).collect::<Vec<_>>(), [4, 6], DType::I64);
            let (iv, ivn) = idx(&[-1, -2, -3, -4], [2, 2], DType::I64);
            exact(
                i.clone().slice_assign(s![2..4, 0..4;2], iv.clone()),
                in_.clone().slice_assign(s![2..4, 0..4;2], ivn.clone()),
            );
            exact(
                i.clone()
                    .greater_elem(10)
                    .slice_assign(s![0..2, 0..2], iv.clone().greater_elem(-3)),
                in_.clone()
                    .greater_elem(10)
                    .slice_assign(s![0..2, 0..2], ivn.clone().greater_elem(-3)),
            );
        },
    );
}

#[test]
fn repeat_dim_and_flip() {
    let _lock = crate::exclusive();
    native(&["float_flip", "int_flip", "bool_flip"], || {
        let (a, n) = both([2, 3], 12);
        exact(a.clone().repeat_dim(0, 3), n.clone().repeat_dim(0, 3));
        exact(
            a.clone().swap_dims(0, 1).repeat_dim(1, 2),
            n.clone().swap_dims(0, 1).repeat_dim(1, 2),
        );
        exact(
            a.clone()
                .slice(s![0..1, ..])
                .expand([4, 3])
                .repeat_dim(1, 2),
            n.clone()
                .slice(s![0..1, ..])
                .expand([4, 3])
                .repeat_dim(1, 2),
        );
        exact(a.clone().flip([0, 1]), n.clone().flip([0, 1]));
        exact(
            a.clone().swap_dims(0, 1).flip([1]),
            n.clone().swap_dims(0, 1).flip([1]),
        );
        let (i, in_) = idx(&[1, 2, 3, 4, 5, 6], [2, 3], DType::I64);
        exact(i.clone().repeat_dim(1, 2), in_.clone().repeat_dim(1, 2));
        exact(i.clone().flip([1]), in_.clone().flip([1]));
        exact(
            i.clone().greater_elem(3).flip([0]),
            in_.clone().greater_elem(3).flip([0]),
        );
    });
}

// ---- end to end: Embedding + Linear, 3 Adam steps ---------------------------------------------

#[derive(Module, Debug)]
struct Net<B: Backend> {
    emb: Embedding<B>,
    out: Linear<B>,
}

const VOCAB: usize = 7;
const DIM: usize = 4;
const OUT: usize = 3;

fn t<B: Backend, const D: usize>(v: Vec<f32>, shape: [usize; D], dev: &B::Device) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(v, shape.to_vec()), dev)
}

fn net<B: Backend>(dev: &B::Device) -> Net<B> {
    let mut emb = EmbeddingConfig::new(VOCAB, DIM).init(dev);
    emb.weight = Param::from_tensor(t(values(VOCAB * DIM, 31), [VOCAB, DIM], dev).mul_scalar(0.25));
    let mut out = LinearConfig::new(DIM, OUT).init(dev);
    out.weight = Param::from_tensor(t(values(DIM * OUT, 32), [DIM, OUT], dev).mul_scalar(0.25));
    out.bias = Some(Param::from_tensor(
        t(values(OUT, 33), [OUT], dev).mul_scalar(0.1),
    ));
    Net { emb, out }
}

fn train<B: burn::tensor::backend::AutodiffBackend>(
    dev: &B::Device,
) -> (Vec<f32>, Vec<TensorData>) {
    let mut model = net::<B>(dev);
    let mut optim = AdamConfig::new().init::<B, Net<B>>();
    // batch 2 × 5 tokens, with repeats (duplicate rows in the embedding gradient)
    let tokens = Tensor::<B, 2, Int>::from_data(
        TensorData::new(vec![1i64, 3, 3, 0, 6, 2, 3, 1, 1, 5], vec![2, 5]),
        dev,
    );
    let y = t::<B, 3>(values(2 * 5 * OUT, 34), [2, 5, OUT], dev);
    let mut losses = Vec::new();
    for _ in 0..3 {
        let pred = model.out.forward(model.emb.forward(tokens.clone()));
        let diff = pred - y.clone();
        let loss = (diff.clone() * diff).mean();
        losses.push(loss.clone().into_scalar().elem::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    let params = vec![
        model.emb.weight.val().into_data(),
        model.out.weight.val().into_data(),
    ];
    (losses, params)
}

#[test]
fn embedding_linear_training_matches_ndarray_with_native_select_and_select_add() {
    let _lock = crate::exclusive();
    let (la, pa) = native(&["float_select", "float_select_add"], || {
        train::<Autodiff<Ascend>>(&dev())
    });
    let (ln, pn) = train::<Autodiff<NdArray>>(&Default::default());
    for (step, (a, n)) in la.iter().zip(&ln).enumerate() {
        assert!(
            (a - n).abs() <= 1e-5 * n.abs().max(1.0),
            "step {step}: loss {a} on Ascend vs {n} on NdArray"
        );
    }
    assert!(la[2] < la[0], "the loss decreases: {la:?}");
    for (a, n) in pa.iter().zip(&pn) {
        a.assert_approx_eq::<f32>(n, Tolerance::rel_abs(1e-4, 1e-5));
    }
}
