//! Fused inference attention (FIA V4): the cases, their reference, and the Burn paths against
//! it (the suite in `suite.rs` runs them on every backend).

use super::prompt::layout_shape;
use super::*;
use burn_ascend::kernels::reference::fia::fused_infer_attention as fia_reference;
use burn_ascend::ops::fia::{
    composite as fcomp, FiaHostValues, FiaKvShapes, FiaMask, FiaShapes, FiaSpec, PagedLayout,
};
use burn_ascend::FiaKvFromTensors;
use burn_ascend::{fused_infer_attention, FiaInputs, FiaKv};

#[derive(Clone)]
pub(crate) struct FCase {
    pub(crate) name: &'static str,
    pub(crate) spec: FiaSpec,
    pub(crate) shapes: FiaShapes,
    pub(crate) q: Vec<f32>,
    /// Key (or the key cache).
    pub(crate) k: Vec<f32>,
    /// Value (or the value cache).
    pub(crate) v: Vec<f32>,
    /// `learnableSink` `[N]`, when the case has one (its shape is in `shapes`).
    pub(crate) sink: Option<Vec<f32>>,
    /// The optional tensor inputs' values (their shapes are in `shapes`).
    pub(crate) opt: FOpt,
}

/// A FIA case's optional tensor values: the dense mask's bytes, the pse, and the scale /
/// offset of the combined (0), the key's (1) and the value's (2) antiquant.
#[derive(Clone, Default)]
pub(crate) struct FOpt {
    pub(crate) mask: Option<Vec<u8>>,
    pub(crate) pse: Option<Vec<f32>>,
    pub(crate) antiquant: [[Option<Vec<f32>>; 2]; 3],
}

impl FCase {
    /// Gives the case the sink `values` (`learnableSink`, a tensor input).
    fn with_sink(mut self, values: Vec<f32>) -> Self {
        self.set_sink(Some(values));
        self
    }

    /// Sets or removes the case's sink (its values and its shape).
    pub(crate) fn set_sink(&mut self, values: Option<Vec<f32>>) {
        self.shapes.learnable_sink = values.as_ref().map(|v| vec![v.len()]);
        self.sink = values;
    }

    /// Gives the case a dense mask (bytes, non-zero = masked) of `shape`.
    pub(crate) fn set_mask(&mut self, data: Vec<u8>, shape: Vec<usize>) {
        self.spec.atten_mask = FiaMask::Dense;
        self.shapes.atten_mask = Some(shape);
        self.opt.mask = Some(data);
    }

    /// Gives the case a `pseShift` of `shape`.
    pub(crate) fn set_pse(&mut self, data: Vec<f32>, shape: Vec<usize>) {
        self.shapes.pse_shift = Some(shape);
        self.opt.pse = Some(data);
    }

    /// Sets or removes an antiquant (`which`: 0 combined, 1 key, 2 value): scale, offset and
    /// their shape.
    pub(crate) fn set_antiquant(
        &mut self,
        which: usize,
        scale: Option<Vec<f32>>,
        offset: Option<Vec<f32>>,
        shape: Vec<usize>,
    ) {
        let sh = &mut self.shapes;
        let (s, o) = match which {
            0 => (&mut sh.antiquant_scale, &mut sh.antiquant_offset),
            1 => (&mut sh.key_antiquant_scale, &mut sh.key_antiquant_offset),
            _ => (
                &mut sh.value_antiquant_scale,
                &mut sh.value_antiquant_offset,
            ),
        };
        *s = scale.as_ref().map(|_| shape.clone());
        *o = offset.as_ref().map(|_| shape);
        self.opt.antiquant[which] = [scale, offset];
    }

