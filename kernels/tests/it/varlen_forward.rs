//! Forward tests of the reference varlen flash attention against an independent formulation
//! written from the spec (`common::spec_fwd`: full masked score rows per (sequence, head), the
//! mask predicate from the §1 table, softmax with the sink column appended, dropout after
//! normalisation, then P·V).
//!
//! Tolerances: f64 outputs `1e-12 + 1e-12·|exp|` (same math, different summation order);
//! f32 statistics 4 ulps relative, special values (0, −FLT_MAX, +FLT_MAX) exact.

use crate::common::*;
use burn_ascend_contract::varlen::{SoftmaxLayout, SparseMode};
use burn_ascend_kernels::reference::varlen::varlen_fwd;

const ALL_MODES: [SparseMode; 8] = [
    SparseMode::DefaultMask,
    SparseMode::AllMask,
    SparseMode::LeftUpCausal,
    SparseMode::RightDownCausal,
    SparseMode::Band,
    SparseMode::PrefixCompress,
    SparseMode::RightDownCausalBand,
    SparseMode::BandLeftUpCausal,
];

// ---------------------------------------------------------------------------------------------
// Head layouts
// ---------------------------------------------------------------------------------------------

#[test]
fn mha_matches_spec() {
    let mut rng = Rng::new(1);
    for sink in [false, true] {
        let mut c = Case::new(&mut rng, 2, 2, 4, 4, &[3, 5, 2], &[4, 2, 6]);
        if sink {
            c = c.with_sink(&mut rng);
        }
        check_fwd_f64(&c);
    }
}

#[test]
fn gqa_and_mqa_match_spec() {
    let mut rng = Rng::new(2);
    for (n, nkv) in [(4, 2), (4, 1), (3, 1), (4, 4)] {
        for sink in [false, true] {
            let mut c = Case::new(&mut rng, n, nkv, 4, 4, &[2, 4, 3], &[5, 3, 3]);
            if sink {
                c = c.with_sink(&mut rng);
            }
            check_fwd_f64(&c);
        }
    }
}

/// GQA maps query head h to kv head h / G: with distinct kv heads, heads of different groups see
/// different keys, and heads of one group agree when their queries agree.
#[test]
fn gqa_head_mapping_is_h_div_group() {
    let mut rng = Rng::new(3);
    let mut c = Case::new(&mut rng, 4, 2, 3, 3, &[3], &[4]);
    // Make every query head identical per token.
    for t in 0..3 {
        for h in 1..4 {
            for x in 0..3 {
                c.q[(t * 4 + h) * 3 + x] = c.q[(t * 4) * 3 + x];
            }
        }
    }
    let out = check_fwd_f64(&c).attention_out;
    for t in 0..3 {
        let head = |h: usize| &out[(t * 4 + h) * 3..][..3];
        assert_eq!(head(0), head(1), "heads 0, 1 share kv head 0");
        assert_eq!(head(2), head(3), "heads 2, 3 share kv head 1");
        assert_ne!(head(0), head(2), "groups use different kv heads");
    }
}

// ---------------------------------------------------------------------------------------------
// Sparse modes
// ---------------------------------------------------------------------------------------------

/// Mode 0: explicit mask OR outside `[−pre, next]` (origin top-left), for a `[Sq, Skv]` mask, a
/// `[B, N, Sq, Skv]` mask and several windows, including negative pre / next.
#[test]
fn mode0_dense_mask_and_pre_next_window() {
    let mut rng = Rng::new(10);
    let windows = [
        (INT_MAX, INT_MAX),
        (1, 0),
        (0, 2),
        (2, 1),
        (INT_MAX, 0),
        (9, -3),
        (-1, 3),
        (0, 0),
    ];
    for (pre, next) in windows {
        for (mb, mh) in [(1, 1), (3, 2)] {
            for sink in [false, true] {
                let mut c = Case::new(&mut rng, 2, 1, 3, 3, &[4, 2, 5], &[5, 3, 4])
                    .mode(SparseMode::DefaultMask)
                    .pre_next(pre, next)
                    .random_dense_mask(&mut rng, mb, mh, 0.25);
                if sink {
                    c = c.with_sink(&mut rng);
                }
                check_fwd_f64(&c);
            }
        }
    }
}

