//! Prompt attention, incremental attention and the cache scatter on the Burn paths — the
//! composite (any backend), `NdArray` (CPU kernels) and `Autodiff<NdArray>` (forward-only) —
//! against the CPU reference, plus one test per validation rule checking the parameter named.

mod common;

use std::sync::Arc;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::DType;
use burn::tensor::{Tensor, TensorData};
use burn_ascend::kernels::reference::incre::{incre_flash_attention, KvInput};
use burn_ascend::kernels::reference::prompt::prompt_flash_attention;
use burn_ascend::kernels::reference::scatter as sref;
use burn_ascend::ops::host::{from_vec, to_vec};
use burn_ascend::ops::incre::{
    composite as icomp, AntiquantSpec, BlockTable, IfaLayout, IncreKvShapes, IncreMask, IncrePse,
    IncreShapes, IncreSpec,
};
use burn_ascend::ops::prompt::{
    composite as pcomp, PfaLayout, PostQuantSpec, PromptMask, PromptPse, PromptShapes, PromptSpec,
};
use burn_ascend::ops::scatter::{
    composite as scomp, scatter_checked, CacheMode, ScatterKind, ScatterShapes, ScatterSpec,
};
use burn_ascend::{
    incre_flash_attention as incre_api, prompt_flash_attention as prompt_api, scatter_pa_kv_cache,
    AttentionBackend, AttnError, IncreInputs, IncreKv, PromptInputs, ScatterInputs,
};
use common::{close, Rng};

type B = NdArray;
type AD = Autodiff<NdArray>;

// Tolerances: the composite computes in f32 against the reference's f64 accumulation; 1e-5
// absolute plus 1e-4 relative covers rounding of O(1) values. The NdArray path is the
// reference rounded to f32, so it must match exactly.
const ATOL: f32 = 1e-5;
const RTOL: f32 = 1e-4;

fn f32s(v: Vec<f64>) -> Vec<f32> {
    v.into_iter().map(|x| x as f32).collect()
}

// ---------------------------------------------------------------- prompt

