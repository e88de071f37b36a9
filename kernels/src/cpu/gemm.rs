//! The one place the fast CPU kernels call into the `gemm` crate (whose API takes raw
//! pointers). Everything else in [`crate::cpu`] is safe code.
//!
//! `gemm` selects its micro-kernel at run time (AVX-512F when the crate's `x86-v4` feature is
//! compiled in and the CPU has it, else AVX2+FMA, else a portable one), so one binary runs on
//! every x86-64 CPU. [`matmul`] calls it with `Parallelism::None`: the attention kernels
//! parallelise over independent tiles with rayon, and a single-threaded product is
//! deterministic. [`par_matmul`] (the linear layers) runs one product on all threads: a
//! decode step's matrix-vector products and (driven from a pool thread) a prompt's column
//! parts on the awake helpers of `team`, a training batch's row blocks on rayon.

use super::team;
use super::tile::{vectorized, SimdKernel};

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
    // stay borrowed for the whole call. One thread runs the product.
    unsafe { product(dst.as_mut_ptr(), ld, lhs, rhs, accumulate, beta, 1) };
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

/// Panics unless `lhs · rhs` is defined (`lhs.cols == rhs.rows`) and both views lie inside
/// their slices: what every product of the linear layers checks first.
fn check_operands(lhs: Mat<'_>, rhs: Mat<'_>) {
    assert_eq!(rhs.rows, lhs.cols, "par_matmul: inner dimensions differ");
    assert!(
        lhs.in_bounds() && rhs.in_bounds(),
        "par_matmul: operand out of bounds"
    );
}

/// Products of at most this many rows (a decode step's batch) run as matrix-vector loops
/// ([`par_matmul`]); larger ones through `gemm` ([`many_rows`]).
const FEW_ROWS: usize = 16;

/// A row-major destination shared by the column parts of [`par_matmul`], each writing only
/// its own columns.
#[derive(Clone, Copy)]
struct SharedDst {
    ptr: *mut f32,
    len: usize,
}

impl SharedDst {
    /// The element at `offset` (a method, so closures capture the whole `Sync` struct rather
    /// than its raw-pointer field).
    fn at(self, offset: usize) -> *mut f32 {
        self.ptr.wrapping_add(offset)
    }
}

// SAFETY: `SharedDst` is only a pointer and a length; the parts / blocks that receive copies
// write disjoint columns / rows of the buffer it points to (see `column_parts`,
// `row_blocks`), which outlives them.
unsafe impl Send for SharedDst {}
// SAFETY: as for `Send`: the only access through a shared `SharedDst` is the disjoint column
// writes of `column_parts`' parts and the disjoint row writes of `row_blocks`' blocks.
unsafe impl Sync for SharedDst {}

/// `dst = lhs · rhs` (`dst` row-major `lhs.rows × rhs.cols`, leading dimension `rhs.cols`), on
/// all threads of the current rayon pool (the calling thread and `team`'s helpers for
/// few rows, and for a prompt's rows when the caller is a pool thread).
///
/// A product of few rows (a decode step: at most [`FEW_ROWS`]) is a matrix-vector product
/// that streams `rhs` once at the memory's speed, without packing and without a `gemm` call
/// per piece (whose set-up cost was a large part of a decode step): a row-major `rhs` (a
/// weight `[in, out]`) in [`K_CHUNKS`] chunks of whole rows whose partial products are added
/// in chunk order ([`few_rows_row_major`]), a transposed one (a weight `[out, in]`: the tied
/// head) as one dot product per output over its contiguous row ([`few_rows_transposed`]). A
/// larger product is single-threaded `gemm` calls on column parts ([`column_parts`], a
/// prompt) or row blocks ([`row_blocks`], a training batch). Either way every element is one sum in an
/// order that depends on the shape only (the chunks and `gemm`'s blocking do not depend on the
/// thread count), so results are identical run to run and for any number of threads.
///
/// Panics if the inner dimensions differ, a view addresses memory outside its slice or `dst`
/// is shorter than the product.
pub fn par_matmul(dst: &mut [f32], lhs: Mat<'_>, rhs: Mat<'_>) {
    let (m, n, k) = (lhs.rows, rhs.cols, lhs.cols);
    check_operands(lhs, rhs);
    assert!(dst.len() >= m * n, "par_matmul: destination too short");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        dst[..m * n].fill(0.0);
        return;
    }
    if m <= FEW_ROWS && rhs.cs == 1 {
        few_rows_row_major(&mut dst[..m * n], &rows_of(lhs), rhs);
        return;
    }
    if m <= FEW_ROWS && rhs.rs == 1 {
        few_rows_transposed(&mut dst[..m * n], &rows_of(lhs), rhs);
        return;
    }
    let shared = SharedDst {
        ptr: dst.as_mut_ptr(),
        len: m * n,
    };
    // SAFETY: `shared` is `dst`'s first `m·n` elements (checked above), a live `&mut` that
    // nothing else touches during the call; the operands are in-bounds views (checked above).
    unsafe { many_rows(shared, lhs, rhs) };
}

