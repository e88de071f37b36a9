//! Gradient checks of the reference backward: central finite differences (f64, step 1e-5; the
//! f32 sink with step 2^-16 on a grid where it is exact) of `L = Σ out ∘ W` through
//! `varlen_fwd::<f64>`, against `varlen_bwd::<f64>` fed `dy = W` and the forward's own output
//! and statistics. Tolerance `|fd − an| ≤ 1e-6 + 1e-5·|fd|` for dq, dk, dv and dsink (the
//! statistics are f32, so the analytic side carries ~1e-7 relative error).
//!
//! Problems are small (T ≤ 12, N ≤ 4, D ≤ 5): the whole file runs in well under a second.

use crate::common::*;
use burn_ascend_contract::varlen::{PseType, SoftmaxLayout, SparseMode};
use burn_ascend_kernels::reference::varlen::{varlen_bwd, varlen_fwd};

#[test]
fn gradcheck_mha_gqa_mqa() {
    let mut rng = Rng::new(100);
    for (n, nkv) in [(2, 2), (4, 2), (4, 1)] {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, n, nkv, 4, 4, &[3, 2, 4], &[4, 3, 2]);
            if sink {
                c = c.with_sink(&mut rng);
            }
            gradcheck(&c, 1);
        }
    }
}

#[test]
fn gradcheck_mode0_dense_mask_and_window() {
    let mut rng = Rng::new(101);
    for (pre, next) in [(1, 0), (2, 1), (INT_MAX, 0), (INT_MAX, INT_MAX), (-1, 2)] {
        for (mb, mh) in [(1, 1), (2, 2)] {
            for sink in [false, true] {
                let mut c = Case::new(&mut rng, 2, 1, 3, 3, &[4, 3], &[4, 5])
                    .mode(SparseMode::DefaultMask)
                    .pre_next(pre, next)
                    .random_dense_mask(&mut rng, mb, mh, 0.2);
                if sink {
                    c = c.with_sink(&mut rng);
                }
                gradcheck(&c, 2);
            }
        }
    }
}

#[test]
fn gradcheck_mode1_dense_masks() {
    let mut rng = Rng::new(102);
    for (mb, mh) in [(3, 1), (1, 1), (3, 2)] {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, 2, 2, 3, 3, &[3, 4, 2], &[3, 2, 4])
                .mode(SparseMode::AllMask)
                .pre_next(0, 0) // ignored by mode 1
                .random_dense_mask(&mut rng, mb, mh, 0.3);
            if sink {
                c = c.with_sink(&mut rng);
            }
            gradcheck(&c, 3);
        }
    }
}

#[test]
fn gradcheck_causal_modes_2_and_3() {
    let mut rng = Rng::new(103);
    for sink in [false, true] {
        let mut c = Case::new(&mut rng, 2, 1, 4, 4, &[4, 3, 2], &[3, 5, 2])
            .mode(SparseMode::LeftUpCausal)
            .compressed();
        if sink {
            c = c.with_sink(&mut rng);
        }
        gradcheck(&c, 4);
        let mut c = Case::new(&mut rng, 4, 2, 3, 3, &[3, 2, 4], &[5, 2, 4])
            .mode(SparseMode::RightDownCausal)
            .compressed();
        if sink {
            c = c.with_sink(&mut rng);
        }
        gradcheck(&c, 5);
    }
}

/// Band (mode 4) with small windows, including ones that leave rows fully masked
/// (Sq 4, Skv 2, pre 0, next 0: rows 0 and 1 see nothing).
#[test]
fn gradcheck_band_mode4() {
    let mut rng = Rng::new(104);
    for (pre, next) in [(0, 0), (1, 0), (0, 1), (2, 1), (3, -1)] {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, 2, 1, 3, 3, &[4, 3, 2], &[2, 5, 3])
                .mode(SparseMode::Band)
                .pre_next(pre, next)
                .compressed();
            if sink {
                c = c.with_sink(&mut rng);
            }
            // pre = next = 0 leaves at most one column per row: without a sink P ≡ 1 there and
            // dq, dk vanish — which the check then verifies.
            let single_column = (pre, next) == (0, 0) && !sink;
            let (fd, an) = gradcheck_with(&c, 6, !single_column);
            if single_column {
                assert!(an.dq.iter().chain(&an.dk).all(|x| x.abs() < 1e-12));
                assert!(fd.dq.iter().chain(&fd.dk).all(|x| x.abs() < 1e-9));
            }
        }
    }
}

