//! Fused inference attention cases of the selftest: the shapes serving runs — a prefill with a
//! learnable sink and causal mask, a paged decode with a sink, and packed TND sequences — each
//! with `softmaxLse`, in f16 and bf16 — and the probe of which `learnableSink` dtypes the
//! installed CANN takes with an F16 query.

use safetensors::Dtype;

use crate::device::{acl_runtime, download, output, upload};
use crate::io::{Bundle, HostTensor};
use crate::selftest::harness::{
    bundle_cases, compressed_causal_mask, guarded, heads_meta, Rng, Tolerance, HALVES,
};
use crate::selftest::{CaseResult, Probe};
use crate::{CliError, Device};
use burn_ascend::backend::attention::fia::fused_infer_attention;
use burn_ascend::backend::release::cann_release;
use burn_ascend::ops::fia::{
    FiaDims, FiaInputs, FiaKv, FiaKvShapes, FiaOutputs, FiaShapes, FiaSpec, PfaLayout,
};
use burn_ascend::AttnError;
use burn_ascend_cann::acl::DataType;

fn fia_bundles(dtype: Dtype) -> Vec<(&'static str, Bundle)> {
    let mut rng = Rng::new(31);
    let mut out = Vec::new();
    // BFLOAT16 whatever the query: what FIA v3 reads on every release (the sink's dtype follows
    // the path and the CANN release, not the query), and these cases never take 9.x's
    // split-fuse path (the TND one has head dim 64 and a BF16 sink).
    let sink = |rng: &mut Rng, n: usize| rng.tensor(vec![n], Dtype::BF16);
    let lse = ("softmaxLseFlag", "true".to_string());
    let causal = ("sparseMode", "3".to_string());

    // Prefill: BSH, GQA 4/2, D 64, causal from the bottom right (mode 3) over Skv > Sq, sink.
    let (b_, sq, skv, n, nkv, d) = (2usize, 5usize, 7usize, 4usize, 2usize, 64usize);
    let mut b = rng.qkv(vec![b_, sq, n * d], vec![b_, skv, nkv * d], dtype);
    b.insert("attenMask", compressed_causal_mask());
    b.insert("learnableSink", sink(&mut rng, n));
    heads_meta(&mut b, (n, nkv), "BSH", &[causal.clone(), lse.clone()]);
    out.push(("prefill_bsh_causal_sink_lse", b));

    // Decode: BSH, paged KV (block 16, 5 blocks shuffled over 2 sequences), sink.
    let (b_, n, nkv, d, bs, blocks) = (2usize, 4usize, 2usize, 64usize, 16usize, 5usize);
    let mut c = rng.qkv(vec![b_, 1, n * d], vec![blocks, bs, nkv * d], dtype);
    c.insert(
        "blockTable",
        HostTensor::from_i32(&[3, 0, 4, 1, 2, -1], vec![b_, 3]),
    );
    c.insert(
        "actualSeqLengthsKv",
        HostTensor::from_i64(&[37, 20], vec![2]),
    );
    c.insert("learnableSink", sink(&mut rng, n));
    let block_size = ("blockSize", bs.to_string());
    heads_meta(&mut c, (n, nkv), "BSH", &[block_size, lse.clone()]);
    out.push(("decode_paged_sink_lse", c));

    // Packed sequences: TND, lengths 3, 6, 4 (cumulative), mode 3, GQA 4/1, sink.
    let (tq, n, nkv, d) = (13usize, 4usize, 1usize, 64usize);
    let mut e = rng.qkv(vec![tq, n, d], vec![tq, nkv, d], dtype);
    e.insert("attenMask", compressed_causal_mask());
    let ends = HostTensor::from_i64(&[3, 9, 13], vec![3]);
    e.insert("actualSeqLengths", ends.clone());
    e.insert("actualSeqLengthsKv", ends);
    e.insert("learnableSink", sink(&mut rng, n));
    heads_meta(&mut e, (n, nkv), "TND", &[causal, lse]);
    out.push(("tnd_packed_causal_sink_lse", e));
    out
}

/// Runs every FIA case on `device` against the reference, in f16 and bf16. With `inject`, the
/// first case's device result is perturbed.
pub fn cases(device: Device, inject: bool) -> Vec<CaseResult> {
    let tol = Tolerance::ACCUMULATING;
    bundle_cases("fia", &HALVES, tol, fia_bundles, device, inject)
}

