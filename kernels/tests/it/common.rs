//! Shared pieces of the varlen test suite: an owned description of a test problem ([`Case`]),
//! an *independent* forward written from the spec (`/work/shared/spec/ascend-ops-semantics.md`
//! §1–4) and comparison helpers; the splitmix64 [`Rng`] and [`check_close`] come from
//! `burn-ascend-test-support`.
//!
//! The independent forward ([`spec_fwd`], [`spec_masked`], [`spec_stat_index`]) deliberately
//! calls nothing from `burn_ascend_kernels` (no `VarlenProblem::rule` / `allowed` /
//! `pse_value` / `dropout::kept` / `stat_index`); it only reads the plain-data attribute types:
//! the mask predicate is the spec's §1 table, the dense-mask, pse, dropout-bit and
//! softmax-statistics indexing are written out again from the spec text, and the softmax
//! materialises the whole masked score row with the sink appended as one more column. (The
//! [`Case`] builder does use `dropout::generate_mask` to *create* masks.)

use burn_ascend_contract::varlen::{
    AttenMask, DenseMask, Pse, PseType, SoftmaxLayout, SparseMode, VarlenAttrs, VarlenDims,
    VarlenProblem,
};
use burn_ascend_contract::Element;
use burn_ascend_kernels::reference::varlen::{varlen_bwd, varlen_fwd, VarlenFwdOut};
pub use burn_ascend_test_support::{assert_close, check_close, Rng};

/// CANN's default pre/next tokens (`INT_MAX`).
pub const INT_MAX: i64 = 2_147_483_647;

// ---------------------------------------------------------------------------------------------
// Owned problem description
// ---------------------------------------------------------------------------------------------

/// `attenMask` with owned data.
#[derive(Clone, Debug)]
pub enum MaskSpec {
    None,
    /// Row-major `[batch, heads, rows, cols]`, non-zero = masked.
    Dense {
        data: Vec<u8>,
        batch: usize,
        heads: usize,
        rows: usize,
        cols: usize,
    },
    Compressed,
}

/// pse with owned data.
#[derive(Clone, Debug)]
pub enum PseSpec {
    None,
    /// `[Σ_b N·Sq_b·Skv_b]`.
    Dense(Vec<f32>),
    /// `[N]` or `[B, N]`.
    Alibi {
        slopes: Vec<f32>,
        per_batch: bool,
    },
    /// ALiBi-compressed `[Bp, N, 1024, S2]`.
    AlibiCompressed {
        data: Vec<f32>,
        batches: usize,
        s2: usize,
    },
}

/// A whole test problem, owning every buffer.
#[derive(Clone, Debug)]
pub struct Case {
    pub dims: VarlenDims,
    pub attrs: VarlenAttrs,
    pub mask: MaskSpec,
    pub pse: PseSpec,
    pub drop_mask: Option<Vec<u8>>,
    pub prefix: Option<Vec<i64>>,
    pub q_start_idx: i64,
    pub kv_start_idx: i64,
    pub sink: Option<Vec<f32>>,
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
}