#[derive(Clone)]
struct PCase {
    name: &'static str,
    spec: PromptSpec,
    shapes: PromptShapes,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn layout_shape(l: PfaLayout, b: usize, s: usize, n: usize, d: usize) -> Vec<usize> {
    match l {
        PfaLayout::Bsh => vec![b, s, n * d],
        PfaLayout::Bsnd => vec![b, s, n, d],
        PfaLayout::Bnsd | PfaLayout::BnsdBsnd => vec![b, n, s, d],
        PfaLayout::Tnd => vec![s, n, d],
    }
}

#[allow(clippy::too_many_arguments)]
fn pcase(
    name: &'static str,
    l: PfaLayout,
    b: usize,
    sq: usize,
    skv: usize,
    n: usize,
    nkv: usize,
    d: usize,
    seed: u64,
) -> PCase {
    let mut rng = Rng(seed);
    let mut spec = PromptSpec::new(n, 1.0 / (d as f64).sqrt(), l);
    spec.num_key_value_heads = if nkv == n { 0 } else { nkv };
    let shapes = PromptShapes {
        query: layout_shape(l, b, sq, n, d),
        key: layout_shape(l, b, skv, nkv, d),
        value: layout_shape(l, b, skv, nkv, d),
    };
    let c = |s: &Vec<usize>| s.iter().product::<usize>();
    PCase {
        name,
        q: rng.vec(c(&shapes.query)).iter().map(|x| x * 2.0).collect(),
        k: rng.vec(c(&shapes.key)).iter().map(|x| x * 2.0).collect(),
        v: rng.vec(c(&shapes.value)),
        spec,
        shapes,
    }
}

fn dense_mask(rows: usize, cols: usize, seed: u64) -> PromptMask {
    let mut rng = Rng(seed);
    let data: Vec<u8> = (0..rows * cols)
        .map(|e| (e % cols != 0 && rng.uniform() > 0.4) as u8)
        .collect();
    PromptMask::Dense {
        data: data.into(),
        shape: vec![rows, cols],
    }
}

fn prompt_cases() -> Vec<PCase> {
    let mut v = Vec::new();
    v.push(pcase("bsh_mha", PfaLayout::Bsh, 2, 3, 5, 2, 2, 4, 1));
    let mut c = pcase("bsnd_gqa_lengths", PfaLayout::Bsnd, 2, 4, 6, 4, 2, 4, 2);
    c.spec.actual_seq_lengths = Some(vec![4, 2]);
    c.spec.actual_seq_lengths_kv = Some(vec![3, 6]);
    v.push(c);
    let mut c = pcase(
        "bnsd_mode0_mask_prenext",
        PfaLayout::Bnsd,
        2,
        4,
        5,
        2,
        1,
        4,
        3,
    );
    c.spec.atten_mask = dense_mask(4, 5, 9);
    c.spec.pre_tokens = 2;
    c.spec.next_tokens = 1;
    v.push(c);
    let mut c = pcase(
        "bnsd_bsnd_mode1_batched_mask",
        PfaLayout::BnsdBsnd,
        2,
        3,
        4,
        2,
        2,
        4,
        4,
    );
    let mut rng = Rng(7);
    c.spec.atten_mask = PromptMask::Dense {
        data: (0..2 * 12)
            .map(|e| (e % 4 != 0 && rng.uniform() > 0.3) as u8)
            .collect::<Vec<_>>()
            .into(),
        shape: vec![2, 1, 3, 4],
    };
    c.spec.sparse_mode = 1;
    v.push(c);
    for (name, mode, pre, next) in [
        ("bsnd_mode2", 2, 0, 0),
        ("bsnd_mode3_gqa", 3, 0, 0),
        ("bsnd_mode4_band", 4, 1, 0),
    ] {
        let mut c = pcase(name, PfaLayout::Bsnd, 2, 3, 5, 4, 2, 4, 10 + mode as u64);
        c.spec.sparse_mode = mode;
        c.spec.atten_mask = PromptMask::Compressed;
        c.spec.pre_tokens = pre;
        c.spec.next_tokens = next;
        c.spec.actual_seq_lengths_kv = Some(vec![5, 4]);
        v.push(c);
    }
    let mut c = pcase(
        "bnsd_pse_fully_masked_rows",
        PfaLayout::Bnsd,
        2,
        4,
        3,
        2,
        2,
        4,
        20,
    );
    c.spec.pse_shift = Some(PromptPse {
        data: Rng(21).vec(2 * 2 * 4 * 3).into(),
        shape: vec![2, 2, 4, 3],
    });
    c.spec.sparse_mode = 3; // Sq > Skv: the first row is fully masked → zero
    c.spec.atten_mask = PromptMask::Compressed;
    v.push(c);
    let mut c = pcase("bsh_empty_kv", PfaLayout::Bsh, 1, 2, 3, 2, 2, 4, 22);
    c.spec.actual_seq_lengths_kv = Some(vec![0]);
    v.push(c);
    // TND: N = 8, D = 192, Dv = 128, sparse 3 with the compressed mask; the last row unused.
    let (n, d, dv) = (8, 192, 128);
    let mut rng = Rng(30);
    let mut spec = PromptSpec::new(n, 1.0 / (d as f64).sqrt(), PfaLayout::Tnd);
    spec.actual_seq_lengths = Some(vec![2, 5]);
    spec.actual_seq_lengths_kv = Some(vec![3, 7]);
    spec.sparse_mode = 3;
    spec.atten_mask = PromptMask::Compressed;
    let shapes = PromptShapes {
        query: vec![6, n, d],
        key: vec![7, n, d],
        value: vec![7, n, dv],
    };
    v.push(PCase {
        name: "tnd_mode3_dv128",
        q: rng.vec(6 * n * d),
        k: rng.vec(7 * n * d),
        v: rng.vec(7 * n * dv),
        spec,
        shapes,
    });
    v
}

fn prompt_ref(c: &PCase) -> Vec<f32> {
    let dims = c.spec.validate(&c.shapes).expect(c.name);
    f32s(prompt_flash_attention(
        &c.spec.args(&dims, &c.q, &c.k, &c.v),
    ))
}

fn prompt_inputs<Bk: burn::tensor::backend::Backend>(c: &PCase) -> PromptInputs<Bk> {
    let d = Default::default();
    PromptInputs {
        query: from_vec::<Bk>(c.q.clone(), &c.shapes.query, &d),
        key: from_vec::<Bk>(c.k.clone(), &c.shapes.key, &d),
        value: from_vec::<Bk>(c.v.clone(), &c.shapes.value, &d),
    }
}

#[test]
fn prompt_composite_and_ndarray_match_the_reference() {
    for c in prompt_cases() {
        let want = prompt_ref(&c);
        assert!(
            want.iter().any(|&x| x != 0.0) || c.name == "bsh_empty_kv",
            "{}",
            c.name
        );
        let comp = pcomp::prompt_fwd::<B>(prompt_inputs(&c), &c.spec).expect(c.name);
        let dims = c.spec.validate(&c.shapes).unwrap();
        assert_eq!(
            burn::tensor::TensorMetadata::shape(&comp).to_vec(),
            dims.out_shape(),
            "{}",
            c.name
        );
        close(c.name, &to_vec::<B>(comp), &want, ATOL, RTOL).unwrap();
        let nd = <B as AttentionBackend>::prompt_fwd(prompt_inputs(&c), &c.spec).unwrap();
        // NdArray runs the fast decode kernel (f32): within the composite's tolerance.
        close(c.name, &to_vec::<B>(nd), &want, ATOL, RTOL).unwrap();
    }
}

#[test]
fn prompt_zero_rows_past_length_fully_masked_and_empty_kv() {
    let cases = prompt_cases();
    let c = cases.iter().find(|c| c.name == "bsh_empty_kv").unwrap();
    assert!(prompt_ref(c).iter().all(|&x| x == 0.0));
    let c = cases.iter().find(|c| c.name == "bsnd_gqa_lengths").unwrap();
    let out = prompt_ref(c);
    // Batch 1 has actualSeqLengths 2: rows 2 and 3 ([B, S, N, D]) are zero.
    let row = 4 * 4;
    let b1 = &out[4 * row..];
    assert!(b1[..2 * row].iter().any(|&x| x != 0.0));
    assert!(b1[2 * row..].iter().all(|&x| x == 0.0));
    let c = cases
        .iter()
        .find(|c| c.name == "bnsd_pse_fully_masked_rows")
        .unwrap();
    let out = prompt_ref(c);
    assert!(
        out[..4].iter().all(|&x| x == 0.0),
        "row 0 of head 0 fully masked"
    );
}

#[test]
fn prompt_api_under_autodiff_is_forward_only() {
    let c = prompt_cases().remove(1);
    let d = Default::default();
    let t = |v: &Vec<f32>, s: &Vec<usize>| {
        Tensor::<AD, 4>::from_data(TensorData::new(v.clone(), s.clone()), &d).require_grad()
    };
    let out = prompt_api(
        t(&c.q, &c.shapes.query),
        t(&c.k, &c.shapes.key),
        t(&c.v, &c.shapes.value),
        &c.spec,
    )
    .unwrap();
    assert!(!out.is_require_grad(), "the output is a constant");
    let got: Vec<f32> = out.into_data().to_vec().unwrap();
    assert_eq!(got, prompt_ref(&c));
}

#[test]
fn prompt_int8_output_is_unsupported_on_the_burn_api() {
    let mut c = prompt_cases().remove(0);
    c.spec.post_quant = Some(PostQuantSpec {
        scale: vec![1.0].into(),
        offset: None,
    });
    for r in [
        pcomp::prompt_fwd::<B>(prompt_inputs(&c), &c.spec),
        <B as AttentionBackend>::prompt_fwd(prompt_inputs(&c), &c.spec),
    ] {
        assert!(matches!(r, Err(AttnError::Unsupported(_))));
    }
}

fn expect_param(name: &str, r: Result<impl std::fmt::Debug, AttnError>, param: &str) {
    match r {
        Err(e) => assert_eq!(e.param(), Some(param), "{name}: {e}"),
        Ok(v) => panic!("{name}: accepted ({v:?}), expected an error naming {param}"),
    }
}

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
                c.spec.atten_mask = dense_mask(3, 4, 1);
            }),
            "attenMask",
        ),
        (
            "compressed mode 0",
            false,
            Box::new(|c| c.spec.atten_mask = PromptMask::Compressed),
            "attenMask",
        ),
        (
            "mask shape",
            false,
            Box::new(|c| {
                c.spec.atten_mask = PromptMask::Dense {
                    data: vec![0; 12].into(),
                    shape: vec![3, 2, 2],
                }
            }),
            "attenMask",
        ),
        (
            "mask batch",
            false,
            Box::new(|c| {
                c.spec.atten_mask = PromptMask::Dense {
                    data: vec![0; 36].into(),
                    shape: vec![3, 3, 4],
                }
            }),
            "attenMask",
        ),
        (
            "mask too small",
            false,
            Box::new(|c| c.spec.atten_mask = dense_mask(2, 4, 1)),
            "attenMask",
        ),
        (
            "mask data len",
            false,
            Box::new(|c| {
                c.spec.atten_mask = PromptMask::Dense {
                    data: vec![0; 11].into(),
                    shape: vec![3, 4],
                }
            }),
            "attenMask",
        ),
        (
            "negative next",
            false,
            Box::new(|c| {
                c.spec.atten_mask = dense_mask(3, 4, 1);
                c.spec.pre_tokens = 0;
                c.spec.next_tokens = -1;
            }),
            "nextTokens",
        ),
        (
            "negative pre",
            false,
            Box::new(|c| {
                c.spec.atten_mask = dense_mask(3, 4, 1);
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
                c.spec.atten_mask = PromptMask::Compressed;
                c.spec.pre_tokens = -3;
                c.spec.next_tokens = 1;
            }),
            "preTokens",
        ),
        (
            "pse rank",
            false,
            Box::new(|c| {
                c.spec.pse_shift = Some(PromptPse {
                    data: vec![0.0; 12].into(),
                    shape: vec![3, 4],
                })
            }),
            "pseShift",
        ),
        (
            "pse heads",
            false,
            Box::new(|c| {
                c.spec.pse_shift = Some(PromptPse {
                    data: vec![0.0; 24].into(),
                    shape: vec![1, 2, 3, 4],
                })
            }),
            "pseShift",
        ),
        (
            "pse small",
            false,
            Box::new(|c| {
                c.spec.pse_shift = Some(PromptPse {
                    data: vec![0.0; 36].into(),
                    shape: vec![1, 4, 3, 3],
                })
            }),
            "pseShift",
        ),
        (
            "pse len",
            false,
            Box::new(|c| {
                c.spec.pse_shift = Some(PromptPse {
                    data: vec![0.0; 47].into(),
                    shape: vec![1, 4, 3, 4],
                })
            }),
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
                c.spec.atten_mask = PromptMask::Compressed;
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
                c.spec.atten_mask = PromptMask::Compressed;
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
            Box::new(|c| {
                c.spec.pse_shift = Some(PromptPse {
                    data: vec![0.0].into(),
                    shape: vec![1, 1, 1, 1],
                })
            }),
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
        pcomp::prompt_fwd::<B>(prompt_inputs(&c), &c.spec).map(|_| ()),
        "numHeads",
    );
    expect_param(
        "ndarray",
        <B as AttentionBackend>::prompt_fwd(prompt_inputs(&c), &c.spec).map(|_| ()),
        "numHeads",
    );
}

// ---------------------------------------------------------------- incre

#[derive(Clone)]
struct ICase {
    name: &'static str,
    spec: IncreSpec,
    q: Vec<f32>,
    q_shape: Vec<usize>,
    /// BNSD `(B, Nkv, S, D)` source data.
    k: Vec<f32>,
    v: Vec<f32>,
    b: usize,
    nkv: usize,
    s: usize,
    d: usize,
}

