//! The fast CPU kernels of the fused transformer ops (one launch each where a training step
//! ran several) on f32: one pass over each row
//! instead of the five to a dozen whole-tensor passes of the composite, sums accumulated in
//! f32 lanes then f64 per row. Same formulas as [`crate::reference::fused`], which they are
//! tested against. Rows run in parallel on rayon's threads; each row's values and every sum
//! over rows (in row order) are those of a sequential pass, for any thread count.

use burn_ascend_contract::fused::{RotaryDims, RotaryMode};
use rayon::prelude::*;

use super::buffer;
use super::tile::{self, vectorized, SimdKernel};

/// RMSNorm over rows of `cols`: `(y, rstd)`.
pub fn rms_norm_fwd(x: &[f32], gamma: &[f32], cols: usize, epsilon: f64) -> (Vec<f32>, Vec<f32>) {
    let rows = x.len() / cols.max(1);
    let mut y = buffer::zeros(x.len());
    let mut rstd = vec![0.0f32; rows];
    if cols == 0 {
        return (y, rstd);
    }
    x.par_chunks_exact(cols)
        .zip(y.par_chunks_exact_mut(cols))
        .zip(rstd.par_iter_mut())
        .for_each(|((row, out), rstd)| {
            let sq: f64 = row.iter().map(|&v| v * v).sum::<f32>() as f64;
            let s = (1.0 / (sq / cols as f64 + epsilon).sqrt()) as f32;
            *rstd = s;
            for ((o, &v), &g) in out.iter_mut().zip(row).zip(gamma) {
                *o = v * s * g;
            }
        });
    (y, rstd)
}

/// Rows per task of [`rms_norm_bwd`]: fixed, so `dgamma`'s sum over rows (each chunk's in f64,
/// the chunks' in order) is the same for any thread count.
const RMS_BWD_ROWS: usize = 64;

/// RMSNorm's backward: `(dx, dgamma)`.
pub fn rms_norm_bwd(
    dy: &[f32],
    x: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    cols: usize,
) -> (Vec<f32>, Vec<f32>) {
    let mut dx = buffer::zeros(x.len());
    if cols == 0 {
        return (dx, Vec::new());
    }
    let chunk = RMS_BWD_ROWS * cols;
    let partials: Vec<Vec<f64>> = dx
        .par_chunks_mut(chunk)
        .zip(dy.par_chunks(chunk).zip(x.par_chunks(chunk)))
        .zip(rstd.par_chunks(RMS_BWD_ROWS))
        .map(|((dx, (dy, x)), rstd)| {
            let mut dgamma = vec![0.0f64; cols];
            for (((g, row), out), &s) in dy
                .chunks_exact(cols)
                .zip(x.chunks_exact(cols))
                .zip(dx.chunks_exact_mut(cols))
                .zip(rstd)
            {
                let dot: f32 = g
                    .iter()
                    .zip(row)
                    .zip(gamma)
                    .map(|((&d, &v), &w)| d * w * v)
                    .sum();
                let k = s * s * (dot / cols as f32);
                for c in 0..cols {
                    out[c] = s * (g[c] * gamma[c] - row[c] * k);
                    dgamma[c] += (g[c] * row[c] * s) as f64;
                }
            }
            dgamma
        })
        .collect();
    let mut dgamma = vec![0.0f64; cols];
    for p in &partials {
        for (d, v) in dgamma.iter_mut().zip(p) {
            *d += v;
        }
    }
    (dx, dgamma.into_iter().map(|v| v as f32).collect())
}

/// SwiGLU of `x = [outer, 2·half, inner]`, the first half the gate.
pub fn swiglu_fwd(x: &[f32], outer: usize, half: usize, inner: usize) -> Vec<f32> {
    let block = half * inner;
    let mut out = buffer::zeros(outer * block);
    for (o, y) in out.chunks_exact_mut(block.max(1)).enumerate() {
        let (a, b) = x[o * 2 * block..(o + 1) * 2 * block].split_at(block);
        vectorized(SwiGluPairFwd { y, a, b });
    }
    out
}

/// SwiGLU's backward: `dx` shaped as `x`.
pub fn swiglu_bwd(dy: &[f32], x: &[f32], outer: usize, half: usize, inner: usize) -> Vec<f32> {
    let block = half * inner;
    let mut dx = buffer::zeros(x.len());
    for o in 0..outer {
        let base = o * 2 * block;
        let g = &dy[o * block..(o + 1) * block];
        let (da, db) = dx[base..base + 2 * block].split_at_mut(block);
        let (a, b) = x[base..base + 2 * block].split_at(block);
        vectorized(SwiGluPairBwd { da, db, g, a, b });
    }
    dx
}

/// Elements per parallel task of the elementwise kernels: large enough to amortise a task,
/// small enough that two threads share an MLP activation evenly.
const ELEMENTWISE_CHUNK: usize = 1 << 14;

