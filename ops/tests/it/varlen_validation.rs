//! Every validation rule of the varlen op, broken one at a time: each must give a typed error
//! naming the aclnn parameter (and a valid base case must pass).

use burn::backend::NdArray;
use burn::tensor::Tensor;
use burn_ascend_ops::varlen::{MaskSpec, VarlenBwdShapes, VarlenShapes, VarlenSpec};
use burn_ascend_ops::{flash_spec, varlen_score, AttnError, FlashAttnOptions, PseType, SparseMode};

/// Two sequences: q lengths [2, 3], kv lengths [3, 4]; N = 4, Nkv = 2, D = 8.
fn base() -> (VarlenSpec, VarlenShapes) {
    let spec = VarlenSpec::from_lengths(&[2, 3], &[3, 4], 4, 0.35);
    assert_eq!(
        (&spec.actual_seq_q_len[..], &spec.actual_seq_kv_len[..]),
        (&[2, 5][..], &[3, 7][..])
    );
    let shapes = VarlenShapes {
        query: [5, 4, 8],
        key: [7, 2, 8],
        value: [7, 2, 8],
        sink: Some(4),
        pse: None,
        atten_mask: None,
        alibi_slopes: None,
        drop_mask: None,
    };
    (spec, shapes)
}

fn bwd_base() -> VarlenBwdShapes {
    VarlenBwdShapes {
        dy: [5, 4, 8],
        attention_in: [5, 4, 8],
        softmax_max: [5, 4, 8],
        softmax_sum: [5, 4, 8],
    }
}

fn expect(param: &str, what: &str, r: Result<impl std::fmt::Debug, AttnError>) {
    match r {
        Err(e) => {
            assert_eq!(e.param(), Some(param), "{what}: wrong parameter in '{e}'");
            assert!(
                e.to_string().starts_with(&format!("invalid {param}: ")),
                "{what}: {e}"
            );
        }
        Ok(v) => panic!("{what}: accepted ({v:?})"),
    }
}

type Edit = fn(&mut VarlenSpec, &mut VarlenShapes);

fn compressed(s: &mut VarlenSpec, mode: SparseMode) {
    s.atten_mask = MaskSpec::Compressed;
    s.attrs.sparse_mode = mode;
}

/// An explicit mask: the spec's kind and the carrier tensor's shape.
fn dense(s: &mut VarlenSpec, sh: &mut VarlenShapes, shape: Vec<usize>) {
    s.atten_mask = MaskSpec::Dense;
    sh.atten_mask = Some(shape);
}

/// In TND the kernel reads a per-batch mask at packed per-sequence offsets: accepted when every
/// sequence has the longest lengths (both readings agree), like the shared forms always are.
#[test]
fn dense_masks_in_tnd_are_accepted_where_the_kernel_reads_them_top_left() {
    let (mut spec, mut shapes) = base();
    for shape in [vec![3, 4], vec![1, 1, 3, 4]] {
        dense(&mut spec, &mut shapes, shape);
        spec.validate_fwd(&shapes).unwrap();
    }
    let mut even = VarlenSpec::from_lengths(&[3, 3], &[4, 4], 4, 0.35);
    let mut even_shapes = VarlenShapes {
        query: [6, 4, 8],
        key: [8, 2, 8],
        value: [8, 2, 8],
        sink: None,
        pse: None,
        atten_mask: None,
        alibi_slopes: None,
        drop_mask: None,
    };
    for shape in [vec![2, 1, 3, 4], vec![2, 4, 3, 4]] {
        dense(&mut even, &mut even_shapes, shape);
        even.validate_fwd(&even_shapes).unwrap();
    }
}

#[test]
fn the_base_case_is_valid() {
    let (spec, shapes) = base();
    spec.validate_fwd(&shapes).unwrap();
    spec.validate_bwd(&shapes, &bwd_base()).unwrap();
}