#[allow(clippy::too_many_arguments)]
fn icase(
    name: &'static str,
    l: IfaLayout,
    b: usize,
    n: usize,
    nkv: usize,
    s: usize,
    d: usize,
    seed: u64,
) -> ICase {
    let mut rng = Rng(seed);
    let mut spec = IncreSpec::new(n, 1.0 / (d as f64).sqrt(), l);
    spec.num_key_value_heads = if nkv == n { 0 } else { nkv };
    let q_shape = match l {
        IfaLayout::Bnsd => vec![b, n, 1, d],
        IfaLayout::Bsnd => vec![b, 1, n, d],
        IfaLayout::Bsh => vec![b, 1, n * d],
    };
    ICase {
        name,
        spec,
        q: rng.vec(b * n * d).iter().map(|x| x * 2.0).collect(),
        q_shape,
        k: rng.vec(b * nkv * s * d).iter().map(|x| x * 2.0).collect(),
        v: rng.vec(b * nkv * s * d),
        b,
        nkv,
        s,
        d,
    }
}

/// The BNSD source in the case's contiguous layout, with its shape.
fn kv_layout(c: &ICase, x: &[f32]) -> (Vec<f32>, Vec<usize>) {
    let (b, nkv, s, d) = (c.b, c.nkv, c.s, c.d);
    match c.spec.input_layout {
        IfaLayout::Bnsd => (x.to_vec(), vec![b, nkv, s, d]),
        l => {
            let mut y = Vec::with_capacity(x.len());
            for bi in 0..b {
                for si in 0..s {
                    for ni in 0..nkv {
                        let base = ((bi * nkv + ni) * s + si) * d;
                        y.extend_from_slice(&x[base..base + d]);
                    }
                }
            }
            let shape = if l == IfaLayout::Bsh {
                vec![b, s, nkv * d]
            } else {
                vec![b, s, nkv, d]
            };
            (y, shape)
        }
    }
}

enum Form {
    Contiguous,
    List,
    /// Paged with the (blocknum, blockSize, H) (false) or (blocknum, Nkv, blockSize, D) (true) cache.
    Paged(bool),
}