/// `dst = lhs · rhs` for more than [`FEW_ROWS`] rows: [`column_parts`] for a prompt's rows,
/// [`row_blocks`] for more. Every element is written, none read.
///
/// # Safety
/// `dst` must point at `lhs.rows · rhs.cols` floats (its `len`) valid for writes, with no other
/// access to them during the call; `lhs` and `rhs` must be in bounds with
/// `lhs.cols == rhs.rows`.
unsafe fn many_rows(dst: SharedDst, lhs: Mat<'_>, rhs: Mat<'_>) {
    if lhs.rows <= COLUMN_PARTS_ROWS {
        column_parts(dst, lhs, rhs);
    } else {
        row_blocks(dst, lhs, rhs);
    }
}

/// The fewest rows [`row_blocks`] gives a block: fewer threads than that many rows each
/// (a product of 300 rows on 16 threads runs on 2).
const MIN_BLOCK_ROWS: usize = 128;

/// `dst = lhs · rhs` as one block of consecutive rows per thread, each block one
/// single-threaded `gemm` call writing its own rows of `dst` (each packs `rhs` for itself).
/// Measured on a training step's products (1 024 rows, 2 threads): 280–335 GFLOP/s against
/// 230–318 on `gemm`'s own threads, whose split of the work synchronises its threads inside
/// each product. The thread count changes no result: `gemm` cuts the inner dimension by `k` and
/// the cache sizes only (`gemm-common`'s `kernel_params`), so every element is the same sum in
/// the same order in any block. These products stay on rayon rather than [`super::team`]'s
/// spinning helpers: with the helpers a full fine-tune step of the 135 M checkpoint ran 10 %
/// slower (236–239 against 258–266 tokens/s, `bench --model --quick`, alternating runs) —
/// between a training step's products the pool's threads run the step's other parallel work,
/// and a helper spinning beside them leaves three threads for two cores.
fn row_blocks(dst: SharedDst, lhs: Mat<'_>, rhs: Mat<'_>) {
    use rayon::prelude::*;
    let (m, n) = (lhs.rows, rhs.cols);
    let blocks = rayon::current_num_threads().min(m / MIN_BLOCK_ROWS).max(1);
    let rows = m.div_ceil(blocks);
    (0..m.div_ceil(rows)).into_par_iter().for_each(|b| {
        let r0 = b * rows;
        let lhs = Mat {
            data: &lhs.data[r0 * lhs.rs..],
            rows: rows.min(m - r0),
            ..lhs
        };
        debug_assert!(lhs.in_bounds());
        debug_assert!((r0 + lhs.rows) * n <= dst.len);
        // SAFETY: block `b` writes `dst[r·n + c]` for r0 <= r < r0 + lhs.rows and c < n only;
        // the blocks' row ranges are disjoint and end at most at row m, so every write lies in
        // the `m·n = dst.len` floats the caller owns exclusively for this call (they outlive
        // this parallel loop): no two threads touch one element and nothing else reads it
        // meanwhile. The operands are in-bounds views (checked by the caller; a block narrows
        // only the rows of `lhs`, and its first element `r0·rs` lies inside `lhs.data` as
        // `r0 < m`).
        unsafe { product(dst.at(r0 * n), n, lhs, rhs, false, 1.0, 1) };
    });
}