/// Mode 0 with an all-zero mask is exactly the pre/next window: check one picture by hand.
/// pre = 1, next = 0 on a 4×4 sequence allows j ∈ {i − 1, i}.
#[test]
fn mode0_window_picture_by_hand() {
    let mut rng = Rng::new(11);
    let mut c = Case::new(&mut rng, 1, 1, 4, 4, &[4], &[4])
        .mode(SparseMode::DefaultMask)
        .pre_next(1, 0)
        .random_dense_mask(&mut rng, 1, 1, 0.0);
    let expected = [vec!["1...", "11..", ".11.", "..11"]];
    assert_pictures(&mut c, &expected);
}

/// Mode 1: the explicit mask alone (pre/next ignored), for `[B, 1, Sq, Skv]`, `[Sq, Skv]` and
/// `[B, N, Sq, Skv]` masks.
#[test]
fn mode1_dense_mask_shapes() {
    let mut rng = Rng::new(12);
    for (mb, mh) in [(3, 1), (1, 1), (3, 2)] {
        for (pre, next) in [(INT_MAX, INT_MAX), (0, 0), (-1, 1)] {
            for sink in [false, true] {
                let mut c = Case::new(&mut rng, 2, 2, 4, 4, &[3, 4, 2], &[4, 4, 5])
                    .mode(SparseMode::AllMask)
                    .pre_next(pre, next)
                    .random_dense_mask(&mut rng, mb, mh, 0.35);
                if sink {
                    c = c.with_sink(&mut rng);
                }
                let got = check_fwd_f64(&c);
                // pre/next really are ignored.
                let wide = c.clone().pre_next(INT_MAX, INT_MAX);
                let got_wide = varlen_fwd::<f64>(&wide.problem(), &c.q, &c.k, &c.v);
                assert_eq!(got.attention_out, got_wide.attention_out);
            }
        }
    }
}

/// Mode 1: sequence b reads the top-left `[Sq_b, Skv_b]` corner of a `[maxSq, maxSkv]` mask and,
/// for a `[B, 1, …]` mask, its own batch slice. Checked on a hand-written mask.
#[test]
fn mode1_mask_slicing_by_hand() {
    let mut rng = Rng::new(13);
    let mut c = Case::new(&mut rng, 1, 1, 4, 4, &[2, 3], &[4, 3]).mode(SparseMode::AllMask);
    // [B=2, 1, rows=3, cols=4]
    #[rustfmt::skip]
    let data = vec![
        0, 1, 0, 1,
        1, 0, 0, 1,
        1, 1, 1, 1, // row 2: outside sequence 0 (Sq = 2)
        //
        0, 0, 1, 1, // column 3: outside sequence 1 (Skv = 3)
        1, 0, 1, 0,
        0, 1, 0, 0,
    ];
    c.mask = MaskSpec::Dense {
        data,
        batch: 2,
        heads: 1,
        rows: 3,
        cols: 4,
    };
    let expected = [vec!["1.1.", ".11."], vec!["11.", ".1.", "1.1"]];
    assert_pictures(&mut c, &expected);
}

