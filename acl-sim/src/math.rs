//! The elementwise / matmul aclnn ops the Burn backend calls:
//! `aclnnAdd`, `aclnnSub` (`out = self ± alpha·other`), `aclnnMul`, `aclnnDiv` and
//! `aclnnMatmul`. Validation as CANN: a null required tensor → 161001; a dtype outside
//! FLOAT/FLOAT16/BFLOAT16, mixed dtypes (CANN would promote; the simulation refuses), shapes
//! that do not broadcast or an `out` of the wrong shape → 161002. Inputs are read through their
//! views (strides, offset; stride 0 for broadcast), computed in f32 and rounded once to `out`.
//! `aclnnAdd`/`Sub`/`Mul`/`Adds`/`Muls` also take INT32/INT64 operands of one dtype (exact,
//! wrapping, integral alpha and scalar; `elementwise::int_binary`/`int_scalar`).

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_kernels::cpu::gemm::{matmul as matmul_f32, Mat};
use half::{bf16, f16};

use crate::state::SimTensor;
use crate::state::{self, guard, invalid, required, scalar, SimErr, SimResult};
use crate::wire::submit;

type T = *const AclTensor;

// ---- decoding ---------------------------------------------------------------------------------

fn float_dtype(t: &SimTensor, op: &str, name: &str) -> SimResult<()> {
    match t.dtype {
        DataType::Float | DataType::Float16 | DataType::Bf16 => Ok(()),
        other => invalid(format!(
            "{op}: {name} dtype must be FLOAT, FLOAT16 or BFLOAT16, got {other:?}"
        )),
    }
}

fn floats(t: &SimTensor, name: &str) -> SimResult<Vec<f32>> {
    let b = t.read(name)?;
    Ok(match t.dtype {
        DataType::Float => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DataType::Float16 => b
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DataType::Bf16 => b
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => return invalid(format!("{name}: not a float dtype ({other:?})")),
    })
}

fn encode(v: &[f32], dtype: DataType) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * dtype.size());
    for &x in v {
        match dtype {
            DataType::Float16 => out.extend_from_slice(&f16::from_f32(x).to_le_bytes()),
            DataType::Bf16 => out.extend_from_slice(&bf16::from_f32(x).to_le_bytes()),
            _ => out.extend_from_slice(&x.to_le_bytes()),
        }
    }
    out
}

pub(crate) use burn_ascend_contract::broadcast::broadcast_shapes as broadcast;

/// Row-major index map from `out` dims into a (right-aligned, broadcast) operand of `dims`.
pub(crate) fn broadcast_index(out: &[usize], dims: &[usize]) -> Vec<usize> {
    let n: usize = out.iter().product();
    let r = out.len();
    let lead = r - dims.len();
    let mut strides = vec![0usize; r];
    let mut s = 1;
    for i in (0..dims.len()).rev() {
        strides[lead + i] = if dims[i] == 1 { 0 } else { s };
        s *= dims[i];
    }
    let mut idx = vec![0usize; r];
    let mut res = Vec::with_capacity(n);
    let mut pos = 0usize;
    for _ in 0..n {
        res.push(pos);
        for d in (0..r).rev() {
            idx[d] += 1;
            pos += strides[d];
            if idx[d] < out[d] {
                break;
            }
            pos -= strides[d] * out[d];
            idx[d] = 0;
        }
    }
    res
}

// ---- elementwise ------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
}

