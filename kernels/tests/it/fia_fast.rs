//! The fast CPU FIA (`cpu::fia`: decode on the flash-decoding kernel, prefill on the tiled
//! varlen forward) against the f64 FIA reference, on every path it takes, with the path
//! asserted (a case that silently fell back to the reference would prove nothing about the
//! kernels).
//!
//! Tolerances: `attentionOut` 2e-5 abs + 1e-4 rel (f32 kernels against f64 accumulation, as
//! the decode and varlen kernels' own suites); `softmaxLse` the same, with `+inf` rows (nothing
//! to attend) required at the same places.

use crate::common::{assert_close, Rng};
use crate::fia_reference::fia;
use burn_ascend_contract::fia::{FiaArgs, FiaDequant, FiaDequantIndex, FiaKvSlices};
use burn_ascend_contract::incre::PagedLayout;
use burn_ascend_contract::prompt::{PfaLayout, PfaMask, PfaSparseMode, PseShift};
use burn_ascend_kernels::cpu::fia::{fused_infer_attention, FiaPath};
use burn_ascend_kernels::reference::fia::fused_infer_attention as reference;

const ABS: f64 = 2e-5;
const REL: f64 = 1e-4;

/// Runs both and compares; returns the fast path taken.
fn check(what: &str, a: &FiaArgs<f32>) -> FiaPath {
    let got = fused_infer_attention(a);
    let exp = reference(a);
    let out: Vec<f64> = got.attention_out.iter().map(|&x| x as f64).collect();
    assert_close(
        &format!("{what}: attentionOut"),
        &out,
        &exp.attention_out,
        ABS,
        REL,
    );
    assert_eq!(
        got.softmax_lse.len(),
        exp.softmax_lse.len(),
        "{what}: lse len"
    );
    for (i, (&g, &e)) in got.softmax_lse.iter().zip(&exp.softmax_lse).enumerate() {
        if e.is_infinite() || g.is_infinite() {
            assert_eq!(g, e, "{what}: softmaxLse[{i}] (+inf marks an empty row)");
        } else {
            let tol = ABS + REL * (e as f64).abs();
            assert!(
                ((g - e) as f64).abs() <= tol,
                "{what}: softmaxLse[{i}] = {g}, reference {e}"
            );
        }
    }
    got.path
}

/// Copies BSND/BSH `[B, S, Nkv·D]` rows into a paged cache (`Bsh`: `[blocks, bs, Nkv·D]`;
/// `Bnsd`: `[blocks, Nkv, bs, D]`) through a scrambled block table.
fn paginate(
    x: &[f32],
    (b, s, nkv, d): (usize, usize, usize, usize),
    bs: usize,
    layout: PagedLayout,
) -> (Vec<f32>, Vec<i32>, usize) {
    let max_blocks = s.div_ceil(bs);
    let nb = b * max_blocks + 1;
    // Block ids in reverse order, skipping block 0, so a wrong table read shows.
    let table: Vec<i32> = (0..b * max_blocks).map(|i| (nb - 1 - i) as i32).collect();
    let mut cache = vec![0.0f32; nb * bs * nkv * d];
    for bb in 0..b {
        for t in 0..s {
            let blk = table[bb * max_blocks + t / bs] as usize;
            for n in 0..nkv {
                for di in 0..d {
                    let dst = match layout {
                        PagedLayout::Bsh => ((blk * bs + t % bs) * nkv + n) * d + di,
                        PagedLayout::Bnsd => ((blk * nkv + n) * bs + t % bs) * d + di,
                    };
                    cache[dst] = x[((bb * s + t) * nkv + n) * d + di];
                }
            }
        }
    }
    (cache, table, max_blocks)
}

