//! What CANN was found, and the probes only hardware can answer. A probe reports what it saw;
//! it never fails the run.

use std::path::Path;

use safetensors::Dtype;

use super::attention::{guarded, scatter_bundles, Rng};
use crate::device::{acl_dtype, acl_runtime, download, upload, upload_opt};
use crate::io::{Bundle, HostTensor};
use crate::{run_op, CliError, Device};
use burn_ascend::backend::attention::builders;
use burn_ascend::ops::scatter::{CacheMode, ScatterInputs, ScatterShapes, ScatterSpec};
use burn_ascend_cann::acl::{loader, DeviceTensor, Format, TensorDesc};

/// What the device is.
pub struct Environment {
    pub device: String,
    pub cann_version: String,
    pub acl_version: String,
    pub libraries: Vec<String>,
    pub entry_points: Vec<(String, bool)>,
}

/// The device, CANN's versions, libraries and the function table's entry points.
pub fn environment(device: Device) -> Result<Environment, CliError> {
    let rt = acl_runtime(device)?;
    let acl_version = match rt.acl_version() {
        Ok((a, b, c)) => format!("{a}.{b}.{c}"),
        Err(e) => format!("unknown ({e})"),
    };
    let entry_points = rt
        .api()
        .presence()
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect();
    Ok(match device {
        Device::Npu => {
            let dir = loader::cann_dir();
            Environment {
                device: format!("npu:{} (CANN)", rt.device()),
                cann_version: dir.map_or_else(
                    || "unknown (CANN directory not known)".into(),
                    cann_package_version,
                ),
                acl_version,
                libraries: dir.map(libraries).unwrap_or_default(),
                entry_points,
            }
        }
        _ => Environment {
            device: "sim (the host simulation of the ACL ABI, not CANN)".into(),
            cann_version: "none (the simulation is not CANN)".into(),
            acl_version,
            libraries: Vec::new(),
            entry_points,
        },
    })
}

/// The `version=` line of an install-info file.
fn info_version(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.trim()
            .strip_prefix("version=")
            .map(|v| v.trim().to_string())
    })
}

/// CANN's package version from `<root>/<arch>-linux/ascend_toolkit_install.info` (what CANN's
/// install guide reads), with the ops package's `ascend_ops_install.info` where present;
/// `lib64` is the directory CANN was loaded from.
fn cann_package_version(lib64: &Path) -> String {
    let root = lib64.parent().unwrap_or(lib64);
    let arch = root.join(format!("{}-linux", std::env::consts::ARCH));
    let toolkit = info_version(&arch.join("ascend_toolkit_install.info"));
    let ops = info_version(&arch.join("ascend_ops_install.info"));
    match (toolkit, ops) {
        (Some(t), Some(o)) => format!("{t} (toolkit), ops {o}"),
        (Some(t), None) => format!("{t} (toolkit)"),
        (None, Some(o)) => format!("unknown toolkit, ops {o}"),
        (None, None) => format!(
            "unknown (no version= in {}/ascend_toolkit_install.info)",
            arch.display()
        ),
    }
}

