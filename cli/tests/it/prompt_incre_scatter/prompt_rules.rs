//! Prompt attention: every validation rule names its parameter.

use super::prompt::*;
use super::*;

#[test]
fn prompt_every_rule_names_its_parameter() {
    type Mutate = Box<dyn Fn(&mut PCase)>;
    let base = || pcase("base", PfaLayout::Bsnd, 2, 3, 4, 4, 2, 16, 40);
    let tnd = || prompt_cases().pop().unwrap();
    let cases: Vec<(&str, bool, Mutate, &str)> = vec![
        (
            "heads 0",
            false,
            Box::new(|c| c.spec.num_heads = 0),
            "numHeads",
        ),
        (
            "heads mismatch",
            false,
            Box::new(|c| c.spec.num_heads = 2),
            "numHeads",
        ),
        (
            "nkv not dividing",
            false,
            Box::new(|c| c.spec.num_key_value_heads = 3),
            "numKeyValueHeads",
        ),
        (
            "nkv != key N",
            false,
            Box::new(|c| c.spec.num_key_value_heads = 1),
            "numKeyValueHeads",
        ),
        (
            "rank",
            false,
            Box::new(|c| c.shapes.query = vec![2, 3, 64]),
            "query",
        ),
        ("key D", false, Box::new(|c| c.shapes.key[3] = 8), "key"),
        ("key B", false, Box::new(|c| c.shapes.key[0] = 1), "key"),
        (
            "value shape",
            false,
            Box::new(|c| c.shapes.value[1] = 5),
            "value",
        ),
        (
            "D too big",
            false,
            Box::new(|c| {
                c.shapes.query[3] = 600;
                c.shapes.key[3] = 600;
                c.shapes.value[3] = 600;
            }),
            "query",
        ),
        (
            "B unaligned D",
            false,
            Box::new(|c| {
                c.shapes.query = vec![129, 3, 4, 3];
                c.shapes.key = vec![129, 4, 2, 3];
                c.shapes.value = vec![129, 4, 2, 3];
            }),
            "query",
        ),
        (
            "scale",
            false,
            Box::new(|c| c.spec.scale_value = f64::NAN),
            "scaleValue",
        ),
        (
            "innerPrecise",
            false,
            Box::new(|c| c.spec.inner_precise = 4),
            "innerPrecise",
        ),
        (
            "sparse 5",
            false,
            Box::new(|c| c.spec.sparse_mode = 5),
            "sparseMode",
        ),
        (
            "actual len count",
            false,
            Box::new(|c| c.spec.actual_seq_lengths = Some(vec![])),
            "actualSeqLengths",
        ),
        (
            "actual len > S",
            false,
            Box::new(|c| c.spec.actual_seq_lengths = Some(vec![4])),
            "actualSeqLengths",
        ),
        (
            "actual kv < 0",
            false,
            Box::new(|c| c.spec.actual_seq_lengths_kv = Some(vec![1, -1])),
            "actualSeqLengthsKv",
        ),
        (
            "mode 1 no mask",
            false,
            Box::new(|c| c.spec.sparse_mode = 1),
            "attenMask",
        ),
        (
            "mode 3 dense mask",
            false,
            Box::new(|c| {
                c.spec.sparse_mode = 3;
                set_mask(c, dense_mask_values(3, 4, 1));
            }),
            "attenMask",
        ),
        (
            "compressed mode 0",
            false,
            Box::new(|c| c.spec.atten_mask = PromptMaskKind::Compressed),
            "attenMask",
        ),
        (
            "mask shape",
            false,
            Box::new(|c| set_mask(c, (vec![0; 12], vec![3, 2, 2]))),
            "attenMask",
        ),
        (
            "mask batch",
            false,
            Box::new(|c| set_mask(c, (vec![0; 36], vec![3, 3, 4]))),
            "attenMask",
        ),
        (
            "mask too small",
            false,
            Box::new(|c| set_mask(c, dense_mask_values(2, 4, 1))),
            "attenMask",
        ),
        (
            "dense kind without a mask tensor",
            false,
            Box::new(|c| c.spec.atten_mask = PromptMaskKind::Dense),
            "attenMask",
        ),
        (
            "mask tensor with no mask kind",
            false,
            Box::new(|c| {
                set_mask(c, dense_mask_values(3, 4, 1));
                c.spec.atten_mask = PromptMaskKind::None;
            }),
            "attenMask",
        ),
        (
            "mask tensor with the compressed kind",
            false,
            Box::new(|c| {
                set_mask(c, dense_mask_values(3, 4, 1));
                c.spec.sparse_mode = 3;
                c.spec.atten_mask = PromptMaskKind::Compressed;
            }),
            "attenMask",
        ),
        (
            "negative next",
            false,
            Box::new(|c| {
                set_mask(c, dense_mask_values(3, 4, 1));
                c.spec.pre_tokens = 0;
                c.spec.next_tokens = -1;
            }),
            "nextTokens",
        ),
        (
            "negative pre",
            false,
            Box::new(|c| {
                set_mask(c, dense_mask_values(3, 4, 1));
                c.spec.pre_tokens = -5;
                c.spec.next_tokens = 10;
            }),
            "preTokens",
        ),
        (
            "band disjoint",
            false,
            Box::new(|c| {
                c.spec.sparse_mode = 4;
                c.spec.atten_mask = PromptMaskKind::Compressed;
                c.spec.pre_tokens = -3;
                c.spec.next_tokens = 1;
            }),
            "preTokens",
        ),
        (
            "pse rank",
            false,
            Box::new(|c| set_pse(c, vec![0.0; 12], vec![3, 4])),
            "pseShift",
        ),
        (
            "pse heads",
            false,
            Box::new(|c| set_pse(c, vec![0.0; 24], vec![1, 2, 3, 4])),
            "pseShift",
        ),
        (
            "pse small",
            false,
            Box::new(|c| set_pse(c, vec![0.0; 36], vec![1, 4, 3, 3])),
            "pseShift",
        ),
        (
            "quant scale len",
            false,
            Box::new(|c| {
                c.spec.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0; 3].into(),
                    offset: None,
                })
            }),
            "quantScale2",
        ),
        (
            "quant offset len",
            false,
            Box::new(|c| {
                c.spec.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0].into(),
                    offset: Some(vec![0.0; 2].into()),
                })
            }),
            "quantOffset2",
        ),
        (
            "int8 band negative",
            false,
            Box::new(|c| {
                c.spec.sparse_mode = 4;
                c.spec.atten_mask = PromptMaskKind::Compressed;
                c.spec.pre_tokens = 3;
                c.spec.next_tokens = -1;
                c.spec.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0].into(),
                    offset: None,
                });
            }),
            "quantScale2",
        ),
        (
            "int8 offset invalid rows",
            false,
            Box::new(|c| {
                c.spec.sparse_mode = 3;
                c.spec.atten_mask = PromptMaskKind::Compressed;
                c.spec.actual_seq_lengths_kv = Some(vec![2]);
                c.spec.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0].into(),
                    offset: Some(vec![1.0].into()),
                });
            }),
            "quantOffset2",
        ),
        (
            "bsh H not multiple",
            false,
            Box::new(|c| {
                c.spec.input_layout = PfaLayout::Bsh;
                c.shapes.query = vec![2, 3, 63];
                c.shapes.key = vec![2, 4, 32];
                c.shapes.value = vec![2, 4, 32];
            }),
            "query",
        ),
        (
            "tnd heads",
            true,
            Box::new(|c| {
                c.spec.num_heads = 4;
                c.shapes.query[1] = 4;
                c.shapes.key[1] = 4;
                c.shapes.value[1] = 4;
            }),
            "numHeads",
        ),
        (
            "tnd D",
            true,
            Box::new(|c| {
                c.shapes.query[2] = 128;
                c.shapes.key[2] = 128;
            }),
            "query",
        ),
        (
            "tnd Dv",
            true,
            Box::new(|c| c.shapes.value[2] = 64),
            "value",
        ),
        (
            "tnd nkv",
            true,
            Box::new(|c| {
                c.spec.num_key_value_heads = 4;
                c.shapes.key[1] = 4;
                c.shapes.value[1] = 4;
            }),
            "numKeyValueHeads",
        ),
        (
            "tnd mode",
            true,
            Box::new(|c| c.spec.sparse_mode = 2),
            "sparseMode",
        ),
        (
            "tnd pse",
            true,
            Box::new(|c| set_pse(c, vec![0.0], vec![1, 1, 1, 1])),
            "pseShift",
        ),
        (
            "tnd int8",
            true,
            Box::new(|c| {
                c.spec.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0].into(),
                    offset: None,
                })
            }),
            "quantScale2",
        ),
        (
            "tnd no lengths",
            true,
            Box::new(|c| c.spec.actual_seq_lengths = None),
            "actualSeqLengths",
        ),
        (
            "tnd decreasing",
            true,
            Box::new(|c| c.spec.actual_seq_lengths = Some(vec![3, 2])),
            "actualSeqLengths",
        ),
        (
            "tnd past T",
            true,
            Box::new(|c| c.spec.actual_seq_lengths = Some(vec![2, 9])),
            "actualSeqLengths",
        ),
        (
            "tnd count",
            true,
            Box::new(|c| c.spec.actual_seq_lengths_kv = Some(vec![7])),
            "actualSeqLengthsKv",
        ),
        (
            "tnd mode3 sq > skv",
            true,
            Box::new(|c| c.spec.actual_seq_lengths_kv = Some(vec![1, 7])),
            "actualSeqLengths",
        ),
    ];
    let ok = base();
    ok.spec.validate(&ok.shapes).expect("base is valid");
    for (name, is_tnd, mutate, param) in cases {
        let mut c = if is_tnd { tnd() } else { base() };
        mutate(&mut c);
        expect_param(name, c.spec.validate(&c.shapes), param);
    }
    // The composite and the NdArray path validate first too.
    let mut c = base();
    c.spec.num_heads = 2;
    expect_param(
        "composite",
        pcomp::prompt_fwd::<B>(prompt_inputs::<B>(&c), &c.spec).map(|_| ()),
        "numHeads",
    );
    expect_param(
        "ndarray",
        <B as PromptBackend>::prompt_fwd(prompt_inputs::<B>(&c), &c.spec).map(|_| ()),
        "numHeads",
    );
}

