//! CLI round trips for `burn-ascend run fia` on aclnn-named safetensors bundles: every FIA case
//! of the Burn suite written as a bundle, run on `cpu`, `reference` and `sim` (the simulation
//! must give the reference's bytes), checked against the composite Burn path (independent of
//! the CLI's reference); bad input exits 2 with one stderr line naming the parameter, and the
//! V4 inputs left out are `unsupported`.

use burn::backend::NdArray;
use burn_ascend::ops::fia::{composite as fcomp, FiaKvShapes, FiaMask};
use burn_ascend::ops::host::to_vec;
use burn_ascend_cli::io::{Bundle, HostTensor};
use safetensors::Dtype;

use crate::cli_prompt_incre_scatter::{meta, ok, refused, run_on};
use crate::common::close;
use crate::prompt_incre_scatter::fia::{fia_cases, fia_inputs_on, lse_close, FCase};

type B = NdArray;

fn f32t(v: &[f32], shape: &[usize]) -> HostTensor {
    HostTensor::from_values(v, shape.to_vec())
}

/// A case as a bundle under the aclnn names.
fn bundle(c: &FCase) -> Bundle {
    let s = &c.spec;
    let mut b = Bundle::default();
    let (ks, vs) = match &c.shapes.kv {
        FiaKvShapes::Contiguous { key, value } => (key.clone(), value.clone()),
        FiaKvShapes::Paged {
            key_cache,
            value_cache,
        } => (key_cache.clone(), value_cache.clone()),
    };
    b.insert("query", f32t(&c.q, &c.shapes.query));
    if c.shapes.kv_int8 {
        let i8s = |v: &[f32]| v.iter().map(|&x| x as i8).collect::<Vec<_>>();
        b.insert("key", HostTensor::from_i8(&i8s(&c.k), ks));
        b.insert("value", HostTensor::from_i8(&i8s(&c.v), vs));
    } else {
        b.insert("key", f32t(&c.k, &ks));
        b.insert("value", f32t(&c.v, &vs));
    }
    match (&s.atten_mask, &c.opt.mask, &c.shapes.atten_mask) {
        (FiaMask::Dense, Some(data), Some(shape)) => b.insert(
            "attenMask",
            HostTensor::from_u8(data.to_vec(), shape.clone(), Dtype::BOOL),
        ),
        (FiaMask::Compressed, ..) => {
            let m: Vec<u8> = (0..2048 * 2048)
                .map(|e| u8::from(e % 2048 > e / 2048))
                .collect();
            b.insert(
                "attenMask",
                HostTensor::from_u8(m, vec![2048, 2048], Dtype::BOOL),
            );
        }
        _ => {}
    }
    if let (Some(p), Some(shape)) = (&c.opt.pse, &c.shapes.pse_shift) {
        b.insert("pseShift", f32t(p, shape));
    }
    for (name, l) in [
        ("actualSeqLengths", &s.actual_seq_lengths),
        ("actualSeqLengthsKv", &s.actual_seq_lengths_kv),
    ] {
        if let Some(l) = l {
            b.insert(name, HostTensor::from_i64(l, vec![l.len()]));
        }
    }
    for (name, p) in [
        ("queryPaddingSize", s.query_padding_size),
        ("kvPaddingSize", s.kv_padding_size),
    ] {
        if let Some(p) = p {
            b.insert(name, HostTensor::from_i64(&[p], vec![1]));
        }
    }
    if let Some(t) = &s.block_table {
        b.insert("blockTable", HostTensor::from_i32(&t.data, t.shape.clone()));
    }
    let sh = &c.shapes;
    for ([scale, offset], [values, offsets], shape) in [
        (
            ["antiquantScale", "antiquantOffset"],
            &c.opt.antiquant[0],
            &sh.antiquant_scale,
        ),
        (
            ["keyAntiquantScale", "keyAntiquantOffset"],
            &c.opt.antiquant[1],
            &sh.key_antiquant_scale,
        ),
        (
            ["valueAntiquantScale", "valueAntiquantOffset"],
            &c.opt.antiquant[2],
            &sh.value_antiquant_scale,
        ),
    ] {
        if let (Some(v), Some(shape)) = (values, shape) {
            b.insert(scale, f32t(v, shape));
            if let Some(o) = offsets {
                b.insert(offset, f32t(o, shape));
            }
        }
    }
    if let Some(x) = &c.sink {
        b.insert("learnableSink", f32t(x, &[x.len()]));
    }
    let n = |x: i64| x.to_string();
    meta(
        &mut b,
        &[
            ("numHeads", &s.num_heads.to_string()),
            ("scaleValue", &format!("{:?}", s.scale_value)),
            ("preTokens", &n(s.pre_tokens)),
            ("nextTokens", &n(s.next_tokens)),
            ("inputLayout", s.input_layout.as_attr()),
            ("numKeyValueHeads", &s.num_key_value_heads.to_string()),
            ("sparseMode", &n(s.sparse_mode)),
            ("innerPrecise", &n(s.inner_precise)),
            ("blockSize", &s.block_size.to_string()),
            ("antiquantMode", &n(s.antiquant_mode)),
            (
                "softmaxLseFlag",
                if s.softmax_lse_flag { "true" } else { "false" },
            ),
            ("keyAntiquantMode", &n(s.key_antiquant_mode)),
            ("valueAntiquantMode", &n(s.value_antiquant_mode)),
        ],
    );
    b
}

