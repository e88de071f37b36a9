//! Simulated max / min: `aclnnMaxDim` / `aclnnMinDim` (values and indices), `aclnnArgMax` /
//! `aclnnArgMin` and `aclnnAmax` / `aclnnAmin`.

use burn_ascend_cann::acl::ffi::*;

use super::*;
use crate::math::required_dims;
use crate::state::{guard, required};

/// Index of the max (`max`) or min of `xs` over `idx`: the first extreme; a NaN wins (as
/// torch's max/argmax propagate NaN).
fn extreme(xs: &[f64], idx: &[usize], max: bool) -> usize {
    let mut best = 0usize;
    for (k, &i) in idx.iter().enumerate() {
        let (v, b) = (xs[i], xs[idx[best]]);
        if b.is_nan() {
            break;
        }
        if v.is_nan() || (max && v > b) || (!max && v < b) {
            best = k;
        }
    }
    best
}

/// The reduced axis of a one-dim reduction (none for a 0-d input) and the output's shape.
fn one_dim(op: &str, dims: &[usize], dim: i64, keep: bool) -> SimResult<(Vec<usize>, Vec<usize>)> {
    let d = normalize_dim(op, dim, dims.len())?;
    let axes: Vec<usize> = if dims.is_empty() { vec![] } else { vec![d] };
    let want = reduced(dims, &axes, keep);
    Ok((axes, want))
}

fn dim_with_indices(op: &'static str, max: bool, p: DimWithIndicesParams) -> SimResult<()> {
    let a = required(p.self_, "self")?;
    let o = required(p.out, "out")?;
    let i = required(p.indices, "indices")?;
    dtype_in(&a, op, "self", REAL)?;
    same_dtype(op, &[(&a, "self"), (&o, "out")])?;
    dtype_in(&i, op, "indices", INDEX)?;
    let (axes, want) = one_dim(op, &a.dims, p.dim, p.keepdim)?;
    shape_is(op, "out", &o, &want)?;
    shape_is(op, "indices", &i, &want)?;
    submit(
        op,
        move || {
            let x = values(&a, "self")?;
            let (mut v, mut k) = (Vec::new(), Vec::new());
            for g in groups(&a.dims, &axes) {
                let b = extreme(&x, &g, max);
                v.push(x[g[b]]);
                k.push(b as f64);
            }
            o.write("out", &encode(&v, o.dtype))?;
            i.write("indices", &encode(&k, i.dtype))
        },
        p.workspace_size,
        p.executor,
    )
}

first_stage!(max_dim, |p| {
    guard(|| dim_with_indices(names::max_dim, true, p))
});
first_stage!(min_dim, |p| {
    guard(|| dim_with_indices(names::min_dim, false, p))
});

fn arg(op: &'static str, max: bool, p: ArgParams) -> SimResult<()> {
    let a = required(p.self_, "self")?;
    let o = required(p.out, "out")?;
    dtype_in(&a, op, "self", REAL)?;
    dtype_in(&o, op, "out", INDEX)?;
    let (axes, want) = one_dim(op, &a.dims, p.dim, p.keepdim)?;
    shape_is(op, "out", &o, &want)?;
    submit(
        op,
        move || {
            let x = values(&a, "self")?;
            let k: Vec<f64> = groups(&a.dims, &axes)
                .iter()
                .map(|g| extreme(&x, g, max) as f64)
                .collect();
            o.write("out", &encode(&k, o.dtype))
        },
        p.workspace_size,
        p.executor,
    )
}

first_stage!(arg_max, |p| { guard(|| arg(names::arg_max, true, p)) });
first_stage!(arg_min, |p| { guard(|| arg(names::arg_min, false, p)) });

fn amax_amin(op: &'static str, max: bool, p: AmaxParams) -> SimResult<()> {
    let a = required(p.self_, "self")?;
    let o = required(p.out, "out")?;
    let dims = required_dims(op, p.dim)?;
    dtype_in(&a, op, "self", REAL)?;
    same_dtype(op, &[(&a, "self"), (&o, "out")])?;
    let mut axes = Vec::new();
    for &d in &dims {
        let d = normalize_dim(op, d, a.dims.len())?;
        if axes.contains(&d) {
            return invalid(format!("{op}: dim {dims:?} repeats {d}"));
        }
        axes.push(d);
    }
    if dims.is_empty() {
        // An empty dim list reduces every dim (as aclnnAmax documents).
        axes = (0..a.dims.len()).collect();
    }
    let want = reduced(&a.dims, &axes, p.keep_dim);
    shape_is(op, "out", &o, &want)?;
    submit(
        op,
        move || {
            let x = values(&a, "self")?;
            let v: Vec<f64> = groups(&a.dims, &axes)
                .iter()
                .map(|g| x[g[extreme(&x, g, max)]])
                .collect();
            o.write("out", &encode(&v, o.dtype))
        },
        p.workspace_size,
        p.executor,
    )
}

first_stage!(amax, |p| { guard(|| amax_amin(names::amax, true, p)) });
first_stage!(amin, |p| { guard(|| amax_amin(names::amin, false, p)) });
