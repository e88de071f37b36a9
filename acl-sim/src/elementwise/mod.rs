//! Simulated comparison, mask, cast, max/min, activation and random-fill aclnn ops (what the Burn
//! backend runs natively beyond arithmetic). Validation as CANN's docs state it: a null required
//! tensor or scalar → 161001; a dtype outside the op's list, mixed input dtypes (CANN would
//! promote; the simulation refuses), shapes that do not broadcast, an `out` of the wrong
//! shape/dtype or a `dim` out of range → 161002. Inputs are read through their views (strides,
//! offset; stride 0 for broadcast) and every element is computed in f64 on the host, then rounded
//! once to the output dtype (float → int truncates toward zero and saturates, as `aclnnCast` does;
//! NaN → 0). Int64 values beyond 2^53 lose precision in the simulation (not on CANN).
//!
//! Random fills (`aclnnInplaceUniform/Normal/Bernoulli`) use a counter-based generator keyed on
//! `(seed, offset + element index)` (SplitMix64 of the pair), so a call is a pure function of
//! its arguments, as CANN's Philox kernels are; the values differ from CANN's.

use burn_ascend_cann::acl::ffi::*;
use half::{bf16, f16};

use crate::math::{broadcast, broadcast_index};
use crate::state::{invalid, SimErr, SimResult, SimTensor};
use crate::wire::{dtype_in, ints, submit};

mod compare;
pub(crate) mod random;
mod reduce;
mod unary;

type T = *const AclTensor;
type Ws = *mut u64;
type Ex = *mut *mut AclOpExecutor;

/// The numeric dtypes, BOOL last (so that [`REAL`] and [`FLOATS`] are its leading parts).
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
/// The numeric dtypes but BOOL.
const REAL: &[DataType] = NUMERIC.split_at(NUMERIC.len() - 1).0;
/// The floating-point dtypes (`NUMERIC`'s first four).
const FLOATS: &[DataType] = NUMERIC.split_at(4).0;
const INDEX: &[DataType] = &[DataType::Int32, DataType::Int64];

// ---- decoding ---------------------------------------------------------------------------------

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
pub(crate) fn int_binary(
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
pub(crate) fn int_scalar(
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