impl Case {
    /// Random q, k, v in [-1.5, 1.5); scale 1/sqrt(D); CANN's default attributes otherwise.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rng: &mut Rng,
        n: usize,
        nkv: usize,
        d: usize,
        dv: usize,
        seq_q: &[usize],
        seq_kv: &[usize],
    ) -> Self {
        assert_eq!(seq_q.len(), seq_kv.len());
        let dims = VarlenDims {
            head_num: n,
            kv_head_num: nkv,
            head_dim: d,
            value_dim: dv,
            seq_q: seq_q.to_vec(),
            seq_kv: seq_kv.to_vec(),
        };
        let (tq, tkv) = (dims.t_q(), dims.t_kv());
        Self {
            q: rng.vec(tq * n * d, 1.5),
            k: rng.vec(tkv * nkv * d, 1.5),
            v: rng.vec(tkv * nkv * dv, 1.5),
            attrs: VarlenAttrs::new(1.0 / (d as f64).sqrt()),
            dims,
            mask: MaskSpec::None,
            pse: PseSpec::None,
            drop_mask: None,
            prefix: None,
            q_start_idx: 0,
            kv_start_idx: 0,
            sink: None,
        }
    }

    pub fn mode(mut self, mode: SparseMode) -> Self {
        self.attrs.sparse_mode = mode;
        self
    }

    pub fn pre_next(mut self, pre: i64, next: i64) -> Self {
        self.attrs.pre_tokens = pre;
        self.attrs.next_tokens = next;
        self
    }

    pub fn compressed(mut self) -> Self {
        self.mask = MaskSpec::Compressed;
        self
    }

    /// A random dense mask `[batch, heads, maxSq, maxSkv]` with each bit masked with
    /// probability `density`.
    pub fn random_dense_mask(
        mut self,
        rng: &mut Rng,
        batch: usize,
        heads: usize,
        density: f64,
    ) -> Self {
        let rows = self.dims.seq_q.iter().copied().max().unwrap_or(0);
        let cols = self.dims.seq_kv.iter().copied().max().unwrap_or(0);
        let data = (0..batch * heads * rows * cols)
            .map(|_| u8::from(rng.uniform() < density))
            .collect();
        self.mask = MaskSpec::Dense {
            data,
            batch,
            heads,
            rows,
            cols,
        };
        self
    }

    /// Sink logits, multiples of 1/64 in [-2, 2] (exactly representable, so finite differences
    /// of the f32 sink with a power-of-two step are exact in the argument).
    pub fn with_sink(mut self, rng: &mut Rng) -> Self {
        let n = self.dims.head_num;
        self.sink = Some(
            (0..n)
                .map(|_| (rng.below(257) as f32 - 128.0) / 64.0)
                .collect(),
        );
        self
    }

    /// Dropout with a mask from `dropout::generate_mask`.
    pub fn with_dropout(mut self, keep_prob: f64, seed: u64) -> Self {
        let bits = burn_ascend_contract::dropout::mask_bits(
            self.dims.head_num,
            &self.dims.seq_q,
            &self.dims.seq_kv,
        );
        self.attrs.keep_prob = keep_prob;
        self.drop_mask = Some(burn_ascend_contract::dropout::generate_mask(
            bits, keep_prob, seed,
        ));
        self
    }

    /// A random dense pse `[Σ N·Sq_b·Skv_b]` with pseType 0 or 1.
    pub fn with_dense_pse(mut self, rng: &mut Rng, pse_type: PseType) -> Self {
        let len: usize = (0..self.dims.batch())
            .map(|b| self.dims.head_num * self.dims.seq_q[b] * self.dims.seq_kv[b])
            .sum();
        self.pse = PseSpec::Dense((0..len).map(|_| rng.sym(1.0) as f32).collect());
        self.attrs.pse_type = pse_type;
        self
    }

    /// ALiBi slopes `[N]` or `[B, N]` with pseType 2 or 3 and the given start indices.
    pub fn with_alibi(
        mut self,
        rng: &mut Rng,
        pse_type: PseType,
        per_batch: bool,
        q_start_idx: i64,
        kv_start_idx: i64,
    ) -> Self {
        let count = self.dims.head_num * if per_batch { self.dims.batch() } else { 1 };
        self.pse = PseSpec::Alibi {
            slopes: (0..count).map(|_| (rng.uniform() * 0.5) as f32).collect(),
            per_batch,
        };
        self.attrs.pse_type = pse_type;
        self.q_start_idx = q_start_idx;
        self.kv_start_idx = kv_start_idx;
        self
    }

    /// An ALiBi-compressed pse: `C[b, h, p, q] = g_{b,h}(p − q)` with random per-diagonal
    /// values (constant along diagonals, as the kernel requires).
    pub fn with_alibi_compressed(
        mut self,
        rng: &mut Rng,
        pse_type: PseType,
        batches: usize,
    ) -> Self {
        const ROWS: usize = 1024;
        let s2 = self.dims.seq_kv.iter().copied().max().unwrap();
        let n = self.dims.head_num;
        let diag: Vec<f32> = (0..batches * n * (ROWS + s2))
            .map(|_| rng.uniform() as f32 - 0.5)
            .collect();
        let mut data = Vec::with_capacity(batches * n * ROWS * s2);
        for bh in 0..batches * n {
            for p in 0..ROWS {
                for q in 0..s2 {
                    data.push(diag[bh * (ROWS + s2) + p + s2 - q]);
                }
            }
        }
        self.pse = PseSpec::AlibiCompressed { data, batches, s2 };
        self.attrs.pse_type = pse_type;
        self
    }

    pub fn layout(mut self, layout: SoftmaxLayout) -> Self {
        self.attrs.softmax_layout = layout;
        self
    }

    /// The borrowed problem the reference takes.
    pub fn problem(&self) -> VarlenProblem<'_> {
        let mut p = VarlenProblem::new(self.dims.clone(), self.attrs.clone());
        p.atten_mask = match &self.mask {
            MaskSpec::None => AttenMask::None,
            MaskSpec::Compressed => AttenMask::Compressed,
            MaskSpec::Dense {
                data,
                batch,
                heads,
                rows,
                cols,
            } => AttenMask::Dense(DenseMask {
                data,
                batch: *batch,
                heads: *heads,
                rows: *rows,
                cols: *cols,
            }),
        };
        p.pse = match &self.pse {
            PseSpec::None => Pse::None,
            PseSpec::Dense(d) => Pse::Dense(d),
            PseSpec::Alibi { slopes, per_batch } => Pse::Alibi {
                slopes,
                per_batch: *per_batch,
            },
            PseSpec::AlibiCompressed { data, batches, s2 } => Pse::AlibiCompressed {
                data,
                batches: *batches,
                s2: *s2,
            },
        };
        p.drop_mask = self.drop_mask.as_deref();
        p.prefix = self.prefix.as_deref();
        p.q_start_idx = self.q_start_idx;
        p.kv_start_idx = self.kv_start_idx;
        p.sink = self.sink.as_deref();
        p
    }

    pub fn sink_f64(&self) -> Option<Vec<f64>> {
        self.sink
            .as_ref()
            .map(|s| s.iter().map(|&x| x as f64).collect())
    }
}