#[allow(clippy::too_many_arguments)] // the C prototype plus the op name and kind
fn binary_ws(
    op: &'static str,
    kind: Bin,
    self_: T,
    other: T,
    alpha: Option<f64>,
    out: T,
    ws: *mut u64,
    ex: *mut *mut AclOpExecutor,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let b = required(other, "other")?;
    let o = required(out, "out")?;
    if matches!(a.dtype, DataType::Int32 | DataType::Int64) && !matches!(kind, Bin::Div) {
        let mul = matches!(kind, Bin::Mul);
        let alpha = alpha.map(|al| if matches!(kind, Bin::Sub) { -al } else { al });
        return crate::elementwise::int_binary(op, mul, a, b, o, alpha, ws, ex);
    }
    for (t, n) in [(&a, "self"), (&b, "other"), (&o, "out")] {
        float_dtype(t, op, n)?;
    }
    if a.dtype != b.dtype || a.dtype != o.dtype {
        return invalid(format!(
            "{op}: self {:?}, other {:?} and out {:?} must have one dtype (the simulation does not promote)",
            a.dtype, b.dtype, o.dtype
        ));
    }
    let Some(shape) = broadcast(&a.dims, &b.dims) else {
        return invalid(format!(
            "{op}: self {:?} and other {:?} do not broadcast",
            a.dims, b.dims
        ));
    };
    if o.dims != shape {
        return invalid(format!(
            "{op}: out must be the broadcast shape {shape:?}, got {:?}",
            o.dims
        ));
    }
    let alpha = alpha.unwrap_or(1.0) as f32;
    let job = move || -> SimResult<()> {
        let (x, y) = (floats(&a, "self")?, floats(&b, "other")?);
        let (ia, ib) = (
            broadcast_index(&shape, &a.dims),
            broadcast_index(&shape, &b.dims),
        );
        let v: Vec<f32> = ia
            .iter()
            .zip(&ib)
            .map(|(&i, &j)| match kind {
                Bin::Add => x[i] + alpha * y[j],
                Bin::Sub => x[i] - alpha * y[j],
                Bin::Mul => x[i] * y[j],
                Bin::Div => x[i] / y[j],
            })
            .collect();
        o.write("out", &encode(&v, o.dtype))
    };
    submit(op, job, ws, ex)
}

/// The `alpha` of `aclnnAdd`, `aclnnSub` or `aclnnAdds` (required where the prototype has one).
fn alpha(op: &str, alpha: *const AclScalar) -> SimResult<Option<f64>> {
    Ok(Some(scalar(alpha, &format!("{op}: alpha"))?))
}

/// The first stage of `aclnnAdd` … `aclnnDiv`, named by its table field: [`binary_ws`] of the
/// op's kind with the `alpha` the prototype passes (`None` for the ops without one).
macro_rules! binary {
    ($field:ident, $kind:expr, |$p:ident| $alpha:expr) => {
        first_stage!($field, |$p| {
            guard(|| {
                let (alpha, ws, ex) = ($alpha, $p.workspace_size, $p.executor);
                let (x, y, out) = ($p.self_, $p.other, $p.out);
                binary_ws(names::$field, $kind, x, y, alpha, out, ws, ex)
            })
        });
    };
}

binary!(add, Bin::Add, |p| alpha(names::add, p.alpha)?);
binary!(sub, Bin::Sub, |p| alpha(names::sub, p.alpha)?);
binary!(mul, Bin::Mul, |p| None);
binary!(div, Bin::Div, |p| None);

// ---- matmul -----------------------------------------------------------------------------------