/// Modes 2, 3, 4, 6, 7, 8 with the compressed mask: the pattern comes from the §1 formulas.
#[test]
fn compressed_modes_match_spec_table() {
    let mut rng = Rng::new(14);
    // (mode, seq_q, seq_kv, windows, prefix) within each mode's documented constraints.
    type Config = (
        SparseMode,
        &'static [usize],
        &'static [usize],
        &'static [(i64, i64)],
        Option<&'static [i64]>,
    );
    let configs: [Config; 11] = [
        (
            SparseMode::LeftUpCausal,
            &[3, 4, 2, 1],
            &[5, 2, 2, 4],
            &[(INT_MAX, INT_MAX), (0, 0)],
            None,
        ),
        (
            SparseMode::RightDownCausal,
            &[3, 2, 4],
            &[5, 2, 6],
            &[(INT_MAX, INT_MAX), (0, 0)],
            None,
        ),
        (
            SparseMode::Band,
            &[3, 4, 2, 5],
            &[5, 2, 2, 3],
            &[
                (INT_MAX, INT_MAX),
                (0, 0),
                (1, 0),
                (2, 1),
                (0, 2),
                (3, -1),
                (-1, 2),
                (INT_MAX, 0),
            ],
            None,
        ),
        (
            SparseMode::PrefixCompress,
            &[3, 2, 4],
            &[5, 4, 6],
            &[(INT_MAX, INT_MAX)],
            Some(&[2, 0, 7]),
        ),
        (
            SparseMode::PrefixCompress,
            &[3, 2, 4],
            &[5, 4, 6],
            &[(INT_MAX, INT_MAX)],
            Some(&[4, 3, 4]),
        ),
        (
            SparseMode::PrefixCompress,
            &[3, 2],
            &[3, 4],
            &[(INT_MAX, INT_MAX)],
            None,
        ),
        // Mode 7: band sequence = last with Sq > 0 (b = 2): pre ≥ 5, −2 ≤ next ≤ 0.
        (
            SparseMode::RightDownCausalBand,
            &[3, 2, 3],
            &[3, 6, 5],
            &[(5, 0), (6, -1), (INT_MAX, -2)],
            None,
        ),
        // Mode 7 with a trailing empty query sequence: band sequence is b = 1 (Sq 2, Skv 6).
        (
            SparseMode::RightDownCausalBand,
            &[3, 2, 0],
            &[3, 6, 4],
            &[(6, 0), (7, -2), (INT_MAX, -4)],
            None,
        ),
        // Mode 8: band sequence = first with Sq > 0 (b = 0, Sq 3, Skv 4): pre ≥ 4, next ≥ −1.
        (
            SparseMode::BandLeftUpCausal,
            &[3, 5, 4],
            &[4, 5, 4],
            &[(4, 1), (INT_MAX, 0), (5, -1), (4, 3)],
            None,
        ),
        // Mode 8 with a leading empty query sequence: band sequence is b = 1 (Sq 3, Skv 4).
        (
            SparseMode::BandLeftUpCausal,
            &[0, 3, 2],
            &[2, 4, 3],
            &[(4, 1), (INT_MAX, -1)],
            None,
        ),
        // Mode 7 with a single sequence: a plain band.
        (
            SparseMode::RightDownCausalBand,
            &[3],
            &[5],
            &[(5, 0), (5, -2)],
            None,
        ),
    ];
    for (mode, sq, skv, windows, prefix) in configs {
        for &(pre, next) in windows {
            for (n, nkv) in [(2, 2), (4, 2)] {
                for sink in [false, true] {
                    let mut c = Case::new(&mut rng, n, nkv, 3, 3, sq, skv)
                        .mode(mode)
                        .pre_next(pre, next)
                        .compressed();
                    c.prefix = prefix.map(<[i64]>::to_vec);
                    if sink {
                        c = c.with_sink(&mut rng);
                    }
                    check_fwd_f64(&c);
                }
            }
        }
    }
}