#[test]
fn extreme_tokens_f32_overflowing_scales_and_short_masks_are_typed_errors() {
    let base = || pcase("base", PfaLayout::Bsnd, 2, 3, 4, 4, 2, 16, 40);
    let dense = |c: &mut PCase, rows: usize, cols: usize| {
        set_mask(c, (vec![0u8; rows * cols], vec![rows, cols]));
    };
    // preTokens / nextTokens = i64::MIN: the mode-0 rules negate them (no wrap, no panic).
    let mut c = base();
    dense(&mut c, 3, 4);
    c.spec.next_tokens = i64::MIN;
    expect_param("next i64::MIN", c.spec.validate(&c.shapes), "nextTokens");
    let mut c = base();
    dense(&mut c, 3, 4);
    c.spec.pre_tokens = i64::MIN;
    c.spec.next_tokens = i64::MAX;
    expect_param("pre i64::MIN", c.spec.validate(&c.shapes), "preTokens");
    let mut c = base();
    c.spec.sparse_mode = 4;
    c.spec.atten_mask = PromptMaskKind::Compressed;
    c.spec.pre_tokens = i64::MIN;
    c.spec.next_tokens = i64::MIN;
    expect_param(
        "band both i64::MIN",
        c.spec.validate(&c.shapes),
        "preTokens",
    );
    // The int8-output rules add them to lengths.
    let mut c = base();
    dense(&mut c, 3, 4);
    c.spec.pre_tokens = i64::MIN;
    c.spec.next_tokens = i64::MAX;
    c.spec.post_quant = Some(PostQuantSpec {
        scale: vec![1.0].into(),
        offset: Some(vec![0.0].into()),
    });
    assert!(c.spec.validate(&c.shapes).is_err());

    // A finite f64 that is infinite as the f32 the device computes in.
    let mut c = base();
    c.spec.scale_value = 1e300;
    expect_param("scale 1e300", c.spec.validate(&c.shapes), "scaleValue");
    let mut c = base();
    c.spec.scale_value = f64::from(f32::MAX);
    c.spec
        .validate(&c.shapes)
        .expect("f32::MAX is representable");

    // A mask that covers actualSeqLengths but not the query's S (CheckAttenMaskShape).
    let mut c = base();
    c.spec.actual_seq_lengths = Some(vec![2, 2]);
    dense(&mut c, 2, 4);
    expect_param("mask rows < S", c.spec.validate(&c.shapes), "attenMask");
    let mut c = base();
    c.spec.actual_seq_lengths_kv = Some(vec![2, 2]);
    dense(&mut c, 3, 2);
    expect_param("mask cols < Skv", c.spec.validate(&c.shapes), "attenMask");
    let mut c = base();
    dense(&mut c, 3, 4);
    c.spec
        .validate(&c.shapes)
        .expect("a mask covering S is valid");
}

