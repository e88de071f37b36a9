//! The paged KV cache manager: append + attend equals prompt / incremental attention on
//! contiguous KV; fork shares blocks (copy-on-write); free returns them; running out of blocks
//! is a typed error that changes nothing.

use crate::common::{close, Rng};
use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use burn_ascend::ops::incre::{IfaLayout, IncreSpec};
use burn_ascend::ops::prompt::{PfaLayout, PromptMaskKind, PromptSpec};
use burn_ascend::IncreKvFromTensors;
use burn_ascend::{
    incre_flash_attention, prompt_flash_attention, AttnError, IncreKv, PagedKvCache,
};

type B = NdArray;
const N: usize = 4;
const NKV: usize = 2;
const D: usize = 8;
const BS: usize = 16;

fn t3(v: Vec<f32>, s: [usize; 3]) -> Tensor<B, 3> {
    Tensor::from_data(TensorData::new(v, s), &Default::default())
}
fn t4(v: Vec<f32>, s: [usize; 4]) -> Tensor<B, 4> {
    Tensor::from_data(TensorData::new(v, s), &Default::default())
}
fn vals<const K: usize>(t: Tensor<B, K>) -> Vec<f32> {
    t.into_data().to_vec().unwrap()
}
fn scale() -> f64 {
    1.0 / (D as f64).sqrt()
}

#[test]
fn prefill_and_decode_match_contiguous_attention() {
    let mut rng = Rng(1);
    let mut cache = PagedKvCache::<B>::new(8, BS, N, NKV, D, scale(), &Default::default()).unwrap();
    let (a, b) = (cache.add_sequence(), cache.add_sequence());
    // Sequence a: 20 tokens, b: 35 tokens (three blocks).
    let (la, lb) = (20, 35);
    let ka = rng.vec_f32(la * NKV * D, 1.0);
    let va = rng.vec_f32(la * NKV * D, 1.0);
    let kb = rng.vec_f32(lb * NKV * D, 1.0);
    let vb = rng.vec_f32(lb * NKV * D, 1.0);
    cache
        .append(
            a,
            t3(ka.clone(), [la, NKV, D]),
            t3(va.clone(), [la, NKV, D]),
        )
        .unwrap();
    cache
        .append(
            b,
            t3(kb.clone(), [lb, NKV, D]),
            t3(vb.clone(), [lb, NKV, D]),
        )
        .unwrap();
    assert_eq!(cache.free_blocks(), 8 - 2 - 3);

    // Decode: one query token each, against contiguous BSND KV padded to 35.
    let q = rng.vec_f32(2 * N * D, 1.0);
    let got = vals(cache.attend(&[a, b], t4(q.clone(), [2, 1, N, D])).unwrap());
    let pad = |k: &[f32], l: usize| {
        let mut x = k.to_vec();
        x.resize(lb * NKV * D, 0.0);
        let _ = l;
        x
    };
    let kc: Vec<f32> = [pad(&ka, la), kb.clone()].concat();
    let vc: Vec<f32> = [pad(&va, la), vb.clone()].concat();
    let mut spec = IncreSpec::new(N, scale(), IfaLayout::Bsnd);
    spec.num_key_value_heads = NKV;
    spec.actual_seq_lengths = Some(vec![la as i64, lb as i64]);
    let want = vals(
        incre_flash_attention(
            t4(q, [2, 1, N, D]),
            IncreKv::contiguous(
                t4(kc.clone(), [2, lb, NKV, D]),
                t4(vc.clone(), [2, lb, NKV, D]),
            ),
            &spec,
        )
        .unwrap(),
    );
    close("decode", &got, &want, 1e-6, 1e-5).unwrap();

    // Prefill-style attend of the last 3 tokens of each sequence: causal, bottom-right.
    let q = rng.vec_f32(2 * 3 * N * D, 1.0);
    let got = vals(cache.attend(&[a, b], t4(q.clone(), [2, 3, N, D])).unwrap());
    let mut spec = PromptSpec::new(N, scale(), PfaLayout::Bsnd);
    spec.num_key_value_heads = NKV;
    spec.actual_seq_lengths_kv = Some(vec![la as i64, lb as i64]);
    spec.sparse_mode = 3;
    spec.atten_mask = PromptMaskKind::Compressed;
    let want = vals(
        prompt_flash_attention(
            t4(q, [2, 3, N, D]),
            t4(kc, [2, lb, NKV, D]),
            t4(vc, [2, lb, NKV, D]),
            &spec,
        )
        .unwrap(),
    );
    close("prefill", &got, &want, 1e-6, 1e-5).unwrap();
}

