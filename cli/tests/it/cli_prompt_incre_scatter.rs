//! CLI round trips for `burn-ascend run prompt|incre|scatter` on aclnn-named safetensors
//! bundles, checked against the composite Burn path (independent of the CLI's reference
//! kernel), plus bad input: exit 2 and one stderr line naming the parameter.

use std::process::Command;

use crate::common::{close, Rng};
use burn::backend::NdArray;
use burn_ascend::kernels::reference::incre::incre_flash_attention_int8;
use burn_ascend::ops::host::{from_vec, to_vec};
use burn_ascend::ops::incre::{
    composite as icomp, BlockTable, IfaLayout, IncreHostValues, IncreKvShapes, IncreShapes,
    IncreSpec,
};
use burn_ascend::ops::prompt::{composite as pcomp, PfaLayout, PromptMaskKind, PromptSpec};
use burn_ascend::ops::scatter::{composite as scomp, ScatterSpec};
use burn_ascend::{IncreInputs, IncreKv, PromptInputs, ScatterInputs};
use burn_ascend_cli::io::{Bundle, HostTensor};
use half::f16;
use safetensors::Dtype;

type B = NdArray;

fn run(op: &str, input: &Bundle) -> (Option<Bundle>, i32, String) {
    run_on(op, input, "cpu")
}

pub(crate) fn run_on(op: &str, input: &Bundle, device: &str) -> (Option<Bundle>, i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let (inp, outp) = (
        dir.path().join("in.safetensors"),
        dir.path().join("out.safetensors"),
    );
    input.write(&inp).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_burn-ascend"))
        .args(["run", op])
        .arg(&inp)
        .arg(&outp)
        .args(["--device", device])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let bundle = out.status.success().then(|| Bundle::read(&outp).unwrap());
    if !out.status.success() {
        assert!(!outp.exists(), "a refused call writes no output");
    }
    (bundle, out.status.code().unwrap(), stderr)
}