#[test]
fn host_mask_and_pse_values_not_filling_their_shapes_are_refused_naming_them() {
    // The shapes come from the carrier's tensors; the host paths (the reference, the CLI, the
    // NdArray kernel) also pass the values, whose count must fill the shape.
    let base = || pcase("base", PfaLayout::Bsnd, 2, 3, 4, 4, 2, 16, 40);
    let mut c = base();
    set_mask(&mut c, (vec![0; 11], vec![3, 4]));
    let dims = c.spec.validate(&c.shapes).expect("the shapes are valid");
    expect_param("mask data len", prompt_args(&c, &dims), "attenMask");
    let mut c = base();
    set_pse(&mut c, vec![0.0; 47], vec![1, 4, 3, 4]);
    let dims = c.spec.validate(&c.shapes).expect("the shapes are valid");
    expect_param("pse len", prompt_args(&c, &dims), "pseShift");
    // A dense kind with no values given to the host path.
    let mut c = base();
    set_mask(&mut c, dense_mask_values(3, 4, 1));
    let dims = c.spec.validate(&c.shapes).expect("the shapes are valid");
    c.shapes.atten_mask = None;
    expect_param("mask values missing", prompt_args(&c, &dims), "attenMask");
    let mut c = base();
    set_mask(&mut c, dense_mask_values(3, 4, 1));
    set_pse(&mut c, vec![0.5; 48], vec![1, 4, 3, 4]);
    let dims = c.spec.validate(&c.shapes).expect("the shapes are valid");
    let a = prompt_args(&c, &dims).expect("values filling their shapes");
    assert_eq!(a.atten_mask.map(|m| (m.rows, m.cols)), Some((3, 4)));
    assert_eq!(a.pse_shift.map(|p| (p.rows, p.cols)), Some((3, 4)));
}
