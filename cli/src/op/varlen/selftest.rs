//! The varlen cases of the selftest (`varlen-fwd` and `varlen-bwd` in f32, f16 and bf16: GQA
//! with and without a sink, a band, right-down causal, an external pse, ALiBi slopes and an
//! explicit mask) and the varlen probes only hardware can answer: the dropout mask's bit order
//! and CANN's dsink (and the backend's) below, past and at an exact multiple of CANN's
//! post-processing chunk.

use safetensors::Dtype;

use crate::io::{Bundle, HostTensor};
use crate::selftest::harness::{bundle_case, guarded, meta, Rng, Tolerance, FLOATS};
use crate::selftest::{CaseResult, Probe};
use crate::{run_op, CliError, Device};
use burn_ascend::ops::varlen::compressed_mask;
use burn_ascend::SparseMode;

/// Running sums of per-sequence lengths: the cumulative form `actualSeqQLen` /
/// `actualSeqKvLen` take.
fn cumulative(v: &[i64]) -> Vec<i64> {
    v.iter()
        .scan(0, |a, &x| {
            *a += x;
            Some(*a)
        })
        .collect()
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

impl Varlen {
    /// One row of the table: sequence lengths `(sq, skv)`, heads `(n, nkv)`, head dim 64.
    fn new(
        name: &'static str,
        (sq, skv): (&[i64], &[i64]),
        (n, nkv): (usize, usize),
        sink: bool,
        mode: (SparseMode, i64, i64),
        extra: VarlenExtra,
    ) -> Self {
        Self {
            name,
            sq: sq.to_vec(),
            skv: skv.to_vec(),
            n,
            nkv,
            d: 64,
            sink,
            mode,
            extra,
        }
    }
}

/// Right-down causal: every key up to the query's diagonal from the bottom right.
const CAUSAL: (SparseMode, i64, i64) = (SparseMode::RightDownCausal, 2_147_483_647, 0);

/// The problems, one row each: name, `(sq, skv)`, `(n, nkv)`, sink, mode, extra input.
#[rustfmt::skip]
fn varlen_problems() -> Vec<Varlen> {
    use VarlenExtra::{AlibiSlopes, ExplicitMask, FlatPse};
    let plain = VarlenExtra::None;
    let band = (SparseMode::Band, 3, 1);
    let three: (&[i64], &[i64]) = (&[3, 5, 2], &[4, 5, 2]);
    vec![
        Varlen::new("gqa_no_sink", three, (4, 2), false, UNBANDED, plain),
        Varlen::new("gqa_sink_band", three, (4, 2), true, band, plain),
        Varlen::new("causal_sink", (&[4, 9], &[6, 9]), (2, 2), true, CAUSAL, plain),
        Varlen::new("pse_sink", (&[3, 2], &[3, 4]), (2, 2), true, UNBANDED, FlatPse),
        Varlen::new("alibi_causal", (&[4, 3], &[4, 3]), (4, 2), false, CAUSAL, AlibiSlopes),
        Varlen::new("explicit_mask_sink", three, (4, 2), true, UNBANDED, ExplicitMask),
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

/// Every varlen case on `device`, forward then backward per problem, in f32, f16 and bf16.
/// With `inject`, the first case's device result is perturbed (the run must then fail).
pub fn cases(device: Device, inject: bool) -> Vec<CaseResult> {
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
                Err(e) => push(CaseResult::failed(
                    "varlen-bwd",
                    p.name,
                    dname,
                    Some(format!("reference forward failed: {e}")),
                )),
            }
        }
    }
    out
}

