//! The selftest's harness for Burn-level cases (each a function of the `Ascend` device and a
//! dtype: the backend's native ops in `native`, the fused ops in `crate::op::fused::selftest`):
//! the device's result against `NdArray` on the same values, each in f32, f16 and bf16. Inputs
//! are multiples of 1/8 in [-2, 2), exact in f32, f16 and bf16, so the reference sees the
//! device's inputs exactly. A case also fails when the backend's counted host fallback ran
//! during it: the point is the aclnn path.

use std::time::Instant;

use burn::backend::NdArray;
use burn::tensor::{DType, Tensor, TensorData};

use super::harness::{guarded, Tolerance};
use super::report::{CaseResult, Status};
use crate::{CliError, Device};
use burn_ascend::backend::{fallback_counts, Ascend, AscendDevice};

type A = Ascend;
type N = NdArray;

/// The Burn device of an aclnn `Device`.
fn ascend(device: Device) -> Result<AscendDevice, CliError> {
    Ok(match device {
        Device::Npu => AscendDevice::npu(burn_ascend_cann::acl::default_device_id()? as u32),
        _ => AscendDevice::sim(),
    })
}

pub fn data(shape: &[usize], seed: u32) -> TensorData {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            (x % 32) as f32 / 8.0 - 2.0
        })
        .collect();
    TensorData::new(v, shape.to_vec())
}

/// The same values on the device (in `dtype`) and on the reference (f32).
pub fn pair<const D: usize>(
    shape: [usize; D],
    seed: u32,
    dev: &AscendDevice,
    dtype: DType,
) -> (Tensor<A, D>, Tensor<N, D>) {
    let d = data(&shape, seed);
    (
        Tensor::<A, D>::from_data(d.clone(), dev).cast(dtype),
        Tensor::<N, D>::from_data(d, &Default::default()),
    )
}

pub fn host<const D: usize>(t: Tensor<A, D>) -> Vec<f32> {
    t.into_data()
        .convert_dtype(DType::F32)
        .to_vec::<f32>()
        .unwrap_or_default()
}

pub fn reference<const D: usize>(t: Tensor<N, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap_or_default()
}

/// `(device result, reference)` of one case, as f32.
pub type Outcome = (Vec<f32>, Vec<f32>);
pub type CaseFn = fn(&AscendDevice, DType) -> Outcome;

/// One case: `(op, name, tolerance, function)`.
pub type BackendCase = (&'static str, &'static str, Tolerance, CaseFn);

/// Host fallback counts that moved between two snapshots.
fn moved(
    before: &std::collections::BTreeMap<&'static str, u64>,
    after: &std::collections::BTreeMap<&'static str, u64>,
) -> Vec<String> {
    after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, _)| (*k).to_string())
        .collect()
}

/// Every case of `tables` in f32, f16 and bf16 (per dtype, the tables in their order).
pub fn run_all(device: Device, tables: &[fn() -> Vec<BackendCase>]) -> Vec<CaseResult> {
    let mut out = Vec::new();
    let dev = match ascend(device) {
        Ok(d) => d,
        Err(e) => {
            out.push(CaseResult::failed(
                "native",
                "open_device",
                "-",
                Some(e.to_string()),
            ));
            return out;
        }
    };
    for (dtype, dname) in [
        (DType::F32, "f32"),
        (DType::F16, "f16"),
        (DType::BF16, "bf16"),
    ] {
        for (op, name, tol, f) in tables.iter().flat_map(|cases| cases()) {
            let mut res = CaseResult::failed(op, name, dname, None);
            let runs = if device == Device::Npu { 2 } else { 1 };
            let mut outcome = None;
            for i in 0..runs {
                let before = fallback_counts();
                let t0 = Instant::now();
                let r = guarded(|| Ok(f(&dev, dtype)));
                res.ms = t0.elapsed().as_secs_f64() * 1e3;
                let fell_back = moved(&before, &fallback_counts());
                if i == 0 {
                    outcome = Some((r, fell_back));
                }
            }
            let (r, fell_back) = outcome.expect("ran at least once");
            match r {
                Err(e) => res.note = Some(format!("device failed: {e}")),
                Ok((got, want)) => {
                    let rel = tol.of(match dtype {
                        DType::F16 => safetensors::Dtype::F16,
                        DType::BF16 => safetensors::Dtype::BF16,
                        _ => safetensors::Dtype::F32,
                    });
                    let scale = if op == "random" {
                        1.0
                    } else {
                        want.iter().fold(1.0f64, |m, &x| m.max(f64::from(x).abs()))
                    };
                    let t = rel * scale;
                    let err = if got.len() != want.len() {
                        f64::INFINITY
                    } else {
                        got.iter()
                            .zip(&want)
                            .map(|(&a, &b)| {
                                let e = (f64::from(a) - f64::from(b)).abs();
                                if e.is_nan() {
                                    f64::INFINITY
                                } else {
                                    e
                                }
                            })
                            .fold(0.0, f64::max)
                    };
                    res.max_abs_err = err;
                    res.tol = t;
                    if !fell_back.is_empty() {
                        res.note = Some(format!("host fallback ran: {}", fell_back.join(", ")));
                    } else if got.len() != want.len() {
                        res.note = Some(format!("{} values, reference {}", got.len(), want.len()));
                    } else if err > t {
                        res.note = Some(format!("max |got − ref| {err:.3e} > {t:.3e}"));
                    } else {
                        res.status = Status::Pass;
                    }
                }
            }
            out.push(res);
        }
    }
    out
}