first_stage!(matmul, |p| {
    let cube_math_type = p.cube_math_type;
    const OP: &str = names::matmul;
    guard(|| {
        let a = required(p.self_, "self")?;
        let b = required(p.mat2, "mat2")?;
        let o = required(p.out, "out")?;
        for (t, n) in [(&a, "self"), (&b, "mat2"), (&o, "out")] {
            float_dtype(t, OP, n)?;
        }
        if a.dtype != b.dtype || a.dtype != o.dtype {
            return invalid(format!(
                "{OP}: self {:?}, mat2 {:?} and out {:?} must have one dtype",
                a.dtype, b.dtype, o.dtype
            ));
        }
        if !(0..=3).contains(&cube_math_type) {
            return invalid(format!(
                "{OP}: cubeMathType must be 0..=3, got {cube_math_type}"
            ));
        }
        let (ra, rb) = (a.dims.len(), b.dims.len());
        if ra < 2 || rb < 2 {
            return invalid(format!(
                "{OP}: the simulation takes rank >= 2 operands, got {:?} and {:?}",
                a.dims, b.dims
            ));
        }
        let (m, k) = (a.dims[ra - 2], a.dims[ra - 1]);
        let (k2, n) = (b.dims[rb - 2], b.dims[rb - 1]);
        if k != k2 {
            return invalid(format!(
                "{OP}: self {:?} and mat2 {:?}: inner dims {k} and {k2} differ",
                a.dims, b.dims
            ));
        }
        let Some(batch) = broadcast(&a.dims[..ra - 2], &b.dims[..rb - 2]) else {
            return invalid(format!(
                "{OP}: batch dims of {:?} and {:?} do not broadcast",
                a.dims, b.dims
            ));
        };
        let mut want = batch.clone();
        want.extend([m, n]);
        if o.dims != want {
            return invalid(format!("{OP}: out must be {want:?}, got {:?}", o.dims));
        }
        let job = move || -> SimResult<()> {
            let (x, y) = (floats(&a, "self")?, floats(&b, "mat2")?);
            let ia = broadcast_index(&batch, &a.dims[..ra - 2]);
            let ib = broadcast_index(&batch, &b.dims[..rb - 2]);
            let mut v = vec![0f32; ia.len() * m * n];
            for (bi, (&pa, &pb)) in ia.iter().zip(&ib).enumerate() {
                let (xa, yb) = (
                    &x[pa * m * k..(pa + 1) * m * k],
                    &y[pb * k * n..(pb + 1) * k * n],
                );
                let ob = &mut v[bi * m * n..(bi + 1) * m * n];
                // f32 products accumulated in f32, as the cube unit's f32 path does; the
                // order of the sums is gemm's (a simulated device's matmuls were most of the
                // test suite's simulated compute with a plain triple loop).
                matmul_f32(
                    ob,
                    n,
                    Mat::row_major(xa, m, k, k),
                    Mat::row_major(yb, k, n, n),
                    false,
                    1.0,
                );
            }
            o.write("out", &encode(&v, o.dtype))
        };
        submit(OP, job, p.workspace_size, p.executor)
    })
});

// ---- scalar, unary, reductions ------------------------------------------------------------

fn unary_ws(op: &'static str, f: fn(f32) -> f32, p: UnaryParams) -> SimResult<()> {
    let a = required(p.self_, "self")?;
    let o = required(p.out, "out")?;
    float_dtype(&a, op, "self")?;
    float_dtype(&o, op, "out")?;
    if a.dtype != o.dtype {
        return invalid(format!(
            "{op}: self {:?} and out {:?} must have one dtype",
            a.dtype, o.dtype
        ));
    }
    if a.dims != o.dims {
        return invalid(format!("{op}: out must be {:?}, got {:?}", a.dims, o.dims));
    }
    let job = move || -> SimResult<()> {
        let v: Vec<f32> = floats(&a, "self")?.into_iter().map(f).collect();
        o.write("out", &encode(&v, o.dtype))
    };
    submit(op, job, p.workspace_size, p.executor)
}

/// `aclnn<Op>`'s first stage, named by its table field, computing `$f` per element.
macro_rules! unary {
    ($field:ident, $f:expr) => {
        first_stage!($field, |p| { guard(|| { unary_ws(names::$field, $f, p) }) });
    };
}

/// `self ∘ other` with a scalar `other` (`aclnnAdds`: `self + alpha·other`, `aclnnMuls`,
/// `aclnnDivs`: `self / other`, a true division in f32 as the kernel computes it).
fn scalar_ws(
    op: &'static str,
    self_: T,
    other: f64,
    alpha: Option<f64>,
    out: T,
    ws: *mut u64,
    ex: *mut *mut AclOpExecutor,
) -> SimResult<()> {
    let a = required(self_, "self")?;
    let o = required(out, "out")?;
    let divide = op == names::divs;
    if matches!(a.dtype, DataType::Int32 | DataType::Int64) {
        if divide {
            // CANN promotes integer operands of Divs to float; not modelled here.
            return invalid(format!(
                "{op}: integer self ({:?}) is unsupported in the simulation",
                a.dtype
            ));
        }
        return crate::elementwise::int_scalar(op, a, other, alpha, o, ws, ex);
    }
    float_dtype(&a, op, "self")?;
    if a.dtype != o.dtype || a.dims != o.dims {
        return invalid(format!(
            "{op}: out must be {:?} {:?}, got {:?} {:?}",
            a.dtype, a.dims, o.dtype, o.dims
        ));
    }
    let (s, alpha) = (other as f32, alpha.map(|x| x as f32));
    let job = move || -> SimResult<()> {
        let v: Vec<f32> = floats(&a, "self")?
            .into_iter()
            .map(|x| match alpha {
                Some(al) => x + al * s,
                None if divide => x / s,
                None => x * s,
            })
            .collect();
        o.write("out", &encode(&v, o.dtype))
    };
    submit(op, job, ws, ex)
}

