//! Forward tests of the reference varlen flash attention against the independent formulation
//! (`common::spec_fwd`), continued from `varlen_forward.rs`: sinks, dropout, pse / ALiBi, head
//! dims, softmax layouts and narrow input dtypes.
//!
//! Tolerances: f64 outputs `1e-12 + 1e-12·|exp|` (same math, different summation order);
//! f32 statistics 4 ulps relative, special values (0, −FLT_MAX, +FLT_MAX) exact.

use crate::common::*;
use burn_ascend_contract::varlen::{PseType, SoftmaxLayout, SparseMode};
use burn_ascend_contract::Element;
use burn_ascend_kernels::reference::varlen::varlen_fwd;
use half::{bf16, f16};

/// The sink enters the denominator only: out_sink = out_plain · l_plain / l_sink, and a sink of
/// −1e30 contributes exp(−∞) = 0, i.e. no sink at all.
#[test]
fn sink_vs_no_sink() {
    let mut rng = Rng::new(30);
    let plain = Case::new(&mut rng, 3, 1, 4, 4, &[2, 3], &[3, 4]);
    let with = plain.clone().with_sink(&mut rng);
    let p = check_fwd_f64(&plain);
    let s = check_fwd_f64(&with);
    assert_ne!(p.attention_out, s.attention_out);
    // Row-wise: out_sink / out_plain = (Σ_j e^{s_j − m_p}) e^{m_p − m_s} / l_s, the same for every
    // component of the row, and < 1.
    for row in 0..5 * 3 {
        let ratios: Vec<f64> = (0..4)
            .map(|x| s.attention_out[row * 4 + x] / p.attention_out[row * 4 + x])
            .collect();
        for r in &ratios {
            assert!(
                (r - ratios[0]).abs() < 1e-9 && *r < 1.0 && *r > 0.0,
                "{ratios:?}"
            );
        }
    }
    // A hugely negative sink is no sink (the sink's max never wins, its term is exactly 0).
    let mut neg = plain.clone();
    neg.sink = Some(vec![-1e30; 3]);
    assert_eq!(check_fwd_f64(&neg), p);
    // A large sink dominates the max.
    let mut big = plain.clone();
    big.sink = Some(vec![40.0; 3]);
    let b = check_fwd_f64(&big);
    assert!(b.softmax_max.iter().all(|&m| m == 40.0));
    assert!(b.attention_out.iter().all(|x| x.abs() < 1e-15));
}

// ---------------------------------------------------------------------------------------------
// Dropout
// ---------------------------------------------------------------------------------------------

#[test]
fn dropout_with_generated_mask() {
    let mut rng = Rng::new(40);
    for (keep, seed) in [(0.7, 5), (0.5, 6), (0.9, 7)] {
        for sink in [false, true] {
            let mut c =
                Case::new(&mut rng, 4, 2, 3, 3, &[3, 0, 4], &[4, 2, 3]).with_dropout(keep, seed);
            if sink {
                c = c.with_sink(&mut rng);
            }
            let got = check_fwd_f64(&c);
            // The mask really drops something, so the test is not vacuous.
            let mut no_drop = c.clone();
            no_drop.drop_mask = None;
            no_drop.attrs.keep_prob = 1.0;
            let plain = check_fwd_f64(&no_drop);
            assert_ne!(got.attention_out, plain.attention_out);
            // Dropout is applied after normalisation: the statistics do not change.
            assert_eq!(got.softmax_max, plain.softmax_max);
            assert_eq!(got.softmax_sum, plain.softmax_sum);
        }
    }
    // Dropout under a mask and with a pse.
    let c = Case::new(&mut rng, 2, 2, 3, 3, &[3, 2], &[3, 5])
        .mode(SparseMode::RightDownCausal)
        .compressed()
        .with_dense_pse(&mut rng, PseType::OuterAddMul)
        .with_dropout(0.6, 9);
    check_fwd_f64(&c);
}