#[test]
fn every_forward_rule_names_its_parameter() {
    let cases: Vec<(&str, &str, Edit)> = vec![
        ("headNum", "headNum 0", |s, _| s.head_num = 0),
        ("headNum", "headNum 257", |s, sh| {
            s.head_num = 257;
            sh.query[1] = 257;
        }),
        ("headNum", "headNum != query N", |s, _| s.head_num = 2),
        ("key", "Nkv does not divide N", |_, sh| {
            sh.key[1] = 3;
            sh.value[1] = 3;
        }),
        ("key", "Nkv 0", |_, sh| {
            sh.key[1] = 0;
            sh.value[1] = 0;
        }),
        ("value", "value T != key T", |_, sh| sh.value[0] = 6),
        ("value", "value N != key N", |_, sh| sh.value[1] = 1),
        ("query", "D 0", |_, sh| {
            sh.query[2] = 0;
            sh.key[2] = 0;
            sh.value[2] = 0;
        }),
        ("query", "D 769", |_, sh| {
            sh.query[2] = 769;
            sh.key[2] = 769;
            sh.value[2] = 769;
        }),
        ("key", "key D != query D", |_, sh| sh.key[2] = 4),
        ("value", "value D > D", |_, sh| sh.value[2] = 9),
        ("actualSeqQLen", "no sequences", |s, _| {
            s.actual_seq_q_len.clear()
        }),
        ("actualSeqQLen", "decreasing", |s, _| {
            s.actual_seq_q_len = vec![3, 2]
        }),
        ("actualSeqQLen", "negative", |s, _| {
            s.actual_seq_q_len = vec![-1, 5]
        }),
        ("actualSeqQLen", "does not end at Tq", |s, _| {
            s.actual_seq_q_len = vec![2, 4]
        }),
        ("actualSeqKvLen", "does not end at Tkv", |s, _| {
            s.actual_seq_kv_len = vec![3, 8]
        }),
        ("actualSeqKvLen", "batch differs", |s, sh| {
            s.actual_seq_kv_len = vec![7];
            sh.key[0] = 7;
        }),
        ("keepProb", "keepProb 0", |s, _| s.attrs.keep_prob = 0.0),
        ("keepProb", "keepProb 1.5", |s, _| s.attrs.keep_prob = 1.5),
        ("keepProb", "keepProb NaN", |s, _| {
            s.attrs.keep_prob = f64::NAN
        }),
        ("innerPrecise", "innerPrecise 3", |s, _| {
            s.attrs.inner_precise = 3
        }),
        ("scaleValue", "scale inf", |s, _| {
            s.attrs.scale = f64::INFINITY
        }),
        ("sink", "sink length != N", |_, sh| sh.sink = Some(3)),
        ("dropMask", "keepProb < 1 without dropMask", |s, _| {
            s.attrs.keep_prob = 0.9
        }),
        ("dropMask", "dropMask too short", |s, sh| {
            s.attrs.keep_prob = 0.9;
            // needs N·Σ Sq·Skv = 4·(2·3 + 3·4) = 72 bits = 9 bytes
            sh.drop_mask = Some(vec![8]);
        }),
        ("dropMask", "dropMask not 1-D", |s, sh| {
            s.attrs.keep_prob = 0.9;
            sh.drop_mask = Some(vec![3, 3]);
        }),
        ("attenMask", "explicit mask with mode 3", |s, sh| {
            s.attrs.sparse_mode = SparseMode::RightDownCausal;
            dense(s, sh, vec![3, 4]);
        }),
        ("attenMask", "compressed mask with mode 0", |s, _| {
            s.atten_mask = MaskSpec::Compressed
        }),
        ("attenMask", "rank-3 mask", |s, sh| {
            dense(s, sh, vec![1, 3, 4])
        }),
        ("attenMask", "mask batch 3", |s, sh| {
            dense(s, sh, vec![3, 1, 3, 4])
        }),
        ("attenMask", "mask heads 2", |s, sh| {
            dense(s, sh, vec![2, 2, 3, 4])
        }),
        ("attenMask", "mask too small", |s, sh| {
            dense(s, sh, vec![3, 3])
        }),
        (
            "attenMask",
            "mask larger than the longest sequence",
            |s, sh| dense(s, sh, vec![4, 4]),
        ),
        (
            "attenMask",
            "per-batch mask with unequal sequences",
            |s, sh| dense(s, sh, vec![2, 1, 3, 4]),
        ),
        (
            "attenMask",
            "per-batch per-head mask with unequal sequences",
            |s, sh| dense(s, sh, vec![2, 4, 3, 4]),
        ),
        (
            "attenMask",
            "per-head mask shared by the batches",
            |s, sh| dense(s, sh, vec![1, 4, 3, 4]),
        ),
        (
            "attenMask",
            "explicit kind without a mask tensor",
            |s, _| s.atten_mask = MaskSpec::Dense,
        ),
        (
            "attenMask",
            "mask tensor without the explicit kind",
            |_, sh| sh.atten_mask = Some(vec![3, 4]),
        ),
        (
            "attenMask",
            "mask tensor with the compressed kind",
            |s, sh| {
                compressed(s, SparseMode::RightDownCausal);
                sh.atten_mask = Some(vec![2048, 2048]);
            },
        ),
        ("actualSeqQLen", "mode 3 with Sq > Skv", |s, _| {
            compressed(s, SparseMode::RightDownCausal);
            s.actual_seq_kv_len = vec![1, 7];
        }),
        ("preTokens", "band without overlap", |s, _| {
            compressed(s, SparseMode::Band);
            s.attrs.pre_tokens = -2;
            s.attrs.next_tokens = 1;
        }),
        ("prefix", "mode 6 without prefix", |s, _| {
            compressed(s, SparseMode::PrefixCompress)
        }),
        ("prefix", "mode 6 prefix length", |s, _| {
            compressed(s, SparseMode::PrefixCompress);
            s.prefix = Some(vec![2]);
        }),
        ("prefix", "mode 6 prefix below Skv - Sq", |s, _| {
            compressed(s, SparseMode::PrefixCompress);
            s.prefix = Some(vec![0, 2]);
        }),
        ("prefix", "mode 6 prefix above Skv", |s, _| {
            compressed(s, SparseMode::PrefixCompress);
            s.prefix = Some(vec![2, 5]);
        }),
        (
            "preTokens",
            "mode 7 preTokens < Skv of the last sequence",
            |s, _| {
                compressed(s, SparseMode::RightDownCausalBand);
                s.attrs.pre_tokens = 3;
                s.attrs.next_tokens = 0;
            },
        ),
        ("nextTokens", "mode 7 nextTokens > 0", |s, _| {
            compressed(s, SparseMode::RightDownCausalBand);
            s.attrs.pre_tokens = 4;
            s.attrs.next_tokens = 1;
        }),
        (
            "actualSeqQLen",
            "mode 7 Sq > Skv outside the band",
            |s, _| {
                compressed(s, SparseMode::RightDownCausalBand);
                s.actual_seq_kv_len = vec![1, 7];
                s.attrs.pre_tokens = 6;
                s.attrs.next_tokens = 0;
            },
        ),
        (
            "preTokens",
            "mode 8 preTokens < Skv of the first sequence",
            |s, _| {
                compressed(s, SparseMode::BandLeftUpCausal);
                s.attrs.pre_tokens = 2;
                s.attrs.next_tokens = 0;
            },
        ),
        ("nextTokens", "mode 8 nextTokens < Sq - Skv", |s, _| {
            compressed(s, SparseMode::BandLeftUpCausal);
            s.actual_seq_kv_len = vec![1, 7];
            s.attrs.pre_tokens = 3;
            s.attrs.next_tokens = 0;
        }),
        ("realShift", "pse with mode 7", |s, sh| {
            compressed(s, SparseMode::RightDownCausalBand);
            s.attrs.pre_tokens = 4;
            s.attrs.next_tokens = 0;
            s.attrs.pse_type = PseType::InnerMulAdd;
            sh.alibi_slopes = Some(vec![4]);
        }),
        ("realShift", "pse with mode 8 and Sq != Skv", |s, sh| {
            compressed(s, SparseMode::BandLeftUpCausal);
            s.attrs.pre_tokens = 3;
            s.attrs.next_tokens = 0;
            s.attrs.pse_type = PseType::InnerMulAdd;
            sh.alibi_slopes = Some(vec![4]);
        }),
        ("realShift", "pse with an empty query sequence", |s, sh| {
            s.actual_seq_q_len = vec![0, 5];
            sh.query[0] = 5;
            s.attrs.pse_type = PseType::InnerMulAdd;
            sh.alibi_slopes = Some(vec![4]);
        }),
        ("pseType", "pseType 0 without realShift", |s, _| {
            s.attrs.pse_type = PseType::OuterMulAdd
        }),
        ("pseType", "dense pse with pseType 2", |s, sh| {
            s.attrs.pse_type = PseType::InnerMulAdd;
            sh.pse = Some(vec![72]);
        }),
        ("realShift", "dense pse of the wrong length", |_, sh| {
            sh.pse = Some(vec![71]);
        }),
        ("pseType", "slopes with pseType 1", |_, sh| {
            sh.alibi_slopes = Some(vec![4]);
        }),
        ("realShift", "slopes of the wrong shape", |s, sh| {
            s.attrs.pse_type = PseType::InnerMulAddSqrt;
            sh.alibi_slopes = Some(vec![3]);
        }),
        (
            "realShift",
            "per-batch slopes of the wrong batch",
            |s, sh| {
                s.attrs.pse_type = PseType::InnerMulAdd;
                sh.alibi_slopes = Some(vec![3, 4]);
            },
        ),
    ];
    for (param, what, edit) in cases {
        let (mut spec, mut shapes) = base();
        edit(&mut spec, &mut shapes);
        expect(param, what, spec.validate_fwd(&shapes));
    }
}

