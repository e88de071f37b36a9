//! Linear layers on the CPU: `y = x · W (+ b)`, `dX = dY · Wᵀ` and `dW = Xᵀ · dY`, each one
//! product over strided views of the operands as they lie in memory — a transposed weight
//! (a tied embedding used as the output head, the backward's `Wᵀ`) is read in place, never
//! copied into a contiguous layout first.
//!
//! Every product runs on all threads through [`super::gemm::par_matmul_new`], split by its
//! shape: a decode step's few rows stream the weight once at the memory's speed, a prompt's
//! rows run as column bands, a training batch as blocks of rows, one per thread.

use rayon::prelude::*;

use super::gemm::{par_matmul_new, par_matmul_new_gemm, Mat};

/// Where a linear layer's weight keeps its two dimensions: `[in, out]` (Burn's `Linear`) or
/// `[out, in]` (torch's `nn.Linear`, and an embedding table read as the output head).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightLayout {
    /// `[in, out]`, row-major: `y = x · W`.
    InOut,
    /// `[out, in]`, row-major: `y = x · Wᵀ`.
    OutIn,
}

/// The weight `w` (row-major, `in × out` or `out × in` as `layout` says) as the `in × out`
/// view the forward multiplies by.
pub fn weight_view(w: &[f32], inputs: usize, outputs: usize, layout: WeightLayout) -> Mat<'_> {
    match layout {
        WeightLayout::InOut => Mat::row_major(w, inputs, outputs, outputs),
        WeightLayout::OutIn => Mat::row_major(w, outputs, inputs, inputs).t(),
    }
}

/// `y [m, out] = x [m, in] · w (+ bias)`, `w` the `in × out` view of the weight
/// ([`weight_view`], or any strided view).
pub fn linear_fwd(x: Mat<'_>, w: Mat<'_>, bias: Option<&[f32]>) -> Vec<f32> {
    let n = w.cols;
    let mut y = par_matmul_new(x, w);
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "linear_fwd: bias length");
        y.par_chunks_mut(n.max(1))
            .for_each(|row| row.iter_mut().zip(b).for_each(|(y, b)| *y += b));
    }
    y
}

/// `dx [m, in] = dy [m, out] · wᵀ`, `w` the `in × out` view of the weight.
pub fn linear_dx(dy: Mat<'_>, w: Mat<'_>) -> Vec<f32> {
    par_matmul_new(dy, w.t())
}

/// The weight's gradient in `layout`: `xᵀ · dy` (`[in, out]`) or `dyᵀ · x` (`[out, in]`).
///
/// Always through `gemm` ([`par_matmul_new_gemm`]): a weight gradient is never a decode step's
/// few rows, and a LoRA adapter's (rank 8 against 1 024 tokens) ran at a tenth of `gemm`'s
/// speed in the matrix-vector loops. A gradient with few columns and more rows (LoRA's
/// `dB [out, r]`) is computed as its transpose, whose few rows `gemm` runs in column bands
/// (`gemm` is poor at 8 columns), then transposed: `r · out` floats.
pub fn linear_dw(x: Mat<'_>, dy: Mat<'_>, layout: WeightLayout) -> Vec<f32> {
    let (lhs, rhs) = match layout {
        WeightLayout::InOut => (x.t(), dy),
        WeightLayout::OutIn => (dy.t(), x),
    };
    let (m, n) = (lhs.rows, rhs.cols);
    if n >= FEW_COLS || n >= m {
        return par_matmul_new_gemm(lhs, rhs);
    }
    let t = par_matmul_new_gemm(rhs.t(), lhs.t());
    let mut out = vec![0.0f32; m * n];
    for (c, row) in t.chunks_exact(m).enumerate() {
        for (r, &v) in row.iter().enumerate() {
            out[r * n + c] = v;
        }
    }
    out
}

