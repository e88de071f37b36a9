//! Simulated comparison, mask, cast, max/min, activation and random-fill aclnn ops (the
//! elementwise part of issue 6). Validation as CANN's docs state it: a null required tensor or
//! scalar → 161001; a dtype outside the op's list, mixed input dtypes (CANN would promote; the
//! simulation refuses), shapes that do not broadcast, an `out` of the wrong shape/dtype or a
//! `dim` out of range → 161002. Inputs are read through their views (strides, offset; stride 0
//! for broadcast) and every element is computed in f64 on the host, then rounded once to the
//! output dtype (float → int truncates toward zero and saturates, as `aclnnCast` does; NaN → 0).
//! Int64 values beyond 2^53 lose precision in the simulation (not on CANN).
//!
//! Random fills (`aclnnInplaceUniform/Normal/Bernoulli`) use a counter-based generator keyed on
//! `(seed, offset + element index)` (SplitMix64 of the pair), so a call is a pure function of
//! its arguments, as CANN's Philox kernels are; the values differ from CANN's.

use std::ffi::c_void;

use half::{bf16, f16};

use super::math::{broadcast, broadcast_index, scalar, SIM_WORKSPACE};
use super::state::{self, guard, invalid, new_executor, required, SimErr, SimResult, SimTensor};
use crate::acl::ffi::*;

type T = *const AclTensor;
type S = *const AclScalar;
type Ws = *mut u64;
type Ex = *mut *mut AclOpExecutor;

const FLOATS: &[DataType] = &[
    DataType::Float,
    DataType::Float16,
    DataType::Bf16,
    DataType::Double,
];
const NUMERIC: &[DataType] = &[
    DataType::Float,
    DataType::Float16,
    DataType::Bf16,
    DataType::Double,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Bool,
];
const REAL: &[DataType] = &[
    DataType::Float,
    DataType::Float16,
    DataType::Bf16,
    DataType::Double,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
];
const INDEX: &[DataType] = &[DataType::Int32, DataType::Int64];

// ---- decoding ---------------------------------------------------------------------------------

fn dtype_in(t: &SimTensor, op: &str, name: &str, allowed: &[DataType]) -> SimResult<()> {
    if allowed.contains(&t.dtype) {
        Ok(())
    } else {
        invalid(format!(
            "{op}: {name} dtype must be one of {allowed:?}, got {:?}",
            t.dtype
        ))
    }
}

fn same_dtype(op: &str, ts: &[(&SimTensor, &str)]) -> SimResult<()> {
    let d = ts[0].0.dtype;
    if ts.iter().all(|(t, _)| t.dtype == d) {
        return Ok(());
    }
    let list: Vec<String> = ts
        .iter()
        .map(|(t, n)| format!("{n} {:?}", t.dtype))
        .collect();
    invalid(format!(
        "{op}: {} must have one dtype (the simulation does not promote)",
        list.join(", ")
    ))
}

fn shape_is(op: &str, name: &str, t: &SimTensor, want: &[usize]) -> SimResult<()> {
    if t.dims == want {
        Ok(())
    } else {
        invalid(format!("{op}: {name} must be {want:?}, got {:?}", t.dims))
    }
}

fn broadcast2(op: &str, a: &SimTensor, an: &str, b: &SimTensor, bn: &str) -> SimResult<Vec<usize>> {
    broadcast(&a.dims, &b.dims).ok_or_else(|| {
        SimErr(
            ACLNN_ERR_PARAM_INVALID,
            format!(
                "{op}: {an} {:?} and {bn} {:?} do not broadcast",
                a.dims, b.dims
            ),
        )
    })
}

/// The view's elements in row-major order as f64.
fn values(t: &SimTensor, name: &str) -> SimResult<Vec<f64>> {
    let b = t.read(name)?;
    let es = t.dtype.size();
    Ok(b.chunks_exact(es)
        .map(|c| match t.dtype {
            DataType::Float => f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            DataType::Float16 => f16::from_le_bytes([c[0], c[1]]).to_f64(),
            DataType::Bf16 => bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            DataType::Double => f64::from_le_bytes(c.try_into().unwrap_or([0; 8])),
            DataType::Int8 => f64::from(c[0] as i8),
            DataType::Uint8 => f64::from(c[0]),
            DataType::Bool => f64::from(u8::from(c[0] != 0)),
            DataType::Int16 => f64::from(i16::from_le_bytes([c[0], c[1]])),
            DataType::Uint16 => f64::from(u16::from_le_bytes([c[0], c[1]])),
            DataType::Int32 => f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            DataType::Uint32 => f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            DataType::Int64 => i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64,
            DataType::Uint64 => u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64,
        })
        .collect())
}

