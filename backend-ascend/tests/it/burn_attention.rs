//! Burn's own `burn::tensor::module::attention` (`ModuleOps::attention`) on `Ascend`
//! (simulation, device 9) against Burn's composite on `NdArray` (f32, on the same inputs
//! rounded to the tested dtype): F16 and BF16 go to one `aclnnPromptFlashAttentionV3` launch
//! in every mask / bias / causal / scale case, softcap, F32 and a value head dim of its own take
//! the counted composite (`attention_composite`).
//!
//! Tolerances: the simulation computes in f64 and rounds the output once to the dtype, NdArray
//! in f32, so the difference is the output's rounding: 2⁻¹¹ relative for F16, 2⁻⁸ for BF16
//! (plus the same absolute amount for outputs near 0).

use burn::backend::NdArray;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, DType, Tensor, TensorData, Tolerance};
use half::{bf16, f16};

use burn_ascend_backend::collective::simulate_devices;
use burn_ascend_backend::{device_counters, fallback_count, Ascend, AscendDevice, AscendKind};

/// The counter of calls that run Burn's composite instead of the aclnn op.
const COMPOSITE: &str = "attention_composite";

fn device() -> AscendDevice {
    simulate_devices(10);
    AscendDevice {
        kind: AscendKind::Simulation,
        index: 9,
    }
}

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

/// `v` rounded to `dt` (so both backends see the same inputs).
fn round(v: Vec<f32>, dt: DType) -> Vec<f32> {
    v.into_iter()
        .map(|x| match dt {
            DType::F16 => f16::from_f32(x).to_f32(),
            DType::BF16 => bf16::from_f32(x).to_f32(),
            _ => x,
        })
        .collect()
}

/// Whether position `(b, h, i, j)` is masked.
type MaskFn = fn(usize, usize, usize, usize) -> bool;

/// One call's inputs, as host data.
#[derive(Clone)]
struct Case {
    what: &'static str,
    /// `[B, N, Sq, Sk, D, Dv]`.
    dims: [usize; 6],
    /// Key/value heads (N, or 1).
    kv_heads: usize,
    /// Masks `(b, h, i, j)` when true; `None`: no mask.
    mask: Option<MaskFn>,
    /// The mask built as `[B, 1, Sq, Sk]` and expanded over the heads.
    shared_mask: bool,
    bias: bool,
    options: AttentionModuleOptions,
}

impl Case {
    fn new(what: &'static str, dims: [usize; 6]) -> Self {
        Self {
            what,
            dims,
            kv_heads: dims[1],
            mask: None,
            shared_mask: false,
            bias: false,
            options: AttentionModuleOptions::default(),
        }
    }

    /// Burn's attention of this case on backend `B` (float dtype `dt`).
    fn run<B: burn::tensor::backend::Backend>(&self, dt: DType, dev: &B::Device) -> Tensor<B, 4> {
        let [b, n, sq, sk, d, dv] = self.dims;
        let nkv = self.kv_heads;
        let float = |v: Vec<f32>, shape: [usize; 4]| {
            Tensor::<B, 4>::from_data(TensorData::new(round(v, dt), shape), dev).cast(dt)
        };
        let q = float(values(b * n * sq * d, 1, 1.0), [b, n, sq, d]);
        let k = float(values(b * nkv * sk * d, 2, 1.0), [b, nkv, sk, d]);
        let v = float(values(b * nkv * sk * dv, 3, 1.0), [b, nkv, sk, dv]);
        let heads = if self.shared_mask { 1 } else { n };
        let mask = self.mask.map(|f| {
            let m: Vec<bool> = (0..b * heads * sq * sk)
                .map(|x| {
                    let (j, i) = (x % sk, (x / sk) % sq);
                    let (h, bb) = ((x / (sk * sq)) % heads, x / (sk * sq * heads));
                    f(bb, h, i, j)
                })
                .collect();
            Tensor::<B, 4, Bool>::from_data(TensorData::new(m, [b, heads, sq, sk]), dev)
                .expand([b, n, sq, sk])
        });
        let bias = self
            .bias
            .then(|| float(values(b * n * sq * sk, 4, 0.5), [b, n, sq, sk]));
        attention(q, k, v, mask, bias, self.options)
    }
}

/// Position `(b, h, i, j)` masked when `(i + 2j + h) % 5 == 0`, and row `(0, 0, 1)` whole.
fn per_head_mask(b: usize, h: usize, i: usize, j: usize) -> bool {
    (b == 0 && h == 0 && i == 1) || (i + 2 * j + h).is_multiple_of(5)
}

