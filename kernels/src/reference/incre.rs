//! CPU reference for `aclnnIncreFlashAttentionV4` (decode: query S = 1).
//!
//! Plain loops, f64 accumulation; the oracle for fast kernels and NPU results.
//!
//! Semantics (spec `ascend-ops-semantics.md` §5; the spec wins over the docs):
//! - per batch `b` the valid KV tokens are `t ∈ [start_b, start_b + len_b)` with
//!   `len_b = actualSeqLengths[b]` (per-batch **KV** lengths) and `start_b = 0`, or with
//!   kvPaddingSize `pad` (negative → 0): `start_b = KV_S − pad − len_b` (left padding);
//! - score `s_t = scale · q·k_t + pseShift[b|0, h, 0, t]`; `attenMask[b, t] != 0` **replaces**
//!   the score with −1e12 (spec; the docs only say "mask"). Consequently a row whose every
//!   valid token is masked becomes the uniform average of V over the window — unlike PFA, no
//!   zeroing (there is no row-invalid correction in IFA);
//! - `len_b == 0` gives a zero output row;
//! - mask, pse and token index `t` are absolute positions (in paged mode: the logical token
//!   index in the block table's sequence);
//! - int8 KV: `x = (x_int8 + offset) · scale` (antiquant, index 0 = K, 1 = V);
//! - GQA: kv head = `h / (numHeads / numKeyValueHeads)`.
//!
//! Not modelled: dequantScale1 / quantScale1 / dequantScale2 (int8 query, which the docs say
//! is unsupported), per-token antiquant (later API versions).

use burn_ascend_contract::incre::problem::*;

/// The element trait of the kernels (f64, f32, f16, bf16, i8), under the name this module used.
pub use burn_ascend_contract::Element as RefElem;
fn run<Q: RefElem, KV: RefElem>(
    a: &IncreFlashAttentionArgs<Q, KV>,
    mut emit: impl FnMut(usize, usize, f64),
) {
    let (n, dh) = (a.num_heads, a.head_dim);
    let group = n / a.nkv();
    for b in 0..a.batch {
        let (start, len) = a.window(b);
        for h in 0..n {
            let hk = h / group;
            let q: Vec<f64> = (0..dh)
                .map(|d| a.query[(b * n + h) * dh + d].to_f64())
                .collect();
            let mut out = vec![0.0f64; dh];
            if len > 0 {
                let scores: Vec<f64> = (start..start + len)
                    .map(|t| {
                        if let Some(m) = a.atten_mask {
                            if m.data[b * m.cols + t] != 0 {
                                return IFA_MASKED_SCORE;
                            }
                        }
                        let dot: f64 = (0..dh).map(|d| q[d] * a.kv_elem(0, b, t, hk, d)).sum();
                        let mut s = a.scale * dot;
                        if let Some(p) = a.pse_shift {
                            let bb = if p.batched { b } else { 0 };
                            s += p.data[(bb * n + h) * p.cols + t].to_f64();
                        }
                        s
                    })
                    .collect();
                let m = scores.iter().fold(f64::NEG_INFINITY, |m, &s| m.max(s));
                let l: f64 = scores.iter().map(|&s| (s - m).exp()).sum();
                for (k, &s) in scores.iter().enumerate() {
                    let p = (s - m).exp() / l;
                    for (d, o) in out.iter_mut().enumerate() {
                        *o += p * a.kv_elem(1, b, start + k, hk, d);
                    }
                }
            }
            for (d, &o) in out.iter().enumerate() {
                emit((b * n + h) * dh + d, h * dh + d, o);
            }
        }
    }
}

/// Reference output in f64, `B·N·D` elements (`(b·N + h)·D + d`, valid for all layouts).
pub fn incre_flash_attention<Q: RefElem, KV: RefElem>(
    a: &IncreFlashAttentionArgs<Q, KV>,
) -> Vec<f64> {
    let mut out = vec![0.0; a.batch * a.num_heads * a.head_dim];
    run(a, |i, _, v| out[i] = v);
    out
}

/// Reference output rounded (nearest-even) to `O`.
pub fn incre_flash_attention_as<Q: RefElem, KV: RefElem, O: RefElem>(
    a: &IncreFlashAttentionArgs<Q, KV>,
) -> Vec<O> {
    incre_flash_attention(a)
        .into_iter()
        .map(O::from_f64)
        .collect()
}