/// Rounds `v` once to `dtype` (Rust's `as`: float → int truncates and saturates, NaN → 0).
fn encode(v: &[f64], dtype: DataType) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * dtype.size());
    for &x in v {
        match dtype {
            DataType::Float => out.extend_from_slice(&(x as f32).to_le_bytes()),
            DataType::Float16 => out.extend_from_slice(&f16::from_f64(x).to_le_bytes()),
            DataType::Bf16 => out.extend_from_slice(&bf16::from_f64(x).to_le_bytes()),
            DataType::Double => out.extend_from_slice(&x.to_le_bytes()),
            DataType::Int8 => out.push(x as i8 as u8),
            DataType::Uint8 => out.push(x as u8),
            DataType::Bool => out.push(u8::from(x != 0.0)),
            DataType::Int16 => out.extend_from_slice(&(x as i16).to_le_bytes()),
            DataType::Uint16 => out.extend_from_slice(&(x as u16).to_le_bytes()),
            DataType::Int32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
            DataType::Uint32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
            DataType::Int64 => out.extend_from_slice(&(x as i64).to_le_bytes()),
            DataType::Uint64 => out.extend_from_slice(&(x as u64).to_le_bytes()),
        }
    }
    out
}

/// Values of `t` broadcast to `shape` (row-major).
fn values_as(t: &SimTensor, name: &str, shape: &[usize]) -> SimResult<Vec<f64>> {
    let v = values(t, name)?;
    Ok(broadcast_index(shape, &t.dims)
        .into_iter()
        .map(|i| v[i])
        .collect())
}

fn submit(
    op: &'static str,
    job: impl FnOnce() -> SimResult<()> + Send + 'static,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    // SAFETY: the out-pointers come from the caller per the op's prototype.
    unsafe { new_executor(op, SIM_WORKSPACE, Box::new(job), ws, ex) }
}

fn normalize_dim(op: &str, dim: i64, rank: usize) -> SimResult<usize> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if (0..r).contains(&d) {
        Ok(d as usize)
    } else {
        invalid(format!(
            "{op}: dim {dim} out of range for rank {rank} (allowed [{}, {}])",
            -r,
            r - 1
        ))
    }
}

/// The shape after reducing `axes` (kept as 1 or removed).
fn reduced(dims: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    dims.iter()
        .enumerate()
        .filter_map(|(i, &n)| match (axes.contains(&i), keep) {
            (true, true) => Some(1),
            (true, false) => None,
            (false, _) => Some(n),
        })
        .collect()
}

/// For each output position (row-major over the kept dims), the input positions of its slice
/// in order along the reduced axes.
fn groups(dims: &[usize], axes: &[usize]) -> Vec<Vec<usize>> {
    let outer: Vec<usize> = dims
        .iter()
        .enumerate()
        .map(|(i, &n)| if axes.contains(&i) { 1 } else { n })
        .collect();
    let map = broadcast_index(dims, &outer);
    let mut g = vec![Vec::new(); outer.iter().product()];
    for (k, &j) in map.iter().enumerate() {
        g[j].push(k);
    }
    g
}

// ---- int arithmetic (the int path of `aclnnAdd`/`Sub`/`Mul`/`Adds`/`Muls` in `math`) --------

/// The view's INT32/INT64 elements, exactly.
fn ints(t: &SimTensor, name: &str) -> SimResult<Vec<i64>> {
    let b = t.read(name)?;
    Ok(match t.dtype {
        DataType::Int32 => b
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => b
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    })
}

fn encode_ints(v: &[i64], dtype: DataType) -> Vec<u8> {
    match dtype {
        DataType::Int32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
    }
}

fn integral(op: &str, name: &str, x: f64) -> SimResult<i64> {
    if x.fract() == 0.0 && x.is_finite() {
        Ok(x as i64)
    } else {
        invalid(format!(
            "{op}: {name} {x} is not integral for integer operands (the simulation does not promote)"
        ))
    }
}

