//! Prompt attention: the cases, their reference, and the Burn paths against it.

use super::*;

#[derive(Clone)]
pub(crate) struct PCase {
    pub(crate) name: &'static str,
    pub(crate) spec: PromptSpec,
    pub(crate) shapes: PromptShapes,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    /// The dense mask's values (0/1; `shapes.atten_mask` says whether there is one).
    pub(crate) mask: Vec<u8>,
    /// The pse's values (`shapes.pse_shift` says whether there is one).
    pub(crate) pse: Vec<f32>,
}

/// A dense mask: the spec's kind, the carrier's shape and the values.
pub(crate) fn set_mask(c: &mut PCase, (data, shape): (Vec<u8>, Vec<usize>)) {
    c.spec.atten_mask = PromptMaskKind::Dense;
    c.shapes.atten_mask = Some(shape);
    c.mask = data;
}

/// A pse: the carrier's shape and the values.
pub(crate) fn set_pse(c: &mut PCase, data: Vec<f32>, shape: Vec<usize>) {
    c.shapes.pse_shift = Some(shape);
    c.pse = data;
}

pub(crate) fn layout_shape(l: PfaLayout, b: usize, s: usize, n: usize, d: usize) -> Vec<usize> {
    match l {
        PfaLayout::Bsh => vec![b, s, n * d],
        PfaLayout::Bsnd => vec![b, s, n, d],
        PfaLayout::Bnsd | PfaLayout::BnsdBsnd => vec![b, n, s, d],
        PfaLayout::Tnd => vec![s, n, d],
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn pcase(
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
    let shapes = PromptShapes::qkv(
        layout_shape(l, b, sq, n, d),
        layout_shape(l, b, skv, nkv, d),
        layout_shape(l, b, skv, nkv, d),
    );
    let c = |s: &Vec<usize>| s.iter().product::<usize>();
    PCase {
        name,
        q: rng
            .vec_f32(c(&shapes.query), 1.0)
            .iter()
            .map(|x| x * 2.0)
            .collect(),
        k: rng
            .vec_f32(c(&shapes.key), 1.0)
            .iter()
            .map(|x| x * 2.0)
            .collect(),
        v: rng.vec_f32(c(&shapes.value), 1.0),
        mask: Vec::new(),
        pse: Vec::new(),
        spec,
        shapes,
    }
}

/// A random `(rows, cols)` mask's values (column 0 never masked) and shape.
pub(crate) fn dense_mask_values(rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<usize>) {
    let mut rng = Rng(seed);
    let data: Vec<u8> = (0..rows * cols)
        .map(|e| (e % cols != 0 && rng.sym(1.0) > 0.4) as u8)
        .collect();
    (data, vec![rows, cols])
}

pub(crate) fn prompt_cases() -> Vec<PCase> {
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
    set_mask(&mut c, dense_mask_values(4, 5, 9));
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
    set_mask(
        &mut c,
        (
            (0..2 * 12)
                .map(|e| (e % 4 != 0 && rng.sym(1.0) > 0.3) as u8)
                .collect(),
            vec![2, 1, 3, 4],
        ),
    );
    c.spec.sparse_mode = 1;
    v.push(c);
    for (name, mode, pre, next) in [
        ("bsnd_mode2", 2, 0, 0),
        ("bsnd_mode3_gqa", 3, 0, 0),
        ("bsnd_mode4_band", 4, 1, 0),
    ] {
        let mut c = pcase(name, PfaLayout::Bsnd, 2, 3, 5, 4, 2, 4, 10 + mode as u64);
        c.spec.sparse_mode = mode;
        c.spec.atten_mask = PromptMaskKind::Compressed;
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
    set_pse(
        &mut c,
        Rng(21).vec_f32(2 * 2 * 4 * 3, 1.0),
        vec![2, 2, 4, 3],
    );
    c.spec.sparse_mode = 3; // Sq > Skv: the first row is fully masked → zero
    c.spec.atten_mask = PromptMaskKind::Compressed;
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
    spec.atten_mask = PromptMaskKind::Compressed;
    let shapes = PromptShapes::qkv(vec![6, n, d], vec![7, n, d], vec![7, n, dv]);
    v.push(PCase {
        name: "tnd_mode3_dv128",
        q: rng.vec_f32(6 * n * d, 1.0),
        k: rng.vec_f32(7 * n * d, 1.0),
        v: rng.vec_f32(7 * n * dv, 1.0),
        mask: Vec::new(),
        pse: Vec::new(),
        spec,
        shapes,
    });
    v
}

/// The reference's arguments of a case (its mask and pse from the host values).
pub(crate) fn prompt_args<'a>(
    c: &'a PCase,
    dims: &burn_ascend::ops::prompt::PromptDims,
) -> Result<burn_ascend::ops::prompt::PromptFlashAttentionArgs<'a, f32>, AttnError> {
    c.spec.args(
        dims,
        &c.q,
        &c.k,
        &c.v,
        c.shapes.atten_mask.as_deref().map(|s| (&c.mask[..], s)),
        c.shapes.pse_shift.as_deref().map(|s| (&c.pse[..], s)),
    )
}

pub(crate) fn prompt_ref(c: &PCase) -> Vec<f32> {
    let dims = c.spec.validate(&c.shapes).expect(c.name);
    f32s(prompt_flash_attention(
        &prompt_args(c, &dims).expect(c.name),
    ))
}

pub(crate) fn prompt_inputs<Bk: burn::tensor::backend::Backend>(
    c: &PCase,
) -> PromptInputs<burn::tensor::ops::FloatTensor<Bk>> {
    prompt_inputs_on::<Bk>(c, &Default::default())
}

pub(crate) fn prompt_inputs_on<Bk: burn::tensor::backend::Backend>(
    c: &PCase,
    d: &Bk::Device,
) -> PromptInputs<burn::tensor::ops::FloatTensor<Bk>> {
    let mask: Vec<f32> = c.mask.iter().map(|&x| f32::from(x)).collect();
    PromptInputs {
        query: from_vec::<Bk>(c.q.clone(), &c.shapes.query, d),
        key: from_vec::<Bk>(c.k.clone(), &c.shapes.key, d),
        value: from_vec::<Bk>(c.v.clone(), &c.shapes.value, d),
        atten_mask: c
            .shapes
            .atten_mask
            .as_ref()
            .map(|s| from_vec::<Bk>(mask, s, d)),
        pse_shift: c
            .shapes
            .pse_shift
            .as_ref()
            .map(|s| from_vec::<Bk>(c.pse.clone(), s, d)),
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
        pcomp::prompt_fwd::<B>(prompt_inputs::<B>(&c), &c.spec),
        <B as PromptBackend>::prompt_fwd(prompt_inputs::<B>(&c), &c.spec),
    ] {
        assert!(matches!(r, Err(AttnError::Unsupported(_))));
    }
}

#[test]
fn prompt_api_with_a_dense_mask_and_pse_under_autodiff_equals_the_reference() {
    // Mode 0 with a dense (Sq, Skv) mask, pre/next and a batched pse: both tensors go through
    // the API as tensors, the output is the reference rounded to f32.
    let mut c = prompt_cases()
        .into_iter()
        .find(|c| c.name == "bnsd_mode0_mask_prenext")
        .unwrap();
    set_pse(
        &mut c,
        Rng(23).vec_f32(2 * 2 * 4 * 5, 1.0),
        vec![2, 2, 4, 5],
    );
    let d = Default::default();
    let t4 = |v: Vec<f32>, s: &[usize]| {
        let s: [usize; 4] = s.try_into().unwrap();
        Tensor::<AD, 4>::from_data(TensorData::new(v, s), &d).require_grad()
    };
    let mask: Vec<f32> = c.mask.iter().map(|&x| f32::from(x)).collect();
    let mask = Tensor::<AD, 2>::from_data(TensorData::new(mask, [4, 5]), &d);
    let out = burn_ascend::prompt_flash_attention_with(
        t4(c.q.clone(), &c.shapes.query),
        t4(c.k.clone(), &c.shapes.key),
        t4(c.v.clone(), &c.shapes.value),
        Some(mask),
        Some(t4(c.pse.clone(), &[2, 2, 4, 5])),
        &c.spec,
    )
    .unwrap();
    assert!(!out.is_require_grad(), "the output is a constant");
    let got: Vec<f32> = out.into_data().to_vec().unwrap();
    let want = prompt_ref(&c);
    assert_eq!(got, want);
    // The mask and the pse change the answer (the test would see them dropped).
    let mut plain = c.clone();
    plain.shapes.pse_shift = None;
    assert!(prompt_ref(&plain) != want, "the pse matters");
}
