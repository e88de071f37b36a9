//! The selftest's harness for the ops' bundle cases (each op's in `crate::op::<op>::selftest`):
//! a bundle run through `burn-ascend run`'s op on the device and on the CPU reference
//! (`--device reference`, f64 accumulation, one rounding to the output dtype), so the device
//! calls are the backend's own call builders; the tolerances, the seeded inputs, the comparison,
//! the timing and the guard that turns a device's panic into a failed case.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use safetensors::Dtype;

use super::report::{CaseResult, Status};
use crate::io::{Bundle, HostTensor};
use crate::op::bundle_checks::compressed_mask_bit;
use crate::{run_op, CliError, Device};
use burn_ascend::ops::prompt::PFA_COMPRESSED_MASK;
use burn_ascend_model::load::data::SplitMix;

/// Relative tolerances per dtype (see the module docs of `selftest`).
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub f32: f64,
    pub f16: f64,
    pub bf16: f64,
}

impl Tolerance {
    /// Ops that accumulate (attention, matmul, softmax, reductions): the device may sum in
    /// another order, round P to the input dtype before P·V (as CANN's kernels do) and use
    /// HF32 for f32 matmuls.
    pub const ACCUMULATING: Self = Self {
        f32: 1e-3,
        f16: 1e-2,
        bf16: 4e-2,
    };
    /// One rounding of an elementwise result (2^-11 for f16, 2^-8 for bf16, with margin).
    pub const ELEMENTWISE: Self = Self {
        f32: 1e-5,
        f16: 2e-3,
        bf16: 1e-2,
    };
    /// Transcendental functions (exp, tanh, sigmoid, gelu, sqrt): the device's own
    /// approximations, then one rounding.
    pub const UNARY: Self = Self {
        f32: 1e-4,
        f16: 4e-3,
        bf16: 2e-2,
    };
    /// Sample moments of 2^16 random draws against the distribution's (absolute; the
    /// standard errors are about 1/256, so 0.03 is about 8 of them).
    pub const MOMENT: Self = Self {
        f32: 0.03,
        f16: 0.03,
        bf16: 0.03,
    };
    /// Copies, index ops, casts between exactly representable values.
    pub const EXACT: Self = Self {
        f32: 0.0,
        f16: 0.0,
        bf16: 0.0,
    };

    /// The tolerance of `dtype` (0 for integer dtypes: exact).
    pub fn of(self, dtype: Dtype) -> f64 {
        match dtype {
            Dtype::F32 => self.f32,
            Dtype::F16 => self.f16,
            Dtype::BF16 => self.bf16,
            _ => 0.0,
        }
    }
}

/// The float dtypes, with their report names.
pub const FLOATS: [(Dtype, &str); 3] = [
    (Dtype::F32, "f32"),
    (Dtype::F16, "f16"),
    (Dtype::BF16, "bf16"),
];
/// The dtypes CANN's prompt / incremental attention and the cache scatter take (no FLOAT32).
pub const HALVES: [(Dtype, &str); 2] = [(Dtype::F16, "f16"), (Dtype::BF16, "bf16")];

/// The safetensors dtype of a report dtype name.
fn dtype_of(name: &str) -> Dtype {
    match name {
        "f32" => Dtype::F32,
        "f16" => Dtype::F16,
        "bf16" => Dtype::BF16,
        _ => Dtype::I8,
    }
}

/// The seeded inputs: the model's splitmix64 (fixed inputs on every platform), drawn
/// symmetric around 0.
pub struct Rng(SplitMix);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(SplitMix(seed))
    }
    /// Uniform in [-1, 1) (`2·unit − 1` is exact: the unit draw has 53 bits).
    pub fn sym(&mut self) -> f64 {
        2.0 * self.0.unit() - 1.0
    }
    pub fn vec(&mut self, len: usize) -> Vec<f64> {
        (0..len).map(|_| self.sym()).collect()
    }
    /// A tensor of `shape` drawn from [-1, 1), rounded once to `dtype`.
    pub fn tensor(&mut self, shape: Vec<usize>, dtype: Dtype) -> HostTensor {
        let len = shape.iter().product();
        HostTensor::from_f64_as(&self.vec(len), shape, dtype)
    }
    /// An attention case's bundle: `query` of shape `query`, then `key` and `value` of shape
    /// `kv`, drawn in that order.
    pub fn qkv(&mut self, query: Vec<usize>, kv: Vec<usize>, dtype: Dtype) -> Bundle {
        let mut b = Bundle::default();
        b.insert("query", self.tensor(query, dtype));
        b.insert("key", self.tensor(kv.clone(), dtype));
        b.insert("value", self.tensor(kv, dtype));
        b
    }
}