/// `out = self + alpha·other` (`alpha` Some; Sub passes `-alpha`) or `self · other` (`mul`) for
/// INT32/INT64 operands of one dtype, wrapping, broadcasting.
#[allow(clippy::too_many_arguments)] // the C prototype's operands plus the op name and kind
pub(super) fn int_binary(
    op: &'static str,
    mul: bool,
    a: SimTensor,
    b: SimTensor,
    o: SimTensor,
    alpha: Option<f64>,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    same_dtype(op, &[(&a, "self"), (&b, "other"), (&o, "out")])?;
    let shape = broadcast2(op, &a, "self", &b, "other")?;
    shape_is(op, "out", &o, &shape)?;
    let alpha = integral(op, "alpha", alpha.unwrap_or(1.0))?;
    submit(
        op,
        move || {
            let (x, y) = (ints(&a, "self")?, ints(&b, "other")?);
            let (ia, ib) = (
                broadcast_index(&shape, &a.dims),
                broadcast_index(&shape, &b.dims),
            );
            let v: Vec<i64> = ia
                .iter()
                .zip(&ib)
                .map(|(&i, &j)| {
                    if mul {
                        x[i].wrapping_mul(y[j])
                    } else {
                        x[i].wrapping_add(alpha.wrapping_mul(y[j]))
                    }
                })
                .collect();
            o.write("out", &encode_ints(&v, o.dtype))
        },
        ws,
        ex,
    )
}

/// `out = self + alpha·other` (`alpha` Some) or `self · other` with a scalar `other`, for
/// INT32/INT64 `self`.
pub(super) fn int_scalar(
    op: &'static str,
    a: SimTensor,
    other: f64,
    alpha: Option<f64>,
    o: SimTensor,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    same_dtype(op, &[(&a, "self"), (&o, "out")])?;
    shape_is(op, "out", &o, &a.dims)?;
    let s = integral(op, "other", other)?;
    let alpha = alpha.map(|al| integral(op, "alpha", al)).transpose()?;
    submit(
        op,
        move || {
            let v: Vec<i64> = ints(&a, "self")?
                .into_iter()
                .map(|x| match alpha {
                    Some(al) => x.wrapping_add(al.wrapping_mul(s)),
                    None => x.wrapping_mul(s),
                })
                .collect();
            o.write("out", &encode_ints(&v, o.dtype))
        },
        ws,
        ex,
    )
}

// ---- comparisons ------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Cmp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Cmp {
    fn apply(self, a: f64, b: f64) -> bool {
        match self {
            Self::Eq => a == b,
            Self::Ne => a != b,
            Self::Gt => a > b,
            Self::Ge => a >= b,
            Self::Lt => a < b,
            Self::Le => a <= b,
        }
    }
}

fn compare_tensor(
    op: &'static str,
    c: Cmp,
    self_: T,
    other: T,
    out: T,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let b = required(other, "other")?;
    let o = required(out, "out")?;
    dtype_in(&a, op, "self", NUMERIC)?;
    dtype_in(&b, op, "other", NUMERIC)?;
    same_dtype(op, &[(&a, "self"), (&b, "other")])?;
    dtype_in(&o, op, "out", &[DataType::Bool])?;
    let shape = broadcast2(op, &a, "self", &b, "other")?;
    shape_is(op, "out", &o, &shape)?;
    submit(
        op,
        move || {
            let (x, y) = (
                values_as(&a, "self", &shape)?,
                values_as(&b, "other", &shape)?,
            );
            let v: Vec<f64> = x
                .iter()
                .zip(&y)
                .map(|(&p, &q)| f64::from(u8::from(c.apply(p, q))))
                .collect();
            o.write("out", &encode(&v, DataType::Bool))
        },
        ws,
        ex,
    )
}

fn compare_scalar(
    op: &'static str,
    c: Cmp,
    self_: T,
    other: S,
    out: T,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let s = scalar(other, &format!("{op}: other"))?;
    let o = required(out, "out")?;
    dtype_in(&a, op, "self", NUMERIC)?;
    dtype_in(&o, op, "out", &[DataType::Bool])?;
    shape_is(op, "out", &o, &a.dims)?;
    submit(
        op,
        move || {
            let v: Vec<f64> = values(&a, "self")?
                .into_iter()
                .map(|p| f64::from(u8::from(c.apply(p, s))))
                .collect();
            o.write("out", &encode(&v, DataType::Bool))
        },
        ws,
        ex,
    )
}

macro_rules! compare {
    ($tws:ident, $tl:ident, $top:literal, $sws:ident, $sl:ident, $sop:literal, $c:expr) => {
        unsafe extern "C" fn $tws(self_: T, other: T, out: T, ws: Ws, ex: Ex) -> AclStatus {
            guard(|| compare_tensor($top, $c, self_, other, out, ws, ex))
        }
        launcher!($tl, $top);
        unsafe extern "C" fn $sws(self_: T, other: S, out: T, ws: Ws, ex: Ex) -> AclStatus {
            guard(|| compare_scalar($sop, $c, self_, other, out, ws, ex))
        }
        launcher!($sl, $sop);
    };
}

