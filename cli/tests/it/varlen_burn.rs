//! The Burn paths of the varlen op beyond the backend-generic suite (`suite.rs`):
//! `Autodiff<NdArray>` with the fused backward under both checkpointing strategies against
//! the CPU reference, on every case of `common::cases()`, the NdArray fast-kernel check and
//! the corrupted-backward mutation.

use crate::common::{cases, close, Case};
use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_ascend::kernels::reference::varlen as reference;
use burn_ascend::ops::autodiff::test_hooks::CORRUPT_DSINK;
use burn_ascend::ops::host::from_vec;
use burn_ascend::ops::varlen::VarlenShapes;
use burn_ascend::{
    flash_attention_varlen, varlen_score, varlen_score_with_alibi, varlen_score_with_dropout,
    varlen_score_with_mask, varlen_score_with_pse, AttentionBackend, FlashAttnOptions,
    VarlenBackend, VarlenInputs,
};

type B = NdArray;

/// Reference forward and backward in f32, as the kernels crate computes them.
pub(crate) fn reference_run(
    c: &Case,
) -> (reference::VarlenFwdOut<f32>, reference::VarlenBwdOut<f32>) {
    let dims = c.spec.validate_fwd(&c.shapes()).expect("valid case");
    let p = c.problem(dims);
    let fwd = reference::varlen_fwd(&p, &c.q, &c.k, &c.v);
    let bwd = reference::varlen_bwd(
        &p,
        &c.q,
        &c.k,
        &c.v,
        &c.dy,
        &fwd.attention_out,
        &fwd.softmax_max,
        &fwd.softmax_sum,
    );
    (fwd, bwd)
}

/// [`varlen_score`], or [`varlen_score_with_mask`] with the case's explicit mask,
/// [`varlen_score_with_pse`] with its pse (flat or ALiBi-compressed) or
/// [`varlen_score_with_alibi`] with its slopes, [`varlen_score_with_dropout`] with its dropout
/// mask (constant tensors on the query's device; no case has two of them).
fn score_api<Bk: AttentionBackend>(
    c: &Case,
    (q, k, v): (Tensor<Bk, 3>, Tensor<Bk, 3>, Tensor<Bk, 3>),
    sink: Option<Tensor<Bk, 1>>,
) -> burn_ascend::Result<burn_ascend::VarlenAttention<Bk>> {
    let dev = q.device();
    let t = |(v, s): (Vec<f32>, Vec<usize>)| TensorData::new(v, s);
    if let Some(drop) = c.drop_f32() {
        assert!(c.mask.is_none() && c.pse.is_none() && c.slopes.is_none());
        let drop = Tensor::<Bk, 1>::from_data(t(drop), &dev);
        return varlen_score_with_dropout(q, k, v, sink, drop, &c.spec);
    }
    match (c.mask_f32(), c.pse.clone(), c.slopes.clone()) {
        (None, None, None) => varlen_score(q, k, v, sink, &c.spec),
        (Some(m), None, None) => {
            let mask = Tensor::<Bk, 2>::from_data(t(m), &dev);
            varlen_score_with_mask(q, k, v, sink, mask, &c.spec)
        }
        (None, Some(p), None) if p.1.len() == 4 => {
            let pse = Tensor::<Bk, 4>::from_data(t(p), &dev);
            varlen_score_with_pse(q, k, v, sink, pse, &c.spec)
        }
        (None, Some(p), None) => {
            let pse = Tensor::<Bk, 1>::from_data(t(p), &dev);
            varlen_score_with_pse(q, k, v, sink, pse, &c.spec)
        }
        (None, None, Some(s)) if s.1.len() == 2 => {
            let slopes = Tensor::<Bk, 2>::from_data(t(s), &dev);
            varlen_score_with_alibi(q, k, v, sink, slopes, &c.spec)
        }
        (None, None, Some(s)) => {
            let slopes = Tensor::<Bk, 1>::from_data(t(s), &dev);
            varlen_score_with_alibi(q, k, v, sink, slopes, &c.spec)
        }
        _ => unimplemented!("{}: a mask with a pse is no case of the suite", c.name),
    }
}

/// The case's query, key and value as `[T, N, D]` tensors on `dev`.
fn qkv<Bk: Backend>(c: &Case, dev: &Bk::Device) -> (Tensor<Bk, 3>, Tensor<Bk, 3>, Tensor<Bk, 3>) {
    let t3 = |v: &Vec<f32>, s: [usize; 3]| {
        Tensor::<Bk, 3>::from_data(TensorData::new(v.clone(), s), dev)
    };
    (
        t3(&c.q, [c.tq(), c.n, c.d]),
        t3(&c.k, [c.tkv(), c.nkv, c.d]),
        t3(&c.v, [c.tkv(), c.nkv, c.dv]),
    )
}

