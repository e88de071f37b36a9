//! Bad input through `burn-ascend run`: names the op does not read are refused with the
//! closest known name, and every refusal is the same exit status (2) and the same one line on
//! `reference`, `cpu`, `sim` and `npu` (validation runs before any device is opened, so `npu`
//! refuses the same way on a machine without CANN).

use std::process::Command;

use burn_ascend_cli::io::{Bundle, HostTensor};
use half::f16;
use safetensors::Dtype;

const DEVICES: [&str; 4] = ["reference", "cpu", "sim", "npu"];

/// (exit status, stderr) of one run.
fn run_on(op: &str, input: &Bundle, device: &str) -> (i32, String) {
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
    let code = out.status.code().unwrap();
    (code, String::from_utf8_lossy(&out.stderr).to_string())
}

/// Asserts exit 2 and the same single stderr line on every device, containing `want`.
fn refused_everywhere(op: &str, input: &Bundle, want: &str) -> String {
    let mut first: Option<String> = None;
    for device in DEVICES {
        let (code, err) = run_on(op, input, device);
        assert_eq!(code, 2, "{op} on {device}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{op} on {device}: one line: {err}"
        );
        assert!(
            err.contains(want),
            "{op} on {device}: `{want}` not in: {err}"
        );
        match &first {
            None => first = Some(err),
            Some(f) => assert_eq!(&err, f, "{op}: {device} differs from reference"),
        }
    }
    first.unwrap()
}

/// Asserts the same outcome (status and, on failure, stderr) on the host devices and `sim`
/// (`npu` cannot succeed here), returning the status.
fn same_everywhere(op: &str, input: &Bundle) -> i32 {
    let (code, err) = run_on(op, input, "reference");
    for device in ["cpu", "sim"] {
        let (c, e) = run_on(op, input, device);
        assert_eq!(
            c, code,
            "{op}: {device} exits {c} ({e}), reference {code} ({err})"
        );
        if code != 0 {
            assert_eq!(e, err, "{op}: {device} says otherwise than reference");
        }
    }
    code
}

fn meta(b: &mut Bundle, kv: &[(&str, &str)]) {
    for (k, v) in kv {
        b.metadata.insert(k.to_string(), v.to_string());
    }
}

fn ramp(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 101) as f32 / 101.0 - 0.5)
        .collect()
}

/// Two sequences (3 and 2 tokens), 2 heads, dim 8, no mask.
fn varlen_bundle() -> Bundle {
    let (t, n, d) = (5, 2, 8);
    let mut b = Bundle::default();
    for name in ["query", "key", "value"] {
        b.insert(
            name,
            HostTensor::from_values(&ramp(t * n * d), vec![t, n, d]),
        );
    }
    b.insert("actualSeqQLen", HostTensor::from_i64(&[3, 5], vec![2]));
    b.insert("actualSeqKvLen", HostTensor::from_i64(&[3, 5], vec![2]));
    meta(&mut b, &[("headNum", "2"), ("scaleValue", "0.35")]);
    b
}

/// BSND, batch 2, S 3, Skv 4, 2 heads, dim 8.
fn prompt_bundle() -> Bundle {
    let (bt, s, skv, n, d) = (2, 3, 4, 2, 8);
    let mut b = Bundle::default();
    b.insert(
        "query",
        HostTensor::from_values(&ramp(bt * s * n * d), vec![bt, s, n, d]),
    );
    for name in ["key", "value"] {
        b.insert(
            name,
            HostTensor::from_values(&ramp(bt * skv * n * d), vec![bt, skv, n, d]),
        );
    }
    meta(
        &mut b,
        &[
            ("numHeads", "2"),
            ("scaleValue", "0.35"),
            ("inputLayout", "BSND"),
        ],
    );
    b
}

/// BNSD decode, batch 2, 2 heads, Skv 6, dim 8.
fn incre_bundle() -> Bundle {
    let (bt, n, skv, d) = (2, 2, 6, 8);
    let mut b = Bundle::default();
    b.insert(
        "query",
        HostTensor::from_values(&ramp(bt * n * d), vec![bt, n, 1, d]),
    );
    for name in ["key", "value"] {
        b.insert(
            name,
            HostTensor::from_values(&ramp(bt * n * skv * d), vec![bt, n, skv, d]),
        );
    }
    meta(
        &mut b,
        &[
            ("numHeads", "2"),
            ("scaleValue", "0.35"),
            ("inputLayout", "BNSD"),
        ],
    );
    b
}