/// Shared by the heads: `(i + j + b).is_multiple_of(3)`, and row `(1, ·, 2)` whole.
fn shared_mask(b: usize, _h: usize, i: usize, j: usize) -> bool {
    (b == 1 && i == 2) || (i + j + b).is_multiple_of(3)
}

fn cases() -> Vec<Case> {
    let cross = [2, 3, 4, 6, 16, 16];
    let square = [2, 3, 5, 5, 16, 16];
    let causal = AttentionModuleOptions {
        is_causal: true,
        ..Default::default()
    };
    vec![
        Case::new("no mask", cross),
        Case {
            mask: Some(per_head_mask),
            ..Case::new("per-head bool mask with a fully masked row", cross)
        },
        Case {
            mask: Some(shared_mask),
            shared_mask: true,
            ..Case::new("head-shared bool mask with a fully masked row", cross)
        },
        Case {
            bias: true,
            ..Case::new("additive bias", cross)
        },
        Case {
            options: causal,
            ..Case::new("causal, Sq == Sk", square)
        },
        Case {
            options: causal,
            ..Case::new("causal, Sq < Sk", cross)
        },
        Case {
            options: causal,
            ..Case::new(
                "causal, Sq > Sk (the top rows fully masked)",
                [2, 3, 6, 4, 16, 16],
            )
        },
        Case {
            mask: Some(per_head_mask),
            bias: true,
            options: AttentionModuleOptions {
                is_causal: true,
                scale: Some(0.3),
                softcap: None,
            },
            ..Case::new("causal, Sq < Sk, per-head mask, bias, scale 0.3", cross)
        },
        Case {
            mask: Some(shared_mask),
            shared_mask: true,
            options: causal,
            ..Case::new("causal with a head-shared mask", square)
        },
        Case {
            options: AttentionModuleOptions {
                scale: Some(0.7),
                ..Default::default()
            },
            ..Case::new("custom scale", cross)
        },
        Case {
            kv_heads: 1,
            bias: true,
            mask: Some(shared_mask),
            shared_mask: true,
            ..Case::new("one key/value head broadcast over the query heads", cross)
        },
    ]
}

/// PFA's output against NdArray's: one rounding of the output to `dt`.
fn tolerance(dt: DType) -> Tolerance<f32> {
    match dt {
        DType::F16 => Tolerance::rel_abs(1.0 / 2048.0, 1.0 / 2048.0),
        DType::BF16 => Tolerance::rel_abs(1.0 / 256.0, 1.0 / 256.0),
        _ => Tolerance::rel_abs(1e-5, 1e-6),
    }
}

/// Burn's composite in `dt` against NdArray's in f32: a rounding to `dt` after each of its
/// ops (scores, softmax, product), so eight units of the dtype's last place.
fn composite_tolerance(dt: DType) -> Tolerance<f32> {
    match dt {
        DType::F16 => Tolerance::rel_abs(8.0 / 2048.0, 8.0 / 2048.0),
        DType::BF16 => Tolerance::rel_abs(8.0 / 256.0, 8.0 / 256.0),
        _ => Tolerance::rel_abs(1e-5, 1e-6),
    }
}

/// The case on both backends: the composite counter's increase on `Ascend`, and the two
/// outputs (Ascend's in f32).
fn compare(case: &Case, dt: DType) -> (u64, TensorData, TensorData) {
    let dev = device();
    let before = fallback_count(COMPOSITE);
    let got = case.run::<Ascend>(dt, &dev).cast(DType::F32).into_data();
    let composite = fallback_count(COMPOSITE) - before;
    let want = case
        .run::<NdArray>(DType::F32, &Default::default())
        .into_data();
    (composite, got, want)
}

