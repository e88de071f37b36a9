//! The FIA (`aclnnFusedInferAttentionScoreV4`) reference against the other references on the
//! inputs they share: without a sink it equals PFA for query S > 1 and IFA for query S = 1; its
//! sink equals the varlen op's sink on an equivalent TND problem; `softmaxLse` equals a direct
//! logsumexp over [scores, sink] (and the varlen op's `max + ln(sum)`).
//!
//! Tolerances: f64 outputs `1e-12 + 1e-12·|exp|` (same math, different summation order);
//! `softmaxLse` is f32: 2 ulps relative.

use crate::common::{assert_close, Case, Rng};
use burn_ascend_contract::fia::{FiaArgs, FiaDequant, FiaDequantIndex, FiaKvSlices};
use burn_ascend_contract::incre::{
    Antiquant, IfaLayout, IfaMask, IfaPse, IncreFlashAttentionArgs, KvInput, PagedLayout,
};
use burn_ascend_contract::prompt::{
    PfaLayout, PfaMask, PfaSparseMode, PromptFlashAttentionArgs, PseShift,
};
use burn_ascend_contract::varlen::SparseMode;
use burn_ascend_kernels::reference::fia::fused_infer_attention;
use burn_ascend_kernels::reference::incre::incre_flash_attention;
use burn_ascend_kernels::reference::prompt::prompt_flash_attention;
use burn_ascend_kernels::reference::varlen::varlen_fwd;

const TOL: f64 = 1e-12;

/// An FIA call with no optional input and CANN's defaults (also the fast path's tests').
#[allow(clippy::too_many_arguments)]
pub(crate) fn fia<'a, T>(
    q: &'a [T],
    kv: FiaKvSlices<'a, T>,
    layout: PfaLayout,
    (batch, qs, ks): (usize, usize, usize),
    (n, nkv, d, dv): (usize, usize, usize, usize),
) -> FiaArgs<'a, T> {
    FiaArgs {
        query: q,
        kv,
        input_layout: layout,
        batch,
        q_seq: qs,
        kv_seq: ks,
        num_heads: n,
        num_key_value_heads: nkv,
        head_dim: d,
        head_dim_v: dv,
        scale: 1.0 / (d as f64).sqrt(),
        pre_tokens: 2_147_483_647,
        next_tokens: 2_147_483_647,
        sparse_mode: PfaSparseMode::DefaultMask,
        atten_mask: None,
        pse_shift: None,
        actual_seq_lengths: None,
        actual_seq_lengths_kv: None,
        query_padding_size: None,
        kv_padding_size: None,
        key_antiquant: None,
        value_antiquant: None,
        learnable_sink: None,
    }
}

fn mask_bits(rng: &mut Rng, len: usize, p: f64) -> Vec<u8> {
    (0..len).map(|_| u8::from(rng.chance(p))).collect()
}

