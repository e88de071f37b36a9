//! CPU reference for `aclnnPromptFlashAttention` (V1) and `aclnnPromptFlashAttentionV3`.
//!
//! Plain loops, f64 accumulation. This is the oracle that fast kernels and NPU results are
//! checked against, so it favours obviousness over speed.
//!
//! Semantics (spec `ascend-ops-semantics.md` §1 "PFA" paragraph and §5; the spec wins over the
//! CANN docs where they disagree):
//! - score `s_ij = scale · q_i·k_j + pseShift[b|0, h, i, j]`;
//! - a *masked* score is excluded from the softmax (the kernel writes −FLT_MAX, which gives
//!   exactly zero weight whenever the row has at least one unmasked score);
//! - a row whose every score is masked gives an all-zero output row. The NPU does this only
//!   with innerPrecise bit1 ("row invalid" correction) or when it auto-enables it; without it
//!   the row degenerates (spec §2, UNCONFIRMED). The reference always zeroes such rows and
//!   ignores `inner_precise` (it only selects precision/performance on the device);
//! - query rows `i >= actualSeqLengths[b]` are all zero; an empty KV (`actualSeqLengthsKv[b] == 0`
//!   or KV S = 0) gives all-zero output for that batch;
//! - GQA: kv head = `h / (numHeads / numKeyValueHeads)`.
//!
//! Not modelled: full int8 quantisation (deqScale1 / quantScale1 / deqScale2, int8 Q/K/V);
//! the docs' "pseShift reserved, forced to nullptr" of V1 (the reference applies pse when given,
//! as V3 does).

use burn_ascend_contract::prompt::problem::*;

/// The element trait of the kernels (f64, f32, f16, bf16, i8), under the name this module used.
pub use burn_ascend_contract::Element as RefElem;
/// Runs the reference and hands every output element to `emit(index, channel, value)` exactly
/// once, with `channel = h·Dv + d` (the post-quant per-channel index).
fn run<T: RefElem>(a: &PromptFlashAttentionArgs<T>, mut emit: impl FnMut(usize, usize, f64)) {
    let n = a.num_heads;
    let nkv = if a.num_key_value_heads == 0 {
        n
    } else {
        a.num_key_value_heads
    };
    let group = n / nkv;
    let (dq, dv) = (a.head_dim, a.head_dim_v);
    let tnd = a.input_layout == PfaLayout::Tnd;

    for b in 0..a.batch {
        // Token offsets (TND) and actual lengths of this batch; `rows` = output rows to write.
        let (q_off, sq, kv_off, skv, rows) = if tnd {
            let (qo, sq) = cumulative(a.actual_seq_lengths.unwrap_or(&[]), b);
            let (ko, skv) = cumulative(a.actual_seq_lengths_kv.unwrap_or(&[]), b);
            (qo, sq, ko, skv, sq)
        } else {
            let sq = per_batch_len(a.actual_seq_lengths, b, a.q_seq);
            let skv = per_batch_len(a.actual_seq_lengths_kv, b, a.kv_seq);
            (0, sq, 0, skv, a.q_seq)
        };

        let q_idx = |h: usize, i: usize, d: usize| match a.input_layout {
            PfaLayout::Bsh | PfaLayout::Bsnd => ((b * a.q_seq + i) * n + h) * dq + d,
            PfaLayout::Bnsd | PfaLayout::BnsdBsnd => ((b * n + h) * a.q_seq + i) * dq + d,
            PfaLayout::Tnd => ((q_off + i) * n + h) * dq + d,
        };
        let kv_idx = |hk: usize, j: usize, d: usize, dim: usize| match a.input_layout {
            PfaLayout::Bsh | PfaLayout::Bsnd => ((b * a.kv_seq + j) * nkv + hk) * dim + d,
            PfaLayout::Bnsd | PfaLayout::BnsdBsnd => ((b * nkv + hk) * a.kv_seq + j) * dim + d,
            PfaLayout::Tnd => ((kv_off + j) * nkv + hk) * dim + d,
        };
        let out_idx = |h: usize, i: usize, d: usize| match a.input_layout {
            PfaLayout::Bsh | PfaLayout::Bsnd | PfaLayout::BnsdBsnd => {
                ((b * a.q_seq + i) * n + h) * dv + d
            }
            PfaLayout::Bnsd => ((b * n + h) * a.q_seq + i) * dv + d,
            PfaLayout::Tnd => ((q_off + i) * n + h) * dv + d,
        };
        let masked = |i: usize, j: usize| -> bool {
            let Some(mask) = a.atten_mask else {
                return false; // no mask: sparse mode and pre/next are ignored
            };
            let (i, j) = (i as i128, j as i128);
            let (sq, skv) = (sq as i128, skv as i128);
            let (pre, next) = (a.pre_tokens as i128, a.next_tokens as i128);
            match a.sparse_mode {
                PfaSparseMode::DefaultMask => {
                    mask.masked(b, i as usize, j as usize) || j < i - pre || j > i + next
                }
                PfaSparseMode::AllMask => mask.masked(b, i as usize, j as usize),
                PfaSparseMode::LeftUpCausal => j > i,
                PfaSparseMode::RightDownCausal => j > i + skv - sq,
                PfaSparseMode::Band => {
                    let pre_lu = pre - skv + sq;
                    let next_lu = next + skv - sq;
                    j < i - pre_lu || j > i + next_lu
                }
            }
        };

        for h in 0..n {
            let hk = h / group;
            for i in 0..rows {
                let mut out = vec![0.0f64; dv];
                if i < sq {
                    // Scores of the unmasked columns.
                    let mut scores: Vec<(usize, f64)> = Vec::with_capacity(skv);
                    for j in 0..skv {
                        if masked(i, j) {
                            continue;
                        }
                        let mut dot = 0.0;
                        for d in 0..dq {
                            dot += a.query[q_idx(h, i, d)].to_f64()
                                * a.key[kv_idx(hk, j, d, dq)].to_f64();
                        }
                        let mut s = a.scale * dot;
                        if let Some(p) = a.pse_shift {
                            let bb = if p.batched { b } else { 0 };
                            s += p.data[((bb * n + h) * p.rows + i) * p.cols + j].to_f64();
                        }
                        scores.push((j, s));
                    }
                    // Fully masked rows and empty KV stay zero.
                    if !scores.is_empty() {
                        let m = scores.iter().fold(f64::NEG_INFINITY, |m, &(_, s)| m.max(s));
                        let l: f64 = scores.iter().map(|&(_, s)| (s - m).exp()).sum();
                        for &(j, s) in &scores {
                            let p = (s - m).exp() / l;
                            for (d, o) in out.iter_mut().enumerate() {
                                *o += p * a.value[kv_idx(hk, j, d, dv)].to_f64();
                            }
                        }
                    }
                }
                for (d, &o) in out.iter().enumerate() {
                    emit(out_idx(h, i, d), h * dv + d, o);
                }
            }
        }
    }
}