/// The masks of the compressed modes are what the §1 table says, checked as pictures.
#[test]
fn compressed_mode_pictures_by_hand() {
    let mut rng = Rng::new(15);
    // Mode 2 (top-left causal) on 3×4 and mode 3 (bottom-right causal) on 3×5.
    let mut c = Case::new(&mut rng, 1, 1, 5, 5, &[3], &[4])
        .mode(SparseMode::LeftUpCausal)
        .compressed();
    assert_pictures(&mut c, &[vec!["1...", "11..", "111."]]);
    let mut c = Case::new(&mut rng, 1, 1, 5, 5, &[3], &[5])
        .mode(SparseMode::RightDownCausal)
        .compressed();
    assert_pictures(&mut c, &[vec!["111..", "1111.", "11111"]]);
    // Mode 4 band, bottom-right origin: 3×5, δ = 2, pre 1, next 0 → d ∈ [1, 2].
    let mut c = Case::new(&mut rng, 1, 1, 5, 5, &[3], &[5])
        .mode(SparseMode::Band)
        .pre_next(1, 0)
        .compressed();
    assert_pictures(&mut c, &[vec![".11..", "..11.", "...11"]]);
    // Mode 6: bottom-right causal plus the first prefix[b] columns; prefix [3, 0].
    let mut c = Case::new(&mut rng, 1, 1, 5, 5, &[2, 2], &[5, 3])
        .mode(SparseMode::PrefixCompress)
        .compressed();
    c.prefix = Some(vec![3, 0]);
    assert_pictures(&mut c, &[vec!["1111.", "11111"], vec!["11.", "111"]]);
    // The prefix column itself (j = prefix) follows the causal rule: 3×4 (δ = 1) with
    // prefix 2, and 3×3 (δ = 0) with prefix 2.
    let mut c = Case::new(&mut rng, 1, 1, 5, 5, &[3, 3], &[4, 3])
        .mode(SparseMode::PrefixCompress)
        .compressed();
    c.prefix = Some(vec![2, 2]);
    assert_pictures(
        &mut c,
        &[vec!["11..", "111.", "1111"], vec!["11.", "11.", "111"]],
    );
}

/// sparse_mode_introduction.md, sparseMode=7: a 4×6 mode-3 sequence split across two cards by
/// query rows. Card 1: actual_seq_qlen {3,5}, actual_seq_kvlen {3,9}, preTokens 6,
/// nextTokens −2, its last sequence (2×6) is the band. Card 2 keeps mode 3:
/// actual_seq_qlen {2,7,11}, actual_seq_kvlen {6,11,15}. Together the two 2×6 halves are the
/// 4×6 mode-3 picture.
#[test]
fn mode7_doc_example_pictures() {
    let mut rng = Rng::new(16);
    let seq_q = burn_ascend_contract::varlen::lengths_from_cumulative(&[3, 5]).unwrap();
    let seq_kv = burn_ascend_contract::varlen::lengths_from_cumulative(&[3, 9]).unwrap();
    assert_eq!(
        (seq_q.as_slice(), seq_kv.as_slice()),
        (&[3, 2][..], &[3, 6][..])
    );
    let mut card1 = Case::new(&mut rng, 2, 1, 6, 6, &seq_q, &seq_kv)
        .mode(SparseMode::RightDownCausalBand)
        .pre_next(6, -2)
        .compressed();
    let card1_pictures = [
        vec!["1..", "11.", "111"], // mode 3, 3×3
        vec!["111...", "1111.."],  // band: rows 0–1 of the 4×6 mode-3 picture
    ];
    assert_pictures(&mut card1, &card1_pictures);

    let seq_q = burn_ascend_contract::varlen::lengths_from_cumulative(&[2, 7, 11]).unwrap();
    let seq_kv = burn_ascend_contract::varlen::lengths_from_cumulative(&[6, 11, 15]).unwrap();
    let mut card2 = Case::new(&mut rng, 2, 1, 6, 6, &seq_q, &seq_kv)
        .mode(SparseMode::RightDownCausal)
        .compressed();
    let card2_pictures = [
        vec!["11111.", "111111"], // rows 2–3 of the 4×6 mode-3 picture
        vec!["1....", "11...", "111..", "1111.", "11111"],
        vec!["1...", "11..", "111.", "1111"],
    ];
    assert_pictures(&mut card2, &card2_pictures);

    // The unsplit 4×6 sequence in mode 3 is the two halves stacked.
    let mut whole = Case::new(&mut rng, 1, 1, 6, 6, &[4], &[6])
        .mode(SparseMode::RightDownCausal)
        .compressed();
    let stacked: Vec<&str> = card1_pictures[1]
        .iter()
        .chain(&card2_pictures[0])
        .copied()
        .collect();
    assert_pictures(&mut whole, &[stacked]);

    // Card 2 in mode 7 as well: its last sequence (4×4) is then a band with pre ≥ 4 and
    // next = 0, which is the same causal picture.
    let mut card2_mode7 = Case::new(&mut rng, 2, 1, 6, 6, &seq_q, &seq_kv)
        .mode(SparseMode::RightDownCausalBand)
        .pre_next(4, 0)
        .compressed();
    assert_pictures(&mut card2_mode7, &card2_pictures);
}

