//! Simulated unary math and activations (`aclnnRelu`, `aclnnSigmoid`, `aclnnNeg`,
//! `aclnnReciprocal`, `aclnnSin`, `aclnnCos`, `aclnnErf`, `aclnnGeluV2`) and pow / clamp by
//! scalars.

use burn_ascend_cann::acl::ffi::*;

use super::*;
use crate::state::{guard, required, scalar};

/// `erf` (W. J. Cody's rational approximations as in Numerical Recipes' `erfc`, relative
/// error < 1.2e-7, enough for f32).
fn erf_f64(x: f64) -> f64 {
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
    0.5 * x * (1.0 + erf_f64(x / std::f64::consts::SQRT_2))
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
            let v: Vec<f64> = values(&a, "self")?.into_iter().map(&f).collect();
            o.write("out", &encode(&v, o.dtype))
        },
        ws,
        ex,
    )
}

/// The first stage of a unary op, named by its table field: `$f` per element of a dtype in
/// `$allowed`.
macro_rules! unary {
    ($field:ident, $allowed:expr, $f:expr) => {
        first_stage!($field, |p| {
            guard(|| {
                let (ws, ex) = (p.workspace_size, p.executor);
                unary_map(names::$field, $allowed, $f, p.self_, p.out, ws, ex)
            })
        });
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
    relu,
    FLOAT_INT,
    // NaN stays NaN
    |x: f64| if x > 0.0 || x.is_nan() { x } else { 0.0 }
);
unary!(sigmoid, FLOATS, |x: f64| 1.0 / (1.0 + (-x).exp()));
unary!(neg, FLOAT_INT, |x: f64| -x);
unary!(reciprocal, FLOATS, |x: f64| 1.0 / x);
unary!(sin, FLOATS, f64::sin);
unary!(cos, FLOATS, f64::cos);
unary!(erf, FLOATS, erf_f64);

first_stage!(gelu_v2, |p| {
    const OP: &str = names::gelu_v2;
    guard(|| {
        let f = match p.approximate {
            0 => gelu_exact,
            1 => gelu_tanh,
            other => {
                return invalid(format!(
                    "{OP}: approximate must be 0 (none) or 1 (tanh), got {other}"
                ))
            }
        };
        unary_map(OP, &FLOATS[..3], f, p.x, p.y, p.workspace_size, p.executor)
    })
});

first_stage!(pow_tensor_scalar, |p| {
    const OP: &str = names::pow_tensor_scalar;
    guard(|| {
        let e = scalar(p.other, &format!("{OP}: exponent"))?;
        let f = move |x: f64| x.powf(e);
        unary_map(OP, FLOATS, f, p.self_, p.out, p.workspace_size, p.executor)
    })
});

first_stage!(clamp, |p| {
    const OP: &str = names::clamp;
    guard(|| {
        // Either bound may be null (not both), as in CANN.
        let lo = if p.clip_value_min.is_null() {
            None
        } else {
            Some(scalar(p.clip_value_min, &format!("{OP}: clipValueMin"))?)
        };
        let hi = if p.clip_value_max.is_null() {
            None
        } else {
            Some(scalar(p.clip_value_max, &format!("{OP}: clipValueMax"))?)
        };
        if lo.is_none() && hi.is_none() {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{OP}: clipValueMin and clipValueMax are both null"),
            ));
        }
        let f = move |x| clamp_value(x, lo, hi);
        unary_map(OP, REAL, f, p.self_, p.out, p.workspace_size, p.executor)
    })
});

/// `min(max(x, lo), hi)`, NaN kept.
fn clamp_value(x: f64, lo: Option<f64>, hi: Option<f64>) -> f64 {
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

first_stage!(clamp_min, |p| {
    const OP: &str = names::clamp_min;
    guard(|| {
        let lo = scalar(p.other, &format!("{OP}: clipValueMin"))?;
        let f = move |x| clamp_value(x, Some(lo), None);
        unary_map(OP, REAL, f, p.self_, p.out, p.workspace_size, p.executor)
    })
});

first_stage!(clamp_max, |p| {
    const OP: &str = names::clamp_max;
    guard(|| {
        let hi = scalar(p.other, &format!("{OP}: clipValueMax"))?;
        let f = move |x| clamp_value(x, None, Some(hi));
        unary_map(OP, REAL, f, p.self_, p.out, p.workspace_size, p.executor)
    })
});