// ---------------------------------------------------------------------------------------------
// The independent forward, from the spec text
// ---------------------------------------------------------------------------------------------

/// Spec §1: "If attenMask is null, sparseMode, preTokens and nextTokens are all ignored".
/// Otherwise the §1 table, with `d = j − i`, `δ = Skv − Sq` (per sequence, local indices).
pub fn spec_masked(c: &Case, b: usize, h: usize, i: usize, j: usize) -> bool {
    let explicit = match &c.mask {
        MaskSpec::None => return false,
        MaskSpec::Compressed => false,
        // "A full [Sq, Skv] mask is sliced mask[:Sq_b, :Skv_b] per sequence"; a batch or head
        // dim of 1 is shared.
        MaskSpec::Dense {
            data,
            batch,
            heads,
            rows,
            cols,
        } => {
            let bb = if *batch == 1 { 0 } else { b };
            let hh = if *heads == 1 { 0 } else { h };
            data[bb * heads * rows * cols + hh * rows * cols + i * cols + j] != 0
        }
    };
    let sq = c.dims.seq_q[b] as i64;
    let skv = c.dims.seq_kv[b] as i64;
    let d = j as i64 - i as i64;
    let delta = skv - sq;
    let pre = c.attrs.pre_tokens;
    let next = c.attrs.next_tokens;
    let nonempty: Vec<usize> = (0..c.dims.batch())
        .filter(|&x| c.dims.seq_q[x] > 0)
        .collect();
    match c.attrs.sparse_mode as i64 {
        // attenMask[i,j] OR NOT(−pre ≤ d ≤ next); origin top-left.
        0 => explicit || !(-pre <= d && d <= next),
        // attenMask[i,j]; pre/next ignored.
        1 => explicit,
        // d > 0
        2 => d > 0,
        // d > δ
        3 => d > delta,
        // valid iff δ − pre ≤ d ≤ δ + next
        4 => !(delta - pre <= d && d <= delta + next),
        // d > δ AND j ≥ prefix[b]
        6 => d > delta && (j as i64) >= c.prefix.as_ref().map_or(0, |p| p[b]),
        // band sequence = the last b with Sq_b > 0: d > δ + next; all others d > δ.
        7 => {
            if nonempty.last() == Some(&b) {
                d > delta + next
            } else {
                d > delta
            }
        }
        // band sequence = the first b with Sq_b > 0: d > δ + next; all others d > 0.
        8 => {
            if nonempty.first() == Some(&b) {
                d > delta + next
            } else {
                d > 0
            }
        }
        m => panic!("mode {m} is not a varlen mode"),
    }
}