pub(crate) fn inputs_on<Bk: Backend>(
    c: &Case,
    dev: &Bk::Device,
) -> VarlenInputs<burn::tensor::ops::FloatTensor<Bk>> {
    VarlenInputs {
        query: from_vec::<Bk>(c.q.clone(), &[c.tq(), c.n, c.d], dev),
        key: from_vec::<Bk>(c.k.clone(), &[c.tkv(), c.nkv, c.d], dev),
        value: from_vec::<Bk>(c.v.clone(), &[c.tkv(), c.nkv, c.dv], dev),
        sink: c.sink.clone().map(|s| from_vec::<Bk>(s, &[c.n], dev)),
        pse: c.pse.clone().map(|(v, s)| from_vec::<Bk>(v, &s, dev)),
        atten_mask: c.mask_f32().map(|(m, s)| from_vec::<Bk>(m, &s, dev)),
        alibi_slopes: c.slopes.clone().map(|(v, s)| from_vec::<Bk>(v, &s, dev)),
        drop_mask: c.drop_f32().map(|(v, s)| from_vec::<Bk>(v, &s, dev)),
    }
}

// Tolerances: both sides compute in f32 (the reference accumulates in f64), so 1e-5 absolute
// plus 1e-4 relative covers rounding of O(1) values; stats FLT_MAX/−FLT_MAX compare exactly.
pub(crate) const ATOL: f32 = 1e-5;
pub(crate) const RTOL: f32 = 1e-4;

/// Gradients of `Σ out ∘ dy` through `Autodiff<NdArray, C>`: (dq, dk, dv, dsink).
fn autodiff_grads<C: CheckpointStrategy>(
    c: &Case,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
    type AD<C> = Autodiff<NdArray, C>;
    let dev = Default::default();
    let (q, k, v) = qkv::<AD<C>>(c, &dev);
    let (q, k, v) = (q.require_grad(), k.require_grad(), v.require_grad());
    let sink = c.sink.as_ref().map(|s| {
        Tensor::<AD<C>, 1>::from_data(TensorData::new(s.clone(), [c.n]), &dev).require_grad()
    });
    let dy =
        Tensor::<AD<C>, 3>::from_data(TensorData::new(c.dy.clone(), [c.tq(), c.n, c.dv]), &dev);
    let out = score_api(c, (q.clone(), k.clone(), v.clone()), sink.clone()).expect(&c.name);
    // A second use of q after the attention, so the graph has more than one node.
    let loss = (out.attention_out * dy).sum() + q.clone().sum().mul_scalar(0.0);
    let grads = loss.backward();
    let g = |t: &Tensor<AD<C>, 3>| {
        t.grad(&grads)
            .map(|g| g.into_data().to_vec::<f32>().unwrap())
            .unwrap_or_default()
    };
    let dsink = sink
        .and_then(|s| s.grad(&grads))
        .map(|g| g.into_data().to_vec::<f32>().unwrap());
    (g(&q), g(&k), g(&v), dsink)
}

fn check_autodiff<C: CheckpointStrategy>() {
    for c in cases() {
        let (_, rb) = reference_run(&c);
        let (dq, dk, dv, dsink) = autodiff_grads::<C>(&c);
        let name = |s: &str| format!("{}:{s}", c.name);
        // Untouched key/value rows (empty sequences) may get no gradient at all: compare as zeros.
        let or_zeros = |g: Vec<f32>, n: usize| if g.is_empty() { vec![0.0; n] } else { g };
        close(&name("dq"), &or_zeros(dq, rb.dq.len()), &rb.dq, ATOL, RTOL).unwrap();
        close(&name("dk"), &or_zeros(dk, rb.dk.len()), &rb.dk, ATOL, RTOL).unwrap();
        close(&name("dv"), &or_zeros(dv, rb.dv.len()), &rb.dv, ATOL, RTOL).unwrap();
        match (dsink, &rb.dsink) {
            (Some(a), Some(b)) => close(&name("dsink"), &a, b, ATOL, RTOL).unwrap(),
            (None, None) => {}
            (a, b) => panic!("{}: dsink presence differs: {a:?} vs {b:?}", c.name),
        }
    }
}

