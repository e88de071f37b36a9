//! The varlen cases of the selftest (`varlen-fwd` and `varlen-bwd` in f32, f16 and bf16: GQA
//! with and without a sink, a band, right-down causal, an external pse, ALiBi slopes and an
//! explicit mask) and the varlen probes only hardware can answer: the dropout mask's bit order
//! and dsink above CANN's post-processing chunk threshold.

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
            name: "dsink above CANN's post-processing chunk threshold".into(),
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