/// Outputs of the independent forward: `out [Tq, N, Dv]` and full `T·N·8` statistics buffers in
/// the case's layout.
pub struct SpecOut {
    pub out: Vec<f64>,
    pub max: Vec<f32>,
    pub sum: Vec<f32>,
}

/// Spec §2 layouts: `""` → `(cumQ_b·N + h·Sq_b + i)·8`; `"same_as_input"` → `((cumQ_b + i)·N + h)·8`.
pub fn spec_stat_index(
    layout: SoftmaxLayout,
    cum_q: usize,
    sq: usize,
    n: usize,
    h: usize,
    i: usize,
) -> usize {
    match layout.as_attr() {
        "" => (cum_q * n + h * sq + i) * 8,
        "same_as_input" => ((cum_q + i) * n + h) * 8,
        other => panic!("unknown layout {other:?}"),
    }
}

/// The independent forward in f64. `sink` overrides the case's sink (f64 so it can be perturbed
/// freely); pass `c.sink_f64()` for the case's own.
pub fn spec_fwd(c: &Case, q: &[f64], k: &[f64], v: &[f64], sink: Option<&[f64]>) -> SpecOut {
    let n = c.dims.head_num;
    let nkv = c.dims.kv_head_num;
    let g = n / nkv;
    let dd = c.dims.head_dim;
    let dv = c.dims.value_dim;
    let nb = c.dims.batch();
    let tq: usize = c.dims.seq_q.iter().sum();
    let mut out = vec![0.0; tq * n * dv];
    let mut smax = vec![0.0f32; tq * n * 8];
    let mut ssum = vec![0.0f32; tq * n * 8];
    let (mut cum_q, mut cum_kv, mut cum_elems) = (0usize, 0usize, 0usize);
    for b in 0..nb {
        let (sq, skv) = (c.dims.seq_q[b], c.dims.seq_kv[b]);
        for h in 0..n {
            let kvh = h / g;
            // Element index base of this (b, h) block for pse and dropout (spec §4):
            // N·Σ_{b'<b} Sq_b'·Skv_b' + h·Sq_b·Skv_b.
            let base = cum_elems + h * sq * skv;
            for i in 0..sq {
                let at = spec_stat_index(c.attrs.softmax_layout, cum_q, sq, n, h, i);
                if skv == 0 {
                    // "A sequence with Sq > 0 and Skv = 0 gets out = 0, max = 0, sum = 0."
                    continue;
                }
                // Materialise the masked score row s_i· (None = masked).
                let row: Vec<Option<f64>> = (0..skv)
                    .map(|j| {
                        if spec_masked(c, b, h, i, j) {
                            return None;
                        }
                        let mut qk = 0.0;
                        for x in 0..dd {
                            qk += q[((cum_q + i) * n + h) * dd + x]
                                * k[((cum_kv + j) * nkv + kvh) * dd + x];
                        }
                        let pse = match &c.pse {
                            PseSpec::None => 0.0,
                            PseSpec::Dense(p) => p[base + i * skv + j] as f64,
                            PseSpec::Alibi { slopes, per_batch } => {
                                let slope = slopes[if *per_batch { b * n + h } else { h }] as f64;
                                let delta =
                                    (j as i64 + c.kv_start_idx) - (i as i64 + c.q_start_idx);
                                let delta = (delta as f64).abs();
                                match c.attrs.pse_type as i64 {
                                    2 => -slope * delta,
                                    3 => -slope * delta.sqrt(),
                                    t => panic!("alibi with pseType {t}"),
                                }
                            }
                            // Independently of the kernels' reading (the diagonal's first
                            // element), read the diagonal p − q = (i − j) − (S2 − 1024) at its
                            // last element: equal for a Toeplitz C. Upper triangle: 0.
                            PseSpec::AlibiCompressed { data, batches, s2 } => {
                                if i < j {
                                    0.0
                                } else {
                                    let d = (i - j) as i64 - (*s2 as i64 - 1024);
                                    let p = (d + *s2 as i64 - 1).min(1023);
                                    let q = (p - d) as usize;
                                    let slab = ((b % batches) * n + h) * 1024 * s2;
                                    data[slab + p as usize * s2 + q] as f64
                                }
                            }
                        };
                        let scale = c.attrs.scale;
                        Some(match c.attrs.pse_type as i64 {
                            1 => scale * (qk + pse),
                            _ => scale * qk + pse,
                        })
                    })
                    .collect();
                // Append the sink column (spec §3, unscaled).
                let mut logits: Vec<f64> = row.iter().flatten().copied().collect();
                if let Some(s) = sink {
                    logits.push(s[h]);
                }
                if logits.is_empty() {
                    // Fully masked, no sink: out 0, max −FLT_MAX, sum +FLT_MAX.
                    smax[at..at + 8].fill(f32::MIN);
                    ssum[at..at + 8].fill(f32::MAX);
                    continue;
                }
                let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let l: f64 = logits.iter().map(|x| (x - m).exp()).sum();
                smax[at..at + 8].fill(m as f32);
                ssum[at..at + 8].fill(l as f32);
                // Normalise, then apply dropout (kept: P/keepProb; bit LSB first), then P·V.
                for (j, s) in row.iter().enumerate() {
                    let Some(s) = s else { continue };
                    let mut p = (s - m).exp() / l;
                    if let Some(mask) = &c.drop_mask {
                        if c.attrs.keep_prob < 1.0 {
                            let e = base + i * skv + j;
                            let bit = (mask[e / 8] >> (e % 8)) & 1;
                            p = p * bit as f64 / c.attrs.keep_prob;
                        }
                    }
                    for x in 0..dv {
                        out[((cum_q + i) * n + h) * dv + x] +=
                            p * v[((cum_kv + j) * nkv + kvh) * dv + x];
                    }
                }
            }
        }
        cum_q += sq;
        cum_kv += skv;
        cum_elems += n * sq * skv;
    }
    SpecOut {
        out,
        max: smax,
        sum: ssum,
    }
}

