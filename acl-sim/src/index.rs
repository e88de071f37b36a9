//! Simulated indexing and layout ops: `aclnnIndexSelect`, `aclnnGather`, `aclnnIndexAdd`,
//! `aclnnScatterAdd`, `aclnnCat`, `aclnnInplaceCopy`, `aclnnRepeat` and `aclnnFlip`.
//!
//! Validation as CANN's first stage (aclnn_index_select.md, aclnnGather.md, aclnnIndexAdd.md,
//! aclnnScatterAdd.md, aclnnCat.md, aclnnInplaceCopy.md, aclnnRepeat.md, aclnnFlip.md):
//! a null required tensor, tensor list, scalar or int array → 161001; an index dtype other
//! than INT32/INT64, mixed data dtypes (CANN would promote or cast; the simulation refuses),
//! a `dim` out of range, a wrong index rank or an `out` of the wrong shape → 161002.
//! An index **value** out of range is not known before the kernel runs: CANN fails at run time
//! (an AI Core exception); the simulation reports it at launch as 361001
//! (`ACLNN_ERR_RUNTIME_ERROR`) naming the index, and writes nothing.
//!
//! Inputs are read through their views (strides, offset, stride 0 for broadcast); copies move
//! element bytes, so every dtype of [`DataType`] is accepted by the copy ops. The adds
//! (`aclnnIndexAdd`, `aclnnScatterAdd`) compute FLOAT/FLOAT16/BFLOAT16 in f32 (rounded once to
//! `out`) and INT32/INT64 in i64 (wrapping), **accumulating duplicate indices in index order**
//! — deterministic, unlike CANN's default (non-deterministic) IndexAdd.

use burn_ascend_cann::acl::ffi::*;

use crate::state::SimTensor;
use crate::state::{self, guard, invalid, required, scalar, SimErr, SimResult};
use crate::wire::{ints, submit_sized};

/// The workspace the index ops ask for.
const SIM_WORKSPACE: u64 = 1024;

type T = *const AclTensor;

// ---- helpers --------------------------------------------------------------------------------