/// Host KV data + shapes in one form; `table` physical blocks for paged.
struct HostKv {
    shapes: IncreKvShapes,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

const BS: usize = 16;

fn host_kv(c: &mut ICase, form: &Form) -> HostKv {
    match form {
        Form::Contiguous => {
            let (k, ks) = kv_layout(c, &c.k);
            let (v, _) = kv_layout(c, &c.v);
            HostKv {
                shapes: IncreKvShapes::Contiguous {
                    key: ks.clone(),
                    value: ks,
                },
                k: vec![k],
                v: vec![v],
            }
        }
        Form::List => {
            let (k, ks) = kv_layout(c, &c.k);
            let (v, _) = kv_layout(c, &c.v);
            let per = k.len() / c.b;
            let mut one = ks.clone();
            one[0] = 1;
            HostKv {
                shapes: IncreKvShapes::List {
                    key: vec![one.clone(); c.b],
                    value: vec![one; c.b],
                },
                k: k.chunks(per).map(<[f32]>::to_vec).collect(),
                v: v.chunks(per).map(<[f32]>::to_vec).collect(),
            }
        }
        Form::Paged(nz) => {
            let (b, nkv, s, d) = (c.b, c.nkv, c.s, c.d);
            let maxb = s.div_ceil(BS);
            let nb = b * maxb + 1;
            // Reverse order so block ids are not the identity.
            let table: Vec<i32> = (0..b * maxb).map(|i| (nb - 1 - i) as i32).collect();
            let page = |x: &[f32]| {
                let mut cache = vec![f32::NAN; nb * BS * nkv * d];
                for bi in 0..b {
                    for t in 0..s {
                        let blk = table[bi * maxb + t / BS] as usize;
                        for n in 0..nkv {
                            for di in 0..d {
                                let idx = if *nz {
                                    ((blk * nkv + n) * BS + t % BS) * d + di
                                } else {
                                    (blk * BS + t % BS) * nkv * d + n * d + di
                                };
                                cache[idx] = x[((bi * nkv + n) * s + t) * d + di];
                            }
                        }
                    }
                }
                cache
            };
            let (kp, vp) = (page(&c.k), page(&c.v));
            c.spec.block_size = BS;
            c.spec.block_table = Some(BlockTable {
                data: table.into(),
                shape: vec![b, maxb],
            });
            if c.spec.actual_seq_lengths.is_none() {
                c.spec.actual_seq_lengths = Some(vec![s as i64; b]);
            }
            let shape = if *nz {
                vec![nb, nkv, BS, d]
            } else {
                vec![nb, BS, nkv * d]
            };
            HostKv {
                shapes: IncreKvShapes::Paged {
                    key_cache: shape.clone(),
                    value_cache: shape,
                },
                k: vec![kp],
                v: vec![vp],
            }
        }
    }
}

fn incre_ref(c: &ICase, h: &HostKv) -> Vec<f32> {
    let shapes = IncreShapes {
        query: c.q_shape.clone(),
        kv: h.shapes.clone(),
        kv_int8: c.spec.antiquant.is_some(),
    };
    let dims = c.spec.validate(&shapes).expect(c.name);
    let kr: Vec<&[f32]> = h.k.iter().map(Vec::as_slice).collect();
    let vr: Vec<&[f32]> = h.v.iter().map(Vec::as_slice).collect();
    let kv = match &h.shapes {
        IncreKvShapes::Contiguous { .. } => KvInput::Contiguous {
            key: &h.k[0],
            value: &h.v[0],
            kv_seq: c.s,
        },
        IncreKvShapes::List { .. } => KvInput::TensorList {
            key: &kr,
            value: &vr,
        },
        IncreKvShapes::Paged { .. } => c.spec.paged(&dims, &h.k[0], &h.v[0]),
    };
    f32s(incre_flash_attention(&c.spec.args(&dims, &c.q, kv)))
}

fn incre_inputs<Bk: burn::tensor::backend::Backend>(c: &ICase, h: &HostKv) -> IncreInputs<Bk> {
    let d = Default::default();
    let t = |x: &Vec<f32>, s: &Vec<usize>| from_vec::<Bk>(x.clone(), s, &d);
    let kv = match &h.shapes {
        IncreKvShapes::Contiguous { key, value } => IncreKv::Contiguous {
            key: t(&h.k[0], key),
            value: t(&h.v[0], value),
        },
        IncreKvShapes::List { key, value } => IncreKv::List {
            key: h.k.iter().zip(key).map(|(x, s)| t(x, s)).collect(),
            value: h.v.iter().zip(value).map(|(x, s)| t(x, s)).collect(),
        },
        IncreKvShapes::Paged {
            key_cache,
            value_cache,
        } => IncreKv::Paged {
            key_cache: t(&h.k[0], key_cache),
            value_cache: t(&h.v[0], value_cache),
        },
    };
    IncreInputs {
        query: t(&c.q, &c.q_shape),
        kv,
    }
}

fn incre_cases() -> Vec<(ICase, Form)> {
    let mut v = Vec::new();
    for (name, l) in [
        ("bnsd", IfaLayout::Bnsd),
        ("bsnd", IfaLayout::Bsnd),
        ("bsh", IfaLayout::Bsh),
    ] {
        let mut c = icase(name, l, 2, 4, 2, 5, 4, 1);
        c.spec.actual_seq_lengths = Some(vec![5, 3]);
        v.push((c, Form::Contiguous));
    }
    let mut c = icase("mask_pse_broadcast_len", IfaLayout::Bsnd, 2, 2, 2, 6, 4, 2);
    c.spec.actual_seq_lengths = Some(vec![4]);
    c.spec.atten_mask = Some(IncreMask {
        data: vec![0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0].into(),
        shape: vec![2, 1, 1, 6],
    });
    c.spec.pse_shift = Some(IncrePse {
        data: Rng(3).vec(2 * 2 * 6).into(),
        shape: vec![2, 2, 1, 6],
    });
    v.push((c, Form::Contiguous));
    let mut c = icase("kv_padding", IfaLayout::Bsh, 2, 2, 1, 6, 4, 4);
    c.spec.actual_seq_lengths = Some(vec![3, 5]);
    c.spec.kv_padding_size = Some(1);
    v.push((c, Form::Contiguous));
    let mut c = icase("zero_length", IfaLayout::Bnsd, 2, 2, 2, 3, 4, 5);
    c.spec.actual_seq_lengths = Some(vec![0, 3]);
    v.push((c, Form::Contiguous));
    v.push((
        icase("tensor_list", IfaLayout::Bsnd, 2, 4, 1, 3, 4, 6),
        Form::List,
    ));
    let mut c = icase("paged_bsh_cache", IfaLayout::Bsnd, 2, 4, 2, 35, 4, 7);
    c.spec.actual_seq_lengths = Some(vec![35, 17]);
    v.push((c, Form::Paged(false)));
    let mut c = icase("paged_bnsd_cache_mask", IfaLayout::Bnsd, 2, 2, 2, 20, 4, 8);
    c.spec.actual_seq_lengths = Some(vec![20, 9]);
    c.spec.atten_mask = Some(IncreMask {
        data: (0..64)
            .map(|i| (i % 5 == 1) as u8)
            .collect::<Vec<_>>()
            .into(),
        shape: vec![2, 32],
    });
    v.push((c, Form::Paged(true)));
    // int8 KV as float tensors holding integers, dequantised per tensor / per channel.
    for (name, per_channel) in [("antiquant_tensor", false), ("antiquant_channel", true)] {
        let mut c = icase(name, IfaLayout::Bnsd, 1, 2, 2, 4, 4, 9);
        c.k = c.k.iter().map(|x| (x * 60.0).round()).collect();
        c.v = c.v.iter().map(|x| (x * 100.0).round()).collect();
        c.spec.antiquant = Some(if per_channel {
            AntiquantSpec {
                scale: (0..16)
                    .map(|i| 0.01 + 0.002 * i as f32)
                    .collect::<Vec<_>>()
                    .into(),
                offset: Some((0..16).map(|i| i as f32 - 8.0).collect::<Vec<_>>().into()),
                shape: vec![2, 2, 1, 4],
            }
        } else {
            AntiquantSpec {
                scale: vec![0.02, 0.01].into(),
                offset: Some(vec![3.0, -1.0].into()),
                shape: vec![2],
            }
        });
        v.push((c, Form::Contiguous));
    }
    v
}

#[test]
fn incre_composite_and_ndarray_match_the_reference() {
    for (mut c, form) in incre_cases() {
        let h = host_kv(&mut c, &form);
        let want = incre_ref(&c, &h);
        let comp = icomp::incre_fwd::<B>(incre_inputs(&c, &h), &c.spec).expect(c.name);
        assert_eq!(
            burn::tensor::TensorMetadata::shape(&comp).to_vec(),
            c.q_shape,
            "{}",
            c.name
        );
        close(c.name, &to_vec::<B>(comp), &want, ATOL, RTOL).unwrap();
        let nd = <B as AttentionBackend>::incre_fwd(incre_inputs(&c, &h), &c.spec).unwrap();
        // NdArray runs the fast decode kernel (f32): within the composite's tolerance.
        close(c.name, &to_vec::<B>(nd), &want, ATOL, RTOL).unwrap();
    }
}

#[test]
fn incre_paged_and_list_equal_contiguous_and_zero_length_is_zero() {
    let cases = incre_cases();
    let zero = &cases
        .iter()
        .find(|(c, _)| c.name == "zero_length")
        .unwrap()
        .0;
    let mut z = zero.clone();
    let h = host_kv(&mut z, &Form::Contiguous);
    assert!(incre_ref(&z, &h)[..8].iter().all(|&x| x == 0.0));
    let mut c = cases
        .iter()
        .find(|(c, _)| c.name == "paged_bsh_cache")
        .unwrap()
        .0
        .clone();
    let contiguous = {
        let mut c2 = c.clone();
        let h = host_kv(&mut c2, &Form::Contiguous);
        incre_ref(&c2, &h)
    };
    let h = host_kv(&mut c, &Form::Paged(false));
    let paged = to_vec::<B>(icomp::incre_fwd::<B>(incre_inputs(&c, &h), &c.spec).unwrap());
    close("paged vs contiguous", &paged, &contiguous, ATOL, RTOL).unwrap();
}

#[test]
fn incre_api_under_autodiff_is_forward_only() {
    let (mut c, form) = incre_cases().remove(0);
    let h = host_kv(&mut c, &form);
    let d = Default::default();
    let t = |x: &Vec<f32>, s: Vec<usize>| {
        Tensor::<AD, 4>::from_data(TensorData::new(x.clone(), s), &d).require_grad()
    };
    let ks = vec![c.b, c.nkv, c.s, c.d];
    let out = incre_api(
        t(&c.q, c.q_shape.clone()),
        IncreKv::contiguous(t(&h.k[0], ks.clone()), t(&h.v[0], ks)),
        &c.spec,
    )
    .unwrap();
    assert!(!out.is_require_grad());
    let got: Vec<f32> = out.into_data().to_vec().unwrap();
    close(c.name, &got, &incre_ref(&c, &h), ATOL, RTOL).unwrap();
}

#[test]
fn incre_every_rule_names_its_parameter() {
    type Mutate = Box<dyn Fn(&mut IncreSpec, &mut IncreShapes)>;
    let base = || {
        let c = icase("base", IfaLayout::Bnsd, 2, 4, 2, 32, 8, 50);
        let shapes = IncreShapes {
            query: c.q_shape.clone(),
            kv: IncreKvShapes::Contiguous {
                key: vec![2, 2, 32, 8],
                value: vec![2, 2, 32, 8],
            },
            kv_int8: false,
        };
        (c.spec, shapes)
    };
    let paged = |s: &mut IncreSpec, sh: &mut IncreShapes| {
        s.block_size = 16;
        s.actual_seq_lengths = Some(vec![20, 5]);
        s.block_table = Some(BlockTable {
            data: vec![0, 1, 2, 3].into(),
            shape: vec![2, 2],
        });
        sh.kv = IncreKvShapes::Paged {
            key_cache: vec![4, 16, 16],
            value_cache: vec![4, 16, 16],
        };
    };
    let list = |sh: &mut IncreShapes| {
        sh.kv = IncreKvShapes::List {
            key: vec![vec![1, 2, 32, 8]; 2],
            value: vec![vec![1, 2, 32, 8]; 2],
        }
    };
    let cases: Vec<(&str, Mutate, &str)> = vec![
        ("heads 0", Box::new(|s, _| s.num_heads = 0), "numHeads"),
        (
            "heads mismatch",
            Box::new(|s, _| s.num_heads = 2),
            "numHeads",
        ),
        (
            "query S",
            Box::new(|_, sh| sh.query = vec![2, 4, 2, 8]),
            "query",
        ),
        (
            "query D",
            Box::new(|_, sh| sh.query = vec![2, 4, 1, 513]),
            "query",
        ),
        (
            "bsh H",
            Box::new(|s, sh| {
                s.input_layout = IfaLayout::Bsh;
                sh.query = vec![2, 1, 30];
            }),
            "query",
        ),
        (
            "nkv divides",
            Box::new(|s, _| s.num_key_value_heads = 3),
            "numKeyValueHeads",
        ),
        (
            "nkv vs key",
            Box::new(|s, _| s.num_key_value_heads = 4),
            "numKeyValueHeads",
        ),
        (
            "scale",
            Box::new(|s, _| s.scale_value = f64::INFINITY),
            "scaleValue",
        ),
        (
            "innerPrecise",
            Box::new(|s, _| s.inner_precise = 2),
            "innerPrecise",
        ),
        (
            "key rank",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::Contiguous {
                    key: vec![2, 32, 16],
                    value: vec![2, 32, 16],
                }
            }),
            "key",
        ),
        (
            "key B",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::Contiguous {
                    key: vec![1, 2, 32, 8],
                    value: vec![1, 2, 32, 8],
                }
            }),
            "key",
        ),
        (
            "key D",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::Contiguous {
                    key: vec![2, 2, 32, 4],
                    value: vec![2, 2, 32, 4],
                }
            }),
            "key",
        ),
        (
            "value shape",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::Contiguous {
                    key: vec![2, 2, 32, 8],
                    value: vec![2, 2, 31, 8],
                }
            }),
            "value",
        ),
        (
            "list len",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::List {
                    key: vec![vec![1, 2, 32, 8]],
                    value: vec![vec![1, 2, 32, 8]],
                }
            }),
            "key",
        ),
        (
            "list batch",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::List {
                    key: vec![vec![2, 2, 32, 8]; 2],
                    value: vec![vec![2, 2, 32, 8]; 2],
                }
            }),
            "key",
        ),
        (
            "list value",
            Box::new(move |_, sh| {
                list(sh);
                if let IncreKvShapes::List { value, .. } = &mut sh.kv {
                    value[1][2] = 5;
                }
            }),
            "value",
        ),
        (
            "list only S differs",
            Box::new(move |s, sh| {
                s.num_key_value_heads = 0;
                s.num_heads = 4;
                sh.kv = IncreKvShapes::List {
                    key: vec![vec![1, 4, 32, 8], vec![1, 2, 32, 8]],
                    value: vec![vec![1, 4, 32, 8], vec![1, 2, 32, 8]],
                };
            }),
            "numKeyValueHeads",
        ),
        (
            "list value count",
            Box::new(|_, sh| {
                sh.kv = IncreKvShapes::List {
                    key: vec![vec![1, 2, 32, 8]; 2],
                    value: vec![vec![1, 2, 32, 8]],
                }
            }),
            "value",
        ),
        (
            "blocktable without pages",
            Box::new(|s, _| {
                s.block_table = Some(BlockTable {
                    data: vec![0].into(),
                    shape: vec![1, 1],
                })
            }),
            "blocktable",
        ),
        (
            "pages without blocktable",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = None;
            }),
            "blocktable",
        ),
        (
            "blockSize 0",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_size = 0;
            }),
            "blockSize",
        ),
        (
            "blockSize unaligned",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_size = 24;
            }),
            "blockSize",
        ),
        (
            "blockSize int8",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv_int8 = true;
                s.antiquant = Some(AntiquantSpec {
                    scale: vec![1.0, 1.0].into(),
                    offset: None,
                    shape: vec![2],
                });
            }),
            "blockSize",
        ),
        (
            "blockSize > 512",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_size = 528;
            }),
            "blockSize",
        ),
        (
            "cache shape",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![4, 16, 8],
                    value_cache: vec![4, 16, 8],
                };
            }),
            "key",
        ),
        (
            "cache rank",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![4, 256],
                    value_cache: vec![4, 256],
                };
            }),
            "key",
        ),
        (
            "nz cache needs BNSD",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.input_layout = IfaLayout::Bsnd;
                sh.query = vec![2, 1, 4, 8];
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![4, 2, 16, 8],
                    value_cache: vec![4, 2, 16, 8],
                };
            }),
            "key",
        ),
        (
            "value cache",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![4, 16, 16],
                    value_cache: vec![5, 16, 16],
                };
            }),
            "value",
        ),
        (
            "blocktable rank",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 1, 2, 3].into(),
                    shape: vec![4],
                });
            }),
            "blocktable",
        ),
        (
            "blocktable B",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 1, 2, 3].into(),
                    shape: vec![1, 4],
                });
            }),
            "blocktable",
        ),
        (
            "blocktable data",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 1, 2].into(),
                    shape: vec![2, 2],
                });
            }),
            "blocktable",
        ),
        (
            "blocktable id",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 9, 2, 3].into(),
                    shape: vec![2, 2],
                });
            }),
            "blocktable",
        ),
        (
            "blocktable too few",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.block_table = Some(BlockTable {
                    data: vec![0, 1].into(),
                    shape: vec![2, 1],
                });
            }),
            "actualSeqLengths",
        ),
        (
            "blocknum",
            Box::new(move |s, sh| {
                paged(s, sh);
                sh.kv = IncreKvShapes::Paged {
                    key_cache: vec![2, 16, 16],
                    value_cache: vec![2, 16, 16],
                };
                s.block_table = Some(BlockTable {
                    data: vec![0, 1, 0, 1].into(),
                    shape: vec![2, 2],
                });
                s.actual_seq_lengths = Some(vec![20, 17]);
            }),
            "key",
        ),
        (
            "paged no lengths",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.actual_seq_lengths = None;
            }),
            "actualSeqLengths",
        ),
        (
            "paged + padding",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.kv_padding_size = Some(1);
            }),
            "kvPaddingSize",
        ),
        (
            "lengths count",
            Box::new(|s, _| s.actual_seq_lengths = Some(vec![1, 2, 3])),
            "actualSeqLengths",
        ),
        (
            "length > S",
            Box::new(|s, _| s.actual_seq_lengths = Some(vec![33])),
            "actualSeqLengths",
        ),
        (
            "length < 0",
            Box::new(|s, _| s.actual_seq_lengths = Some(vec![-1, 3])),
            "actualSeqLengths",
        ),
        (
            "padding window",
            Box::new(|s, _| {
                s.actual_seq_lengths = Some(vec![30]);
                s.kv_padding_size = Some(3);
            }),
            "actualSeqLengths",
        ),
        (
            "padding alone",
            Box::new(|s, _| s.kv_padding_size = Some(40)),
            "kvPaddingSize",
        ),
        (
            "mask shape",
            Box::new(|s, _| {
                s.atten_mask = Some(IncreMask {
                    data: vec![0; 64].into(),
                    shape: vec![2, 2, 32],
                })
            }),
            "attenMask",
        ),
        (
            "mask batch",
            Box::new(|s, _| {
                s.atten_mask = Some(IncreMask {
                    data: vec![0; 32].into(),
                    shape: vec![1, 32],
                })
            }),
            "attenMask",
        ),
        (
            "mask short",
            Box::new(|s, _| {
                s.atten_mask = Some(IncreMask {
                    data: vec![0; 62].into(),
                    shape: vec![2, 31],
                })
            }),
            "attenMask",
        ),
        (
            "mask data",
            Box::new(|s, _| {
                s.atten_mask = Some(IncreMask {
                    data: vec![0; 63].into(),
                    shape: vec![2, 32],
                })
            }),
            "attenMask",
        ),
        (
            "mask paged short",
            Box::new(move |s, sh| {
                paged(s, sh);
                s.atten_mask = Some(IncreMask {
                    data: vec![0; 40].into(),
                    shape: vec![2, 20],
                });
            }),
            "attenMask",
        ),
        (
            "pse rank",
            Box::new(|s, _| {
                s.pse_shift = Some(IncrePse {
                    data: vec![0.0; 128].into(),
                    shape: vec![4, 32],
                })
            }),
            "pseShift",
        ),
        (
            "pse heads",
            Box::new(|s, _| {
                s.pse_shift = Some(IncrePse {
                    data: vec![0.0; 64].into(),
                    shape: vec![1, 2, 1, 32],
                })
            }),
            "pseShift",
        ),
        (
            "pse short",
            Box::new(|s, _| {
                s.pse_shift = Some(IncrePse {
                    data: vec![0.0; 124].into(),
                    shape: vec![1, 4, 1, 31],
                })
            }),
            "pseShift",
        ),
        (
            "pse data",
            Box::new(|s, _| {
                s.pse_shift = Some(IncrePse {
                    data: vec![0.0; 127].into(),
                    shape: vec![1, 4, 1, 32],
                })
            }),
            "pseShift",
        ),
        (
            "int8 without antiquant",
            Box::new(|_, sh| sh.kv_int8 = true),
            "antiquantScale",
        ),
        (
            "antiquant on float",
            Box::new(|s, _| {
                s.antiquant = Some(AntiquantSpec {
                    scale: vec![1.0, 1.0].into(),
                    offset: None,
                    shape: vec![2],
                })
            }),
            "antiquantScale",
        ),
        (
            "antiquant shape",
            Box::new(|s, sh| {
                sh.kv_int8 = true;
                s.antiquant = Some(AntiquantSpec {
                    scale: vec![1.0; 32].into(),
                    offset: None,
                    shape: vec![2, 2, 8],
                });
            }),
            "antiquantScale",
        ),
        (
            "antiquant len",
            Box::new(|s, sh| {
                sh.kv_int8 = true;
                s.antiquant = Some(AntiquantSpec {
                    scale: vec![1.0; 3].into(),
                    offset: None,
                    shape: vec![2],
                });
            }),
            "antiquantScale",
        ),
        (
            "antiquant offset",
            Box::new(|s, sh| {
                sh.kv_int8 = true;
                s.antiquant = Some(AntiquantSpec {
                    scale: vec![1.0; 2].into(),
                    offset: Some(vec![0.0].into()),
                    shape: vec![2],
                });
            }),
            "antiquantOffset",
        ),
        (
            "quant scale",
            Box::new(|s, _| {
                s.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0; 5].into(),
                    offset: None,
                })
            }),
            "quantScale2",
        ),
        (
            "quant offset",
            Box::new(|s, _| {
                s.post_quant = Some(PostQuantSpec {
                    scale: vec![1.0; 32].into(),
                    offset: Some(vec![0.0].into()),
                })
            }),
            "quantOffset2",
        ),
    ];
    let (s, sh) = base();
    s.validate(&sh).expect("base is valid");
    let (mut s, mut sh) = base();
    paged(&mut s, &mut sh);
    s.validate(&sh).expect("paged base is valid");
    let (s, mut sh) = base();
    list(&mut sh);
    s.validate(&sh).expect("list base is valid");
    for (name, mutate, param) in cases {
        let (mut s, mut sh) = base();
        mutate(&mut s, &mut sh);
        expect_param(name, s.validate(&sh), param);
    }
}