/// The first stage of `aclnnAdds`, `aclnnMuls` or `aclnnDivs`, named by its table field:
/// [`scalar_ws`] with the `alpha` the prototype passes (`None` for the ops without one).
macro_rules! scalar_op {
    ($field:ident, |$p:ident| $alpha:expr) => {
        first_stage!($field, |$p| {
            guard(|| {
                let other = scalar($p.other, &format!("{}: other", names::$field))?;
                let (alpha, ws, ex) = ($alpha, $p.workspace_size, $p.executor);
                scalar_ws(names::$field, $p.self_, other, alpha, $p.out, ws, ex)
            })
        });
    };
}

scalar_op!(adds, |p| alpha(names::adds, p.alpha)?);
scalar_op!(muls, |p| None);
scalar_op!(divs, |p| None);

/// A reduction's `dim` int array, which may not be null.
pub(crate) fn required_dims(op: &str, dim: *const AclIntArray) -> SimResult<Vec<i64>> {
    state::int_array(dim, "dim")?
        .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, format!("{op}: dim is null")))
}

/// Sum or mean over `dim` (an int array; negative dims count from the end).
fn reduce_ws(op: &'static str, mean: bool, p: ReduceParams) -> SimResult<()> {
    let dtype = p.dtype;
    let a = required(p.self_, "self")?;
    let o = required(p.out, "out")?;
    let dims = required_dims(op, p.dim)?;
    float_dtype(&a, op, "self")?;
    if DataType::from_raw(dtype) != Some(o.dtype) || o.dtype != a.dtype {
        return invalid(format!(
            "{op}: dtype {dtype} and out {:?} must be the input's dtype {:?} in the simulation",
            o.dtype, a.dtype
        ));
    }
    let rank = a.dims.len() as i64;
    let mut axes = Vec::new();
    for &d in &dims {
        let d = if d < 0 { d + rank } else { d };
        if !(0..rank).contains(&d) || axes.contains(&(d as usize)) {
            return invalid(format!(
                "{op}: dim {dims:?} out of range or repeated for rank {rank}"
            ));
        }
        axes.push(d as usize);
    }
    let kept: Vec<usize> = a
        .dims
        .iter()
        .enumerate()
        .filter_map(|(i, &n)| match (axes.contains(&i), p.keep_dim) {
            (true, true) => Some(1),
            (true, false) => None,
            (false, _) => Some(n),
        })
        .collect();
    if o.dims != kept {
        return invalid(format!("{op}: out must be {kept:?}, got {:?}", o.dims));
    }
    let job = move || -> SimResult<()> {
        let x = floats(&a, "self")?;
        let outer: Vec<usize> = a
            .dims
            .iter()
            .enumerate()
            .map(|(i, &n)| if axes.contains(&i) { 1 } else { n })
            .collect();
        let map = broadcast_index(&a.dims, &outer);
        let m: usize = axes.iter().map(|&i| a.dims[i]).product();
        let mut acc = vec![0f64; outer.iter().product()];
        for (k, &j) in map.iter().enumerate() {
            acc[j] += f64::from(x[k]);
        }
        let v: Vec<f32> = acc
            .into_iter()
            .map(|s| {
                if mean {
                    (s / m as f64) as f32
                } else {
                    s as f32
                }
            })
            .collect();
        o.write("out", &encode(&v, o.dtype))
    };
    submit(op, job, p.workspace_size, p.executor)
}

first_stage!(reduce_sum, |p| {
    guard(|| reduce_ws(names::reduce_sum, false, p))
});
first_stage!(mean, |p| { guard(|| reduce_ws(names::mean, true, p)) });

unary!(exp, f32::exp);
unary!(log, f32::ln);
unary!(sqrt, f32::sqrt);
unary!(abs, f32::abs);
unary!(tanh, f32::tanh);
