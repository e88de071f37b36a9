//! A long random serving soak on [`PagedKvCache`] (NdArray): random add / append / fork / free /
//! attend, with the invariants checked after every operation against a host-side model —
//! every block accounted for (free + used = total, with `used` counted from the live block
//! tables, so a reference count that is off leaks or double-frees a block), each sequence's
//! cached keys and values equal to the model's, running out of blocks is a typed error that
//! changes nothing, attend equals a plain softmax reference on a sample — and, after freeing
//! every sequence, every block free again.
//!
//! Bounded in `cargo test`; the long run: `BURN_ASCEND_SOAK_OPS=1000000 cargo test --release
//! --test it campaign_soak -- --nocapture` (the seed: `BURN_ASCEND_SOAK_SEED`).

use std::collections::BTreeMap;

use crate::common::Rng;
use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use burn_ascend::{AttnError, PagedKvCache, SeqId};
use burn_ascend_test_support::assert_close;

type B = NdArray;
const N: usize = 2;
const NKV: usize = 1;
const D: usize = 4;
const BS: usize = 16;
const BLOCKS: usize = 12;
const TOK: usize = NKV * D;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The model of one sequence: its keys and values, `TOK` floats per token.
#[derive(Clone, Default)]
struct Model {
    keys: Vec<f32>,
    values: Vec<f32>,
}

impl Model {
    fn len(&self) -> usize {
        self.keys.len() / TOK
    }
}

fn t3(v: Vec<f32>, s: [usize; 3]) -> Tensor<B, 3> {
    Tensor::from_data(TensorData::new(v, s), &Default::default())
}

fn scale() -> f64 {
    1.0 / (D as f64).sqrt()
}

/// Checks every invariant of `cache` against `model`.
fn check(cache: &PagedKvCache<B>, model: &BTreeMap<SeqId, Model>, step: usize) {
    let (kc, vc) = cache.caches();
    let kc: Vec<f32> = kc.clone().into_data().to_vec().unwrap();
    let vc: Vec<f32> = vc.clone().into_data().to_vec().unwrap();
    let mut refs = [0usize; BLOCKS];
    for (&id, m) in model {
        let len = cache.len(id).unwrap();
        assert_eq!(len, m.len(), "step {step}: length of {id:?}");
        let table = cache.block_table(id).unwrap();
        assert_eq!(
            table.len(),
            len.div_ceil(BS),
            "step {step}: blocks of {id:?}"
        );
        for &b in table {
            assert!(b < BLOCKS, "step {step}: block {b} out of range");
            refs[b] += 1;
        }
        for p in 0..len {
            let at = (table[p / BS] * BS + p % BS) * TOK;
            assert_eq!(
                &kc[at..at + TOK],
                &m.keys[p * TOK..(p + 1) * TOK],
                "step {step}: key of {id:?} token {p}"
            );
            assert_eq!(
                &vc[at..at + TOK],
                &m.values[p * TOK..(p + 1) * TOK],
                "step {step}: value of {id:?} token {p}"
            );
        }
    }
    let used = refs.iter().filter(|&&r| r > 0).count();
    assert_eq!(
        cache.free_blocks() + used,
        BLOCKS,
        "step {step}: free {} + used {used} != total (refs {refs:?})",
        cache.free_blocks()
    );
}

