//! The one place the fast CPU kernels call into the `gemm` crate (whose API takes raw
//! pointers). Everything else in [`crate::cpu`] is safe code.
//!
//! `gemm` selects its micro-kernel at run time (AVX-512F when the crate's `x86-v4` feature is
//! compiled in and the CPU has it, else AVX2+FMA, else a portable one), so one binary runs on
//! every x86-64 CPU. It is called with `Parallelism::None`: the attention kernels parallelise
//! over independent tiles with rayon, and a single-threaded product is deterministic.

/// A read-only strided view of an `rows × cols` f32 matrix: element `(r, c)` is
/// `data[r·rs + c·cs]`.
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a> {
    /// Backing storage; every addressed element lies inside it (checked by [`matmul`]).
    pub data: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Row stride, in elements.
    pub rs: usize,
    /// Column stride, in elements.
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major matrix with leading dimension `ld` (≥ `cols`).
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize, ld: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: ld,
            cs: 1,
        }
    }

    /// The transpose (a view: strides swapped).
    pub fn t(self) -> Self {
        Self {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// Whether every element `(r, c)`, `r < rows`, `c < cols`, lies inside `data` and every
    /// offset fits in `isize`.
    fn in_bounds(&self) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        let last = (self.rows - 1)
            .checked_mul(self.rs)
            .and_then(|a| (self.cols - 1).checked_mul(self.cs).map(|b| (a, b)))
            .and_then(|(a, b)| a.checked_add(b));
        last.is_some_and(|l| l < self.data.len() && l <= isize::MAX as usize)
            && self.rs <= isize::MAX as usize
            && self.cs <= isize::MAX as usize
    }
}

/// `dst = (accumulate ? dst : 0) + beta · lhs · rhs`, with `dst` an `lhs.rows × rhs.cols`
/// row-major matrix of leading dimension `ld`.
///
/// Panics if the shapes disagree or a view addresses memory outside its slice.
pub fn matmul(dst: &mut [f32], ld: usize, lhs: Mat<'_>, rhs: Mat<'_>, accumulate: bool, beta: f32) {
    let (m, n, k) = (lhs.rows, rhs.cols, lhs.cols);
    assert_eq!(rhs.rows, k, "matmul: inner dimensions differ");
    assert!(
        lhs.in_bounds() && rhs.in_bounds(),
        "matmul: operand out of bounds"
    );
    if m == 0 || n == 0 {
        return;
    }
    assert!(n <= ld, "matmul: leading dimension smaller than the row");
    let dst_last = (m - 1).checked_mul(ld).and_then(|x| x.checked_add(n - 1));
    assert!(
        dst_last.is_some_and(|l| l < dst.len() && l <= isize::MAX as usize),
        "matmul: destination out of bounds"
    );
    if k == 0 {
        if !accumulate {
            for row in dst.chunks_mut(ld).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: `gemm` reads `lhs` at `lhs.data + r·rs + c·cs` for r < m, c < k, `rhs` at
    // `rhs.data + r·rs + c·cs` for r < k, c < n, and reads (if `accumulate`) and writes `dst`
    // at `dst + r·ld + c` for r < m, c < n. `in_bounds` and the `dst_last` assertion above
    // checked that the largest such offsets are inside the respective slices and fit in
    // `isize` (all strides are non-negative, so the smallest offset is 0). `dst` is a unique
    // `&mut` borrow, so it aliases neither operand, and both operands are `f32` slices that
    // stay borrowed for the whole call. `Parallelism::None` runs the product on this thread.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            ld as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            1.0,
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Row-major `c = a · b` for `a: m×k`, `b: k×n`, `c: m×n`, through the same `gemm` entry point
/// the attention kernels use, with up to `threads` threads (rayon's global pool; 1 = this
/// thread). For benchmarks: the denominator of "fraction of sgemm".
pub fn sgemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32], threads: usize) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    if threads <= 1 || m < 2 * threads {
        matmul(
            c,
            n,
            Mat::row_major(a, m, k, k),
            Mat::row_major(b, k, n, n),
            false,
            1.0,
        );
        return;
    }
    // Split the rows of c (and a) into `threads` bands, each a single-threaded product.
    use rayon::prelude::*;
    let band = m.div_ceil(threads);
    c[..m * n]
        .par_chunks_mut(band * n)
        .zip(a[..m * k].par_chunks(band * k))
        .for_each(|(c, a)| {
            let rows = c.len() / n;
            matmul(
                c,
                n,
                Mat::row_major(a, rows, k, k),
                Mat::row_major(b, k, n, n),
                false,
                1.0,
            );
        });
}
