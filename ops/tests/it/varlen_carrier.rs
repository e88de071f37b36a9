//! The public varlen functions that take the whole carrier (`varlen_score_with`,
//! `varlen_score_grad_with`): any combination of the tensor inputs in one call, and `dpse`
//! from the public backward, against the composite (Burn ops) as the independent road.

use crate::common::data;
use burn::backend::NdArray;
use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{Tensor, TensorData, TensorMetadata, TensorPrimitive};
use burn_ascend_ops::varlen::composite;
use burn_ascend_ops::varlen::VarlenSpec;
use burn_ascend_ops::{
    dropout_mask, varlen_score_grad_with, varlen_score_with, PseType, VarlenGradInputs,
    VarlenInputs,
};
use burn_ascend_test_support::assert_close;

type B = NdArray;

/// `len` values in [−amp, amp).
fn values(len: usize, seed: u64, amp: f32) -> Vec<f32> {
    data(len, seed).into_iter().map(|x| x * amp / 1.5).collect()
}

fn prim(v: Vec<f32>, shape: &[usize]) -> FloatTensor<B> {
    B::float_from_data(TensorData::new(v, shape.to_vec()), &Default::default())
}

fn host(t: FloatTensor<B>) -> Vec<f32> {
    let len = t.shape().num_elements();
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(B::float_reshape(t, [len].into())))
        .into_data()
        .to_vec::<f32>()
        .expect("f32")
}

/// A flat pse (pseType 0) and a seeded dropout mask (keepProb 0.8) with a sink, in one call:
/// the forward's output and every gradient (dq, dk, dv, dpse, dsink) of the public functions
/// on NdArray (the CPU kernels) equal the composite's within 1e-5 + 1e-4·|x|.
#[test]
fn one_call_carries_pse_dropout_and_sink_and_its_grad_gives_dpse_like_the_composite() {
    let (sq, skv, n, nkv, d) = ([2usize, 3], [3usize, 4], 4usize, 2usize, 8usize);
    let (tq, tkv) = (5usize, 7usize);
    let mut spec = VarlenSpec::from_lengths(&sq, &skv, n, 0.35);
    spec.attrs.pse_type = PseType::OuterMulAdd;
    spec.attrs.keep_prob = 0.8;
    let total: usize = sq.iter().zip(&skv).map(|(a, b)| n * a * b).sum();
    let drop = dropout_mask::<B>(&spec, 7, &Default::default()).expect("dropout mask");
    let inputs = VarlenInputs {
        sink: Some(prim(values(n, 5, 0.5), &[n])),
        pse: Some(prim(values(total, 6, 1.0), &[total])),
        drop_mask: Some(drop.into_primitive().tensor()),
        ..VarlenInputs::new(
            prim(values(tq * n * d, 1, 1.0), &[tq, n, d]),
            prim(values(tkv * nkv * d, 2, 1.0), &[tkv, nkv, d]),
            prim(values(tkv * nkv * d, 3, 1.0), &[tkv, nkv, d]),
        )
    };
    let dy = prim(values(tq * n * d, 4, 1.0), &[tq, n, d]);
    let without_drop = inputs.clone();

    let fwd = varlen_score_with::<B>(inputs.clone(), &spec).expect("forward");
    let grads = varlen_score_grad_with::<B>(
        inputs.clone(),
        &fwd,
        Tensor::from_primitive(TensorPrimitive::Float(dy.clone())),
        &spec,
    )
    .expect("backward");

    let want = composite::varlen_fwd::<B>(inputs.clone(), &spec).expect("composite forward");
    let out = fwd.attention_out.into_data().to_vec::<f32>().expect("f32");
    assert_close(
        "attentionOut",
        &out,
        &host(want.attention_out.clone()),
        1e-5,
        1e-4,
    );
    let want_g = composite::varlen_bwd::<B>(
        VarlenGradInputs {
            inputs,
            dy,
            attention_in: want.attention_out,
            softmax_max: want.softmax_max,
            softmax_sum: want.softmax_sum,
        },
        &spec,
    )
    .expect("composite backward");
    let vec1 = |t: Tensor<B, 1>| t.into_data().to_vec::<f32>().expect("f32");
    let vec3 = |t: Tensor<B, 3>| t.into_data().to_vec::<f32>().expect("f32");
    assert_close("dq", &vec3(grads.dq), &host(want_g.dq), 1e-5, 1e-4);
    assert_close("dk", &vec3(grads.dk), &host(want_g.dk), 1e-5, 1e-4);
    assert_close("dv", &vec3(grads.dv), &host(want_g.dv), 1e-5, 1e-4);
    let dpse = vec1(grads.dpse.expect("dpse for a flat pse"));
    assert!(dpse.iter().any(|x| x.abs() > 1e-3), "dpse is not trivial");
    assert_close(
        "dpse",
        &dpse,
        &host(want_g.dpse.expect("composite dpse")),
        1e-5,
        1e-4,
    );
    assert_close(
        "dsink",
        &vec1(grads.dsink.expect("dsink")),
        &host(want_g.dsink.expect("composite dsink")),
        1e-5,
        1e-4,
    );
    // Dropout took effect: the same call without the mask differs.
    let mut no_drop = spec.clone();
    no_drop.attrs.keep_prob = 1.0;
    let plain = varlen_score_with::<B>(
        VarlenInputs {
            drop_mask: None,
            ..without_drop
        },
        &no_drop,
    )
    .expect("forward without dropout");
    let plain = plain
        .attention_out
        .into_data()
        .to_vec::<f32>()
        .expect("f32");
    assert!(
        plain.iter().zip(&out).any(|(a, b)| (a - b).abs() > 1e-3),
        "the dropout mask changed nothing"
    );
}