#[test]
fn fia_without_a_sink_equals_pfa_for_prefill_in_every_layout_and_mode() {
    let mut rng = Rng::new(11);
    let (b, qs, ks, n, nkv, d) = (2, 5, 7, 4, 2, 8);
    let q = rng.vec(b * qs * n * d, 1.5);
    let k = rng.vec(b * ks * nkv * d, 1.5);
    let v = rng.vec(b * ks * nkv * d, 1.5);
    let dense = mask_bits(&mut rng, b * qs * ks, 0.3);
    let pse: Vec<f32> = rng.vec_f32(b * n * qs * ks, 1.0);
    let pse64: Vec<f64> = pse.iter().map(|&x| x as f64).collect();
    let asl = [5i64, 3];
    let askv = [7i64, 4];
    let layouts = [
        PfaLayout::Bsh,
        PfaLayout::Bsnd,
        PfaLayout::Bnsd,
        PfaLayout::BnsdBsnd,
    ];
    let modes = [
        (PfaSparseMode::DefaultMask, 2, 1),
        (PfaSparseMode::DefaultMask, 1, -1),
        (PfaSparseMode::AllMask, 0, 0),
        (PfaSparseMode::LeftUpCausal, 0, 0),
        (PfaSparseMode::RightDownCausal, 0, 0),
        (PfaSparseMode::Band, 2, 0),
        (PfaSparseMode::Band, 1, 3),
    ];
    for layout in layouts {
        for &(mode, pre, next) in &modes {
            for with_pse in [false, true] {
                let mut f = fia(
                    &q,
                    FiaKvSlices::Contiguous { key: &k, value: &v },
                    layout,
                    (b, qs, ks),
                    (n, nkv, d, d),
                );
                let mask = PfaMask {
                    data: &dense,
                    batched: true,
                    rows: qs,
                    cols: ks,
                };
                f.sparse_mode = mode;
                f.pre_tokens = pre;
                f.next_tokens = next;
                f.atten_mask = Some(mask);
                f.actual_seq_lengths = Some(&asl);
                f.actual_seq_lengths_kv = Some(&askv);
                let shift = PseShift {
                    data: &pse[..],
                    batched: true,
                    rows: qs,
                    cols: ks,
                };
                if with_pse {
                    f.pse_shift = Some(shift);
                }
                let mut p = PromptFlashAttentionArgs::new(
                    &q[..],
                    &k[..],
                    &v[..],
                    layout,
                    b,
                    qs,
                    ks,
                    n,
                    d,
                    f.scale,
                );
                p.num_key_value_heads = nkv;
                p.sparse_mode = mode;
                p.pre_tokens = pre;
                p.next_tokens = next;
                p.atten_mask = Some(mask);
                p.actual_seq_lengths = Some(&asl);
                p.actual_seq_lengths_kv = Some(&askv);
                if with_pse {
                    p.pse_shift = Some(PseShift {
                        data: &pse64[..],
                        batched: true,
                        rows: qs,
                        cols: ks,
                    });
                }
                let got = fused_infer_attention(&f).attention_out;
                let exp = prompt_flash_attention(&p);
                assert_close(
                    &format!("{layout:?} {mode:?} pre {pre} next {next} pse {with_pse}"),
                    &got,
                    &exp,
                    TOL,
                    TOL,
                );
            }
        }
    }
}

