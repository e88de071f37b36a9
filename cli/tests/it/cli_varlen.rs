//! Op-replay CLI round trips: `burn-ascend run varlen-fwd|varlen-bwd` on safetensors files,
//! checked against the composite Burn path (an implementation independent of the CLI's
//! reference kernel), plus bad input that must exit non-zero with one line naming the parameter.

use std::process::Command;

use crate::common::{close, Case};
use burn::backend::NdArray;
use burn_ascend::ops::host::{from_vec, to_vec};
use burn_ascend::ops::varlen::composite;
use burn_ascend::{VarlenGradInputs, VarlenInputs};
use burn_ascend_cli::io::{Bundle, HostTensor};
use safetensors::Dtype;

type B = NdArray;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_burn-ascend"))
}

/// The case as an aclnn-named bundle (mode 4 band with the compressed mask, sink, GQA).
fn case() -> Case {
    Case::new("cli", &[3, 5, 0, 2], &[4, 5, 2, 2], 4, 2, 5, 21)
        .with_sink()
        .mode(burn_ascend::SparseMode::Band, 2, 1)
}

pub(crate) fn fwd_bundle(c: &Case) -> Bundle {
    let mut b = Bundle::default();
    b.insert(
        "query",
        HostTensor::from_values(&c.q, vec![c.tq(), c.n, c.d]),
    );
    b.insert(
        "key",
        HostTensor::from_values(&c.k, vec![c.tkv(), c.nkv, c.d]),
    );
    b.insert(
        "value",
        HostTensor::from_values(&c.v, vec![c.tkv(), c.nkv, c.dv]),
    );
    b.insert(
        "sink",
        HostTensor::from_values(c.sink.as_ref().unwrap(), vec![c.n]),
    );
    // CANN's compressed mask for the compressed modes, else the case's explicit one.
    let (mask, shape) = match burn_ascend::ops::varlen::compressed_mask(c.spec.attrs.sparse_mode) {
        Some((m, s)) => (m, s.to_vec()),
        None => c.mask.clone().expect("an explicit mask"),
    };
    b.insert("attenMask", HostTensor::from_u8(mask, shape, Dtype::BOOL));
    let a = c.spec.actual_seq_q_len.clone();
    b.insert("actualSeqQLen", HostTensor::from_i64(&a, vec![a.len()]));
    let a = c.spec.actual_seq_kv_len.clone();
    b.insert("actualSeqKvLen", HostTensor::from_i64(&a, vec![a.len()]));
    for (k, v) in [
        ("scaleValue", c.spec.attrs.scale.to_string()),
        ("preTokens", c.spec.attrs.pre_tokens.to_string()),
        ("nextTokens", c.spec.attrs.next_tokens.to_string()),
        ("headNum", c.n.to_string()),
        ("inputLayout", "TND".into()),
        ("sparseMode", c.spec.attrs.sparse_mode.as_attr().to_string()),
        ("softmaxOutLayout", "same_as_input".into()),
        ("softmaxInLayout", "same_as_input".into()),
    ] {
        b.metadata.insert(k.into(), v);
    }
    b
}

fn run(op: &str, input: &Bundle, device: &str) -> (Bundle, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let (inp, outp) = (
        dir.path().join("in.safetensors"),
        dir.path().join("out.safetensors"),
    );
    input.write(&inp).unwrap();
    let out = bin()
        .args(["run", op])
        .arg(&inp)
        .arg(&outp)
        .args(["--device", device])
        .output()
        .unwrap();
    let bundle = if out.status.success() {
        Bundle::read(&outp).unwrap()
    } else {
        Bundle::default()
    };
    (bundle, out)
}

fn f32s(b: &Bundle, name: &str) -> Vec<f32> {
    b.tensors[name].values::<f32>("test").unwrap()
}

#[test]
fn varlen_fwd_and_bwd_round_trip_against_the_composite() {
    round_trip_against_the_composite(case());
}