// ---------------------------------------------------------------- scatter

struct SCase {
    name: &'static str,
    spec: ScatterSpec,
    key: Vec<f32>,
    key_shape: Vec<usize>,
    value: Option<(Vec<f32>, Vec<usize>)>,
    kc_shape: Vec<usize>,
    vc_shape: Option<Vec<usize>>,
}

impl SCase {
    fn shapes(&self) -> ScatterShapes {
        ScatterShapes {
            key: self.key_shape.clone(),
            value: self.value.as_ref().map(|v| v.1.clone()),
            key_cache: self.kc_shape.clone(),
            value_cache: self.vc_shape.clone(),
            dtypes: [
                Some(DType::F32),
                self.value.as_ref().map(|_| DType::F32),
                Some(DType::F32),
                self.vc_shape.as_ref().map(|_| DType::F32),
            ],
        }
    }
    fn caches(&self) -> (Vec<f32>, Option<Vec<f32>>) {
        let n = |s: &Vec<usize>| s.iter().product::<usize>();
        (
            vec![-7.0; n(&self.kc_shape)],
            self.vc_shape.as_ref().map(|s| vec![-9.0; n(s)]),
        )
    }
}

fn scatter_cases() -> Vec<SCase> {
    let mut rng = Rng(60);
    let (t, n, dk, dv, nb, bs) = (5, 2, 4, 8, 3, 4);
    let key = rng.vec(t * n * dk);
    let value = rng.vec(t * n * dv);
    let slots = vec![5i64, -1, 0, 11, 6];
    let mut v = Vec::new();
    v.push(SCase {
        name: "norm_kv",
        spec: ScatterSpec::new(slots.clone()),
        key: key.clone(),
        key_shape: vec![t, n, dk],
        value: Some((value.clone(), vec![t, n, dv])),
        kc_shape: vec![nb, bs, n, dk],
        vc_shape: Some(vec![nb, bs, n, dv]),
    });
    let mut s = ScatterSpec::new(slots.clone());
    s.cache_mode = CacheMode::PaNz;
    v.push(SCase {
        name: "pa_nz_kv",
        spec: s,
        key: key.clone(),
        key_shape: vec![t, n, dk],
        value: Some((value.clone(), vec![t, n, dv])),
        kc_shape: vec![nb, n * dk / 8, bs, 8],
        vc_shape: Some(vec![nb, n * dv / 8, bs, 8]),
    });
    v.push(SCase {
        name: "key_only",
        spec: ScatterSpec::new(slots.clone()),
        key: key.clone(),
        key_shape: vec![t, n, dk],
        value: None,
        kc_shape: vec![nb, bs, n, dk],
        vc_shape: None,
    });
    let mut s = ScatterSpec::new(slots.clone());
    s.scatter_mode = ScatterKind::Nct;
    s.strides = Some(vec![12, 20]);
    s.offsets = Some(vec![3, 1]);
    let kst = rng.vec(4 * 12 + 3 + n * dk);
    let vst = rng.vec(4 * 20 + 1 + n * dv);
    let (kl, vl) = (kst.len(), vst.len());
    v.push(SCase {
        name: "nct",
        spec: s,
        key: kst,
        key_shape: vec![1, 1, kl],
        value: Some((vst, vec![1, 1, vl])),
        kc_shape: vec![nb, bs, n, dk],
        vc_shape: Some(vec![nb, bs, n, dv]),
    });
    // Compressed: B = 2, N = 2, seqLens [4, 3], caches [nb, bs, 1, D].
    let ck = rng.vec(7 * n * dk);
    let cv = rng.vec(7 * n * dv);
    let mut s = ScatterSpec::new(vec![0, 4, 8, -1]);
    s.scatter_mode = ScatterKind::Alibi;
    s.slot_mapping_shape = vec![4];
    s.compress_lens = Some(vec![2, 1, 3, 2]);
    s.seq_lens = Some(vec![4, 3]);
    v.push(SCase {
        name: "alibi",
        spec: s,
        key: ck.clone(),
        key_shape: vec![7, n, dk],
        value: Some((cv.clone(), vec![7, n, dv])),
        kc_shape: vec![4, 4, 1, dk],
        vc_shape: Some(vec![4, 4, 1, dv]),
    });
    for (name, kind) in [("rope", ScatterKind::Rope), ("omni", ScatterKind::Omni)] {
        let mut s = ScatterSpec::new(vec![0, 4, 8, 12]);
        s.scatter_mode = kind;
        s.compress_lens = Some(vec![2, 3, 1, 2]);
        s.compress_seq_offset = Some(vec![1, 0, 0, 1]);
        s.seq_lens = Some(vec![4, 3]);
        v.push(SCase {
            name,
            spec: s,
            key: ck.clone(),
            key_shape: vec![7, n, dk],
            value: Some((cv.clone(), vec![7, n, dv])),
            kc_shape: vec![4, 4, 1, dk],
            vc_shape: Some(vec![4, 4, 1, dv]),
        });
    }
    v
}