/// Plain attention of the last `s` tokens of each sequence (causal, bottom-right aligned) over
/// the model's KV, `[B, S, N, D]`.
fn attend_reference(seqs: &[&Model], q: &[f32], s: usize) -> Vec<f32> {
    let mut out = vec![0f32; q.len()];
    for (bi, m) in seqs.iter().enumerate() {
        for i in 0..s {
            let pos = m.len() - s + i;
            for h in 0..N {
                let kh = h / (N / NKV);
                let qo = ((bi * s + i) * N + h) * D;
                let qv = &q[qo..qo + D];
                let scores: Vec<f64> = (0..=pos)
                    .map(|t| {
                        let k = &m.keys[t * TOK + kh * D..t * TOK + (kh + 1) * D];
                        scale() * qv.iter().zip(k).map(|(a, b)| (a * b) as f64).sum::<f64>()
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
                let z: f64 = w.iter().sum();
                for e in 0..D {
                    let acc: f64 = (0..=pos)
                        .map(|t| w[t] * m.values[t * TOK + kh * D + e] as f64)
                        .sum();
                    out[qo + e] = (acc / z) as f32;
                }
            }
        }
    }
    out
}

#[test]
fn a_random_serving_soak_keeps_every_block_accounted_for_and_every_sequence_intact() {
    let ops = env_or("BURN_ASCEND_SOAK_OPS", 20_000) as usize;
    let seed = env_or("BURN_ASCEND_SOAK_SEED", 17);
    let mut rng = Rng(seed);
    let mut cache =
        PagedKvCache::<B>::new(BLOCKS, BS, N, NKV, D, scale(), &Default::default()).unwrap();
    let mut model: BTreeMap<SeqId, Model> = BTreeMap::new();
    let (mut appended, mut refused, mut attended, mut forked, mut freed) = (0, 0, 0, 0, 0);
    for step in 0..ops {
        let ids: Vec<SeqId> = model.keys().copied().collect();
        let pick = |rng: &mut Rng| ids[rng.below(ids.len())];
        match rng.below(10) {
            0 if model.len() < 8 => {
                let id = cache.add_sequence();
                model.insert(id, Model::default());
            }
            1..=4 if !ids.is_empty() => {
                let id = pick(&mut rng);
                // Mostly short appends; sometimes more than the cache can hold.
                let t = if rng.chance(0.05) {
                    BLOCKS * BS + 1
                } else {
                    1 + rng.below(20)
                };
                let k = rng.vec_f32(t * TOK, 1.0);
                let v = rng.vec_f32(t * TOK, 1.0);
                let free_before = cache.free_blocks();
                match cache.append(id, t3(k.clone(), [t, NKV, D]), t3(v.clone(), [t, NKV, D])) {
                    Ok(()) => {
                        let m = model.get_mut(&id).unwrap();
                        m.keys.extend(k);
                        m.values.extend(v);
                        appended += 1;
                    }
                    Err(AttnError::OutOfBlocks { needed, free }) => {
                        assert_eq!(free, free_before, "step {step}");
                        assert!(needed > free, "step {step}: needed {needed} free {free}");
                        assert_eq!(cache.free_blocks(), free_before, "step {step}");
                        refused += 1;
                    }
                    Err(e) => panic!("step {step}: append failed: {e}"),
                }
            }
            5 if !ids.is_empty() => {
                let id = pick(&mut rng);
                let new = cache.fork(id).unwrap();
                let m = model[&id].clone();
                model.insert(new, m);
                forked += 1;
            }
            6 | 7 if !ids.is_empty() => {
                let id = pick(&mut rng);
                cache.free(id).unwrap();
                model.remove(&id);
                // Freeing again, or touching the freed id, is a typed error.
                assert!(cache.free(id).is_err(), "step {step}: double free accepted");
                assert!(cache.len(id).is_err());
                freed += 1;
            }
            _ if !ids.is_empty() => {
                // Attend on a sample of sequences: decode (S = 1) or a short prefill.
                let ready: Vec<SeqId> = ids
                    .iter()
                    .copied()
                    .filter(|i| model[i].len() >= 4)
                    .collect();
                if ready.is_empty() {
                    continue;
                }
                let count = 1 + rng.below(ready.len().min(3));
                let chosen: Vec<SeqId> =
                    (0..count).map(|_| ready[rng.below(ready.len())]).collect();
                let s = if rng.chance(0.5) { 1 } else { 2 + rng.below(3) };
                let q = rng.vec_f32(count * s * N * D, 1.0);
                let query = Tensor::<B, 4>::from_data(
                    TensorData::new(q.clone(), [count, s, N, D]),
                    &Default::default(),
                );
                let got: Vec<f32> = cache
                    .attend(&chosen, query)
                    .unwrap_or_else(|e| panic!("step {step}: attend failed: {e}"))
                    .into_data()
                    .to_vec()
                    .unwrap();
                let seqs: Vec<&Model> = chosen.iter().map(|i| &model[i]).collect();
                let want = attend_reference(&seqs, &q, s);
                assert_close(
                    &format!("step {step}: attend S={s}"),
                    &got,
                    &want,
                    1e-4,
                    1e-4,
                );
                attended += 1;
            }
            _ => continue,
        }
        check(&cache, &model, step);
    }
    eprintln!(
        "soak: {ops} ops (seed {seed}): {appended} appends, {refused} refused, {forked} forks, \
         {freed} frees, {attended} attends"
    );
    assert!(appended > 0 && forked > 0 && freed > 0 && attended > 0 && refused > 0);
    for id in model.keys().copied().collect::<Vec<_>>() {
        cache.free(id).unwrap();
        model.remove(&id);
    }
    check(&cache, &model, ops);
    assert_eq!(
        cache.free_blocks(),
        BLOCKS,
        "every block is free at the end"
    );
}