#[test]
fn fia_without_a_sink_equals_ifa_for_decode_with_contiguous_and_paged_kv() {
    let mut rng = Rng::new(12);
    let (b, ks, n, nkv, d, bs) = (3, 32, 4, 1, 16, 16);
    let q = rng.vec(b * n * d, 1.5);
    // int8 values held as f64, dequantised per channel.
    let k: Vec<f64> = (0..b * ks * nkv * d)
        .map(|_| rng.below(255) as f64 - 127.0)
        .collect();
    let v: Vec<f64> = (0..b * ks * nkv * d)
        .map(|_| rng.below(255) as f64 - 127.0)
        .collect();
    let scale: Vec<f32> = rng.vec_f32(2 * nkv * d, 0.02);
    let offset: Vec<f32> = rng.vec_f32(2 * nkv * d, 3.0);
    let mask = mask_bits(&mut rng, b * ks, 0.25);
    let pse: Vec<f32> = rng.vec_f32(b * n * ks, 1.0);
    let pse64: Vec<f64> = pse.iter().map(|&x| x as f64).collect();
    let lens = [32i64, 17, 1];
    // Paged copy: batch b's blocks in reverse order, cache (blocknum, blockSize, H).
    let max_blocks = ks / bs;
    let nb = b * max_blocks;
    let table: Vec<i32> = (0..nb as i32).rev().collect();
    let mut kc = vec![0.0; nb * bs * nkv * d];
    let mut vc = kc.clone();
    for bb in 0..b {
        for t in 0..ks {
            let blk = table[bb * max_blocks + t / bs] as usize;
            let dst = (blk * bs + t % bs) * nkv * d;
            let src = (bb * ks + t) * nkv * d;
            kc[dst..dst + nkv * d].copy_from_slice(&k[src..src + nkv * d]);
            vc[dst..dst + nkv * d].copy_from_slice(&v[src..src + nkv * d]);
        }
    }
    for paged in [false, true] {
        let fkv = if paged {
            FiaKvSlices::Paged {
                key_cache: &kc,
                value_cache: &vc,
                layout: PagedLayout::Bsh,
                block_table: &table,
                max_blocks_per_seq: max_blocks,
                block_size: bs,
            }
        } else {
            FiaKvSlices::Contiguous { key: &k, value: &v }
        };
        let mut f = fia(&q, fkv, PfaLayout::Bsnd, (b, 1, ks), (n, nkv, d, d));
        f.atten_mask = Some(PfaMask {
            data: &mask,
            batched: true,
            rows: 1,
            cols: ks,
        });
        f.pse_shift = Some(PseShift {
            data: &pse,
            batched: true,
            rows: 1,
            cols: ks,
        });
        f.actual_seq_lengths_kv = Some(&lens);
        let c = nkv * d;
        f.key_antiquant = Some(FiaDequant {
            index: FiaDequantIndex::PerChannel,
            scale: &scale[..c],
            offset: Some(&offset[..c]),
        });
        f.value_antiquant = Some(FiaDequant {
            index: FiaDequantIndex::PerChannel,
            scale: &scale[c..],
            offset: Some(&offset[c..]),
        });
        let ikv = if paged {
            KvInput::Paged {
                key_cache: &kc[..],
                value_cache: &vc[..],
                layout: PagedLayout::Bsh,
                block_table: &table,
                max_blocks_per_seq: max_blocks,
                block_size: bs,
            }
        } else {
            KvInput::Contiguous {
                key: &k[..],
                value: &v[..],
                kv_seq: ks,
            }
        };
        let mut a = IncreFlashAttentionArgs::new(&q[..], ikv, IfaLayout::Bsnd, b, n, d, f.scale);
        a.num_key_value_heads = nkv;
        a.atten_mask = Some(IfaMask {
            data: &mask,
            cols: ks,
        });
        a.pse_shift = Some(IfaPse {
            data: &pse64[..],
            batched: true,
            cols: ks,
        });
        a.actual_seq_lengths = Some(&lens);
        a.antiquant = Some(Antiquant {
            scale: &scale,
            offset: Some(&offset),
            per_channel: true,
        });
        let got = fused_infer_attention(&f).attention_out;
        let exp = incre_flash_attention(&a);
        assert_close(&format!("paged {paged}"), &got, &exp, 1e-10, 1e-10);
    }
}

#[test]
fn the_sink_and_lse_equal_the_varlen_ops_on_an_equivalent_tnd_problem() {
    let mut rng = Rng::new(13);
    for (mode, compressed) in [
        (SparseMode::DefaultMask, false),
        (SparseMode::RightDownCausal, true),
    ] {
        let seq_q = [3usize, 1, 4];
        let seq_kv = [5usize, 6, 4];
        let mut c = Case::new(&mut rng, 4, 2, 64, 64, &seq_q, &seq_kv).with_sink(&mut rng);
        c = c.mode(mode);
        if compressed {
            c = c.compressed();
        }
        let p = c.problem();
        let exp = varlen_fwd(&p, &c.q, &c.k, &c.v);
        let cum = |l: &[usize]| -> Vec<i64> {
            l.iter()
                .scan(0i64, |s, &x| {
                    *s += x as i64;
                    Some(*s)
                })
                .collect()
        };
        let (cq, ckv) = (cum(&seq_q), cum(&seq_kv));
        let (tq, tkv) = (c.dims.t_q(), c.dims.t_kv());
        let mut f = fia(
            &c.q,
            FiaKvSlices::Contiguous {
                key: &c.k,
                value: &c.v,
            },
            PfaLayout::Tnd,
            (3, tq, tkv),
            (4, 2, 64, 64),
        );
        f.scale = c.attrs.scale;
        f.actual_seq_lengths = Some(&cq);
        f.actual_seq_lengths_kv = Some(&ckv);
        f.learnable_sink = c.sink.as_deref();
        if compressed {
            f.sparse_mode = PfaSparseMode::RightDownCausal;
            f.atten_mask = Some(PfaMask {
                data: &[],
                batched: false,
                rows: 0,
                cols: 0,
            });
        }
        let got = fused_infer_attention(&f);
        assert_close(
            &format!("{mode:?} out"),
            &got.attention_out,
            &exp.attention_out,
            TOL,
            TOL,
        );
        // lse = max + ln(sum) from the varlen statistics.
        let mut want = Vec::new();
        let offs = cum(&seq_q);
        for t in 0..tq {
            let b = offs.iter().position(|&e| (t as i64) < e).unwrap();
            let q0 = if b == 0 { 0 } else { offs[b - 1] as usize };
            for h in 0..4 {
                let at = p
                    .attrs
                    .softmax_layout
                    .stat_index(q0, seq_q[b], 4, h, t - q0);
                want.push((exp.softmax_max[at] as f64 + (exp.softmax_sum[at] as f64).ln()) as f32);
            }
        }
        assert_close(&format!("{mode:?} lse"), &got.softmax_lse, &want, 0.0, 1e-6);
    }
}