/// A pse given as a tensor (`VarlenInputs::pse`) is validated by its shape: the flat
/// `[pseTotalLen]` with pseType 0 or 1 is accepted, in both directions, and so are ALiBi slopes
/// (`VarlenInputs::alibi_slopes`, `[N]` or `[B, N]`) with pseType 2 or 3; any other shape, the
/// other pseType, or a pse together with slopes is a typed error naming the parameter.
#[test]
fn a_pse_tensor_is_validated_by_its_shape_and_never_together_with_slopes() {
    let (spec, mut shapes) = base();
    shapes.pse = Some(vec![72]);
    for pse_type in [PseType::OuterMulAdd, PseType::OuterAddMul] {
        let mut s = spec.clone();
        s.attrs.pse_type = pse_type;
        s.validate_fwd(&shapes).unwrap();
        s.validate_bwd(&shapes, &bwd_base()).unwrap();
    }
    for (pse_type, slopes) in [
        (PseType::InnerMulAdd, vec![4]),
        (PseType::InnerMulAddSqrt, vec![2, 4]),
    ] {
        let (mut s, mut sh) = base();
        s.attrs.pse_type = pse_type;
        sh.alibi_slopes = Some(slopes);
        s.validate_fwd(&sh).unwrap();
        s.validate_bwd(&sh, &bwd_base()).unwrap();
    }
    let cases: Vec<(&str, &str, Edit)> = vec![
        ("realShift", "a pse tensor of the wrong length", |_, sh| {
            sh.pse = Some(vec![71])
        }),
        ("realShift", "a pse tensor of rank 2", |_, sh| {
            sh.pse = Some(vec![4, 18])
        }),
        ("pseType", "a pse tensor with pseType 2", |s, sh| {
            s.attrs.pse_type = PseType::InnerMulAdd;
            sh.pse = Some(vec![72]);
        }),
        ("realShift", "a pse tensor and ALiBi slopes", |_, sh| {
            sh.pse = Some(vec![72]);
            sh.alibi_slopes = Some(vec![4]);
        }),
        (
            "realShift",
            "a pse tensor with an empty query sequence",
            |s, sh| {
                s.actual_seq_q_len = vec![0, 5];
                sh.pse = Some(vec![4 * 5 * 4]);
            },
        ),
    ];
    for (param, what, edit) in cases {
        let (mut spec, mut shapes) = base();
        edit(&mut spec, &mut shapes);
        expect(param, what, spec.validate_fwd(&shapes));
        expect(param, what, spec.validate_bwd(&shapes, &bwd_base()));
    }
}

