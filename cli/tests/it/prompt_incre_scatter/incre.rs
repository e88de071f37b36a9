//! Incremental attention: the cases (contiguous, list and paged KV), their reference, and the
//! Burn paths against it.

use super::*;
use burn_ascend::IncreKvFromTensors;

#[derive(Clone)]
pub(crate) struct ICase {
    pub(crate) name: &'static str,
    pub(crate) spec: IncreSpec,
    pub(crate) q: Vec<f32>,
    pub(crate) q_shape: Vec<usize>,
    /// BNSD `(B, Nkv, S, D)` source data.
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) b: usize,
    pub(crate) nkv: usize,
    pub(crate) s: usize,
    pub(crate) d: usize,
    /// The optional tensor inputs' host values.
    pub(crate) opt: IOpt,
}

/// An incremental case's optional tensor inputs: values and shapes.
#[derive(Clone, Default)]
pub(crate) struct IOpt {
    /// `attenMask` bytes (non-zero = masked).
    pub(crate) mask: Option<(Vec<u8>, Vec<usize>)>,
    pub(crate) pse: Option<(Vec<f32>, Vec<usize>)>,
    pub(crate) antiquant: Option<IAntiquant>,
}

/// `antiquantScale`, `antiquantOffset`, their shape.
pub(crate) type IAntiquant = (Vec<f32>, Option<Vec<f32>>, Vec<usize>);

impl IOpt {
    /// The shapes validation reads, added to `sh`.
    pub(crate) fn shapes(&self, mut sh: IncreShapes) -> IncreShapes {
        sh.atten_mask = self.mask.as_ref().map(|m| m.1.clone());
        sh.pse_shift = self.pse.as_ref().map(|p| p.1.clone());
        sh.antiquant_scale = self.antiquant.as_ref().map(|a| a.2.clone());
        sh.antiquant_offset = self
            .antiquant
            .as_ref()
            .and_then(|a| a.1.as_ref().map(|_| a.2.clone()));
        sh
    }

    /// The reference's view.
    pub(crate) fn host(&self) -> IncreHostValues<'_> {
        IncreHostValues {
            atten_mask: self.mask.as_ref().map(|m| &m.0[..]),
            pse_shift: self.pse.as_ref().map(|p| &p.0[..]),
            antiquant_scale: self.antiquant.as_ref().map(|a| &a.0[..]),
            antiquant_offset: self.antiquant.as_ref().and_then(|a| a.1.as_deref()),
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn icase(
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
        q: rng
            .vec_f32(b * n * d, 1.0)
            .iter()
            .map(|x| x * 2.0)
            .collect(),
        q_shape,
        k: rng
            .vec_f32(b * nkv * s * d, 1.0)
            .iter()
            .map(|x| x * 2.0)
            .collect(),
        v: rng.vec_f32(b * nkv * s * d, 1.0),
        b,
        nkv,
        s,
        d,
        opt: IOpt::default(),
    }
}

/// The BNSD source in the case's contiguous layout, with its shape.
pub(crate) fn kv_layout(c: &ICase, x: &[f32]) -> (Vec<f32>, Vec<usize>) {
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

pub(crate) enum Form {
    Contiguous,
    List,
    /// Paged with the (blocknum, blockSize, H) (false) or (blocknum, Nkv, blockSize, D) (true) cache.
    Paged(bool),
}

/// Host KV data + shapes in one form; `table` physical blocks for paged.
pub(crate) struct HostKv {
    pub(crate) shapes: IncreKvShapes,
    pub(crate) k: Vec<Vec<f32>>,
    pub(crate) v: Vec<Vec<f32>>,
}

pub(crate) const BS: usize = 16;

pub(crate) fn host_kv(c: &mut ICase, form: &Form) -> HostKv {
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

pub(crate) fn incre_ref(c: &ICase, h: &HostKv) -> Vec<f32> {
    let shapes = c.opt.shapes(IncreShapes::new(
        c.q_shape.clone(),
        h.shapes.clone(),
        c.opt.antiquant.is_some(),
    ));
    let dims = c.spec.validate(&shapes).expect(c.name);
    if !matches!(h.shapes, IncreKvShapes::Paged { .. }) {
        // The paged view of a call validated as not paged is a typed refusal, not a panic.
        let e = c.spec.paged(&dims, &h.k[0], &h.v[0]).unwrap_err();
        assert_eq!(e.param(), Some("blocktable"), "{e}");
    }
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
        IncreKvShapes::Paged { .. } => c.spec.paged(&dims, &h.k[0], &h.v[0]).unwrap(),
    };
    f32s(incre_flash_attention(&c.spec.args(
        &dims,
        &c.q,
        kv,
        c.opt.host(),
    )))
}

pub(crate) fn incre_inputs<Bk: burn::tensor::backend::Backend>(
    c: &ICase,
    h: &HostKv,
) -> IncreInputs<burn::tensor::ops::FloatTensor<Bk>> {
    incre_inputs_on::<Bk>(c, h, &Default::default())
}

pub(crate) fn incre_inputs_on<Bk: burn::tensor::backend::Backend>(
    c: &ICase,
    h: &HostKv,
    d: &Bk::Device,
) -> IncreInputs<burn::tensor::ops::FloatTensor<Bk>> {
    let t = |x: &Vec<f32>, s: &Vec<usize>| from_vec::<Bk>(x.clone(), s, d);
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
    let mut inputs = IncreInputs::new(t(&c.q, &c.q_shape), kv);
    if let Some((m, shape)) = &c.opt.mask {
        let m: Vec<f32> = m.iter().map(|&x| f32::from(x)).collect();
        inputs.atten_mask = Some(t(&m, shape));
    }
    inputs.pse_shift = c.opt.pse.as_ref().map(|(p, shape)| t(p, shape));
    if let Some((scale, offset, shape)) = &c.opt.antiquant {
        inputs.antiquant_scale = Some(t(scale, shape));
        inputs.antiquant_offset = offset.as_ref().map(|o| t(o, shape));
    }
    inputs
}

pub(crate) fn incre_cases() -> Vec<(ICase, Form)> {
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
    c.opt.mask = Some((vec![0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0], vec![2, 1, 1, 6]));
    c.opt.pse = Some((Rng(3).vec_f32(2 * 2 * 6, 1.0), vec![2, 2, 1, 6]));
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
    c.opt.mask = Some(((0..64).map(|i| (i % 5 == 1) as u8).collect(), vec![2, 32]));
    v.push((c, Form::Paged(true)));
    // int8 KV as float tensors holding integers, dequantised per tensor / per channel.
    for (name, per_channel) in [("antiquant_tensor", false), ("antiquant_channel", true)] {
        let mut c = icase(name, IfaLayout::Bnsd, 1, 2, 2, 4, 4, 9);
        c.k = c.k.iter().map(|x| (x * 60.0).round()).collect();
        c.v = c.v.iter().map(|x| (x * 100.0).round()).collect();
        c.opt.antiquant = Some(if per_channel {
            (
                (0..16).map(|i| 0.01 + 0.002 * i as f32).collect(),
                Some((0..16).map(|i| i as f32 - 8.0).collect()),
                vec![2, 2, 1, 4],
            )
        } else {
            (vec![0.02, 0.01], Some(vec![3.0, -1.0]), vec![2])
        });
        v.push((c, Form::Contiguous));
    }
    v
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
    let paged = to_vec::<B>(icomp::incre_fwd::<B>(incre_inputs::<B>(&c, &h), &c.spec).unwrap());
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