#[test]
fn fork_shares_blocks_and_copies_on_write_free_returns_them() {
    let mut rng = Rng(2);
    let mut cache = PagedKvCache::<B>::new(6, BS, N, NKV, D, scale(), &Default::default()).unwrap();
    let a = cache.add_sequence();
    let l = 20; // one full block + 4 tokens
    cache
        .append(
            a,
            t3(rng.vec_f32(l * NKV * D, 1.0), [l, NKV, D]),
            t3(rng.vec_f32(l * NKV * D, 1.0), [l, NKV, D]),
        )
        .unwrap();
    assert_eq!(cache.free_blocks(), 4);
    let f = cache.fork(a).unwrap();
    assert_eq!(cache.free_blocks(), 4, "fork copies nothing");
    assert_eq!(cache.block_table(f).unwrap(), cache.block_table(a).unwrap());

    // Both see the same history: decode with the same query gives the same result.
    let q = rng.vec_f32(N * D, 1.0);
    let qa = vals(cache.attend(&[a], t4(q.clone(), [1, 1, N, D])).unwrap());
    let qf = vals(cache.attend(&[f], t4(q.clone(), [1, 1, N, D])).unwrap());
    assert_eq!(qa, qf);

    // Appending to the fork copies the shared partly filled block only.
    let kx = rng.vec_f32(NKV * D, 1.0);
    cache
        .append(f, t3(kx.clone(), [1, NKV, D]), t3(kx.clone(), [1, NKV, D]))
        .unwrap();
    assert_eq!(cache.free_blocks(), 3);
    let (ta, tf) = (
        cache.block_table(a).unwrap().to_vec(),
        cache.block_table(f).unwrap().to_vec(),
    );
    assert_eq!(ta[0], tf[0], "the full block stays shared");
    assert_ne!(ta[1], tf[1], "the partly filled block was copied");
    assert_eq!(cache.len(a).unwrap(), 20);
    assert_eq!(cache.len(f).unwrap(), 21);
    // a is unchanged by the fork's append.
    assert_eq!(vals(cache.attend(&[a], t4(q, [1, 1, N, D])).unwrap()), qa);

    cache.free(f).unwrap();
    assert_eq!(
        cache.free_blocks(),
        4,
        "only the fork's private block returns"
    );
    cache.free(a).unwrap();
    assert_eq!(cache.free_blocks(), 6);
    assert_eq!(cache.free(a).unwrap_err().param(), Some("seq"));
}

#[test]
fn running_out_of_blocks_is_a_typed_error_that_changes_nothing() {
    let mut rng = Rng(3);
    let mut cache = PagedKvCache::<B>::new(2, BS, N, NKV, D, scale(), &Default::default()).unwrap();
    let a = cache.add_sequence();
    cache
        .append(
            a,
            t3(rng.vec_f32(20 * NKV * D, 1.0), [20, NKV, D]),
            t3(rng.vec_f32(20 * NKV * D, 1.0), [20, NKV, D]),
        )
        .unwrap();
    let before = vals(cache.caches().0.clone());
    let err = cache
        .append(
            a,
            t3(rng.vec_f32(13 * NKV * D, 1.0), [13, NKV, D]),
            t3(rng.vec_f32(13 * NKV * D, 1.0), [13, NKV, D]),
        )
        .unwrap_err();
    assert_eq!(err, AttnError::OutOfBlocks { needed: 1, free: 0 });
    assert_eq!(cache.len(a).unwrap(), 20);
    assert_eq!(vals(cache.caches().0.clone()), before);
    assert_eq!(
        PagedKvCache::<B>::new(2, 24, N, NKV, D, 1.0, &Default::default())
            .unwrap_err()
            .param(),
        Some("blockSize")
    );
}

/// A key of another dtype is refused before anything changes: no block is taken, a shared
/// block's count is not touched (so a later append still copies it on write), the caches stay.
#[test]
fn a_wrong_dtype_append_is_refused_before_any_block_changes() {
    let mut rng = Rng(4);
    let mut cache = PagedKvCache::<B>::new(4, BS, N, NKV, D, scale(), &Default::default()).unwrap();
    let a = cache.add_sequence();
    let ka = rng.vec_f32(5 * NKV * D, 1.0);
    cache
        .append(
            a,
            t3(ka.clone(), [5, NKV, D]),
            t3(rng.vec_f32(5 * NKV * D, 1.0), [5, NKV, D]),
        )
        .unwrap();
    let b = cache.fork(a).unwrap();
    let free = cache.free_blocks();
    let f64s = |n: usize| -> Tensor<B, 3> {
        t3(vec![1.0; n * NKV * D], [n, NKV, D]).cast(burn::tensor::FloatDType::F64)
    };
    let err = cache.append(b, f64s(1), f64s(1)).unwrap_err();
    assert_eq!(err.param(), Some("key"), "{err}");
    assert_eq!(cache.free_blocks(), free);
    assert_eq!(cache.len(b).unwrap(), 5);
    assert_eq!(cache.caches().0.dims(), [4, BS, NKV, D]);
    // the shared partial block is still copied on write: a's token 5 is not b's
    cache
        .append(
            b,
            t3(vec![9.0; NKV * D], [1, NKV, D]),
            t3(vec![9.0; NKV * D], [1, NKV, D]),
        )
        .unwrap();
    assert_eq!(cache.free_blocks(), free - 1);
    let a_block = cache.block_table(a).unwrap()[0];
    let k = vals(cache.caches().0.clone());
    let row = (a_block * BS + 5) * NKV * D;
    assert!(
        k[row..row + NKV * D].iter().all(|&x| x == 0.0),
        "b's append wrote into a's block"
    );
    assert_eq!(
        &k[a_block * BS * NKV * D..(a_block * BS + 5) * NKV * D],
        &ka[..]
    );
}