#[test]
fn fast_fia_prefill_matches_the_reference_in_every_layout_mode_and_with_a_sink() {
    let mut rng = Rng::new(71);
    let (b, qs, ks, n, nkv, d, dv) = (2, 9, 13, 4, 2, 16, 8);
    let q = rng.vec_f32(b * qs * n * d, 1.5);
    let k = rng.vec_f32(b * ks * nkv * d, 1.5);
    let v = rng.vec_f32(b * ks * nkv * dv, 1.5);
    let sink = rng.vec_f32(n, 2.0);
    let dense: Vec<u8> = (0..b * qs * ks)
        .map(|_| u8::from(rng.chance(0.3)))
        .collect();
    let (asl, askv) = ([9i64, 4], [13i64, 6]);
    let modes = [
        (None, PfaSparseMode::DefaultMask, 0, 0),
        (Some(()), PfaSparseMode::DefaultMask, 3, 1),
        (Some(()), PfaSparseMode::AllMask, 0, 0),
        (Some(()), PfaSparseMode::LeftUpCausal, 0, 0),
        (Some(()), PfaSparseMode::RightDownCausal, 0, 0),
        (Some(()), PfaSparseMode::Band, 3, 0),
        (Some(()), PfaSparseMode::Band, 2, 4),
    ];
    for layout in [
        PfaLayout::Bsh,
        PfaLayout::Bsnd,
        PfaLayout::Bnsd,
        PfaLayout::BnsdBsnd,
    ] {
        for &(mask, mode, pre, next) in &modes {
            for with_sink in [false, true] {
                let mut f = fia(
                    &q,
                    FiaKvSlices::Contiguous { key: &k, value: &v },
                    layout,
                    (b, qs, ks),
                    (n, nkv, d, dv),
                );
                f.sparse_mode = mode;
                f.pre_tokens = pre;
                f.next_tokens = next;
                f.atten_mask = mask.map(|_| PfaMask {
                    data: &dense,
                    batched: true,
                    rows: qs,
                    cols: ks,
                });
                f.actual_seq_lengths = Some(&asl);
                f.actual_seq_lengths_kv = Some(&askv);
                f.learnable_sink = with_sink.then_some(&sink[..]);
                let what = format!("{layout:?} {mode:?} pre {pre} next {next} sink {with_sink}");
                assert_eq!(check(&what, &f), FiaPath::Prefill, "{what}");
            }
        }
    }
}

#[test]
fn fast_fia_prefill_matches_the_reference_in_tnd_and_on_a_paged_cache() {
    let mut rng = Rng::new(72);
    let (n, nkv, d) = (4, 1, 32);
    // TND: three sequences (one empty query), cumulative lengths.
    let (tq, tkv) = (11, 17);
    let q = rng.vec_f32(tq * n * d, 1.0);
    let k = rng.vec_f32(tkv * nkv * d, 1.0);
    let v = rng.vec_f32(tkv * nkv * d, 1.0);
    let sink = rng.vec_f32(n, 1.0);
    let (asl, askv) = ([4i64, 4, 11], [6i64, 9, 17]);
    for (mode, pre, next) in [
        (PfaSparseMode::RightDownCausal, 0, 0),
        (PfaSparseMode::Band, 2, 0),
        (PfaSparseMode::LeftUpCausal, 0, 0),
    ] {
        let mask = vec![0u8; 2048 * 2048];
        let mut f = fia(
            &q,
            FiaKvSlices::Contiguous { key: &k, value: &v },
            PfaLayout::Tnd,
            (3, tq, tkv),
            (n, nkv, d, d),
        );
        f.sparse_mode = mode;
        f.pre_tokens = pre;
        f.next_tokens = next;
        f.atten_mask = Some(PfaMask {
            data: &mask,
            batched: false,
            rows: 2048,
            cols: 2048,
        });
        f.actual_seq_lengths = Some(&asl);
        f.actual_seq_lengths_kv = Some(&askv);
        f.learnable_sink = Some(&sink);
        assert_eq!(check(&format!("TND {mode:?}"), &f), FiaPath::Prefill);
    }
    // BSND query over paged caches in both cache layouts, bottom-right causal with a sink:
    // a chunked prefill of the last 5 tokens of sequences of 12 and 7.
    let (b, qs, ks, bs) = (2, 5, 12, 4);
    let q = rng.vec_f32(b * qs * n * d, 1.0);
    let k = rng.vec_f32(b * ks * nkv * d, 1.0);
    let v = rng.vec_f32(b * ks * nkv * d, 1.0);
    let askv = [12i64, 7];
    let mask = vec![0u8; 2048 * 2048];
    for layout in [PagedLayout::Bsh, PagedLayout::Bnsd] {
        let (kc, table, max_blocks) = paginate(&k, (b, ks, nkv, d), bs, layout);
        let (vc, _, _) = paginate(&v, (b, ks, nkv, d), bs, layout);
        let mut f = fia(
            &q,
            FiaKvSlices::Paged {
                key_cache: &kc,
                value_cache: &vc,
                layout,
                block_table: &table,
                max_blocks_per_seq: max_blocks,
                block_size: bs,
            },
            PfaLayout::Bsnd,
            (b, qs, ks),
            (n, nkv, d, d),
        );
        f.sparse_mode = PfaSparseMode::RightDownCausal;
        f.atten_mask = Some(PfaMask {
            data: &mask,
            batched: false,
            rows: 2048,
            cols: 2048,
        });
        f.actual_seq_lengths_kv = Some(&askv);
        f.learnable_sink = Some(&sink);
        assert_eq!(
            check(&format!("paged {layout:?} prefill"), &f),
            FiaPath::Prefill
        );
    }
}