fn scatter_ref(c: &SCase) -> (Vec<f32>, Option<Vec<f32>>) {
    let (mut kc, mut vc) = c.caches();
    scatter_checked(
        &c.spec,
        &c.shapes(),
        &c.key,
        c.value.as_ref().map(|v| v.0.as_slice()),
        &mut kc,
        vc.as_deref_mut(),
    )
    .expect(c.name);
    (kc, vc)
}

fn scatter_inputs(c: &SCase) -> ScatterInputs<B> {
    scatter_inputs_on::<B>(c)
}

fn scatter_inputs_on<Bk: burn::tensor::backend::Backend>(c: &SCase) -> ScatterInputs<Bk> {
    let d = Default::default();
    let (kc, vc) = c.caches();
    ScatterInputs {
        key: from_vec::<Bk>(c.key.clone(), &c.key_shape, &d),
        value: c
            .value
            .as_ref()
            .map(|(v, s)| from_vec::<Bk>(v.clone(), s, &d)),
        key_cache: from_vec::<Bk>(kc, &c.kc_shape, &d),
        value_cache: vc.map(|v| from_vec::<Bk>(v, c.vc_shape.as_ref().unwrap(), &d)),
    }
}

#[test]
fn scatter_composite_and_ndarray_match_the_reference() {
    for c in scatter_cases() {
        let (kc, vc) = scatter_ref(&c);
        assert!(
            kc.iter().any(|&x| x != -7.0),
            "{}: something was written",
            c.name
        );
        let comp = scomp::scatter_kv::<B>(scatter_inputs(&c), &c.spec).expect(c.name);
        // Plain copies are exact; Rope/Omni means differ by f32 vs f64 rounding.
        close(c.name, &to_vec::<B>(comp.key_cache), &kc, 1e-6, 1e-6).unwrap();
        assert_eq!(comp.value_cache.map(to_vec::<B>).is_some(), vc.is_some());
        let nd = <B as AttentionBackend>::scatter_kv(scatter_inputs(&c), &c.spec).unwrap();
        assert_eq!(to_vec::<B>(nd.key_cache), kc, "{}: ndarray", c.name);
        assert_eq!(
            nd.value_cache.map(to_vec::<B>),
            vc,
            "{}: ndarray value",
            c.name
        );
    }
    // The negative slot (token 1) is skipped: no cache row holds its key.
    let c = &scatter_cases()[0];
    let (kc, _) = scatter_ref(c);
    assert!(!kc.contains(&c.key[8]));
}