/// The ALiBi-compressed pse needs Sq = Skv in every sequence and a causal mode: on the base
/// case (unequal lengths, no mask) it is a typed error, then the mode is named.
#[test]
fn the_compressed_alibi_pse_needs_equal_lengths_and_a_causal_mode() {
    let (spec, mut shapes) = base();
    shapes.pse = Some(vec![1, 4, 1024, 4]);
    expect("realShift", "unequal lengths", spec.validate_fwd(&shapes));
    let mut equal = VarlenSpec::from_lengths(&[2, 4], &[2, 4], 4, 0.35);
    let eq_shapes = VarlenShapes {
        query: [6, 4, 8],
        key: [6, 2, 8],
        value: [6, 2, 8],
        sink: Some(4),
        pse: shapes.pse.clone(),
        atten_mask: None,
        alibi_slopes: None,
        drop_mask: None,
    };
    expect(
        "sparseMode",
        "no causal mask",
        equal.validate_fwd(&eq_shapes),
    );
    compressed(&mut equal, SparseMode::RightDownCausal);
    equal.validate_fwd(&eq_shapes).unwrap();
}

#[test]
fn every_backward_rule_names_its_parameter() {
    type BwdEdit = fn(&mut VarlenShapes, &mut VarlenBwdShapes);
    let edits: Vec<(&str, BwdEdit)> = vec![
        ("value", |s, _| s.value[2] = 4),
        ("dy", |_, b| b.dy = [5, 4, 7]),
        ("attentionIn", |_, b| b.attention_in = [4, 4, 8]),
        ("softmaxMax", |_, b| b.softmax_max = [5, 4, 1]),
        ("softmaxSum", |_, b| b.softmax_sum = [5, 2, 8]),
    ];
    for (param, edit) in edits {
        let (spec, mut shapes) = base();
        let mut b = bwd_base();
        edit(&mut shapes, &mut b);
        expect(param, param, spec.validate_bwd(&shapes, &b));
    }
}