#[test]
fn varlen_with_an_explicit_mask_round_trips_against_the_composite_on_every_device() {
    // Mode 0 with a random [maxSq, maxSkv] mask and a band: the mask travels as a tensor
    // (BOOL on the device for `sim`).
    let c = Case::new("cli_dense", &[3, 5, 2], &[4, 5, 2], 4, 2, 5, 22)
        .with_sink()
        .mode(burn_ascend::SparseMode::DefaultMask, 4, 2);
    assert!(c.mask.as_ref().unwrap().0.iter().any(|&x| x != 0));
    round_trip_against_the_composite(c);
}

fn round_trip_against_the_composite(mut c: Case) {
    c.spec.attrs.softmax_layout = burn_ascend::SoftmaxLayout::SameAsInput;
    let dev = Default::default();
    let inputs = || VarlenInputs {
        query: from_vec::<B>(c.q.clone(), &[c.tq(), c.n, c.d], &dev),
        key: from_vec::<B>(c.k.clone(), &[c.tkv(), c.nkv, c.d], &dev),
        value: from_vec::<B>(c.v.clone(), &[c.tkv(), c.nkv, c.dv], &dev),
        sink: c.sink.clone().map(|s| from_vec::<B>(s, &[c.n], &dev)),
        pse: c.pse.clone().map(|(v, s)| from_vec::<B>(v, &s, &dev)),
        atten_mask: c.mask_f32().map(|(m, s)| from_vec::<B>(m, &s, &dev)),
        alibi_slopes: None,
        drop_mask: None,
    };
    let want = composite::varlen_fwd::<B>(inputs(), &c.spec).unwrap();

    // `sim`: the Ascend dispatch layer against its host simulation of the ACL ABI.
    for device in ["reference", "cpu", "sim"] {
        let (fwd, out) = run("varlen-fwd", &fwd_bundle(&c), device);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(fwd.tensors["attentionOut"].shape, vec![c.tq(), c.n, c.dv]);
        assert_eq!(fwd.tensors["softmaxMax"].shape, vec![c.tq(), c.n, 8]);
        // f32 both sides, the reference accumulating in f64: 1e-5 abs + 1e-4 rel.
        close(
            "attentionOut",
            &f32s(&fwd, "attentionOut"),
            &to_vec::<B>(want.attention_out.clone()),
            1e-5,
            1e-4,
        )
        .unwrap();
        close(
            "softmaxMax",
            &f32s(&fwd, "softmaxMax"),
            &to_vec::<B>(want.softmax_max.clone()),
            1e-5,
            1e-4,
        )
        .unwrap();
        close(
            "softmaxSum",
            &f32s(&fwd, "softmaxSum"),
            &to_vec::<B>(want.softmax_sum.clone()),
            1e-5,
            1e-4,
        )
        .unwrap();

        let mut bwd_in = fwd_bundle(&c);
        bwd_in.tensors.remove("sink");
        bwd_in.insert(
            "sinkIn",
            HostTensor::from_values(c.sink.as_ref().unwrap(), vec![c.n]),
        );
        bwd_in.insert(
            "dy",
            HostTensor::from_values(&c.dy, vec![c.tq(), c.n, c.dv]),
        );
        bwd_in.insert("attentionIn", fwd.tensors["attentionOut"].clone());
        bwd_in.insert("softmaxMax", fwd.tensors["softmaxMax"].clone());
        bwd_in.insert("softmaxSum", fwd.tensors["softmaxSum"].clone());
        let (bwd, out) = run("varlen-bwd", &bwd_in, device);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let g = composite::varlen_bwd::<B>(
            VarlenGradInputs {
                inputs: inputs(),
                dy: from_vec::<B>(c.dy.clone(), &[c.tq(), c.n, c.dv], &dev),
                attention_in: want.attention_out.clone(),
                softmax_max: want.softmax_max.clone(),
                softmax_sum: want.softmax_sum.clone(),
            },
            &c.spec,
        )
        .unwrap();
        close("dq", &f32s(&bwd, "dq"), &to_vec::<B>(g.dq), 1e-5, 1e-4).unwrap();
        close("dk", &f32s(&bwd, "dk"), &to_vec::<B>(g.dk), 1e-5, 1e-4).unwrap();
        close("dv", &f32s(&bwd, "dv"), &to_vec::<B>(g.dv), 1e-5, 1e-4).unwrap();
        close(
            "dsink",
            &f32s(&bwd, "dsink"),
            &to_vec::<B>(g.dsink.unwrap()),
            1e-5,
            1e-4,
        )
        .unwrap();
    }
}

