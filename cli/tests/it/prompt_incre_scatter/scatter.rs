//! The KV cache scatter: the cases, their reference, the Burn paths against it, and a failed
//! validation that leaves the cache untouched.

use super::*;

pub(crate) struct SCase {
    pub(crate) name: &'static str,
    pub(crate) spec: ScatterSpec,
    pub(crate) key: Vec<f32>,
    pub(crate) key_shape: Vec<usize>,
    pub(crate) value: Option<(Vec<f32>, Vec<usize>)>,
    pub(crate) kc_shape: Vec<usize>,
    pub(crate) vc_shape: Option<Vec<usize>>,
}

impl SCase {
    pub(crate) fn shapes(&self) -> ScatterShapes {
        ScatterShapes {
            key: self.key_shape.clone(),
            value: self.value.as_ref().map(|v| v.1.clone()),
            key_cache: self.kc_shape.clone(),
            value_cache: self.vc_shape.clone(),
            dtypes: [
                Some(DataType::Float),
                self.value.as_ref().map(|_| DataType::Float),
                Some(DataType::Float),
                self.vc_shape.as_ref().map(|_| DataType::Float),
            ],
        }
    }
    pub(crate) fn caches(&self) -> (Vec<f32>, Option<Vec<f32>>) {
        let n = |s: &Vec<usize>| s.iter().product::<usize>();
        (
            vec![-7.0; n(&self.kc_shape)],
            self.vc_shape.as_ref().map(|s| vec![-9.0; n(s)]),
        )
    }
}

pub(crate) fn scatter_cases() -> Vec<SCase> {
    let mut rng = Rng(60);
    let (t, n, dk, dv, nb, bs) = (5, 2, 4, 8, 3, 4);
    let key = rng.vec_f32(t * n * dk, 1.0);
    let value = rng.vec_f32(t * n * dv, 1.0);
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
    // Nct: the key / value storages are [rows, N, D]; token t starts at t·strides[0] +
    // offsets[w] in both (the kernel never reads strides[1], here 40).
    let mut s = ScatterSpec::new(slots.clone());
    s.scatter_mode = ScatterKind::Nct;
    s.strides = Some(vec![24, 40]);
    s.offsets = Some(vec![3, 1]);
    let (krows, vrows) = (14, 8); // 4·24 + 3 + 8 = 107 ≤ 14·8; 4·24 + 1 + 16 = 113 ≤ 8·16
    let kst = rng.vec_f32(krows * n * dk, 1.0);
    let vst = rng.vec_f32(vrows * n * dv, 1.0);
    v.push(SCase {
        name: "nct",
        spec: s,
        key: kst,
        key_shape: vec![krows, n, dk],
        value: Some((vst, vec![vrows, n, dv])),
        kc_shape: vec![nb, bs, n, dk],
        vc_shape: Some(vec![nb, bs, n, dv]),
    });
    // Compressed: B = 2, N = 2, seqLens [4, 3], caches [nb, bs, 1, D].
    let ck = rng.vec_f32(7 * n * dk, 1.0);
    let cv = rng.vec_f32(7 * n * dv, 1.0);
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

pub(crate) fn scatter_ref(c: &SCase) -> (Vec<f32>, Option<Vec<f32>>) {
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

pub(crate) fn scatter_inputs(c: &SCase) -> ScatterInputs<burn::tensor::ops::FloatTensor<B>> {
    scatter_inputs_on::<B>(c, &Default::default())
}

pub(crate) fn scatter_inputs_on<Bk: burn::tensor::backend::Backend>(
    c: &SCase,
    d: &Bk::Device,
) -> ScatterInputs<burn::tensor::ops::FloatTensor<Bk>> {
    let (kc, vc) = c.caches();
    ScatterInputs {
        key: from_vec::<Bk>(c.key.clone(), &c.key_shape, d),
        value: c
            .value
            .as_ref()
            .map(|(v, s)| from_vec::<Bk>(v.clone(), s, d)),
        key_cache: from_vec::<Bk>(kc, &c.kc_shape, d),
        value_cache: vc.map(|v| from_vec::<Bk>(v, c.vc_shape.as_ref().unwrap(), d)),
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
        let nd = <B as ScatterBackend>::scatter_kv(scatter_inputs(&c), &c.spec).unwrap();
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
        <B as ScatterBackend>::scatter_kv(scatter_inputs(&c2), &c2.spec).map(|_| ()),
        "slotMapping",
    );
}

#[test]
fn scatter_of_zero_tokens_leaves_the_caches_unchanged_on_every_path() {
    // CANN's tiling refuses numTokens = 0 (the simulation does too): the Ascend backend must
    // not call it, so every path agrees on a no-op.
    use burn_ascend::backend::{Ascend, AscendDevice};
    let mut c = scatter_cases().remove(0);
    c.spec = ScatterSpec::new(vec![]);
    c.key = vec![];
    c.key_shape = vec![0, 2, 4];
    c.value = Some((vec![], vec![0, 2, 8]));
    let (kc0, vc0) = c.caches();
    let dev = AscendDevice::sim();
    let got =
        <Ascend as ScatterBackend>::scatter_kv(scatter_inputs_on::<Ascend>(&c, &dev), &c.spec)
            .expect("zero tokens on the simulation");
    assert_eq!(to_vec::<Ascend>(got.key_cache), kc0);
    assert_eq!(got.value_cache.map(to_vec::<Ascend>), vc0);
    let nd = <B as ScatterBackend>::scatter_kv(scatter_inputs(&c), &c.spec).unwrap();
    assert_eq!(to_vec::<B>(nd.key_cache), kc0);
}
