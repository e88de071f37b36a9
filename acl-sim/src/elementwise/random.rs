//! Simulated random fills (`aclnnInplaceUniform`, `aclnnInplaceNormal`,
//! `aclnnInplaceBernoulli`): a counter-based generator keyed on `(seed, offset + element
//! index)` (SplitMix64 of the pair), so a call is a pure function of its arguments.

use burn_ascend_cann::acl::ffi::*;

use super::*;
use crate::state::{guard, required, scalar};

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

/// `x` rounded once to the float element type `dtype`.
pub fn round_to(x: f64, dtype: DataType) -> f64 {
    match dtype {
        DataType::Float => f64::from(x as f32),
        DataType::Float16 => f16::from_f64(x).to_f64(),
        DataType::Bf16 => bf16::from_f64(x).to_f64(),
        _ => x,
    }
}

/// The largest value of the float element type `dtype` strictly below `to`.
pub fn largest_below(to: f64, dtype: DataType) -> f64 {
    let r = round_to(to, dtype);
    if r < to {
        return r;
    }
    match dtype {
        DataType::Float => f64::from((r as f32).next_down()),
        DataType::Float16 => step_down_16(r, true),
        DataType::Bf16 => step_down_16(r, false),
        _ => r.next_down(),
    }
}

/// One step down in f16 (`half_precision`) or bf16 from the representable value `r`.
fn step_down_16(r: f64, half_precision: bool) -> f64 {
    let (bits, to_f64): (u16, fn(u16) -> f64) = if half_precision {
        (f16::from_f64(r).to_bits(), |b| f16::from_bits(b).to_f64())
    } else {
        (bf16::from_f64(r).to_bits(), |b| bf16::from_bits(b).to_f64())
    };
    let next = if r > 0.0 {
        bits - 1
    } else if r == 0.0 {
        0x8001 // the smallest negative subnormal
    } else {
        bits + 1
    };
    to_f64(next)
}

fn fill(
    op: &'static str,
    self_ref: T,
    allowed: &[DataType],
    f: impl Fn(u64, DataType) -> f64 + Send + 'static,
    ws: Ws,
    ex: Ex,
) -> SimResult<()> {
    let a = required(self_ref, "selfRef")?;
    dtype_in(&a, op, "selfRef", allowed)?;
    submit(
        op,
        move || {
            let v: Vec<f64> = (0..a.numel() as u64).map(|i| f(i, a.dtype)).collect();
            a.write("selfRef", &encode(&v, a.dtype))
        },
        ws,
        ex,
    )
}

first_stage!(inplace_uniform, |p| {
    let (from, to) = (p.from, p.to);
    const OP: &str = names::inplace_uniform;
    guard(|| {
        if !(from.is_finite() && to.is_finite() && from <= to) {
            return invalid(format!("{OP}: need finite from <= to, got [{from}, {to})"));
        }
        let f = move |i: u64, dtype: DataType| {
            let x = round_to(
                from + (to - from) * uniform01(p.seed, p.offset.wrapping_add(i)),
                dtype,
            );
            // Rounding to the element type can reach `to` (an f64 draw just below 4.0 is 4.0 in
            // f32); keep the interval half-open in the element type.
            if x >= to && to > from {
                from.max(largest_below(to, dtype))
            } else {
                x
            }
        };
        fill(OP, p.self_ref, FLOATS, f, p.workspace_size, p.executor)
    })
});

first_stage!(inplace_normal, |params| {
    let InplaceNormalParams {
        self_ref,
        mean,
        std,
        seed,
        offset,
        workspace_size: ws,
        executor: ex,
    } = params;
    const OP: &str = names::inplace_normal;
    guard(|| {
        if !(std >= 0.0 && std.is_finite() && mean.is_finite()) {
            return invalid(format!(
                "{OP}: need finite mean and std >= 0, got mean {mean}, std {std}"
            ));
        }
        let (mean, std, seed, offset) =
            (f64::from(mean), f64::from(std), seed as u64, offset as u64);
        let f = move |i: u64, _: DataType| {
            // Box–Muller on two draws per element.
            let c = offset.wrapping_add(i).wrapping_mul(2);
            let u1 = 1.0 - uniform01(seed, c); // (0, 1]
            let u2 = uniform01(seed, c.wrapping_add(1));
            mean + std * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        };
        fill(OP, self_ref, FLOATS, f, ws, ex)
    })
});

first_stage!(inplace_bernoulli, |params| {
    let InplaceBernoulliParams {
        self_ref,
        prob,
        seed,
        offset,
        workspace_size: ws,
        executor: ex,
    } = params;
    const OP: &str = names::inplace_bernoulli;
    guard(|| {
        let p = scalar(prob, &format!("{OP}: prob"))?;
        if !(0.0..=1.0).contains(&p) {
            return invalid(format!("{OP}: prob must be in [0, 1], got {p}"));
        }
        let (seed, offset) = (seed as u64, offset as u64);
        let f = move |i: u64, _: DataType| {
            f64::from(u8::from(uniform01(seed, offset.wrapping_add(i)) < p))
        };
        fill(OP, self_ref, REAL, f, ws, ex)
    })
});
