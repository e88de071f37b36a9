//! The simulated `aclnnFusedInferAttentionScoreV4` through the call builder: V4 against the
//! reference, the base-op fallback only for what the base op has, and the first stage's typed
//! refusals.

use burn_ascend_acl_sim as sim;
use burn_ascend_backend::attention::fia::fused_infer_attention;
use burn_ascend_cann::acl::ffi::names;
use burn_ascend_cann::acl::{AclError, DataType, DeviceTensor, Runtime, TensorDesc};
use burn_ascend_contract::fia::{
    FiaHostValues, FiaInputs, FiaKv, FiaKvShapes, FiaOutputs, FiaShapes, FiaSpec, PfaLayout,
};
use burn_ascend_kernels::reference::fia::fused_infer_attention as reference;
use burn_ascend_test_support::Rng;
use half::bf16;

/// Values exact in BFLOAT16 (the query dtype here: CANN's FIA takes no FLOAT query).
fn rand(seed: u64, n: usize) -> Vec<f32> {
    Rng::new(seed)
        .vec_f32(n, 1.0)
        .into_iter()
        .map(|x| bf16::from_f32(x).to_f32())
        .collect()
}

fn up(rt: &Runtime, dims: &[usize], v: &[f32]) -> DeviceTensor {
    let b: Vec<u8> = v
        .iter()
        .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
        .collect();
    rt.upload(TensorDesc::contiguous(dims, DataType::Bf16).unwrap(), &b)
        .unwrap()
}

/// BSND, B 2, Q_S 3, KV_S 5, N 2, D 64, BFLOAT16, with `sink` as `learnableSink` (BFLOAT16):
/// `(attentionOut, softmaxLse)` through the call builder.
fn run(
    rt: &Runtime,
    spec: &FiaSpec,
    sink: Option<&[f32]>,
) -> Result<(Vec<f32>, Vec<f32>), AclError> {
    let (qd, kd) = ([2usize, 3, 2, 64], [2usize, 5, 2, 64]);
    let (q, k, v) = (rand(1, 768), rand(2, 1280), rand(3, 1280));
    let (qt, kt, vt) = (up(rt, &qd, &q), up(rt, &kd, &k), up(rt, &kd, &v));
    let o = rt.zeros(TensorDesc::contiguous(&qd, DataType::Bf16)?)?;
    let l = rt.zeros(TensorDesc::contiguous(&[2, 2, 3, 1], DataType::Float)?)?;
    let st = sink.map(|s| up(rt, &[s.len()], s));
    {
        let sh = st.as_ref().map(DeviceTensor::handle).transpose()?;
        let (oh, lh) = (o.handle()?, l.handle()?);
        fused_infer_attention(
            rt,
            spec,
            FiaInputs::new(
                qt.handle()?,
                FiaKv::Contiguous {
                    key: kt.handle()?,
                    value: vt.handle()?,
                },
                sh,
            ),
            FiaOutputs {
                attention_out: &oh,
                softmax_lse: spec.softmax_lse_flag.then_some(&lh),
            },
        )?;
    }
    let bf = |t: &DeviceTensor| -> Result<Vec<f32>, AclError> {
        Ok(t.download()?
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect())
    };
    let f = |t: &DeviceTensor| -> Result<Vec<f32>, AclError> {
        Ok(t.download()?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    };
    let want = {
        let shapes = FiaShapes::new(
            qd.to_vec(),
            FiaKvShapes::Contiguous {
                key: kd.to_vec(),
                value: kd.to_vec(),
            },
            false,
            sink.map(|s| vec![s.len()]),
        );
        let dims = spec.validate(&shapes).unwrap();
        let host = FiaHostValues {
            learnable_sink: sink,
            ..Default::default()
        };
        reference(&spec.args(&dims, &q, &k, &v, host))
    };
    let (got, lse) = (bf(&o)?, f(&l)?);
    let exp: Vec<f32> = want
        .attention_out
        .iter()
        .map(|&x| bf16::from_f64(x).to_f32())
        .collect();
    assert_eq!(got, exp, "the simulation runs the reference");
    if spec.softmax_lse_flag {
        assert_eq!(lse, want.softmax_lse);
    }
    Ok((got, lse))
}

fn spec() -> FiaSpec {
    let mut s = FiaSpec::new(2, 0.125, PfaLayout::Bsnd);
    s.softmax_lse_flag = true;
    s
}

#[test]
fn fia_v4_runs_the_reference_with_a_sink_and_the_lse() {
    let rt = sim::runtime().unwrap();
    run(&rt, &spec(), Some(&[0.5, -1.0])).unwrap();
}

#[test]
fn without_v4_the_base_fia_runs_only_what_it_has() {
    let rt = Runtime::with_api(sim::api_without_ops(&[names::fia_v4]), 0).unwrap();
    let via_base = run(&rt, &spec(), None).unwrap();
    let via_v4 = run(&sim::runtime().unwrap(), &spec(), None).unwrap();
    assert_eq!(
        via_base, via_v4,
        "V4 and the base op agree on what both have"
    );
    let err = run(&rt, &spec(), Some(&[0.5, -1.0])).unwrap_err();
    assert!(
        matches!(&err, AclError::Unsupported(m) if m.contains("learnableSink")),
        "{err}"
    );
}

#[test]
fn the_first_stage_refuses_a_bad_call_naming_the_parameter() {
    let rt = sim::runtime().unwrap();
    let mut s = spec();
    s.num_key_value_heads = 3;
    let err = run(&rt, &s, None).unwrap_err().to_string();
    assert!(err.contains("numKeyValueHeads"), "{err}");
    let err = run(&rt, &spec(), Some(&[0.5])).unwrap_err().to_string();
    assert!(err.contains("learnableSink"), "{err}");
}