#[test]
fn the_burn_api_returns_the_typed_error_instead_of_panicking() {
    let device = Default::default();
    let (mut spec, _) = base();
    spec.attrs.keep_prob = 0.0;
    let q = Tensor::<NdArray, 3>::zeros([5, 4, 8], &device);
    let k = Tensor::<NdArray, 3>::zeros([7, 2, 8], &device);
    let r = varlen_score(q, k.clone(), k, None, &spec).map(|o| o.attention_out.dims());
    expect("keepProb", "burn api", r);
}

#[test]
fn the_flash_front_door_checks_its_own_options() {
    let opts = FlashAttnOptions::<NdArray>::default();
    expect(
        "cu_seqlens_q",
        "no leading zero",
        flash_spec([5, 4, 8], &[2, 5], &[0, 3, 7], &opts).map(|_| ()),
    );
    expect(
        "cu_seqlens_k",
        "no leading zero",
        flash_spec([5, 4, 8], &[0, 2, 5], &[3, 7], &opts).map(|_| ()),
    );
    let opts = FlashAttnOptions::<NdArray> {
        dropout: 1.0,
        ..Default::default()
    };
    expect(
        "dropout",
        "dropout 1",
        flash_spec([5, 4, 8], &[0, 2, 5], &[0, 3, 7], &opts).map(|_| ()),
    );
}

#[test]
fn causal_and_window_map_onto_cann_modes() {
    let causal = FlashAttnOptions::<NdArray> {
        causal: true,
        ..Default::default()
    };
    let s = flash_spec([5, 4, 8], &[0, 2, 5], &[0, 3, 7], &causal).unwrap();
    assert_eq!(
        (s.attrs.sparse_mode, &s.atten_mask),
        (SparseMode::RightDownCausal, &MaskSpec::Compressed)
    );
    // Sq > Skv somewhere: mode 3 is not allowed, bottom-right causal becomes a band with next = 0.
    let s = flash_spec([5, 4, 8], &[0, 4, 5], &[0, 3, 7], &causal).unwrap();
    assert_eq!(
        (s.attrs.sparse_mode, s.attrs.next_tokens),
        (SparseMode::Band, 0)
    );
    let window = FlashAttnOptions::<NdArray> {
        window: Some((2, -1)),
        causal: true,
        ..Default::default()
    };
    let s = flash_spec([5, 4, 8], &[0, 2, 5], &[0, 3, 7], &window).unwrap();
    assert_eq!(
        (s.attrs.sparse_mode, s.attrs.pre_tokens, s.attrs.next_tokens),
        (SparseMode::Band, 2, 0)
    );
    let full = flash_spec(
        [5, 4, 8],
        &[0, 2, 5],
        &[0, 3, 7],
        &FlashAttnOptions::<NdArray>::default(),
    )
    .unwrap();
    assert_eq!(full.atten_mask, MaskSpec::None);
    assert!((full.attrs.scale - 1.0 / 8f64.sqrt()).abs() < 1e-15);
}

