//! The MoE router (`aclnnMoeGatingTopKSoftmaxV2`) as training runs it: forward on the op and
//! backward composed of the backend's ops under `Autodiff<Ascend>`, against the composite on
//! `Autodiff<NdArray>`, for both orders (renorm 1: gpt-oss, and Qwen3-MoE with
//! `norm_topk_prob`; renorm 0: Qwen3-MoE without). Each case returns the weights, the experts
//! (as floats: they must agree exactly) and the logits' gradient of `sum(y · w)` for a fixed
//! `w`. The logits of a row are distinct multiples of 1/8 (a permutation of `[-2, -1)`), exact
//! in every dtype, so no tie decides an expert on either side.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

use crate::selftest::backend_harness::{host, pair, reference, BackendCase};
use crate::selftest::harness::Tolerance;
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::{moe_gating_top_k_softmax, GatingOrder};

type A = Autodiff<Ascend>;
type N = Autodiff<NdArray>;

const TOKENS: usize = 9;
const EXPERTS: usize = 8;
const K: usize = 3;

/// Row `r`'s logits: `((5j + 3r) mod 8) / 8 − 2` for expert `j`, distinct within the row.
fn logits() -> TensorData {
    let v: Vec<f32> = (0..TOKENS * EXPERTS)
        .map(|i| {
            let (r, j) = (i / EXPERTS, i % EXPERTS);
            ((5 * j + 3 * r) % EXPERTS) as f32 / 8.0 - 2.0
        })
        .collect();
    TensorData::new(v, [TOKENS, EXPERTS])
}

fn ids<B: Backend>(t: Tensor<B, 2, burn::tensor::Int>) -> Vec<f32> {
    t.into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .unwrap_or_default()
        .into_iter()
        .map(|i| i as f32)
        .collect()
}

/// `[y, experts, dx]` on the device and on the reference, or a failed outcome when either
/// side refused.
fn case(dev: &AscendDevice, dt: DType, order: GatingOrder) -> (Vec<f32>, Vec<f32>) {
    let x = Tensor::<A, 2>::from_data(logits(), dev)
        .cast(dt)
        .require_grad();
    let xn = Tensor::<N, 2>::from_data(logits(), &Default::default()).require_grad();
    let (w, wn) = pair([TOKENS, K], 91, dev, dt);
    let (w, wn) = (
        Tensor::<A, 2>::from_inner(w),
        Tensor::<N, 2>::from_inner(wn),
    );
    let (Ok((y, idx)), Ok((yn, idxn))) = (
        moe_gating_top_k_softmax(x.clone(), K, order),
        moe_gating_top_k_softmax(xn.clone(), K, order),
    ) else {
        return (Vec::new(), vec![f32::NAN]);
    };
    let g = (y.clone() * w).sum().backward();
    let gn = (yn.clone() * wn).sum().backward();
    let (Some(dx), Some(dxn)) = (x.grad(&g), xn.grad(&gn)) else {
        return (Vec::new(), vec![f32::NAN]);
    };
    let mut a = host(y.inner().flatten::<1>(0, 1));
    a.extend(ids(idx));
    a.extend(host(dx.flatten::<1>(0, 1)));
    let mut n = reference(yn.inner().flatten::<1>(0, 1));
    n.extend(ids(idxn));
    n.extend(reference(dxn.flatten::<1>(0, 1)));
    (a, n)
}

/// The cases: `(op, name, tolerance, function)`, run by the backend harness in f32, f16, bf16.
pub fn cases() -> Vec<BackendCase> {
    vec![
        (
            "moe_gating",
            "fwd_bwd_9x8_top3_renorm1",
            Tolerance::ACCUMULATING,
            |dev, dt| case(dev, dt, GatingOrder::TopKThenSoftmax),
        ),
        (
            "moe_gating",
            "fwd_bwd_9x8_top3_renorm0",
            Tolerance::ACCUMULATING,
            |dev, dt| case(dev, dt, GatingOrder::SoftmaxThenTopK),
        ),
    ]
}