/// Norm caches, 3 tokens into 2 blocks of 4.
fn scatter_bundle() -> Bundle {
    let (t, n, d, nb, bs) = (3, 2, 8, 2, 4);
    let mut b = Bundle::default();
    for name in ["key", "value"] {
        b.insert(
            name,
            HostTensor::from_values(&ramp(t * n * d), vec![t, n, d]),
        );
    }
    for name in ["keyCache", "valueCache"] {
        b.insert(
            name,
            HostTensor::from_values(&vec![0.0f32; nb * bs * n * d], vec![nb, bs, n, d]),
        );
    }
    b.insert("slotMapping", HostTensor::from_i32(&[5, 0, 7], vec![t]));
    b
}

#[test]
fn the_fixtures_run_on_every_host_device_and_the_simulation() {
    for (op, b) in [
        ("varlen-fwd", varlen_bundle()),
        ("prompt", prompt_bundle()),
        ("incre", incre_bundle()),
        ("scatter", scatter_bundle()),
    ] {
        assert_eq!(same_everywhere(op, &b), 0, "{op}");
    }
}

#[test]
fn a_misspelled_attribute_is_refused_with_the_closest_known_name() {
    let mut b = varlen_bundle();
    let v = b.metadata.remove("scaleValue").unwrap();
    b.metadata.insert("scalevalue".into(), v);
    let err = refused_everywhere("varlen-fwd", &b, "unknown attribute `scalevalue`");
    assert_eq!(
        err.trim_end(),
        "error: unknown attribute `scalevalue` — did you mean `scaleValue`?"
    );

    let mut b = prompt_bundle();
    meta(&mut b, &[("sparse_mode", "0")]);
    let err = refused_everywhere("prompt", &b, "unknown attribute `sparse_mode`");
    assert!(err.contains("did you mean `sparseMode`?"), "{err}");

    let mut b = scatter_bundle();
    meta(&mut b, &[("cachemode", "Norm")]);
    refused_everywhere("scatter", &b, "did you mean `cacheMode`?");

    // A name far from every known one lists what the op reads.
    let mut b = incre_bundle();
    meta(&mut b, &[("temperature", "0.7")]);
    let err = refused_everywhere("incre", &b, "unknown attribute `temperature`");
    assert!(err.contains("incre reads: inputLayout, numHeads"), "{err}");
}

#[test]
fn a_misspelled_tensor_is_refused_with_the_closest_known_name() {
    let mut b = prompt_bundle();
    b.insert(
        "attnMask",
        HostTensor::from_u8(vec![0; 12], vec![3, 4], Dtype::BOOL),
    );
    let err = refused_everywhere("prompt", &b, "unknown tensor `attnMask`");
    assert_eq!(
        err.trim_end(),
        "error: unknown tensor `attnMask` — did you mean `attenMask`?"
    );

    let mut b = incre_bundle();
    b.insert("actualSeqLength", HostTensor::from_i64(&[6, 6], vec![2]));
    refused_everywhere("incre", &b, "did you mean `actualSeqLengths`?");

    // An attribute stored as a tensor (and the other way round) says so.
    let mut b = varlen_bundle();
    b.insert("headNum", HostTensor::from_i64(&[2], vec![1]));
    refused_everywhere("varlen-fwd", &b, "`headNum` is an attribute");
    let mut b = scatter_bundle();
    meta(&mut b, &[("slotMapping", "[5, 0, 7]")]);
    refused_everywhere("scatter", &b, "`slotMapping` is a tensor");
}

#[test]
fn the_tensor_list_form_and_the_container_format_key_are_known() {
    let mut b = incre_bundle();
    let (k, v) = (
        b.tensors.remove("key").unwrap(),
        b.tensors.remove("value").unwrap(),
    );
    let half = |t: &HostTensor| {
        let vals = t.values::<f32>("t").unwrap();
        HostTensor::from_values(&vals[..vals.len() / 2], vec![1, 2, 6, 8])
    };
    b.insert("key.0", half(&k));
    b.insert("key.1", half(&k));
    b.insert("value.0", half(&v));
    b.insert("value.1", half(&v));
    meta(&mut b, &[("format", "pt")]);
    assert_eq!(same_everywhere("incre", &b), 0);
    // `key.x` is not the list form.
    b.insert("key.x", half(&k));
    refused_everywhere("incre", &b, "unknown tensor `key.x`");
}

#[test]
fn a_dtype_only_the_host_kernels_decoded_is_refused_on_every_device() {
    // The key's dtype differs from the query's: the CPU path refused it while decoding, the
    // dispatch layer passed it on to the simulation (exit 3).
    let mut b = varlen_bundle();
    let k: Vec<f16> = ramp(5 * 2 * 8).into_iter().map(f16::from_f32).collect();
    b.insert("key", HostTensor::from_values(&k, vec![5, 2, 8]));
    refused_everywhere("varlen-fwd", &b, "invalid key:");
}