#[test]
fn gradcheck_prefix_mode6() {
    let mut rng = Rng::new(105);
    for prefix in [vec![2, 0, 4], vec![0, 0, 0], vec![5, 3, 1]] {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, 2, 2, 3, 3, &[3, 2, 3], &[4, 3, 5])
                .mode(SparseMode::PrefixCompress)
                .compressed();
            c.prefix = Some(prefix.clone());
            if sink {
                c = c.with_sink(&mut rng);
            }
            gradcheck(&c, 7);
        }
    }
}

/// Modes 7 and 8, including the sparse-mode doc's examples and empty trailing / leading
/// sequences (which move the band sequence).
#[test]
fn gradcheck_modes_7_and_8() {
    let mut rng = Rng::new(106);
    type Config = (SparseMode, &'static [usize], &'static [usize], i64, i64);
    let configs: [Config; 6] = [
        // Doc example, mode 7 card 1: band = last sequence (2×6), pre 6, next −2.
        (SparseMode::RightDownCausalBand, &[3, 2], &[3, 6], 6, -2),
        (SparseMode::RightDownCausalBand, &[2, 3], &[3, 4], 4, -1),
        // Trailing empty query sequence: band = b 1.
        (
            SparseMode::RightDownCausalBand,
            &[2, 3, 0],
            &[3, 5, 2],
            5,
            -2,
        ),
        // Doc example, mode 8 card 2 (lengths 3/4 and two shorter causal ones): pre 4, next 1.
        (SparseMode::BandLeftUpCausal, &[3, 3, 2], &[4, 3, 2], 4, 1),
        (SparseMode::BandLeftUpCausal, &[3, 4], &[4, 4], 5, -1),
        // Leading empty query sequence: band = b 1.
        (SparseMode::BandLeftUpCausal, &[0, 3, 3], &[2, 4, 3], 4, 0),
    ];
    for (mode, sq, skv, pre, next) in configs {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, 2, 1, 3, 3, sq, skv)
                .mode(mode)
                .pre_next(pre, next)
                .compressed();
            if sink {
                c = c.with_sink(&mut rng);
            }
            gradcheck(&c, 8);
        }
    }
}

#[test]
fn gradcheck_empty_sequences() {
    let mut rng = Rng::new(107);
    let shapes: [(&[usize], &[usize]); 3] = [
        (&[3, 0, 2], &[2, 3, 4]),
        (&[3, 2, 2], &[2, 0, 3]),
        (&[0, 3, 0, 2], &[2, 3, 0, 0]),
    ];
    for (sq, skv) in shapes {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, 2, 1, 3, 3, sq, skv);
            if sink {
                c = c.with_sink(&mut rng);
            }
            let (fd, _) = gradcheck(&c, 9);
            // Tokens of a sequence with Skv = 0 get no gradient.
            let (mut q0, n, d) = (0, 2, 3);
            for b in 0..sq.len() {
                if skv[b] == 0 {
                    assert!(fd.dq[q0 * n * d..(q0 + sq[b]) * n * d]
                        .iter()
                        .all(|&x| x == 0.0));
                }
                q0 += sq[b];
            }
        }
    }
    // Under a mask too.
    let c = Case::new(&mut rng, 2, 2, 3, 3, &[3, 0, 2], &[2, 3, 4])
        .mode(SparseMode::LeftUpCausal)
        .compressed()
        .with_sink(&mut rng);
    gradcheck(&c, 10);
}

/// With a fixed dropout mask the loss is smooth, so the backward (dV through P_drop, dP scaled
/// by bit/keepProb, dsink through D_i = dO·O) is checked like everything else.
#[test]
fn gradcheck_dropout() {
    let mut rng = Rng::new(108);
    for (keep, seed) in [(0.7, 1), (0.5, 2)] {
        for sink in [false, true] {
            let mut c =
                Case::new(&mut rng, 4, 2, 3, 3, &[3, 0, 4], &[4, 2, 3]).with_dropout(keep, seed);
            if sink {
                c = c.with_sink(&mut rng);
            }
            gradcheck(&c, 11);
        }
    }
    let c = Case::new(&mut rng, 2, 1, 3, 3, &[3, 3], &[4, 3])
        .mode(SparseMode::Band)
        .pre_next(1, 1)
        .compressed()
        .with_dense_pse(&mut rng, PseType::OuterAddMul)
        .with_dropout(0.6, 3)
        .with_sink(&mut rng);
    gradcheck(&c, 12);
}