#[test]
fn half_precision_inputs_give_outputs_in_the_input_dtype() {
    let c = case();
    let mut b = fwd_bundle(&c);
    for (name, shape) in [
        ("query", [c.tq(), c.n, c.d]),
        ("key", [c.tkv(), c.nkv, c.d]),
        ("value", [c.tkv(), c.nkv, c.dv]),
    ] {
        let vals: Vec<half::bf16> = b.tensors[name]
            .values::<f32>("x")
            .unwrap()
            .into_iter()
            .map(half::bf16::from_f32)
            .collect();
        b.insert(name, HostTensor::from_values(&vals, shape.to_vec()));
    }
    let (out, status) = run("varlen-fwd", &b, "reference");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(out.tensors["attentionOut"].dtype, Dtype::BF16);
    assert_eq!(out.tensors["softmaxMax"].dtype, Dtype::F32);
    let (f32_out, _) = run("varlen-fwd", &fwd_bundle(&c), "reference");
    let got: Vec<f32> = out.tensors["attentionOut"].f32_values("x").unwrap();
    // bf16 inputs and output (8-bit mantissa): within 3e-2 of the f32 run on O(1) values.
    close(
        "bf16 attentionOut",
        &got,
        &f32s(&f32_out, "attentionOut"),
        3e-2,
        3e-2,
    )
    .unwrap();
}

/// Runs a bad bundle and returns (exit code, stderr).
fn refused(b: &Bundle, device: &str) -> (i32, String) {
    let (_, out) = run("varlen-fwd", b, device);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    (out.status.code().unwrap(), stderr)
}

#[test]
fn bad_input_exits_non_zero_with_one_line_naming_the_parameter() {
    let c = case();
    let mut b = fwd_bundle(&c);
    b.metadata.insert("headNum".into(), "3".into());
    let (code, err) = refused(&b, "cpu");
    assert_eq!(code, 2);
    assert!(err.contains("invalid headNum"), "{err}");

    let mut b = fwd_bundle(&c);
    b.tensors.remove("query");
    assert!(refused(&b, "cpu")
        .1
        .contains("invalid query: required tensor is missing"));

    let mut b = fwd_bundle(&c);
    b.insert(
        "actualSeqKvLen",
        HostTensor::from_i64(&[4, 9, 11, 12], vec![4]),
    );
    assert!(refused(&b, "cpu")
        .1
        .contains("invalid actualSeqKvLen: must end at the key's T"));

    let mut b = fwd_bundle(&c);
    b.metadata.insert("keepProb".into(), "0".into());
    assert!(refused(&b, "cpu").1.contains("invalid keepProb"));

    let mut b = fwd_bundle(&c);
    b.insert(
        "attenMask",
        HostTensor::from_u8(vec![0; 2048 * 2048], vec![2048, 2048], Dtype::U8),
    );
    assert!(refused(&b, "cpu")
        .1
        .contains("invalid attenMask: sparseMode 4 takes CANN's compressed mask"));

    // The same refusals through the dispatch layer: validation runs before any device call.
    let mut b = fwd_bundle(&c);
    b.metadata.insert("headNum".into(), "3".into());
    let (code, err) = refused(&b, "sim");
    assert_eq!(code, 2);
    assert!(err.contains("invalid headNum"), "{err}");

    // Without CANN, `--device npu` fails with one line naming every path it tried.
    if burn_ascend_cann::acl::loader::cann().is_err() {
        let (code, err) = refused(&fwd_bundle(&c), "npu");
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("Ascend CANN not found"), "{err}");
        assert!(
            err.contains("/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so"),
            "{err}"
        );
    }
}