#[test]
fn inputs_one_device_accepted_and_another_refused_now_get_the_same_answer() {
    // A prompt mask covering actualSeqLengths but not the query's S: the host devices ran,
    // the simulation refused with exit 3.
    let mut b = prompt_bundle();
    b.insert("actualSeqLengths", HostTensor::from_i64(&[2, 2], vec![2]));
    b.insert(
        "attenMask",
        HostTensor::from_u8(vec![0; 2 * 4], vec![2, 4], Dtype::BOOL),
    );
    refused_everywhere("prompt", &b, "invalid attenMask:");

    // Incremental attention with batch 0: the host devices returned an empty output, the
    // simulation (as CANN's IFA tiling) refused.
    let mut b = incre_bundle();
    for name in ["query", "key", "value"] {
        let mut t = b.tensors[name].clone();
        t.shape[0] = 0;
        t.bytes.clear();
        b.insert(name, t);
    }
    refused_everywhere("incre", &b, "invalid query:");

    // Zero tokens: the same (successful) answer on every device.
    let mut b = varlen_bundle();
    for name in ["query", "key", "value"] {
        let mut t = b.tensors[name].clone();
        t.shape[0] = 0;
        t.bytes.clear();
        b.insert(name, t);
    }
    b.insert("actualSeqQLen", HostTensor::from_i64(&[0, 0], vec![2]));
    b.insert("actualSeqKvLen", HostTensor::from_i64(&[0, 0], vec![2]));
    assert_eq!(same_everywhere("varlen-fwd", &b), 0);
    let mut b = scatter_bundle();
    for name in ["key", "value"] {
        let mut t = b.tensors[name].clone();
        t.shape[0] = 0;
        t.bytes.clear();
        b.insert(name, t);
    }
    b.insert("slotMapping", HostTensor::from_i32(&[], vec![0]));
    assert_eq!(same_everywhere("scatter", &b), 0);
}

#[test]
fn extreme_attributes_are_refused_on_every_device() {
    let mut b = varlen_bundle();
    meta(&mut b, &[("scaleValue", "1e300")]);
    refused_everywhere("varlen-fwd", &b, "invalid scaleValue:");
    let mut b = varlen_bundle();
    meta(&mut b, &[("keepProb", "5e-324")]);
    refused_everywhere("varlen-fwd", &b, "invalid keepProb:");
    let mut b = prompt_bundle();
    meta(&mut b, &[("scaleValue", "1e300")]);
    refused_everywhere("prompt", &b, "invalid scaleValue:");
    let mut b = incre_bundle();
    meta(&mut b, &[("scaleValue", "-1e39")]);
    refused_everywhere("incre", &b, "invalid scaleValue:");
    let mut b = prompt_bundle();
    b.insert(
        "attenMask",
        HostTensor::from_u8(vec![0; 12], vec![3, 4], Dtype::BOOL),
    );
    meta(&mut b, &[("nextTokens", &i64::MIN.to_string())]);
    refused_everywhere("prompt", &b, "invalid nextTokens:");
    let mut b = varlen_bundle();
    b.insert(
        "attenMask",
        HostTensor::from_u8(vec![0; 9], vec![3, 3], Dtype::BOOL),
    );
    meta(
        &mut b,
        &[("preTokens", &i64::MIN.to_string()), ("nextTokens", "0")],
    );
    refused_everywhere("varlen-fwd", &b, "invalid preTokens:");
}

#[test]
fn empty_shapes_whose_other_dims_multiply_past_usize_are_refused_not_crashed() {
    let huge = 1usize << 40;
    for (op, b) in [
        ("varlen-fwd", varlen_bundle()),
        ("prompt", prompt_bundle()),
        ("incre", incre_bundle()),
        ("scatter", scatter_bundle()),
    ] {
        for name in ["query", "key", "keyCache"] {
            let Some(t) = b.tensors.get(name) else {
                continue;
            };
            let mut bad = b.clone();
            let mut shape = vec![0usize; t.shape.len()];
            shape[1..].iter_mut().for_each(|d| *d = huge);
            bad.insert(
                name,
                HostTensor {
                    dtype: t.dtype,
                    shape,
                    bytes: Vec::new(),
                },
            );
            let (code, err) = run_on(op, &bad, "reference");
            assert_eq!(code, 2, "{op} {name}: {err}");
            refused_everywhere(op, &bad, "invalid ");
        }
    }
}