#[test]
fn scatter_api_under_autodiff_is_forward_only() {
    let c = &scatter_cases()[0];
    let (kc, _) = scatter_ref(c);
    let d = Default::default();
    let t3 = |x: &Vec<f32>, s: &Vec<usize>| {
        Tensor::<AD, 3>::from_data(TensorData::new(x.clone(), s.clone()), &d).require_grad()
    };
    let (kc0, vc0) = c.caches();
    let t4 =
        |x: Vec<f32>, s: &Vec<usize>| Tensor::<AD, 4>::from_data(TensorData::new(x, s.clone()), &d);
    let (v, vs) = c.value.clone().unwrap();
    let (k_out, v_out) = scatter_pa_kv_cache(
        t3(&c.key, &c.key_shape),
        Some(t3(&v, &vs)),
        t4(kc0, &c.kc_shape),
        vc0.map(|x| t4(x, c.vc_shape.as_ref().unwrap())),
        &c.spec,
    )
    .unwrap();
    assert!(!k_out.is_require_grad() && !v_out.unwrap().is_require_grad());
    assert_eq!(k_out.into_data().to_vec::<f32>().unwrap(), kc);
}

#[test]
fn scatter_failed_validation_leaves_the_cache_bit_for_bit_unchanged() {
    let mut c = scatter_cases().remove(0);
    // Valid until the last token, whose slot duplicates the first one.
    c.spec = ScatterSpec::new(vec![5, -1, 0, 11, 5]);
    let (mut kc, mut vc) = c.caches();
    kc[3] = f32::from_bits(0x7fc0_1234); // a NaN payload must survive too
    let (k0, v0) = (kc.clone(), vc.clone());
    let r = scatter_checked(
        &c.spec,
        &c.shapes(),
        &c.key,
        c.value.as_ref().map(|v| v.0.as_slice()),
        &mut kc,
        vc.as_deref_mut(),
    );
    expect_param("duplicate", r, "slotMapping");
    assert_eq!(
        kc.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        k0.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(vc, v0);
    // Out of range in the last token; and a wrong host buffer length.
    c.spec = ScatterSpec::new(vec![5, -1, 0, 11, 12]);
    expect_param(
        "range",
        scatter_checked(
            &c.spec,
            &c.shapes(),
            &c.key,
            c.value.as_ref().map(|v| v.0.as_slice()),
            &mut kc,
            vc.as_deref_mut(),
        ),
        "slotMapping",
    );
    c.spec = ScatterSpec::new(vec![5, -1, 0, 11, 6]);
    let mut short = kc[..kc.len() - 1].to_vec();
    expect_param(
        "buffer",
        scatter_checked(&c.spec, &c.shapes(), &c.key, None, &mut short, None),
        "keyCache",
    );
    assert_eq!(
        kc.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        k0.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    // The Burn paths refuse before touching anything as well.
    let c2 = {
        let mut c2 = scatter_cases().remove(0);
        c2.spec = ScatterSpec::new(vec![5, -1, 0, 11, 5]);
        c2
    };
    expect_param(
        "composite",
        scomp::scatter_kv::<B>(scatter_inputs(&c2), &c2.spec).map(|_| ()),
        "slotMapping",
    );
    expect_param(
        "ndarray",
        <B as AttentionBackend>::scatter_kv(scatter_inputs(&c2), &c2.spec).map(|_| ()),
        "slotMapping",
    );
}

#[test]
fn scatter_every_rule_names_its_parameter() {
    type Mutate = Box<dyn Fn(&mut ScatterSpec, &mut ScatterShapes)>;
    let cases_ = scatter_cases();
    let (norm, nz, alibi, rope) = (&cases_[0], &cases_[1], &cases_[4], &cases_[5]);
    let cases: Vec<(&str, &SCase, Mutate, &str)> = vec![
        (
            "key dtype",
            norm,
            Box::new(|_, s| {
                s.dtypes = [
                    Some(DType::I32),
                    Some(DType::I32),
                    Some(DType::I32),
                    Some(DType::I32),
                ]
            }),
            "key",
        ),
        ("key rank", norm, Box::new(|_, s| s.key = vec![5, 8]), "key"),
        (
            "value without cache",
            norm,
            Box::new(|_, s| s.value_cache = None),
            "valueCache",
        ),
        (
            "key cache dtype",
            norm,
            Box::new(|_, s| s.dtypes[2] = Some(DType::F16)),
            "keyCache",
        ),
        (
            "value dtype",
            norm,
            Box::new(|_, s| s.dtypes[1] = Some(DType::F16)),
            "value",
        ),
        (
            "value cache dtype",
            norm,
            Box::new(|_, s| s.dtypes[3] = Some(DType::F16)),
            "valueCache",
        ),
        (
            "key cache rank",
            norm,
            Box::new(|_, s| s.key_cache = vec![12, 2, 4]),
            "keyCache",
        ),
        (
            "value cache rank",
            norm,
            Box::new(|_, s| s.value_cache = Some(vec![12, 2, 8])),
            "valueCache",
        ),
        (
            "compressLens on None",
            norm,
            Box::new(|p, _| p.compress_lens = Some(vec![1])),
            "compressLens",
        ),
        (
            "seqLens on None",
            norm,
            Box::new(|p, _| p.seq_lens = Some(vec![1])),
            "seqLens",
        ),
        (
            "offset on None",
            norm,
            Box::new(|p, _| p.compress_seq_offset = Some(vec![1])),
            "compressSeqOffset",
        ),
        (
            "nct with nz",
            nz,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.strides = Some(vec![8, 16]);
                p.offsets = Some(vec![0, 0]);
            }),
            "scatterMode",
        ),
        (
            "nz last dim",
            nz,
            Box::new(|_, s| s.key_cache = vec![3, 2, 4, 4]),
            "keyCache",
        ),
        (
            "nz N·D",
            nz,
            Box::new(|_, s| s.key_cache = vec![3, 2, 4, 8]),
            "keyCache",
        ),
        (
            "nz value cache",
            nz,
            Box::new(|_, s| s.value_cache = Some(vec![3, 1, 4, 8])),
            "valueCache",
        ),
        (
            "nz bytes",
            nz,
            Box::new(|_, s| {
                s.key = vec![5, 1, 4];
                s.value = Some(vec![5, 1, 8]);
                s.key_cache = vec![3, 0, 4, 8];
                s.value_cache = Some(vec![3, 1, 4, 8]);
            }),
            "keyCache",
        ),
        (
            "slot shape",
            norm,
            Box::new(|p, _| p.slot_mapping_shape = vec![5, 1]),
            "slotMapping",
        ),
        (
            "slot count",
            norm,
            Box::new(|p, _| {
                p.slot_mapping = vec![0, 1].into();
                p.slot_mapping_shape = vec![2];
            }),
            "slotMapping",
        ),
        (
            "cache N",
            norm,
            Box::new(|_, s| s.key_cache = vec![3, 4, 1, 4]),
            "keyCache",
        ),
        (
            "cache zero",
            norm,
            Box::new(|_, s| s.key_cache = vec![0, 4, 2, 4]),
            "keyCache",
        ),
        (
            "value dims",
            norm,
            Box::new(|_, s| s.value = Some(vec![5, 1, 8])),
            "value",
        ),
        (
            "value rank",
            norm,
            Box::new(|_, s| s.value = Some(vec![5, 16])),
            "value",
        ),
        (
            "value cache dims",
            norm,
            Box::new(|_, s| s.value_cache = Some(vec![3, 4, 1, 8])),
            "valueCache",
        ),
        (
            "value cache D",
            norm,
            Box::new(|_, s| s.value_cache = Some(vec![3, 4, 2, 6])),
            "valueCache",
        ),
        (
            "slot range",
            norm,
            Box::new(|p, _| p.slot_mapping = vec![5, -1, 0, 12, 6].into()),
            "slotMapping",
        ),
        (
            "slot duplicate",
            norm,
            Box::new(|p, _| p.slot_mapping = vec![5, -1, 5, 11, 6].into()),
            "slotMapping",
        ),
        (
            "nct strides missing",
            norm,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.offsets = Some(vec![0, 0]);
            }),
            "strides",
        ),
        (
            "nct strides zero",
            norm,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.strides = Some(vec![0, 16]);
                p.offsets = Some(vec![0, 0]);
            }),
            "strides",
        ),
        (
            "nct offsets len",
            norm,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.strides = Some(vec![8, 16]);
                p.offsets = Some(vec![0]);
            }),
            "offsets",
        ),
        (
            "nct storage",
            norm,
            Box::new(|p, _| {
                p.scatter_mode = ScatterKind::Nct;
                p.strides = Some(vec![9, 16]);
                p.offsets = Some(vec![0, 0]);
            }),
            "key",
        ),
        (
            "compressed nz",
            alibi,
            Box::new(|p, _| p.cache_mode = CacheMode::PaNz),
            "cacheMode",
        ),
        (
            "compressed cache",
            alibi,
            Box::new(|_, s| s.key_cache = vec![4, 4, 2, 4]),
            "keyCache",
        ),
        (
            "compressed value",
            alibi,
            Box::new(|_, s| s.value = Some(vec![7, 1, 8])),
            "value",
        ),
        (
            "compressed value cache",
            alibi,
            Box::new(|_, s| s.value_cache = Some(vec![4, 4, 1, 4])),
            "valueCache",
        ),
        (
            "seqLens negative",
            alibi,
            Box::new(|p, _| p.seq_lens = Some(vec![8, -1])),
            "seqLens",
        ),
        (
            "seqLens sum",
            alibi,
            Box::new(|p, _| p.seq_lens = Some(vec![4, 2])),
            "seqLens",
        ),
        (
            "compressed slots",
            alibi,
            Box::new(|p, _| {
                p.slot_mapping = vec![0, 4, 8].into();
                p.slot_mapping_shape = vec![3];
            }),
            "slotMapping",
        ),
        (
            "compressLens missing",
            alibi,
            Box::new(|p, _| p.compress_lens = None),
            "compressLens",
        ),
        (
            "compressLens negative",
            alibi,
            Box::new(|p, _| p.compress_lens = Some(vec![2, 1, -3, 2])),
            "compressLens",
        ),
        (
            "alibi offset",
            alibi,
            Box::new(|p, _| p.compress_seq_offset = Some(vec![0; 4])),
            "compressSeqOffset",
        ),
        (
            "rope offset missing",
            rope,
            Box::new(|p, _| p.compress_seq_offset = None),
            "compressSeqOffset",
        ),
        (
            "rope offset len",
            rope,
            Box::new(|p, _| p.compress_seq_offset = Some(vec![0; 3])),
            "compressSeqOffset",
        ),
        (
            "compressed overlap",
            alibi,
            Box::new(|p, _| p.slot_mapping = vec![0, 1, 8, -1].into()),
            "slotMapping",
        ),
        (
            "compressed range",
            alibi,
            Box::new(|p, _| p.slot_mapping = vec![0, 4, 14, -1].into()),
            "slotMapping",
        ),
    ];
    for (name, c, mutate, param) in cases {
        c.spec
            .validate(&c.shapes())
            .unwrap_or_else(|e| panic!("{name} base: {e}"));
        let (mut p, mut s) = (c.spec.clone(), c.shapes());
        mutate(&mut p, &mut s);
        expect_param(name, p.validate(&s), param);
    }
    // Unsupported, not invalid: the 950-only 4-D key and compressed without seqLens.
    let mut s = norm.shapes();
    s.key = vec![5, 1, 2, 4];
    assert!(matches!(
        norm.spec.validate(&s),
        Err(AttnError::Unsupported(_))
    ));
    let mut p = alibi.spec.clone();
    p.seq_lens = None;
    assert!(matches!(
        p.validate(&alibi.shapes()),
        Err(AttnError::Unsupported(_))
    ));
    let _ = sref::nz_last_dim::<f32>();
    let _ = Arc::<[u8]>::from(vec![]);
}