/// SwiGLU of the gate and up projections held apart (`a`, `b`, one shape): `silu(a) · b`
/// elementwise, what [`swiglu_fwd`] computes from their concatenation.
pub fn swiglu_pair_fwd(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len(), "swiglu_pair_fwd: gate and up lengths");
    let mut y = buffer::zeros(a.len());
    y.par_chunks_mut(ELEMENTWISE_CHUNK)
        .zip(a.par_chunks(ELEMENTWISE_CHUNK))
        .zip(b.par_chunks(ELEMENTWISE_CHUNK))
        .for_each(|((y, a), b)| vectorized(SwiGluPairFwd { y, a, b }));
    y
}

/// [`swiglu_pair_fwd`]'s backward: `(da, db)`, the formulas of [`swiglu_bwd`].
pub fn swiglu_pair_bwd(dy: &[f32], a: &[f32], b: &[f32]) -> (Vec<f32>, Vec<f32>) {
    assert!(
        a.len() == b.len() && dy.len() == a.len(),
        "swiglu_pair_bwd: dy, gate and up lengths"
    );
    let mut da = buffer::zeros(a.len());
    let mut db = buffer::zeros(a.len());
    da.par_chunks_mut(ELEMENTWISE_CHUNK)
        .zip(db.par_chunks_mut(ELEMENTWISE_CHUNK))
        .zip(dy.par_chunks(ELEMENTWISE_CHUNK))
        .zip(
            a.par_chunks(ELEMENTWISE_CHUNK)
                .zip(b.par_chunks(ELEMENTWISE_CHUNK)),
        )
        .for_each(|(((da, db), g), (a, b))| vectorized(SwiGluPairBwd { da, db, g, a, b }));
    (da, db)
}

/// `1 / (1 + e^−v)` through the vectorisable `exp`.
#[inline(always)]
fn sigmoid_fast(v: f32) -> f32 {
    1.0 / (1.0 + tile::exp(-v))
}

/// One chunk of [`swiglu_pair_fwd`], compiled for the CPU's widest vectors.
struct SwiGluPairFwd<'a> {
    y: &'a mut [f32],
    a: &'a [f32],
    b: &'a [f32],
}

impl SimdKernel for SwiGluPairFwd<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for ((y, &a), &b) in self.y.iter_mut().zip(self.a).zip(self.b) {
            *y = a * sigmoid_fast(a) * b;
        }
    }
}

/// One chunk of [`swiglu_pair_bwd`], compiled for the CPU's widest vectors.
struct SwiGluPairBwd<'a> {
    da: &'a mut [f32],
    db: &'a mut [f32],
    g: &'a [f32],
    a: &'a [f32],
    b: &'a [f32],
}

impl SimdKernel for SwiGluPairBwd<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for k in 0..self.g.len() {
            let (g, a, b) = (self.g[k], self.a[k], self.b[k]);
            let s = sigmoid_fast(a);
            self.da[k] = g * b * (s + s * (1.0 - s) * a);
            self.db[k] = g * a * s;
        }
    }
}

/// A row turned into its log-softmax in place: the maximum and the sum of exponentials in 16
/// lanes (vectorised, a fixed order), then `v − (max + ln Σ)`.
struct LogSoftmaxRow<'a> {
    row: &'a mut [f32],
}

impl SimdKernel for LogSoftmaxRow<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let mut lanes = [f32::NEG_INFINITY; 16];
        let chunks = self.row.chunks_exact(16);
        let tail = chunks.remainder();
        for c in chunks {
            for l in 0..16 {
                lanes[l] = lanes[l].max(c[l]);
            }
        }
        let max = lanes
            .iter()
            .chain(tail)
            .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let mut sums = [0.0f32; 16];
        let chunks = self.row.chunks_exact(16);
        let tail = chunks.remainder();
        for c in chunks {
            for l in 0..16 {
                sums[l] += tile::exp(c[l] - max);
            }
        }
        let se: f32 =
            sums.iter().sum::<f32>() + tail.iter().map(|&v| tile::exp(v - max)).sum::<f32>();
        let lse = max + se.ln();
        for v in self.row.iter_mut() {
            *v -= lse;
        }
    }
}

/// A row of log-probabilities turned into `scale · e^v` in place.
struct ScaledExpRow<'a> {
    row: &'a mut [f32],
    scale: f32,
}

impl SimdKernel for ScaledExpRow<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for v in self.row.iter_mut() {
            *v = self.scale * tile::exp(*v);
        }
    }
}

/// Softmax cross-entropy, mean over the rows whose target is not `ignore_index`:
/// `(loss, logProb)`. Targets must be in `[0, c)` or `ignore_index` (validated by the caller).
pub fn cross_entropy_fwd(
    x: &[f32],
    target: &[i64],
    c: usize,
    ignore_index: i64,
) -> (f32, Vec<f32>) {
    let mut log_prob = x.to_vec();
    let loss = cross_entropy_fwd_in_place(&mut log_prob, target, c, ignore_index);
    (loss, log_prob)
}

