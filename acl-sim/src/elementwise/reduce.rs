//! Simulated max / min: `aclnnMaxDim` / `aclnnMinDim` (values and indices), `aclnnArgMax` /
//! `aclnnArgMin` and `aclnnAmax` / `aclnnAmin`.

use burn_ascend_cann::acl::ffi::*;

use super::*;
use crate::state::{self, guard, required};

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

#[allow(clippy::too_many_arguments)] // the C prototype plus the op name and kind
fn dim_with_indices(
    op: &'static str,
    max: bool,
    self_: T,
    dim: i64,
    keepdim: bool,
    out: T,
    indices: T,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let o = required(out, "out")?;
    let i = required(indices, "indices")?;
    dtype_in(&a, op, "self", REAL)?;
    same_dtype(op, &[(&a, "self"), (&o, "out")])?;
    dtype_in(&i, op, "indices", INDEX)?;
    let d = normalize_dim(op, dim, a.dims.len())?;
    let axes: Vec<usize> = if a.dims.is_empty() { vec![] } else { vec![d] };
    let want = reduced(&a.dims, &axes, keepdim);
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
        ws,
        ex,
    )
}

first_stage!(max_dim, |p| {
    guard(|| {
        dim_with_indices(
            names::max_dim,
            true,
            p.self_,
            p.dim,
            p.keepdim,
            p.out,
            p.indices,
            p.workspace_size,
            p.executor,
        )
    })
});
first_stage!(min_dim, |p| {
    guard(|| {
        dim_with_indices(
            names::min_dim,
            false,
            p.self_,
            p.dim,
            p.keepdim,
            p.out,
            p.indices,
            p.workspace_size,
            p.executor,
        )
    })
});

#[allow(clippy::too_many_arguments)] // the C prototype plus the op name and kind
fn arg(
    op: &'static str,
    max: bool,
    self_: T,
    dim: i64,
    keepdim: bool,
    out: T,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let o = required(out, "out")?;
    dtype_in(&a, op, "self", REAL)?;
    dtype_in(&o, op, "out", INDEX)?;
    let d = normalize_dim(op, dim, a.dims.len())?;
    let axes: Vec<usize> = if a.dims.is_empty() { vec![] } else { vec![d] };
    let want = reduced(&a.dims, &axes, keepdim);
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
        ws,
        ex,
    )
}

first_stage!(arg_max, |p| {
    guard(|| {
        arg(
            names::arg_max,
            true,
            p.self_,
            p.dim,
            p.keepdim,
            p.out,
            p.workspace_size,
            p.executor,
        )
    })
});
first_stage!(arg_min, |p| {
    guard(|| {
        arg(
            names::arg_min,
            false,
            p.self_,
            p.dim,
            p.keepdim,
            p.out,
            p.workspace_size,
            p.executor,
        )
    })
});

#[allow(clippy::too_many_arguments)] // the C prototype plus the op name and kind
fn amax_amin(
    op: &'static str,
    max: bool,
    self_: T,
    dim: *const AclIntArray,
    keep: bool,
    out: T,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let o = required(out, "out")?;
    let Some(dims) = state::int_array(dim, "dim")? else {
        return Err(SimErr(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: dim is null"),
        ));
    };
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
    let want = reduced(&a.dims, &axes, keep);
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
        ws,
        ex,
    )
}

first_stage!(amax, |p| {
    guard(|| {
        amax_amin(
            names::amax,
            true,
            p.self_,
            p.dim,
            p.keep_dim,
            p.out,
            p.workspace_size,
            p.executor,
        )
    })
});
first_stage!(amin, |p| {
    guard(|| {
        amax_amin(
            names::amin,
            false,
            p.self_,
            p.dim,
            p.keep_dim,
            p.out,
            p.workspace_size,
            p.executor,
        )
    })
});