// ---------------------------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------------------------

/// Statistics: the special values (0, −FLT_MAX, +FLT_MAX) must match exactly, everything else
/// to `abs + rel·|exp|`; `Err` names the first mismatch as `what[index]`.
pub fn check_stats(what: &str, got: &[f32], exp: &[f32], abs: f64, rel: f64) -> Result<(), String> {
    if got.len() != exp.len() {
        return Err(format!("{what}: length {} != {}", got.len(), exp.len()));
    }
    for (idx, (&g, &e)) in got.iter().zip(exp).enumerate() {
        let ok = if e == 0.0 || e == f32::MIN || e == f32::MAX {
            g == e
        } else {
            (g as f64 - e as f64).abs() <= abs + rel * (e as f64).abs()
        };
        if !ok {
            return Err(format!("{what}[{idx}]: got {g:e}, expected {e:e}"));
        }
    }
    Ok(())
}

/// [`check_stats`] with a relative tolerance only (4 f32 ulps is `rel` 2^-21: both sides round
/// an f64 to f32, the f64 sums may differ in order), panicking with its message.
pub fn assert_stats(what: &str, got: &[f32], exp: &[f32], rel: f64) {
    if let Err(e) = check_stats(what, got, exp, 0.0, rel) {
        panic!("{e}");
    }
}

/// Default tolerances for f64 outputs vs the independent forward: the two compute the same sums
/// in a different order, so agreement is to a few f64 ulps of the O(1) values.
pub const F64_ABS: f64 = 1e-12;
pub const F64_REL: f64 = 1e-12;
/// f32 statistics, 4 ulps.
pub const STAT_REL: f64 = 4.0 / (1u64 << 23) as f64;

/// Reference forward in f64 vs the independent forward; returns the reference output.
pub fn check_fwd_f64(c: &Case) -> VarlenFwdOut<f64> {
    let got = varlen_fwd::<f64>(&c.problem(), &c.q, &c.k, &c.v);
    let exp = spec_fwd(c, &c.q, &c.k, &c.v, c.sink_f64().as_deref());
    assert_close(
        "attention_out",
        &got.attention_out,
        &exp.out,
        F64_ABS,
        F64_REL,
    );
    assert_stats("softmax_max", &got.softmax_max, &exp.max, STAT_REL);
    assert_stats("softmax_sum", &got.softmax_sum, &exp.sum, STAT_REL);
    got
}