/// The varlen probes, in report order.
pub fn probes(device: Device) -> Vec<Probe> {
    vec![
        Probe {
            name: "dropout bit order within a mask byte".into(),
            result: dropout_probe(device),
        },
        Probe {
            name: "dsink of CANN and of the backend around CANN's post-processing chunk".into(),
            result: dsink_result(device),
        },
    ]
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

/// dsink partials per head of one sequence of at most 256 tokens: Sq and Skv padded to 256,
/// `256·256/baseMN` with `baseMN = 128·64` (`flash_attention_score_grad_post.h`; the
/// simulation's `DsinkPost` models the tiling).
const PARTIALS_PER_SHORT_SEQ: usize = 8;
/// Floats per post chunk at D = 64 in F16 on A2/A3: `2·postUbBaseSize/4` with
/// `postUbBaseSize = (192 KiB − 8 KiB) / 3 / 256·256 = 62 720` bytes (no NZ output at D = 64).
const POST_CHUNK_FLOATS: usize = 31_360;

/// What the dsink probe saw at one size: the max error of CANN's raw `dsinkOut` and of the
/// backend's dsink (what `run varlen-bwd` and training use), and the largest |dsink|.
struct DsinkSeen {
    cann: f64,
    backend: f64,
    scale: f64,
}

/// dsink of `seqs` sequences of 2 tokens (two heads, D = 64, F16) against
/// `dsink_h = −Σ_i p_sink,i · (dO_i · O_i)`, computed on the host from the device's own forward
/// outputs: CANN's raw `dsinkOut` (through the call builder `builders::varlen_grad`) and the
/// backend's (through `run varlen-bwd`, the Burn API).
fn dsink_probe(device: Device, seqs: usize) -> Result<DsinkSeen, CliError> {
    use crate::device::{acl_runtime, download, output, upload};
    use burn_ascend::backend::attention::builders;
    use burn_ascend::ops::varlen::{VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenSpec};
    use burn_ascend_cann::acl::DataType;

    let (n, d, len) = (2usize, 64usize, 2usize);
    let t = seqs * len;
    let mut rng = Rng::new(99);
    let mut b = Bundle::default();
    for name in ["query", "key", "value"] {
        b.insert(
            name,
            HostTensor::from_f64_as(&rng.vec(t * n * d), vec![t, n, d], Dtype::F16),
        );
    }
    let sink = [0.75f32, -0.5];
    b.insert("sink", HostTensor::from_values(&sink, vec![n]));
    let cum: Vec<i64> = (1..=seqs).map(|i| (i * len) as i64).collect();
    b.insert("actualSeqQLen", HostTensor::from_i64(&cum, vec![seqs]));
    b.insert("actualSeqKvLen", HostTensor::from_i64(&cum, vec![seqs]));
    let scale = 1.0 / (d as f64).sqrt();
    b.metadata.insert("headNum".into(), n.to_string());
    b.metadata.insert("scaleValue".into(), scale.to_string());
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
    let backend = bwd
        .tensors
        .get("dsink")
        .ok_or_else(|| CliError::Device("the backward returned no dsink".into()))?
        .f32_values("dsink")?;

    // CANN's own dsinkOut, from the same inputs.
    let rt = acl_runtime(device)?;
    let up = |name: &'static str| upload(&rt, &b.tensors[name], name);
    let ins = [
        up("query")?,
        up("key")?,
        up("value")?,
        up("dy")?,
        up("softmaxMax")?,
        up("softmaxSum")?,
        up("attentionIn")?,
        up("sink")?,
    ];
    let outs = [
        output(&rt, &[t, n, d], DataType::Float16)?,
        output(&rt, &[t, n, d], DataType::Float16)?,
        output(&rt, &[t, n, d], DataType::Float16)?,
        output(&rt, &[n], DataType::Float)?,
    ];
    {
        let h = ins
            .iter()
            .map(|x| x.handle())
            .collect::<Result<Vec<_>, _>>()?;
        let g = outs
            .iter()
            .map(|x| x.handle())
            .collect::<Result<Vec<_>, _>>()?;
        builders::varlen_grad(
            &rt,
            &VarlenSpec::new(cum.clone(), cum, n, scale),
            n,
            DataType::Float16,
            &VarlenGradInputs {
                inputs: VarlenInputs {
                    sink: Some(&h[7]),
                    ..VarlenInputs::new(&h[0], &h[1], &h[2])
                },
                dy: &h[3],
                softmax_max: &h[4],
                softmax_sum: &h[5],
                attention_in: &h[6],
            },
            &VarlenGrads {
                dq: &g[0],
                dk: &g[1],
                dv: &g[2],
                dpse: None,
                dsink: Some(&g[3]),
            },
        )?;
    }
    let cann = download(&outs[3])?.f32_values("dsinkOut")?;

    // The statistics in the default layout (`""`: per sequence, head-major, 8 copies a row).
    let layout = burn_ascend::ops::varlen::SoftmaxLayout::SequenceHeadMajor;
    let mut want = vec![0.0f64; n];
    for i in 0..t {
        for h in 0..n {
            let r = i * n + h;
            let at = layout.stat_index(i / len * len, len, n, h, i % len);
            let (m, l) = (f64::from(smax[at]), f64::from(ssum[at]));
            let p = (f64::from(sink[h]) - m).exp() / l;
            let dot: f64 = (0..d)
                .map(|x| f64::from(dyv[r * d + x]) * f64::from(ov[r * d + x]))
                .sum();
            want[h] -= p * dot;
        }
    }
    let err = |got: &[f32]| {
        got.iter()
            .zip(&want)
            .map(|(&g, w)| (f64::from(g) - w).abs())
            .fold(0.0, f64::max)
    };
    Ok(DsinkSeen {
        cann: err(&cann),
        backend: err(&backend),
        scale: want.iter().fold(1.0f64, |m, w| m.max(w.abs())),
    })
}

/// CANN's dsink and the backend's at three sizes of the post step's chunk — below it, past it,
/// and at an exact multiple of it (two chunks) — against what the release's post step predicts
/// (`CannRelease::dsink_post_step`): the backend takes CANN's dsinkOut from 9.1.0 and computes
/// its own before, so its dsink must be right at every size on every release.
fn dsink_result(device: Device) -> String {
    use burn_ascend::backend::release::cann_release;
    let release = match crate::device::acl_runtime(device).map(|rt| cann_release(&rt)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return format!("no CANN release: {e}"),
        Err(e) => return format!("could not open the device: {e}"),
    };
    let step = release.dsink_post_step();
    let (mut parts, mut agree, mut backend_right) = (Vec::new(), true, true);
    for (seqs, what) in [
        (3900, "below one chunk"),
        (4000, "past one chunk"),
        (7840, "exactly two chunks"),
    ] {
        let partials = seqs * PARTIALS_PER_SHORT_SEQ;
        match guarded(|| dsink_probe(device, seqs)) {
            Err(e) => {
                agree = false;
                parts.push(format!("{partials} partials ({what}): could not run: {e}"));
            }
            Ok(s) => {
                let right = |err: f64| err <= 1e-2 * s.scale;
                agree &= right(s.cann) == step.right_for(partials, POST_CHUNK_FLOATS);
                backend_right &= right(s.backend);
                let word = |err| if right(err) { "right" } else { "WRONG" };
                parts.push(format!(
                    "{partials} partials ({what}): CANN's dsinkOut {} (err {:.1e}), the backend's {} (err {:.1e})",
                    word(s.cann),
                    s.cann,
                    word(s.backend),
                    s.backend
                ));
            }
        }
    }
    format!(
        "{}; CANN's {} {}'s post step predicts; the backend's dsink {}",
        parts.join("; "),
        if agree { "as" } else { "NOT as" },
        release.label(),
        if backend_right {
            "right at every size"
        } else {
            "WRONG: it must compute dsink itself on this release"
        }
    )
}