/// The reference output in f64, in the output layout (see [`PromptFlashAttentionArgs`]).
pub fn prompt_flash_attention<T: RefElem>(a: &PromptFlashAttentionArgs<T>) -> Vec<f64> {
    let mut out = vec![0.0; a.output_len()];
    run(a, |idx, _, v| out[idx] = v);
    out
}

/// The reference output rounded (nearest-even) to `O` (f16 / bf16 / f32 output).
pub fn prompt_flash_attention_as<T: RefElem, O: RefElem>(
    a: &PromptFlashAttentionArgs<T>,
) -> Vec<O> {
    prompt_flash_attention(a)
        .into_iter()
        .map(O::from_f64)
        .collect()
}

/// int8 output through `quantScale2` / `quantOffset2` (see [`PfaPostQuant::quantize`]).
/// Rows that the reference zeroes (past the actual length, fully masked, empty KV) quantise
/// as `0·scale + offset`; the docs reject int8 output with a non-null quantOffset2 when such
/// rows can occur (约束说明, last item), so only offset-free calls can observe them.
pub fn prompt_flash_attention_int8<T: RefElem>(
    a: &PromptFlashAttentionArgs<T>,
    quant: &PfaPostQuant,
) -> Vec<i8> {
    let mut out = vec![0i8; a.output_len()];
    run(a, |idx, ch, v| out[idx] = quant.quantize(v, ch));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::test_util::{assert_close, rand_vec};
    use half::bf16;
    use half::f16;

    /// BNSD `(B, N, S, D)` → BSND `(B, S, N, D)`.
    fn bnsd_to_bsnd<T: Copy>(x: &[T], b: usize, n: usize, s: usize, d: usize) -> Vec<T> {
        let mut y = Vec::with_capacity(x.len());
        for bi in 0..b {
            for si in 0..s {
                for ni in 0..n {
                    for di in 0..d {
                        y.push(x[((bi * n + ni) * s + si) * d + di]);
                    }
                }
            }
        }
        y
    }

    #[test]
    fn two_token_softmax_by_hand() {
        // q = [1], k = [1, 2], v = [10, 20], scale 0.5: s = [0.5, 1.0],
        // p1 = e^0.5 / (1 + e^0.5) = 0.6224593312018546, out = 10 + 10·p1.
        let q = [1.0f32];
        let k = [1.0f32, 2.0];
        let v = [10.0f32, 20.0];
        let a = PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bnsd, 1, 1, 2, 1, 1, 0.5);
        let out = prompt_flash_attention(&a);
        assert!((out[0] - 16.224593312018546).abs() < 1e-12, "{}", out[0]);
    }

    #[test]
    fn pse_shift_added_after_scaling() {
        // Same as above with pse = [1, 0]: s = [1.5, 1.0], p0 = e^0.5/(1+e^0.5).
        let q = [1.0f32];
        let k = [1.0f32, 2.0];
        let v = [10.0f32, 20.0];
        let pse = [1.0f32, 0.0];
        let mut a = PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bnsd, 1, 1, 2, 1, 1, 0.5);
        a.pse_shift = Some(PseShift {
            data: &pse,
            batched: false,
            rows: 1,
            cols: 2,
        });
        let out = prompt_flash_attention(&a);
        let expect = 20.0 - 10.0 * 0.6224593312018546;
        assert!((out[0] - expect).abs() < 1e-12, "{}", out[0]);
    }

    #[test]
    fn gqa_matches_repeated_kv_heads() {
        let (b, n, nkv, sq, skv, d) = (2, 4, 2, 3, 5, 4);
        let q = rand_vec(1, b * n * sq * d);
        let k = rand_vec(2, b * nkv * skv * d);
        let v = rand_vec(3, b * nkv * skv * d);
        // Repeat each kv head G = 2 times (BNSD): head h uses kv head h / 2.
        let rep = |x: &[f32]| {
            let mut y = Vec::new();
            for bi in 0..b {
                for h in 0..n {
                    let hk = h / (n / nkv);
                    let base = (bi * nkv + hk) * skv * d;
                    y.extend_from_slice(&x[base..base + skv * d]);
                }
            }
            y
        };
        let (kr, vr) = (rep(&k), rep(&v));
        let mut a =
            PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bnsd, b, sq, skv, n, d, 0.5);
        a.num_key_value_heads = nkv;
        let gqa = prompt_flash_attention(&a);
        let full = prompt_flash_attention(&PromptFlashAttentionArgs::new(
            &q,
            &kr,
            &vr,
            PfaLayout::Bnsd,
            b,
            sq,
            skv,
            n,
            d,
            0.5,
        ));
        assert_close(&gqa, &full, 1e-12);
        // And GQA is not trivially the same as using head 0 for everything.
        assert!(gqa.iter().zip(&full).all(|(x, y)| x == y));
        assert!((gqa[0] - gqa[sq * d * 2]).abs() > 1e-6);
    }

    #[test]
    fn layouts_agree_with_bnsd() {
        let (b, n, sq, skv, d) = (2, 3, 4, 5, 2);
        let q = rand_vec(10, b * n * sq * d);
        let k = rand_vec(11, b * n * skv * d);
        let v = rand_vec(12, b * n * skv * d);
        let mask: Vec<u8> = (0..sq * skv).map(|x| (x % 3 == 0) as u8).collect();
        let m = PfaMask {
            data: &mask,
            batched: false,
            rows: sq,
            cols: skv,
        };
        let mut a =
            PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bnsd, b, sq, skv, n, d, 0.7);
        a.atten_mask = Some(m);
        a.sparse_mode = PfaSparseMode::AllMask;
        let bnsd = prompt_flash_attention(&a);
        let expect_bsnd = bnsd_to_bsnd(&bnsd, b, n, sq, d);

        let mut c = a;
        c.input_layout = PfaLayout::BnsdBsnd;
        assert_close(&prompt_flash_attention(&c), &expect_bsnd, 0.0);

        let (qt, kt, vt) = (
            bnsd_to_bsnd(&q, b, n, sq, d),
            bnsd_to_bsnd(&k, b, n, skv, d),
            bnsd_to_bsnd(&v, b, n, skv, d),
        );
        for layout in [PfaLayout::Bsh, PfaLayout::Bsnd] {
            let mut c = a;
            c.query = &qt;
            c.key = &kt;
            c.value = &vt;
            c.input_layout = layout;
            assert_close(&prompt_flash_attention(&c), &expect_bsnd, 1e-14);
        }
        // The mask matters (result differs from the unmasked one).
        let mut c = a;
        c.atten_mask = None;
        assert!(prompt_flash_attention(&c)
            .iter()
            .zip(&bnsd)
            .any(|(x, y)| (x - y).abs() > 1e-6));
    }

    #[test]
    fn tnd_matches_per_batch_bsnd() {
        // Two sequences: (Sq, Skv) = (2, 3) and (3, 1); TND lengths are cumulative.
        let (n, d) = (2, 3);
        let (sqs, skvs) = ([2usize, 3], [3usize, 1]);
        let (t1, t2) = (5, 4);
        let q = rand_vec(20, t1 * n * d);
        let k = rand_vec(21, t2 * n * d);
        let v = rand_vec(22, t2 * n * d);
        let (cq, ckv) = ([2i64, 5], [3i64, 4]);
        let mut a = PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Tnd, 2, t1, t2, n, d, 0.4);
        a.actual_seq_lengths = Some(&cq);
        a.actual_seq_lengths_kv = Some(&ckv);
        let out = prompt_flash_attention(&a);
        let (mut qo, mut ko) = (0, 0);
        for bi in 0..2 {
            let (sq, skv) = (sqs[bi], skvs[bi]);
            let qs = &q[qo * n * d..(qo + sq) * n * d];
            let ks = &k[ko * n * d..(ko + skv) * n * d];
            let vs = &v[ko * n * d..(ko + skv) * n * d];
            let one = prompt_flash_attention(&PromptFlashAttentionArgs::new(
                qs,
                ks,
                vs,
                PfaLayout::Bsnd,
                1,
                sq,
                skv,
                n,
                d,
                0.4,
            ));
            assert_close(&out[qo * n * d..(qo + sq) * n * d], &one, 0.0);
            qo += sq;
            ko += skv;
        }
    }

    #[test]
    fn tnd_rightdown_causal_uses_local_lengths() {
        // One sequence Sq = 2, Skv = 3, mode 3: row 0 sees j <= 1, row 1 sees all.
        let (n, d) = (1, 1);
        let q = [1.0f32, 1.0];
        let k = [0.0f32, 0.0, 0.0];
        let v = [1.0f32, 2.0, 6.0];
        let mask = [0u8; 4];
        let (cq, ckv) = ([2i64], [3i64]);
        let mut a = PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Tnd, 1, 2, 3, n, d, 1.0);
        a.actual_seq_lengths = Some(&cq);
        a.actual_seq_lengths_kv = Some(&ckv);
        a.sparse_mode = PfaSparseMode::RightDownCausal;
        a.atten_mask = Some(PfaMask {
            data: &mask,
            batched: false,
            rows: 2,
            cols: 2,
        });
        let out = prompt_flash_attention(&a);
        assert_close(&out, &[1.5, 3.0], 1e-12);
    }

    /// Explicit mask equivalent of a sparse mode, built from its definition.
    fn explicit(sq: usize, skv: usize, f: impl Fn(i64, i64) -> bool) -> Vec<u8> {
        let mut m = vec![0u8; sq * skv];
        for i in 0..sq {
            for j in 0..skv {
                m[i * skv + j] = f(i as i64, j as i64) as u8;
            }
        }
        m
    }

    #[test]
    fn sparse_modes_match_explicit_masks() {
        let (n, sq, skv, d) = (2, 4, 6, 3);
        let q = rand_vec(30, n * sq * d);
        let k = rand_vec(31, n * skv * d);
        let v = rand_vec(32, n * skv * d);
        let compressed = vec![0u8; 2048 * 2048];
        let dummy = PfaMask {
            data: &compressed,
            batched: false,
            rows: 2048,
            cols: 2048,
        };
        let base =
            PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bnsd, 1, sq, skv, n, d, 0.3);
        let run_explicit = |m: &[u8]| {
            let mut a = base;
            a.sparse_mode = PfaSparseMode::AllMask;
            a.atten_mask = Some(PfaMask {
                data: m,
                batched: false,
                rows: sq,
                cols: skv,
            });
            prompt_flash_attention(&a)
        };
        let delta = skv as i64 - sq as i64;
        let cases: Vec<(PfaSparseMode, i64, i64, Vec<u8>)> = vec![
            (
                PfaSparseMode::LeftUpCausal,
                0,
                0,
                explicit(sq, skv, |i, j| j > i),
            ),
            (
                PfaSparseMode::RightDownCausal,
                0,
                0,
                explicit(sq, skv, |i, j| j > i + delta),
            ),
            // band from the bottom-right: valid iff δ − pre ≤ j − i ≤ δ + next
            (
                PfaSparseMode::Band,
                1,
                0,
                explicit(sq, skv, |i, j| j - i < delta - 1 || j - i > delta),
            ),
            (
                PfaSparseMode::Band,
                2,
                -1,
                explicit(sq, skv, |i, j| j - i < delta - 2 || j - i > delta - 1),
            ),
        ];
        for (mode, pre, next, m) in cases {
            let mut a = base;
            a.sparse_mode = mode;
            a.pre_tokens = pre;
            a.next_tokens = next;
            a.atten_mask = Some(dummy);
            assert_close(&prompt_flash_attention(&a), &run_explicit(&m), 1e-14);
        }
        // Mode 0: user mask OR outside [i − pre, i + next].
        let user = explicit(sq, skv, |i, j| (i + j) % 4 == 1);
        let mut a = base;
        a.pre_tokens = 1;
        a.next_tokens = 2;
        a.atten_mask = Some(PfaMask {
            data: &user,
            batched: false,
            rows: sq,
            cols: skv,
        });
        let combined = explicit(sq, skv, |i, j| (i + j) % 4 == 1 || j < i - 1 || j > i + 2);
        assert_close(&prompt_flash_attention(&a), &run_explicit(&combined), 1e-14);
    }

    #[test]
    fn zero_rows_fully_masked_past_length_and_empty_kv() {
        let (n, sq, skv, d) = (1, 3, 2, 2);
        let q = rand_vec(40, n * sq * d);
        let k = rand_vec(41, n * skv * d);
        let v = rand_vec(42, n * skv * d);
        // Mode 3 with Sq > Skv: row 0 has j > 0 + (2 − 3) = −1 for all j → fully masked.
        let dummy = [0u8; 9];
        let mut a =
            PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bnsd, 1, sq, skv, n, d, 1.0);
        a.sparse_mode = PfaSparseMode::RightDownCausal;
        a.atten_mask = Some(PfaMask {
            data: &dummy,
            batched: false,
            rows: 3,
            cols: 3,
        });
        let out = prompt_flash_attention(&a);
        assert_eq!(&out[0..2], &[0.0, 0.0]);
        // Row 1 sees only j = 0: output is exactly v[0].
        assert_close(&out[2..4], &[v[0] as f64, v[1] as f64], 1e-15);

        // actualSeqLengths = 1: rows 1, 2 are zero; row 0 equals the unrestricted row 0.
        let lens = [1i64];
        let mut a2 =
            PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bnsd, 1, sq, skv, n, d, 1.0);
        let full = prompt_flash_attention(&a2);
        a2.actual_seq_lengths = Some(&lens);
        let out = prompt_flash_attention(&a2);
        assert_close(&out[0..2], &full[0..2], 0.0);
        assert!(full[2..].iter().any(|&x| x != 0.0));
        assert_eq!(&out[2..], &[0.0; 4]);

        // Empty KV (actualSeqLengthsKv = 0) → all zeros; KV S = 0 too.
        let zero = [0i64];
        let mut a3 = a2;
        a3.actual_seq_lengths = None;
        a3.actual_seq_lengths_kv = Some(&zero);
        assert!(prompt_flash_attention(&a3).iter().all(|&x| x == 0.0));
        let a4 = PromptFlashAttentionArgs::new(&q, &[], &[], PfaLayout::Bnsd, 1, sq, 0, n, d, 1.0);
        assert_eq!(prompt_flash_attention(&a4), vec![0.0; sq * d]);
    }

    #[test]
    fn actual_kv_length_equals_truncated_kv() {
        let (b, n, sq, skv, d) = (2, 1, 2, 4, 2);
        let q = rand_vec(50, b * n * sq * d);
        let k = rand_vec(51, b * n * skv * d);
        let v = rand_vec(52, b * n * skv * d);
        let kvl = [3i64, 1];
        let mut a =
            PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bsnd, b, sq, skv, n, d, 0.5);
        a.actual_seq_lengths_kv = Some(&kvl);
        let out = prompt_flash_attention(&a);
        for bi in 0..b {
            let l = kvl[bi] as usize;
            let ks = &k[bi * skv * d..bi * skv * d + l * d];
            let vs = &v[bi * skv * d..bi * skv * d + l * d];
            let qs = &q[bi * sq * d..(bi + 1) * sq * d];
            let one = prompt_flash_attention(&PromptFlashAttentionArgs::new(
                qs,
                ks,
                vs,
                PfaLayout::Bsnd,
                1,
                sq,
                l,
                n,
                d,
                0.5,
            ));
            assert_close(&out[bi * sq * d..(bi + 1) * sq * d], &one, 0.0);
        }
    }

    #[test]
    fn half_inputs_match_f32_within_rounding() {
        let (n, sq, skv, d) = (2, 3, 4, 8);
        let q = rand_vec(60, n * sq * d);
        let k = rand_vec(61, n * skv * d);
        let v = rand_vec(62, n * skv * d);
        let to16 = |x: &[f32]| x.iter().map(|&y| f16::from_f32(y)).collect::<Vec<_>>();
        let tob = |x: &[f32]| x.iter().map(|&y| bf16::from_f32(y)).collect::<Vec<_>>();
        /// The one BNSD call of this test, over q, k, v of element type `T`.
        fn bnsd<'a, T: RefElem>(
            (q, k, v): (&'a [T], &'a [T], &'a [T]),
            (sq, skv, n, d): (usize, usize, usize, usize),
        ) -> PromptFlashAttentionArgs<'a, T> {
            PromptFlashAttentionArgs::new(q, k, v, PfaLayout::Bnsd, 1, sq, skv, n, d, 0.35)
        }
        let dims = (sq, skv, n, d);
        let r = prompt_flash_attention(&bnsd((&q, &k, &v), dims));
        let (q16, k16, v16) = (to16(&q), to16(&k), to16(&v));
        let h: Vec<f16> = prompt_flash_attention_as(&bnsd((&q16, &k16, &v16), dims));
        let (qb, kb, vb) = (tob(&q), tob(&k), tob(&v));
        let bo: Vec<bf16> = prompt_flash_attention_as(&bnsd((&qb, &kb, &vb), dims));
        for i in 0..r.len() {
            assert!((h[i].to_f64() - r[i]).abs() < 2e-3, "f16 {i}");
            assert!((bo[i].to_f64() - r[i]).abs() < 2e-2, "bf16 {i}");
        }
    }

    #[test]
    fn int8_post_quant_rounding_and_saturation() {
        let pt = PfaPostQuant {
            scale: &[1.0],
            offset: None,
        };
        assert_eq!(pt.quantize(2.5, 0), 2); // ties to even
        assert_eq!(pt.quantize(3.5, 0), 4);
        assert_eq!(pt.quantize(-2.5, 0), -2);
        assert_eq!(pt.quantize(300.0, 0), 127);
        assert_eq!(pt.quantize(-300.0, 0), -128);
        // f16 overflow → inf → saturate.
        assert_eq!(pt.quantize(1e9, 0), 127);
        // Double rounding through f16: 2.5009765625 is not representable in f16
        // (spacing 2^-9 = 0.001953125 in [2, 4)) and rounds to 2.5 → 2, where a direct
        // round would give 3.
        assert_eq!(pt.quantize(2.5009765625, 0), 2);
        // Per-channel scale/offset: channel = h·Dv + d.
        let pc = PfaPostQuant {
            scale: &[1.0, 2.0, 10.0, 0.5],
            offset: Some(&[0.0, 1.0, -3.0, 0.0]),
        };
        assert_eq!(pc.quantize(1.2, 1), 3); // 1.2·2 + 1 = 3.4 → 3
        assert_eq!(pc.quantize(1.2, 2), 9); // 12 − 3 = 9

        // End to end: q = [1], k = [1, 2], v = [10, 20], scale 0.5 → 16.2246 → ·2 − 1 = 31.45 → 31.
        let (q, k, v) = ([1.0f32], [1.0f32, 2.0], [10.0f32, 20.0]);
        let a = PromptFlashAttentionArgs::new(&q, &k, &v, PfaLayout::Bnsd, 1, 1, 2, 1, 1, 0.5);
        let p = PfaPostQuant {
            scale: &[2.0],
            offset: Some(&[-1.0]),
        };
        assert_eq!(prompt_flash_attention_int8(&a, &p), vec![31]);
    }

    #[test]
    fn sparse_mode_from_attr() {
        assert_eq!(
            PfaSparseMode::from_attr(3),
            Some(PfaSparseMode::RightDownCausal)
        );
        assert_eq!(PfaSparseMode::from_attr(5), None);
        assert_eq!(PfaSparseMode::from_attr(-1), None);
    }
}
