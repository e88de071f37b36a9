//! Simulated comparisons (`aclnnEqTensor` … `aclnnLeScalar`), `aclnnSWhere`, the in-place
//! masked fill, logic and `aclnnCast`.

use burn_ascend_cann::acl::aclnn::Compare;
use burn_ascend_cann::acl::ffi::*;

use super::*;
use crate::state::{guard, required, scalar};

/// Whether `a c b` holds (the comparison the aclnn op `c` names computes).
fn holds(c: Compare, a: f64, b: f64) -> bool {
    match c {
        Compare::Eq => a == b,
        Compare::Ne => a != b,
        Compare::Gt => a > b,
        Compare::Ge => a >= b,
        Compare::Lt => a < b,
        Compare::Le => a <= b,
    }
}

/// A boolean function of two tensors broadcast together (a comparison, a logical and/or):
/// numeric inputs (of one dtype where `one_dtype`), a BOOL `out` of the broadcast shape.
fn bool_binary(
    op: &'static str,
    p: BinaryParams,
    one_dtype: bool,
    f: impl Fn(f64, f64) -> bool + Send + 'static,
) -> SimResult<()> {
    let a = required(p.self_, "self")?;
    let b = required(p.other, "other")?;
    let o = required(p.out, "out")?;
    dtype_in(&a, op, "self", NUMERIC)?;
    dtype_in(&b, op, "other", NUMERIC)?;
    if one_dtype {
        same_dtype(op, &[(&a, "self"), (&b, "other")])?;
    }
    dtype_in(&o, op, "out", &[DataType::Bool])?;
    let shape = broadcast2(op, &a, "self", &b, "other")?;
    shape_is(op, "out", &o, &shape)?;
    let job = move || {
        let (x, y) = (
            values_as(&a, "self", &shape)?,
            values_as(&b, "other", &shape)?,
        );
        let v: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(&p, &q)| f64::from(u8::from(f(p, q))))
            .collect();
        o.write("out", &encode(&v, DataType::Bool))
    };
    submit(op, job, p.workspace_size, p.executor)
}

fn compare_scalar(op: &'static str, c: Compare, p: ScalarParams) -> SimResult<()> {
    let a = required(p.self_, "self")?;
    let s = scalar(p.other, &format!("{op}: other"))?;
    let o = required(p.out, "out")?;
    dtype_in(&a, op, "self", NUMERIC)?;
    dtype_in(&o, op, "out", &[DataType::Bool])?;
    shape_is(op, "out", &o, &a.dims)?;
    submit(
        op,
        move || {
            let v: Vec<f64> = values(&a, "self")?
                .into_iter()
                .map(|p| f64::from(u8::from(holds(c, p, s))))
                .collect();
            o.write("out", &encode(&v, DataType::Bool))
        },
        p.workspace_size,
        p.executor,
    )
}

/// The first stages of a comparison's tensor and scalar ops, named by their table fields.
macro_rules! compare {
    ($t:ident, $s:ident, $c:expr) => {
        first_stage!($t, |p| {
            guard(|| bool_binary(names::$t, p, true, move |x, y| holds($c, x, y)))
        });
        first_stage!($s, |p| { guard(|| compare_scalar(names::$s, $c, p)) });
    };
}

compare!(eq_tensor, eq_scalar, Compare::Eq);
compare!(ne_tensor, ne_scalar, Compare::Ne);
compare!(gt_tensor, gt_scalar, Compare::Gt);
compare!(ge_tensor, ge_scalar, Compare::Ge);
compare!(lt_tensor, lt_scalar, Compare::Lt);
compare!(le_tensor, le_scalar, Compare::Le);

// ---- masks, copy, logic -----------------------------------------------------------------------

first_stage!(s_where, |p| {
    const OP: &str = names::s_where;
    guard(|| {
        let c = required(p.condition, "condition")?;
        let a = required(p.self_, "self")?;
        let b = required(p.other, "other")?;
        let o = required(p.out, "out")?;
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
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(inplace_masked_fill_scalar, |p| {
    const OP: &str = names::inplace_masked_fill_scalar;
    guard(|| {
        let a = required(p.self_ref, "selfRef")?;
        let m = required(p.mask, "mask")?;
        let v = scalar(p.value, &format!("{OP}: value"))?;
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
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(inplace_fill_scalar, |p| {
    const OP: &str = names::inplace_fill_scalar;
    guard(|| {
        let a = required(p.self_ref, "selfRef")?;
        let v = scalar(p.value, &format!("{OP}: value"))?;
        dtype_in(&a, OP, "selfRef", NUMERIC)?;
        submit(
            OP,
            move || a.write("selfRef", &encode(&vec![v; a.numel()], a.dtype)),
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(logical_not, |p| {
    const OP: &str = names::logical_not;
    guard(|| {
        let a = required(p.self_, "self")?;
        let o = required(p.out, "out")?;
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
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(logical_and, |p| {
    guard(|| bool_binary(names::logical_and, p, false, |x, y| x != 0.0 && y != 0.0))
});
first_stage!(logical_or, |p| {
    guard(|| bool_binary(names::logical_or, p, false, |x, y| x != 0.0 || y != 0.0))
});

first_stage!(cast, |p| {
    let dtype = p.dtype;
    const OP: &str = names::cast;
    guard(|| {
        let a = required(p.self_, "self")?;
        let o = required(p.out, "out")?;
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
            p.workspace_size,
            p.executor,
        )
    })
});