/// keepProb = 1 means no dropout, whatever mask is passed.
#[test]
fn keep_prob_one_ignores_drop_mask() {
    let mut rng = Rng::new(41);
    let plain = Case::new(&mut rng, 2, 2, 3, 3, &[3, 2], &[4, 3]);
    let mut masked = plain.clone();
    masked.drop_mask = Some(vec![0u8; 8]);
    assert_eq!(check_fwd_f64(&masked), check_fwd_f64(&plain));
}

// ---------------------------------------------------------------------------------------------
// pse
// ---------------------------------------------------------------------------------------------

#[test]
fn dense_pse_types_0_and_1() {
    let mut rng = Rng::new(50);
    let mut outs = Vec::new();
    for pse_type in [PseType::OuterMulAdd, PseType::OuterAddMul] {
        let mut r2 = Rng::new(51); // same data for both types
        let c = Case::new(&mut r2, 2, 1, 4, 4, &[3, 0, 2], &[2, 3, 4])
            .with_dense_pse(&mut r2, pse_type)
            .with_sink(&mut r2);
        outs.push(check_fwd_f64(&c).attention_out);
        // Under a mask, with GQA.
        let c = Case::new(&mut rng, 4, 2, 3, 3, &[3, 2, 4], &[4, 2, 5])
            .mode(SparseMode::Band)
            .pre_next(1, 1)
            .compressed()
            .with_dense_pse(&mut rng, pse_type);
        check_fwd_f64(&c);
    }
    // scale ≠ 1, so "mul then add" and "add then mul" must differ.
    assert_ne!(outs[0], outs[1]);
}

/// The ALiBi-compressed pse against the independent forward, which reads each diagonal at its
/// other end; includes a sequence longer than the 1024 compressed rows.
#[test]
fn alibi_compressed_pse_against_the_independent_forward() {
    let mut rng = Rng::new(52);
    for (pse_type, batches, lens) in [
        (PseType::OuterAddMul, 2, vec![3usize, 5]),
        (PseType::OuterMulAdd, 1, vec![6, 2]),
        (PseType::OuterAddMul, 1, vec![1030, 7]),
    ] {
        let c = Case::new(&mut rng, 2, 1, 2, 2, &lens, &lens)
            .mode(SparseMode::RightDownCausal)
            .compressed()
            .with_alibi_compressed(&mut rng, pse_type, batches)
            .with_sink(&mut rng);
        check_fwd_f64(&c);
    }
}

#[test]
fn alibi_types_2_and_3() {
    let mut rng = Rng::new(52);
    for pse_type in [PseType::InnerMulAdd, PseType::InnerMulAddSqrt] {
        for per_batch in [false, true] {
            for (qs, ks) in [(0, 0), (3, -2), (-4, 7)] {
                for sink in [false, true] {
                    let mut c = Case::new(&mut rng, 2, 1, 3, 3, &[3, 2, 4], &[4, 0, 5])
                        .with_alibi(&mut rng, pse_type, per_batch, qs, ks);
                    if sink {
                        c = c.with_sink(&mut rng);
                    }
                    check_fwd_f64(&c);
                }
            }
        }
    }
    // Type 2 vs 3 and the start indices matter (so the checks above are not vacuous).
    let mut r = Rng::new(53);
    let c2 = Case::new(&mut r, 2, 2, 3, 3, &[3], &[4]).with_alibi(
        &mut r,
        PseType::InnerMulAdd,
        false,
        3,
        -2,
    );
    let mut c3 = c2.clone();
    c3.attrs.pse_type = PseType::InnerMulAddSqrt;
    let mut c2_shift = c2.clone();
    c2_shift.q_start_idx = 0;
    let (o2, o3, o2s) = (
        check_fwd_f64(&c2),
        check_fwd_f64(&c3),
        check_fwd_f64(&c2_shift),
    );
    assert_ne!(o2.attention_out, o3.attention_out);
    assert_ne!(o2.attention_out, o2s.attention_out);
}

// ---------------------------------------------------------------------------------------------
// Head dims, layouts, dtypes
// ---------------------------------------------------------------------------------------------

