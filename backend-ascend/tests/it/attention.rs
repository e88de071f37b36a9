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
    FlashAttnOptions, VarlenBackend,
};
use burn_ascend_test_support::{assert_close, check_close};

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

/// CANN's dsink post step (`flash_attention_score_grad_post.h` ~1029–1080) reduces its partial
/// sums in chunks of `2·postUbBaseSize` bytes (62 720 at D = 8 in f32, 31 360 floats) up to
/// 9.0.0: 8.5.0-beta.1 keeps only the last chunk, 8.5.0 and 9.0.0 drop the last one when the
/// size is an exact multiple; 9.1.0 reduces per-core partials once. 4000 sequences of 2 tokens
/// give 4000·256·256/8192 = 32 000 partials per head (past one chunk), 3920 exactly 31 360 (one
/// chunk, read as empty), 3900 (31 200) stay below. The simulated kernel reproduces each
/// release's post step; the backend's dsink matches the CPU kernels' at every size on every
/// release (|Δ| ≤ 1e-5 + 1e-4·|x|): computed on the device from the statistics up to 9.0.0,
/// CANN's own from 9.1.0 (bit for bit the kernel's).
#[test]
fn dsink_is_right_on_ascend_past_canns_post_chunk_threshold_where_the_kernel_is_wrong() {
    use burn_ascend_backend::attention::builders;
    use burn_ascend_cann::acl::{DataType, TensorDesc};
    use burn_ascend_contract::CannRelease;
    use burn_ascend_ops::{VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenSpec};

    let _lock = crate::exclusive();
    let (n, d, len) = (2usize, 8usize, 2usize);
    for (batch, size) in [
        (4000usize, "past"),
        (3920, "exact multiple"),
        (3900, "below"),
    ] {
        let tq = batch * len;
        let cu: Vec<i64> = (1..=batch as i64).map(|b| b * len as i64).collect();
        let spec = VarlenSpec::new(cu.clone(), cu, n, 0.35);
        let (qv, kv, vv, dyv) = (
            values(tq * n * d, 11, 1.0),
            values(tq * n * d, 12, 1.0),
            values(tq * n * d, 13, 1.0),
            values(tq * n * d, 14, 1.0),
        );
        let sinkv = vec![0.3f32, -0.4];
        fn run<B: AttentionBackend>(
            dev: &B::Device,
            spec: &VarlenSpec,
            [q, k, v, dy, sink]: [&[f32]; 5],
            shape: [usize; 3],
        ) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
            let ten = |x: &[f32]| t::<B, 3>(x.to_vec(), shape, dev);
            let sink = t::<B, 1>(sink.to_vec(), [sink.len()], dev);
            let fwd = varlen_score(ten(q), ten(k), ten(v), Some(sink.clone()), spec).unwrap();
            let g =
                varlen_score_grad(ten(q), ten(k), ten(v), Some(sink), &fwd, ten(dy), spec).unwrap();
            let f = |x: Tensor<B, 3>| x.into_data().to_vec::<f32>().unwrap();
            (
                f(fwd.attention_out),
                f(fwd.softmax_max),
                f(fwd.softmax_sum),
                g.dsink.unwrap().into_data().to_vec::<f32>().unwrap(),
            )
        }
        let shape = [tq, n, d];
        let inputs = [&qv[..], &kv[..], &vv[..], &dyv[..], &sinkv[..]];
        let (_, _, _, want) = run::<NdArray>(&Default::default(), &spec, inputs, shape);
        let close = |got: &[f32]| check_close("dsink", got, &want, 1e-5, 1e-4).is_ok();
        assert!(
            want.iter().all(|w| w.abs() > 1e-2),
            "dsink is not trivial: {want:?}"
        );
        for release in CannRelease::KNOWN {
            burn_ascend_acl_sim::set_cann_release(Some(release));
            // Only the backend's own dsink launches `aclnnExp` (exp(sink − max)) here.
            let exps = burn_ascend_acl_sim::launches("aclnnExp");
            let (out, smax, ssum, ascend) =
                run::<Ascend>(&AscendDevice::sim(), &spec, inputs, shape);
            let own = burn_ascend_acl_sim::launches("aclnnExp") > exps;
            assert_eq!(
                own,
                !release.dsink_post_step().right_at_every_size(),
                "{release}: the backend computes dsink itself only before 9.1.0"
            );
            let what = format!("{release} {size}");
            assert!(
                close(&ascend),
                "{what}: backend dsink {ascend:?} vs CPU {want:?}"
            );

            // The raw simulated kernel, fed the same forward: the backend's own call.
            let rt = burn_ascend_acl_sim::runtime().unwrap();
            let up = |v: &[f32], dims: &[usize]| {
                let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                rt.upload(TensorDesc::contiguous(dims, DataType::Float).unwrap(), &b)
                    .unwrap()
            };
            let ts = [
                up(&qv, &shape),
                up(&kv, &shape),
                up(&vv, &shape),
                up(&dyv, &shape),
                up(&smax, &[tq, n, 8]),
                up(&ssum, &[tq, n, 8]),
                up(&out, &shape),
                up(&sinkv, &[n]),
            ];
            let gs = [
                up(&vec![0.0; tq * n * d], &shape),
                up(&vec![0.0; tq * n * d], &shape),
                up(&vec![0.0; tq * n * d], &shape),
                up(&[0.0; 2], &[n]),
            ];
            {
                let h: Vec<_> = ts.iter().map(|t| t.handle().unwrap()).collect();
                let g: Vec<_> = gs.iter().map(|t| t.handle().unwrap()).collect();
                builders::varlen_grad(
                    &rt,
                    &spec,
                    n,
                    DataType::Float,
                    &VarlenGradInputs {
                        inputs: VarlenInputs {
                            sink: Some(&h[7]),
                            ..VarlenInputs::new(&h[0], &h[1], &h[2])
                        },
                        dy: &h[3],
                        softmax_max: &h[4],
                        softmax_sum: &h[5],
                        attention_in: &h[6],
                    },
                    &VarlenGrads {
                        dq: &g[0],
                        dk: &g[1],
                        dv: &g[2],
                        dpse: None,
                        dsink: Some(&g[3]),
                    },
                )
                .unwrap();
            }
            let raw: Vec<f32> = gs[3]
                .download()
                .unwrap()
                .chunks(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let right = matches!(
                (release, size),
                (CannRelease::V9_1_0, _)
                    | (_, "below")
                    | (CannRelease::V8_5_0 | CannRelease::V9_0_0, "past")
            );
            assert_eq!(
                close(&raw),
                right,
                "{what}: raw kernel dsink {raw:?} vs CPU {want:?}"
            );
            if release.dsink_post_step().right_at_every_size() {
                assert_eq!(ascend, raw, "{what}: the backend takes CANN's dsinkOut");
            }
        }
    }
    burn_ascend_acl_sim::set_cann_release(None);
}