    /// The reference's view of the optional values and the sink.
    pub(crate) fn host(&self) -> FiaHostValues<'_> {
        let [[aqs, aqo], [kqs, kqo], [vqs, vqo]] = &self.opt.antiquant;
        FiaHostValues {
            atten_mask: self.opt.mask.as_deref(),
            pse_shift: self.opt.pse.as_deref(),
            antiquant_scale: aqs.as_deref(),
            antiquant_offset: aqo.as_deref(),
            key_antiquant_scale: kqs.as_deref(),
            key_antiquant_offset: kqo.as_deref(),
            value_antiquant_scale: vqs.as_deref(),
            value_antiquant_offset: vqo.as_deref(),
            learnable_sink: self.sink.as_deref(),
        }
    }

    /// What a caller holding the inputs on the host checks: the spec against the shapes, and
    /// the sink's values.
    pub(crate) fn validate(&self) -> burn_ascend::Result<burn_ascend::ops::fia::FiaDims> {
        let dims = self.spec.validate(&self.shapes)?;
        if let Some(s) = &self.sink {
            burn_ascend::ops::fia::check_learnable_sink_values(s)?;
        }
        Ok(dims)
    }

    /// The sink as a tensor on `d`.
    pub(crate) fn sink_on<Bk: burn::tensor::backend::Backend>(
        &self,
        d: &Bk::Device,
    ) -> Option<Tensor<Bk, 1>> {
        self.sink
            .as_ref()
            .map(|s| Tensor::<Bk, 1>::from_data(TensorData::new(s.clone(), [s.len()]), d))
    }
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// A contiguous case in `l`: B, Q_S, KV_S, N, Nkv, D (value D = D).
#[allow(clippy::too_many_arguments)]
pub(crate) fn fcase(
    name: &'static str,
    l: PfaLayout,
    (b, sq, skv): (usize, usize, usize),
    (n, nkv, d): (usize, usize, usize),
    seed: u64,
) -> FCase {
    let mut rng = Rng(seed);
    let mut spec = FiaSpec::new(n, 1.0 / (d as f64).sqrt(), l);
    spec.num_key_value_heads = if nkv == n { 0 } else { nkv };
    let (qs, ks) = (
        layout_shape(l, b, sq, n, d),
        layout_shape(l, b, skv, nkv, d),
    );
    FCase {
        name,
        q: rng.vec_f32(numel(&qs), 2.0),
        k: rng.vec_f32(numel(&ks), 2.0),
        v: rng.vec_f32(numel(&ks), 1.0),
        sink: None,
        opt: FOpt::default(),
        spec,
        shapes: FiaShapes::new(
            qs,
            FiaKvShapes::Contiguous {
                key: ks.clone(),
                value: ks,
            },
            false,
            None,
        ),
    }
}

/// A random dense mask `(rows, cols)` (column 0 never masked), as bytes.
pub(crate) fn dense_mask(rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<usize>) {
    let mut rng = Rng(seed);
    let data: Vec<u8> = (0..rows * cols)
        .map(|e| (e % cols != 0 && rng.sym(1.0) > 0.4) as u8)
        .collect();
    (data, vec![rows, cols])
}

/// Turns a contiguous BSND/BSH/BNSD case into paged caches (blocks of each batch in reverse
/// order, `layout` the cache layout) with `actualSeqLengthsKv = lens`.
pub(crate) fn paged(mut c: FCase, bs: usize, layout: PagedLayout, lens: &[i64]) -> FCase {
    let spec = &mut c.spec;
    let FiaKvShapes::Contiguous { key, .. } = &c.shapes.kv else {
        panic!("contiguous")
    };
    let nkv = if spec.num_key_value_heads == 0 {
        spec.num_heads
    } else {
        spec.num_key_value_heads
    };
    let (b, skv, d) = match spec.input_layout {
        PfaLayout::Bsh => (key[0], key[1], key[2] / nkv),
        PfaLayout::Bsnd => (key[0], key[1], key[3]),
        _ => (key[0], key[2], key[3]),
    };
    let at = |bb: usize, t: usize, h: usize, e: usize| match spec.input_layout {
        PfaLayout::Bnsd | PfaLayout::BnsdBsnd => ((bb * nkv + h) * skv + t) * d + e,
        _ => ((bb * skv + t) * nkv + h) * d + e,
    };
    let per = skv / bs;
    let nb = b * per;
    let table: Vec<i32> = (0..nb as i32).rev().collect();
    let mut kc = vec![0.0f32; nb * bs * nkv * d];
    let mut vc = kc.clone();
    for bb in 0..b {
        for t in 0..skv {
            let blk = table[bb * per + t / bs] as usize;
            for h in 0..nkv {
                for e in 0..d {
                    let dst = match layout {
                        PagedLayout::Bsh => ((blk * bs + t % bs) * nkv + h) * d + e,
                        PagedLayout::Bnsd => ((blk * nkv + h) * bs + t % bs) * d + e,
                    };
                    kc[dst] = c.k[at(bb, t, h, e)];
                    vc[dst] = c.v[at(bb, t, h, e)];
                }
            }
        }
    }
    let cache = match layout {
        PagedLayout::Bsh => vec![nb, bs, nkv * d],
        PagedLayout::Bnsd => vec![nb, nkv, bs, d],
    };
    spec.block_size = bs;
    spec.block_table = Some(BlockTable {
        data: table.into(),
        shape: vec![b, per],
    });
    spec.actual_seq_lengths_kv = Some(lens.to_vec());
    c.k = kc;
    c.v = vc;
    c.shapes.kv = FiaKvShapes::Paged {
        key_cache: cache.clone(),
        value_cache: cache,
    };
    c
}

