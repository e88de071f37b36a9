//! The prompt attention cases of the selftest: BSH with GQA, a dense mask and per-batch
//! lengths (with and without a `pseShift`), and BNSD right-down causal with CANN's compressed
//! mask.

use safetensors::Dtype;

use crate::io::{Bundle, HostTensor};
use crate::selftest::harness::{
    bundle_cases, compressed_causal_mask, heads_meta, meta, Rng, Tolerance, HALVES,
};
use crate::selftest::CaseResult;
use crate::Device;

fn prompt_bundles(dtype: Dtype) -> Vec<(&'static str, Bundle)> {
    let mut rng = Rng::new(11);
    let mut out = Vec::new();
    // BSH, GQA 4/2, a dense [B,1,S,S] mask and per-batch lengths.
    let (b_, s, n, nkv, d) = (2usize, 6usize, 4usize, 2usize, 64usize);
    let mut b = rng.qkv(vec![b_, s, n * d], vec![b_, s, nkv * d], dtype);
    let mask: Vec<u8> = (0..b_ * s * s)
        .map(|e| ((e % s) > (e / s) % s) as u8)
        .collect();
    b.insert(
        "attenMask",
        HostTensor::from_u8(mask, vec![b_, 1, s, s], Dtype::BOOL),
    );
    b.insert("actualSeqLengths", HostTensor::from_i64(&[6, 4], vec![2]));
    b.insert("actualSeqLengthsKv", HostTensor::from_i64(&[5, 6], vec![2]));
    heads_meta(&mut b, (n, nkv), "BSH", &[("sparseMode", "0".into())]);
    // The same call with a `pseShift` `[1, N, S, S]` in the query's dtype (on `Ascend` it stays
    // on the device, cast there if needed).
    let mut with_pse = b.clone();
    with_pse.insert("pseShift", rng.tensor(vec![1, n, s, s], dtype));
    out.push(("bsh_gqa_mask_lengths", b));
    out.push(("bsh_gqa_mask_pse", with_pse));
    // BNSD, right-down causal (sparseMode 3) with CANN's compressed mask, Skv > Sq.
    let (b_, n, sq, skv, d) = (1usize, 2usize, 5usize, 9usize, 64usize);
    let mut c = rng.qkv(vec![b_, n, sq, d], vec![b_, n, skv, d], dtype);
    c.insert("attenMask", compressed_causal_mask());
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

/// Every prompt case on `device` in f16 and bf16 (the harness's `HALVES`: CANN's op takes no
/// FLOAT32 query). With `inject`, the first case's device result is perturbed.
pub fn cases(device: Device, inject: bool) -> Vec<CaseResult> {
    let tol = Tolerance::ACCUMULATING;
    bundle_cases("prompt", &HALVES, tol, prompt_bundles, device, inject)
}
