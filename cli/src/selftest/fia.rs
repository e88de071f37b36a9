//! Fused inference attention (`aclnnFusedInferAttentionScoreV4`) cases of the selftest: the
//! shapes serving runs — a prefill with a learnable sink and causal mask, a paged decode with a
//! sink, and packed TND sequences — each with `softmaxLse`, in f16 and bf16.

use safetensors::Dtype;

use super::attention::{bundle_case, meta, Rng, Tolerance, HALVES};
use super::report::CaseResult;
use crate::io::{Bundle, HostTensor};
use crate::Device;

/// CANN's compressed causal mask: 2048 × 2048, 1 strictly above the diagonal.
fn compressed_mask() -> HostTensor {
    let m: Vec<u8> = (0..2048 * 2048)
        .map(|e| u8::from(e % 2048 > e / 2048))
        .collect();
    HostTensor::from_u8(m, vec![2048, 2048], Dtype::BOOL)
}

fn fia_bundles(dtype: Dtype) -> Vec<(&'static str, Bundle)> {
    let mut rng = Rng::new(31);
    let mut out = Vec::new();
    let t = |rng: &mut Rng, shape: Vec<usize>| {
        let n = shape.iter().product();
        HostTensor::from_f64_as(&rng.vec(n), shape, dtype)
    };
    let sink = |rng: &mut Rng, n: usize| HostTensor::from_f64_as(&rng.vec(n), vec![n], dtype);

    // Prefill: BSH, GQA 4/2, D 64, causal from the bottom right (mode 3) over Skv > Sq, sink.
    let (b_, sq, skv, n, nkv, d) = (2usize, 5usize, 7usize, 4usize, 2usize, 64usize);
    let mut b = Bundle::default();
    b.insert("query", t(&mut rng, vec![b_, sq, n * d]));
    b.insert("key", t(&mut rng, vec![b_, skv, nkv * d]));
    b.insert("value", t(&mut rng, vec![b_, skv, nkv * d]));
    b.insert("attenMask", compressed_mask());
    b.insert("learnableSink", sink(&mut rng, n));
    meta(
        &mut b,
        &[
            ("numHeads", n.to_string()),
            ("numKeyValueHeads", nkv.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", "BSH".into()),
            ("sparseMode", "3".into()),
            ("softmaxLseFlag", "true".into()),
        ],
    );
    out.push(("prefill_bsh_causal_sink_lse", b));

    // Decode: BSH, paged KV (block 16, 5 blocks shuffled over 2 sequences), sink.
    let (b_, n, nkv, d, bs, blocks) = (2usize, 4usize, 2usize, 64usize, 16usize, 5usize);
    let mut c = Bundle::default();
    c.insert("query", t(&mut rng, vec![b_, 1, n * d]));
    c.insert("key", t(&mut rng, vec![blocks, bs, nkv * d]));
    c.insert("value", t(&mut rng, vec![blocks, bs, nkv * d]));
    c.insert(
        "blockTable",
        HostTensor::from_i32(&[3, 0, 4, 1, 2, -1], vec![b_, 3]),
    );
    c.insert(
        "actualSeqLengthsKv",
        HostTensor::from_i64(&[37, 20], vec![2]),
    );
    c.insert("learnableSink", sink(&mut rng, n));
    meta(
        &mut c,
        &[
            ("numHeads", n.to_string()),
            ("numKeyValueHeads", nkv.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", "BSH".into()),
            ("blockSize", bs.to_string()),
            ("softmaxLseFlag", "true".into()),
        ],
    );
    out.push(("decode_paged_sink_lse", c));

    // Packed sequences: TND, lengths 3, 6, 4 (cumulative), mode 3, GQA 4/1, sink.
    let (tq, n, nkv, d) = (13usize, 4usize, 1usize, 64usize);
    let mut e = Bundle::default();
    e.insert("query", t(&mut rng, vec![tq, n, d]));
    e.insert("key", t(&mut rng, vec![tq, nkv, d]));
    e.insert("value", t(&mut rng, vec![tq, nkv, d]));
    e.insert("attenMask", compressed_mask());
    e.insert(
        "actualSeqLengths",
        HostTensor::from_i64(&[3, 9, 13], vec![3]),
    );
    e.insert(
        "actualSeqLengthsKv",
        HostTensor::from_i64(&[3, 9, 13], vec![3]),
    );
    e.insert("learnableSink", sink(&mut rng, n));
    meta(
        &mut e,
        &[
            ("numHeads", n.to_string()),
            ("numKeyValueHeads", nkv.to_string()),
            ("scaleValue", "0.125".into()),
            ("inputLayout", "TND".into()),
            ("sparseMode", "3".into()),
            ("softmaxLseFlag", "true".into()),
        ],
    );
    out.push(("tnd_packed_causal_sink_lse", e));
    out
}

/// Runs every FIA case on `device` against the reference.
pub fn run_all(device: Device) -> Vec<CaseResult> {
    let mut out = Vec::new();
    for (dtype, dname) in HALVES {
        for (name, b) in fia_bundles(dtype) {
            out.push(bundle_case(
                "fia",
                name,
                dname,
                Tolerance::ACCUMULATING,
                &b,
                device,
                false,
            ));
        }
    }
    out
}