fn sink(n: usize, seed: u64) -> Vec<f32> {
    Rng(seed).vec_f32(n, 2.0)
}

pub(crate) fn fia_cases() -> Vec<FCase> {
    let mut v = Vec::new();

    let mut c = fcase(
        "bsnd_prefill_gqa_band_sink",
        PfaLayout::Bsnd,
        (2, 5, 7),
        (4, 2, 64),
        1,
    );
    c.spec.sparse_mode = 4;
    c.spec.pre_tokens = 2;
    c.spec.next_tokens = 0;
    c.spec.atten_mask = FiaMask::Compressed;
    c.spec.actual_seq_lengths = Some(vec![5, 3]);
    c.spec.actual_seq_lengths_kv = Some(vec![7, 4]);
    c.spec.softmax_lse_flag = true;
    let c = c.with_sink(sink(4, 2));
    v.push(c);

    let mut c = fcase(
        "bnsd_prefill_dense_mask_pse",
        PfaLayout::Bnsd,
        (2, 4, 6),
        (2, 2, 16),
        3,
    );
    c.spec.pre_tokens = 2;
    c.spec.next_tokens = 1;
    let (m, shape) = dense_mask(4, 6, 4);
    c.set_mask(m, shape);
    c.set_pse(Rng(5).vec_f32(2 * 2 * 4 * 6, 1.0), vec![2, 2, 4, 6]);
    c.spec.softmax_lse_flag = true;
    v.push(c);

    let c = fcase(
        "bsh_decode_paged_sink",
        PfaLayout::Bsh,
        (3, 1, 32),
        (4, 1, 64),
        6,
    );
    let c = paged(c, 16, PagedLayout::Bsh, &[32, 17, 1]);
    let mut c = c.with_sink(sink(4, 7));
    c.spec.softmax_lse_flag = true;
    v.push(c);

    let mut c = fcase(
        "bnsd_decode_int8_per_token",
        PfaLayout::Bnsd,
        (2, 1, 8),
        (2, 1, 16),
        8,
    );
    let mut rng = Rng(9);
    c.k =
        c.k.iter()
            .map(|_| (rng.below(255) as f32) - 127.0)
            .collect();
    c.v =
        c.v.iter()
            .map(|_| (rng.below(255) as f32) - 127.0)
            .collect();
    c.shapes.kv_int8 = true;
    c.spec.key_antiquant_mode = 1;
    c.spec.value_antiquant_mode = 1;
    for which in [1, 2] {
        let (scale, offset) = (rng.vec_f32(2 * 8, 0.02), rng.vec_f32(2 * 8, 2.0));
        c.set_antiquant(which, Some(scale), Some(offset), vec![1, 2, 8]);
    }
    c.set_mask(
        vec![0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1],
        vec![2, 8],
    );
    v.push(c);

    let mut c = fcase(
        "tnd_causal_sink_lse",
        PfaLayout::Tnd,
        (1, 8, 10),
        (4, 4, 64),
        10,
    );
    c.spec.actual_seq_lengths = Some(vec![3, 4, 8]);
    c.spec.actual_seq_lengths_kv = Some(vec![4, 6, 10]);
    c.spec.sparse_mode = 3;
    c.spec.atten_mask = FiaMask::Compressed;
    let mut c = c.with_sink(sink(4, 11));
    c.spec.softmax_lse_flag = true;
    v.push(c);

    let mut c = fcase(
        "bsnd_left_padding",
        PfaLayout::Bsnd,
        (2, 5, 6),
        (2, 2, 16),
        12,
    );
    c.spec.actual_seq_lengths = Some(vec![3, 4]);
    c.spec.actual_seq_lengths_kv = Some(vec![4, 5]);
    c.spec.query_padding_size = Some(1);
    c.spec.kv_padding_size = Some(1);
    c.spec.sparse_mode = 1;
    let (m, shape) = dense_mask(5, 6, 13);
    c.set_mask(m, shape);
    c.spec.softmax_lse_flag = true;
    v.push(c);

    let mut c = fcase(
        "bnsd_prefill_paged_int8_per_channel",
        PfaLayout::Bnsd,
        (2, 3, 32),
        (4, 2, 64),
        14,
    );
    let mut rng = Rng(15);
    c.k =
        c.k.iter()
            .map(|_| (rng.below(255) as f32) - 127.0)
            .collect();
    c.v =
        c.v.iter()
            .map(|_| (rng.below(255) as f32) - 127.0)
            .collect();
    let mut c = paged(c, 32, PagedLayout::Bnsd, &[30, 9]);
    c.shapes.kv_int8 = true;
    let (scale, offset) = (rng.vec_f32(2 * 2 * 64, 0.02), rng.vec_f32(2 * 2 * 64, 2.0));
    c.set_antiquant(0, Some(scale), Some(offset), vec![2, 2, 1, 64]);
    c.spec.sparse_mode = 3;
    c.spec.atten_mask = FiaMask::Compressed;
    v.push(c);
    v
}