#[test]
fn extreme_tokens_and_f32_overflowing_attributes_are_typed_errors() {
    // [maxSq, maxSkv] = [3, 4]
    let dense = |spec: &mut VarlenSpec, shapes: &mut VarlenShapes| dense(spec, shapes, vec![3, 4]);
    let (mut spec, shapes) = base();
    spec.attrs.scale = 1e300;
    expect("scaleValue", "scale 1e300", spec.validate_fwd(&shapes));
    let (mut spec, shapes) = base();
    spec.attrs.keep_prob = 5e-324;
    expect("keepProb", "keepProb 5e-324", spec.validate_fwd(&shapes));
    let (mut spec, shapes) = base();
    spec.attrs.keep_prob = 1e-39; // a subnormal f32: 1/keepProb is inf in f32
    expect("keepProb", "keepProb 1e-39", spec.validate_fwd(&shapes));

    // i64::MIN tokens: no wrap, no panic, a typed error naming the attribute.
    let (mut spec, mut shapes) = base();
    dense(&mut spec, &mut shapes);
    spec.attrs.next_tokens = i64::MIN;
    spec.attrs.pre_tokens = 0;
    expect("nextTokens", "next i64::MIN", spec.validate_fwd(&shapes));
    let (mut spec, mut shapes) = base();
    dense(&mut spec, &mut shapes);
    spec.attrs.pre_tokens = i64::MIN;
    spec.attrs.next_tokens = 0;
    expect("preTokens", "pre i64::MIN", spec.validate_fwd(&shapes));
    let (mut spec, shapes) = base();
    spec.attrs.sparse_mode = SparseMode::Band;
    spec.atten_mask = MaskSpec::Compressed;
    spec.attrs.pre_tokens = i64::MIN;
    spec.attrs.next_tokens = i64::MIN;
    expect("preTokens", "band i64::MIN", spec.validate_fwd(&shapes));
}

#[test]
fn mode_0_with_a_mask_refuses_an_empty_band_as_cann_varlen_tiling_does() {
    // flash_attention_score_tiling_general.cpp, SparseNoMaskModeCheck: prompt and varlen
    // mode 4 refuse pre + next < 0 too.
    let dense = |spec: &mut VarlenSpec, shapes: &mut VarlenShapes| dense(spec, shapes, vec![3, 4]);
    let (mut spec, mut shapes) = base();
    dense(&mut spec, &mut shapes);
    spec.attrs.pre_tokens = -2;
    spec.attrs.next_tokens = 1;
    expect("preTokens", "empty band", spec.validate_fwd(&shapes));
    let (mut spec, mut shapes) = base();
    dense(&mut spec, &mut shapes);
    spec.attrs.pre_tokens = 5;
    spec.attrs.next_tokens = -1;
    expect("nextTokens", "negative next", spec.validate_fwd(&shapes));
    // A band that leaves rows with nothing to attend (Skv + pre < Sq): sequence 0 has
    // Sq 2, Skv 3, so pre = -2 leaves row 1... with next 3: 3 - 2 = 1 < 2.
    let (mut spec, mut shapes) = base();
    dense(&mut spec, &mut shapes);
    spec.attrs.pre_tokens = -2;
    spec.attrs.next_tokens = 3;
    expect(
        "preTokens",
        "rows with nothing to attend",
        spec.validate_fwd(&shapes),
    );
    // Causal, full and overlapping bands are accepted.
    for (pre, next) in [(3, 0), (3, 4), (1, 1), (0, 0), (-1, 2)] {
        let (mut spec, mut shapes) = base();
        dense(&mut spec, &mut shapes);
        spec.attrs.pre_tokens = pre;
        spec.attrs.next_tokens = next;
        spec.validate_fwd(&shapes)
            .unwrap_or_else(|e| panic!("pre {pre} next {next}: {e}"));
    }
}