#[test]
fn fast_fia_decode_matches_the_reference_contiguous_and_paged_with_a_sink_and_a_window_mask() {
    let mut rng = Rng::new(73);
    let (b, ks, n, nkv, d, bs) = (3, 700, 8, 2, 64, 16);
    let q = rng.vec_f32(b * n * d, 1.0);
    let k = rng.vec_f32(b * ks * nkv * d, 1.0);
    let v = rng.vec_f32(b * ks * nkv * d, 1.0);
    let sink = rng.vec_f32(n, 3.0);
    // Lengths across the kernel's 512-token chunks; one empty sequence (zero row, +inf LSE).
    let askv = [700i64, 0, 513];
    // A sliding window of 100 tokens ending at each sequence's last one.
    let mut window = vec![0u8; b * ks];
    for (bb, &len) in askv.iter().enumerate() {
        for t in 0..ks {
            window[bb * ks + t] = u8::from((t as i64) + 100 < len - 1);
        }
    }
    for layout in [PfaLayout::Bsh, PfaLayout::Bsnd, PfaLayout::Bnsd] {
        // Contiguous K/V in the query's layout (BNSD: head-major).
        let (kl, vl) = if layout == PfaLayout::Bnsd {
            let t = |x: &[f32]| {
                let mut o = vec![0.0; x.len()];
                for bb in 0..b {
                    for s in 0..ks {
                        for h in 0..nkv {
                            for di in 0..d {
                                o[((bb * nkv + h) * ks + s) * d + di] =
                                    x[((bb * ks + s) * nkv + h) * d + di];
                            }
                        }
                    }
                }
                o
            };
            (t(&k), t(&v))
        } else {
            (k.clone(), v.clone())
        };
        for (with_mask, with_sink) in [(false, true), (true, true), (true, false)] {
            let mut f = fia(
                &q,
                FiaKvSlices::Contiguous {
                    key: &kl,
                    value: &vl,
                },
                layout,
                (b, 1, ks),
                (n, nkv, d, d),
            );
            f.actual_seq_lengths_kv = Some(&askv);
            f.learnable_sink = with_sink.then_some(&sink[..]);
            f.atten_mask = with_mask.then_some(PfaMask {
                data: &window,
                batched: true,
                rows: 1,
                cols: ks,
            });
            let what = format!("decode {layout:?} mask {with_mask} sink {with_sink}");
            assert_eq!(check(&what, &f), FiaPath::Decode, "{what}");
        }
    }
    for layout in [PagedLayout::Bsh, PagedLayout::Bnsd] {
        let (kc, table, max_blocks) = paginate(&k, (b, ks, nkv, d), bs, layout);
        let (vc, _, _) = paginate(&v, (b, ks, nkv, d), bs, layout);
        let cols = max_blocks * bs;
        let mut mask = vec![0u8; b * cols];
        for (bb, &len) in askv.iter().enumerate() {
            for t in 0..cols {
                mask[bb * cols + t] = u8::from((t as i64) + 100 < len - 1);
            }
        }
        let mut f = fia(
            &q,
            FiaKvSlices::Paged {
                key_cache: &kc,
                value_cache: &vc,
                layout,
                block_table: &table,
                max_blocks_per_seq: max_blocks,
                block_size: bs,
            },
            PfaLayout::Bsnd,
            (b, 1, ks),
            (n, nkv, d, d),
        );
        f.actual_seq_lengths_kv = Some(&askv);
        f.learnable_sink = Some(&sink);
        f.atten_mask = Some(PfaMask {
            data: &mask,
            batched: true,
            rows: 1,
            cols,
        });
        let what = format!("paged {layout:?} decode");
        assert_eq!(check(&what, &f), FiaPath::Decode, "{what}");
    }
}