/// The reference's `(attentionOut, softmaxLse)` as f32.
pub(crate) fn fia_ref(c: &FCase) -> (Vec<f32>, Vec<f32>) {
    let dims = c.spec.validate(&c.shapes).expect(c.name);
    let out = fia_reference(&c.spec.args(&dims, &c.q, &c.k, &c.v, c.host()));
    (f32s(out.attention_out), out.softmax_lse)
}

pub(crate) fn fia_inputs_on<Bk: burn::tensor::backend::Backend>(
    c: &FCase,
    d: &Bk::Device,
) -> FiaInputs<burn::tensor::ops::FloatTensor<Bk>> {
    let kv = match &c.shapes.kv {
        FiaKvShapes::Contiguous { key, value } => FiaKv::Contiguous {
            key: from_vec::<Bk>(c.k.clone(), key, d),
            value: from_vec::<Bk>(c.v.clone(), value, d),
        },
        FiaKvShapes::Paged {
            key_cache,
            value_cache,
        } => FiaKv::Paged {
            key_cache: from_vec::<Bk>(c.k.clone(), key_cache, d),
            value_cache: from_vec::<Bk>(c.v.clone(), value_cache, d),
        },
    };
    let t = |v: &Option<Vec<f32>>, shape: &Option<Vec<usize>>| match (v, shape) {
        (Some(v), Some(shape)) => Some(from_vec::<Bk>(v.clone(), shape, d)),
        _ => None,
    };
    let mask: Option<Vec<f32>> = c
        .opt
        .mask
        .as_ref()
        .map(|m| m.iter().map(|&x| f32::from(x)).collect());
    let sh = &c.shapes;
    let [[aqs, aqo], [kqs, kqo], [vqs, vqo]] = &c.opt.antiquant;
    FiaInputs {
        atten_mask: t(&mask, &sh.atten_mask),
        pse_shift: t(&c.opt.pse, &sh.pse_shift),
        antiquant_scale: t(aqs, &sh.antiquant_scale),
        antiquant_offset: t(aqo, &sh.antiquant_offset),
        key_antiquant_scale: t(kqs, &sh.key_antiquant_scale),
        key_antiquant_offset: t(kqo, &sh.key_antiquant_offset),
        value_antiquant_scale: t(vqs, &sh.value_antiquant_scale),
        value_antiquant_offset: t(vqo, &sh.value_antiquant_offset),
        ..FiaInputs::new(
            from_vec::<Bk>(c.q.clone(), &c.shapes.query, d),
            kv,
            c.sink
                .as_ref()
                .map(|s| from_vec::<Bk>(s.clone(), &[s.len()], d)),
        )
    }
}

