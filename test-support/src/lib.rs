//! Test helpers shared by the burn-ascend crates' test suites (a dev-dependency only): the
//! splitmix64 generator [`Rng`] and the tolerance check [`check_close`] /
//! [`assert_close`]. Op-specific case builders stay in the test suite that uses them.

use std::fmt::LowerExp;
use std::ops::{Add, Mul, Sub};

/// splitmix64: tiny, deterministic, platform independent (no `rand` dependency).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-a, a).
    pub fn sym(&mut self, a: f64) -> f64 {
        a * (2.0 * self.uniform() - 1.0)
    }

    /// `len` draws of [`Rng::sym`]`(a)`.
    pub fn vec(&mut self, len: usize, a: f64) -> Vec<f64> {
        (0..len).map(|_| self.sym(a)).collect()
    }

    /// `len` draws of [`Rng::sym`]`(a)`, rounded to f32.
    pub fn vec_f32(&mut self, len: usize, a: f64) -> Vec<f32> {
        (0..len).map(|_| self.sym(a) as f32).collect()
    }

    /// Uniform integer in [0, n) (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// A uniformly chosen element of `xs` (not empty).
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// The float types [`check_close`] compares in (f32, f64): the check runs in the type itself.
pub trait Real:
    Copy + PartialOrd + LowerExp + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self>
{
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
}

impl Real for f32 {
    fn abs(self) -> Self {
        f32::abs(self)
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}

impl Real for f64 {
    fn abs(self) -> Self {
        f64::abs(self)
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

/// `Ok` when `|got − exp| ≤ abs + rel·|exp|` everywhere (computed in `T`; NaN fails), else an
/// `Err` naming the worst element as `what[index]`.
pub fn check_close<T: Real>(
    what: &str,
    got: &[T],
    exp: &[T],
    abs: T,
    rel: T,
) -> Result<(), String> {
    if got.len() != exp.len() {
        return Err(format!("{what}: length {} != {}", got.len(), exp.len()));
    }
    // (index, excess over the tolerance); a NaN excess is the worst.
    let mut worst: Option<(usize, T)> = None;
    for (idx, (&g, &e)) in got.iter().zip(exp).enumerate() {
        let (diff, tol) = ((g - e).abs(), abs + rel * e.abs());
        if diff <= tol {
            continue;
        }
        let excess = diff - tol;
        let worse = match worst {
            None => true,
            Some((_, w)) => !w.is_nan() && (excess.is_nan() || excess > w),
        };
        if worse {
            worst = Some((idx, excess));
        }
    }
    match worst {
        None => Ok(()),
        Some((idx, _)) => Err(format!(
            "{what}[{idx}]: got {:e}, expected {:e} (|diff| {:e}, tol {abs:e} + {rel:e}·|exp|)",
            got[idx],
            exp[idx],
            (got[idx] - exp[idx]).abs()
        )),
    }
}

/// [`check_close`], panicking with its message.
pub fn assert_close<T: Real>(what: &str, got: &[T], exp: &[T], abs: T, rel: T) {
    if let Err(e) = check_close(what, got, exp, abs, rel) {
        panic!("{e}");
    }
}

/// The largest `|a[i] − b[i]|` (0 for empty slices; a NaN difference is skipped, as
/// `f32::max` skips it), for tests that report a gap or bound it themselves.
pub fn max_abs_diff<T: Real + From<f32>>(a: &[T], b: &[T]) -> T {
    assert_eq!(a.len(), b.len(), "max_abs_diff: lengths differ");
    a.iter().zip(b).fold(T::from(0.0), |m, (&x, &y)| {
        let d = (x - y).abs();
        if d > m {
            d
        } else {
            m
        }
    })
}