#[test]
fn fast_fia_decode_with_int8_kv_antiquant_keeps_the_key_offset_in_the_lse() {
    let mut rng = Rng::new(74);
    let (b, ks, n, nkv, d) = (2, 40, 4, 2, 16);
    let q = rng.vec_f32(b * n * d, 1.0);
    // int8 values carried as f32, as the Burn path passes them.
    let int8 = |rng: &mut Rng, len| -> Vec<f32> {
        (0..len)
            .map(|_| (rng.below(255) as i32 - 127) as f32)
            .collect()
    };
    let k = int8(&mut rng, b * ks * nkv * d);
    let v = int8(&mut rng, b * ks * nkv * d);
    let ch = nkv * d;
    let (ks_, ko) = (rng.vec_f32(ch, 0.02), rng.vec_f32(ch, 5.0));
    let (vs_, vo) = (rng.vec_f32(ch, 0.02), rng.vec_f32(ch, 5.0));
    let (ts, to) = ([0.015f32], [3.0f32]);
    for per_channel in [true, false] {
        let (index, kscale, koff, vscale, voff) = if per_channel {
            (
                FiaDequantIndex::PerChannel,
                &ks_[..],
                &ko[..],
                &vs_[..],
                &vo[..],
            )
        } else {
            (
                FiaDequantIndex::PerTensor,
                &ts[..],
                &to[..],
                &ts[..],
                &to[..],
            )
        };
        let mut f = fia(
            &q,
            FiaKvSlices::Contiguous { key: &k, value: &v },
            PfaLayout::Bsnd,
            (b, 1, ks),
            (n, nkv, d, d),
        );
        f.key_antiquant = Some(FiaDequant {
            index,
            scale: kscale,
            offset: Some(koff),
        });
        f.value_antiquant = Some(FiaDequant {
            index,
            scale: vscale,
            offset: Some(voff),
        });
        let what = format!("int8 decode per_channel {per_channel}");
        assert_eq!(check(&what, &f), FiaPath::Decode, "{what}");
    }
}

#[test]
fn fields_the_kernels_do_not_model_take_the_reference_and_still_agree() {
    let mut rng = Rng::new(75);
    let (b, ks, n, d) = (2, 6, 2, 8);
    let q = rng.vec_f32(b * n * d, 1.0);
    let k = rng.vec_f32(b * ks * n * d, 1.0);
    let v = rng.vec_f32(b * ks * n * d, 1.0);
    let pse = rng.vec_f32(b * n * ks, 1.0);
    let decode = || {
        fia(
            &q,
            FiaKvSlices::Contiguous { key: &k, value: &v },
            PfaLayout::Bsnd,
            (b, 1, ks),
            (n, n, d, d),
        )
    };
    let mut f = decode();
    f.pse_shift = Some(PseShift {
        data: &pse,
        batched: true,
        rows: 1,
        cols: ks,
    });
    assert_eq!(check("decode with pse", &f), FiaPath::Reference);
    // A decode row whose every column is masked: FIA leaves it empty (zeros, +inf LSE) where
    // the decode kernel (IFA's semantics) would average V uniformly.
    let mut mask = vec![0u8; b * ks];
    mask[..ks].iter_mut().for_each(|m| *m = 1);
    let mut f = decode();
    f.atten_mask = Some(PfaMask {
        data: &mask,
        batched: true,
        rows: 1,
        cols: ks,
    });
    assert_eq!(check("decode fully masked row", &f), FiaPath::Reference);
    let out = fused_infer_attention(&f);
    assert!(out.attention_out[..n * d].iter().all(|&x| x == 0.0));
    assert!(out.softmax_lse[..n].iter().all(|x| x.is_infinite()));
}