#[test]
fn gradcheck_pse_types() {
    let mut rng = Rng::new(109);
    for pse_type in [PseType::OuterMulAdd, PseType::OuterAddMul] {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, 2, 1, 3, 3, &[3, 0, 3], &[4, 2, 3])
                .with_dense_pse(&mut rng, pse_type);
            if sink {
                c = c.with_sink(&mut rng);
            }
            gradcheck(&c, 13);
        }
    }
    for pse_type in [PseType::InnerMulAdd, PseType::InnerMulAddSqrt] {
        for (per_batch, qs, ks) in [(false, 0, 0), (true, 3, -2), (false, -1, 4)] {
            for sink in [false, true] {
                let mut c = Case::new(&mut rng, 2, 2, 3, 3, &[3, 2], &[4, 3])
                    .with_alibi(&mut rng, pse_type, per_batch, qs, ks);
                if sink {
                    c = c.with_sink(&mut rng);
                }
                gradcheck(&c, 14);
            }
        }
    }
}

/// The ALiBi-compressed pse (Sq = Skv, causal modes 2 and 3): gradients by finite differences.
#[test]
fn gradcheck_alibi_compressed_pse() {
    let mut rng = Rng::new(115);
    for (pse_type, batches, mode) in [
        (PseType::OuterAddMul, 1, SparseMode::RightDownCausal),
        (PseType::OuterMulAdd, 2, SparseMode::LeftUpCausal),
    ] {
        let c = Case::new(&mut rng, 2, 1, 3, 3, &[3, 4], &[3, 4])
            .mode(mode)
            .with_alibi_compressed(&mut rng, pse_type, batches)
            .with_sink(&mut rng);
        gradcheck(&c, 15);
    }
}

/// Fully masked rows (out ≡ 0): zero gradient from those rows, with and without a sink.
#[test]
fn gradcheck_fully_masked_rows() {
    let mut rng = Rng::new(110);
    for sink in [false, true] {
        let mut c = Case::new(&mut rng, 2, 1, 3, 3, &[3, 2], &[4, 4]).mode(SparseMode::AllMask);
        #[rustfmt::skip]
        let data = vec![
            0, 1, 0, 0,
            1, 1, 1, 1,
            0, 0, 1, 0,
        ];
        c.mask = MaskSpec::Dense {
            data,
            batch: 1,
            heads: 1,
            rows: 3,
            cols: 4,
        };
        if sink {
            c = c.with_sink(&mut rng);
        }
        let (fd, an) = gradcheck(&c, 15);
        // Row 1 of each sequence (tokens 1 and 4) is fully masked: its dq is exactly 0.
        for t in [1, 4] {
            assert!(an.dq[t * 2 * 3..(t + 1) * 2 * 3].iter().all(|&x| x == 0.0));
            assert!(fd.dq[t * 2 * 3..(t + 1) * 2 * 3].iter().all(|&x| x == 0.0));
        }
    }
}

/// Odd head dims, and Dv < D. CANN's backward requires Dv == D; the reference backward indexes
/// D and Dv separately, so it is checked here for both.
#[test]
fn gradcheck_odd_dims_and_smaller_value_dim() {
    let mut rng = Rng::new(111);
    for (d, dv) in [(3, 3), (5, 5), (1, 1), (5, 3), (3, 1)] {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, 2, 1, d, dv, &[3, 2], &[2, 4])
                .mode(SparseMode::LeftUpCausal)
                .compressed();
            if sink {
                c = c.with_sink(&mut rng);
            }
            gradcheck(&c, 16);
        }
    }
}

#[test]
fn gradcheck_same_as_input_layout() {
    let mut rng = Rng::new(112);
    for layout in [SoftmaxLayout::SequenceHeadMajor, SoftmaxLayout::SameAsInput] {
        let c = Case::new(&mut rng, 4, 2, 3, 3, &[2, 3, 0, 3], &[3, 2, 2, 4])
            .mode(SparseMode::DefaultMask)
            .pre_next(2, 1)
            .random_dense_mask(&mut rng, 4, 1, 0.2)
            .with_dense_pse(&mut rng, PseType::OuterMulAdd)
            .with_dropout(0.8, 4)
            .with_sink(&mut rng)
            .layout(layout);
        gradcheck(&c, 17);
    }
}