#[test]
fn odd_head_dims_and_smaller_value_dim() {
    let mut rng = Rng::new(60);
    for (d, dv) in [(3, 3), (5, 5), (3, 2), (5, 1), (1, 1), (5, 3)] {
        let c = Case::new(&mut rng, 4, 2, d, dv, &[2, 3], &[3, 2])
            .mode(SparseMode::LeftUpCausal)
            .compressed()
            .with_sink(&mut rng);
        check_fwd_f64(&c);
        let c = Case::new(&mut rng, 2, 1, d, dv, &[3, 1], &[4, 2]);
        check_fwd_f64(&c);
    }
}

/// Both layouts against the spec's index formulas, plus one index worked out by hand.
#[test]
fn softmax_layouts() {
    let mut rng = Rng::new(61);
    let base = Case::new(&mut rng, 2, 2, 3, 3, &[2, 3], &[3, 4]).with_sink(&mut rng);
    let a = check_fwd_f64(&base.clone().layout(SoftmaxLayout::SequenceHeadMajor));
    let b = check_fwd_f64(&base.clone().layout(SoftmaxLayout::SameAsInput));
    assert_eq!(a.attention_out, b.attention_out);
    // Sequence 1 starts at token 2 with Sq 3; head 1, row 2 (token 4):
    //   ""              → (cumQ·N + h·Sq + i)·8 = (2·2 + 1·3 + 2)·8 = 72
    //   "same_as_input" → ((cumQ + i)·N + h)·8 = ((2 + 2)·2 + 1)·8 = 72 (coincides here)
    // head 0, row 1 (token 3):
    //   ""              → (4 + 0 + 1)·8 = 40;   "same_as_input" → (3·2 + 0)·8 = 48
    // head 1, row 0 (token 2):
    //   ""              → (4 + 3 + 0)·8 = 56;   "same_as_input" → (2·2 + 1)·8 = 40
    for (ia, ib) in [(72, 72), (40, 48), (56, 40)] {
        assert_eq!(a.softmax_max[ia..ia + 8], b.softmax_max[ib..ib + 8]);
        assert_eq!(a.softmax_sum[ia..ia + 8], b.softmax_sum[ib..ib + 8]);
    }
    // Every stat is a broadcast of one value over 8 floats.
    for chunk in a.softmax_max.chunks(8).chain(a.softmax_sum.chunks(8)) {
        assert!(chunk.iter().all(|&x| x == chunk[0]));
    }
    // Both layouts hold the same multiset of values, but not in the same order.
    assert_ne!(a.softmax_max, b.softmax_max);
    let sorted = |v: &[f32]| {
        let mut v = v.to_vec();
        v.sort_by(f32::total_cmp);
        v
    };
    assert_eq!(sorted(&a.softmax_max), sorted(&b.softmax_max));
}