#[test]
fn fia_round_trips_every_case_on_cpu_reference_and_sim_against_the_composite() {
    for c in fia_cases() {
        let out = ok("fia", &bundle(&c));
        let want = fcomp::fia_fwd::<B>(fia_inputs_on::<B>(&c, &Default::default()), &c.spec)
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let got = out.tensors["attentionOut"]
            .f32_values("attentionOut")
            .unwrap();
        close(c.name, &got, &to_vec::<B>(want.attention_out), 1e-5, 1e-4).unwrap();
        match (out.tensors.get("softmaxLse"), want.softmax_lse) {
            (Some(l), Some(w)) => {
                assert_eq!(l.dtype, Dtype::F32, "{}: softmaxLse is f32", c.name);
                lse_close(
                    c.name,
                    &l.f32_values("softmaxLse").unwrap(),
                    &to_vec::<B>(w),
                );
            }
            (None, None) => {}
            (l, w) => panic!("{}: softmaxLse {} vs {}", c.name, l.is_some(), w.is_some()),
        }
    }
}

#[test]
fn fia_bad_inputs_name_the_parameter_and_left_out_inputs_are_unsupported() {
    let cases = fia_cases();
    let x = bundle(&cases[0]);
    let mut b = x.clone();
    meta(&mut b, &[("numHeads", "8")]);
    refused("fia", &b, "numHeads");
    let mut b = x.clone();
    meta(&mut b, &[("softmaxLseFlag", "yes")]);
    refused("fia", &b, "softmaxLseFlag");
    let mut b = x.clone();
    b.insert("learnableSink", f32t(&[0.0; 3], &[3]));
    refused("fia", &b, "learnableSink");
    let mut b = x.clone();
    b.insert(
        "attenMask",
        HostTensor::from_u8(vec![0; 35], vec![5, 7], Dtype::BOOL),
    );
    refused("fia", &b, "attenMask");
    let paged = bundle(&cases[2]);
    let mut b = paged.clone();
    meta(&mut b, &[("blockSize", "8")]);
    refused("fia", &b, "blockSize");
    let mut b = paged;
    b.tensors.remove("actualSeqLengthsKv");
    refused("fia", &b, "actualSeqLengthsKv");
    for (name, t) in [
        ("queryRope", f32t(&[0.0], &[1])),
        ("keySharedPrefix", f32t(&[0.0], &[1])),
    ] {
        let mut b = x.clone();
        b.insert(name, t);
        let (_, code, err) = run_on("fia", &b, "sim");
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("unsupported"), "{name}: {err}");
    }
    let mut b = x;
    meta(&mut b, &[("sparseMode", "9")]);
    let (_, code, err) = run_on("fia", &b, "cpu");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unsupported: sparseMode 9"), "{err}");
}