/// dpse of an external pse: dS for pseType 0 (added after the scaling), scale·dS for pseType 1
/// (added before), 0 where masked; the check rejects the other type's factor. ALiBi slopes
/// (pseType 2/3) get no dpse.
#[test]
fn dpse_of_outer_pse_types_matches_finite_differences_and_the_type_factor() {
    let mut rng = Rng::new(114);
    for pse_type in [PseType::OuterMulAdd, PseType::OuterAddMul] {
        let c = Case::new(&mut rng, 4, 2, 3, 3, &[3, 2, 4], &[4, 3, 2])
            .mode(SparseMode::Band)
            .pre_next(1, 0)
            .compressed()
            .with_dense_pse(&mut rng, pse_type)
            .with_sink(&mut rng);
        assert!(
            (c.attrs.scale - 1.0).abs() > 0.1,
            "the factor must be visible"
        );
        let w = loss_weights(&c, 19);
        let fd = numeric_grads(&c, &w);
        let an = analytic_grads(&c, &w);
        compare_grads(&fd, &an).expect("dpse matches finite differences");
        // Masked positions (outside the band) have no gradient, on both sides.
        let p = c.problem();
        let (dpse, fd_dpse) = (an.dpse.as_ref().unwrap(), fd.dpse.as_ref().unwrap());
        let (mut e, mut masked) = (0, 0);
        for b in 0..c.dims.batch() {
            let rule = p.rule(b);
            for h in 0..c.dims.head_num {
                for i in 0..c.dims.seq_q[b] {
                    for j in 0..c.dims.seq_kv[b] {
                        if !p.allowed(&rule, b, h, i, j) {
                            assert_eq!(dpse[e], 0.0);
                            assert!(fd_dpse[e].abs() < 1e-9);
                            masked += 1;
                        }
                        e += 1;
                    }
                }
            }
        }
        assert!(masked > 0 && e == dpse.len());
        let mut bad = an.clone();
        let wrong = match pse_type {
            PseType::OuterAddMul => 1.0 / c.attrs.scale,
            _ => c.attrs.scale,
        };
        bad.dpse
            .as_mut()
            .unwrap()
            .iter_mut()
            .for_each(|x| *x *= wrong);
        let err = compare_grads(&fd, &bad).expect_err("the other type's factor must fail");
        assert!(err.contains("dpse") && !err.contains("dq"), "{err}");
    }
    let c = Case::new(&mut rng, 2, 1, 3, 3, &[3, 2], &[3, 2])
        .mode(SparseMode::RightDownCausal)
        .compressed()
        .with_alibi(&mut rng, PseType::InnerMulAdd, false, 0, 0);
    let (fd, an) = gradcheck(&c, 20);
    assert!(fd.dpse.is_none() && an.dpse.is_none());
}