/// `lhs · rhs` as a new row-major vector (`lhs.rows × rhs.cols`), computed as
/// [`par_matmul`] does. A product of more than [`FEW_ROWS`] rows is written by `gemm` into
/// memory that is never zeroed first (every element is written once, `accumulate` false):
/// zeroing the outputs of a training step's products was a twentieth of its time.
///
/// Panics if the inner dimensions differ or a view addresses memory outside its slice.
pub fn par_matmul_new(lhs: Mat<'_>, rhs: Mat<'_>) -> Vec<f32> {
    let (m, n, k) = (lhs.rows, rhs.cols, lhs.cols);
    // The operands are checked by `par_matmul` / `par_matmul_new_gemm`, before any work.
    if m <= FEW_ROWS || n == 0 || k == 0 {
        let mut out = vec![0.0f32; m * n];
        par_matmul(&mut out, lhs, rhs);
        return out;
    }
    par_matmul_new_gemm(lhs, rhs)
}

/// `lhs · rhs` as a new row-major vector, always through `gemm` ([`column_parts`] or
/// [`row_blocks`]), never [`par_matmul`]'s matrix-vector loops, which stream a weight once for
/// a decode step's few rows but run at a tenth of `gemm`'s speed on a product whose few rows meet a long inner
/// dimension and many columns (a LoRA adapter's weight gradient `dA = dhᵀ · x`: 8 rows, 1 024
/// tokens, 576 columns: 24 GFLOP/s against 161 in column bands).
///
/// Panics if the inner dimensions differ or a view addresses memory outside its slice.
pub fn par_matmul_new_gemm(lhs: Mat<'_>, rhs: Mat<'_>) -> Vec<f32> {
    let (m, n, k) = (lhs.rows, rhs.cols, lhs.cols);
    check_operands(lhs, rhs);
    if m == 0 || n == 0 || k == 0 {
        return vec![0.0f32; m * n];
    }
    let len = m * n;
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let shared = SharedDst {
        ptr: out.spare_capacity_mut().as_mut_ptr().cast::<f32>(),
        len,
    };
    // SAFETY: `shared` points at the `len = m·n` floats `out` reserved, which nothing else
    // reads or writes during the call; the operands are in-bounds views (checked above) with
    // `lhs.cols == rhs.rows`.
    unsafe { many_rows(shared, lhs, rhs) };
    // SAFETY: `many_rows` wrote all `len` elements (the parts of `column_parts` cover every
    // column of every row, the blocks of `row_blocks` every row), so the first `len` elements are
    // initialised `f32`s, and `len` is the capacity reserved.
    unsafe { out.set_len(len) };
    out
}

/// Products of at most this many rows (a prompt's prefill) run as [`column_parts`];
/// larger ones (a training batch) as [`row_blocks`].
const COLUMN_PARTS_ROWS: usize = 256;

/// Column granularity of [`column_parts`]' parts: a part's first column is a multiple of it, so
/// every part runs `gemm`'s full-width micro-kernels on all but the product's last columns.
const PART_ALIGN: usize = 16;

/// `dst = lhs · rhs` as one column part per thread of the pool (widths in multiples of
/// [`PART_ALIGN`], as even as that allows), each one single-threaded `gemm` call writing its own
/// columns of `dst`. One call per thread, not many narrow bands: bands of 64 columns dealt over
/// the pool ran a prompt's products (72 rows, 2 threads, the 30 layers' 210 products) 9 % slower
/// in paired runs, 22–27 % slower beside another busy process, and bands of 96 / 128 / 192
/// columns left a thread idle at the end (a product of 576 columns in three bands). `gemm` cuts
/// the inner dimension by its length and the cache sizes only, so each element is the same sum
/// whatever part holds it: the thread count changes no bit. Called on a pool thread (see
/// [`super::on_worker`]), the parts run on [`super::team`]'s awake helpers: a prompt's 210
/// products, each with serial work before it, then find the other thread awake instead of
/// asleep in the pool (the prefill of a 135 M model 1–11 % faster, 5 % on average, in
/// alternating runs; the default `finetune` example and the 135 M model's training steps
/// unchanged). Called from outside the pool they stay a rayon loop: there a helper spinning
/// beside the caller and the pool's workers left three threads for two cores, and the default
/// `finetune` example ran 1.05–1.10 × as long.
fn column_parts(dst: SharedDst, lhs: Mat<'_>, rhs: Mat<'_>) {
    let (m, n) = (lhs.rows, rhs.cols);
    let units = n.div_ceil(PART_ALIGN);
    let parts = rayon::current_num_threads().clamp(1, units);
    let width = units.div_ceil(parts) * PART_ALIGN;
    let body = |b: usize| {
        let c0 = b * width;
        let w = width.min(n - c0);
        let rhs = Mat {
            data: &rhs.data[c0 * rhs.cs..],
            cols: w,
            ..rhs
        };
        debug_assert!(rhs.in_bounds());
        debug_assert!((m - 1) * n + c0 + w <= dst.len);
        // SAFETY: part `b` writes `dst[r·n + c]` for r < m and c0 <= c < c0 + w only (leading
        // dimension n, first element at offset c0); the parts' column ranges are disjoint and
        // `(m − 1)·n + c0 + w <= m·n = dst.len`, the length of the live `&mut` borrow the
        // caller took the pointer from, which outlives the parts (either loop below returns
        // when every part has), so no two threads touch one element and nothing else reads it
        // meanwhile. The operands are in-bounds views (checked by the caller; a part narrows
        // only the columns of `rhs`, and its first element `c0·cs` lies inside `rhs.data` as
        // `c0 < n`).
        unsafe { product(dst.at(c0), n, lhs, rhs, false, 1.0, 1) };
    };
    if rayon::current_thread_index().is_some() {
        team::map_parts(n.div_ceil(width), body);
    } else {
        use rayon::prelude::*;
        (0..n.div_ceil(width)).into_par_iter().for_each(body);
    }
}

