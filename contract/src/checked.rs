//! Checked arithmetic for validation: every size, product and sum computed from user input
//! goes through these (as the scatter spec does with its own `checked_numel` / `mul`), so a
//! huge dimension or attribute is a typed error naming the parameter, never a wrap or a
//! debug-build overflow panic.

use crate::error::{AttnError, Result};

/// `∏ factors`, or a typed error naming `name` when it overflows `usize`.
pub(crate) fn product(name: &'static str, what: &str, factors: &[usize]) -> Result<usize> {
    factors
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            AttnError::invalid(name, format!("{what} = {factors:?} multiplied overflows"))
        })
}

/// `Σ terms`, or a typed error naming `name` when it overflows `usize`.
pub(crate) fn sum(
    name: &'static str,
    what: &str,
    terms: impl IntoIterator<Item = usize>,
) -> Result<usize> {
    terms
        .into_iter()
        .try_fold(0usize, |acc, x| acc.checked_add(x))
        .ok_or_else(|| AttnError::invalid(name, format!("{what} overflows")))
}

/// Refuses an attribute the device computes in f32 when it is not finite there (`1e300` is a
/// finite f64 but `inf` as the f32 the kernel reads).
pub(crate) fn finite_f32(name: &'static str, value: f64) -> Result<f32> {
    let v = value as f32;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(AttnError::invalid(
            name,
            format!(
                "must be finite as the f32 the device computes in, got {} (f32: {v})",
                num(value)
            ),
        ))
    }
}

/// `x` for an error message: plain decimal for ordinary magnitudes (`0`, `0.5`, `1.5`), the
/// exponent form far from them, so `1e-300` or `1e300` is not printed as 300 digits.
pub fn num(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 || !x.is_finite() || (1e-4..1e15).contains(&a) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}