pub fn meta(b: &mut Bundle, kv: &[(&str, String)]) {
    for (k, v) in kv {
        b.metadata.insert(k.to_string(), v.clone());
    }
}

/// The attributes of a prompt, incremental or fused inference attention case: `n` query heads
/// over `nkv` KV heads, scale 1/8 (head dim 64), `layout`, then the case's own `rest`.
pub fn heads_meta(b: &mut Bundle, (n, nkv): (usize, usize), layout: &str, rest: &[(&str, String)]) {
    meta(
        b,
        &[
            ("numHeads", n.to_string()),
            ("numKeyValueHeads", nkv.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", layout.into()),
        ],
    );
    meta(b, rest);
}

/// How far `got` is from `want`, per output tensor: `(passed, max_abs_err, tol, note)` of the
/// tensor closest to failing, `tol = rel · max(1, max |want|)`. `rel` is the case's (its input
/// dtype's): FLOAT outputs of a half-precision problem (softmax statistics, dsink) carry the
/// inputs' rounding too.
pub fn compare(want: &Bundle, got: &Bundle, rel: f64) -> (bool, f64, f64, Option<String>) {
    let mut worst: (f64, f64, f64) = (0.0, 0.0, 0.0); // (ratio, err, tol)
    for (name, w) in &want.tensors {
        let Some(g) = got.tensors.get(name) else {
            return (
                false,
                f64::NAN,
                f64::NAN,
                Some(format!("output {name} missing")),
            );
        };
        if (g.dtype, &g.shape) != (w.dtype, &w.shape) {
            return (
                false,
                f64::NAN,
                f64::NAN,
                Some(format!(
                    "{name}: got {:?} {:?}, reference {:?} {:?}",
                    g.dtype, g.shape, w.dtype, w.shape
                )),
            );
        }
        let (gv, wv) = match (values(g), values(w)) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                if g.bytes != w.bytes {
                    return (false, f64::NAN, 0.0, Some(format!("{name}: bytes differ")));
                }
                continue;
            }
        };
        let scale = wv.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        let t = rel * scale;
        let mut err = 0.0f64;
        for (a, b) in gv.iter().zip(&wv) {
            let e = (a - b).abs();
            // NaN (on either side where the other is not NaN) fails.
            let e = if a.is_nan() != b.is_nan() {
                f64::INFINITY
            } else if a.is_nan() || a == b {
                0.0
            } else {
                e
            };
            err = err.max(e);
        }
        let ratio = if t > 0.0 {
            err / t
        } else if err > 0.0 {
            f64::INFINITY
        } else {
            0.0
        };
        if ratio >= worst.0 {
            worst = (ratio, err, t);
        }
        if err > t {
            return (
                false,
                err,
                t,
                Some(format!("{name}: max |got − ref| {err:.3e} > {t:.3e}")),
            );
        }
    }
    (true, worst.1, worst.2, None)
}

/// A tensor's values as f64 (floats and integers); `None` for BOOL / U8.
fn values(t: &HostTensor) -> Option<Vec<f64>> {
    match t.dtype {
        Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64 => {
            Some(t.f32_values("x").ok()?.into_iter().map(f64::from).collect())
        }
        Dtype::I8 => Some(t.bytes.iter().map(|&b| b as i8 as f64).collect()),
        Dtype::I32 | Dtype::I64 => Some(
            t.i64_values("x")
                .ok()?
                .into_iter()
                .map(|x| x as f64)
                .collect(),
        ),
        _ => None,
    }
}

