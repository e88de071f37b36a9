//! The incremental attention cases of the selftest: a paged BSH decode with GQA, a paged decode
//! over an int8 cache with antiquant scale and offset, and a contiguous BNSD decode with a mask.

use safetensors::Dtype;

use crate::io::{Bundle, HostTensor};
use crate::selftest::harness::{bundle_cases, elems, heads_meta, Rng, Tolerance, HALVES};
use crate::selftest::CaseResult;
use crate::Device;

fn incre_bundles(dtype: Dtype) -> Vec<(&'static str, Bundle)> {
    let mut rng = Rng::new(21);
    let mut out = Vec::new();
    // Paged: BSH, GQA 4/2, block size 16, a block table over 5 blocks.
    let (b_, n, nkv, d, bs, blocks) = (2usize, 4usize, 2usize, 64usize, 16usize, 5usize);
    let mut b = rng.qkv(vec![b_, 1, n * d], vec![blocks, bs, nkv * d], dtype);
    b.insert(
        "blocktable",
        HostTensor::from_i32(&[3, 0, 4, 1], vec![2, 2]),
    );
    b.insert("actualSeqLengths", HostTensor::from_i64(&[20, 9], vec![2]));
    heads_meta(&mut b, (n, nkv), "BSH", &[("blockSize", bs.to_string())]);
    out.push(("paged_bsh_gqa", b));
    // A paged decode over an int8 cache (block size 32, as CANN needs for int8 KV) with
    // per-channel antiquant scale and offset (`[2, Nkv·D]`, FLOAT): the int8 KV serving path
    // (on `Ascend` the KV, scales and offsets are converted on the device).
    let (bs8, blocks8, h) = (32usize, 4usize, nkv * d);
    let mut q8 = Bundle::default();
    q8.insert("query", rng.tensor(vec![b_, 1, n * d], dtype));
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
    heads_meta(&mut q8, (n, nkv), "BSH", &[("blockSize", bs8.to_string())]);
    out.push(("paged_bsh_int8_antiquant", q8));
    // Contiguous BNSD KV with a [B,1,1,S] mask.
    let s = 7usize;
    let mut c = rng.qkv(vec![b_, n, 1, d], vec![b_, nkv, s, d], dtype);
    let mask: Vec<u8> = (0..b_ * s).map(|e| (e % 3 == 1) as u8).collect();
    c.insert(
        "attenMask",
        HostTensor::from_u8(mask, vec![b_, 1, 1, s], Dtype::BOOL),
    );
    heads_meta(&mut c, (n, nkv), "BNSD", &[]);
    out.push(("contiguous_bnsd_mask", c));
    out
}

/// Every incremental attention case on `device` in f16 and bf16 (the harness's `HALVES`: CANN's
/// op takes no FLOAT32 query). With `inject`, the first case's device result is perturbed.
pub fn cases(device: Device, inject: bool) -> Vec<CaseResult> {
    let tol = Tolerance::ACCUMULATING;
    bundle_cases("incre", &HALVES, tol, incre_bundles, device, inject)
}