/// The rows of a few-row `lhs` as one contiguous row-major buffer (`m·k` floats: small).
fn rows_of(lhs: Mat<'_>) -> Vec<f32> {
    if lhs.cs == 1 && lhs.rs == lhs.cols {
        return lhs.data[..lhs.rows * lhs.cols].to_vec();
    }
    (0..lhs.rows)
        .flat_map(|r| (0..lhs.cols).map(move |c| lhs.data[r * lhs.rs + c * lhs.cs]))
        .collect()
}

/// Chunks of `rhs`'s rows in a few-row product with a row-major `rhs`: enough tasks to share
/// out on any machine's threads; fixed, so the order of each sum does not depend on them.
const K_CHUNKS: usize = 16;

/// A product of few rows (`x`: `m × k`, row-major) with a row-major `rhs` (a weight
/// `[in, out]`): `rhs` cut into [`K_CHUNKS`] chunks of whole rows — each a contiguous stretch
/// of memory one task streams — each chunk's partial product accumulated row by row
/// (`y_r += x[r, i] · rhs[i, :]`, four rows of `rhs` per pass over `y`), and the partials
/// added in chunk order. The chunks run on the calling thread and [`super::team`]'s awake
/// helpers: as rayon loops, waking a sleeping worker for each of a decode step's 211 products
/// and putting the caller to sleep until it finished cost more than a third of the step.
fn few_rows_row_major(dst: &mut [f32], x: &[f32], rhs: Mat<'_>) {
    let (k, n) = (rhs.rows, rhs.cols);
    let m = x.len() / k;
    let rows = k.div_ceil(K_CHUNKS);
    let partials = team::map_parts(k.div_ceil(rows), |c| {
        let mut out = vec![0.0f32; m * n];
        vectorized(AxpyRows {
            out: &mut out,
            x,
            rhs,
            rows: c * rows..((c + 1) * rows).min(k),
        });
        out
    });
    dst.copy_from_slice(&partials[0]);
    for p in &partials[1..] {
        for (d, v) in dst.iter_mut().zip(p) {
            *d += v;
        }
    }
}

/// Outputs per task of [`few_rows_transposed`]: a band of `rhs`'s contiguous rows.
const OUT_BAND: usize = 64;

/// A product of few rows (`x`: `m × k`, row-major) with a transposed `rhs` whose columns are
/// contiguous (a weight stored `[out, in]`: the tied head): each output one dot product of a
/// row of `x` with a contiguous row of the weight, in 16 lanes then summed, bands of outputs
/// in parallel.
fn few_rows_transposed(dst: &mut [f32], x: &[f32], rhs: Mat<'_>) {
    let (k, n) = (rhs.rows, rhs.cols);
    let m = x.len() / k;
    let bands = team::map_parts(n.div_ceil(OUT_BAND), |b| {
        let first = b * OUT_BAND;
        let mut band = vec![0.0f32; OUT_BAND.min(n - first) * m];
        vectorized(DotBand {
            band: &mut band,
            x,
            rhs,
            first,
        });
        band
    });
    for (b, band) in bands.iter().enumerate() {
        for (j, outs) in band.chunks_exact(m).enumerate() {
            for (r, &v) in outs.iter().enumerate() {
                dst[r * n + b * OUT_BAND + j] = v;
            }
        }
    }
}