#[test]
fn softmax_lse_is_the_logsumexp_over_scores_and_the_sink() {
    let mut rng = Rng::new(14);
    let (b, qs, ks, n, d) = (2, 3, 5, 2, 64);
    let q = rng.vec(b * n * qs * d, 1.0);
    let k = rng.vec(b * n * ks * d, 1.0);
    let v = rng.vec(b * n * ks * d, 1.0);
    let sink = [0.75f32, -1.5];
    let mut f = fia(
        &q,
        FiaKvSlices::Contiguous { key: &k, value: &v },
        PfaLayout::Bnsd,
        (b, qs, ks),
        (n, n, d, d),
    );
    f.learnable_sink = Some(&sink);
    let got = fused_infer_attention(&f);
    for bb in 0..b {
        for h in 0..n {
            for i in 0..qs {
                let qi = &q[((bb * n + h) * qs + i) * d..][..d];
                let mut logits: Vec<f64> = (0..ks)
                    .map(|j| {
                        let kj = &k[((bb * n + h) * ks + j) * d..][..d];
                        f.scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>()
                    })
                    .collect();
                let weights: Vec<f64> = logits.iter().map(|s| s.exp()).collect();
                logits.push(sink[h] as f64);
                let denom: f64 = logits.iter().map(|s| s.exp()).sum();
                let lse = denom.ln();
                let at = (bb * n + h) * qs + i;
                assert_close("lse", &[got.softmax_lse[at]], &[lse as f32], 0.0, 2.5e-7);
                for dd in 0..d {
                    let o: f64 = (0..ks)
                        .map(|j| weights[j] * v[((bb * n + h) * ks + j) * d + dd])
                        .sum::<f64>()
                        / denom;
                    let g = got.attention_out[((bb * n + h) * qs + i) * d + dd];
                    assert_close("out", &[g], &[o], 1e-12, 1e-12);
                }
            }
        }
    }
}

#[test]
fn rows_with_nothing_to_attend_give_zero_output_and_infinite_lse() {
    let mut rng = Rng::new(15);
    let (b, qs, ks, n, d) = (2, 3, 4, 1, 64);
    let q = rng.vec(b * qs * n * d, 1.0);
    let k = rng.vec(b * ks * n * d, 1.0);
    let v = rng.vec(b * ks * n * d, 1.0);
    // Batch 0 row 1 fully masked; batch 1 has an empty KV.
    let mut mask = vec![0u8; b * qs * ks];
    mask[ks..2 * ks].fill(1);
    let sink = [0.5f32];
    let lens_kv = [4i64, 0];
    let mut f = fia(
        &q,
        FiaKvSlices::Contiguous { key: &k, value: &v },
        PfaLayout::Bsnd,
        (b, qs, ks),
        (n, n, d, d),
    );
    f.sparse_mode = PfaSparseMode::AllMask;
    f.atten_mask = Some(PfaMask {
        data: &mask,
        batched: true,
        rows: qs,
        cols: ks,
    });
    f.actual_seq_lengths_kv = Some(&lens_kv);
    f.learnable_sink = Some(&sink);
    let got = fused_infer_attention(&f);
    for (bb, i, invalid) in [(0, 0, false), (0, 1, true), (0, 2, false), (1, 0, true)] {
        let row = &got.attention_out[((bb * qs + i) * n) * d..][..d];
        let lse = got.softmax_lse[bb * qs + i];
        if invalid {
            assert!(row.iter().all(|&x| x == 0.0), "b {bb} row {i}: {row:?}");
            assert_eq!(lse, f32::INFINITY, "b {bb} row {i}");
        } else {
            assert!(row.iter().any(|&x| x != 0.0) && lse.is_finite());
        }
    }
}