/// dpse of an external pse (pseType 0: dS, pseType 1: scale·dS) on `Ascend` — computed on the
/// device from dS, since no arch32 grad kernel writes `dpseOut` — and by the composite, against
/// the CPU kernels (checked against finite differences in the kernels crate); the pse as an
/// untracked tensor of the carrier and as a tracked device tensor under `Autodiff` (no host
/// fallback);
/// |Δ| ≤ 1e-5 + 1e-4·|x|.
#[test]
fn dpse_on_ascend_and_the_composite_matches_the_cpu_kernels_for_both_outer_pse_types() {
    use burn_ascend_contract::varlen::PseType;
    use burn_ascend_ops::backend::{VarlenGradInputs, VarlenInputs};
    use burn_ascend_ops::varlen::composite;
    use burn_ascend_ops::VarlenGrads;
    use burn_ascend_ops::VarlenSpec;

    let _lock = crate::exclusive();
    let (n, nkv, d) = (4usize, 2usize, 8usize);
    let (sq, skv) = ([3usize, 5, 2], [4usize, 5, 3]);
    let (tq, tkv) = (10usize, 12usize);
    let total: usize = sq.iter().zip(&skv).map(|(a, b)| n * a * b).sum();
    for pse_type in [PseType::OuterMulAdd, PseType::OuterAddMul] {
        let mut spec = VarlenSpec::from_lengths(&sq, &skv, n, 0.35);
        spec.attrs.pse_type = pse_type;
        let pse = values(total, 21, 1.0);
        type Grads<B> = fn(
            VarlenGradInputs<burn::tensor::ops::FloatTensor<B>>,
            &VarlenSpec,
        ) -> burn_ascend_ops::error::Result<
            VarlenGrads<burn::tensor::ops::FloatTensor<B>>,
        >;
        /// dpse of the fused backward `bwd` (the backend's own `varlen_bwd` or the composite)
        /// after the backend's forward, the pse an untracked tensor of the carrier.
        fn grads<B: AttentionBackend>(
            dev: &B::Device,
            spec: &VarlenSpec,
            pse: &[f32],
            shapes: ([usize; 3], [usize; 3]),
            bwd: Grads<B>,
        ) -> Vec<f32> {
            let (qs, ks) = shapes;
            let len = |s: [usize; 3]| s.iter().product::<usize>();
            let p =
                |v: Vec<f32>, s: &[usize]| B::float_from_data(TensorData::new(v, s.to_vec()), dev);
            let inputs = VarlenInputs {
                sink: Some(p(values(qs[1], 25, 0.5), &[qs[1]])),
                pse: Some(p(pse.to_vec(), &[pse.len()])),
                ..VarlenInputs::new(
                    p(values(len(qs), 22, 1.0), &qs),
                    p(values(len(ks), 23, 1.0), &ks),
                    p(values(len(ks), 24, 1.0), &ks),
                )
            };
            let fwd = B::varlen_fwd(inputs.clone(), spec).unwrap();
            let g = bwd(
                VarlenGradInputs {
                    inputs,
                    dy: p(values(len(qs), 26, 1.0), &qs),
                    attention_in: fwd.attention_out,
                    softmax_max: fwd.softmax_max,
                    softmax_sum: fwd.softmax_sum,
                },
                spec,
            )
            .unwrap();
            Tensor::<B, 1>::from_primitive(burn::tensor::TensorPrimitive::Float(
                g.dpse.expect("dpse for an external pse"),
            ))
            .into_data()
            .to_vec::<f32>()
            .unwrap()
        }
        /// dpse as the gradient of a tracked pse tensor under `Autodiff`: the tensor reaches
        /// the device op as it is and receives `dpse`.
        fn tensor_grads<B: AttentionBackend>(
            dev: &B::Device,
            spec: &VarlenSpec,
            pse: &[f32],
            shapes: ([usize; 3], [usize; 3]),
        ) -> Vec<f32> {
            type A<B> = Autodiff<B>;
            let (qs, ks) = shapes;
            let len = |s: [usize; 3]| s.iter().product::<usize>();
            let q = t::<A<B>, 3>(values(len(qs), 22, 1.0), qs, dev);
            let k = t::<A<B>, 3>(values(len(ks), 23, 1.0), ks, dev);
            let v = t::<A<B>, 3>(values(len(ks), 24, 1.0), ks, dev);
            let sink = t::<A<B>, 1>(values(qs[1], 25, 0.5), [qs[1]], dev);
            let dy = t::<A<B>, 3>(values(len(qs), 26, 1.0), qs, dev);
            let pse = t::<A<B>, 1>(pse.to_vec(), [pse.len()], dev).require_grad();
            let fwd =
                burn_ascend_ops::varlen_score_with_pse(q, k, v, Some(sink), pse.clone(), spec)
                    .unwrap();
            let grads = (fwd.attention_out * dy).sum().backward();
            pse.grad(&grads)
                .expect("the pse tensor receives dpse")
                .into_data()
                .to_vec::<f32>()
                .unwrap()
        }
        let shapes = ([tq, n, d], [tkv, nkv, d]);
        let nd = Default::default();
        let want = grads::<NdArray>(
            &nd,
            &spec,
            &pse,
            shapes,
            <NdArray as VarlenBackend>::varlen_bwd,
        );
        let watched = ["varlen_fwd", "varlen_bwd"];
        let before = watched.map(fallback_count);
        let ascend = grads::<Ascend>(
            &AscendDevice::sim(),
            &spec,
            &pse,
            shapes,
            Ascend::varlen_bwd,
        );
        let ascend_tensor = tensor_grads::<Ascend>(&AscendDevice::sim(), &spec, &pse, shapes);
        assert_eq!(
            watched.map(fallback_count),
            before,
            "the varlen op with a pse tensor went through the host fallback"
        );
        let nd_tensor = tensor_grads::<NdArray>(&nd, &spec, &pse, shapes);
        // The composite on NdArray, called directly (NdArray itself runs the CPU kernels).
        let comp = grads::<NdArray>(&nd, &spec, &pse, shapes, composite::varlen_bwd::<NdArray>);
        assert_eq!(want.len(), total);
        assert!(want.iter().any(|x| x.abs() > 1e-2), "dpse is not trivial");
        for (what, got) in [
            ("ascend", &ascend),
            ("composite", &comp),
            ("ascend, pse tensor", &ascend_tensor),
            ("ndarray, pse tensor", &nd_tensor),
        ] {
            assert_eq!(got.len(), total, "{what}");
            let what = format!("{what} dpse ({pse_type:?}) vs CPU");
            assert_close(&what, got, &want, 1e-5, 1e-4);
        }
    }
}