/// Every prompt, incremental (masks, pse, padding, lists, paged caches, int8 antiquant) and
/// scatter case above on the `Ascend` backend over the host simulation of the ACL ABI, against
/// the same references, each call dispatched as an aclnn op (the host fallback never runs).
#[test]
fn ascend_simulation_matches_the_references_without_fallback() {
    use burn_ascend::backend::{fallback_count, Ascend};
    type A = Ascend;
    let ops = ["prompt_fwd", "incre_fwd", "scatter_kv"];
    let before = ops.map(fallback_count);
    for c in prompt_cases() {
        let want = prompt_ref(&c);
        let got =
            <A as AttentionBackend>::prompt_fwd(prompt_inputs::<A>(&c), &c.spec).expect(c.name);
        close(c.name, &to_vec::<A>(got), &want, ATOL, RTOL).unwrap();
    }
    for (mut c, form) in incre_cases() {
        let h = host_kv(&mut c, &form);
        let want = incre_ref(&c, &h);
        let got =
            <A as AttentionBackend>::incre_fwd(incre_inputs::<A>(&c, &h), &c.spec).expect(c.name);
        close(c.name, &to_vec::<A>(got), &want, ATOL, RTOL).unwrap();
    }
    for c in scatter_cases() {
        let (kc, vc) = scatter_ref(&c);
        let got =
            <A as AttentionBackend>::scatter_kv(scatter_inputs_on::<A>(&c), &c.spec).expect(c.name);
        close(c.name, &to_vec::<A>(got.key_cache), &kc, 1e-6, 1e-6).unwrap();
        match (got.value_cache.map(to_vec::<A>), vc) {
            (Some(g), Some(w)) => close(c.name, &g, &w, 1e-6, 1e-6).unwrap(),
            (g, w) => assert_eq!(g.is_some(), w.is_some(), "{}: value cache", c.name),
        }
    }
    assert_eq!(ops.map(fallback_count), before, "a serving op fell back");
}