/// A dropout mask is byte values (0..=255, whole numbers): on the CPU kernels' path (NdArray,
/// where the values are on the host) anything else is a typed error naming `dropMask`, not a
/// silent truncation.
#[test]
fn a_dropout_mask_that_is_not_byte_values_is_a_typed_error_naming_drop_mask_on_ndarray() {
    let (n, d) = (2usize, 4usize);
    let mut spec = VarlenSpec::from_lengths(&[2], &[3], n, 0.5);
    spec.attrs.keep_prob = 0.5;
    let good = dropout_mask::<B>(&spec, 3, &Default::default())
        .expect("dropout mask")
        .into_data()
        .to_vec::<f32>()
        .expect("f32");
    let call = |mask: Vec<f32>| {
        let len = mask.len();
        let inputs = VarlenInputs {
            drop_mask: Some(prim(mask, &[len])),
            ..VarlenInputs::new(
                prim(values(2 * n * d, 1, 1.0), &[2, n, d]),
                prim(values(3 * n * d, 2, 1.0), &[3, n, d]),
                prim(values(3 * n * d, 3, 1.0), &[3, n, d]),
            )
        };
        varlen_score_with::<B>(inputs, &spec).map(|_| ())
    };
    call(good.clone()).expect("the seeded mask is accepted");
    for (what, bad) in [("256", 256.0f32), ("a fraction", 0.5), ("negative", -1.0)] {
        let mut mask = good.clone();
        mask[0] = bad;
        let e = call(mask).expect_err(what);
        assert_eq!(e.param(), Some("dropMask"), "{what}: {e}");
        assert!(e.to_string().contains("byte values"), "{what}: {e}");
    }
}

/// The seeded dropout mask reads the cumulative lengths as the op's validation does: CANN's
/// trailing-zero form (`[2, 5, 0]`: a third, empty sequence) gives the mask of `[2, 5]`, and a
/// decreasing array is the validation's typed error naming `actualSeqQLen`.
#[test]
fn the_dropout_mask_reads_cumulative_lengths_like_the_op_trailing_zeros_included() {
    let dev = Default::default();
    let mut spec = VarlenSpec::new(vec![2, 5], vec![3, 7], 2, 0.5);
    spec.attrs.keep_prob = 0.7;
    let plain = dropout_mask::<B>(&spec, 11, &dev).expect("mask");
    let mut padded = spec.clone();
    padded.actual_seq_q_len = vec![2, 5, 0];
    padded.actual_seq_kv_len = vec![3, 7, 0];
    let with_zeros = dropout_mask::<B>(&padded, 11, &dev).expect("trailing zeros accepted");
    assert_eq!(
        with_zeros.into_data().to_vec::<f32>().unwrap(),
        plain.into_data().to_vec::<f32>().unwrap()
    );
    let mut bad = spec;
    bad.actual_seq_q_len = vec![5, 2];
    let e = dropout_mask::<B>(&bad, 11, &dev).expect_err("decreasing");
    assert_eq!(e.param(), Some("actualSeqQLen"), "{e}");
}

/// `check_alibi_compressed_values` (public: the layers holding the values call it) refuses
/// what is not a compressed pse before reading it: a shape that is not 4-D, or values that
/// are not the shape's product, each a typed error naming `realShift`.
#[test]
fn the_compressed_pse_value_check_refuses_a_wrong_rank_or_count_naming_real_shift() {
    use burn_ascend_ops::varlen::check_alibi_compressed_values;
    let e = check_alibi_compressed_values(&[0.0; 8], &[2, 4]).expect_err("2-D");
    assert_eq!(e.param(), Some("realShift"), "{e}");
    assert!(e.to_string().contains("4-D"), "{e}");
    let e = check_alibi_compressed_values(&[0.0; 7], &[1, 1, 2, 4]).expect_err("7 of 8 values");
    assert_eq!(e.param(), Some("realShift"), "{e}");
    assert!(e.to_string().contains("product"), "{e}");
    // A constant pse of the right shape passes.
    check_alibi_compressed_values(&[0.5; 8], &[1, 1, 2, 4]).expect("constant");
}