/// The sink probe's call (MHA, N 2, D 128, 4 query and 4 KV tokens, no mask) in `layout`: its
/// spec, the query's (and key's and value's) shape, and the contract's validation of it.
fn sink_problem(layout: PfaLayout) -> (FiaSpec, Vec<usize>, Result<FiaDims, AttnError>) {
    let (n, d, s) = (2usize, 128usize, 4usize);
    let shape = match layout {
        PfaLayout::Tnd => vec![s, n, d],
        _ => vec![1, n, s, d],
    };
    let mut spec = FiaSpec::new(n, 1.0 / (d as f64).sqrt(), layout);
    if layout == PfaLayout::Tnd {
        spec.actual_seq_lengths = Some(vec![s as i64]);
        spec.actual_seq_lengths_kv = Some(vec![s as i64]);
    }
    let dims = spec.validate(&FiaShapes::new(
        shape.clone(),
        FiaKvShapes::Contiguous {
            key: shape.clone(),
            value: shape.clone(),
        },
        false,
        Some(vec![n]),
    ));
    (spec, shape, dims)
}

/// The sink probe's call in `layout` with a `learnableSink` sent in `sink`, F16 Q/K/V,
/// straight through the call builder (the contract's dtype check is skipped: the device
/// answers). `Ok` when it ran and its output is finite.
fn sink_call(device: Device, layout: PfaLayout, sink: DataType) -> Result<(), CliError> {
    let (spec, shape, dims) = sink_problem(layout);
    let dims = dims?;
    let mut rng = Rng::new(53);
    let mut t = || rng.tensor(shape.clone(), Dtype::F16);
    let (q, k, v) = (t(), t(), t());
    let sink_dtype = match sink {
        DataType::Float16 => Dtype::F16,
        DataType::Bf16 => Dtype::BF16,
        _ => Dtype::F32,
    };
    let sink_values = HostTensor::from_f64_as(&[0.5, -1.0], vec![spec.num_heads], sink_dtype);
    let rt = acl_runtime(device)?;
    let (qd, kd, vd) = (
        upload(&rt, &q, "query")?,
        upload(&rt, &k, "key")?,
        upload(&rt, &v, "value")?,
    );
    let sd = upload(&rt, &sink_values, "learnableSink")?;
    let o = output(&rt, &dims.out_shape(), DataType::Float16)?;
    fused_infer_attention(
        &rt,
        &spec,
        FiaInputs::new(
            qd.handle()?,
            FiaKv::Contiguous {
                key: kd.handle()?,
                value: vd.handle()?,
            },
            Some(sd.handle()?),
        ),
        FiaOutputs {
            attention_out: &o.handle()?,
            softmax_lse: None,
        },
    )?;
    let out = download(&o)?.f32_values("attentionOut")?;
    if out.iter().all(|x| x.is_finite()) {
        Ok(())
    } else {
        Err(CliError::Device("attentionOut is not finite".into()))
    }
}

/// An error's first line, for a one-line report.
fn first_line(e: &str) -> &str {
    e.lines().next().unwrap_or("")
}

/// Which `learnableSink` dtypes FIA takes with an F16 query (head dim 128, MHA, sparse mode 0)
/// in BNSD and in TND, against what the contract's table says for the release `cann_release`
/// reads (on the simulation: the release it pretends to be). CANN <= 8.5 takes BF16 only;
/// 9.x takes BF16 in BNSD (FIA v3) and F16 in TND (the split-fuse path).
fn sink_dtype_probe(device: Device) -> String {
    let release = match acl_runtime(device).map(|rt| cann_release(&rt)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return format!("no CANN release: {e}"),
        Err(e) => return format!("could not open the device: {e}"),
    };
    let mut parts = Vec::new();
    let mut agree = true;
    for (layout, lname) in [(PfaLayout::Bnsd, "BNSD"), (PfaLayout::Tnd, "TND")] {
        for (sink, sname) in [(DataType::Bf16, "BF16"), (DataType::Float16, "F16")] {
            let got = guarded(|| sink_call(device, layout, sink));
            // The table's answer for this call on `release`.
            let (spec, _, dims) = sink_problem(layout);
            let want = dims.map(|dims| {
                spec.check_learnable_sink_dtype(&dims, DataType::Float16, sink, release)
            });
            let predicted = matches!(want, Ok(Ok(_)));
            agree &= predicted == got.is_ok();
            parts.push(match got {
                Ok(()) => format!("{lname} {sname} sink accepted"),
                Err(e) => format!("{lname} {sname} sink refused ({})", first_line(&e)),
            });
        }
    }
    format!(
        "F16 query, D 128: {}; {} the table of {}",
        parts.join(", "),
        if agree { "as" } else { "NOT as" },
        release.label()
    )
}

/// The FIA probe.
pub fn probes(device: Device) -> Vec<Probe> {
    vec![Probe {
        name: "learnableSink dtypes FIA takes with an F16 query (BNSD, TND)".into(),
        result: sink_dtype_probe(device),
    }]
}
