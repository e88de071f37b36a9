//! The attention ops through `AttentionBackend` on `Ascend` (simulation) against `NdArray`, and
//! a small training run (Linear → varlen attention → Linear, Adam) on `Autodiff<Ascend>`
//! against `Autodiff<NdArray>`, step by step.

use burn::backend::{Autodiff, NdArray};
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_ascend_backend::{fallback_count, Ascend, AscendDevice};
use burn_ascend_ops::{
    flash_attention_varlen, flash_spec, varlen_score, varlen_score_grad, AttentionBackend,
    FlashAttnOptions,
};

fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            ((x >> 7) % 2000) as f32 / 1000.0 * scale - scale
        })
        .collect()
}

fn t<B: Backend, const D: usize>(v: Vec<f32>, shape: [usize; D], dev: &B::Device) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(v, shape), dev)
}

fn close<B1: Backend, B2: Backend, const D: usize>(a: Tensor<B1, D>, b: Tensor<B2, D>, what: &str) {
    let (a, b) = (a.into_data(), b.into_data());
    let tol = Tolerance::rel_abs(1e-4, 1e-5);
    eprintln!("comparing {what}");
    a.assert_approx_eq::<f32>(&b, tol);
}

/// Forward and backward of varlen attention (causal, sinks, GQA, 3 sequences) on both
/// backends.
fn varlen_case<B: AttentionBackend>(dev: &B::Device) -> Vec<Tensor<B, 3>> {
    let (n, nkv, d) = (4, 2, 8);
    let cu = [0i64, 3, 8, 12];
    let tq = 12;
    let q = t::<B, 3>(values(tq * n * d, 1, 1.0), [tq, n, d], dev);
    let k = t::<B, 3>(values(tq * nkv * d, 2, 1.0), [tq, nkv, d], dev);
    let v = t::<B, 3>(values(tq * nkv * d, 3, 1.0), [tq, nkv, d], dev);
    let sink = t::<B, 1>(values(n, 4, 0.5), [n], dev);
    let opts = FlashAttnOptions::<B> {
        causal: true,
        sinks: Some(sink.clone()),
        ..Default::default()
    };
    let spec = flash_spec::<B>([tq, n, d], &cu, &cu, &opts).expect("valid spec");
    let fwd =
        varlen_score(q.clone(), k.clone(), v.clone(), Some(sink.clone()), &spec).expect("forward");
    let dy = t::<B, 3>(values(tq * n * d, 5, 1.0), [tq, n, d], dev);
    let g = varlen_score_grad(q, k, v, Some(sink), &fwd, dy, &spec).expect("backward");
    vec![
        fwd.attention_out,
        fwd.softmax_max,
        fwd.softmax_sum,
        g.dq,
        g.dk,
        g.dv,
        g.dsink.expect("dsink").reshape([1, 1, n]),
    ]
}

#[test]
fn varlen_forward_and_backward_match_ndarray_natively() {
    let _lock = crate::exclusive();
    let before = (fallback_count("varlen_fwd"), fallback_count("varlen_bwd"));
    let a = varlen_case::<Ascend>(&AscendDevice::sim());
    let n = varlen_case::<NdArray>(&Default::default());
    let names = ["out", "softmaxMax", "softmaxSum", "dq", "dk", "dv", "dsink"];
    for ((a, n), name) in a.into_iter().zip(n).zip(names) {
        close(a, n, name);
    }
    // the device path ran (no host fallback for these two ops)
    assert_eq!(
        (fallback_count("varlen_fwd"), fallback_count("varlen_bwd")),
        before
    );
}

/// Linear → varlen attention (causal, learned sinks) → Linear.
#[derive(Module, Debug)]
struct Net<B: Backend> {
    qkv: Linear<B>,
    out: Linear<B>,
    sinks: Param<Tensor<B, 1>>,
}

const F: usize = 6;
const N: usize = 2;
const D: usize = 4;
const T: usize = 7;
const CU: [i64; 3] = [0, 3, 7];

fn net<B: Backend>(dev: &B::Device) -> Net<B> {
    let mut qkv = LinearConfig::new(F, 3 * N * D).init(dev);
    qkv.weight = Param::from_tensor(t(values(F * 3 * N * D, 11, 0.4), [F, 3 * N * D], dev));
    qkv.bias = Some(Param::from_tensor(t(
        values(3 * N * D, 12, 0.1),
        [3 * N * D],
        dev,
    )));
    let mut out = LinearConfig::new(N * D, F).init(dev);
    out.weight = Param::from_tensor(t(values(N * D * F, 13, 0.4), [N * D, F], dev));
    out.bias = Some(Param::from_tensor(t(values(F, 14, 0.1), [F], dev)));
    Net {
        qkv,
        out,
        sinks: Param::from_tensor(t(values(N, 15, 0.5), [N], dev)),
    }
}

impl<B: AttentionBackend> Net<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let qkv = self.qkv.forward(x).reshape([T, 3, N, D]);
        let part = |i: usize| qkv.clone().slice([0..T, i..i + 1]).reshape([T, N, D]);
        let opts = FlashAttnOptions {
            causal: true,
            sinks: Some(self.sinks.val()),
            ..Default::default()
        };
        let o =
            flash_attention_varlen(part(0), part(1), part(2), &CU, &CU, opts).expect("attention");
        self.out.forward(o.reshape([T, N * D]))
    }
}

/// Three Adam steps; returns the losses and the final parameters.
fn train<B: burn::tensor::backend::AutodiffBackend + AttentionBackend>(
    dev: &B::Device,
) -> (Vec<f32>, Vec<TensorData>) {
    let mut model = net::<B>(dev);
    let mut optim = AdamConfig::new().init::<B, Net<B>>();
    let x = t::<B, 2>(values(T * F, 21, 1.0), [T, F], dev);
    let y = t::<B, 2>(values(T * F, 22, 1.0), [T, F], dev);
    let mut losses = Vec::new();
    for _ in 0..3 {
        let pred = model.forward(x.clone());
        let loss = (pred - y.clone()).powi_scalar(2).mean();
        losses.push(loss.clone().into_scalar().elem::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    let params = vec![
        model.qkv.weight.val().into_data(),
        model.out.weight.val().into_data(),
        model.sinks.val().into_data(),
    ];
    (losses, params)
}

use burn::tensor::ElementConversion;

#[test]
fn training_on_autodiff_ascend_matches_autodiff_ndarray_step_by_step() {
    let _lock = crate::exclusive();
    let before = fallback_count("varlen_bwd");
    let (la, pa) = train::<Autodiff<Ascend>>(&AscendDevice::sim());
    let (ln, pn) = train::<Autodiff<NdArray>>(&Default::default());
    for (step, (a, n)) in la.iter().zip(&ln).enumerate() {
        assert!(
            (a - n).abs() <= 1e-4 * n.abs().max(1.0),
            "step {step}: loss {a} on Ascend vs {n} on NdArray"
        );
    }
    assert!(la[2] < la[0], "the loss decreases: {la:?}");
    for (a, n) in pa.iter().zip(&pn) {
        a.assert_approx_eq::<f32>(n, Tolerance::rel_abs(1e-3, 1e-4));
    }
    // the fused backward ran on the device path
    assert_eq!(fallback_count("varlen_bwd"), before);
}