fn strides_of(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// `dim` in `[-rank, rank)` → `[0, rank)`; 161002 otherwise (rank 0 is not simulated).
fn norm_dim(op: &str, dim: i64, rank: usize) -> SimResult<usize> {
    if rank == 0 {
        return invalid(format!("{op}: 0-d self is unsupported in the simulation"));
    }
    let r = rank as i64;
    if !(-r..r).contains(&dim) {
        return invalid(format!("{op}: dim {dim} is out of range [-{r}, {r})"));
    }
    Ok(if dim < 0 { dim + r } else { dim } as usize)
}

fn rank_ok(op: &str, t: &SimTensor, name: &str) -> SimResult<()> {
    if t.dims.len() > 8 {
        return invalid(format!("{op}: {name} has rank {} > 8", t.dims.len()));
    }
    Ok(())
}

fn index_dtype(op: &str, t: &SimTensor) -> SimResult<()> {
    match t.dtype {
        DataType::Int32 | DataType::Int64 => Ok(()),
        other => invalid(format!(
            "{op}: index dtype must be INT32 or INT64, got {other:?}"
        )),
    }
}

fn same_dtype(op: &str, a: &SimTensor, an: &str, b: &SimTensor, bn: &str) -> SimResult<()> {
    if a.dtype != b.dtype {
        return invalid(format!(
            "{op}: {an} {:?} and {bn} {:?} must have one dtype (the simulation does not promote or cast)",
            a.dtype, b.dtype
        ));
    }
    Ok(())
}

fn out_shape(op: &str, o: &SimTensor, want: &[usize]) -> SimResult<()> {
    if o.dims != want {
        return invalid(format!("{op}: out must be {want:?}, got {:?}", o.dims));
    }
    Ok(())
}

/// Checks every index against `[0, bound)`: the run-time failure of CANN, at launch here.
fn check_range(op: &str, idx: &[i64], bound: usize) -> SimResult<()> {
    if let Some((k, v)) = idx
        .iter()
        .enumerate()
        .find(|(_, &v)| v < 0 || v as u64 >= bound as u64)
    {
        return Err(SimErr(
            ACLNN_ERR_RUNTIME_ERROR,
            format!(
                "{op}: index[{k}] = {v} is out of range [0, {bound}) (CANN fails at run time; nothing was written)"
            ),
        ));
    }
    Ok(())
}

/// Values of an add op: floats in f32, ints in i64.
enum Vals {
    F(Vec<f32>),
    I(Vec<i64>),
}

fn add_dtype(op: &str, t: &SimTensor) -> SimResult<()> {
    match t.dtype {
        DataType::Float
        | DataType::Float16
        | DataType::Bf16
        | DataType::Int32
        | DataType::Int64 => Ok(()),
        other => invalid(format!(
            "{op}: dtype {other:?} is unsupported in the simulation (FLOAT, FLOAT16, BFLOAT16, INT32, INT64)"
        )),
    }
}

fn decode(dtype: DataType, b: &[u8]) -> Vals {
    match dtype {
        DataType::Float => Vals::F(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        DataType::Float16 => Vals::F(
            b.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        DataType::Bf16 => Vals::F(
            b.chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        DataType::Int32 => Vals::I(
            b.chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        _ => Vals::I(
            b.chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
    }
}

fn encode(v: &Vals, dtype: DataType) -> Vec<u8> {
    let mut out = Vec::new();
    match v {
        Vals::F(v) => {
            for &x in v {
                match dtype {
                    DataType::Float16 => {
                        out.extend_from_slice(&half::f16::from_f32(x).to_le_bytes())
                    }
                    DataType::Bf16 => out.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
                    _ => out.extend_from_slice(&x.to_le_bytes()),
                }
            }
        }
        Vals::I(v) => {
            for &x in v {
                match dtype {
                    DataType::Int32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
                    _ => out.extend_from_slice(&x.to_le_bytes()),
                }
            }
        }
    }
    out
}

/// `acc[to] += alpha · src[from]` for each pair, in order.
fn accumulate(acc: &mut Vals, src: &Vals, alpha: f64, pairs: impl Iterator<Item = (usize, usize)>) {
    match (acc, src) {
        (Vals::F(a), Vals::F(s)) => {
            let al = alpha as f32;
            for (to, from) in pairs {
                a[to] += al * s[from];
            }
        }
        (Vals::I(a), Vals::I(s)) => {
            let al = alpha as i64;
            for (to, from) in pairs {
                a[to] = a[to].wrapping_add(al.wrapping_mul(s[from]));
            }
        }
        _ => unreachable!("self and source share one dtype (checked in the first stage)"),
    }
}

/// Copies element `src[from]` to `dst[to]` for each pair (elements of `es` bytes).
fn copy_elems(dst: &mut [u8], src: &[u8], es: usize, pairs: impl Iterator<Item = (usize, usize)>) {
    for (to, from) in pairs {
        dst[to * es..(to + 1) * es].copy_from_slice(&src[from * es..(from + 1) * es]);
    }
}

/// Row-major multi-indices of `dims`, as an iterator of flat positions with their index.
fn for_each_index(dims: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let n: usize = dims.iter().product();
    let mut idx = vec![0usize; dims.len()];
    for p in 0..n {
        f(p, &idx);
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn flat(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

// ---- aclnnIndexSelect -------------------------------------------------------------------------

first_stage!(index_select, |p| {
    const OP: &str = names::index_select;
    guard(|| {
        let a = required(p.self_, "self")?;
        let i = required(p.index, "index")?;
        let o = required(p.out, "out")?;
        rank_ok(OP, &a, "self")?;
        index_dtype(OP, &i)?;
        same_dtype(OP, &a, "self", &o, "out")?;
        let d = norm_dim(OP, p.dim, a.dims.len())?;
        if i.dims.len() > 1 {
            return invalid(format!("{OP}: index must be 0-D or 1-D, got {:?}", i.dims));
        }
        let mut want = a.dims.clone();
        want[d] = i.numel();
        out_shape(OP, &o, &want)?;
        submit_sized(
            OP,
            SIM_WORKSPACE,
            move || {
                let idx = ints(&i, "index")?;
                check_range(OP, &idx, a.dims[d])?;
                let x = a.read("self")?;
                let es = a.dtype.size();
                let inner: usize = a.dims[d + 1..].iter().product();
                let outer: usize = a.dims[..d].iter().product();
                let (n_in, n_out) = (a.dims[d], idx.len());
                let mut y = vec![0u8; o.numel() * es];
                let pairs = (0..outer).flat_map(|p| {
                    let idx = &idx;
                    (0..n_out).flat_map(move |k| {
                        (0..inner).map(move |q| {
                            (
                                (p * n_out + k) * inner + q,
                                (p * n_in + idx[k] as usize) * inner + q,
                            )
                        })
                    })
                });
                copy_elems(&mut y, &x, es, pairs);
                o.write("out", &y)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

// ---- aclnnGather ------------------------------------------------------------------------------

first_stage!(gather, |p| {
    const OP: &str = names::gather;
    guard(|| {
        let a = required(p.self_, "self")?;
        let i = required(p.index, "index")?;
        let o = required(p.out, "out")?;
        rank_ok(OP, &a, "self")?;
        index_dtype(OP, &i)?;
        same_dtype(OP, &a, "self", &o, "out")?;
        let d = norm_dim(OP, p.dim, a.dims.len())?;
        if i.dims.len() != a.dims.len()
            || (0..a.dims.len()).any(|k| k != d && i.dims[k] > a.dims[k])
        {
            return invalid(format!(
                "{OP}: index {:?} must have the rank of self {:?} and no larger size off dim {d}",
                i.dims, a.dims
            ));
        }
        out_shape(OP, &o, &i.dims)?;
        submit_sized(
            OP,
            SIM_WORKSPACE,
            move || {
                let idx = ints(&i, "index")?;
                check_range(OP, &idx, a.dims[d])?;
                let x = a.read("self")?;
                let es = a.dtype.size();
                let sa = strides_of(&a.dims);
                let mut y = vec![0u8; o.numel() * es];
                let mut pairs = Vec::with_capacity(idx.len());
                let mut src = vec![0usize; a.dims.len()];
                for_each_index(&i.dims, |p, ix| {
                    src.copy_from_slice(ix);
                    src[d] = idx[p] as usize;
                    pairs.push((p, flat(&src, &sa)));
                });
                copy_elems(&mut y, &x, es, pairs.into_iter());
                o.write("out", &y)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

// ---- aclnnIndexAdd ----------------------------------------------------------------------------

/// The operands `aclnnIndexAdd` and `aclnnScatterAdd` share, decoded and checked alike: self,
/// index, the tensor added (`source` / `src`), out and the normalised dim.
struct AddOperands {
    a: SimTensor,
    i: SimTensor,
    s: SimTensor,
    o: SimTensor,
    d: usize,
}

fn add_operands(
    op: &str,
    (self_, dim, index, out): (T, i64, T, T),
    (added, added_name): (T, &str),
) -> SimResult<AddOperands> {
    let a = required(self_, "self")?;
    let i = required(index, "index")?;
    let s = required(added, added_name)?;
    let o = required(out, "out")?;
    rank_ok(op, &a, "self")?;
    index_dtype(op, &i)?;
    add_dtype(op, &a)?;
    same_dtype(op, &a, "self", &s, added_name)?;
    same_dtype(op, &a, "self", &o, "out")?;
    let d = norm_dim(op, dim, a.dims.len())?;
    Ok(AddOperands { a, i, s, o, d })
}

/// Queues `out = self` with `alpha · added[from]` added at `to` for every `(to, from)` that
/// `pairs(index values)` lists (in order: duplicates accumulate in order), after checking the
/// index values against self's dim.
fn submit_add(
    op: &'static str,
    AddOperands { a, i, s, o, d }: AddOperands,
    (added_name, alpha): (&'static str, f64),
    pairs: impl Fn(&[i64], &SimTensor, &SimTensor) -> Vec<(usize, usize)> + Send + 'static,
    ws: *mut u64,
    ex: *mut *mut AclOpExecutor,
) -> SimResult<()> {
    out_shape(op, &o, &a.dims)?;
    submit_sized(
        op,
        SIM_WORKSPACE,
        move || {
            let idx = ints(&i, "index")?;
            check_range(op, &idx, a.dims[d])?;
            let mut acc = decode(a.dtype, &a.read("self")?);
            let added = decode(s.dtype, &s.read(added_name)?);
            accumulate(&mut acc, &added, alpha, pairs(&idx, &a, &s).into_iter());
            o.write("out", &encode(&acc, o.dtype))
        },
        ws,
        ex,
    )
}

first_stage!(index_add, |p| {
    const OP: &str = names::index_add;
    guard(|| {
        let alpha = scalar(p.alpha, &format!("{OP}: alpha"))?;
        let ops = add_operands(OP, (p.self_, p.dim, p.index, p.out), (p.source, "source"))?;
        let (a, i, s, d) = (&ops.a, &ops.i, &ops.s, ops.d);
        if i.dims.len() > 1 {
            return invalid(format!("{OP}: index must be 0-D or 1-D, got {:?}", i.dims));
        }
        let mut want_src = a.dims.clone();
        want_src[d] = i.numel();
        if s.dims != want_src {
            return invalid(format!(
                "{OP}: source must be {want_src:?} (self {:?} with dim {d} the index length), got {:?}",
                a.dims, s.dims
            ));
        }
        let pairs = move |idx: &[i64], a: &SimTensor, _: &SimTensor| {
            let inner: usize = a.dims[d + 1..].iter().product();
            let outer: usize = a.dims[..d].iter().product();
            let (n_self, n_idx) = (a.dims[d], idx.len());
            // Index order within each (outer, inner) position: duplicates accumulate in order.
            (0..outer)
                .flat_map(|p| {
                    (0..n_idx).flat_map(move |k| {
                        (0..inner).map(move |q| {
                            (
                                (p * n_self + idx[k] as usize) * inner + q,
                                (p * n_idx + k) * inner + q,
                            )
                        })
                    })
                })
                .collect()
        };
        submit_add(
            OP,
            ops,
            ("source", alpha),
            pairs,
            p.workspace_size,
            p.executor,
        )
    })
});

// ---- aclnnScatterAdd --------------------------------------------------------------------------

fn is_contiguous(t: &SimTensor) -> bool {
    let want = strides_of(&t.dims);
    t.dims
        .iter()
        .zip(t.strides.iter().zip(&want))
        .all(|(&d, (&s, &w))| d == 1 || s == w)
}

first_stage!(scatter_add, |p| {
    const OP: &str = names::scatter_add;
    guard(|| {
        let ops = add_operands(OP, (p.self_, p.dim, p.index, p.out), (p.src, "src"))?;
        let (a, i, s, o, d) = (&ops.a, &ops.i, &ops.s, &ops.o, ops.d);
        let r = a.dims.len();
        if i.dims.len() != r
            || s.dims.len() != r
            || (0..r).any(|k| i.dims[k] > s.dims[k] || (k != d && i.dims[k] > a.dims[k]))
        {
            return invalid(format!(
                "{OP}: index {:?} must have the rank of self {:?} and src {:?}, be no larger than src and, off dim {d}, than self",
                i.dims, a.dims, s.dims
            ));
        }
        // aclnnScatterAdd.md: p.src and p.out do not take non-contiguous tensors.
        for (t, n) in [(s, "src"), (o, "out")] {
            if !is_contiguous(t) {
                return invalid(format!(
                    "{OP}: {n} must be contiguous (dims {:?}, strides {:?})",
                    t.dims, t.strides
                ));
            }
        }
        let index_dims = i.dims.clone();
        let pairs = move |idx: &[i64], a: &SimTensor, s: &SimTensor| {
            let (sa, ss) = (strides_of(&a.dims), strides_of(&s.dims));
            let mut pairs = Vec::with_capacity(idx.len());
            let mut to = vec![0usize; r];
            for_each_index(&index_dims, |p, ix| {
                to.copy_from_slice(ix);
                to[d] = idx[p] as usize;
                pairs.push((flat(&to, &sa), flat(ix, &ss)));
            });
            pairs
        };
        submit_add(OP, ops, ("src", 1.0), pairs, p.workspace_size, p.executor)
    })
});

// ---- aclnnCat ---------------------------------------------------------------------------------

first_stage!(cat, |p| {
    const OP: &str = names::cat;
    guard(|| {
        let Some(ts) = state::tensor_list(p.tensors, "tensors")? else {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{OP}: tensors is null"),
            ));
        };
        let o = required(p.out, "out")?;
        let Some(first) = ts.first() else {
            return invalid(format!("{OP}: tensors is empty"));
        };
        rank_ok(OP, first, "tensors[0]")?;
        let d = norm_dim(OP, p.dim, first.dims.len())?;
        let mut want = first.dims.clone();
        want[d] = 0;
        for (k, t) in ts.iter().enumerate() {
            same_dtype(OP, t, &format!("tensors[{k}]"), &o, "out")?;
            let agree = t.dims.len() == first.dims.len()
                && (0..t.dims.len()).all(|j| j == d || t.dims[j] == first.dims[j]);
            if !agree {
                return invalid(format!(
                    "{OP}: tensors[{k}] {:?} must match tensors[0] {:?} off dim {d}",
                    t.dims, first.dims
                ));
            }
            want[d] += t.dims[d];
        }
        out_shape(OP, &o, &want)?;
        submit_sized(
            OP,
            SIM_WORKSPACE,
            move || {
                let es = o.dtype.size();
                let outer: usize = want[..d].iter().product();
                let inner: usize = want[d + 1..].iter().product();
                let row = want[d] * inner;
                let mut y = vec![0u8; o.numel() * es];
                let mut at = 0usize;
                for (k, t) in ts.iter().enumerate() {
                    let x = t.read(&format!("tensors[{k}]"))?;
                    let block = t.dims[d] * inner;
                    for p in 0..outer {
                        let dst = (p * row + at) * es;
                        y[dst..dst + block * es]
                            .copy_from_slice(&x[p * block * es..(p + 1) * block * es]);
                    }
                    at += block;
                }
                o.write("out", &y)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

// ---- aclnnInplaceCopy -------------------------------------------------------------------------

first_stage!(inplace_copy, |p| {
    const OP: &str = names::inplace_copy;
    guard(|| {
        let dst = required(p.self_ref, "selfRef")?;
        let s = required(p.src, "src")?;
        rank_ok(OP, &dst, "selfRef")?;
        rank_ok(OP, &s, "src")?;
        same_dtype(OP, &dst, "selfRef", &s, "src")?;
        // p.src broadcasts to selfRef (right-aligned; size 1 or equal).
        let r = dst.dims.len();
        let ok = s.dims.len() <= r
            && s.dims.iter().enumerate().all(|(k, &n)| {
                let m = dst.dims[r - s.dims.len() + k];
                n == m || n == 1
            });
        if !ok {
            return invalid(format!(
                "{OP}: src {:?} does not broadcast to selfRef {:?}",
                s.dims, dst.dims
            ));
        }
        submit_sized(
            OP,
            SIM_WORKSPACE,
            move || {
                let es = s.dtype.size();
                let x = s.read("src")?;
                let lead = r - s.dims.len();
                let ss = strides_of(&s.dims);
                let mut y = vec![0u8; dst.numel() * es];
                let mut pairs = Vec::with_capacity(dst.numel());
                for_each_index(&dst.dims, |p, ix| {
                    let from: usize = s
                        .dims
                        .iter()
                        .enumerate()
                        .map(|(k, &n)| if n == 1 { 0 } else { ix[lead + k] * ss[k] })
                        .sum();
                    pairs.push((p, from));
                });
                copy_elems(&mut y, &x, es, pairs.into_iter());
                dst.write("selfRef", &y)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

// ---- aclnnRepeat / aclnnFlip ------------------------------------------------------------------

fn int_array_required(p: *const AclIntArray, op: &str, name: &str) -> SimResult<Vec<i64>> {
    state::int_array(p, name)?
        .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, format!("{op}: {name} is null")))
}

first_stage!(repeat, |p| {
    const OP: &str = names::repeat;
    guard(|| {
        let a = required(p.self_, "self")?;
        let o = required(p.out, "out")?;
        let reps = int_array_required(p.array, OP, "repeats")?;
        rank_ok(OP, &a, "self")?;
        same_dtype(OP, &a, "self", &o, "out")?;
        if reps.len() < a.dims.len() || reps.len() > 8 || reps.iter().any(|&x| x < 0) {
            return invalid(format!(
                "{OP}: repeats {reps:?} must be non-negative, at least as long as self's rank {} and at most 8",
                a.dims.len()
            ));
        }
        let lead = reps.len() - a.dims.len();
        let want: Vec<usize> = (0..reps.len())
            .map(|k| {
                let base = if k < lead { 1 } else { a.dims[k - lead] };
                base * reps[k] as usize
            })
            .collect();
        out_shape(OP, &o, &want)?;
        submit_sized(
            OP,
            SIM_WORKSPACE,
            move || {
                let es = a.dtype.size();
                let x = a.read("self")?;
                let sa = strides_of(&a.dims);
                let mut y = vec![0u8; o.numel() * es];
                let mut pairs = Vec::with_capacity(o.numel());
                for_each_index(&want, |p, ix| {
                    let from: usize = (0..a.dims.len())
                        .map(|k| (ix[lead + k] % a.dims[k]) * sa[k])
                        .sum();
                    pairs.push((p, from));
                });
                copy_elems(&mut y, &x, es, pairs.into_iter());
                o.write("out", &y)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(flip, |params| {
    let dims = params.array;
    const OP: &str = names::flip;
    guard(|| {
        let a = required(params.self_, "self")?;
        let o = required(params.out, "out")?;
        let dims = int_array_required(dims, OP, "dims")?;
        rank_ok(OP, &a, "self")?;
        same_dtype(OP, &a, "self", &o, "out")?;
        let mut axes = Vec::new();
        for &d in &dims {
            let d = norm_dim(OP, d, a.dims.len())?;
            if axes.contains(&d) {
                return invalid(format!("{OP}: dims {dims:?} repeat dim {d}"));
            }
            axes.push(d);
        }
        out_shape(OP, &o, &a.dims)?;
        submit_sized(
            OP,
            SIM_WORKSPACE,
            move || {
                let es = a.dtype.size();
                let x = a.read("self")?;
                let sa = strides_of(&a.dims);
                let mut y = vec![0u8; o.numel() * es];
                let mut pairs = Vec::with_capacity(o.numel());
                for_each_index(&a.dims, |p, ix| {
                    let from: usize = ix
                        .iter()
                        .enumerate()
                        .map(|(k, &i)| {
                            let i = if axes.contains(&k) {
                                a.dims[k] - 1 - i
                            } else {
                                i
                            };
                            i * sa[k]
                        })
                        .sum();
                    pairs.push((p, from));
                });
                copy_elems(&mut y, &x, es, pairs.into_iter());
                o.write("out", &y)
            },
            params.workspace_size,
            params.executor,
        )
    })
});