macro_rules! launcher {
    ($name:ident, $op:literal) => {
        unsafe extern "C" fn $name(
            ws: *mut c_void,
            size: u64,
            ex: *mut AclOpExecutor,
            stream: AclrtStream,
        ) -> AclStatus {
            state::launch($op, ws, size, ex, stream)
        }
    };
}

compare!(
    eq_t_ws,
    eq_t_l,
    "aclnnEqTensor",
    eq_s_ws,
    eq_s_l,
    "aclnnEqScalar",
    Cmp::Eq
);
compare!(
    ne_t_ws,
    ne_t_l,
    "aclnnNeTensor",
    ne_s_ws,
    ne_s_l,
    "aclnnNeScalar",
    Cmp::Ne
);
compare!(
    gt_t_ws,
    gt_t_l,
    "aclnnGtTensor",
    gt_s_ws,
    gt_s_l,
    "aclnnGtScalar",
    Cmp::Gt
);
compare!(
    ge_t_ws,
    ge_t_l,
    "aclnnGeTensor",
    ge_s_ws,
    ge_s_l,
    "aclnnGeScalar",
    Cmp::Ge
);
compare!(
    lt_t_ws,
    lt_t_l,
    "aclnnLtTensor",
    lt_s_ws,
    lt_s_l,
    "aclnnLtScalar",
    Cmp::Lt
);
compare!(
    le_t_ws,
    le_t_l,
    "aclnnLeTensor",
    le_s_ws,
    le_s_l,
    "aclnnLeScalar",
    Cmp::Le
);

// ---- masks, copy, logic -----------------------------------------------------------------------

unsafe extern "C" fn s_where_ws(
    condition: T,
    self_: T,
    other: T,
    out: T,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    const OP: &str = "aclnnSWhere";
    guard(|| {
        let c = required(condition, "condition")?;
        let a = required(self_, "self")?;
        let b = required(other, "other")?;
        let o = required(out, "out")?;
        dtype_in(&c, OP, "condition", &[DataType::Bool, DataType::Uint8])?;
        dtype_in(&a, OP, "self", NUMERIC)?;
        same_dtype(OP, &[(&a, "self"), (&b, "other"), (&o, "out")])?;
        let ab = broadcast2(OP, &a, "self", &b, "other")?;
        let Some(shape) = broadcast(&c.dims, &ab) else {
            return invalid(format!(
                "{OP}: condition {:?} does not broadcast with {ab:?}",
                c.dims
            ));
        };
        shape_is(OP, "out", &o, &shape)?;
        submit(
            OP,
            move || {
                let m = values_as(&c, "condition", &shape)?;
                let x = values_as(&a, "self", &shape)?;
                let y = values_as(&b, "other", &shape)?;
                let v: Vec<f64> = (0..m.len())
                    .map(|i| if m[i] != 0.0 { x[i] } else { y[i] })
                    .collect();
                o.write("out", &encode(&v, o.dtype))
            },
            ws,
            ex,
        )
    })
}
launcher!(s_where_l, "aclnnSWhere");

unsafe extern "C" fn masked_fill_ws(self_ref: T, mask: T, value: S, ws: Ws, ex: Ex) -> AclStatus {
    const OP: &str = "aclnnInplaceMaskedFillScalar";
    guard(|| {
        let a = required(self_ref, "selfRef")?;
        let m = required(mask, "mask")?;
        let v = scalar(value, &format!("{OP}: value"))?;
        dtype_in(&a, OP, "selfRef", NUMERIC)?;
        dtype_in(&m, OP, "mask", &[DataType::Bool])?;
        if broadcast(&a.dims, &m.dims).as_deref() != Some(&a.dims[..]) {
            return invalid(format!(
                "{OP}: mask {:?} must broadcast to selfRef {:?}",
                m.dims, a.dims
            ));
        }
        submit(
            OP,
            move || {
                let mask = values_as(&m, "mask", &a.dims)?;
                let mut x = values(&a, "selfRef")?;
                for (xi, &mi) in x.iter_mut().zip(&mask) {
                    if mi != 0.0 {
                        *xi = v;
                    }
                }
                a.write("selfRef", &encode(&x, a.dtype))
            },
            ws,
            ex,
        )
    })
}
launcher!(masked_fill_l, "aclnnInplaceMaskedFillScalar");