/// `run fia` with extra arguments and environment variables: (exit code, stderr).
fn run_with(input: &Bundle, device: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let (inp, outp) = (dir.path().join("in.st"), dir.path().join("out.st"));
    input.write(&inp).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_burn-ascend"));
    cmd.args(["run", "fia"])
        .arg(&inp)
        .arg(&outp)
        .args(["--device", device])
        .args(args)
        .env_remove("BURN_ASCEND_CANN_RELEASE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let code = out.status.code().unwrap();
    assert_eq!(code == 0, outp.exists(), "an output only when it ran");
    (code, String::from_utf8_lossy(&out.stderr).to_string())
}

/// CANN 9.x's TND split-fuse path takes the sink in the query's dtype, CANN 8.5 a BF16 sink
/// only (`contract::fia::sink` cites the sources): a TND call with an F16 query and an F16 sink
/// runs on `reference` and `cpu` (with a note naming the releases that refuse it) and on `sim`
/// (9.1.0 unless told otherwise), and is refused on every device under `--cann-release 8.5`
/// or with the simulation's environment variable saying 8.5; an unknown release is refused
/// naming the flag or the variable and the releases known.
#[test]
fn a_tnd_f16_sink_with_an_f16_query_runs_as_cann_9_and_is_refused_as_cann_8_5() {
    let c = fia_cases()
        .into_iter()
        .find(|c| c.name == "tnd_causal_sink_lse")
        .unwrap();
    let mut x = bundle(&c);
    for name in ["query", "key", "value", "learnableSink"] {
        let t = &x.tensors[name];
        let v: Vec<f64> = t
            .f32_values(name)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        let f16 = HostTensor::from_f64_as(&v, t.shape.clone(), Dtype::F16);
        x.insert(name, f16);
    }
    // cpu, reference and sim run it; sim gives the reference's bytes (`ok`).
    let out = ok("fia", &x);
    let want = fcomp::fia_fwd::<B>(fia_inputs_on::<B>(&c, &Default::default()), &c.spec).unwrap();
    let got = out.tensors["attentionOut"]
        .f32_values("attentionOut")
        .unwrap();
    // F16 inputs and output against the f32 composite: |x| ≲ 2, F16 keeps 11 bits.
    close(
        "f16 tnd sink",
        &got,
        &to_vec::<B>(want.attention_out),
        1e-2,
        1e-2,
    )
    .unwrap();
    let note = "note: fia: run as CANN 9.0.0, 9.1.0 run it; CANN 8.5.0-beta.1, 8.5.0 refuse it";
    for device in ["reference", "cpu"] {
        let (code, err) = run_with(&x, device, &[], &[]);
        assert_eq!(code, 0, "{device}: {err}");
        assert!(
            err.starts_with(note) && err.contains("learnableSink"),
            "{device}: {err}"
        );
        let (code, err) = run_with(&x, device, &["--cann-release", "9.0"], &[]);
        assert_eq!((code, err.as_str()), (0, ""), "{device} as 9.0.0");
    }
    let (code, err) = run_with(&x, "sim", &[], &[]);
    assert_eq!((code, err.as_str()), (0, ""), "sim, 9.1.0 by default");

    // As CANN 8.5: refused on every device, naming the sink, the path and the release.
    for device in ["reference", "cpu", "sim"] {
        let (code, err) = run_with(&x, device, &["--cann-release", "8.5"], &[]);
        assert_eq!(code, 2, "{device}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{device}: one line: {err}"
        );
        assert!(
            err.contains("invalid learnableSink: dtype must be BFLOAT16")
                && err.contains("CANN 8.5.0"),
            "{device}: {err}"
        );
    }
    let (code, err) = run_with(&x, "sim", &[], &[("BURN_ASCEND_CANN_RELEASE", "8.5.0")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("invalid learnableSink") && err.contains("CANN 8.5.0"),
        "{err}"
    );
    // The flag wins over the variable.
    let (code, err) = run_with(
        &x,
        "sim",
        &["--cann-release", "9.1.0"],
        &[("BURN_ASCEND_CANN_RELEASE", "8.5.0")],
    );
    assert_eq!((code, err.as_str()), (0, ""), "flag over variable");

    // Unknown releases, and a release given for npu.
    let known = "known: 8.5.0-beta.1, 8.5.0, 9.0.0, 9.1.0";
    let (code, err) = run_with(&x, "cpu", &["--cann-release", "7.0"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("invalid --cann-release: unknown CANN release '7.0'") && err.contains(known),
        "{err}"
    );
    let (code, err) = run_with(&x, "sim", &[], &[("BURN_ASCEND_CANN_RELEASE", "9.9")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("invalid BURN_ASCEND_CANN_RELEASE: unknown CANN release '9.9'")
            && err.contains(known),
        "{err}"
    );
    let (code, err) = run_with(&x, "npu", &["--cann-release", "9.1"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("invalid --cann-release") && err.contains("npu"),
        "{err}"
    );
}