/// The checker can fail: corrupted copies of a correct analytic result are rejected.
#[test]
fn corrupted_backward_fails_check() {
    let mut rng = Rng::new(113);
    let c = Case::new(&mut rng, 4, 2, 3, 3, &[3, 2, 3], &[3, 4, 2])
        .with_sink(&mut rng)
        .with_dropout(0.75, 5);
    let w = loss_weights(&c, 18);
    let fd = numeric_grads(&c, &w);
    let an = analytic_grads(&c, &w);
    compare_grads(&fd, &an).expect("the uncorrupted result passes");

    // dsink ×2.
    let mut bad = an.clone();
    bad.dsink
        .as_mut()
        .unwrap()
        .iter_mut()
        .for_each(|x| *x *= 2.0);
    let err = compare_grads(&fd, &bad).expect_err("dsink ×2 must fail");
    assert!(err.contains("dsink") && !err.contains("dq"), "{err}");

    // dk and dv swapped (same shape since D == Dv).
    let mut bad = an.clone();
    std::mem::swap(&mut bad.dk, &mut bad.dv);
    let err = compare_grads(&fd, &bad).expect_err("swapped dk/dv must fail");
    assert!(err.contains("dk") && err.contains("dv"), "{err}");

    // dsink dropped.
    let mut bad = an.clone();
    bad.dsink = None;
    compare_grads(&fd, &bad).expect_err("missing dsink must fail");

    // One dq element off by 0.1 % — small, but far outside the tolerance.
    let mut bad = an.clone();
    let idx = (0..bad.dq.len())
        .max_by(|&a, &b| bad.dq[a].abs().total_cmp(&bad.dq[b].abs()))
        .unwrap();
    bad.dq[idx] *= 1.001;
    let err = compare_grads(&fd, &bad).expect_err("dq perturbed by 0.1 % must fail");
    assert!(err.contains(&format!("dq[{idx}]")), "{err}");

    // A backward that forgets the dropout mask (fed the same stats and output).
    let mut no_drop = c.clone();
    no_drop.drop_mask = None;
    no_drop.attrs.keep_prob = 1.0;
    let fwd = varlen_fwd::<f64>(&c.problem(), &c.q, &c.k, &c.v);
    let g = varlen_bwd::<f64>(
        &no_drop.problem(),
        &c.q,
        &c.k,
        &c.v,
        &w,
        &fwd.attention_out,
        &fwd.softmax_max,
        &fwd.softmax_sum,
    );
    let bad = Grads {
        dq: g.dq,
        dk: g.dk,
        dv: g.dv,
        dsink: g.dsink.map(|s| s.into_iter().map(f64::from).collect()),
        dpse: g.dpse,
    };
    compare_grads(&fd, &bad).expect_err("a backward without dropout must fail");

    // A backward that ignores the sink in P (stats of the sink-free forward).
    let mut no_sink = c.clone();
    no_sink.sink = None;
    let fwd_ns = varlen_fwd::<f64>(&no_sink.problem(), &c.q, &c.k, &c.v);
    let g = varlen_bwd::<f64>(
        &c.problem(),
        &c.q,
        &c.k,
        &c.v,
        &w,
        &fwd.attention_out,
        &fwd_ns.softmax_max,
        &fwd_ns.softmax_sum,
    );
    let bad = Grads {
        dq: g.dq,
        dk: g.dk,
        dv: g.dv,
        dsink: g.dsink.map(|s| s.into_iter().map(f64::from).collect()),
        dpse: g.dpse,
    };
    compare_grads(&fd, &bad).expect_err("P without the sink must fail");
}

/// The finite differences themselves agree with the independent forward's: differentiating the
/// spec formulation (f64 sink, so no f32 grid) gives the same numbers, so the numeric side does
/// not just inherit a reference-forward bug.
#[test]
fn numeric_grads_agree_with_independent_forward() {
    let mut rng = Rng::new(114);
    let c = Case::new(&mut rng, 4, 2, 3, 3, &[3, 0, 2], &[2, 3, 4])
        .mode(SparseMode::Band)
        .pre_next(1, 1)
        .compressed()
        .with_alibi(&mut rng, PseType::InnerMulAddSqrt, true, 1, 2)
        .with_dropout(0.8, 6)
        .with_sink(&mut rng);
    let w = loss_weights(&c, 19);
    let fd = numeric_grads(&c, &w);
    let sink = c.sink_f64().unwrap();
    let spec_loss = |q: &[f64], k: &[f64], v: &[f64], s: &[f64]| -> f64 {
        let o = spec_fwd(&c, q, k, v, Some(s)).out;
        o.iter().zip(&w).map(|(a, b)| a * b).sum()
    };
    let h = FD_STEP;
    let mut spec_dq = Vec::new();
    for idx in 0..c.q.len() {
        let (mut qp, mut qm) = (c.q.clone(), c.q.clone());
        qp[idx] += h;
        qm[idx] -= h;
        spec_dq.push(
            (spec_loss(&qp, &c.k, &c.v, &sink) - spec_loss(&qm, &c.k, &c.v, &sink)) / (2.0 * h),
        );
    }
    let mut spec_dsink = Vec::new();
    for idx in 0..sink.len() {
        let (mut sp, mut sm) = (sink.clone(), sink.clone());
        sp[idx] += h;
        sm[idx] -= h;
        spec_dsink.push(
            (spec_loss(&c.q, &c.k, &c.v, &sp) - spec_loss(&c.q, &c.k, &c.v, &sm)) / (2.0 * h),
        );
    }
    assert_close("fd dq (spec vs reference)", &spec_dq, &fd.dq, 1e-8, 1e-7);
    assert_close(
        "fd dsink (spec vs reference)",
        &spec_dsink,
        fd.dsink.as_ref().unwrap(),
        1e-8,
        1e-7,
    );
}