/// sparse_mode_introduction.md, sparseMode=8: a 5×4 mode-2 sequence split by query rows. Card 1
/// keeps mode 2: actual_seq_qlen {3,5}, actual_seq_kvlen {3,7}. Card 2: actual_seq_qlen
/// {3,8,12}, actual_seq_kvlen {4,9,13}, preTokens 4, nextTokens 1, its first sequence (3×4) is
/// the band. Together the halves are the 5×4 mode-2 picture.
#[test]
fn mode8_doc_example_pictures() {
    let mut rng = Rng::new(17);
    let lens = burn_ascend_contract::varlen::lengths_from_cumulative;
    let mut card1 = Case::new(
        &mut rng,
        2,
        2,
        4,
        4,
        &lens(&[3, 5]).unwrap(),
        &lens(&[3, 7]).unwrap(),
    )
    .mode(SparseMode::LeftUpCausal)
    .compressed();
    let card1_pictures = [vec!["1..", "11.", "111"], vec!["1...", "11.."]];
    assert_pictures(&mut card1, &card1_pictures);

    let seq_q = lens(&[3, 8, 12]).unwrap();
    let seq_kv = lens(&[4, 9, 13]).unwrap();
    assert_eq!(
        (seq_q.as_slice(), seq_kv.as_slice()),
        (&[3, 5, 4][..], &[4, 5, 4][..])
    );
    let mut card2 = Case::new(&mut rng, 2, 2, 5, 5, &seq_q, &seq_kv)
        .mode(SparseMode::BandLeftUpCausal)
        .pre_next(4, 1)
        .compressed();
    let card2_pictures = [
        vec!["111.", "1111", "1111"], // band: rows 2–4 of the 5×4 mode-2 picture
        vec!["1....", "11...", "111..", "1111.", "11111"],
        vec!["1...", "11..", "111.", "1111"],
    ];
    assert_pictures(&mut card2, &card2_pictures);

    let mut whole = Case::new(&mut rng, 1, 1, 4, 4, &[5], &[4])
        .mode(SparseMode::LeftUpCausal)
        .compressed();
    let stacked: Vec<&str> = card1_pictures[1]
        .iter()
        .chain(&card2_pictures[0])
        .copied()
        .collect();
    assert_pictures(&mut whole, &[stacked]);
}