#[test]
fn usage_errors() {
    let out = bin()
        .args(["run", "no-such-op", "a", "b"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "missing input file is an io error"
    );
    // clap's usage error: exit 2, naming what it refused.
    let out = bin().args(["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'frobnicate'"));
}

/// `varlen-bwd` with an external pse (pseType 1, `realShift` `[pseTotalLen]`) writes `dpse`
/// on every device, equal to the composite's (1e-5 abs + 1e-4 rel): `--device sim` runs the
/// `Ascend` backend, which computes dpse itself (no arch32 grad kernel of CANN writes it).
#[test]
fn varlen_bwd_writes_dpse_for_an_external_pse_on_every_device() {
    // No empty sequence: CANN takes no pse then.
    let mut c = Case::new("cli_pse", &[3, 5, 2], &[4, 5, 2], 4, 2, 5, 22)
        .with_sink()
        .mode(burn_ascend::SparseMode::Band, 2, 1);
    let total: usize = c
        .spec
        .actual_seq_q_len
        .iter()
        .zip(&c.spec.actual_seq_kv_len)
        .scan((0i64, 0i64), |prev, (&q, &k)| {
            let l = ((q - prev.0) * (k - prev.1)) as usize;
            *prev = (q, k);
            Some(l)
        })
        .sum::<usize>()
        * c.n;
    let pse: Vec<f32> = (0..total)
        .map(|i| ((i * 37) % 11) as f32 / 11.0 - 0.5)
        .collect();
    c.spec.attrs.pse_type = burn_ascend::PseType::OuterAddMul;
    c.pse = Some((pse.clone(), vec![total]));
    let dev = Default::default();
    let inputs = || VarlenInputs {
        query: from_vec::<B>(c.q.clone(), &[c.tq(), c.n, c.d], &dev),
        key: from_vec::<B>(c.k.clone(), &[c.tkv(), c.nkv, c.d], &dev),
        value: from_vec::<B>(c.v.clone(), &[c.tkv(), c.nkv, c.dv], &dev),
        sink: c.sink.clone().map(|s| from_vec::<B>(s, &[c.n], &dev)),
        pse: c.pse.clone().map(|(v, s)| from_vec::<B>(v, &s, &dev)),
        atten_mask: c.mask_f32().map(|(m, s)| from_vec::<B>(m, &s, &dev)),
        alibi_slopes: None,
        drop_mask: None,
    };
    let want_fwd = composite::varlen_fwd::<B>(inputs(), &c.spec).unwrap();
    let want = composite::varlen_bwd::<B>(
        VarlenGradInputs {
            inputs: inputs(),
            dy: from_vec::<B>(c.dy.clone(), &[c.tq(), c.n, c.dv], &dev),
            attention_in: want_fwd.attention_out.clone(),
            softmax_max: want_fwd.softmax_max.clone(),
            softmax_sum: want_fwd.softmax_sum.clone(),
        },
        &c.spec,
    )
    .unwrap();
    let want = to_vec::<B>(want.dpse.expect("composite dpse"));
    assert!(want.iter().any(|x| x.abs() > 1e-2), "dpse is not trivial");
    let mut b = fwd_bundle(&c);
    b.metadata.insert("pseType".into(), "1".into());
    b.metadata.remove("softmaxOutLayout");
    b.metadata.remove("softmaxInLayout");
    b.insert("realShift", HostTensor::from_values(&pse, vec![total]));
    b.tensors.remove("sink");
    b.insert(
        "sinkIn",
        HostTensor::from_values(c.sink.as_ref().unwrap(), vec![c.n]),
    );
    b.insert(
        "dy",
        HostTensor::from_values(&c.dy, vec![c.tq(), c.n, c.dv]),
    );
    b.insert(
        "attentionIn",
        HostTensor::from_values(
            &to_vec::<B>(want_fwd.attention_out),
            vec![c.tq(), c.n, c.dv],
        ),
    );
    for (name, t) in [
        ("softmaxMax", want_fwd.softmax_max),
        ("softmaxSum", want_fwd.softmax_sum),
    ] {
        b.insert(
            name,
            HostTensor::from_values(&to_vec::<B>(t), vec![c.tq(), c.n, 8]),
        );
    }
    for device in ["reference", "cpu", "sim"] {
        let (bwd, out) = run("varlen-bwd", &b, device);
        assert!(
            out.status.success(),
            "{device}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(bwd.tensors["dpse"].shape, vec![total], "{device}");
        close("dpse", &f32s(&bwd, "dpse"), &want, 1e-5, 1e-4).unwrap();
    }
}