unsafe extern "C" fn logical_not_ws(self_: T, out: T, ws: Ws, ex: Ex) -> AclStatus {
    const OP: &str = "aclnnLogicalNot";
    guard(|| {
        let a = required(self_, "self")?;
        let o = required(out, "out")?;
        dtype_in(&a, OP, "self", NUMERIC)?;
        dtype_in(&o, OP, "out", &[DataType::Bool])?;
        shape_is(OP, "out", &o, &a.dims)?;
        submit(
            OP,
            move || {
                let v: Vec<f64> = values(&a, "self")?
                    .into_iter()
                    .map(|x| f64::from(u8::from(x == 0.0)))
                    .collect();
                o.write("out", &encode(&v, DataType::Bool))
            },
            ws,
            ex,
        )
    })
}
launcher!(logical_not_l, "aclnnLogicalNot");

fn logical(
    op: &'static str,
    and: bool,
    self_: T,
    other: T,
    out: T,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let b = required(other, "other")?;
    let o = required(out, "out")?;
    dtype_in(&a, op, "self", NUMERIC)?;
    dtype_in(&b, op, "other", NUMERIC)?;
    dtype_in(&o, op, "out", &[DataType::Bool])?;
    let shape = broadcast2(op, &a, "self", &b, "other")?;
    shape_is(op, "out", &o, &shape)?;
    submit(
        op,
        move || {
            let (x, y) = (
                values_as(&a, "self", &shape)?,
                values_as(&b, "other", &shape)?,
            );
            let v: Vec<f64> = x
                .iter()
                .zip(&y)
                .map(|(&p, &q)| {
                    let (p, q) = (p != 0.0, q != 0.0);
                    f64::from(u8::from(if and { p && q } else { p || q }))
                })
                .collect();
            o.write("out", &encode(&v, DataType::Bool))
        },
        ws,
        ex,
    )
}

unsafe extern "C" fn logical_and_ws(self_: T, other: T, out: T, ws: Ws, ex: Ex) -> AclStatus {
    guard(|| logical("aclnnLogicalAnd", true, self_, other, out, ws, ex))
}
launcher!(logical_and_l, "aclnnLogicalAnd");
unsafe extern "C" fn logical_or_ws(self_: T, other: T, out: T, ws: Ws, ex: Ex) -> AclStatus {
    guard(|| logical("aclnnLogicalOr", false, self_, other, out, ws, ex))
}
launcher!(logical_or_l, "aclnnLogicalOr");

unsafe extern "C" fn cast_ws(self_: T, dtype: i32, out: T, ws: Ws, ex: Ex) -> AclStatus {
    const OP: &str = "aclnnCast";
    guard(|| {
        let a = required(self_, "self")?;
        let o = required(out, "out")?;
        dtype_in(&a, OP, "self", NUMERIC)?;
        dtype_in(&o, OP, "out", NUMERIC)?;
        if DataType::from_raw(dtype) != Some(o.dtype) {
            return invalid(format!(
                "{OP}: dtype {dtype} must be out's dtype {:?}",
                o.dtype
            ));
        }
        shape_is(OP, "out", &o, &a.dims)?;
        submit(
            OP,
            move || o.write("out", &encode(&values(&a, "self")?, o.dtype)),
            ws,
            ex,
        )
    })
}
launcher!(cast_l, "aclnnCast");

// ---- max / min ------------------------------------------------------------------------------

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

unsafe extern "C" fn max_dim_ws(
    self_: T,
    dim: i64,
    keepdim: bool,
    out: T,
    indices: T,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    guard(|| {
        dim_with_indices(
            "aclnnMaxDim",
            true,
            self_,
            dim,
            keepdim,
            out,
            indices,
            ws,
            ex,
        )
    })
}
launcher!(max_dim_l, "aclnnMaxDim");
unsafe extern "C" fn min_dim_ws(
    self_: T,
    dim: i64,
    keepdim: bool,
    out: T,
    indices: T,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    guard(|| {
        dim_with_indices(
            "aclnnMinDim",
            false,
            self_,
            dim,
            keepdim,
            out,
            indices,
            ws,
            ex,
        )
    })
}
launcher!(min_dim_l, "aclnnMinDim");

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