/// int8 output through `quantScale2` / `quantOffset2` (see [`IfaPostQuant::quantize`]).
/// Zero rows (`len_b == 0`) quantise as `offset`.
pub fn incre_flash_attention_int8<Q: RefElem, KV: RefElem>(
    a: &IncreFlashAttentionArgs<Q, KV>,
    quant: &IfaPostQuant,
) -> Vec<i8> {
    let mut out = vec![0i8; a.batch * a.num_heads * a.head_dim];
    run(a, |i, ch, v| out[i] = quant.quantize(v, ch));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::test_util::{assert_close, rand_vec};
    use half::f16;

    fn contiguous<'a, T>(key: &'a [T], value: &'a [T], kv_seq: usize) -> KvInput<'a, T> {
        KvInput::Contiguous { key, value, kv_seq }
    }

    #[test]
    fn two_token_softmax_by_hand() {
        // q = [1], k = [1, 2], v = [10, 20], scale 0.5 → 10 + 10·e^0.5/(1 + e^0.5).
        let (q, k, v) = ([1.0f32], [1.0f32, 2.0], [10.0f32, 20.0]);
        let a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, 2), IfaLayout::Bnsd, 1, 1, 1, 0.5);
        let out = incre_flash_attention(&a);
        assert!((out[0] - 16.224593312018546).abs() < 1e-12, "{}", out[0]);
    }

    #[test]
    fn mask_sets_score_to_minus_1e12() {
        let (q, k, v) = ([1.0f32], [1.0f32, 2.0, 3.0], [10.0f32, 20.0, 40.0]);
        let mut a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, 3), IfaLayout::Bsh, 1, 1, 1, 0.5);
        let mask = [0u8, 0, 1];
        a.atten_mask = Some(IfaMask {
            data: &mask,
            cols: 3,
        });
        assert!((incre_flash_attention(&a)[0] - 16.224593312018546).abs() < 1e-12);
        // All masked: every score is −1e12 → uniform average (not zero, unlike PFA).
        let all = [1u8, 1, 1];
        a.atten_mask = Some(IfaMask {
            data: &all,
            cols: 3,
        });
        assert!((incre_flash_attention(&a)[0] - 70.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn pse_and_zero_length() {
        let (q, k, v) = (
            [1.0f32, 1.0],
            [1.0f32, 2.0, 0.0, 0.0],
            [10.0f32, 20.0, 5.0, 7.0],
        );
        // B = 2, N = 1, D = 1, S = 2; batch 1 has actual length 0 → zero row.
        let pse = [1.0f32, 0.0];
        let lens = [2i64, 0];
        let mut a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, 2), IfaLayout::Bsnd, 2, 1, 1, 0.5);
        a.pse_shift = Some(IfaPse {
            data: &pse,
            batched: false,
            cols: 2,
        });
        a.actual_seq_lengths = Some(&lens);
        let out = incre_flash_attention(&a);
        let expect = 20.0 - 10.0 * 0.6224593312018546; // s = [1.5, 1.0]
        assert_close(&out, &[expect, 0.0], 1e-12);
    }

    #[test]
    fn gqa_matches_repeated_kv_heads_and_layouts_agree() {
        let (b, n, nkv, s, d) = (2, 4, 2, 5, 3);
        let q = rand_vec(1, b * n * d);
        let k = rand_vec(2, b * nkv * s * d); // BNSD
        let v = rand_vec(3, b * nkv * s * d);
        let mut a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, s), IfaLayout::Bnsd, b, n, d, 0.6);
        a.num_key_value_heads = nkv;
        let gqa = incre_flash_attention(&a);

        let mut kr = Vec::new();
        let mut vr = Vec::new();
        for bi in 0..b {
            for h in 0..n {
                let base = (bi * nkv + h / 2) * s * d;
                kr.extend_from_slice(&k[base..base + s * d]);
                vr.extend_from_slice(&v[base..base + s * d]);
            }
        }
        let full = incre_flash_attention(&IncreFlashAttentionArgs::new(
            &q,
            contiguous(&kr, &vr, s),
            IfaLayout::Bnsd,
            b,
            n,
            d,
            0.6,
        ));
        assert_close(&gqa, &full, 0.0);
        assert!((gqa[0] - gqa[2 * d]).abs() > 1e-6);

        // BSND / BSH KV (transposed) give the same result.
        let t = |x: &[f32]| {
            let mut y = Vec::new();
            for bi in 0..b {
                for si in 0..s {
                    for ni in 0..nkv {
                        let base = ((bi * nkv + ni) * s + si) * d;
                        y.extend_from_slice(&x[base..base + d]);
                    }
                }
            }
            y
        };
        let (kt, vt) = (t(&k), t(&v));
        for layout in [IfaLayout::Bsnd, IfaLayout::Bsh] {
            let mut c = a;
            c.kv = contiguous(&kt, &vt, s);
            c.input_layout = layout;
            assert_close(&incre_flash_attention(&c), &gqa, 0.0);
        }
    }

    /// Builds a paged cache from BNSD `(B, Nkv, S, D)` data, putting batch b's logical block i
    /// into physical block `table[b][i]`.
    fn page(
        x: &[f32],
        (b, nkv, s, d): (usize, usize, usize, usize),
        bs: usize,
        table: &[i32],
        maxb: usize,
        nblocks: usize,
        layout: PagedLayout,
    ) -> Vec<f32> {
        let mut cache = vec![f32::NAN; nblocks * bs * nkv * d];
        for bi in 0..b {
            for t in 0..s {
                let blk = table[bi * maxb + t / bs] as usize;
                let off = t % bs;
                for n in 0..nkv {
                    for di in 0..d {
                        let idx = match layout {
                            PagedLayout::Bsh => (blk * bs + off) * nkv * d + n * d + di,
                            PagedLayout::Bnsd => ((blk * nkv + n) * bs + off) * d + di,
                        };
                        cache[idx] = x[((bi * nkv + n) * s + t) * d + di];
                    }
                }
            }
        }
        cache
    }

    #[test]
    fn paged_equals_contiguous_in_both_cache_layouts() {
        let (b, n, nkv, s, d, bs, maxb, nblocks) = (2, 2, 1, 6, 2, 4, 2, 5);
        let q = rand_vec(10, b * n * d);
        let k = rand_vec(11, b * nkv * s * d);
        let v = rand_vec(12, b * nkv * s * d);
        let lens = [6i64, 3];
        let table = [3i32, 0, 4, 1];
        let mut a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, s), IfaLayout::Bnsd, b, n, d, 0.5);
        a.num_key_value_heads = nkv;
        a.actual_seq_lengths = Some(&lens);
        let expect = incre_flash_attention(&a);
        for layout in [PagedLayout::Bsh, PagedLayout::Bnsd] {
            let kc = page(&k, (b, nkv, s, d), bs, &table, maxb, nblocks, layout);
            let vc = page(&v, (b, nkv, s, d), bs, &table, maxb, nblocks, layout);
            let mut c = a;
            c.kv = KvInput::Paged {
                key_cache: &kc,
                value_cache: &vc,
                layout,
                block_table: &table,
                max_blocks_per_seq: maxb,
                block_size: bs,
            };
            // NaN in unused slots would poison the result if read.
            assert_close(&incre_flash_attention(&c), &expect, 0.0);
        }
    }

    #[test]
    fn tensor_list_equals_contiguous() {
        let (b, n, s, d) = (2, 2, 3, 2);
        let q = rand_vec(20, b * n * d);
        let k = rand_vec(21, b * s * n * d); // BSND
        let v = rand_vec(22, b * s * n * d);
        let a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, s), IfaLayout::Bsnd, b, n, d, 0.5);
        let expect = incre_flash_attention(&a);
        let per = s * n * d;
        let kl = [&k[..per], &k[per..]];
        let vl = [&v[..per], &v[per..]];
        let mut c = a;
        c.kv = KvInput::TensorList {
            key: &kl,
            value: &vl,
        };
        assert_close(&incre_flash_attention(&c), &expect, 0.0);
        // Tensor list with a shorter second sequence = contiguous with actual length 2.
        let kl2 = [&k[..per], &k[per..per + 2 * n * d]];
        let vl2 = [&v[..per], &v[per..per + 2 * n * d]];
        let mut c2 = a;
        c2.kv = KvInput::TensorList {
            key: &kl2,
            value: &vl2,
        };
        let lens = [3i64, 2];
        let mut a2 = a;
        a2.actual_seq_lengths = Some(&lens);
        assert_close(
            &incre_flash_attention(&c2),
            &incre_flash_attention(&a2),
            0.0,
        );
    }

    #[test]
    fn left_padding_equals_unpadded() {
        // KV_S = 6, pad = 1, len = [3, 5]: batch b uses tokens [6 − 1 − len, 5).
        let (b, n, d, s, pad) = (2, 1, 2, 6, 1usize);
        let lens = [3i64, 5];
        let q = rand_vec(30, b * n * d);
        let k = rand_vec(31, b * s * d); // BSH, N = 1
        let v = rand_vec(32, b * s * d);
        let mut a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, s), IfaLayout::Bsh, b, n, d, 0.5);
        a.actual_seq_lengths = Some(&lens);
        a.kv_padding_size = Some(pad as i64);
        let padded = incre_flash_attention(&a);
        for bi in 0..b {
            let l = lens[bi] as usize;
            let start = s - pad - l;
            let ks = &k[(bi * s + start) * d..(bi * s + start + l) * d];
            let vs = &v[(bi * s + start) * d..(bi * s + start + l) * d];
            let one = incre_flash_attention(&IncreFlashAttentionArgs::new(
                &q[bi * d..(bi + 1) * d],
                contiguous(ks, vs, l),
                IfaLayout::Bsh,
                1,
                n,
                d,
                0.5,
            ));
            assert_close(&padded[bi * d..(bi + 1) * d], &one, 0.0);
        }
        // Negative padding behaves as 0: window [S − len, S).
        a.kv_padding_size = Some(-4);
        assert_eq!(a.window(0), (3, 3));
        // Padding changes the result vs. reading from position 0.
        let mut plain = a;
        plain.kv_padding_size = None;
        assert!(incre_flash_attention(&plain)
            .iter()
            .zip(&padded)
            .any(|(x, y)| (x - y).abs() > 1e-6));
    }

    #[test]
    fn left_padding_is_ignored_without_lengths_with_several_list_tensors_and_when_paged() {
        let (b, n, d, s) = (2, 1, 2, 6);
        let lens = [3i64, 5];
        let q = rand_vec(33, b * n * d);
        let k = rand_vec(34, b * s * d);
        let v = rand_vec(35, b * s * d);
        // Contiguous without actualSeqLengths: the whole KV S, padding or not.
        let mut a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, s), IfaLayout::Bsh, b, n, d, 0.5);
        let plain = incre_flash_attention(&a);
        a.kv_padding_size = Some(2);
        assert_eq!(a.left_padding(), None);
        assert_eq!(a.window(1), (0, s));
        assert_close(&incre_flash_attention(&a), &plain, 0.0);
        // A list of two tensors with lengths: windows start at 0.
        let (k0, k1) = k.split_at(s * d);
        let (v0, v1) = v.split_at(s * d);
        let (kl, vl) = ([k0, k1], [v0, v1]);
        let mut l = IncreFlashAttentionArgs::new(
            &q,
            KvInput::TensorList {
                key: &kl,
                value: &vl,
            },
            IfaLayout::Bsh,
            b,
            n,
            d,
            0.5,
        );
        l.actual_seq_lengths = Some(&lens);
        let unpadded = incre_flash_attention(&l);
        l.kv_padding_size = Some(1);
        assert_eq!(l.window(0), (0, 3));
        assert_close(&incre_flash_attention(&l), &unpadded, 0.0);
        // A one-tensor list with B = 1 is batch-continuous: the padding applies.
        let (kl1, vl1) = ([k0], [v0]);
        let mut one = IncreFlashAttentionArgs::new(
            &q[..d],
            KvInput::TensorList {
                key: &kl1,
                value: &vl1,
            },
            IfaLayout::Bsh,
            1,
            n,
            d,
            0.5,
        );
        one.actual_seq_lengths = Some(&lens[..1]);
        one.kv_padding_size = Some(1);
        assert_eq!(one.window(0), (2, 3));
        // Paged: ignored.
        let table = [0i32, 1];
        let mut p = IncreFlashAttentionArgs::new(
            &q,
            KvInput::Paged {
                key_cache: &k,
                value_cache: &v,
                layout: PagedLayout::Bsh,
                block_table: &table,
                max_blocks_per_seq: 1,
                block_size: s,
            },
            IfaLayout::Bsh,
            b,
            n,
            d,
            0.5,
        );
        p.actual_seq_lengths = Some(&lens);
        p.kv_padding_size = Some(1);
        assert_eq!((p.left_padding(), p.window(1)), (None, (0, 5)));
    }

    #[test]
    fn antiquant_per_tensor_and_per_channel_match_manual_dequant() {
        let (b, n, nkv, s, d) = (1, 2, 2, 3, 2);
        let q = rand_vec(40, b * n * d);
        let k8: Vec<i8> = (0..b * nkv * s * d)
            .map(|i| ((i * 37) % 100) as i8 - 50)
            .collect();
        let v8: Vec<i8> = (0..b * nkv * s * d)
            .map(|i| ((i * 53) % 90) as i8 - 40)
            .collect();
        let dequant = |x: &[i8], off: &dyn Fn(usize) -> f32, sc: &dyn Fn(usize) -> f32| {
            // BNSD: channel = n·D + d.
            x.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let ch = (i / (s * d)) % nkv * d + i % d;
                    (v as f32 + off(ch)) * sc(ch)
                })
                .collect::<Vec<f32>>()
        };
        // Per-tensor: K (scale 0.02, offset 3), V (scale 0.05, offset −1).
        let (sc, of) = ([0.02f32, 0.05], [3.0f32, -1.0]);
        let mut a = IncreFlashAttentionArgs::new(
            &q,
            contiguous(&k8, &v8, s),
            IfaLayout::Bnsd,
            b,
            n,
            d,
            0.5,
        );
        a.antiquant = Some(Antiquant {
            scale: &sc,
            offset: Some(&of),
            per_channel: false,
        });
        let kd = dequant(&k8, &|_| 3.0, &|_| 0.02);
        let vd = dequant(&v8, &|_| -1.0, &|_| 0.05);
        let manual = incre_flash_attention(&IncreFlashAttentionArgs::new(
            &q,
            contiguous(&kd, &vd, s),
            IfaLayout::Bnsd,
            b,
            n,
            d,
            0.5,
        ));
        assert_close(&incre_flash_attention(&a), &manual, 1e-6);

        // Per-channel (2, Nkv, 1, D): [kv][n·D + d].
        let csc: Vec<f32> = (0..2 * nkv * d).map(|i| 0.01 * (i + 1) as f32).collect();
        let cof: Vec<f32> = (0..2 * nkv * d).map(|i| i as f32 - 3.0).collect();
        a.antiquant = Some(Antiquant {
            scale: &csc,
            offset: Some(&cof),
            per_channel: true,
        });
        let c = nkv * d;
        let kd = dequant(&k8, &|ch| cof[ch], &|ch| csc[ch]);
        let vd = dequant(&v8, &|ch| cof[c + ch], &|ch| csc[c + ch]);
        let manual_pc = incre_flash_attention(&IncreFlashAttentionArgs::new(
            &q,
            contiguous(&kd, &vd, s),
            IfaLayout::Bnsd,
            b,
            n,
            d,
            0.5,
        ));
        let out_pc = incre_flash_attention(&a);
        assert_close(&out_pc, &manual_pc, 1e-6);
        assert!(out_pc
            .iter()
            .zip(&manual)
            .any(|(x, y)| (x - y).abs() > 1e-3));

        // Missing offset means 0.
        a.antiquant = Some(Antiquant {
            scale: &sc,
            offset: None,
            per_channel: false,
        });
        let kd = dequant(&k8, &|_| 0.0, &|_| 0.02);
        let vd = dequant(&v8, &|_| 0.0, &|_| 0.05);
        let manual0 = incre_flash_attention(&IncreFlashAttentionArgs::new(
            &q,
            contiguous(&kd, &vd, s),
            IfaLayout::Bnsd,
            b,
            n,
            d,
            0.5,
        ));
        assert_close(&incre_flash_attention(&a), &manual0, 1e-6);
    }

    #[test]
    fn int8_output_and_half_query() {
        let (q, k, v) = ([1.0f32], [1.0f32, 2.0], [10.0f32, 20.0]);
        let a =
            IncreFlashAttentionArgs::new(&q, contiguous(&k, &v, 2), IfaLayout::Bnsd, 1, 1, 1, 0.5);
        // 16.2246 · 2 − 1 = 31.449 → 31; 16.2246 · 10 = 162.2 → saturates to 127.
        let p = IfaPostQuant {
            scale: &[2.0],
            offset: Some(&[-1.0]),
        };
        assert_eq!(incre_flash_attention_int8(&a, &p), vec![31]);
        let p = IfaPostQuant {
            scale: &[10.0],
            offset: None,
        };
        assert_eq!(incre_flash_attention_int8(&a, &p), vec![127]);
        // f16 query / KV, f16 output.
        let q16 = [f16::from_f32(1.0)];
        let k16 = [f16::from_f32(1.0), f16::from_f32(2.0)];
        let v16 = [f16::from_f32(10.0), f16::from_f32(20.0)];
        let a16 = IncreFlashAttentionArgs::new(
            &q16,
            contiguous(&k16, &v16, 2),
            IfaLayout::Bnsd,
            1,
            1,
            1,
            0.5,
        );
        let o: Vec<f16> = incre_flash_attention_as(&a16);
        assert_eq!(o[0], f16::from_f64(16.224593312018546));
    }
}