/// [`cross_entropy_fwd`] over `x`'s own buffer, which becomes `logProb`: the logits of a
/// language model's head are the largest tensor of a training step, and nothing else reads
/// them after the loss.
pub fn cross_entropy_fwd_in_place(
    x: &mut [f32],
    target: &[i64],
    c: usize,
    ignore_index: i64,
) -> f32 {
    if c == 0 {
        return f32::NAN;
    }
    // Each row's loss term (`None` when ignored), then their sum in row order.
    let terms: Vec<Option<f64>> = x
        .par_chunks_exact_mut(c)
        .zip(target.par_iter())
        .map(|(row, &t)| {
            vectorized(LogSoftmaxRow { row: &mut *row });
            (t != ignore_index).then(|| -(row[t as usize] as f64))
        })
        .collect();
    let (mut sum, mut count) = (0.0f64, 0usize);
    for term in terms.into_iter().flatten() {
        sum += term;
        count += 1;
    }
    (sum / count as f64) as f32
}

/// Cross-entropy's backward from `logProb`: `dx = g/count · (softmax − onehot)` on the rows
/// that count, zero on ignored rows.
pub fn cross_entropy_bwd(
    grad_loss: f32,
    log_prob: &[f32],
    target: &[i64],
    c: usize,
    ignore_index: i64,
) -> Vec<f32> {
    let mut dx = log_prob.to_vec();
    cross_entropy_bwd_in_place(grad_loss, &mut dx, target, c, ignore_index);
    dx
}

/// [`cross_entropy_bwd`] over `logProb`'s own buffer, which becomes `dx`.
pub fn cross_entropy_bwd_in_place(
    grad_loss: f32,
    log_prob: &mut [f32],
    target: &[i64],
    c: usize,
    ignore_index: i64,
) {
    let count = target.iter().filter(|&&t| t != ignore_index).count() as f32;
    let scale = grad_loss / count;
    if c == 0 {
        return;
    }
    log_prob
        .par_chunks_exact_mut(c)
        .zip(target.par_iter())
        .for_each(|(row, &t)| {
            if t == ignore_index {
                row.fill(0.0);
                return;
            }
            vectorized(ScaledExpRow {
                row: &mut *row,
                scale,
            });
            row[t as usize] -= scale;
        });
}

/// Rotary position embedding, `y = x·cos + rotate(x)·sin`, one pass per row of `x`.
pub fn rotary_fwd(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    dims: &RotaryDims,
    mode: RotaryMode,
) -> Vec<f32> {
    rotate_rows(x, cos, sin, dims, mode, false)
}

/// Rotary position embedding's `dx`: the transposed rotation, `dx = dy·cos + rotateᵀ(dy·sin)`.
pub fn rotary_bwd(
    dy: &[f32],
    cos: &[f32],
    sin: &[f32],
    dims: &RotaryDims,
    mode: RotaryMode,
) -> Vec<f32> {
    rotate_rows(dy, cos, sin, dims, mode, true)
}

/// Per pair `(a, b)` of a row: forward `(a·ca − b·sa, b·cb + a·sb)`; backward (the transpose)
/// `(a·ca + b·sb, b·cb − a·sa)`.
fn rotate_rows(
    v: &[f32],
    cos: &[f32],
    sin: &[f32],
    dims: &RotaryDims,
    mode: RotaryMode,
    transpose: bool,
) -> Vec<f32> {
    let d = dims.d;
    let h = d / 2;
    let mut out = buffer::zeros(v.len());
    if d == 0 {
        return out;
    }
    // Row `r` of `v` into `o`.
    let rotate = |r: usize, row: &[f32], o: &mut [f32]| {
        let c0 = dims.cos_row(r) * d;
        let (c, s) = (&cos[c0..c0 + d], &sin[c0..c0 + d]);
        match mode {
            RotaryMode::Half => {
                let (x1, x2) = row.split_at(h);
                let (o1, o2) = o.split_at_mut(h);
                let (c1, c2) = c.split_at(h);
                let (s1, s2) = s.split_at(h);
                for j in 0..h {
                    if transpose {
                        o1[j] = x1[j] * c1[j] + x2[j] * s2[j];
                        o2[j] = x2[j] * c2[j] - x1[j] * s1[j];
                    } else {
                        o1[j] = x1[j] * c1[j] - x2[j] * s1[j];
                        o2[j] = x2[j] * c2[j] + x1[j] * s2[j];
                    }
                }
            }
            RotaryMode::Interleave => {
                for j in 0..h {
                    let (a, b) = (2 * j, 2 * j + 1);
                    if transpose {
                        o[a] = row[a] * c[a] + row[b] * s[b];
                        o[b] = row[b] * c[b] - row[a] * s[a];
                    } else {
                        o[a] = row[a] * c[a] - row[b] * s[a];
                        o[b] = row[b] * c[b] + row[a] * s[b];
                    }
                }
            }
        }
    };
    // Rows in parallel, a fixed number per task: each row is rotated on its own.
    const ROWS: usize = 256;
    out.par_chunks_mut(ROWS * d)
        .zip(v.par_chunks(ROWS * d))
        .enumerate()
        .for_each(|(chunk, (out, v))| {
            for (i, (row, o)) in v.chunks_exact(d).zip(out.chunks_exact_mut(d)).enumerate() {
                rotate(chunk * ROWS + i, row, o);
            }
        });
    out
}