unsafe extern "C" fn arg_max_ws(
    self_: T,
    dim: i64,
    keepdim: bool,
    out: T,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    guard(|| arg("aclnnArgMax", true, self_, dim, keepdim, out, ws, ex))
}
launcher!(arg_max_l, "aclnnArgMax");
unsafe extern "C" fn arg_min_ws(
    self_: T,
    dim: i64,
    keepdim: bool,
    out: T,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    guard(|| arg("aclnnArgMin", false, self_, dim, keepdim, out, ws, ex))
}
launcher!(arg_min_l, "aclnnArgMin");

#[allow(clippy::too_many_arguments)] // the C prototype plus the op name and kind
fn amax(
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

unsafe extern "C" fn amax_ws(
    self_: T,
    dim: *const AclIntArray,
    keep: bool,
    out: T,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    guard(|| amax("aclnnAmax", true, self_, dim, keep, out, ws, ex))
}
launcher!(amax_l, "aclnnAmax");
unsafe extern "C" fn amin_ws(
    self_: T,
    dim: *const AclIntArray,
    keep: bool,
    out: T,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    guard(|| amax("aclnnAmin", false, self_, dim, keep, out, ws, ex))
}
launcher!(amin_l, "aclnnAmin");

// ---- unary math, activations ------------------------------------------------------------------

/// `erf` (W. J. Cody's rational approximations as in Numerical Recipes' `erfc`, relative
/// error < 1.2e-7, enough for f32).
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        1.0 - r
    } else {
        r - 1.0
    }
}

fn gelu_exact(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044_715 * x * x * x)).tanh())
}

fn unary_map(
    op: &'static str,
    allowed: &[DataType],
    f: impl Fn(f64) -> f64 + Send + 'static,
    self_: T,
    out: T,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let o = required(out, "out")?;
    dtype_in(&a, op, "self", allowed)?;
    same_dtype(op, &[(&a, "self"), (&o, "out")])?;
    shape_is(op, "out", &o, &a.dims)?;
    submit(
        op,
        move || {
            let v: Vec<f64> = values(&a, "self")?.into_iter().map(f).collect();
            o.write("out", &encode(&v, o.dtype))
        },
        ws,
        ex,
    )
}

macro_rules! unary {
    ($ws:ident, $l:ident, $op:literal, $allowed:expr, $f:expr) => {
        unsafe extern "C" fn $ws(self_: T, out: T, ws: Ws, ex: Ex) -> AclStatus {
            guard(|| unary_map($op, $allowed, $f, self_, out, ws, ex))
        }
        launcher!($l, $op);
    };
}

const FLOAT_INT: &[DataType] = &[
    DataType::Float,
    DataType::Float16,
    DataType::Bf16,
    DataType::Double,
    DataType::Int8,
    DataType::Int32,
    DataType::Int64,
];

unary!(
    relu_ws,
    relu_l,
    "aclnnRelu",
    FLOAT_INT,
    // NaN stays NaN
    |x: f64| if x > 0.0 || x.is_nan() { x } else { 0.0 }
);
unary!(sigmoid_ws, sigmoid_l, "aclnnSigmoid", FLOATS, |x: f64| 1.0
    / (1.0 + (-x).exp()));
unary!(neg_ws, neg_l, "aclnnNeg", FLOAT_INT, |x: f64| -x);
unary!(
    reciprocal_ws,
    reciprocal_l,
    "aclnnReciprocal",
    FLOATS,
    |x: f64| 1.0 / x
);
unary!(sin_ws, sin_l, "aclnnSin", FLOATS, f64::sin);
unary!(cos_ws, cos_l, "aclnnCos", FLOATS, f64::cos);
unary!(erf_ws, erf_l, "aclnnErf", FLOATS, erf);

unsafe extern "C" fn gelu_v2_ws(x: T, approximate: i64, y: T, ws: Ws, ex: Ex) -> AclStatus {
    const OP: &str = "aclnnGeluV2";
    guard(|| {
        let f = match approximate {
            0 => gelu_exact,
            1 => gelu_tanh,
            other => {
                return invalid(format!(
                    "{OP}: approximate must be 0 (none) or 1 (tanh), got {other}"
                ))
            }
        };
        unary_map(OP, &FLOATS[..3], f, x, y, ws, ex)
    })
}
launcher!(gelu_v2_l, "aclnnGeluV2");

fn scalar_map(
    op: &'static str,
    allowed: &[DataType],
    f: impl Fn(f64) -> f64 + Send + 'static,
    self_: T,
    out: T,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    unary_map(op, allowed, f, self_, out, ws, ex)
}