/// Burn's own `ModuleOps::attention` (the op `burn::tensor::module::attention` calls) on
/// `Ascend` in F32 and with a value head dim of its own, so Burn's composite road (F16/BF16
/// and PFA: `burn_attention.rs`): NdArray's answer for a boolean mask with a fully masked row,
/// an additive bias, causal masking of a cross-attention shape, a custom scale and a softcap —
/// with no host round trip, neither for the op as a whole nor for any op of Burn's composite.
#[test]
fn burns_module_attention_runs_on_the_device_and_matches_ndarray() {
    use burn::tensor::module::attention;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn::tensor::Bool;

    let (b, h, sq, sk, d, dv) = (2, 3, 4, 6, 8, 5);
    let sim = AscendDevice::sim();
    let nd = Default::default();
    // Masks position (b, h, i, j) when (i + 2j + h) % 5 == 0; row (0, 0, 1) is masked whole.
    let mask: Vec<bool> = (0..b * h * sq * sk)
        .map(|x| {
            let (j, i, hh, bb) = (
                x % sk,
                (x / sk) % sq,
                (x / (sk * sq)) % h,
                x / (sk * sq * h),
            );
            (bb == 0 && hh == 0 && i == 1) || (i + 2 * j + hh) % 5 == 0
        })
        .collect();
    let watched = [
        "attention",
        "float_matmul",
        "float_transpose",
        "float_mul_scalar",
        "float_div_scalar",
        "float_tanh",
        "float_mask_fill",
        "float_add",
        "float_max_dim",
        "float_clamp_min",
        "float_sub",
        "float_exp",
        "float_sum_dim",
        "float_div",
        "int_arange",
        "int_reshape",
        "int_add_scalar",
        "int_lower",
        "bool_reshape",
        "bool_expand",
    ];
    for (causal, scale, softcap, bias) in [
        (false, None, None, false),
        (true, Some(0.3), None, true),
        (true, None, Some(2.0), true),
    ] {
        let options = AttentionModuleOptions {
            scale,
            softcap,
            is_causal: causal,
        };
        let run = |dev_a: &AscendDevice| {
            let q = t::<Ascend, 4>(values(b * h * sq * d, 1, 1.0), [b, h, sq, d], dev_a);
            let k = t::<Ascend, 4>(values(b * h * sk * d, 2, 1.0), [b, h, sk, d], dev_a);
            let v = t::<Ascend, 4>(values(b * h * sk * dv, 3, 1.0), [b, h, sk, dv], dev_a);
            let m = Tensor::<Ascend, 4, Bool>::from_data(
                TensorData::new(mask.clone(), [b, h, sq, sk]),
                dev_a,
            );
            let bias = bias
                .then(|| t::<Ascend, 4>(values(b * h * sq * sk, 4, 0.5), [b, h, sq, sk], dev_a));
            attention(q, k, v, Some(m), bias, options)
        };
        let before = watched.map(fallback_count);
        let got = run(&sim);
        let got_data = got.into_data();
        assert_eq!(
            watched.map(fallback_count),
            before,
            "an op of the attention went through the host (causal {causal}, scale {scale:?}, softcap {softcap:?})"
        );
        let q = t::<NdArray, 4>(values(b * h * sq * d, 1, 1.0), [b, h, sq, d], &nd);
        let k = t::<NdArray, 4>(values(b * h * sk * d, 2, 1.0), [b, h, sk, d], &nd);
        let v = t::<NdArray, 4>(values(b * h * sk * dv, 3, 1.0), [b, h, sk, dv], &nd);
        let m = Tensor::<NdArray, 4, Bool>::from_data(
            TensorData::new(mask.clone(), [b, h, sq, sk]),
            &nd,
        );
        let bias_nd =
            bias.then(|| t::<NdArray, 4>(values(b * h * sq * sk, 4, 0.5), [b, h, sq, sk], &nd));
        let want = attention(q, k, v, Some(m), bias_nd, options).into_data();
        got_data.assert_approx_eq::<f32>(&want, Tolerance::rel_abs(1e-5, 1e-6));
        // The fully masked row gives zeros (Burn's NaN-safe softmax), not NaN.
        let row: Vec<f32> = got_data.to_vec::<f32>().unwrap()[dv..2 * dv].to_vec();
        assert!(row.iter().all(|x| *x == 0.0), "masked row {row:?}");
    }
}