#[test]
fn decode_ignores_causal_modes_and_the_pre_next_window() {
    let mut rng = Rng::new(16);
    let (b, ks, n, d) = (2, 6, 2, 16);
    let q = rng.vec(b * n * d, 1.0);
    let k = rng.vec(b * ks * n * d, 1.0);
    let v = rng.vec(b * ks * n * d, 1.0);
    let plain = fia(
        &q,
        FiaKvSlices::Contiguous { key: &k, value: &v },
        PfaLayout::Bsh,
        (b, 1, ks),
        (n, n, d, d),
    );
    let exp = fused_infer_attention(&plain).attention_out;
    let zeros = vec![0u8; b * ks];
    for mode in [
        PfaSparseMode::DefaultMask,
        PfaSparseMode::LeftUpCausal,
        PfaSparseMode::RightDownCausal,
        PfaSparseMode::Band,
    ] {
        let mut f = plain;
        f.sparse_mode = mode;
        f.pre_tokens = 0;
        f.next_tokens = 0;
        f.atten_mask = Some(PfaMask {
            data: &zeros,
            batched: true,
            rows: 1,
            cols: ks,
        });
        let got = fused_infer_attention(&f).attention_out;
        assert_close(&format!("{mode:?}"), &got, &exp, 0.0, 0.0);
    }
}

#[test]
fn band_mode_keeps_the_bottom_right_window_by_hand() {
    // Sq 3, Skv 5, pre 1, next 0: δ = 2, row i keeps j in [i + 1, i + 2].
    let (qs, ks, d) = (3, 5, 1);
    let q = vec![0.0f64; qs * d];
    let k = vec![0.0f64; ks * d];
    let v: Vec<f64> = (0..ks).map(|j| j as f64).collect();
    let mut f = fia(
        &q,
        FiaKvSlices::Contiguous { key: &k, value: &v },
        PfaLayout::Bsnd,
        (1, qs, ks),
        (1, 1, d, d),
    );
    f.sparse_mode = PfaSparseMode::Band;
    f.pre_tokens = 1;
    f.next_tokens = 0;
    f.atten_mask = Some(PfaMask {
        data: &[],
        batched: false,
        rows: 0,
        cols: 0,
    });
    // Uniform weights over the kept columns: the mean of their indices.
    let got = fused_infer_attention(&f).attention_out;
    assert_close("band", &got, &[1.5, 2.5, 3.5], 1e-15, 0.0);
}

#[test]
fn query_and_kv_left_padding_move_the_windows() {
    let mut rng = Rng::new(17);
    let (qs, ks, n, d) = (5, 6, 1, 8);
    let q = rng.vec(qs * n * d, 1.0);
    let k = rng.vec(ks * n * d, 1.0);
    let v = rng.vec(ks * n * d, 1.0);
    // Padded: the valid 3 query rows end 1 row before the end, the 4 KV tokens 2 before.
    let mut f = fia(
        &q,
        FiaKvSlices::Contiguous { key: &k, value: &v },
        PfaLayout::Bsnd,
        (1, qs, ks),
        (n, n, d, d),
    );
    let (asl, askv) = ([3i64], [4i64]);
    f.actual_seq_lengths = Some(&asl);
    f.actual_seq_lengths_kv = Some(&askv);
    f.query_padding_size = Some(1);
    f.kv_padding_size = Some(0);
    let got = fused_infer_attention(&f);
    // The same problem cut out: query rows 1..4, KV tokens 2..6.
    let (q2, k2, v2) = (&q[d..4 * d], &k[2 * d..], &v[2 * d..]);
    let g = fia(
        q2,
        FiaKvSlices::Contiguous { key: k2, value: v2 },
        PfaLayout::Bsnd,
        (1, 3, 4),
        (n, n, d, d),
    );
    let exp = fused_infer_attention(&g);
    assert_close(
        "rows",
        &got.attention_out[d..4 * d],
        &exp.attention_out,
        0.0,
        0.0,
    );
    assert!(got.attention_out[..d].iter().all(|&x| x == 0.0));
    assert!(got.attention_out[4 * d..].iter().all(|&x| x == 0.0));
    assert_eq!(got.softmax_lse[0], f32::INFINITY);
}