unsafe extern "C" fn pow_ws(self_: T, exponent: S, out: T, ws: Ws, ex: Ex) -> AclStatus {
    const OP: &str = "aclnnPowTensorScalar";
    guard(|| {
        let e = scalar(exponent, &format!("{OP}: exponent"))?;
        scalar_map(OP, FLOATS, move |x| x.powf(e), self_, out, ws, ex)
    })
}
launcher!(pow_l, "aclnnPowTensorScalar");

unsafe extern "C" fn clamp_ws(self_: T, min: S, max: S, out: T, ws: Ws, ex: Ex) -> AclStatus {
    const OP: &str = "aclnnClamp";
    guard(|| {
        // Either bound may be null (not both), as in CANN.
        let lo = if min.is_null() {
            None
        } else {
            Some(scalar(min, &format!("{OP}: clipValueMin"))?)
        };
        let hi = if max.is_null() {
            None
        } else {
            Some(scalar(max, &format!("{OP}: clipValueMax"))?)
        };
        if lo.is_none() && hi.is_none() {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{OP}: clipValueMin and clipValueMax are both null"),
            ));
        }
        scalar_map(OP, REAL, move |x| clamp(x, lo, hi), self_, out, ws, ex)
    })
}
launcher!(clamp_l, "aclnnClamp");

/// `min(max(x, lo), hi)`, NaN kept.
fn clamp(x: f64, lo: Option<f64>, hi: Option<f64>) -> f64 {
    let mut y = x;
    if let Some(l) = lo {
        if y < l {
            y = l;
        }
    }
    if let Some(h) = hi {
        if y > h {
            y = h;
        }
    }
    y
}

unsafe extern "C" fn clamp_min_ws(self_: T, min: S, out: T, ws: Ws, ex: Ex) -> AclStatus {
    const OP: &str = "aclnnClampMin";
    guard(|| {
        let lo = scalar(min, &format!("{OP}: clipValueMin"))?;
        scalar_map(
            OP,
            REAL,
            move |x| clamp(x, Some(lo), None),
            self_,
            out,
            ws,
            ex,
        )
    })
}
launcher!(clamp_min_l, "aclnnClampMin");

unsafe extern "C" fn clamp_max_ws(self_: T, max: S, out: T, ws: Ws, ex: Ex) -> AclStatus {
    const OP: &str = "aclnnClampMax";
    guard(|| {
        let hi = scalar(max, &format!("{OP}: clipValueMax"))?;
        scalar_map(
            OP,
            REAL,
            move |x| clamp(x, None, Some(hi)),
            self_,
            out,
            ws,
            ex,
        )
    })
}
launcher!(clamp_max_l, "aclnnClampMax");