#[test]
fn autodiff_fused_backward_matches_reference_without_checkpointing() {
    check_autodiff::<NoCheckpointing>();
}

#[test]
fn autodiff_fused_backward_matches_reference_with_balanced_checkpointing() {
    check_autodiff::<BalancedCheckpointing>();
}

/// A flat pse tensor is differentiable under `Autodiff`: it receives the fused backward's
/// `dpse` (checked against the f64-accumulating reference's, itself checked by finite
/// differences in the kernels crate), and q gets the reference's gradient.
fn check_autodiff_pse<C: CheckpointStrategy>() {
    type AD<C> = Autodiff<NdArray, C>;
    let dense: Vec<Case> = cases()
        .into_iter()
        .filter(|c| matches!(&c.pse, Some((_, shape)) if shape.len() == 1))
        .collect();
    assert!(dense.len() >= 2, "the cases cover pseType 0 and 1");
    for c in dense {
        let (_, rb) = reference_run(&c);
        let (data, _) = c.pse.as_ref().expect("a flat pse");
        let dev = Default::default();
        let (q, k, v) = qkv::<AD<C>>(&c, &dev);
        let (q, k, v) = (q.require_grad(), k.require_grad(), v.require_grad());
        let sink = c.sink.as_ref().map(|s| {
            Tensor::<AD<C>, 1>::from_data(TensorData::new(s.clone(), [c.n]), &dev).require_grad()
        });
        let pse = Tensor::<AD<C>, 1>::from_data(TensorData::new(data.to_vec(), [data.len()]), &dev)
            .require_grad();
        let spec = c.spec.clone();
        let dy =
            Tensor::<AD<C>, 3>::from_data(TensorData::new(c.dy.clone(), [c.tq(), c.n, c.dv]), &dev);
        let out = varlen_score_with_pse(q.clone(), k, v, sink, pse.clone(), &spec).expect(&c.name);
        let grads = (out.attention_out * dy).sum().backward();
        let got = pse.grad(&grads).expect("pse is differentiable");
        let want = rb.dpse.as_ref().expect("reference dpse");
        close(
            &format!("{}:dpse", c.name),
            &got.into_data().to_vec::<f32>().unwrap(),
            want,
            ATOL,
            RTOL,
        )
        .unwrap();
        let dq = q.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap();
        close(&format!("{}:dq", c.name), &dq, &rb.dq, ATOL, RTOL).unwrap();
    }
}

#[test]
fn a_pse_tensor_gets_dpse_under_autodiff_without_checkpointing() {
    check_autodiff_pse::<NoCheckpointing>();
}

#[test]
fn a_pse_tensor_gets_dpse_under_autodiff_with_balanced_checkpointing() {
    check_autodiff_pse::<BalancedCheckpointing>();
}

#[test]
fn a_pse_tensor_of_the_wrong_rank_or_pse_type_is_a_typed_error() {
    let c = cases().into_iter().find(|c| c.name == "pse_type0").unwrap();
    let dev = Default::default();
    let run = |pse: Tensor<B, 1>, spec: &burn_ascend::ops::varlen::VarlenSpec| {
        let (q, k, v) = qkv::<B>(&c, &dev);
        varlen_score_with_pse(q, k, v, None, pse, spec).map(|o| o.attention_out.dims())
    };
    let short = Tensor::<B, 1>::zeros([3], &dev);
    let e = run(short, &c.spec).unwrap_err();
    assert_eq!(e.param(), Some("realShift"), "{e}");
    let mut alibi = c.spec.clone();
    alibi.attrs.pse_type = burn_ascend::PseType::InnerMulAdd;
    let e = run(Tensor::<B, 1>::zeros([3], &dev), &alibi).unwrap_err();
    assert_eq!(e.param(), Some("pseType"), "{e}");
}

