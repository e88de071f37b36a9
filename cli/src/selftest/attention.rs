//! The attention cases: each a bundle run through `burn-ascend run`'s op on the device and on
//! the CPU reference (`--device reference`, f64 accumulation, one rounding to the output dtype),
//! so the device calls are the backend's own call builders.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use safetensors::Dtype;

use super::report::{CaseResult, Status};
use crate::io::{Bundle, HostTensor};
use crate::{run_op, CliError, Device};
use burn_ascend::ops::prompt::PFA_COMPRESSED_MASK;
use burn_ascend::ops::varlen::compressed_mask;
use burn_ascend::SparseMode;

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

/// splitmix64: fixed inputs on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    pub fn vec(&mut self, len: usize) -> Vec<f64> {
        (0..len).map(|_| self.sym()).collect()
    }
}

pub(super) fn meta(b: &mut Bundle, kv: &[(&str, String)]) {
    for (k, v) in kv {
        b.metadata.insert(k.to_string(), v.clone());
    }
}

fn cumulative(v: &[i64]) -> Vec<i64> {
    v.iter()
        .scan(0, |a, &x| {
            *a += x;
            Some(*a)
        })
        .collect()
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
    let mut res = CaseResult {
        op: op.into(),
        name: name.into(),
        dtype: dtype.into(),
        status: Status::Fail,
        max_abs_err: f64::NAN,
        tol: f64::NAN,
        ms: f64::NAN,
        note: None,
    };
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

/// A varlen problem.
struct Varlen {
    name: &'static str,
    sq: Vec<i64>,
    skv: Vec<i64>,
    n: usize,
    nkv: usize,
    d: usize,
    sink: bool,
    /// `(sparseMode, preTokens, nextTokens)`; modes 2-8 get CANN's compressed mask.
    mode: (SparseMode, i64, i64),
    /// The tensor input besides query, key, value and sink.
    extra: VarlenExtra,
}

/// A varlen case's other tensor input: each reaches the device in its own way on `Ascend`
/// (the pse cast to the query's dtype and `dpse` computed on the device, the slopes cast to
/// FLOAT, the explicit mask compared with 0 into BOOL).
#[derive(Clone, Copy, PartialEq)]
enum VarlenExtra {
    None,
    /// `realShift` `[pseTotalLen]`, pseType 0 (the backward returns `dpse`).
    FlatPse,
    /// `realShift` as ALiBi slopes `[N]` (FLOAT), pseType 2, `qStartIdx` / `kvStartIdx` 0.
    AlibiSlopes,
    /// An explicit `attenMask` `[maxSq, maxSkv]` (BOOL), sparse mode 0.
    ExplicitMask,
}

/// Sparse mode 0 with no band: full attention, or the explicit mask alone.
const UNBANDED: (SparseMode, i64, i64) = (SparseMode::DefaultMask, 2_147_483_647, 2_147_483_647);

fn varlen_problems() -> Vec<Varlen> {
    vec![
        Varlen {
            name: "gqa_no_sink",
            sq: vec![3, 5, 2],
            skv: vec![4, 5, 2],
            n: 4,
            nkv: 2,
            d: 64,
            sink: false,
            mode: UNBANDED,
            extra: VarlenExtra::None,
        },
        Varlen {
            name: "gqa_sink_band",
            sq: vec![3, 5, 2],
            skv: vec![4, 5, 2],
            n: 4,
            nkv: 2,
            d: 64,
            sink: true,
            mode: (SparseMode::Band, 3, 1),
            extra: VarlenExtra::None,
        },
        Varlen {
            name: "causal_sink",
            sq: vec![4, 9],
            skv: vec![6, 9],
            n: 2,
            nkv: 2,
            d: 64,
            sink: true,
            mode: (SparseMode::RightDownCausal, 2_147_483_647, 0),
            extra: VarlenExtra::None,
        },
        Varlen {
            name: "pse_sink",
            sq: vec![3, 2],
            skv: vec![3, 4],
            n: 2,
            nkv: 2,
            d: 64,
            sink: true,
            mode: UNBANDED,
            extra: VarlenExtra::FlatPse,
        },
        Varlen {
            name: "alibi_causal",
            sq: vec![4, 3],
            skv: vec![4, 3],
            n: 4,
            nkv: 2,
            d: 64,
            sink: false,
            mode: (SparseMode::RightDownCausal, 2_147_483_647, 0),
            extra: VarlenExtra::AlibiSlopes,
        },
        Varlen {
            name: "explicit_mask_sink",
            sq: vec![3, 5, 2],
            skv: vec![4, 5, 2],
            n: 4,
            nkv: 2,
            d: 64,
            sink: true,
            mode: UNBANDED,
            extra: VarlenExtra::ExplicitMask,
        },
    ]
}

fn varlen_bundle(p: &Varlen, dtype: Dtype, seed: u64) -> Bundle {
    let mut rng = Rng::new(seed);
    let tq = p.sq.iter().sum::<i64>() as usize;
    let tkv = p.skv.iter().sum::<i64>() as usize;
    let mut b = Bundle::default();
    let mut float = |name: &str, shape: Vec<usize>| {
        let len = shape.iter().product();
        b.insert(name, HostTensor::from_f64_as(&rng.vec(len), shape, dtype));
    };
    float("query", vec![tq, p.n, p.d]);
    float("key", vec![tkv, p.nkv, p.d]);
    float("value", vec![tkv, p.nkv, p.d]);
    if p.sink {
        let s: Vec<f32> = (0..p.n).map(|h| 0.5 - 0.3 * h as f32).collect();
        b.insert("sink", HostTensor::from_values(&s, vec![p.n]));
    }
    let (mode, pre, next) = p.mode;
    if let Some((mask, shape)) = compressed_mask(mode) {
        b.insert(
            "attenMask",
            HostTensor::from_u8(mask, shape.to_vec(), Dtype::BOOL),
        );
    }
    let mut pse_type = None;
    match p.extra {
        VarlenExtra::None => {}
        VarlenExtra::FlatPse => {
            let total: i64 = p.sq.iter().zip(&p.skv).map(|(q, k)| q * k).sum();
            let len = p.n * total as usize;
            b.insert(
                "realShift",
                HostTensor::from_f64_as(&rng.vec(len), vec![len], dtype),
            );
            pse_type = Some(0);
        }
        VarlenExtra::AlibiSlopes => {
            let slopes: Vec<f32> = (0..p.n).map(|h| 0.5f32.powi(h as i32 + 1)).collect();
            b.insert("realShift", HostTensor::from_values(&slopes, vec![p.n]));
            b.insert("qStartIdx", HostTensor::from_i64(&[0], vec![1]));
            b.insert("kvStartIdx", HostTensor::from_i64(&[0], vec![1]));
            pse_type = Some(2);
        }
        VarlenExtra::ExplicitMask => {
            let (rows, cols) = (
                *p.sq.iter().max().unwrap_or(&0),
                *p.skv.iter().max().unwrap_or(&0),
            );
            let (rows, cols) = (rows as usize, cols as usize);
            // Column 0 never masked: no row is fully masked.
            let mask: Vec<u8> = (0..rows * cols)
                .map(|e| u8::from(e % cols != 0 && (e / cols + e % cols) % 3 == 2))
                .collect();
            b.insert(
                "attenMask",
                HostTensor::from_u8(mask, vec![rows, cols], Dtype::BOOL),
            );
        }
    }
    b.insert(
        "actualSeqQLen",
        HostTensor::from_i64(&cumulative(&p.sq), vec![p.sq.len()]),
    );
    b.insert(
        "actualSeqKvLen",
        HostTensor::from_i64(&cumulative(&p.skv), vec![p.skv.len()]),
    );
    meta(
        &mut b,
        &[
            ("scaleValue", (1.0 / (p.d as f64).sqrt()).to_string()),
            ("headNum", p.n.to_string()),
            ("inputLayout", "TND".into()),
            ("sparseMode", mode.as_attr().to_string()),
            ("preTokens", pre.to_string()),
            ("nextTokens", next.to_string()),
        ],
    );
    if let Some(t) = pse_type {
        meta(&mut b, &[("pseType", i64::to_string(&t))]);
    }
    b
}

/// The backward's bundle: the forward's inputs, `dy`, and the reference forward's outputs.
fn varlen_bwd_bundle(fwd_in: &Bundle, dtype: Dtype, seed: u64) -> Result<Bundle, CliError> {
    let fwd = run_op("varlen-fwd", fwd_in, Device::Reference)?;
    let mut b = fwd_in.clone();
    let o = &fwd.tensors["attentionOut"];
    let mut rng = Rng::new(seed);
    b.insert(
        "dy",
        HostTensor::from_f64_as(&rng.vec(o.len()), o.shape.clone(), dtype),
    );
    b.insert("attentionIn", o.clone());
    b.insert("softmaxMax", fwd.tensors["softmaxMax"].clone());
    b.insert("softmaxSum", fwd.tensors["softmaxSum"].clone());
    Ok(b)
}

fn prompt_bundles(dtype: Dtype) -> Vec<(&'static str, Bundle)> {
    let mut rng = Rng::new(11);
    let mut out = Vec::new();
    // BSH, GQA 4/2, a dense [B,1,S,S] mask and per-batch lengths.
    let (b_, s, n, nkv, d) = (2usize, 6usize, 4usize, 2usize, 64usize);
    let mut b = Bundle::default();
    b.insert(
        "query",
        HostTensor::from_f64_as(&rng.vec(b_ * s * n * d), vec![b_, s, n * d], dtype),
    );
    b.insert(
        "key",
        HostTensor::from_f64_as(&rng.vec(b_ * s * nkv * d), vec![b_, s, nkv * d], dtype),
    );
    b.insert(
        "value",
        HostTensor::from_f64_as(&rng.vec(b_ * s * nkv * d), vec![b_, s, nkv * d], dtype),
    );
    let mask: Vec<u8> = (0..b_ * s * s)
        .map(|e| ((e % s) > (e / s) % s) as u8)
        .collect();
    b.insert(
        "attenMask",
        HostTensor::from_u8(mask, vec![b_, 1, s, s], Dtype::BOOL),
    );
    b.insert("actualSeqLengths", HostTensor::from_i64(&[6, 4], vec![2]));
    b.insert("actualSeqLengthsKv", HostTensor::from_i64(&[5, 6], vec![2]));
    meta(
        &mut b,
        &[
            ("numHeads", n.to_string()),
            ("numKeyValueHeads", nkv.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", "BSH".into()),
            ("sparseMode", "0".into()),
        ],
    );
    // The same call with a `pseShift` `[1, N, S, S]` in the query's dtype (on `Ascend` it stays
    // on the device, cast there if needed).
    let mut with_pse = b.clone();
    with_pse.insert(
        "pseShift",
        HostTensor::from_f64_as(&rng.vec(n * s * s), vec![1, n, s, s], dtype),
    );
    out.push(("bsh_gqa_mask_lengths", b));
    out.push(("bsh_gqa_mask_pse", with_pse));
    // BNSD, right-down causal (sparseMode 3) with CANN's compressed mask, Skv > Sq.
    let (b_, n, sq, skv, d) = (1usize, 2usize, 5usize, 9usize, 64usize);
    let mut c = Bundle::default();
    c.insert(
        "query",
        HostTensor::from_f64_as(&rng.vec(b_ * n * sq * d), vec![b_, n, sq, d], dtype),
    );
    c.insert(
        "key",
        HostTensor::from_f64_as(&rng.vec(b_ * n * skv * d), vec![b_, n, skv, d], dtype),
    );
    c.insert(
        "value",
        HostTensor::from_f64_as(&rng.vec(b_ * n * skv * d), vec![b_, n, skv, d], dtype),
    );
    let [rows, cols] = PFA_COMPRESSED_MASK;
    let mask: Vec<u8> = (0..rows * cols)
        .map(|x| u8::from(x % cols > x / cols))
        .collect();
    c.insert(
        "attenMask",
        HostTensor::from_u8(mask, PFA_COMPRESSED_MASK.to_vec(), Dtype::BOOL),
    );
    meta(
        &mut c,
        &[
            ("numHeads", n.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", "BNSD".into()),
            ("sparseMode", "3".into()),
        ],
    );
    out.push(("bnsd_causal_compressed_mask", c));
    out
}

fn incre_bundles(dtype: Dtype) -> Vec<(&'static str, Bundle)> {
    let mut rng = Rng::new(21);
    let mut out = Vec::new();
    // Paged: BSH, GQA 4/2, block size 16, a block table over 5 blocks.
    let (b_, n, nkv, d, bs, blocks) = (2usize, 4usize, 2usize, 64usize, 16usize, 5usize);
    let mut b = Bundle::default();
    b.insert(
        "query",
        HostTensor::from_f64_as(&rng.vec(b_ * n * d), vec![b_, 1, n * d], dtype),
    );
    let cache = blocks * bs * nkv * d;
    b.insert(
        "key",
        HostTensor::from_f64_as(&rng.vec(cache), vec![blocks, bs, nkv * d], dtype),
    );
    b.insert(
        "value",
        HostTensor::from_f64_as(&rng.vec(cache), vec![blocks, bs, nkv * d], dtype),
    );
    b.insert(
        "blocktable",
        HostTensor::from_i32(&[3, 0, 4, 1], vec![2, 2]),
    );
    b.insert("actualSeqLengths", HostTensor::from_i64(&[20, 9], vec![2]));
    meta(
        &mut b,
        &[
            ("numHeads", n.to_string()),
            ("numKeyValueHeads", nkv.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", "BSH".into()),
            ("blockSize", bs.to_string()),
        ],
    );
    out.push(("paged_bsh_gqa", b));
    // A paged decode over an int8 cache (block size 32, as CANN needs for int8 KV) with
    // per-channel antiquant scale and offset (`[2, Nkv·D]`, FLOAT): the int8 KV serving path
    // (on `Ascend` the KV, scales and offsets are converted on the device).
    let (bs8, blocks8, h) = (32usize, 4usize, nkv * d);
    let mut q8 = Bundle::default();
    q8.insert(
        "query",
        HostTensor::from_f64_as(&rng.vec(b_ * n * d), vec![b_, 1, n * d], dtype),
    );
    for name in ["key", "value"] {
        q8.insert(
            name,
            elems(
                &rng.vec(blocks8 * bs8 * h),
                vec![blocks8, bs8, h],
                Dtype::I8,
            ),
        );
    }
    q8.insert(
        "blocktable",
        HostTensor::from_i32(&[3, 0, 2, 1], vec![2, 2]),
    );
    q8.insert("actualSeqLengths", HostTensor::from_i64(&[40, 33], vec![2]));
    let scale: Vec<f32> = (0..2 * h).map(|c| 0.01 + 0.0001 * (c % 7) as f32).collect();
    let offset: Vec<f32> = (0..2 * h).map(|c| (c % 5) as f32 - 2.0).collect();
    q8.insert(
        "antiquantScale",
        HostTensor::from_values(&scale, vec![2, h]),
    );
    q8.insert(
        "antiquantOffset",
        HostTensor::from_values(&offset, vec![2, h]),
    );
    meta(
        &mut q8,
        &[
            ("numHeads", n.to_string()),
            ("numKeyValueHeads", nkv.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", "BSH".into()),
            ("blockSize", bs8.to_string()),
        ],
    );
    out.push(("paged_bsh_int8_antiquant", q8));
    // Contiguous BNSD KV with a [B,1,1,S] mask.
    let s = 7usize;
    let mut c = Bundle::default();
    c.insert(
        "query",
        HostTensor::from_f64_as(&rng.vec(b_ * n * d), vec![b_, n, 1, d], dtype),
    );
    c.insert(
        "key",
        HostTensor::from_f64_as(&rng.vec(b_ * nkv * s * d), vec![b_, nkv, s, d], dtype),
    );
    c.insert(
        "value",
        HostTensor::from_f64_as(&rng.vec(b_ * nkv * s * d), vec![b_, nkv, s, d], dtype),
    );
    let mask: Vec<u8> = (0..b_ * s).map(|e| (e % 3 == 1) as u8).collect();
    c.insert(
        "attenMask",
        HostTensor::from_u8(mask, vec![b_, 1, 1, s], Dtype::BOOL),
    );
    meta(
        &mut c,
        &[
            ("numHeads", n.to_string()),
            ("numKeyValueHeads", nkv.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", "BNSD".into()),
        ],
    );
    out.push(("contiguous_bnsd_mask", c));
    out
}

/// A float or int8 tensor from f64 values (int8: rounded to integers in [-127, 127]).
fn elems(v: &[f64], shape: Vec<usize>, dtype: Dtype) -> HostTensor {
    if dtype == Dtype::I8 {
        let q: Vec<i8> = v.iter().map(|x| (x * 100.0).round() as i8).collect();
        HostTensor::from_i8(&q, shape)
    } else {
        HostTensor::from_f64_as(v, shape, dtype)
    }
}

/// The cache scatter's cases: Norm (key and value, key only), PA_NZ, Nct, and the compressed
/// modes Alibi, Rope and Omni. Caches start from a fill value so untouched slots are checked.
pub fn scatter_bundles(dtype: Dtype) -> Vec<(&'static str, Bundle)> {
    let mut rng = Rng::new(60);
    let (t, n, d, nb, bs) = (5usize, 2usize, 16usize, 3usize, 16usize);
    let fill = |len: usize, x: f64| vec![x; len];
    let key = rng.vec(t * n * d);
    let value = rng.vec(t * n * d);
    let slots = [5i64, -1, 0, 40, 17];
    let base = |kc: Vec<usize>, with_value: bool, mode: &str| {
        let mut b = Bundle::default();
        b.insert("key", elems(&key, vec![t, n, d], dtype));
        let cl: usize = kc.iter().product();
        b.insert("keyCache", elems(&fill(cl, -0.5), kc.clone(), dtype));
        if with_value {
            b.insert("value", elems(&value, vec![t, n, d], dtype));
            b.insert("valueCache", elems(&fill(cl, 0.25), kc, dtype));
        }
        b.insert(
            "slotMapping",
            HostTensor::from_i32(&slots.map(|s| s as i32), vec![t]),
        );
        meta(&mut b, &[("cacheMode", mode.into())]);
        b
    };
    let mut out = vec![
        ("norm_key_value", base(vec![nb, bs, n, d], true, "Norm")),
        ("norm_key_only", base(vec![nb, bs, n, d], false, "Norm")),
    ];
    if dtype != Dtype::I8 {
        // PA_NZ: 32 bytes per innermost row (16 halves).
        let last = 32 / (dtype.bitsize() / 8);
        out.push((
            "pa_nz_key_value",
            base(vec![nb, n * d / last, bs, last], true, "PA_NZ"),
        ));
    }
    // Nct: token i of key at i·strides[0] + offsets[0] (elements), of value at i·strides[0] +
    // offsets[1]; equal strides, so the readings of the value stride agree.
    let stride = 2 * n * d;
    let kst = rng.vec(t * stride);
    let vst = rng.vec(t * stride);
    let mut nct = base(vec![nb, bs, n, d], true, "Norm");
    nct.insert("key", elems(&kst, vec![2 * t, n, d], dtype));
    nct.insert("value", elems(&vst, vec![2 * t, n, d], dtype));
    meta(
        &mut nct,
        &[
            ("scatterMode", "Nct".into()),
            ("strides", format!("[{stride}, {stride}]")),
            ("offsets", format!("[{}, 0]", n * d)),
        ],
    );
    // CANN has no INT8 kernel for Nct, Rope or Omni (`scatter_pa_kv_cache.cpp`): the contract
    // refuses those, so the INT8 run covers Norm, key-only and Alibi.
    let int8 = dtype == Dtype::I8;
    if !int8 {
        out.push(("nct", nct));
    }
    // Compressed: B = 2, N = 2, seqLens [4, 3]; caches [blocks, block, 1, D].
    let (ck, cv) = (rng.vec(7 * n * d), rng.vec(7 * n * d));
    let compressed = |mode: &str, slots: &[i64], lens: &[i64], offsets: Option<&[i64]>| {
        let mut b = Bundle::default();
        b.insert("key", elems(&ck, vec![7, n, d], dtype));
        b.insert("value", elems(&cv, vec![7, n, d], dtype));
        let shape = vec![4, 4, 1, d];
        b.insert("keyCache", elems(&fill(16 * d, -0.5), shape.clone(), dtype));
        b.insert("valueCache", elems(&fill(16 * d, 0.25), shape, dtype));
        b.insert(
            "slotMapping",
            HostTensor::from_i64(slots, vec![slots.len()]),
        );
        b.insert("compressLens", HostTensor::from_i64(lens, vec![lens.len()]));
        b.insert("seqLens", HostTensor::from_i64(&[4, 3], vec![2]));
        if let Some(o) = offsets {
            b.insert("compressSeqOffset", HostTensor::from_i64(o, vec![o.len()]));
        }
        meta(
            &mut b,
            &[("cacheMode", "Norm".into()), ("scatterMode", mode.into())],
        );
        b
    };
    out.push((
        "alibi",
        compressed("Alibi", &[0, 4, 8, -1], &[2, 1, 3, 2], None),
    ));
    for (name, mode) in [("rope", "Rope"), ("omni", "Omni")]
        .into_iter()
        .filter(|_| !int8)
    {
        out.push((
            name,
            compressed(mode, &[0, 4, 8, 12], &[2, 3, 1, 2], Some(&[1, 0, 0, 1])),
        ));
    }
    out
}

/// Every attention case on `device`. With `inject`, the first case's device result is
/// perturbed (the run must then fail).
pub fn run_all(device: Device, inject: bool) -> Vec<CaseResult> {
    let mut out = Vec::new();
    let mut inject = inject;
    let mut push = |r: CaseResult| out.push(r);
    for (dtype, dname) in FLOATS {
        for (i, p) in varlen_problems().into_iter().enumerate() {
            let fwd = varlen_bundle(&p, dtype, 100 + i as u64);
            push(bundle_case(
                "varlen-fwd",
                p.name,
                dname,
                Tolerance::ACCUMULATING,
                &fwd,
                device,
                std::mem::take(&mut inject),
            ));
            match varlen_bwd_bundle(&fwd, dtype, 200 + i as u64) {
                Ok(bwd) => push(bundle_case(
                    "varlen-bwd",
                    p.name,
                    dname,
                    Tolerance::ACCUMULATING,
                    &bwd,
                    device,
                    false,
                )),
                Err(e) => push(CaseResult {
                    op: "varlen-bwd".into(),
                    name: p.name.into(),
                    dtype: dname.into(),
                    status: Status::Fail,
                    max_abs_err: f64::NAN,
                    tol: f64::NAN,
                    ms: f64::NAN,
                    note: Some(format!("reference forward failed: {e}")),
                }),
            }
        }
    }
    for (dtype, dname) in HALVES {
        for (name, b) in prompt_bundles(dtype) {
            push(bundle_case(
                "prompt",
                name,
                dname,
                Tolerance::ACCUMULATING,
                &b,
                device,
                false,
            ));
        }
        for (name, b) in incre_bundles(dtype) {
            push(bundle_case(
                "incre",
                name,
                dname,
                Tolerance::ACCUMULATING,
                &b,
                device,
                false,
            ));
        }
    }
    for (dtype, dname) in [
        (Dtype::F16, "f16"),
        (Dtype::BF16, "bf16"),
        (Dtype::I8, "int8"),
    ] {
        for (name, b) in scatter_bundles(dtype) {
            push(bundle_case(
                "scatter",
                name,
                dname,
                Tolerance::EXACT,
                &b,
                device,
                false,
            ));
        }
    }
    out
}