pub fn to_elem<T: Element>(x: &[f64]) -> Vec<T> {
    x.iter().map(|&v| T::from_f64(v)).collect()
}

pub fn to_f64<T: Element>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.to_f64()).collect()
}

// ---------------------------------------------------------------------------------------------
// Gradients
// ---------------------------------------------------------------------------------------------

/// Gradients of the loss w.r.t. q, k, v and the sink.
#[derive(Clone, Debug)]
pub struct Grads {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    pub dsink: Option<Vec<f64>>,
    /// For a dense pse (pseType 0/1).
    pub dpse: Option<Vec<f64>>,
}

/// Central finite differences of the loss w.r.t. every element of a dense (f32) pse, with the
/// step actually taken in f32 (`FD_SINK_STEP` nominal); `None` without a dense pse.
pub fn numeric_dpse(c: &Case, w: &[f64]) -> Option<Vec<f64>> {
    let PseSpec::Dense(pse) = &c.pse else {
        return None;
    };
    let loss_with = |ps: &[f32]| -> f64 {
        let mut p = c.problem();
        p.pse = Pse::Dense(ps);
        let out = varlen_fwd::<f64>(&p, &c.q, &c.k, &c.v).attention_out;
        out.iter().zip(w).map(|(o, w)| o * w).sum()
    };
    Some(
        (0..pse.len())
            .map(|e| {
                let (mut pp, mut pm) = (pse.clone(), pse.clone());
                pp[e] += FD_SINK_STEP;
                pm[e] -= FD_SINK_STEP;
                let step = pp[e] as f64 - pm[e] as f64;
                (loss_with(&pp) - loss_with(&pm)) / step
            })
            .collect(),
    )
}

/// Finite-difference step for q, k, v (f64).
pub const FD_STEP: f64 = 1e-5;
/// Finite-difference step for the f32 sink: 2^-16 ≈ 1.5e-5, exact on the sink grid (k/64).
pub const FD_SINK_STEP: f32 = 1.0 / 65536.0;
/// Gradient tolerance: |fd − an| ≤ GRAD_ABS + GRAD_REL·|fd|. The analytic side recomputes P from
/// f32 statistics (~1e-7 relative), the central difference has O(h²) ≈ 1e-10 truncation and
/// ~1e-11 rounding error.
pub const GRAD_ABS: f64 = 1e-6;
pub const GRAD_REL: f64 = 1e-5;

/// L = Σ out ∘ W through the reference forward (T = f64).
pub fn loss(c: &Case, q: &[f64], k: &[f64], v: &[f64], sink: Option<&[f32]>, w: &[f64]) -> f64 {
    let mut p = c.problem();
    p.sink = sink;
    let out = varlen_fwd::<f64>(&p, q, k, v).attention_out;
    out.iter().zip(w).map(|(o, w)| o * w).sum()
}

/// Central finite differences of [`loss`] w.r.t. every element of q, k, v and the sink.
pub fn numeric_grads(c: &Case, w: &[f64]) -> Grads {
    let sink = c.sink.clone();
    let fd = |which: usize| -> Vec<f64> {
        let base = [&c.q, &c.k, &c.v][which];
        (0..base.len())
            .map(|idx| {
                let mut bufs = [c.q.clone(), c.k.clone(), c.v.clone()];
                bufs[which][idx] = base[idx] + FD_STEP;
                let lp = loss(c, &bufs[0], &bufs[1], &bufs[2], sink.as_deref(), w);
                bufs[which][idx] = base[idx] - FD_STEP;
                let lm = loss(c, &bufs[0], &bufs[1], &bufs[2], sink.as_deref(), w);
                (lp - lm) / (2.0 * FD_STEP)
            })
            .collect()
    };
    let dsink = sink.as_ref().map(|s| {
        (0..s.len())
            .map(|h| {
                let mut sp = s.clone();
                let mut sm = s.clone();
                sp[h] += FD_SINK_STEP;
                sm[h] -= FD_SINK_STEP;
                let step = sp[h] as f64 - sm[h] as f64; // the step actually taken
                assert_eq!(step, 2.0 * FD_SINK_STEP as f64, "sink step not exact");
                let lp = loss(c, &c.q, &c.k, &c.v, Some(&sp), w);
                let lm = loss(c, &c.q, &c.k, &c.v, Some(&sm), w);
                (lp - lm) / step
            })
            .collect()
    });
    Grads {
        dq: fd(0),
        dk: fd(1),
        dv: fd(2),
        dsink,
        dpse: numeric_dpse(c, w),
    }
}