/// Narrow inputs: the reference widens to f64, so against the independent forward on the
/// *rounded* inputs the only error is the final rounding of out (half an ulp: 2^-11 for f16,
/// 2^-8 for bf16, relative); against the f32 run on the unrounded inputs the input rounding
/// adds ~sqrt(D)·2·ulp·|q||k| in the logits, covered by `vs_f32` (abs + rel; f16 2e-3, bf16
/// 1.5e-2 — measured worst 3.1e-4 and 2.9e-3 on these cases).
fn check_narrow<T: Element>(out_rel: f64, vs_f32: f64) {
    let mut rng = Rng::new(70);
    let configs: Vec<Case> = vec![
        Case::new(&mut rng, 4, 2, 5, 5, &[3, 0, 4], &[4, 2, 3]).with_sink(&mut rng),
        Case::new(&mut rng, 2, 1, 3, 2, &[3, 2], &[3, 5])
            .mode(SparseMode::RightDownCausal)
            .compressed()
            .with_dense_pse(&mut rng, PseType::OuterMulAdd)
            .with_dropout(0.8, 3),
        Case::new(&mut rng, 2, 2, 4, 4, &[2, 3], &[3, 4])
            .with_alibi(&mut rng, PseType::InnerMulAddSqrt, true, 1, 0)
            .layout(SoftmaxLayout::SameAsInput),
    ];
    for c in configs {
        let (q, k, v) = (to_elem::<T>(&c.q), to_elem::<T>(&c.k), to_elem::<T>(&c.v));
        let got = varlen_fwd::<T>(&c.problem(), &q, &k, &v);
        let got_out = to_f64(&got.attention_out);
        // vs the independent forward on the rounded inputs.
        let (qr, kr, vr) = (to_f64(&q), to_f64(&k), to_f64(&v));
        let exp = spec_fwd(&c, &qr, &kr, &vr, c.sink_f64().as_deref());
        assert_close("narrow out", &got_out, &exp.out, 1e-7, out_rel);
        assert_stats("narrow max", &got.softmax_max, &exp.max, STAT_REL);
        assert_stats("narrow sum", &got.softmax_sum, &exp.sum, STAT_REL);
        // vs f32 on the unrounded inputs.
        let (qf, kf, vf) = (
            to_elem::<f32>(&c.q),
            to_elem::<f32>(&c.k),
            to_elem::<f32>(&c.v),
        );
        let f = varlen_fwd::<f32>(&c.problem(), &qf, &kf, &vf);
        assert_close(
            "narrow vs f32",
            &got_out,
            &to_f64(&f.attention_out),
            vs_f32,
            vs_f32,
        );
    }
}

#[test]
fn f16_inputs() {
    check_narrow::<f16>(1.0 / 2048.0, 2e-3);
}

#[test]
fn bf16_inputs() {
    check_narrow::<bf16>(1.0 / 256.0, 1.5e-2);
}

#[test]
fn f32_inputs() {
    // f32: output rounding 2^-24 relative.
    let mut rng = Rng::new(71);
    let c = Case::new(&mut rng, 4, 1, 5, 3, &[3, 2], &[2, 4])
        .with_sink(&mut rng)
        .with_dropout(0.75, 1);
    let (q, k, v) = (
        to_elem::<f32>(&c.q),
        to_elem::<f32>(&c.k),
        to_elem::<f32>(&c.v),
    );
    let got = varlen_fwd::<f32>(&c.problem(), &q, &k, &v);
    let exp = spec_fwd(
        &c,
        &to_f64(&q),
        &to_f64(&k),
        &to_f64(&v),
        c.sink_f64().as_deref(),
    );
    assert_close(
        "f32 out",
        &to_f64(&got.attention_out),
        &exp.out,
        1e-12,
        1.0 / (1u64 << 24) as f64,
    );
}

// ---------------------------------------------------------------------------------------------
// Everything at once
// ---------------------------------------------------------------------------------------------

#[test]
fn combined_features() {
    let mut rng = Rng::new(80);
    for seed in 0..6u64 {
        let layout = if seed % 2 == 0 {
            SoftmaxLayout::SequenceHeadMajor
        } else {
            SoftmaxLayout::SameAsInput
        };
        let c = Case::new(&mut rng, 4, 2, 5, 3, &[3, 0, 2, 4], &[3, 2, 0, 5])
            .mode(SparseMode::DefaultMask)
            .pre_next(2, 1)
            .random_dense_mask(&mut rng, 4, 4, 0.2)
            .with_dense_pse(&mut rng, PseType::OuterMulAdd)
            .with_dropout(0.8, seed)
            .with_sink(&mut rng)
            .layout(layout);
        check_fwd_f64(&c);
        let c = Case::new(&mut rng, 4, 1, 3, 3, &[2, 3, 0], &[4, 3, 2])
            .mode(SparseMode::Band)
            .pre_next(1, 0)
            .compressed()
            .with_alibi(&mut rng, PseType::InnerMulAdd, true, 2, 1)
            .with_dropout(0.7, seed + 100)
            .with_sink(&mut rng)
            .layout(layout);
        check_fwd_f64(&c);
    }
}

// ---------------------------------------------------------------------------------------------
// Mask pictures
// ---------------------------------------------------------------------------------------------
