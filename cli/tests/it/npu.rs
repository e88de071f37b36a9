//! Hardware suite: every op of the CLI through the Ascend dispatch layer, compared with the CPU
//! reference. It runs on a real NPU when CANN and a device are present (device
//! `$ASCEND_DEVICE_ID`, else 0) and otherwise prints why the NPU leg is skipped; the same
//! suite always runs against the host simulation of the ACL ABI (which is not CANN).
//!
//! Inputs are FLOAT16 (what CANN's prompt / incremental attention take); outputs are compared
//! within 1e-2 abs + 1e-2 rel of the reference rounded to FLOAT16, except the cache scatter,
//! which is a copy and must match exactly.

use burn_ascend_cli::io::{Bundle, HostTensor};
use burn_ascend_cli::{run_op, Device};
use burn_ascend_test_support::{assert_close, Rng};
use half::f16;
use safetensors::Dtype;

/// `n` values uniform in [-1, 1), rounded to FLOAT16.
fn rand(seed: u64, n: usize) -> Vec<f16> {
    Rng::new(seed)
        .vec(n, 1.0)
        .into_iter()
        .map(f16::from_f64)
        .collect()
}

fn meta(b: &mut Bundle, kv: &[(&str, &str)]) {
    for (k, v) in kv {
        b.metadata.insert(k.to_string(), v.to_string());
    }
}

/// The aclnn devices to run on: always the simulation; the NPU when usable.
fn devices() -> Vec<Device> {
    let mut out = vec![Device::Sim];
    match burn_ascend_cann::acl::Runtime::npu(
        burn_ascend_cann::acl::default_device_id().unwrap_or(0),
    ) {
        Ok(_) => out.push(Device::Npu),
        Err(e) => eprintln!("npu: skipped ({e})"),
    }
    out
}

fn compare(op: &str, input: &Bundle, exact: bool) {
    let want = run_op(op, input, Device::Reference).expect("reference");
    for device in devices() {
        let got = run_op(op, input, device).unwrap_or_else(|e| panic!("{op} on {device:?}: {e}"));
        assert_eq!(
            got.tensors
                .keys()
                .collect::<std::collections::BTreeSet<_>>(),
            want.tensors.keys().collect(),
            "{op} on {device:?}: output names"
        );
        for (name, w) in &want.tensors {
            let g = &got.tensors[name];
            assert_eq!(
                (g.dtype, &g.shape),
                (w.dtype, &w.shape),
                "{op} {name} on {device:?}"
            );
            if exact {
                assert_eq!(g.bytes, w.bytes, "{op} {name} on {device:?}");
                continue;
            }
            let (gv, wv) = (g.f32_values("x").unwrap(), w.f32_values("x").unwrap());
            assert_close(&format!("{op} {name} on {device:?}"), &gv, &wv, 1e-2, 1e-2);
        }
    }
}

/// Varlen TND: 3 sequences, GQA 4/2, D = 16, a sink, band mode 4 with CANN's compressed mask.
fn varlen_bundle() -> Bundle {
    let (sq, skv) = ([3i64, 5, 2], [4i64, 5, 2]);
    let (tq, tkv, n, nkv, d) = (10usize, 11usize, 4usize, 2usize, 16usize);
    let cum = |v: &[i64]| -> Vec<i64> {
        v.iter()
            .scan(0, |a, &x| {
                *a += x;
                Some(*a)
            })
            .collect()
    };
    let mut b = Bundle::default();
    b.insert(
        "query",
        HostTensor::from_values(&rand(1, tq * n * d), vec![tq, n, d]),
    );
    b.insert(
        "key",
        HostTensor::from_values(&rand(2, tkv * nkv * d), vec![tkv, nkv, d]),
    );
    b.insert(
        "value",
        HostTensor::from_values(&rand(3, tkv * nkv * d), vec![tkv, nkv, d]),
    );
    let sink: Vec<f32> = rand(4, n).into_iter().map(f32::from).collect();
    b.insert("sink", HostTensor::from_values(&sink, vec![n]));
    let (mask, shape) = burn_ascend::ops::varlen::compressed_mask(burn_ascend::SparseMode::Band)
        .expect("mode 4 takes the compressed mask");
    b.insert(
        "attenMask",
        HostTensor::from_u8(mask, shape.to_vec(), Dtype::BOOL),
    );
    b.insert(
        "actualSeqQLen",
        HostTensor::from_i64(&cum(&sq), vec![sq.len()]),
    );
    b.insert(
        "actualSeqKvLen",
        HostTensor::from_i64(&cum(&skv), vec![skv.len()]),
    );
    meta(
        &mut b,
        &[
            ("scaleValue", "0.25"),
            ("headNum", "4"),
            ("inputLayout", "TND"),
            ("sparseMode", "4"),
            ("preTokens", "3"),
            ("nextTokens", "1"),
            ("softmaxOutLayout", "same_as_input"),
            ("softmaxInLayout", "same_as_input"),
        ],
    );
    b
}