// ---- random fills -------------------------------------------------------------------------------

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in `[0, 1)` for `(seed, counter)` (53 random bits).
fn uniform01(seed: u64, counter: u64) -> f64 {
    let h = splitmix(splitmix(seed) ^ counter.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

fn fill(
    op: &'static str,
    self_ref: T,
    allowed: &[DataType],
    f: impl Fn(u64) -> f64 + Send + 'static,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_ref, "selfRef")?;
    dtype_in(&a, op, "selfRef", allowed)?;
    submit(
        op,
        move || {
            let v: Vec<f64> = (0..a.numel() as u64).map(&f).collect();
            a.write("selfRef", &encode(&v, a.dtype))
        },
        ws,
        ex,
    )
}

#[allow(clippy::too_many_arguments)] // the C prototype
unsafe extern "C" fn uniform_ws(
    self_ref: T,
    from: f64,
    to: f64,
    seed: u64,
    offset: u64,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    const OP: &str = "aclnnInplaceUniform";
    guard(|| {
        if !(from.is_finite() && to.is_finite() && from <= to) {
            return invalid(format!("{OP}: need finite from <= to, got [{from}, {to})"));
        }
        let f = move |i: u64| {
            let x = from + (to - from) * uniform01(seed, offset.wrapping_add(i));
            // Rounding can reach `to`; keep the interval half-open.
            if x >= to && to > from {
                from.max(to - (to - from) * f64::EPSILON)
            } else {
                x
            }
        };
        fill(OP, self_ref, FLOATS, f, ws, ex)
    })
}
launcher!(uniform_l, "aclnnInplaceUniform");

unsafe extern "C" fn normal_ws(
    self_ref: T,
    mean: f32,
    std: f32,
    seed: i64,
    offset: i64,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    const OP: &str = "aclnnInplaceNormal";
    guard(|| {
        if !(std >= 0.0 && std.is_finite() && mean.is_finite()) {
            return invalid(format!(
                "{OP}: need finite mean and std >= 0, got mean {mean}, std {std}"
            ));
        }
        let (mean, std, seed, offset) =
            (f64::from(mean), f64::from(std), seed as u64, offset as u64);
        let f = move |i: u64| {
            // Box–Muller on two draws per element.
            let c = offset.wrapping_add(i).wrapping_mul(2);
            let u1 = 1.0 - uniform01(seed, c); // (0, 1]
            let u2 = uniform01(seed, c.wrapping_add(1));
            mean + std * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        };
        fill(OP, self_ref, FLOATS, f, ws, ex)
    })
}
launcher!(normal_l, "aclnnInplaceNormal");

unsafe extern "C" fn bernoulli_ws(
    self_ref: T,
    prob: S,
    seed: i64,
    offset: i64,
    ws: Ws,
    ex: Ex,
) -> AclStatus {
    const OP: &str = "aclnnInplaceBernoulli";
    guard(|| {
        let p = scalar(prob, &format!("{OP}: prob"))?;
        if !(0.0..=1.0).contains(&p) {
            return invalid(format!("{OP}: prob must be in [0, 1], got {p}"));
        }
        let (seed, offset) = (seed as u64, offset as u64);
        let f = move |i: u64| f64::from(u8::from(uniform01(seed, offset.wrapping_add(i)) < p));
        fill(OP, self_ref, REAL, f, ws, ex)
    })
}
launcher!(bernoulli_l, "aclnnInplaceBernoulli");

// ---- table ----------------------------------------------------------------------------------------

macro_rules! fns {
    ($ws:ident, $l:ident) => {
        Some(OpFns {
            workspace: $ws,
            launch: $l,
        })
    };
}

/// The simulated elementwise ops.
pub(super) const API: ElementwiseApi = ElementwiseApi {
    eq_tensor: fns!(eq_t_ws, eq_t_l),
    ne_tensor: fns!(ne_t_ws, ne_t_l),
    gt_tensor: fns!(gt_t_ws, gt_t_l),
    ge_tensor: fns!(ge_t_ws, ge_t_l),
    lt_tensor: fns!(lt_t_ws, lt_t_l),
    le_tensor: fns!(le_t_ws, le_t_l),
    eq_scalar: fns!(eq_s_ws, eq_s_l),
    ne_scalar: fns!(ne_s_ws, ne_s_l),
    gt_scalar: fns!(gt_s_ws, gt_s_l),
    ge_scalar: fns!(ge_s_ws, ge_s_l),
    lt_scalar: fns!(lt_s_ws, lt_s_l),
    le_scalar: fns!(le_s_ws, le_s_l),
    s_where: fns!(s_where_ws, s_where_l),
    inplace_masked_fill_scalar: fns!(masked_fill_ws, masked_fill_l),
    logical_not: fns!(logical_not_ws, logical_not_l),
    logical_and: fns!(logical_and_ws, logical_and_l),
    logical_or: fns!(logical_or_ws, logical_or_l),
    cast: fns!(cast_ws, cast_l),
    max_dim: fns!(max_dim_ws, max_dim_l),
    min_dim: fns!(min_dim_ws, min_dim_l),
    arg_max: fns!(arg_max_ws, arg_max_l),
    arg_min: fns!(arg_min_ws, arg_min_l),
    amax: fns!(amax_ws, amax_l),
    amin: fns!(amin_ws, amin_l),
    relu: fns!(relu_ws, relu_l),
    gelu_v2: fns!(gelu_v2_ws, gelu_v2_l),
    sigmoid: fns!(sigmoid_ws, sigmoid_l),
    neg: fns!(neg_ws, neg_l),
    reciprocal: fns!(reciprocal_ws, reciprocal_l),
    sin: fns!(sin_ws, sin_l),
    cos: fns!(cos_ws, cos_l),
    erf: fns!(erf_ws, erf_l),
    pow_tensor_scalar: fns!(pow_ws, pow_l),
    clamp: fns!(clamp_ws, clamp_l),
    clamp_min: fns!(clamp_min_ws, clamp_min_l),
    clamp_max: fns!(clamp_max_ws, clamp_max_l),
    inplace_uniform: fns!(uniform_ws, uniform_l),
    inplace_normal: fns!(normal_ws, normal_l),
    inplace_bernoulli: fns!(bernoulli_ws, bernoulli_l),
};