#[test]
fn products_of_huge_lengths_are_typed_errors_not_overflows() {
    // T = 2^40 with N·D elements never allocated: N·Sq·Skv overflows usize.
    let t = 1usize << 40;
    let mut spec = VarlenSpec::from_lengths(&[t], &[t], 4, 0.35);
    let shapes = VarlenShapes {
        query: [t, 4, 8],
        key: [t, 2, 8],
        value: [t, 2, 8],
        sink: None,
        pse: None,
        atten_mask: None,
        alibi_slopes: None,
        drop_mask: None,
    };
    spec.attrs.keep_prob = 0.5;
    let dropping = VarlenShapes {
        drop_mask: Some(vec![0]),
        ..shapes.clone()
    };
    expect("dropMask", "N·Sq·Skv bits", spec.validate_fwd(&dropping));
    let mut spec = VarlenSpec::from_lengths(&[t], &[t], 4, 0.35);
    spec.attrs.pse_type = PseType::OuterAddMul;
    let shapes = VarlenShapes {
        pse: Some(vec![0]),
        ..shapes
    };
    expect("realShift", "pseTotalLen", spec.validate_fwd(&shapes));
}

#[test]
fn extreme_attribute_values_are_printed_in_exponent_form_not_as_300_digits() {
    let (mut spec, shapes) = base();
    spec.attrs.keep_prob = 1e-300;
    let e = spec.validate_fwd(&shapes).unwrap_err().to_string();
    assert!(e.starts_with("invalid keepProb:"), "{e}");
    assert!(e.contains("got 1e-300"), "{e}");
    assert!(e.len() < 160, "{} characters: {e}", e.len());
    let (mut spec, shapes) = base();
    spec.attrs.scale = 1e300;
    let e = spec.validate_fwd(&shapes).unwrap_err().to_string();
    assert!(
        e.starts_with("invalid scaleValue:") && e.contains("got 1e300"),
        "{e}"
    );
    assert!(e.len() < 160, "{} characters: {e}", e.len());
    // Ordinary values keep their plain form.
    let (mut spec, shapes) = base();
    spec.attrs.keep_prob = 1.5;
    let e = spec.validate_fwd(&shapes).unwrap_err().to_string();
    assert!(e.contains("got 1.5"), "{e}");
}

/// The varlen carrier's `map` visits every tensor once, in the documented order (query, key,
/// value, sink, pse, attenMask, ALiBi slopes, dropMask; then dy, attentionIn, softmaxMax, softmaxSum), and `as_ref` keeps them
/// in place: every layer that converts the carrier (Autodiff, the aclnn builder) relies on it.
#[test]
fn the_varlen_carrier_maps_every_tensor_once_in_order() {
    use burn_ascend_ops::{VarlenGradInputs, VarlenInputs};
    let inputs = VarlenInputs {
        query: 1,
        key: 2,
        value: 3,
        sink: Some(4),
        pse: Some(5),
        atten_mask: Some(6),
        alibi_slopes: Some(7),
        drop_mask: Some(8),
    };
    let grad = VarlenGradInputs {
        inputs,
        dy: 9,
        attention_in: 10,
        softmax_max: 11,
        softmax_sum: 12,
    };
    let mut seen = Vec::new();
    let tens = grad.clone().map(|v| {
        seen.push(v);
        v * 10
    });
    assert_eq!(seen, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    assert_eq!(
        (
            tens.inputs.sink,
            tens.inputs.pse,
            tens.inputs.atten_mask,
            tens.inputs.alibi_slopes,
            tens.inputs.drop_mask,
            tens.softmax_sum
        ),
        (Some(40), Some(50), Some(60), Some(70), Some(80), 120)
    );
    let refs = grad.as_ref();
    assert_eq!(
        (
            *refs.inputs.pse.unwrap(),
            *refs.inputs.atten_mask.unwrap(),
            *refs.inputs.alibi_slopes.unwrap(),
            *refs.inputs.drop_mask.unwrap(),
            *refs.dy
        ),
        (5, 6, 7, 8, 9)
    );
    assert_eq!(grad.inputs.all(), [&1, &2, &3, &4, &5, &6, &7, &8]);
    let no_sink = VarlenInputs {
        sink: None,
        atten_mask: None,
        alibi_slopes: None,
        drop_mask: None,
        ..grad.inputs.clone()
    };
    assert_eq!(no_sink.all(), [&1, &2, &3, &5]);
}
