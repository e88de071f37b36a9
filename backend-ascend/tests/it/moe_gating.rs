//! The MoE router on the simulation: `aclnnMoeGatingTopKSoftmaxV2` runs (the simulation's
//! launch counter) and gives the composite router's experts and weights for both orders (renorm
//! 1: gpt-oss and Qwen3-MoE with `norm_topk_prob`; renorm 0: Qwen3-MoE without); under
//! `Autodiff<Ascend>` its composite backward gives the gradient Burn's autodiff gives through
//! the composite router on `NdArray`; f64 takes the counted composite. The tests read the
//! fallback counter, so they hold [`crate::exclusive`].
//!
//! Tolerances against `NdArray` (the composite, f32): weights and gradients `1e-6` absolute
//! (the simulation computes in f64 and rounds once; the composite's softmax is f32, weights
//! below 1); bf16 weights `8e-3` (one bf16 rounding of a value below 1, twice: 2 · 2⁻⁸ / 2).

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend_backend::{fallback_count, Ascend, AscendDevice};
use burn_ascend_ops::moe_gating::{composite, moe_gating_top_k_softmax, GatingOrder};
use burn_ascend_ops::MoeGatingBackend;

const OP: &str = "aclnnMoeGatingTopKSoftmaxV2";
const ORDERS: [GatingOrder; 2] = [GatingOrder::TopKThenSoftmax, GatingOrder::SoftmaxThenTopK];

/// Router logits `[7, 6]` without ties: distinct values in [-2, 2].
fn logits() -> Vec<f32> {
    (0..42)
        .map(|i| (((i as u64 * 2654435761) % 997) as f32 / 249.25) - 2.0)
        .collect()
}

fn x<B: Backend>(dev: &B::Device, dt: DType) -> Tensor<B, 2> {
    Tensor::<B, 2>::from_data(TensorData::new(logits(), [7, 6]), dev).cast(dt)
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().unwrap()
}

fn ids<B: Backend>(t: Tensor<B, 2, Int>) -> Vec<i64> {
    t.into_data().convert::<i64>().to_vec().unwrap()
}

fn gap(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn route<B: MoeGatingBackend>(
    dev: &B::Device,
    dt: DType,
    order: GatingOrder,
) -> (Vec<f32>, Vec<i64>) {
    let (y, idx) = moe_gating_top_k_softmax(x::<B>(dev, dt), 3, order).unwrap();
    (host(y), ids(idx))
}

#[test]
fn the_router_on_the_simulation_runs_the_aclnn_op_and_equals_the_composite() {
    let _lock = crate::exclusive();
    let dev = AscendDevice::sim();
    let fallbacks = fallback_count("moe_gating");
    for order in ORDERS {
        let (want_y, want_idx) = route::<NdArray>(&Default::default(), DType::F32, order);
        for (dt, tol) in [(DType::F32, 1e-6), (DType::BF16, 8e-3)] {
            let before = burn_ascend_acl_sim::launches(OP);
            let (y, idx) = route::<Ascend>(&dev, dt, order);
            assert_eq!(
                burn_ascend_acl_sim::launches(OP),
                before + 1,
                "{order:?} {dt:?}"
            );
            assert_eq!(idx, want_idx, "{order:?} {dt:?}: experts");
            let g = gap(&y, &want_y);
            assert!(g <= tol, "{order:?} {dt:?}: weights gap {g}");
        }
    }
    assert_eq!(fallback_count("moe_gating"), fallbacks);
    // renorm 1's weights sum to 1 per token; renorm 0's are the k largest probabilities.
    let (y1, _) = route::<Ascend>(&dev, DType::F32, GatingOrder::TopKThenSoftmax);
    let (y0, _) = route::<Ascend>(&dev, DType::F32, GatingOrder::SoftmaxThenTopK);
    for (a, b) in y1.chunks(3).zip(y0.chunks(3)) {
        let s: f32 = b.iter().sum();
        assert!((a.iter().sum::<f32>() - 1.0).abs() < 1e-6 && s < 1.0);
        // The softmax of the top-k logits is the renormalised top-k of the softmax.
        for (p, q) in a.iter().zip(b) {
            assert!((p - q / s).abs() < 1e-6);
        }
    }
}

/// `d Σ(y · w) / d x` with fixed weights `w`, through `route`.
fn grads<B: AutodiffBackend + MoeGatingBackend>(
    dev: &B::Device,
    route: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>,
) -> Vec<f32> {
    let x = x::<B>(dev, DType::F32).require_grad();
    let y = route(x.clone());
    let w = Tensor::<B, 2>::from_data(
        TensorData::new((0..21).map(|i| (i as f32 * 0.37).sin()).collect(), [7, 3]),
        dev,
    );
    let g = (y * w).sum().backward();
    host(x.grad(&g).unwrap())
}

#[test]
fn the_routers_composite_backward_equals_autodiff_through_the_composite_router() {
    let _lock = crate::exclusive();
    type A = Autodiff<Ascend>;
    type N = Autodiff<NdArray>;
    let dev = AscendDevice::sim();
    for order in ORDERS {
        let before = burn_ascend_acl_sim::launches(OP);
        let ours = grads::<A>(&dev, |x| moe_gating_top_k_softmax(x, 3, order).unwrap().0);
        assert_eq!(burn_ascend_acl_sim::launches(OP), before + 1, "{order:?}");
        // Burn's own autodiff of the composite (gather, softmax) on NdArray.
        let want = grads::<N>(&Default::default(), |x| {
            let (y, _) =
                composite::moe_gating_top_k_softmax::<N>(x.into_primitive().tensor(), 3, order)
                    .unwrap();
            Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(y))
        });
        let g = gap(&ours, &want);
        eprintln!("router backward {order:?}: gap {g:.1e}");
        assert!(g <= 1e-6, "{order:?}: gradient gap {g}");
        assert!(want.iter().any(|v| v.abs() > 1e-3), "a trivial gradient");
    }
}

#[test]
fn f64_routing_on_ascend_takes_the_counted_composite() {
    let _lock = crate::exclusive();
    let dev = AscendDevice::sim();
    let fallbacks = fallback_count("moe_gating");
    let before = burn_ascend_acl_sim::launches(OP);
    let (_, idx) = route::<Ascend>(&dev, DType::F64, GatingOrder::TopKThenSoftmax);
    let (_, want) = route::<NdArray>(
        &Default::default(),
        DType::F32,
        GatingOrder::TopKThenSoftmax,
    );
    assert_eq!(idx, want);
    assert_eq!(burn_ascend_acl_sim::launches(OP), before);
    assert_eq!(fallback_count("moe_gating"), fallbacks + 1);
}

#[test]
fn a_bad_k_is_refused_naming_it_before_any_launch() {
    // Its input is uploaded to the device: never beside a test reading the memory pool.
    let _lock = crate::shared();
    let dev = AscendDevice::sim();
    for k in [0, 7, 2000] {
        let e = moe_gating_top_k_softmax(
            x::<Ascend>(&dev, DType::F32),
            k,
            GatingOrder::TopKThenSoftmax,
        )
        .unwrap_err();
        assert_eq!(e.param(), Some("k"), "{e}");
    }
}