#[test]
fn per_token_antiquant_dequantises_each_token() {
    let mut rng = Rng::new(18);
    let (b, qs, ks, n, d) = (2, 2, 4, 1, 8);
    let q = rng.vec(b * qs * n * d, 1.0);
    let k: Vec<f64> = (0..b * ks * d)
        .map(|_| rng.below(255) as f64 - 127.0)
        .collect();
    let v: Vec<f64> = (0..b * ks * d)
        .map(|_| rng.below(255) as f64 - 127.0)
        .collect();
    let ks_scale = rng.vec_f32(b * ks, 0.02);
    let vs_scale = rng.vec_f32(b * ks, 0.02);
    let deq = |x: &[f64], s: &[f32]| -> Vec<f64> {
        x.iter()
            .enumerate()
            .map(|(i, &x)| x * s[i / d] as f64)
            .collect()
    };
    let (kf, vf) = (deq(&k, &ks_scale), deq(&v, &vs_scale));
    let mut f = fia(
        &q,
        FiaKvSlices::Contiguous { key: &k, value: &v },
        PfaLayout::Bsnd,
        (b, qs, ks),
        (n, n, d, d),
    );
    f.key_antiquant = Some(FiaDequant {
        index: FiaDequantIndex::PerToken { cols: ks },
        scale: &ks_scale,
        offset: None,
    });
    f.value_antiquant = Some(FiaDequant {
        index: FiaDequantIndex::PerToken { cols: ks },
        scale: &vs_scale,
        offset: None,
    });
    let got = fused_infer_attention(&f).attention_out;
    let g = fia(
        &q,
        FiaKvSlices::Contiguous {
            key: &kf,
            value: &vf,
        },
        PfaLayout::Bsnd,
        (b, qs, ks),
        (n, n, d, d),
    );
    assert_close(
        "per token",
        &got,
        &fused_infer_attention(&g).attention_out,
        1e-12,
        1e-12,
    );
}

#[test]
fn gqa_maps_query_head_h_to_kv_head_h_over_the_group() {
    let mut rng = Rng::new(19);
    let (qs, ks, n, nkv, d) = (2, 3, 6, 2, 4);
    let q = rng.vec(qs * n * d, 1.0);
    let k = rng.vec(ks * nkv * d, 1.0);
    let v = rng.vec(ks * nkv * d, 1.0);
    let got = fused_infer_attention(&fia(
        &q,
        FiaKvSlices::Contiguous { key: &k, value: &v },
        PfaLayout::Bsnd,
        (1, qs, ks),
        (n, nkv, d, d),
    ))
    .attention_out;
    // Expand K/V to N heads by hand (head h reads kv head h / 3) and run MHA.
    let expand = |x: &[f64]| -> Vec<f64> {
        (0..ks)
            .flat_map(|j| (0..n).flat_map(move |h| (0..d).map(move |e| (j, h, e))))
            .map(|(j, h, e)| x[(j * nkv + h / 3) * d + e])
            .collect()
    };
    let (ke, ve) = (expand(&k), expand(&v));
    let exp = fused_infer_attention(&fia(
        &q,
        FiaKvSlices::Contiguous {
            key: &ke,
            value: &ve,
        },
        PfaLayout::Bsnd,
        (1, qs, ks),
        (n, n, d, d),
    ))
    .attention_out;
    assert_close("gqa", &got, &exp, 0.0, 0.0);
}