/// One chunk of [`few_rows_row_major`]: `out[r, :] += x[r, i] · rhs[i, :]` for `i` in `rows`,
/// four rows `i` per pass as `(a₀w₀ + a₁w₁) + (a₂w₂ + a₃w₃)` (a decode step's products at
/// 23–24 GB/s where one row per pass, loading and storing `y` for each, gave 21–22), compiled
/// for the CPU's widest vectors.
struct AxpyRows<'a> {
    out: &'a mut [f32],
    x: &'a [f32],
    rhs: Mat<'a>,
    rows: std::ops::Range<usize>,
}

impl SimdKernel for AxpyRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (k, n) = (self.rhs.rows, self.rhs.cols);
        let (d, rs) = (self.rhs.data, self.rhs.rs);
        let mut i = self.rows.start;
        while i + 4 <= self.rows.end {
            let w0 = &d[i * rs..i * rs + n];
            let w1 = &d[(i + 1) * rs..(i + 1) * rs + n];
            let w2 = &d[(i + 2) * rs..(i + 2) * rs + n];
            let w3 = &d[(i + 3) * rs..(i + 3) * rs + n];
            for (r, y) in self.out.chunks_exact_mut(n).enumerate() {
                let a = &self.x[r * k + i..r * k + i + 4];
                let (a0, a1, a2, a3) = (a[0], a[1], a[2], a[3]);
                for ((((y, &p), &q), &u), &v) in y.iter_mut().zip(w0).zip(w1).zip(w2).zip(w3) {
                    *y += (a0 * p + a1 * q) + (a2 * u + a3 * v);
                }
            }
            i += 4;
        }
        for i in i..self.rows.end {
            let w = &self.rhs.data[i * self.rhs.rs..i * self.rhs.rs + n];
            for (r, y) in self.out.chunks_exact_mut(n).enumerate() {
                let a = self.x[r * k + i];
                for (y, &w) in y.iter_mut().zip(w) {
                    *y += a * w;
                }
            }
        }
    }
}

/// One band of [`few_rows_transposed`]: outputs `first..` (each `m` rows, stored output-major
/// in `band`), each a dot product in 16 lanes, compiled for the CPU's widest vectors.
struct DotBand<'a> {
    band: &'a mut [f32],
    x: &'a [f32],
    rhs: Mat<'a>,
    first: usize,
}

impl SimdKernel for DotBand<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let k = self.rhs.rows;
        let m = self.x.len() / k.max(1);
        for (j, outs) in self.band.chunks_exact_mut(m).enumerate() {
            let col = self.first + j;
            let w = &self.rhs.data[col * self.rhs.cs..col * self.rhs.cs + k];
            for (r, o) in outs.iter_mut().enumerate() {
                *o = dot(&self.x[r * k..(r + 1) * k], w);
            }
        }
    }
}

/// `Σ a_i · b_i` in 16 lanes (vectorised), the lanes then the tail summed in order.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..16 {
            lanes[l] += x[l] * y[l];
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (x, y) in ta.iter().zip(tb) {
        sum += x * y;
    }
    sum
}

/// `dst[r·ld + c] = (accumulate ? dst[r·ld + c] : 0) + beta · (lhs · rhs)[r][c]` for
/// r < lhs.rows, c < rhs.cols, on `threads` threads (`gemm`'s).
///
/// # Safety
/// `dst` must be valid for reads (if `accumulate`) and writes at `r·ld + c` for those r and c,
/// with no other access to those elements during the call; `lhs` and `rhs` must be in bounds
/// with `lhs.cols == rhs.rows`.
unsafe fn product(
    dst: *mut f32,
    ld: usize,
    lhs: Mat<'_>,
    rhs: Mat<'_>,
    accumulate: bool,
    beta: f32,
    threads: usize,
) {
    let (m, w, k) = (lhs.rows, rhs.cols, lhs.cols);
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the caller guarantees `dst`'s extent and exclusivity and the operands' bounds.
    unsafe {
        gemm::gemm(
            m,
            w,
            k,
            dst,
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
            parallelism,
        );
    }
}