/// Adds 1 to the first element of the first output (the hidden `--inject-error`).
fn perturb(b: &mut Bundle) {
    if let Some(t) = b.tensors.values_mut().next() {
        match values(t) {
            Some(mut v)
                if !v.is_empty() && matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) =>
            {
                v[0] += 1.0;
                *t = HostTensor::from_f64_as(&v, t.shape.clone(), t.dtype);
            }
            _ => {
                if let Some(x) = t.bytes.first_mut() {
                    *x ^= 0x40;
                }
            }
        }
    }
}

/// Runs `f`, turning a panic into an error (a device failure must not end the run).
pub fn guarded<T>(f: impl FnOnce() -> Result<T, CliError>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(x)) => Ok(x),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        )),
    }
}

/// Runs `f` on the device: twice on the NPU (the first call loads the kernel; the second is
/// timed), once on the simulation. Returns the checked result and the timed call's ms.
pub fn timed<T>(
    device: Device,
    mut f: impl FnMut() -> Result<T, CliError>,
) -> (Result<T, String>, f64) {
    let runs = if device == Device::Npu { 2 } else { 1 };
    let mut out = Err("not run".to_string());
    let mut ms = f64::NAN;
    for i in 0..runs {
        let t0 = Instant::now();
        let r = guarded(&mut f);
        let elapsed = t0.elapsed().as_secs_f64() * 1e3;
        if i == 0 || r.is_ok() {
            ms = elapsed;
        }
        if i == 0 {
            let failed = r.is_err();
            out = r;
            if failed {
                break;
            }
        }
    }
    (out, ms)
}

/// One bundle case: `op` on the device against the reference.
pub fn bundle_case(
    op: &str,
    name: &str,
    dtype: &str,
    tol: Tolerance,
    input: &Bundle,
    device: Device,
    inject: bool,
) -> CaseResult {
    let mut res = CaseResult::failed(op, name, dtype, None);
    let want = match guarded(|| run_op(op, input, Device::Reference)) {
        Ok(w) => w,
        Err(e) => {
            res.note = Some(format!("reference failed: {e}"));
            return res;
        }
    };
    let (got, ms) = timed(device, || run_op(op, input, device));
    res.ms = ms;
    let mut got = match got {
        Ok(g) => g,
        Err(e) => {
            res.note = Some(format!("device failed: {e}"));
            return res;
        }
    };
    if inject {
        perturb(&mut got);
    }
    let (ok, err, t, note) = compare(&want, &got, tol.of(dtype_of(dtype)));
    res.status = if ok { Status::Pass } else { Status::Fail };
    res.max_abs_err = err;
    res.tol = t;
    res.note = note;
    res
}

/// A float or int8 tensor from f64 values (int8: rounded to integers in [-127, 127]).
pub fn elems(v: &[f64], shape: Vec<usize>, dtype: Dtype) -> HostTensor {
    if dtype == Dtype::I8 {
        let q: Vec<i8> = v.iter().map(|x| (x * 100.0).round() as i8).collect();
        HostTensor::from_i8(&q, shape)
    } else {
        HostTensor::from_f64_as(v, shape, dtype)
    }
}

/// CANN's compressed causal mask (`PFA_COMPRESSED_MASK`, BOOL), what the compressed sparse
/// modes take.
pub fn compressed_causal_mask() -> HostTensor {
    let [rows, cols] = PFA_COMPRESSED_MASK;
    let m: Vec<u8> = (0..rows * cols).map(compressed_mask_bit).collect();
    HostTensor::from_u8(m, PFA_COMPRESSED_MASK.to_vec(), Dtype::BOOL)
}

/// Every case of `op` in each of `dtypes` (`bundles` builds a dtype's named bundles) on `device`
/// against the reference at `tol`; with `inject`, the first case's device result is perturbed
/// (the run must then fail).
pub fn bundle_cases(
    op: &str,
    dtypes: &[(Dtype, &str)],
    tol: Tolerance,
    bundles: impl Fn(Dtype) -> Vec<(&'static str, Bundle)>,
    device: Device,
    inject: bool,
) -> Vec<CaseResult> {
    let mut inject = inject;
    let mut out = Vec::new();
    for &(dtype, dname) in dtypes {
        for (name, b) in bundles(dtype) {
            let inject = std::mem::take(&mut inject);
            out.push(bundle_case(op, name, dname, tol, &b, device, inject));
        }
    }
    out
}