/// The CANN libraries in `lib64` (ACL, nnopbase, the op API libraries, aclnn and custom-op
/// libraries), those this build opens marked.
fn libraries(lib64: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(lib64) else {
        return vec![format!("{} (unreadable)", lib64.display())];
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n.ends_with(".so")
                && [
                    "libascendcl",
                    "libnnopbase",
                    "libopapi",
                    "libaclnn",
                    "libcust_opapi",
                ]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .collect();
    names.sort();
    let opened = loader::loaded_libraries();
    let mut out: Vec<String> = names
        .into_iter()
        .map(|n| {
            let path = lib64.join(&n);
            let mark = if opened.contains(&path) {
                " (opened)"
            } else {
                ""
            };
            format!("{}{mark}", path.display())
        })
        .collect();
    // Custom operator packages live outside lib64.
    out.extend(
        opened
            .iter()
            .filter(|p| !p.starts_with(lib64))
            .map(|p| format!("{} (opened)", p.display())),
    );
    out
}

/// The attention entry points a CANN release may have, newest first per op.
const ATTENTION_ENTRY_POINTS: &[&str] = &[
    "aclnnFlashAttentionVarLenScoreV5",
    "aclnnFlashAttentionVarLenScoreV4",
    "aclnnFlashAttentionVarLenScoreV3",
    "aclnnFlashAttentionVarLenScoreV2",
    "aclnnFlashAttentionVarLenScore",
    "aclnnFlashAttentionUnpaddingScoreGradV5",
    "aclnnFlashAttentionUnpaddingScoreGradV4",
    "aclnnFlashAttentionUnpaddingScoreGradV3",
    "aclnnFlashAttentionUnpaddingScoreGradV2",
    "aclnnFlashAttentionUnpaddingScoreGrad",
    "aclnnPromptFlashAttentionV3",
    "aclnnPromptFlashAttentionV2",
    "aclnnPromptFlashAttention",
    "aclnnIncreFlashAttentionV4",
    "aclnnIncreFlashAttentionV3",
    "aclnnIncreFlashAttentionV2",
    "aclnnIncreFlashAttention",
    "aclnnFusedInferAttentionScoreV3",
    "aclnnFusedInferAttentionScoreV2",
    "aclnnScatterPaKvCache",
];

/// Which attention entry points exist: on the NPU both stages looked up in CANN's libraries
/// (including versions this build does not call), on the simulation its table.
fn entry_points_probe(device: Device, env: &Environment) -> String {
    let (mut present, mut absent) = (Vec::new(), Vec::new());
    for &name in ATTENTION_ENTRY_POINTS {
        let found = match device {
            Device::Npu => {
                loader::exports(name).unwrap_or(false)
                    && loader::exports(&format!("{name}GetWorkspaceSize")).unwrap_or(false)
            }
            _ => env.entry_points.iter().any(|(n, p)| n == name && *p),
        };
        if found {
            present.push(name);
        } else {
            absent.push(name);
        }
    }
    format!(
        "present: {}; absent: {}",
        present.join(", "),
        if absent.is_empty() {
            "none".into()
        } else {
            absent.join(", ")
        }
    )
}

/// One query row over 8 keys with equal scores, one mask byte with only bit 0 set, keepProb
/// 0.5 and value row j = j + 1: the output is 0.25 when bit 0 keeps element 0 (LSB first, what
/// `contract/src/dropout.rs` assumes) and 2.0 when it keeps element 7 (MSB first).
fn dropout_probe(device: Device) -> String {
    let d = 64usize;
    let mut b = Bundle::default();
    let zeros = vec![0.0f64; d];
    b.insert(
        "query",
        HostTensor::from_f64_as(&zeros, vec![1, 1, d], Dtype::F16),
    );
    let mut rng = Rng::new(7);
    b.insert(
        "key",
        HostTensor::from_f64_as(&rng.vec(8 * d), vec![8, 1, d], Dtype::F16),
    );
    let v: Vec<f64> = (0..8 * d).map(|e| (e / d + 1) as f64).collect();
    b.insert(
        "value",
        HostTensor::from_f64_as(&v, vec![8, 1, d], Dtype::F16),
    );
    b.insert(
        "dropMask",
        HostTensor::from_u8(vec![0b0000_0001], vec![1], Dtype::U8),
    );
    b.insert("actualSeqQLen", HostTensor::from_i64(&[1], vec![1]));
    b.insert("actualSeqKvLen", HostTensor::from_i64(&[8], vec![1]));
    for (k, val) in [("headNum", "1"), ("scaleValue", "1.0"), ("keepProb", "0.5")] {
        b.metadata.insert(k.into(), val.into());
    }
    let out = match guarded(|| run_op("varlen-fwd", &b, device)) {
        Ok(o) => o,
        Err(e) => return format!("could not run: {e}"),
    };
    let Some(vals) = out
        .tensors
        .get("attentionOut")
        .and_then(|t| t.f32_values("o").ok())
    else {
        return "could not read attentionOut".into();
    };
    let mean = vals.iter().map(|&x| f64::from(x)).sum::<f64>() / vals.len().max(1) as f64;
    if (mean - 0.25).abs() < 0.02 {
        format!("LSB-first (output {mean:.4}: bit 0 keeps element 0, as contract/src/dropout.rs assumes)")
    } else if (mean - 2.0).abs() < 0.05 {
        format!("MSB-first (output {mean:.4}: bit 7 keeps element 0): contract/src/dropout.rs assumes LSB-first and must change")
    } else {
        format!("neither (output {mean:.4}; LSB-first predicts 0.25, MSB-first 2.0)")
    }
}

/// dsink of the raw backward (through the call builder `builders::varlen_grad`, as `run
/// varlen-bwd` calls it) against `dsink_h = −Σ_i p_sink,i · (dO_i · O_i)`, computed on the host
/// from the device's own forward outputs. `seqs` sequences of `len` tokens, one head.
fn dsink_probe(device: Device, seqs: usize, len: usize) -> Result<(f64, f64), CliError> {
    let (n, d) = (1usize, 64usize);
    let t = seqs * len;
    let mut rng = Rng::new(99);
    let mut b = Bundle::default();
    for name in ["query", "key", "value"] {
        b.insert(
            name,
            HostTensor::from_f64_as(&rng.vec(t * n * d), vec![t, n, d], Dtype::F16),
        );
    }
    let sink = [0.75f32];
    b.insert("sink", HostTensor::from_values(&sink, vec![n]));
    let cum: Vec<i64> = (1..=seqs).map(|i| (i * len) as i64).collect();
    b.insert("actualSeqQLen", HostTensor::from_i64(&cum, vec![seqs]));
    b.insert("actualSeqKvLen", HostTensor::from_i64(&cum, vec![seqs]));
    for (k, v) in [
        ("headNum", "1".to_string()),
        ("scaleValue", (1.0 / (d as f64).sqrt()).to_string()),
    ] {
        b.metadata.insert(k.into(), v);
    }
    let fwd = run_op("varlen-fwd", &b, device)?;
    let o = fwd.tensors["attentionOut"].clone();
    let dy = HostTensor::from_f64_as(&rng.vec(t * n * d), vec![t, n, d], Dtype::F16);
    let (smax, ssum) = (
        fwd.tensors["softmaxMax"].f32_values("softmaxMax")?,
        fwd.tensors["softmaxSum"].f32_values("softmaxSum")?,
    );
    let (ov, dyv) = (o.f32_values("attentionOut")?, dy.f32_values("dy")?);
    b.insert("dy", dy);
    b.insert("attentionIn", o);
    b.insert("softmaxMax", fwd.tensors["softmaxMax"].clone());
    b.insert("softmaxSum", fwd.tensors["softmaxSum"].clone());
    let bwd = run_op("varlen-bwd", &b, device)?;
    let got = bwd
        .tensors
        .get("dsink")
        .ok_or_else(|| CliError::Device("the backward returned no dsink".into()))?
        .f32_values("dsink")?;
    let stat = smax.len() / (t * n); // 8 replicated values per row
    let mut want = vec![0.0f64; n];
    for i in 0..t {
        for h in 0..n {
            let r = i * n + h;
            let (m, l) = (f64::from(smax[r * stat]), f64::from(ssum[r * stat]));
            let p = (f64::from(sink[h]) - m).exp() / l;
            let dot: f64 = (0..d)
                .map(|x| f64::from(dyv[r * d + x]) * f64::from(ov[r * d + x]))
                .sum();
            want[h] -= p * dot;
        }
    }
    let err = got
        .iter()
        .zip(&want)
        .map(|(&g, w)| (f64::from(g) - w).abs())
        .fold(0.0, f64::max);
    let scale = want.iter().fold(1.0f64, |m, w| m.max(w.abs()));
    Ok((err, scale))
}

fn dsink_result(device: Device) -> String {
    // CANN's chunk threshold is B·s1Pad·s2Pad/baseMN·4 > 2·postUbBaseSize
    // (flash_attention_score_grad_post.h); 64 sequences of 4096 tokens are above it on A2/A3.
    // The simulation is too slow for that problem: it runs a small one, below the threshold,
    // which exercises the probe only.
    let (seqs, len, note) = match device {
        Device::Npu => (64, 4096, "64 sequences of 4096 tokens, above CANN's chunk threshold"),
        _ => (2, 64, "simulation: 2 sequences of 64 tokens, below the threshold (the probe's code path only)"),
    };
    match guarded(|| dsink_probe(device, seqs, len)) {
        Err(e) => format!("could not run ({note}): {e}"),
        Ok((err, scale)) if err <= 1e-2 * scale => {
            format!("correct (max err {err:.3e}, |dsink| up to {scale:.3e}; {note})")
        }
        Ok((err, scale)) => format!(
            "wrong (max err {err:.3e}, |dsink| up to {scale:.3e}; {note}): the backend must compute dsink itself above the threshold"
        ),
    }
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

/// Every probe.
pub fn run_all(device: Device, env: &Environment) -> Vec<super::Probe> {
    let probe = |name: &str, result: String| super::Probe {
        name: name.into(),
        result,
    };
    vec![
        probe("attention entry points", entry_points_probe(device, env)),
        probe(
            "dropout bit order within a mask byte",
            dropout_probe(device),
        ),
        probe(
            "dsink above CANN's post-processing chunk threshold",
            dsink_result(device),
        ),
        probe(
            "FRACTAL_NZ (format 29) caches in aclnnScatterPaKvCache",
            fractal_nz_probe(device),
        ),
        probe(
            "learnableSink dtypes FIA takes with an F16 query (BNSD, TND)",
            super::fia::sink_dtype_probe(device),
        ),
    ]
}