/// LSE comparison: `+inf` exactly where the reference has it, else close.
pub(crate) fn lse_close(name: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name}: LSE length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if w.is_infinite() {
            assert_eq!(g, w, "{name}: LSE {i}");
        } else {
            assert!(
                (g - w).abs() <= ATOL + RTOL * w.abs(),
                "{name}: LSE {i}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn every_fia_case_computes_something_and_is_valid() {
    for c in fia_cases() {
        let (out, _) = fia_ref(&c);
        assert!(out.iter().any(|&x| x != 0.0), "{}", c.name);
    }
}

#[test]
fn fia_without_a_sink_on_the_composite_equals_prompt_attention_for_prefill() {
    // The same data through PFA V3 and FIA on the composite path.
    let c = fcase("bsnd", PfaLayout::Bsnd, (2, 4, 6), (4, 2, 16), 21);
    let mut p = PromptSpec::new(4, c.spec.scale_value, PfaLayout::Bsnd);
    p.num_key_value_heads = 2;
    p.sparse_mode = 3;
    p.atten_mask = PromptMaskKind::Compressed;
    let mut f = c.spec.clone();
    f.sparse_mode = 3;
    f.atten_mask = FiaMask::Compressed;
    let q = from_vec::<B>(c.q.clone(), &c.shapes.query, &Default::default());
    let FiaKvShapes::Contiguous { key, value } = &c.shapes.kv else {
        unreachable!()
    };
    let k = from_vec::<B>(c.k.clone(), key, &Default::default());
    let v = from_vec::<B>(c.v.clone(), value, &Default::default());
    let pfa = pcomp::prompt_fwd::<B>(
        PromptInputs {
            query: q.clone(),
            key: k.clone(),
            value: v.clone(),
            atten_mask: None,
            pse_shift: None,
        },
        &p,
    )
    .unwrap();
    let fia = fcomp::fia_fwd::<B>(
        FiaInputs::new(q, FiaKv::Contiguous { key: k, value: v }, None),
        &f,
    )
    .unwrap();
    close(
        "pfa vs fia",
        &to_vec::<B>(fia.attention_out),
        &to_vec::<B>(pfa),
        1e-6,
        1e-5,
    )
    .unwrap();
    assert!(fia.softmax_lse.is_none(), "no LSE without softmaxLseFlag");
}

#[test]
fn the_functional_api_returns_the_lse_with_the_rank_asked_for() {
    let c = fia_cases().remove(0);
    let dev = Default::default();
    let q = Tensor::<B, 4>::from_data(TensorData::new(c.q.clone(), c.shapes.query.clone()), &dev);
    let FiaKvShapes::Contiguous { key, value } = &c.shapes.kv else {
        unreachable!()
    };
    let kv = || {
        FiaKv::contiguous(
            Tensor::<B, 4>::from_data(TensorData::new(c.k.clone(), key.clone()), &dev),
            Tensor::<B, 4>::from_data(TensorData::new(c.v.clone(), value.clone()), &dev),
        )
    };
    let (out, lse) =
        fused_infer_attention::<B, 4, 4>(q.clone(), kv(), c.sink_on(&dev), &c.spec).unwrap();
    let (want_out, want_lse) = fia_ref(&c);
    // NdArray runs the fast CPU FIA (f32 kernels) against the f64 reference.
    close(
        c.name,
        &out.into_data().to_vec::<f32>().unwrap(),
        &want_out,
        ATOL,
        RTOL,
    )
    .unwrap();
    let lse = lse.expect("softmaxLseFlag");
    assert_eq!(lse.dims(), [2, 4, 5, 1]);
    lse_close(c.name, &lse.into_data().to_vec::<f32>().unwrap(), &want_lse);
    let wrong = fused_infer_attention::<B, 4, 3>(q, kv(), c.sink_on(&dev), &c.spec);
    expect_param("lse rank", wrong.map(|_| ()), "softmaxLseFlag");
}

#[test]
fn fia_under_autodiff_is_forward_only_and_gives_no_gradient_to_its_inputs() {
    let c = fia_cases().remove(0);
    let dev = Default::default();
    let q = Tensor::<AD, 4>::from_data(TensorData::new(c.q.clone(), c.shapes.query.clone()), &dev)
        .require_grad();
    let FiaKvShapes::Contiguous { key, value } = &c.shapes.kv else {
        unreachable!()
    };
    let k =
        Tensor::<AD, 4>::from_data(TensorData::new(c.k.clone(), key.clone()), &dev).require_grad();
    let v = Tensor::<AD, 4>::from_data(TensorData::new(c.v.clone(), value.clone()), &dev);
    let (out, _) = fused_infer_attention::<AD, 4, 4>(
        q.clone(),
        FiaKv::contiguous(k.clone(), v),
        c.sink_on(&dev),
        &c.spec,
    )
    .unwrap();
    let (want, _) = fia_ref(&c);
    close(
        c.name,
        &out.clone().into_data().to_vec::<f32>().unwrap(),
        &want,
        ATOL,
        RTOL,
    )
    .unwrap();
    // The output is a constant: a loss on it alone reaches neither q nor k.
    let grads = (out.sum() + q.clone().sum() * 0.0).backward();
    let gq = q
        .grad(&grads)
        .expect("q is in the graph through the 0·sum term");
    assert!(gq
        .into_data()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|&x| x == 0.0));
    assert!(k.grad(&grads).is_none(), "no gradient reaches key");
}