/// `varlen_bwd` with `dy = W`, fed the forward's own output and statistics.
pub fn analytic_grads(c: &Case, w: &[f64]) -> Grads {
    let p = c.problem();
    let fwd = varlen_fwd::<f64>(&p, &c.q, &c.k, &c.v);
    let g = varlen_bwd::<f64>(
        &p,
        &c.q,
        &c.k,
        &c.v,
        w,
        &fwd.attention_out,
        &fwd.softmax_max,
        &fwd.softmax_sum,
    );
    Grads {
        dq: g.dq,
        dk: g.dk,
        dv: g.dv,
        dsink: g.dsink.map(|s| s.into_iter().map(|x| x as f64).collect()),
        dpse: g.dpse,
    }
}

/// Compares every component; `Err` lists each mismatching one.
pub fn compare_grads(fd: &Grads, an: &Grads) -> Result<(), String> {
    let mut errors = Vec::new();
    let mut check = |name: &str, f: &[f64], a: &[f64]| {
        if let Err(e) = check_close(name, a, f, GRAD_ABS, GRAD_REL) {
            errors.push(e);
        }
    };
    check("dq", &fd.dq, &an.dq);
    check("dk", &fd.dk, &an.dk);
    check("dv", &fd.dv, &an.dv);
    let mut presence = Vec::new();
    for (name, f, a) in [
        ("dsink", &fd.dsink, &an.dsink),
        ("dpse", &fd.dpse, &an.dpse),
    ] {
        match (f, a) {
            (Some(f), Some(a)) => check(name, f, a),
            (None, None) => {}
            (f, a) => presence.push(format!(
                "{name} presence differs: fd {:?}, analytic {:?}",
                f.is_some(),
                a.is_some()
            )),
        }
    }
    errors.extend(presence);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

/// A random weight tensor W for the loss, shaped like the output.
pub fn loss_weights(c: &Case, seed: u64) -> Vec<f64> {
    let len = c.dims.t_q() * c.dims.head_num * c.dims.value_dim;
    Rng::new(seed).vec(len, 1.0)
}

/// The full check: numeric vs analytic, plus a guard that the gradients are not trivially zero.
/// Returns both for callers that want to inspect them.
pub fn gradcheck(c: &Case, seed: u64) -> (Grads, Grads) {
    gradcheck_with(c, seed, true)
}

/// [`gradcheck`], with the non-triviality guard on dq and dk switched off when `require_dqk` is
/// false (a row with a single allowed column and no sink has P ≡ 1, so no q/k gradient).
pub fn gradcheck_with(c: &Case, seed: u64, require_dqk: bool) -> (Grads, Grads) {
    let w = loss_weights(c, seed);
    let fd = numeric_grads(c, &w);
    let an = analytic_grads(c, &w);
    if let Err(e) = compare_grads(&fd, &an) {
        panic!(
            "gradient check failed for {:?} / {:?}:\n{e}",
            c.dims, c.attrs
        );
    }
    let max_abs = |x: &[f64]| x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (name, g) in [("dq", &fd.dq), ("dk", &fd.dk), ("dv", &fd.dv)] {
        if !require_dqk && name != "dv" {
            continue;
        }
        assert!(
            max_abs(g) > 1e-3,
            "{name} is trivially ~0: the check proves nothing"
        );
    }
    if let Some(s) = &fd.dsink {
        assert!(
            max_abs(s) > 1e-3,
            "dsink is trivially ~0: the check proves nothing"
        );
    }
    if let Some(s) = &fd.dpse {
        assert!(
            max_abs(s) > 1e-3,
            "dpse is trivially ~0: the check proves nothing"
        );
    }
    (fd, an)
}