/// Runs on the CPU and, through the Ascend dispatch layer, on its host simulation of the ACL
/// ABI (`--device sim`), which must give `--device reference`'s answer: its bytes for F16 /
/// BF16 / INT8 calls, within 1e-5 for F32 ones.
pub(crate) fn ok(op: &str, input: &Bundle) -> Bundle {
    let (b, code, err) = run(op, input);
    assert_eq!(code, 0, "{err}");
    let b = b.unwrap();
    let (reference, code, err) = run_on(op, input, "reference");
    assert_eq!(code, 0, "--device reference: {err}");
    let f32_call = ["query", "key"]
        .iter()
        .find_map(|n| input.tensors.get(*n))
        .is_some_and(|t| t.dtype == Dtype::F32);
    let (sim, code, err) = run_on(op, input, "sim");
    if f32_call && input.tensors.contains_key("quantScale2") {
        // int8 output needs CANN's op, which takes no FLOAT query: refused, naming why.
        assert_eq!(code, 2, "--device sim: {err}");
        assert!(
            err.contains("quantScale2") && err.contains("f32 query"),
            "{err}"
        );
        return b;
    }
    assert_eq!(code, 0, "--device sim: {err}");
    let (sim, reference) = (sim.unwrap(), reference.unwrap());
    if !f32_call {
        // The simulation runs the reference kernels on what it decodes from the descriptors,
        // so it must equal `--device reference` bit for bit (`--device cpu` runs the fast
        // decode kernel for incre, which the callers compare within tolerance).
        assert_eq!(
            sim, reference,
            "--device sim differs from --device reference for {op}"
        );
        return b;
    }
    // CANN's PFA, IFA, FIA and scatter take no FLOAT: an f32 call on `Ascend` runs the counted
    // composite on the device's native ops, f32 arithmetic against the reference's f64.
    assert_eq!(
        sim.tensors.keys().collect::<Vec<_>>(),
        reference.tensors.keys().collect::<Vec<_>>(),
        "{op}"
    );
    for (name, want) in &reference.tensors {
        let got = &sim.tensors[name];
        assert_eq!(
            (got.dtype, &got.shape),
            (want.dtype, &want.shape),
            "{op}: {name}"
        );
        if want.dtype != Dtype::F32 {
            assert_eq!(got, want, "{op}: {name}");
            continue;
        }
        let f = |t: &HostTensor| -> Vec<f32> {
            t.bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        for (i, (g, w)) in f(got).into_iter().zip(f(want)).enumerate() {
            let same = g == w || (g - w).abs() <= 1e-5 * w.abs().max(1.0);
            assert!(same, "{op}: {name}[{i}]: sim {g} vs reference {w}");
        }
    }
    b
}

pub(crate) fn refused(op: &str, input: &Bundle, param: &str) {
    for device in ["cpu", "sim"] {
        let (_, code, err) = run_on(op, input, device);
        assert_eq!(code, 2, "{device}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(&format!("invalid {param}:")),
            "{device} names {param}: {err}"
        );
    }
}

pub(crate) fn meta(b: &mut Bundle, kv: &[(&str, &str)]) {
    for (k, v) in kv {
        b.metadata.insert(k.to_string(), v.to_string());
    }
}

fn prompt_bundle(rng: &mut Rng) -> (Bundle, PromptSpec, [Vec<f32>; 4]) {
    let (b, s, skv, n, nkv, d) = (2, 3, 5, 4, 2, 8);
    let q = rng.vec_f32(b * s * n * d, 1.0);
    let k = rng.vec_f32(b * skv * nkv * d, 1.0);
    let v = rng.vec_f32(b * skv * nkv * d, 1.0);
    let mask: Vec<u8> = (0..s * skv).map(|e| (e % 5 == 3) as u8).collect();
    let mut x = Bundle::default();
    x.insert("query", HostTensor::from_values(&q, vec![b, s, n, d]));
    x.insert("key", HostTensor::from_values(&k, vec![b, skv, nkv, d]));
    x.insert("value", HostTensor::from_values(&v, vec![b, skv, nkv, d]));
    x.insert(
        "attenMask",
        HostTensor::from_u8(mask.clone(), vec![s, skv], Dtype::BOOL),
    );
    x.insert("actualSeqLengthsKv", HostTensor::from_i64(&[5, 4], vec![2]));
    meta(
        &mut x,
        &[
            ("numHeads", "4"),
            ("numKeyValueHeads", "2"),
            ("scaleValue", "0.35"),
            ("inputLayout", "BSND"),
            ("preTokens", "2"),
            ("nextTokens", "1"),
        ],
    );
    let mut spec = PromptSpec::new(n, 0.35, PfaLayout::Bsnd);
    spec.num_key_value_heads = nkv;
    spec.pre_tokens = 2;
    spec.next_tokens = 1;
    spec.actual_seq_lengths_kv = Some(vec![5, 4]);
    spec.atten_mask = PromptMaskKind::Dense;
    let mask = mask.iter().map(|&x| f32::from(x)).collect();
    (x, spec, [q, k, v, mask])
}

#[test]
fn prompt_round_trip_against_the_composite_and_int8_and_f16_outputs() {
    let mut rng = Rng(1);
    let (x, spec, [q, k, v, mask]) = prompt_bundle(&mut rng);
    let out = ok("prompt", &x);
    let got = out.tensors["attentionOut"].values::<f32>("t").unwrap();
    assert_eq!(out.tensors["attentionOut"].shape, vec![2, 3, 4, 8]);
    let d = Default::default();
    let want = pcomp::prompt_fwd::<B>(
        PromptInputs {
            query: from_vec::<B>(q.clone(), &[2, 3, 4, 8], &d),
            key: from_vec::<B>(k.clone(), &[2, 5, 2, 8], &d),
            value: from_vec::<B>(v.clone(), &[2, 5, 2, 8], &d),
            atten_mask: Some(from_vec::<B>(mask, &[3, 5], &d)),
            pse_shift: None,
        },
        &spec,
    )
    .unwrap();
    let want = to_vec::<B>(want);
    close("attentionOut", &got, &want, 1e-5, 1e-4).unwrap();

    // int8 output: quantScale2 per tensor, no offset.
    let mut x8 = x.clone();
    x8.insert("quantScale2", HostTensor::from_values(&[50.0f32], vec![1]));
    let o8 = ok("prompt", &x8);
    assert_eq!(o8.tensors["attentionOut"].dtype, Dtype::I8);
    let got8 = o8.tensors["attentionOut"].i8_values("t").unwrap();
    for (g, w) in got8.iter().zip(&want) {
        assert!(
            (*g as f32 - (w * 50.0).clamp(-128.0, 127.0)).abs() <= 1.0,
            "{g} vs {}",
            w * 50.0
        );
    }

    // f16 in → f16 out.
    let mut xh = x.clone();
    for name in ["query", "key", "value"] {
        let t = &x.tensors[name];
        let h: Vec<f16> = t
            .values::<f32>("t")
            .unwrap()
            .iter()
            .map(|&y| f16::from_f32(y))
            .collect();
        xh.insert(name, HostTensor::from_values(&h, t.shape.clone()));
    }
    let oh = ok("prompt", &xh);
    assert_eq!(oh.tensors["attentionOut"].dtype, Dtype::F16);
    let goth: Vec<f32> = oh.tensors["attentionOut"].f32_values("t").unwrap();
    close("f16", &goth, &want, 2e-2, 2e-2).unwrap();
}

#[test]
fn prompt_bad_inputs_name_the_parameter() {
    let mut rng = Rng(2);
    let (x, ..) = prompt_bundle(&mut rng);
    let mut b = x.clone();
    meta(&mut b, &[("numHeads", "8")]);
    refused("prompt", &b, "numHeads");
    let mut b = x.clone();
    meta(&mut b, &[("sparseMode", "6")]);
    refused("prompt", &b, "sparseMode");
    let mut b = x.clone();
    meta(&mut b, &[("sparseMode", "3")]);
    refused("prompt", &b, "attenMask"); // needs the compressed 2048x2048 mask
    let mut b = x.clone();
    b.insert(
        "attenMask",
        HostTensor::from_u8(vec![2; 15], vec![3, 5], Dtype::U8),
    );
    refused("prompt", &b, "attenMask");
    let mut b = x.clone();
    b.insert("actualSeqLengthsKv", HostTensor::from_i32(&[5, 4], vec![2]));
    refused("prompt", &b, "actualSeqLengthsKv");
    let mut b = x.clone();
    b.metadata.remove("numHeads");
    refused("prompt", &b, "numHeads");
    let mut b = x;
    meta(&mut b, &[("inputLayout", "SBH")]);
    refused("prompt", &b, "inputLayout");
}

#[test]
fn incre_round_trips_contiguous_list_and_paged_int8() {
    let mut rng = Rng(3);
    let (b, n, nkv, s, d) = (2, 4, 2, 32, 8);
    let q = rng.vec_f32(b * n * d, 1.0);
    let k = rng.vec_f32(b * nkv * s * d, 1.0);
    let v = rng.vec_f32(b * nkv * s * d, 1.0);
    let mut x = Bundle::default();
    x.insert("query", HostTensor::from_values(&q, vec![b, n, 1, d]));
    x.insert("key", HostTensor::from_values(&k, vec![b, nkv, s, d]));
    x.insert("value", HostTensor::from_values(&v, vec![b, nkv, s, d]));
    x.insert("actualSeqLengths", HostTensor::from_i64(&[30, 7], vec![2]));
    meta(
        &mut x,
        &[
            ("numHeads", "4"),
            ("numKeyValueHeads", "2"),
            ("scaleValue", "0.3"),
            ("inputLayout", "BNSD"),
        ],
    );
    let out = ok("incre", &x).tensors["attentionOut"]
        .values::<f32>("t")
        .unwrap();
    let mut spec = IncreSpec::new(n, 0.3, IfaLayout::Bnsd);
    spec.num_key_value_heads = nkv;
    spec.actual_seq_lengths = Some(vec![30, 7]);
    let dv = Default::default();
    let want = to_vec::<B>(
        icomp::incre_fwd::<B>(
            IncreInputs::new(
                from_vec::<B>(q.clone(), &[b, n, 1, d], &dv),
                IncreKv::Contiguous {
                    key: from_vec::<B>(k.clone(), &[b, nkv, s, d], &dv),
                    value: from_vec::<B>(v.clone(), &[b, nkv, s, d], &dv),
                },
            ),
            &spec,
        )
        .unwrap(),
    );
    close("incre", &out, &want, 1e-5, 1e-4).unwrap();

    // Tensor-list form: key.0/key.1 are the batches; same result.
    let mut xl = x.clone();
    xl.tensors.remove("key");
    xl.tensors.remove("value");
    let per = nkv * s * d;
    for i in 0..b {
        xl.insert(
            &format!("key.{i}"),
            HostTensor::from_values(&k[i * per..(i + 1) * per], vec![1, nkv, s, d]),
        );
        xl.insert(
            &format!("value.{i}"),
            HostTensor::from_values(&v[i * per..(i + 1) * per], vec![1, nkv, s, d]),
        );
    }
    let outl = ok("incre", &xl).tensors["attentionOut"]
        .values::<f32>("t")
        .unwrap();
    assert_eq!(outl, out);

    // Paged int8 KV (BSH cache (blocknum, 32, H)) with per-tensor antiquant and int8 output.
    let bs = 32;
    let k8: Vec<i8> = (0..3 * bs * nkv * d)
        .map(|i| ((i * 37) % 200) as i8)
        .collect();
    let v8: Vec<i8> = (0..3 * bs * nkv * d)
        .map(|i| ((i * 53) % 180) as i8)
        .collect();
    let table = [2i32, 0, 1, 0];
    let mut xp = Bundle::default();
    xp.insert("query", HostTensor::from_values(&q, vec![b, 1, n * d]));
    xp.insert("key", HostTensor::from_i8(&k8, vec![3, bs, nkv * d]));
    xp.insert("value", HostTensor::from_i8(&v8, vec![3, bs, nkv * d]));
    xp.insert("blocktable", HostTensor::from_i32(&table, vec![2, 2]));
    xp.insert("actualSeqLengths", HostTensor::from_i64(&[40, 9], vec![2]));
    xp.insert(
        "antiquantScale",
        HostTensor::from_values(&[0.02f32, 0.01], vec![2]),
    );
    xp.insert(
        "antiquantOffset",
        HostTensor::from_values(&[1.0f32, -2.0], vec![2]),
    );
    meta(
        &mut xp,
        &[
            ("numHeads", "4"),
            ("numKeyValueHeads", "2"),
            ("scaleValue", "0.3"),
            ("inputLayout", "BSH"),
            ("blockSize", "32"),
        ],
    );
    let outp = ok("incre", &xp).tensors["attentionOut"]
        .values::<f32>("t")
        .unwrap();
    let mut ps = IncreSpec::new(n, 0.3, IfaLayout::Bsh);
    ps.num_key_value_heads = nkv;
    ps.block_size = bs;
    ps.actual_seq_lengths = Some(vec![40, 9]);
    ps.block_table = Some(BlockTable {
        data: table.to_vec().into(),
        shape: vec![2, 2],
    });
    let (aq_scale, aq_offset) = ([0.02f32, 0.01], [1.0f32, -2.0]);
    let kf: Vec<f32> = k8.iter().map(|&x| x as f32).collect();
    let vf: Vec<f32> = v8.iter().map(|&x| x as f32).collect();
    let want = to_vec::<B>(
        icomp::incre_fwd::<B>(
            IncreInputs {
                antiquant_scale: Some(from_vec::<B>(aq_scale.to_vec(), &[2], &dv)),
                antiquant_offset: Some(from_vec::<B>(aq_offset.to_vec(), &[2], &dv)),
                ..IncreInputs::new(
                    from_vec::<B>(q.clone(), &[b, 1, n * d], &dv),
                    IncreKv::Paged {
                        key_cache: from_vec::<B>(kf.clone(), &[3, bs, nkv * d], &dv),
                        value_cache: from_vec::<B>(vf.clone(), &[3, bs, nkv * d], &dv),
                    },
                )
            },
            &ps,
        )
        .unwrap(),
    );
    close("paged int8", &outp, &want, 1e-5, 1e-4).unwrap();
    let mut xq = xp.clone();
    xq.insert("quantScale2", HostTensor::from_values(&[4.0f32], vec![1]));
    xq.insert("quantOffset2", HostTensor::from_values(&[1.0f32], vec![1]));
    let o8 = ok("incre", &xq).tensors["attentionOut"]
        .i8_values("t")
        .unwrap();
    let dims = ps
        .validate(&IncreShapes {
            antiquant_scale: Some(vec![2]),
            antiquant_offset: Some(vec![2]),
            ..IncreShapes::new(
                vec![b, 1, n * d],
                IncreKvShapes::Paged {
                    key_cache: vec![3, bs, nkv * d],
                    value_cache: vec![3, bs, nkv * d],
                },
                true,
            )
        })
        .unwrap();
    let pq = burn_ascend::contract::incre::IfaPostQuant {
        scale: &[4.0],
        offset: Some(&[1.0]),
    };
    assert_eq!(
        o8,
        incre_flash_attention_int8(
            &ps.args(
                &dims,
                &q,
                ps.paged(&dims, &kf, &vf).unwrap(),
                IncreHostValues {
                    antiquant_scale: Some(&aq_scale),
                    antiquant_offset: Some(&aq_offset),
                    ..Default::default()
                }
            ),
            &pq
        )
    );

    // Bad input: blocktable must be INT32; int8 KV needs antiquantScale.
    let mut bad = xp.clone();
    bad.insert(
        "blocktable",
        HostTensor::from_i64(&[2, 0, 1, 0], vec![2, 2]),
    );
    refused("incre", &bad, "blocktable");
    let mut bad = xp.clone();
    bad.tensors.remove("antiquantScale");
    bad.tensors.remove("antiquantOffset");
    refused("incre", &bad, "antiquantScale");
    let mut bad = xp;
    meta(&mut bad, &[("blockSize", "16")]);
    refused("incre", &bad, "blockSize");
}

#[test]
fn scatter_round_trip_and_refused_writes_nothing() {
    let mut rng = Rng(4);
    let (t, n, d, nb, bs) = (4, 2, 8, 3, 16);
    let key = rng.vec_f32(t * n * d, 1.0);
    let value = rng.vec_f32(t * n * d, 1.0);
    let kc = vec![0.5f32; nb * bs * n * d];
    let slots = [17i32, -1, 0, 40];
    let mut x = Bundle::default();
    x.insert("key", HostTensor::from_values(&key, vec![t, n, d]));
    x.insert("value", HostTensor::from_values(&value, vec![t, n, d]));
    x.insert("keyCache", HostTensor::from_values(&kc, vec![nb, bs, n, d]));
    x.insert(
        "valueCache",
        HostTensor::from_values(&kc, vec![nb, bs, n, d]),
    );
    x.insert("slotMapping", HostTensor::from_i32(&slots, vec![t]));
    meta(&mut x, &[("cacheMode", "Norm"), ("scatterMode", "None")]);
    let out = ok("scatter", &x);
    let dv = Default::default();
    let spec = ScatterSpec::new(slots.iter().map(|&s| s as i64).collect());
    let want = scomp::scatter_kv::<B>(
        ScatterInputs {
            key: from_vec::<B>(key.clone(), &[t, n, d], &dv),
            value: Some(from_vec::<B>(value.clone(), &[t, n, d], &dv)),
            key_cache: from_vec::<B>(kc.clone(), &[nb, bs, n, d], &dv),
            value_cache: Some(from_vec::<B>(kc.clone(), &[nb, bs, n, d], &dv)),
        },
        &spec,
    )
    .unwrap();
    assert_eq!(
        out.tensors["keyCache"].values::<f32>("t").unwrap(),
        to_vec::<B>(want.key_cache)
    );
    assert_eq!(
        out.tensors["valueCache"].values::<f32>("t").unwrap(),
        to_vec::<B>(want.value_cache.unwrap())
    );

    // PA_NZ with f16 caches: last dim 16.
    let mut xn = Bundle::default();
    let kh: Vec<f16> = key.iter().map(|&y| f16::from_f32(y)).collect();
    xn.insert("key", HostTensor::from_values(&kh, vec![t, n, d]));
    xn.insert(
        "keyCache",
        HostTensor::from_values(&vec![f16::ZERO; nb * bs * n * d], vec![nb, 1, bs, 16]),
    );
    xn.insert(
        "slotMapping",
        HostTensor::from_i64(&[17, -1, 0, 40], vec![t]),
    );
    meta(&mut xn, &[("cacheMode", "PA_NZ")]);
    let on = ok("scatter", &xn);
    let c: Vec<f16> = on.tensors["keyCache"].values::<f16>("t").unwrap();
    // slot 17 = block 1, offset 1: [1, 0, 1, :] holds token 0.
    assert_eq!(&c[(bs + 1) * 16..(bs + 2) * 16], &kh[..16]);
    assert!(!on.tensors.contains_key("valueCache"));

    // Refused: duplicate slot, index dtype mismatch, bad mode.
    let mut b = x.clone();
    b.insert(
        "slotMapping",
        HostTensor::from_i32(&[17, 3, 0, 17], vec![t]),
    );
    refused("scatter", &b, "slotMapping");
    let mut b = x.clone();
    b.insert("seqLens", HostTensor::from_i64(&[4], vec![1]));
    refused("scatter", &b, "seqLens");
    let mut b = x.clone();
    meta(&mut b, &[("scatterMode", "Foo")]);
    refused("scatter", &b, "scatterMode");
    let mut b = x;
    b.insert(
        "valueCache",
        HostTensor::from_values(&vec![f16::ZERO; nb * bs * n * d], vec![nb, bs, n, d]),
    );
    refused("scatter", &b, "valueCache");
}

/// CANN ignores `kvPaddingSize` with a block table, without `actualSeqLengths` or with a list
/// of several key/value tensors (`CheckSupportKVLeftPadding`): the replay runs such a call as
/// the call without it on every device, with one note on stderr naming why. Where CANN applies
/// the padding it changes the output, so an ignored one is not ignored by accident.
#[test]
fn incre_replays_a_kv_padding_cann_ignores_as_the_call_without_it_with_a_note() {
    let mut rng = Rng(5);
    let (b, n, nkv, s, d, bs) = (2, 4, 2, 32, 16, 16);
    let half = |v: Vec<f32>| -> Vec<f16> { v.into_iter().map(f16::from_f32).collect() };
    let attrs = |x: &mut Bundle, layout: &str| {
        meta(
            x,
            &[
                ("numHeads", "4"),
                ("numKeyValueHeads", "2"),
                ("scaleValue", "0.25"),
                ("inputLayout", layout),
            ],
        )
    };
    let lengths = HostTensor::from_i64(&[20, 9], vec![2]);
    let (q, k, v) = (
        half(rng.vec_f32(b * n * d, 1.0)),
        half(rng.vec_f32(b * nkv * s * d, 1.0)),
        half(rng.vec_f32(b * nkv * s * d, 1.0)),
    );

    // A paged BSH cache of 3 blocks of 16 tokens.
    let mut paged = Bundle::default();
    paged.insert("query", HostTensor::from_values(&q, vec![b, 1, n * d]));
    paged.insert(
        "key",
        HostTensor::from_values(&k[..3 * bs * nkv * d], vec![3, bs, nkv * d]),
    );
    paged.insert(
        "value",
        HostTensor::from_values(&v[..3 * bs * nkv * d], vec![3, bs, nkv * d]),
    );
    paged.insert(
        "blocktable",
        HostTensor::from_i32(&[2, 0, 1, 0], vec![2, 2]),
    );
    paged.insert("actualSeqLengths", lengths.clone());
    attrs(&mut paged, "BSH");
    meta(&mut paged, &[("blockSize", "16")]);
    // One contiguous BNSD key/value, with and without lengths.
    let mut contiguous = Bundle::default();
    contiguous.insert("query", HostTensor::from_values(&q, vec![b, n, 1, d]));
    contiguous.insert("key", HostTensor::from_values(&k, vec![b, nkv, s, d]));
    contiguous.insert("value", HostTensor::from_values(&v, vec![b, nkv, s, d]));
    attrs(&mut contiguous, "BNSD");
    let without_lengths = contiguous.clone();
    contiguous.insert("actualSeqLengths", lengths);
    // The tensor-list form, one tensor per batch.
    let mut list = contiguous.clone();
    list.tensors.remove("key");
    list.tensors.remove("value");
    let per = nkv * s * d;
    for i in 0..b {
        let part =
            |x: &[f16]| HostTensor::from_values(&x[i * per..(i + 1) * per], vec![1, nkv, s, d]);
        list.insert(&format!("key.{i}"), part(&k));
        list.insert(&format!("value.{i}"), part(&v));
    }

    let pad = |x: &Bundle| {
        let mut x = x.clone();
        x.insert("kvPaddingSize", HostTensor::from_i64(&[3], vec![1]));
        x
    };
    let cases = [
        ("blocktable", &paged, "page attention (blocktable) is used"),
        (
            "no lengths",
            &without_lengths,
            "actualSeqLengths is not given",
        ),
        ("list", &list, "a tensor list of more than one tensor"),
    ];
    for (name, plain, why) in cases {
        for device in ["reference", "cpu", "sim"] {
            let (want, code, err) = run_on("incre", plain, device);
            assert_eq!(code, 0, "{name} on {device}, without padding: {err}");
            assert!(!err.contains("kvPaddingSize"), "{err}");
            let (got, code, err) = run_on("incre", &pad(plain), device);
            assert_eq!(code, 0, "{name} on {device}: {err}");
            assert_eq!(got.unwrap(), want.unwrap(), "{name} on {device}");
            let notes: Vec<&str> = err
                .lines()
                .filter(|l| l.starts_with("note: incre: kvPaddingSize ignored"))
                .collect();
            assert_eq!(notes.len(), 1, "{name} on {device}: one note: {err}");
            assert!(notes[0].contains(why), "{name} on {device}: {err}");
        }
    }

    // Applied (one contiguous tensor with lengths): the padding moves the window.
    for device in ["reference", "cpu", "sim"] {
        let (plain, _, _) = run_on("incre", &contiguous, device);
        let (padded, code, err) = run_on("incre", &pad(&contiguous), device);
        assert_eq!(code, 0, "{device}: {err}");
        assert!(!err.contains("note:"), "{device}: {err}");
        assert_ne!(padded.unwrap(), plain.unwrap(), "{device}: applied padding");
    }
}