/// Columns below which a weight gradient with more rows is computed transposed.
const FEW_COLS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    /// `a · b` in f64, the plain triple loop.
    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
            }
        }
        c
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let mut t = vec![0.0; a.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = a[r * cols + c];
            }
        }
        t
    }

    fn assert_close(got: &[f32], want: &[f64], k: usize) {
        assert_eq!(got.len(), want.len());
        // f32 sums of k products of values in [-1, 1]: a few ulps of k.
        let tol = 1e-6 * k as f64 + 1e-5;
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((*g as f64 - w).abs() <= tol, "element {i}: {g} vs {w}");
        }
    }

    #[test]
    fn the_forward_equals_the_plain_product_in_both_layouts_for_every_band_shape() {
        // One row (decode), a few rows, rows > columns (row bands), columns > one band, a
        // batch's rows in row blocks (the last one shorter).
        for &(m, k, n) in &[
            (1, 70, 300),
            (3, 64, 129),
            (200, 33, 40),
            (130, 96, 260),
            (523, 40, 50),
        ] {
            let x = values(m * k, 1);
            let w = values(k * n, 2);
            let b = values(n, 3);
            let mut want = naive(&x, &w, m, k, n);
            for (i, v) in want.iter_mut().enumerate() {
                *v += b[i % n] as f64;
            }
            let xm = Mat::row_major(&x, m, k, k);
            let y = linear_fwd(xm, weight_view(&w, k, n, WeightLayout::InOut), Some(&b));
            assert_close(&y, &want, k);
            let wt = transpose(&w, k, n);
            let y = linear_fwd(xm, weight_view(&wt, k, n, WeightLayout::OutIn), Some(&b));
            assert_close(&y, &want, k);
        }
    }

    #[test]
    fn both_gradients_equal_the_plain_products_in_both_layouts() {
        for &(m, k, n) in &[
            (1, 40, 300),
            (150, 20, 70),
            (5, 160, 33),
            (301, 24, 20),
            // A LoRA adapter's: rank 8 against many tokens (dB computed transposed).
            (300, 64, 8),
        ] {
            let x = values(m * k, 4);
            let w = values(k * n, 5);
            let dy = values(m * n, 6);
            let (xm, dym) = (Mat::row_major(&x, m, k, k), Mat::row_major(&dy, m, n, n));
            let wt = transpose(&w, k, n);
            // dx = dy · Wᵀ.
            let want_dx = naive(&dy, &wt, m, n, k);
            let (w_io, w_oi) = (
                weight_view(&w, k, n, WeightLayout::InOut),
                weight_view(&wt, k, n, WeightLayout::OutIn),
            );
            assert_close(&linear_dx(dym, w_io), &want_dx, n);
            assert_close(&linear_dx(dym, w_oi), &want_dx, n);
            // dW = xᵀ · dy in [in, out]; its transpose in [out, in].
            let want_dw = naive(&transpose(&x, m, k), &dy, k, m, n);
            assert_close(&linear_dw(xm, dym, WeightLayout::InOut), &want_dw, m);
            let want_dwt = naive(&transpose(&dy, m, n), &x, n, m, k);
            assert_close(&linear_dw(xm, dym, WeightLayout::OutIn), &want_dwt, m);
        }
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        // Few rows (matrix-vector loops), a prompt's (column parts: one on 1 thread, one per
        // thread on more, widths in steps of 16 columns, a last part narrower) and a batch's
        // (row blocks: one on 1 thread, three on 3); the prompt shapes of a 135 M model's
        // projections among them.
        let shapes = [
            (3, 96, 700),
            (40, 300, 200),
            (72, 576, 192),
            (72, 576, 1536),
            (72, 1536, 576),
            (520, 300, 72),
        ];
        for &(m, k, n) in &shapes {
            let x = values(m * k, 7);
            let w = values(k * n, 8);
            let run = |threads| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
                    .install(|| {
                        linear_fwd(
                            Mat::row_major(&x, m, k, k),
                            Mat::row_major(&w, k, n, n),
                            None,
                        )
                    })
            };
            let one = run(1);
            for threads in [2, 3, 4, 7] {
                assert_eq!(one, run(threads), "{m}x{k}x{n} on {threads} threads");
            }
        }
    }
}