#[test]
fn varlen_forward_and_backward() {
    let fwd_in = varlen_bundle();
    compare("varlen-fwd", &fwd_in, false);
    let fwd = run_op("varlen-fwd", &fwd_in, Device::Reference).unwrap();
    let mut bwd_in = fwd_in.clone();
    let t = &fwd.tensors["attentionOut"];
    bwd_in.insert(
        "dy",
        HostTensor::from_values(&rand(5, t.shape.iter().product()), t.shape.clone()),
    );
    bwd_in.insert("attentionIn", t.clone());
    bwd_in.insert("softmaxMax", fwd.tensors["softmaxMax"].clone());
    bwd_in.insert("softmaxSum", fwd.tensors["softmaxSum"].clone());
    compare("varlen-bwd", &bwd_in, false);
}

#[test]
fn prompt_attention_bsh_gqa_mask_and_lengths() {
    let (b_, s, n, nkv, d) = (2usize, 6usize, 4usize, 2usize, 16usize);
    let mut b = Bundle::default();
    b.insert(
        "query",
        HostTensor::from_values(&rand(11, b_ * s * n * d), vec![b_, s, n * d]),
    );
    b.insert(
        "key",
        HostTensor::from_values(&rand(12, b_ * s * nkv * d), vec![b_, s, nkv * d]),
    );
    b.insert(
        "value",
        HostTensor::from_values(&rand(13, b_ * s * nkv * d), vec![b_, s, nkv * d]),
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
            ("numHeads", "4"),
            ("numKeyValueHeads", "2"),
            ("scaleValue", "0.25"),
            ("inputLayout", "BSH"),
            ("preTokens", "2147483647"),
            ("nextTokens", "0"),
            ("sparseMode", "0"),
        ],
    );
    compare("prompt", &b, false);
}

#[test]
fn incremental_attention_paged_and_contiguous() {
    let (b_, n, nkv, d, bs) = (2usize, 4usize, 2usize, 16usize, 16usize);
    let blocks = 5usize;
    let mut b = Bundle::default();
    b.insert(
        "query",
        HostTensor::from_values(&rand(21, b_ * n * d), vec![b_, 1, n * d]),
    );
    b.insert(
        "key",
        HostTensor::from_values(&rand(22, blocks * bs * nkv * d), vec![blocks, bs, nkv * d]),
    );
    b.insert(
        "value",
        HostTensor::from_values(&rand(23, blocks * bs * nkv * d), vec![blocks, bs, nkv * d]),
    );
    b.insert(
        "blocktable",
        HostTensor::from_i32(&[3, 0, 4, 1], vec![2, 2]),
    );
    b.insert("actualSeqLengths", HostTensor::from_i64(&[20, 9], vec![2]));
    meta(
        &mut b,
        &[
            ("numHeads", "4"),
            ("numKeyValueHeads", "2"),
            ("scaleValue", "0.25"),
            ("inputLayout", "BSH"),
            ("blockSize", "16"),
        ],
    );
    compare("incre", &b, false);

    // Contiguous BNSD KV with a mask.
    let s = 7usize;
    let mut c = Bundle::default();
    c.insert(
        "query",
        HostTensor::from_values(&rand(24, b_ * n * d), vec![b_, n, 1, d]),
    );
    c.insert(
        "key",
        HostTensor::from_values(&rand(25, b_ * nkv * s * d), vec![b_, nkv, s, d]),
    );
    c.insert(
        "value",
        HostTensor::from_values(&rand(26, b_ * nkv * s * d), vec![b_, nkv, s, d]),
    );
    let mask: Vec<u8> = (0..b_ * s).map(|e| (e % 3 == 1) as u8).collect();
    c.insert(
        "attenMask",
        HostTensor::from_u8(mask, vec![b_, 1, 1, s], Dtype::BOOL),
    );
    meta(
        &mut c,
        &[
            ("numHeads", "4"),
            ("numKeyValueHeads", "2"),
            ("scaleValue", "0.25"),
            ("inputLayout", "BNSD"),
        ],
    );
    compare("incre", &c, false);
}

#[test]
fn kv_cache_scatter_norm_and_pa_nz() {
    let (t, n, d, nb, bs) = (3usize, 2usize, 16usize, 2usize, 16usize);
    let zeros = |len| vec![f16::ZERO; len];
    let mut b = Bundle::default();
    b.insert(
        "key",
        HostTensor::from_values(&rand(31, t * n * d), vec![t, n, d]),
    );
    b.insert(
        "value",
        HostTensor::from_values(&rand(32, t * n * d), vec![t, n, d]),
    );
    b.insert("slotMapping", HostTensor::from_i32(&[17, -1, 3], vec![t]));
    b.insert(
        "keyCache",
        HostTensor::from_values(&zeros(nb * bs * n * d), vec![nb, bs, n, d]),
    );
    b.insert(
        "valueCache",
        HostTensor::from_values(&zeros(nb * bs * n * d), vec![nb, bs, n, d]),
    );
    meta(&mut b, &[("cacheMode", "Norm")]);
    compare("scatter", &b, true);

    // PA_NZ: f16 → last dim 16, cache [nb, N·D/16, bs, 16].
    let mut z = b.clone();
    let nz = vec![nb, n * d / 16, bs, 16];
    z.insert(
        "keyCache",
        HostTensor::from_values(&zeros(nb * bs * n * d), nz.clone()),
    );
    z.insert(
        "valueCache",
        HostTensor::from_values(&zeros(nb * bs * n * d), nz),
    );
    meta(&mut z, &[("cacheMode", "PA_NZ")]);
    compare("scatter", &z, true);
}
