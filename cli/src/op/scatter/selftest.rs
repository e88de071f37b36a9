//! The cache scatter's cases of the selftest (every cache and scatter mode, in f16, bf16 and
//! int8; a copy, so exact) and its probe only hardware can answer: whether FRACTAL_NZ caches are
//! accepted.

use safetensors::Dtype;

use crate::device::{acl_dtype, acl_runtime, download, upload, upload_opt};
use crate::io::{Bundle, HostTensor};
use crate::selftest::harness::{bundle_cases, elems, guarded, meta, Rng, Tolerance};
use crate::selftest::{CaseResult, Probe};
use crate::{run_op, CliError, Device};
use burn_ascend::backend::attention::builders;
use burn_ascend::ops::scatter::{CacheMode, ScatterInputs, ScatterShapes, ScatterSpec};
use burn_ascend_cann::acl::ffi::names;
use burn_ascend_cann::acl::{DeviceTensor, Format, TensorDesc};

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

/// Every scatter case on `device`, in f16, bf16 and int8 (the caches' dtypes CANN takes). With
/// `inject`, the first case's device result is perturbed.
pub fn cases(device: Device, inject: bool) -> Vec<CaseResult> {
    let dtypes = [
        (Dtype::F16, "f16"),
        (Dtype::BF16, "bf16"),
        (Dtype::I8, "int8"),
    ];
    bundle_cases(
        "scatter",
        &dtypes,
        Tolerance::EXACT,
        scatter_bundles,
        device,
        inject,
    )
}

/// The scatter's probe.
pub fn probes(device: Device) -> Vec<Probe> {
    vec![Probe {
        name: format!(
            "FRACTAL_NZ (format 29) caches in {}",
            names::scatter_pa_kv_cache
        ),
        result: fractal_nz_probe(device),
    }]
}

/// A PA_NZ scatter with the caches described as `ACL_FORMAT_FRACTAL_NZ` (29) over the same
/// `[nb, N·D/last, bs, last]` buffer, against the reference. The project passes PA_NZ caches as
/// ND (see `TensorDesc::pa_nz_cache`); this asks the hardware whether format 29 is accepted
/// too (the simulation refuses it, as the op definition declares ND only).
fn fractal_nz_probe(device: Device) -> String {
    let Some((_, b)) = scatter_bundles(Dtype::F16)
        .into_iter()
        .find(|(n, _)| *n == "pa_nz_key_value")
    else {
        return "no PA_NZ case".into();
    };
    let want = match guarded(|| run_op("scatter", &b, Device::Reference)) {
        Ok(w) => w,
        Err(e) => return format!("reference failed: {e}"),
    };
    let run = || -> Result<Bundle, CliError> {
        let (k, v) = (b.required("key")?, b.required("value")?);
        let (kc, vc) = (b.required("keyCache")?, b.required("valueCache")?);
        let slots = b.required("slotMapping")?.i64_values("slotMapping")?;
        let mut spec = ScatterSpec::new(slots);
        spec.cache_mode = CacheMode::PaNz;
        let dt = |t: &HostTensor, name| acl_dtype(t.dtype, name);
        spec.validate(&ScatterShapes {
            key: k.shape.clone(),
            value: Some(v.shape.clone()),
            key_cache: kc.shape.clone(),
            value_cache: Some(vc.shape.clone()),
            dtypes: [
                Some(dt(k, "key")?),
                Some(dt(v, "value")?),
                Some(dt(kc, "keyCache")?),
                Some(dt(vc, "valueCache")?),
            ],
        })?;
        let rt = acl_runtime(device)?;
        let nz = |t: &HostTensor, name| -> Result<DeviceTensor, CliError> {
            let mut desc = TensorDesc::pa_nz_cache(&t.shape, acl_dtype(t.dtype, name)?)?;
            desc.format = Format::FractalNz;
            Ok(rt.upload(desc, &t.bytes)?)
        };
        let (kd, vd) = (upload(&rt, k, "key")?, upload_opt(&rt, Some(v), "value")?);
        let (kcd, vcd) = (nz(kc, "keyCache")?, nz(vc, "valueCache")?);
        {
            let vh = vd.as_ref().map(DeviceTensor::handle).transpose()?;
            let vch = vcd.handle()?;
            builders::scatter(
                &rt,
                &spec,
                &ScatterInputs {
                    key: &kd.handle()?,
                    key_cache: &kcd.handle()?,
                    value: vh.as_ref(),
                    value_cache: Some(&vch),
                },
            )?;
        }
        let mut out = Bundle::default();
        out.insert("keyCache", download(&kcd)?);
        out.insert("valueCache", download(&vcd)?);
        Ok(out)
    };
    match guarded(run) {
        Err(e) => format!("refused: {e}"),
        Ok(got) => {
            let differ: usize = ["keyCache", "valueCache"]
                .iter()
                .map(|n| {
                    let (g, w) = (&got.tensors[*n].bytes, &want.tensors[*n].bytes);
                    if g.len() != w.len() {
                        usize::MAX / 4
                    } else {
                        g.chunks(2).zip(w.chunks(2)).filter(|(a, b)| a != b).count()
                    }
                })
                .sum();
            if differ == 0 {
                "accepted; the caches match the reference".into()
            } else {
                format!("accepted but wrong: {differ} cache elements differ from the reference")
            }
        }
    }
}
