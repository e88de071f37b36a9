//! Fused inference attention: every validation rule names its parameter, and the V4 features
//! left out are `unsupported`, never a panic.

use super::fia::{dense_mask, fcase, fia_cases, fia_inputs_on, paged, FCase};
use super::*;
use burn_ascend::ops::fia::{
    composite as fcomp, parse_fia_layout, FiaKvShapes, FiaMask, PagedLayout,
};

type Mutate = Box<dyn Fn(&mut FCase)>;
/// (what, base case, mutation, the parameter the error names).
type Rule = (&'static str, fn() -> FCase, Mutate, &'static str);

fn case(name: &str) -> FCase {
    fia_cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

fn prefill() -> FCase {
    case("bsnd_prefill_gqa_band_sink")
}

fn decode_paged() -> FCase {
    case("bsh_decode_paged_sink")
}

fn tnd() -> FCase {
    case("tnd_causal_sink_lse")
}

fn per_token() -> FCase {
    case("bnsd_decode_int8_per_token")
}

#[test]
fn fia_every_rule_names_its_parameter() {
    let cases: Vec<Rule> = vec![
        (
            "heads 0",
            prefill,
            Box::new(|c| c.spec.num_heads = 0),
            "numHeads",
        ),
        (
            "heads mismatch",
            prefill,
            Box::new(|c| c.spec.num_heads = 2),
            "numHeads",
        ),
        (
            "nkv not dividing",
            prefill,
            Box::new(|c| c.spec.num_key_value_heads = 3),
            "numKeyValueHeads",
        ),
        (
            "nkv != key N",
            prefill,
            Box::new(|c| c.spec.num_key_value_heads = 1),
            "numKeyValueHeads",
        ),
        (
            "query rank",
            prefill,
            Box::new(|c| c.shapes.query = vec![2, 5, 256]),
            "query",
        ),
        (
            "key D",
            prefill,
            Box::new(|c| {
                if let FiaKvShapes::Contiguous { key, .. } = &mut c.shapes.kv {
                    key[3] = 32;
                }
            }),
            "key",
        ),
        (
            "key B",
            prefill,
            Box::new(|c| {
                if let FiaKvShapes::Contiguous { key, value } = &mut c.shapes.kv {
                    key[0] = 1;
                    value[0] = 1;
                }
            }),
            "key",
        ),
        (
            "value shape",
            prefill,
            Box::new(|c| {
                if let FiaKvShapes::Contiguous { value, .. } = &mut c.shapes.kv {
                    value[1] = 6;
                }
            }),
            "value",
        ),
        (
            "scale inf",
            prefill,
            Box::new(|c| c.spec.scale_value = f64::INFINITY),
            "scaleValue",
        ),
        (
            "scale f32 overflow",
            prefill,
            Box::new(|c| c.spec.scale_value = 1e300),
            "scaleValue",
        ),
        (
            "innerPrecise 4",
            prefill,
            Box::new(|c| c.spec.inner_precise = 4),
            "innerPrecise",
        ),
        (
            "sparseMode 5",
            prefill,
            Box::new(|c| c.spec.sparse_mode = 5),
            "sparseMode",
        ),
        (
            "asl negative",
            prefill,
            Box::new(|c| c.spec.actual_seq_lengths = Some(vec![-1, 2])),
            "actualSeqLengths",
        ),
        (
            "asl too long",
            prefill,
            Box::new(|c| c.spec.actual_seq_lengths = Some(vec![6, 2])),
            "actualSeqLengths",
        ),
        (
            "asl count",
            prefill,
            Box::new(|c| c.spec.actual_seq_lengths = Some(vec![])),
            "actualSeqLengths",
        ),
        (
            "askv too long",
            prefill,
            Box::new(|c| c.spec.actual_seq_lengths_kv = Some(vec![8])),
            "actualSeqLengthsKv",
        ),
        (
            "mask missing",
            prefill,
            Box::new(|c| c.spec.atten_mask = FiaMask::None),
            "attenMask",
        ),
        (
            "dense mask with mode 4",
            prefill,
            Box::new(|c| {
                let (m, shape) = dense_mask(5, 7, 1);
                c.set_mask(m, shape);
            }),
            "attenMask",
        ),
        (
            "compressed mask with mode 1",
            prefill,
            Box::new(|c| c.spec.sparse_mode = 1),
            "attenMask",
        ),
        (
            "dense mask too small",
            prefill,
            Box::new(|c| {
                c.spec.sparse_mode = 0;
                let (m, shape) = dense_mask(5, 6, 1);
                c.set_mask(m, shape);
            }),
            "attenMask",
        ),
        (
            "dense mask bad rank",
            prefill,
            Box::new(|c| {
                c.spec.sparse_mode = 0;
                c.set_mask(vec![0; 35], vec![1, 1, 1, 5, 7]);
            }),
            "attenMask",
        ),
        (
            "band without overlap",
            prefill,
            Box::new(|c| {
                c.spec.pre_tokens = -3;
                c.spec.next_tokens = 1;
            }),
            "preTokens",
        ),
        (
            "pse shape",
            prefill,
            Box::new(|c| {
                c.set_sink(None);
                c.set_pse(vec![0.0; 4 * 5 * 6], vec![1, 4, 5, 6]);
            }),
            "pseShift",
        ),
        (
            "sink length",
            prefill,
            Box::new(|c| c.set_sink(Some(vec![0.0; 3]))),
            "learnableSink",
        ),
        (
            "sink not finite",
            prefill,
            Box::new(|c| c.set_sink(Some(vec![f32::NAN; 4]))),
            "learnableSink",
        ),
        (
            "sink with pse",
            prefill,
            Box::new(|c| {
                c.set_pse(vec![0.0; 4 * 5 * 7], vec![1, 4, 5, 7]);
            }),
            "learnableSink",
        ),
        (
            "sink with left padding",
            prefill,
            Box::new(|c| c.spec.kv_padding_size = Some(0)),
            "learnableSink",
        ),
        (
            "sink with D 16",
            || case("bnsd_prefill_dense_mask_pse"),
            Box::new(|c| {
                c.shapes.pse_shift = None;
                c.opt.pse = None;
                c.set_sink(Some(vec![0.0; 2]));
            }),
            "learnableSink",
        ),
        (
            "query padding in decode",
            decode_paged,
            Box::new(|c| c.spec.query_padding_size = Some(0)),
            "queryPaddingSize",
        ),
        (
            "query padding without lengths",
            prefill,
            Box::new(|c| {
                c.set_sink(None);
                c.spec.actual_seq_lengths = None;
                c.spec.query_padding_size = Some(0);
            }),
            "queryPaddingSize",
        ),
        (
            "kv padding without lengths",
            prefill,
            Box::new(|c| {
                c.set_sink(None);
                c.spec.actual_seq_lengths_kv = None;
                c.spec.kv_padding_size = Some(0);
            }),
            "kvPaddingSize",
        ),
        (
            "kv padding past the start",
            prefill,
            Box::new(|c| {
                c.set_sink(None);
                c.spec.kv_padding_size = Some(1);
            }),
            "actualSeqLengthsKv",
        ),
        (
            "kv padding with paging",
            decode_paged,
            Box::new(|c| {
                c.set_sink(None);
                c.spec.kv_padding_size = Some(0);
            }),
            "kvPaddingSize",
        ),
        (
            "paged without table",
            decode_paged,
            Box::new(|c| c.spec.block_table = None),
            "blockTable",
        ),
        (
            "table without paging",
            prefill,
            Box::new(|c| {
                c.spec.block_table = Some(BlockTable {
                    data: vec![0].into(),
                    shape: vec![1, 1],
                })
            }),
            "blockTable",
        ),
        (
            "blockSize not aligned",
            decode_paged,
            Box::new(|c| c.spec.block_size = 8),
            "blockSize",
        ),
        (
            "block id out of range",
            decode_paged,
            Box::new(|c| {
                let bt = c.spec.block_table.as_mut().unwrap();
                let mut d = bt.data.to_vec();
                d[0] = 99;
                bt.data = d.into();
            }),
            "blockTable",
        ),
        (
            "table batch",
            decode_paged,
            Box::new(|c| {
                let bt = c.spec.block_table.as_mut().unwrap();
                bt.shape = vec![1, 6];
            }),
            "blockTable",
        ),
        (
            "paged without kv lengths",
            decode_paged,
            Box::new(|c| c.spec.actual_seq_lengths_kv = None),
            "actualSeqLengthsKv",
        ),
        (
            "cache shape",
            decode_paged,
            Box::new(|c| {
                if let FiaKvShapes::Paged {
                    key_cache,
                    value_cache,
                } = &mut c.shapes.kv
                {
                    key_cache[2] = 32;
                    value_cache[2] = 32;
                }
            }),
            "key",
        ),
        (
            "tnd pse",
            tnd,
            Box::new(|c| {
                c.set_sink(None);
                c.set_pse(vec![0.0; 4 * 8 * 10], vec![1, 4, 8, 10]);
            }),
            "pseShift",
        ),
        (
            "tnd lengths missing",
            tnd,
            Box::new(|c| c.spec.actual_seq_lengths = None),
            "actualSeqLengths",
        ),
        (
            "tnd lengths not cumulative",
            tnd,
            Box::new(|c| c.spec.actual_seq_lengths = Some(vec![3, 2, 8])),
            "actualSeqLengths",
        ),
        (
            "tnd kv lengths count",
            tnd,
            Box::new(|c| c.spec.actual_seq_lengths_kv = Some(vec![4, 10])),
            "actualSeqLengthsKv",
        ),
        (
            "tnd sparse 2",
            tnd,
            Box::new(|c| c.spec.sparse_mode = 2),
            "sparseMode",
        ),
        (
            "tnd D with innerPrecise 1",
            || {
                let mut c = fcase("tnd", PfaLayout::Tnd, (1, 4, 4), (4, 2, 32), 1);
                c.spec.actual_seq_lengths = Some(vec![4]);
                c.spec.actual_seq_lengths_kv = Some(vec![4]);
                c
            },
            Box::new(|c| c.spec.inner_precise = 1),
            "query",
        ),
        (
            "int8 without antiquant",
            per_token,
            Box::new(|c| {
                c.set_antiquant(1, None, None, vec![]);
                c.set_antiquant(2, None, None, vec![]);
            }),
            "antiquantScale",
        ),
        (
            "key without value antiquant",
            per_token,
            Box::new(|c| c.set_antiquant(2, None, None, vec![])),
            "valueAntiquantScale",
        ),
        (
            "antiquant modes differ",
            per_token,
            Box::new(|c| c.spec.value_antiquant_mode = 0),
            "valueAntiquantMode",
        ),
        (
            "per token shape",
            per_token,
            Box::new(|c| c.set_antiquant(1, Some(vec![1.0; 2 * 4]), None, vec![2, 4])),
            "keyAntiquantScale",
        ),
        (
            "per token offset shape",
            per_token,
            Box::new(|c| c.shapes.value_antiquant_offset = Some(vec![3])),
            "valueAntiquantOffset",
        ),
        (
            "offset without its scale",
            prefill,
            Box::new(|c| c.shapes.key_antiquant_offset = Some(vec![1])),
            "keyAntiquantOffset",
        ),
        (
            "combined antiquant shape",
            || case("bnsd_prefill_paged_int8_per_channel"),
            Box::new(|c| {
                c.shapes.antiquant_scale = Some(vec![2, 3, 1, 64]);
                c.shapes.antiquant_offset = Some(vec![2, 3, 1, 64]);
            }),
            "antiquantScale",
        ),
        (
            "antiquant without int8",
            prefill,
            Box::new(|c| {
                c.set_sink(None);
                c.set_antiquant(0, Some(vec![1.0, 1.0]), None, vec![2]);
            }),
            "antiquantScale",
        ),
        (
            "sink with antiquant",
            || case("bnsd_prefill_paged_int8_per_channel"),
            Box::new(|c| c.set_sink(Some(vec![0.0; 4]))),
            "learnableSink",
        ),
    ];
    for (name, base, mutate, param) in cases {
        let mut c = base();
        c.validate()
            .unwrap_or_else(|e| panic!("{name}: base invalid: {e}"));
        mutate(&mut c);
        expect_param(name, c.validate(), param);
    }
}

#[test]
fn fia_features_left_out_are_unsupported_not_invalid() {
    let mut c = prefill();
    c.spec.sparse_mode = 9;
    assert!(matches!(
        c.spec.validate(&c.shapes),
        Err(AttnError::Unsupported(_))
    ));
    let mut c = per_token();
    c.spec.key_antiquant_mode = 2;
    c.spec.value_antiquant_mode = 2;
    assert!(matches!(
        c.spec.validate(&c.shapes),
        Err(AttnError::Unsupported(_))
    ));
    let mut c = case("bnsd_prefill_paged_int8_per_channel");
    c.spec.antiquant_mode = 1;
    assert!(matches!(
        c.spec.validate(&c.shapes),
        Err(AttnError::Unsupported(_))
    ));
    for l in ["NTD", "NTD_TND", "BSH_BNSD", "BNSD_NBSD"] {
        assert!(
            matches!(parse_fia_layout(l), Err(AttnError::Unsupported(_))),
            "{l}"
        );
    }
    expect_param("layout", parse_fia_layout("SBH"), "inputLayout");
}

#[test]
fn bad_fia_input_never_panics_on_the_burn_paths() {
    // The rules' mutations run through the composite and NdArray: typed errors, no panics.
    let mut c = decode_paged();
    c.spec.block_size = 8;
    let dev = Default::default();
    expect_param(
        "composite",
        fcomp::fia_fwd::<B>(fia_inputs_on::<B>(&c, &dev), &c.spec).map(|_| ()),
        "blockSize",
    );
    expect_param(
        "ndarray",
        B::fia_fwd(fia_inputs_on::<B>(&c, &dev), &c.spec).map(|_| ()),
        "blockSize",
    );
    // A paged BNSD cache with a BSH query is refused by name.
    let c = paged(
        fcase("bsh", PfaLayout::Bsh, (1, 1, 16), (2, 2, 64), 3),
        16,
        PagedLayout::Bnsd,
        &[16],
    );
    expect_param("bnsd cache", c.spec.validate(&c.shapes), "key");
}