/// Every mask / bias / causal / scale case in F16 and BF16: PFA (the composite counter does
/// not move) gives NdArray's composite answer, fully masked rows (a whole mask row, or the
/// top rows of a causal Sq > Sk) are zeros.
#[test]
fn burns_attention_in_f16_and_bf16_runs_as_pfa_and_matches_ndarray_in_every_case() {
    let _lock = crate::exclusive();
    for dt in [DType::F16, DType::BF16] {
        for case in cases() {
            let (composite, got, want) = compare(&case, dt);
            assert_eq!(composite, 0, "{} ({dt:?}) took the composite", case.what);
            eprintln!("{} ({dt:?})", case.what);
            got.assert_approx_eq::<f32>(&want, tolerance(dt));
            let [_, n, sq, sk, _, dv] = case.dims;
            let got = got.to_vec::<f32>().unwrap();
            let zero_row = |b: usize, h: usize, i: usize| {
                let at = ((b * n + h) * sq + i) * dv;
                assert!(
                    got[at..at + dv].iter().all(|x| *x == 0.0),
                    "{} ({dt:?}): masked row ({b}, {h}, {i}) = {:?}",
                    case.what,
                    &got[at..at + dv]
                );
            };
            match (case.mask, case.shared_mask) {
                (Some(_), false) => zero_row(0, 0, 1),
                (Some(_), true) => (0..n).for_each(|h| zero_row(1, h, 2)),
                (None, _) if case.options.is_causal && sq > sk => {
                    (0..sq - sk).for_each(|i| zero_row(0, 0, i))
                }
                (None, _) => {}
            }
        }
    }
}

/// On the device counters: a masked, biased F16 call is one aclnn launch and no upload (and a
/// causal one without a mask too), where Burn's composite (softcap) launches more than ten.
#[test]
fn burns_attention_is_one_aclnn_launch_where_the_composite_is_many() {
    let _lock = crate::exclusive();
    let dev = device();
    let cross = [2, 3, 4, 6, 16, 16];
    let launches = |case: &Case| {
        let [b, n, sq, sk, d, dv] = case.dims;
        let dt = DType::F16;
        let float = |v: Vec<f32>, shape: [usize; 4]| {
            Tensor::<Ascend, 4>::from_data(TensorData::new(v, shape), &dev).cast(dt)
        };
        let q = float(values(b * n * sq * d, 1, 1.0), [b, n, sq, d]);
        let k = float(values(b * n * sk * d, 2, 1.0), [b, n, sk, d]);
        let v = float(values(b * n * sk * dv, 3, 1.0), [b, n, sk, dv]);
        let m: Vec<bool> = (0..b * n * sq * sk).map(|x| x % 7 == 3).collect();
        let mask = case.mask.is_some().then(|| {
            Tensor::<Ascend, 4, Bool>::from_data(TensorData::new(m, [b, n, sq, sk]), &dev)
        });
        let bias = case
            .bias
            .then(|| float(values(b * n * sq * sk, 4, 0.5), [b, n, sq, sk]));
        let before = device_counters(&dev);
        let out = attention(q, k, v, mask, bias, case.options);
        let after = device_counters(&dev);
        drop(out);
        let uploads = after.uploads - before.uploads;
        (after.launches - before.launches - uploads, uploads)
    };
    let masked = Case {
        mask: Some(per_head_mask),
        bias: true,
        ..Case::new("mask and bias", cross)
    };
    let causal = Case {
        options: AttentionModuleOptions {
            is_causal: true,
            ..Default::default()
        },
        ..Case::new("causal", cross)
    };
    let softcap = Case {
        options: AttentionModuleOptions {
            softcap: Some(2.0),
            ..Default::default()
        },
        ..masked.clone()
    };
    // (kernel launches, uploads) of a second call: the first one on a device also uploads
    // CANN's compressed causal mask, kept on the device for every later call.
    for case in [&masked, &causal] {
        launches(case);
        assert_eq!(launches(case), (1, 0), "{}", case.what);
    }
    let (composite, _) = launches(&softcap);
    assert!(composite > 10, "the composite launched only {composite}");
}

/// Softcap, F32 and a value head dim other than the query's take Burn's composite, counted
/// once per call, and still give NdArray's answer.
#[test]
fn burns_attention_takes_the_counted_composite_for_softcap_f32_and_its_own_value_dim() {
    let _lock = crate::exclusive();
    let cross = [2, 3, 4, 6, 16, 16];
    let softcap = Case {
        mask: Some(per_head_mask),
        bias: true,
        options: AttentionModuleOptions {
            softcap: Some(2.0),
            is_causal: true,
            scale: None,
        },
        ..Case::new("softcap", cross)
    };
    let value_dim = Case {
        mask: Some(per_head_mask),
        ..Case::new("value dim 5", [2, 3, 4, 6, 16, 5])
    };
    for (case, dt) in [
        (&softcap, DType::F16),
        (&cases()[7], DType::F32),
        (&value_dim, DType::BF16),
    ] {
        let (composite, got, want) = compare(case, dt);
        assert_eq!(
            composite, 1,
            "{} ({dt:?}) did not take the composite",
            case.what
        );
        got.assert_approx_eq::<f32>(&want, composite_tolerance(dt));
    }
}
