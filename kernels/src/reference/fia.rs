//! CPU reference for `aclnnFusedInferAttentionScoreV4` (FIA): prefill and decode in one op, with
//! a learnable sink and the softmax LSE.
//!
//! Plain loops, f64 accumulation, written from the spec (`ascend-ops-semantics.md` §1, §5 and
//! the Appendix rows "FIA …"), independent of the PFA/IFA references and the fast kernels.
//!
//! Per batch b (actual lengths `Sq`, `Skv`; local row i, column j; `d = j − i`,
//! `δ = Skv − Sq`), query head h, kv head `h / (N / Nkv)`:
//! - score `s_ij = scale · q_i·k_j + pseShift[b|0, h, qi, kj]` (`qi`, `kj` the absolute row and
//!   column: they differ from i, j only with left padding);
//! - masked scores are excluded (the kernel's −FLT_MAX gives them zero weight);
//! - the sink `sink_h` is one more raw logit (not scaled, no value) in the denominator:
//!   `m = max(sink_h, max_j s_ij)`, `l = Σ_j e^{s_ij − m} + e^{sink_h − m}`,
//!   `out_i = Σ_j e^{s_ij − m} v_j / l`, `lse_i = m + ln l`;
//! - a row with no unmasked column (fully masked, `Skv = 0`, or past the actual query length)
//!   gives `out = 0` and `lse = +inf` (CANN marks invalid LSE rows with inf; the output is
//!   what innerPrecise 2/3 "row invalid correction" gives — the reference always applies it);
//! - masks (when `attenMask` is given): mode 0 `mask[qi, kj]` OR outside `i − pre ≤ j ≤ i +
//!   next` (the window is not applied with left padding); 1 `mask[qi, kj]`; 2 `d > 0`; 3
//!   `d > δ`; 4 outside `δ − pre ≤ d ≤ δ + next`. Decode (query S = 1 outside TND): modes 2–4
//!   have no effect and pre/next are ignored (only the dense mask of modes 0/1 applies);
//! - int8 KV: `x = (x_int8 + offset) · scale` per tensor, per channel or per token.

use burn_ascend_contract::fia::problem::*;
use burn_ascend_contract::Element;

/// Runs the reference: `attentionOut` (f64) and `softmaxLse` (f32, `+inf` for rows with
/// nothing to attend).
pub fn fused_infer_attention<T: Element>(a: &FiaArgs<T>) -> FiaOut {
    let (n, dq, dv) = (a.num_heads, a.head_dim, a.head_dim_v);
    let group = n / a.nkv();
    let mut out = vec![0.0f64; a.output_len()];
    let mut lse = vec![f32::INFINITY; a.lse_len()];
    for b in 0..a.batch {
        let (q0, sq, k0, skv) = a.sequence(b);
        for h in 0..n {
            let hk = h / group;
            for i in 0..sq {
                let qi = q0 + i;
                let mut scores = Vec::with_capacity(skv);
                for j in 0..skv {
                    let kj = k0 + j;
                    if a.masked(b, i, j, qi, kj, sq, skv) {
                        continue;
                    }
                    let dot: f64 = (0..dq)
                        .map(|d| a.q_at(b, qi, h, d) * a.kv_at(0, b, kj, hk, d))
                        .sum();
                    let mut s = a.scale * dot;
                    if let Some(p) = a.pse_shift {
                        let bb = if p.batched { b } else { 0 };
                        let row = if a.decode() { 0 } else { qi };
                        s += p.data[((bb * n + h) * p.rows + row) * p.cols + kj] as f64;
                    }
                    scores.push((kj, s));
                }
                if scores.is_empty() {
                    continue; // out 0, lse +inf
                }
                let sink = a.learnable_sink.map(|s| s[h] as f64);
                let smax = scores.iter().fold(f64::NEG_INFINITY, |m, &(_, s)| m.max(s));
                let m = sink.map_or(smax, |sk| sk.max(smax));
                let mut l = sink.map_or(0.0, |sk| (sk - m).exp());
                let mut acc = vec![0.0f64; dv];
                for &(kj, s) in &scores {
                    let e = (s - m).exp();
                    l += e;
                    for (d, o) in acc.iter_mut().enumerate() {
                        *o += e * a.kv_at(1, b, kj, hk, d);
                    }
                }
                for (d, o) in acc.iter().enumerate() {
                    out[a.out_index(b, qi, h, d)] = o / l;
                }
                lse[a.lse_index(b, qi, h)] = (m + l.ln()) as f32;
            }
        }
    }
    FiaOut {
        attention_out: out,
        softmax_lse: lse,
    }
}