/// "If attenMask is null, sparseMode, preTokens and nextTokens are all ignored and every
/// position is computed."
#[test]
fn no_mask_ignores_mode_and_window() {
    let mut rng = Rng::new(18);
    let base = Case::new(&mut rng, 2, 1, 3, 3, &[3, 2, 4], &[4, 5, 4]).with_sink(&mut rng);
    let full = check_fwd_f64(&base);
    for mode in ALL_MODES {
        for (pre, next) in [(0, 0), (1, -1), (-1, 1), (INT_MAX, INT_MAX)] {
            let mut c = base.clone().mode(mode).pre_next(pre, next);
            c.prefix = Some(vec![1, 0, 2]);
            let got = check_fwd_f64(&c);
            assert_eq!(got, full, "mode {mode:?} pre {pre} next {next}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Empty sequences and fully masked rows
// ---------------------------------------------------------------------------------------------

#[test]
fn empty_sequences() {
    let mut rng = Rng::new(20);
    let shapes: [(&[usize], &[usize]); 5] = [
        (&[3, 0, 2], &[2, 3, 4]),
        (&[3, 0, 2], &[2, 0, 3]),
        (&[3, 2, 2], &[2, 0, 3]),
        (&[0, 2, 0], &[0, 3, 0]),
        (&[2], &[0]),
    ];
    for (sq, skv) in shapes {
        for sink in [false, true] {
            for layout in [SoftmaxLayout::SequenceHeadMajor, SoftmaxLayout::SameAsInput] {
                let mut c = Case::new(&mut rng, 2, 1, 3, 3, sq, skv).layout(layout);
                if sink {
                    c = c.with_sink(&mut rng);
                }
                let got = check_fwd_f64(&c);
                // Explicitly: every row of a sequence with Sq > 0, Skv = 0 is out 0, max 0,
                // sum 0, sink or not.
                let mut q0 = 0;
                for b in 0..sq.len() {
                    if skv[b] == 0 {
                        for i in 0..sq[b] {
                            for h in 0..2 {
                                let row = (q0 + i) * 2 + h;
                                assert!(got.attention_out[row * 3..][..3]
                                    .iter()
                                    .all(|&x| x == 0.0));
                                let at = spec_stat_index(layout, q0, sq[b], 2, h, i);
                                assert_eq!(got.softmax_max[at..at + 8], [0.0; 8]);
                                assert_eq!(got.softmax_sum[at..at + 8], [0.0; 8]);
                            }
                        }
                    }
                    q0 += sq[b];
                }
            }
        }
    }
    // Empty sequences under masks: mode 0 dense, mode 2 compressed.
    let c = Case::new(&mut rng, 2, 2, 3, 3, &[3, 0, 2, 2], &[2, 3, 0, 4])
        .mode(SparseMode::DefaultMask)
        .pre_next(1, 1)
        .random_dense_mask(&mut rng, 4, 1, 0.2);
    check_fwd_f64(&c);
    let c = Case::new(&mut rng, 2, 2, 3, 3, &[3, 0, 2, 2], &[2, 3, 0, 4])
        .mode(SparseMode::LeftUpCausal)
        .compressed()
        .with_sink(&mut rng);
    check_fwd_f64(&c);
}

/// Cases with fully masked rows: mode 1 with an all-ones row, mode 4 with a band that misses
/// some rows, mode 0 with pre = −1 (the last row of a square sequence sees nothing).
fn fully_masked_cases(rng: &mut Rng) -> Vec<(Case, Vec<(usize, usize)>)> {
    // (case, [(token, head)] of rows that must be fully masked)
    let mut out = Vec::new();
    // Mode 1, [1,1,3,4] mask with row 1 all ones.
    let mut c = Case::new(rng, 2, 1, 3, 3, &[3, 2], &[4, 4]).mode(SparseMode::AllMask);
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
    out.push((c, vec![(1, 0), (1, 1), (4, 0), (4, 1)]));
    // Mode 4: Sq 4, Skv 2, δ = −2, pre 0 next 0 → only j = i − 2: rows 0, 1 empty.
    let c = Case::new(rng, 1, 1, 3, 3, &[4], &[2])
        .mode(SparseMode::Band)
        .pre_next(0, 0)
        .compressed();
    out.push((c, vec![(0, 0), (1, 0)]));
    // Mode 0, pre −1, next 1 → only j = i + 1: the last row of a 3×3 sequence is empty.
    let c = Case::new(rng, 1, 1, 3, 3, &[3], &[3])
        .mode(SparseMode::DefaultMask)
        .pre_next(-1, 1)
        .random_dense_mask(rng, 1, 1, 0.0);
    out.push((c, vec![(2, 0)]));
    out
}

#[test]
fn fully_masked_rows_without_sink() {
    let mut rng = Rng::new(21);
    for (c, rows) in fully_masked_cases(&mut rng) {
        let got = check_fwd_f64(&c);
        let (n, dv) = (c.dims.head_num, c.dims.value_dim);
        for (t, h) in rows {
            assert!(got.attention_out[(t * n + h) * dv..][..dv]
                .iter()
                .all(|&x| x == 0.0));
            let (q0, sq, i) = locate(&c.dims.seq_q, t);
            let at = spec_stat_index(c.attrs.softmax_layout, q0, sq, n, h, i);
            assert_eq!(
                got.softmax_max[at..at + 8],
                [f32::MIN; 8],
                "max of ({t}, {h})"
            );
            assert_eq!(
                got.softmax_sum[at..at + 8],
                [f32::MAX; 8],
                "sum of ({t}, {h})"
            );
        }
    }
}

#[test]
fn fully_masked_rows_with_sink() {
    let mut rng = Rng::new(22);
    for (c, rows) in fully_masked_cases(&mut rng) {
        let c = c.with_sink(&mut rng);
        let got = check_fwd_f64(&c);
        let (n, dv) = (c.dims.head_num, c.dims.value_dim);
        let sink = c.sink.clone().unwrap();
        for (t, h) in rows {
            assert!(got.attention_out[(t * n + h) * dv..][..dv]
                .iter()
                .all(|&x| x == 0.0));
            let (q0, sq, i) = locate(&c.dims.seq_q, t);
            let at = spec_stat_index(c.attrs.softmax_layout, q0, sq, n, h, i);
            assert_eq!(
                got.softmax_max[at..at + 8],
                [sink[h]; 8],
                "max of ({t}, {h})"
            );
            assert_eq!(got.softmax_sum[at..at + 8], [1.0; 8], "sum of ({t}, {h})");
        }
    }
}

/// (first token of the sequence, its Sq, local row) of global query token `t`.
fn locate(seq_q: &[usize], t: usize) -> (usize, usize, usize) {
    let mut q0 = 0;
    for &sq in seq_q {
        if t < q0 + sq {
            return (q0, sq, t - q0);
        }
        q0 += sq;
    }
    panic!("token {t} out of range");
}

// ---------------------------------------------------------------------------------------------
// Sink
// ---------------------------------------------------------------------------------------------

/// Asserts that, for every head, sequence b's allowed (i, j) set is `expected[b]` ('1' allowed,
/// '.' masked), both by the spec predicate and by probing the reference forward: with q = 0 all
/// allowed scores are equal, so with one-hot values `v_j = e_j` row i's output is
/// `1/count` at the allowed columns and 0 elsewhere. Needs D = Dv ≥ max Skv and no pse.
fn assert_pictures(c: &mut Case, expected: &[Vec<&str>]) {
    let (n, nkv, dv) = (c.dims.head_num, c.dims.kv_head_num, c.dims.value_dim);
    assert!(c.dims.seq_kv.iter().all(|&s| s <= dv) && c.dims.head_dim == dv);
    assert_eq!(expected.len(), c.dims.batch());
    c.q.iter_mut().for_each(|x| *x = 0.0);
    let mut kv0 = 0;
    for &skv in &c.dims.seq_kv {
        for j in 0..skv {
            for h in 0..nkv {
                for x in 0..dv {
                    c.v[((kv0 + j) * nkv + h) * dv + x] = f64::from(u8::from(x == j));
                }
            }
        }
        kv0 += skv;
    }
    let out = check_fwd_f64(c).attention_out;
    let mut q0 = 0;
    for (b, pic) in expected.iter().enumerate() {
        let (sq, skv) = (c.dims.seq_q[b], c.dims.seq_kv[b]);
        assert_eq!(pic.len(), sq, "picture rows of sequence {b}");
        for h in 0..n {
            for i in 0..sq {
                let spec_row: String = (0..skv)
                    .map(|j| if spec_masked(c, b, h, i, j) { '.' } else { '1' })
                    .collect();
                let probed: String = (0..skv)
                    .map(|j| {
                        if out[((q0 + i) * n + h) * dv + j] > 0.0 {
                            '1'
                        } else {
                            '.'
                        }
                    })
                    .collect();
                assert_eq!(
                    spec_row, pic[i],
                    "spec predicate, sequence {b} head {h} row {i}"
                );
                assert_eq!(probed, pic[i], "reference, sequence {b} head {h} row {i}");
            }
        }
        q0 += sq;
    }
}