/// The ALiBi-compressed pse gives what the flat pse it compresses gives (the forward and every
/// gradient, reference and NdArray), including a sequence longer than its 1024 rows; and
/// its rules are typed errors.
#[test]
fn the_alibi_compressed_pse_equals_the_dense_pse_it_compresses() {
    let mut all: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.name.starts_with("alibi_compressed"))
        .collect();
    assert_eq!(all.len(), 2);
    all.push(
        Case::new(
            "alibi_compressed_long",
            &[1100, 40],
            &[1100, 40],
            1,
            1,
            4,
            22,
        )
        .pse_alibi_compressed(burn_ascend::PseType::OuterAddMul, false),
    );
    for c in all {
        let (cf, cb) = reference_run(&c);
        let mut dense = c.clone();
        let total = c.alibi_dense_equivalent();
        let len = total.len();
        dense.pse = Some((total, vec![len]));
        let (df, db) = reference_run(&dense);
        let name = |s: &str| format!("{}:{s}", c.name);
        close(
            &name("out"),
            &cf.attention_out,
            &df.attention_out,
            1e-6,
            1e-5,
        )
        .unwrap();
        close(&name("dq"), &cb.dq, &db.dq, 1e-6, 1e-5).unwrap();
        close(&name("dk"), &cb.dk, &db.dk, 1e-6, 1e-5).unwrap();
        close(&name("dv"), &cb.dv, &db.dv, 1e-6, 1e-5).unwrap();
        assert!(
            cb.dpse.is_none(),
            "the compressed pse is not differentiated"
        );
        // NdArray (the fast CPU kernels) on the compressed form.
        let dev = Default::default();
        let fwd = B::varlen_fwd(inputs_on::<B>(&c, &dev), &c.spec).expect(&c.name);
        let got = burn_ascend::ops::host::to_vec::<B>(fwd.attention_out);
        close(&name("ndarray out"), &got, &cf.attention_out, ATOL, RTOL).unwrap();
    }

    // Rules: Sq = Skv, a causal mode, the shape, constant diagonals.
    let c = cases()
        .into_iter()
        .find(|c| c.name == "alibi_compressed_type0_shared")
        .unwrap();
    let shapes = c.shapes();
    c.spec.validate_fwd(&shapes).unwrap();
    let expect = |what: &str, spec: &burn_ascend::ops::varlen::VarlenSpec, shapes, param: &str| {
        let e = spec.validate_fwd(shapes).unwrap_err();
        assert_eq!(e.param(), Some(param), "{what}: {e}");
    };
    let mut band = c.spec.clone();
    band.attrs.sparse_mode = burn_ascend::SparseMode::Band;
    expect("band mode", &band, &shapes, "sparseMode");
    let (data, shape) = c.pse.clone().expect("the compressed pse");
    let wrong_s2 = VarlenShapes {
        pse: Some(vec![1, 2, 1024, 5]),
        ..shapes.clone()
    };
    expect("S2 not the longest KV", &c.spec, &wrong_s2, "realShift");
    // The diagonal rule needs the values: checked where they are on the host (the CPU
    // kernels' path, the op-replay CLI), by `check_alibi_compressed_values`.
    let mut bumpy = data.to_vec();
    bumpy[3 * shape[3] + 1] += 1.0;
    let e = burn_ascend::ops::varlen::check_alibi_compressed_values(&bumpy, &shape).unwrap_err();
    assert_eq!(
        e.param(),
        Some("realShift"),
        "not constant along a diagonal: {e}"
    );
    burn_ascend::ops::varlen::check_alibi_compressed_values(&data, &shape).unwrap();
    let mut not_toeplitz = c.clone();
    not_toeplitz.pse = Some((bumpy, shape));
    let dev = Default::default();
    let e = B::varlen_fwd(inputs_on::<B>(&not_toeplitz, &dev), &c.spec).unwrap_err();
    assert_eq!(
        e.param(),
        Some("realShift"),
        "NdArray, not constant along a diagonal: {e}"
    );
    let mut unequal = Case::new("u", &[4, 5], &[4, 6], 2, 2, 4, 23);
    unequal = unequal.pse_alibi_compressed(burn_ascend::PseType::OuterMulAdd, false);
    let ushapes = unequal.shapes();
    let e = unequal.spec.validate_fwd(&ushapes).unwrap_err();
    assert_eq!(e.param(), Some("realShift"), "Sq != Skv: {e}");
}

