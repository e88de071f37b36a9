//! The fused transformer ops of a training step on Burn: the `Autodiff<NdArray>` node (NdArray's CPU
//! kernels) and the composite default against the f64 references, forward and gradients, and
//! bad input refused with a typed error naming the aclnn parameter.

use crate::common::data;
use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};
use burn_ascend_kernels::reference::fused::{cross_entropy, rms_norm, rotary, swiglu};
use burn_ascend_ops::fused::{composite, rotary as rotary_rules};
use burn_ascend_ops::swiglu_pair;
use burn_ascend_ops::{cross_entropy_loss, rms_norm as fused_rms_norm, swiglu as fused_swiglu};
use burn_ascend_ops::{rotary_embedding, AttnError, FusedBackend, RotaryMode};
use burn_ascend_test_support::assert_close;

type B = NdArray;
type A = Autodiff<NdArray>;

fn t<Bk: burn::tensor::backend::Backend, const D: usize>(
    v: &[f32],
    shape: [usize; D],
) -> Tensor<Bk, D> {
    Tensor::from_data(TensorData::new(v.to_vec(), shape), &Default::default())
}

fn host<Bk: burn::tensor::backend::Backend, const D: usize>(x: Tensor<Bk, D>) -> Vec<f64> {
    x.into_data().convert::<f64>().into_vec::<f64>().unwrap()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[test]
fn autodiff_rms_norm_node_gives_the_references_output_and_gradients() {
    let (x, g, w) = (data(2 * 3 * 8, 1), data(8, 2), data(2 * 3 * 8, 3));
    let xa = t::<A, 3>(&x, [2, 3, 8]).require_grad();
    let ga = t::<A, 1>(&g, [8]).require_grad();
    let y = fused_rms_norm(xa.clone(), ga.clone(), 1e-5).unwrap();
    let grads = (y.clone() * t::<A, 3>(&w, [2, 3, 8])).sum().backward();
    let (ry, rstd) = rms_norm::rms_norm_fwd(&f64s(&x), &f64s(&g), 6, 8, 1e-5);
    let (rdx, rdg) = rms_norm::rms_norm_bwd(&f64s(&w), &f64s(&x), &rstd, &f64s(&g), 6, 8);
    assert_close("y", &host(y), &ry, 1e-5, 0.0);
    assert_close("dx", &host(xa.grad(&grads).unwrap()), &rdx, 1e-5, 0.0);
    assert_close("dgamma", &host(ga.grad(&grads).unwrap()), &rdg, 1e-5, 0.0);
}

#[test]
fn autodiff_swiglu_and_cross_entropy_nodes_give_the_references_gradients() {
    let x = data(4 * 10, 4);
    let w = data(4 * 5, 5);
    let xa = t::<A, 2>(&x, [4, 10]).require_grad();
    let y = fused_swiglu(xa.clone(), -1).unwrap();
    let grads = (y.clone() * t::<A, 2>(&w, [4, 5])).sum().backward();
    assert_close(
        "swiglu",
        &host(y),
        &swiglu::swiglu_fwd(&f64s(&x), 4, 5, 1),
        1e-6,
        0.0,
    );
    let rdx = swiglu::swiglu_bwd(&f64s(&w), &f64s(&x), 4, 5, 1);
    assert_close(
        "swiglu dx",
        &host(xa.grad(&grads).unwrap()),
        &rdx,
        1e-6,
        0.0,
    );

    let logits = data(5 * 7, 6);
    let target = [6i64, 0, 3, 3, 1];
    let la = t::<A, 2>(&logits, [5, 7]).require_grad();
    let ta =
        Tensor::<A, 1, Int>::from_data(TensorData::new(target.to_vec(), [5]), &Default::default());
    let loss = cross_entropy_loss(la.clone(), ta).unwrap();
    let grads = (loss.clone() * 2.0).sum().backward();
    let (rl, lp) = cross_entropy::cross_entropy_fwd(&f64s(&logits), &target, 5, 7, -100);
    assert_close("loss", &host(loss), &[rl], 1e-6, 0.0);
    let rdx = cross_entropy::cross_entropy_bwd(2.0, &lp, &target, 5, 7, -100);
    assert_close("dlogits", &host(la.grad(&grads).unwrap()), &rdx, 1e-6, 0.0);
}

#[test]
fn swiglu_of_the_halves_held_apart_gives_the_references_output_and_gradients_kernel_and_composite()
{
    // The reference's x is the gate's and up's rows side by side.
    let (rows, n) = (3, 6);
    let (g, u, w) = (data(rows * n, 7), data(rows * n, 8), data(rows * n, 9));
    let x: Vec<f32> = (0..rows)
        .flat_map(|r| {
            g[r * n..(r + 1) * n]
                .iter()
                .chain(&u[r * n..(r + 1) * n])
                .copied()
        })
        .collect();
    let ry = swiglu::swiglu_fwd(&f64s(&x), rows, n, 1);
    let rdx = swiglu::swiglu_bwd(&f64s(&w), &f64s(&x), rows, n, 1);
    let halves = |dx: &[f64], second: bool| -> Vec<f64> {
        (0..rows)
            .flat_map(|r| dx[(2 * r + second as usize) * n..][..n].to_vec())
            .collect()
    };
    // The CPU kernel through one Autodiff node.
    let ga = t::<A, 2>(&g, [rows, n]).require_grad();
    let ua = t::<A, 2>(&u, [rows, n]).require_grad();
    let y = swiglu_pair(ga.clone(), ua.clone()).unwrap();
    let grads = (y.clone() * t::<A, 2>(&w, [rows, n])).sum().backward();
    assert_close("swiglu pair y", &host(y), &ry, 1e-6, 0.0);
    assert_close(
        "dgate",
        &host(ga.grad(&grads).unwrap()),
        &halves(&rdx, false),
        1e-6,
        0.0,
    );
    assert_close(
        "dup",
        &host(ua.grad(&grads).unwrap()),
        &halves(&rdx, true),
        1e-6,
        0.0,
    );
    // The composite default (what a device backend runs: the concatenation and its SwiGLU).
    let (gp, up) = (
        prim(t::<B, 2>(&g, [rows, n])),
        prim(t::<B, 2>(&u, [rows, n])),
    );
    let y = composite::swiglu_pair_fwd::<B>(gp.clone(), up.clone()).unwrap();
    assert_close("composite y", &host(back::<2>(y)), &ry, 1e-6, 0.0);
    let (dg, du) = composite::swiglu_pair_bwd::<B>(prim(t::<B, 2>(&w, [rows, n])), gp, up).unwrap();
    assert_close(
        "composite dgate",
        &host(back::<2>(dg)),
        &halves(&rdx, false),
        1e-6,
        0.0,
    );
    assert_close(
        "composite dup",
        &host(back::<2>(du)),
        &halves(&rdx, true),
        1e-6,
        0.0,
    );
    // Halves of different shapes are refused naming the second.
    let e = swiglu_pair(t::<B, 2>(&g, [rows, n]), t::<B, 2>(&u[..n * 2], [2, n])).unwrap_err();
    assert_eq!(param(e.clone()), "up");
    assert!(e.to_string().contains("gate's shape"), "{e}");
    // The backward's gradient of another shape is refused naming it.
    let (gp, up) = (
        prim(t::<B, 2>(&g, [rows, n])),
        prim(t::<B, 2>(&u, [rows, n])),
    );
    let e =
        <B as FusedBackend>::swiglu_pair_bwd(prim(t::<B, 2>(&w[..n], [1, n])), gp, up).unwrap_err();
    assert_eq!(param(e), "yGrad");
}

fn prim<const D: usize>(x: Tensor<B, D>) -> burn::tensor::ops::FloatTensor<B> {
    x.into_primitive().tensor()
}

fn back<const D: usize>(p: burn::tensor::ops::FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

#[test]
fn composite_defaults_match_the_references() {
    let (x, g, dy) = (data(3 * 16, 7), data(16, 8), data(3 * 16, 9));
    let out = composite::rms_norm_fwd::<B>(
        prim(t::<B, 2>(&x, [3, 16])),
        prim(t::<B, 1>(&g, [16])),
        1e-6,
    )
    .unwrap();
    let (ry, rstd) = rms_norm::rms_norm_fwd(&f64s(&x), &f64s(&g), 3, 16, 1e-6);
    assert_close("y", &host(back::<2>(out.y)), &ry, 1e-5, 0.0);
    let grads = composite::rms_norm_bwd::<B>(
        prim(t::<B, 2>(&dy, [3, 16])),
        prim(t::<B, 2>(&x, [3, 16])),
        out.rstd,
        prim(t::<B, 1>(&g, [16])),
    )
    .unwrap();
    let (rdx, rdg) = rms_norm::rms_norm_bwd(&f64s(&dy), &f64s(&x), &rstd, &f64s(&g), 3, 16);
    assert_close("dx", &host(back::<2>(grads.dx)), &rdx, 1e-5, 0.0);
    assert_close("dgamma", &host(back::<1>(grads.dgamma)), &rdg, 1e-5, 0.0);

    // SwiGLU split on dim 0 of [4, 3]: outer 1, half 2, inner 3.
    let (x, dy) = (data(12, 10), data(6, 11));
    let y = composite::swiglu_fwd::<B>(prim(t::<B, 2>(&x, [4, 3])), 0).unwrap();
    assert_close(
        "swiglu",
        &host(back::<2>(y)),
        &swiglu::swiglu_fwd(&f64s(&x), 1, 2, 3),
        1e-6,
        0.0,
    );
    let dx =
        composite::swiglu_bwd::<B>(prim(t::<B, 2>(&dy, [2, 3])), prim(t::<B, 2>(&x, [4, 3])), 0)
            .unwrap();
    assert_close(
        "swiglu dx",
        &host(back::<2>(dx)),
        &swiglu::swiglu_bwd(&f64s(&dy), &f64s(&x), 1, 2, 3),
        1e-6,
        0.0,
    );

    let logits = data(3 * 4, 12);
    let target = [1i64, -100, 3];
    let ti = || {
        Tensor::<B, 1, Int>::from_data(TensorData::new(target.to_vec(), [3]), &Default::default())
            .into_primitive()
    };
    let out =
        composite::cross_entropy_fwd::<B>(prim(t::<B, 2>(&logits, [3, 4])), ti(), -100).unwrap();
    let (rl, lp) = cross_entropy::cross_entropy_fwd(&f64s(&logits), &target, 3, 4, -100);
    assert_close("loss", &host(back::<1>(out.loss)), &[rl], 1e-6, 0.0);
    let dx =
        composite::cross_entropy_bwd::<B>(prim(t::<B, 1>(&[1.0], [1])), out.log_prob, ti(), -100)
            .unwrap();
    assert_close(
        "dlogits",
        &host(back::<2>(dx)),
        &cross_entropy::cross_entropy_bwd(1.0, &lp, &target, 3, 4, -100),
        1e-6,
        0.0,
    );
}

fn param(e: AttnError) -> &'static str {
    e.param()
        .unwrap_or_else(|| panic!("expected an invalid-parameter error, got {e}"))
}

#[test]
fn bad_shapes_and_attributes_are_refused_naming_the_aclnn_parameter() {
    let x = || t::<B, 2>(&data(24, 1), [3, 8]);
    let e = fused_rms_norm(x(), t::<B, 1>(&data(7, 2), [7]), 1e-5).unwrap_err();
    assert_eq!(param(e), "gamma");
    let e = fused_rms_norm(x(), t::<B, 1>(&data(8, 2), [8]), 0.0).unwrap_err();
    assert_eq!(param(e), "epsilon");
    let e = fused_swiglu(t::<B, 2>(&data(21, 3), [3, 7]), -1).unwrap_err();
    assert_eq!(param(e), "x");
    let e = fused_swiglu(x(), 2).unwrap_err();
    assert_eq!(param(e), "dimOptional");
    let ids = |v: Vec<i64>| {
        Tensor::<B, 1, Int>::from_data(TensorData::new(v.clone(), [v.len()]), &Default::default())
    };
    let e = cross_entropy_loss(x(), ids(vec![0, 1])).unwrap_err();
    assert_eq!(param(e), "target");
    let e = cross_entropy_loss(x(), ids(vec![0, 8, 1])).unwrap_err();
    assert_eq!(param(e.clone()), "target");
    assert!(e.to_string().contains("target[1] = 8"), "{e}");
    // The composite (any backend) refuses the same.
    let e =
        composite::cross_entropy_fwd::<B>(prim(x()), ids(vec![0, -1, 1]).into_primitive(), -100)
            .unwrap_err();
    assert_eq!(param(e), "target");
    // The backward's own shapes.
    let e = <B as FusedBackend>::swiglu_bwd(prim(x()), prim(x()), -1).unwrap_err();
    assert_eq!(param(e), "yGrad");
}

#[test]
fn rotary_embedding_node_composite_and_kernel_match_the_reference_in_both_modes() {
    // x [1, 5, 3, 8] (BSND), cos / sin [1, 5, 1, 8] (1S1D), as the model calls it.
    let (xs, cs) = ([1, 5, 3, 8], [1, 5, 1, 8]);
    for mode in [RotaryMode::Half, RotaryMode::Interleave] {
        let dims = rotary_rules::validate_fwd(&xs, &cs, &cs, mode).unwrap();
        let (x, c, sn, w) = (data(120, 31), data(40, 32), data(40, 33), data(120, 34));
        let ry = rotary::rotary_fwd(&f64s(&x), &f64s(&c), &f64s(&sn), &dims, mode);
        let rdx = rotary::rotary_bwd(&f64s(&w), &f64s(&c), &f64s(&sn), &dims, mode);
        // Autodiff<NdArray>: the CPU kernel forward, one node, the CPU kernel backward.
        let xa = t::<A, 4>(&x, xs).require_grad();
        let y = rotary_embedding(xa.clone(), t::<A, 4>(&c, cs), t::<A, 4>(&sn, cs), mode).unwrap();
        let grads = (y.clone() * t::<A, 4>(&w, xs)).sum().backward();
        assert_close("node y", &host(y), &ry, 1e-6, 0.0);
        assert_close("node dx", &host(xa.grad(&grads).unwrap()), &rdx, 1e-6, 0.0);
        // The composite default (Burn primitives).
        let (cp, sp) = (|| prim(t::<B, 4>(&c, cs)), || prim(t::<B, 4>(&sn, cs)));
        let y = composite::rotary_fwd::<B>(prim(t::<B, 4>(&x, xs)), cp(), sp(), mode).unwrap();
        assert_close("composite y", &host(back::<4>(y)), &ry, 1e-6, 0.0);
        let dx = composite::rotary_bwd::<B>(prim(t::<B, 4>(&w, xs)), cp(), sp(), mode).unwrap();
        assert_close("composite dx", &host(back::<4>(dx)), &rdx, 1e-6, 0.0);
    }
}

#[test]
fn rotary_embedding_refuses_bad_tables_and_tracked_tables_naming_the_parameter() {
    let x = || t::<B, 4>(&data(48, 1), [1, 2, 3, 8]);
    let tab = |s: [usize; 4]| t::<B, 4>(&data(s.iter().product(), 2), s);
    let half = RotaryMode::Half;
    let e = rotary_embedding(x(), tab([1, 2, 1, 6]), tab([1, 2, 1, 6]), half).unwrap_err();
    assert_eq!(param(e), "cos");
    let e = rotary_embedding(x(), tab([1, 2, 1, 8]), tab([1, 1, 1, 8]), half).unwrap_err();
    assert_eq!(param(e), "sin");
    let e = rotary_embedding(
        x(),
        tab([1, 2, 3, 8]),
        tab([1, 2, 3, 8]),
        RotaryMode::Interleave,
    )
    .unwrap_err();
    assert_eq!(param(e.clone()), "cos");
    assert!(e.to_string().contains("interleave"), "{e}");
    let odd = t::<B, 4>(&data(42, 1), [1, 2, 3, 7]);
    let e = rotary_embedding(odd, tab([1, 2, 1, 7]), tab([1, 2, 1, 7]), half).unwrap_err();
    assert_eq!(param(e), "x");
    assert_eq!(
        RotaryMode::from_aclnn(2).map_err(param).unwrap_err(),
        "mode"
    );
    // Under Autodiff the tables are constants: a tracked one is refused, not silently dropped.
    let xa = t::<A, 4>(&data(48, 1), [1, 2, 3, 8]).require_grad();
    let ca = t::<A, 4>(&data(16, 2), [1, 2, 1, 8]).require_grad();
    let sa = t::<A, 4>(&data(16, 3), [1, 2, 1, 8]);
    match rotary_embedding(xa, ca, sa, half) {
        Err(AttnError::Unsupported(m)) => assert!(m.contains("cos"), "{m}"),
        other => panic!("expected unsupported, got {other:?}"),
    }
}
