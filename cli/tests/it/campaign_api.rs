//! The bad-input campaign through the Rust API: the functional ops (`prompt_flash_attention`,
//! `incre_flash_attention`, `scatter_pa_kv_cache`) on NdArray and on `Ascend` (the simulation),
//! with specs mutated at random — heads 0 / huge, scale NaN / inf / extreme, pre/next tokens at
//! i64::MIN / MAX, sparse modes, lengths and slots at their extremes. Asserted: no panic (a
//! typed error or a success), finite outputs for accepted moderate inputs, and a refused
//! scatter leaves the cache tensor it was given bit-identical. Case count:
//! `BURN_ASCEND_CAMPAIGN_CASES` (twice that many per backend), seed `BURN_ASCEND_CAMPAIGN_SEED`.

use burn_ascend::IncreKvFromTensors;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::common::Rng;
use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::ops::incre::{IfaLayout, IncreSpec};
use burn_ascend::ops::prompt::{PfaLayout, PromptSpec};
use burn_ascend::ops::scatter::ScatterSpec;
use burn_ascend::{
    incre_flash_attention, prompt_flash_attention, scatter_pa_kv_cache, AttentionBackend, IncreKv,
};

const INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    3,
    4,
    5,
    i32::MAX as i64,
    i32::MIN as i64,
    i64::MAX,
    i64::MIN,
    1 << 40,
];
const SCALES: &[f64] = &[
    0.3,
    0.0,
    -1.0,
    1e300,
    -1e300,
    5e-324,
    f64::NAN,
    f64::INFINITY,
    3.5e38,
];

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn t<B: AttentionBackend, const K: usize>(
    rng: &mut Rng,
    s: [usize; K],
    dev: &B::Device,
) -> Tensor<B, K> {
    let n = s.iter().product();
    Tensor::from_data(TensorData::new(rng.vec_f32(n, 1.0), s), dev)
}

fn finite<B: AttentionBackend, const K: usize>(x: Tensor<B, K>) -> bool {
    x.into_data()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|v| v.is_finite())
}

/// One mutated call of a random op on `B`: `Err(description)` on a panic, a non-finite output
/// of an accepted moderate call, or a refused scatter that changed its cache.
/// `Ok(true)`: accepted, `Ok(false)`: refused with a typed error.
fn one_case<B: AttentionBackend>(rng: &mut Rng, dev: &B::Device) -> Result<bool, String> {
    let (b, s, skv, n, d) = (2, 3, 5, 2, 8);
    let op = rng.below(3);
    let scale = if rng.chance(0.3) {
        rng.pick(SCALES)
    } else {
        0.3
    };
    let moderate = scale.is_finite() && scale.abs() <= 1e3;
    let int = |rng: &mut Rng| rng.pick(INTS);
    let heads = |rng: &mut Rng| {
        if rng.chance(0.2) {
            rng.pick(&[0usize, 3, 1 << 40, usize::MAX])
        } else {
            n
        }
    };
    let desc;
    let got = match op {
        0 => {
            let mut spec = PromptSpec::new(heads(rng), scale, PfaLayout::Bsnd);
            if rng.chance(0.4) {
                spec.pre_tokens = int(rng);
                spec.next_tokens = int(rng);
            }
            if rng.chance(0.3) {
                spec.sparse_mode = rng.pick(&[0, 1, 2, 3, 4, 5, -1, i64::MAX]);
            }
            if rng.chance(0.3) {
                spec.actual_seq_lengths_kv = Some((0..rng.below(4)).map(|_| int(rng)).collect());
            }
            if rng.chance(0.2) {
                spec.num_key_value_heads = heads(rng);
            }
            desc = format!("{spec:?}");
            let q = t::<B, 4>(rng, [b, s, n, d], dev);
            let k = t::<B, 4>(rng, [b, skv, n, d], dev);
            let run = || prompt_flash_attention(q.clone(), k.clone(), k.clone(), &spec);
            catch_unwind(AssertUnwindSafe(run)).map(|r| r.map(|o| finite(o)))
        }
        1 => {
            let mut spec = IncreSpec::new(heads(rng), scale, IfaLayout::Bsnd);
            if rng.chance(0.4) {
                spec.actual_seq_lengths = Some((0..rng.below(4)).map(|_| int(rng)).collect());
            }
            if rng.chance(0.2) {
                spec.kv_padding_size = Some(int(rng));
            }
            if rng.chance(0.2) {
                spec.inner_precise = int(rng);
            }
            desc = format!("{spec:?}");
            let q = t::<B, 4>(rng, [b, 1, n, d], dev);
            let k = t::<B, 4>(rng, [b, skv, n, d], dev);
            let run = || {
                incre_flash_attention(q.clone(), IncreKv::contiguous(k.clone(), k.clone()), &spec)
            };
            catch_unwind(AssertUnwindSafe(run)).map(|r| r.map(|o| finite(o)))
        }
        _ => {
            let tokens = 3;
            let mut slots: Vec<i64> = vec![3, 17, 0];
            for _ in 0..rng.below(3) {
                let i = rng.below(tokens);
                slots[i] = if rng.chance(0.5) {
                    int(rng)
                } else {
                    slots[(i + 1) % tokens]
                };
            }
            let spec = ScatterSpec::new(slots);
            desc = format!("{spec:?}");
            let key = t::<B, 3>(rng, [tokens, n, d], dev);
            let cache = t::<B, 4>(rng, [2, 16, n, d], dev);
            let before = cache.to_data();
            let run = || scatter_pa_kv_cache(key.clone(), None, cache.clone(), None, &spec);
            match catch_unwind(AssertUnwindSafe(run)) {
                Ok(Err(e)) if cache.to_data() != before => {
                    return Err(format!("a refused scatter ({e}) changed its cache: {desc}"))
                }
                other => other.map(|r| r.map(|(c, _)| finite(c))),
            }
        }
    };
    match got {
        Err(_) => Err(format!("panicked: {desc}")),
        Ok(Ok(false)) if moderate => Err(format!("non-finite output: {desc}")),
        Ok(Ok(_)) => Ok(true),
        Ok(Err(e)) => {
            assert!(!e.to_string().is_empty());
            Ok(false)
        }
    }
}

fn campaign<B: AttentionBackend>(dev: &B::Device, salt: u64) {
    let cases = env_or("BURN_ASCEND_CAMPAIGN_CASES", 400) * 2;
    let seed = env_or("BURN_ASCEND_CAMPAIGN_SEED", 17);
    let mut rng = Rng(seed ^ salt);
    let (mut failures, mut accepted) = (Vec::new(), 0usize);
    for case in 0..cases {
        match one_case::<B>(&mut rng, dev) {
            Ok(ok) => accepted += usize::from(ok),
            Err(e) => failures.push(format!("case {case} (seed {seed}): {e}")),
        }
    }
    eprintln!("api campaign: {cases} cases, {accepted} accepted");
    assert!(
        accepted > 0 && accepted < cases as usize,
        "the mutations must both break and keep calls"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn campaign_mutated_specs_through_the_functional_api_on_ndarray_get_a_typed_error_or_a_finite_success(
) {
    campaign::<NdArray>(&Default::default(), 0xA11);
}

#[test]
fn campaign_mutated_specs_through_the_functional_api_on_ascend_get_a_typed_error_or_a_finite_success(
) {
    campaign::<Ascend>(&AscendDevice::sim(), 0xA5C);
}