/// `flash_attention_varlen`'s ALiBi slopes are a tensor on the caller's device: `[N]` and
/// flash-attn's `[B·N]` give the reference's output for the same slopes (f32 abs 1e-5 + rel
/// 1e-4), and a length that is neither is a typed error naming `alibi_slopes`.
#[test]
fn flash_attention_takes_alibi_slopes_as_a_tensor_and_matches_the_reference() {
    let dev = Default::default();
    let slopes_of =
        |v: Vec<f32>| Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), &dev);
    let cu = [0i64, 3, 7];
    for per_batch in [false, true] {
        let mut c = Case::new("flash_alibi", &[3, 4], &[3, 4], 2, 1, 4, 31)
            .alibi(burn_ascend::PseType::InnerMulAdd, per_batch);
        // flash-attn measures Δ from the top-left: no start offsets.
        (c.spec.q_start_idx, c.spec.kv_start_idx) = (None, None);
        let (rf, _) = reference_run(&c);
        let (slopes, _) = c.slopes.clone().expect("slopes");
        let opts = FlashAttnOptions::<B> {
            alibi_slopes: Some(slopes_of(slopes)),
            softmax_scale: Some(c.spec.attrs.scale),
            ..Default::default()
        };
        let (q, k, v) = qkv::<B>(&c, &dev);
        let out = flash_attention_varlen(q, k, v, &cu, &cu, opts).expect("valid call");
        let got = out.into_data().to_vec::<f32>().unwrap();
        close(
            &format!("per_batch {per_batch}"),
            &got,
            &rf.attention_out,
            ATOL,
            RTOL,
        )
        .unwrap();
    }
    let c = Case::new("flash_alibi", &[3, 4], &[3, 4], 2, 1, 4, 31);
    let opts = FlashAttnOptions::<B> {
        alibi_slopes: Some(slopes_of(vec![0.5; 3])),
        ..Default::default()
    };
    let (q, k, v) = qkv::<B>(&c, &dev);
    let e = flash_attention_varlen(q, k, v, &cu, &cu, opts).unwrap_err();
    assert_eq!(e.param(), Some("alibi_slopes"), "{e}");
}

/// `flash_attention_varlen`'s dropout is the seeded mask of `dropout_mask` as a tensor of the
/// call: its output is the reference's for `dropout::generate_mask`'s bits of the same seed
/// and keep probability (f32 abs 1e-5 + rel 1e-4), and another seed gives another output.
#[test]
fn flash_attention_dropout_is_the_seeded_mask_as_a_tensor_and_matches_the_reference() {
    let dev = Default::default();
    let mut c = Case::new("flash_dropout", &[3, 4], &[5, 2], 2, 1, 4, 32);
    c.spec.attrs.keep_prob = 0.75;
    let bits = burn_ascend::contract::dropout::mask_bits(c.n, &c.seq_q, &c.seq_kv);
    c.drop = Some(burn_ascend::contract::dropout::generate_mask(bits, 0.75, 5));
    let (rf, _) = reference_run(&c);
    let run = |seed| {
        let opts = FlashAttnOptions::<B> {
            dropout: 0.25,
            dropout_seed: seed,
            softmax_scale: Some(c.spec.attrs.scale),
            ..Default::default()
        };
        let (q, k, v) = qkv::<B>(&c, &dev);
        let out = flash_attention_varlen(q, k, v, &[0, 3, 7], &[0, 5, 7], opts).unwrap();
        out.into_data().to_vec::<f32>().unwrap()
    };
    close("seed 5", &run(5), &rf.attention_out, ATOL, RTOL).unwrap();
    assert!(
        close("seed 6", &run(6), &rf.attention_out, ATOL, RTOL).is_err(),
        "another seed gave the same output"
    );
}

#[test]
fn ndarray_forward_is_the_fast_cpu_kernel() {
    for c in cases() {
        let (rf, _) = reference_run(&c);
        let dev = Default::default();
        let sink = c
            .sink
            .as_ref()
            .map(|s| Tensor::<B, 1>::from_data(TensorData::new(s.clone(), [c.n]), &dev));
        let out = score_api(&c, qkv::<B>(&c, &dev), sink).expect(&c.name);
        let got = out.attention_out.into_data().to_vec::<f32>().unwrap();
        let p = c.problem(c.spec.validate_fwd(&c.shapes()).unwrap());
        let fast = burn_ascend::kernels::cpu::varlen_fwd(&p, &c.q, &c.k, &c.v);
        close(&c.name, &got, &fast.attention_out, 0.0, 0.0).unwrap();
        close(&c.name, &got, &rf.attention_out, ATOL, RTOL).unwrap();
    }
}

#[test]
fn a_corrupted_fused_backward_is_caught() {
    let c = cases()
        .into_iter()
        .find(|c| c.name == "gqa_full_sink")
        .unwrap();
    let (_, rb) = reference_run(&c);
    CORRUPT_DSINK.with(|f| f.set(true));
    let (_, _, _, dsink) = autodiff_grads::<NoCheckpointing>(&c);
    CORRUPT_DSINK.with(|f| f.set(false));
    let err = close(
        "dsink",
        &dsink.unwrap(),
        rb.dsink.as_ref().unwrap(),
        ATOL,
        RTOL,
    );
    assert!(err.is_err(), "doubling dsink went unnoticed");
}
