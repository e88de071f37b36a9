//! Prompt attention's serving prefill on `NdArray` (causal from the bottom right, BSND, f32):
//! the tiled varlen forward it runs on against the f64 reference (the same call in f64, which
//! takes the reference path), with GQA, two batches and key lengths shorter than the padded
//! key tensor. Tolerance: `2e-5` absolute (f32 tiles and a polynomial `exp` against f64, values
//! in [-1.5, 1.5), D = 8).

use burn::backend::NdArray;
use burn::tensor::{DType, Tensor, TensorData};

use burn_ascend_ops::prompt::ndarray::causal_prefill;
use burn_ascend_ops::PromptInputs;
use burn_ascend_ops::{prompt_flash_attention_with, PfaLayout, PromptMaskKind, PromptSpec};

use crate::common::data;

type F32 = NdArray<f32>;
type F64 = NdArray<f64>;

const B: usize = 2;
const S: usize = 3;
const SKV: usize = 9;
const N: usize = 4;
const NKV: usize = 2;
const D: usize = 8;

fn t<Bk: burn::tensor::backend::Backend>(v: &[f32], shape: [usize; 4], dt: DType) -> Tensor<Bk, 4> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), shape),
        (&Default::default(), dt),
    )
}

fn spec() -> PromptSpec {
    let mut spec = PromptSpec::new(N, 0.35, PfaLayout::Bsnd);
    spec.num_key_value_heads = NKV;
    spec.actual_seq_lengths_kv = Some(vec![5, 9]);
    spec.sparse_mode = 3;
    spec.atten_mask = PromptMaskKind::Compressed;
    spec
}

/// The call on backend `Bk` with its tensors in `dt`, as f64 values.
fn run<Bk: burn_ascend_ops::PromptBackend>(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    spec: &PromptSpec,
    dt: DType,
) -> Vec<f64> {
    prompt_flash_attention_with::<Bk, 4, 3>(
        t(q, [B, S, N, D], dt),
        t(k, [B, SKV, NKV, D], dt),
        t(v, [B, SKV, NKV, D], dt),
        None,
        None,
        spec,
    )
    .unwrap()
    .into_data()
    .convert::<f64>()
    .to_vec::<f64>()
    .unwrap()
}

#[test]
fn a_serving_prefill_on_ndarray_runs_the_tiled_kernel_and_equals_the_f64_reference() {
    let (q, k, v) = (
        data(B * S * N * D, 1),
        data(B * SKV * NKV * D, 2),
        data(B * SKV * NKV * D, 3),
    );
    let spec = spec();
    let (fast, reference) = (
        run::<F32>(&q, &k, &v, &spec, DType::F32),
        run::<F64>(&q, &k, &v, &spec, DType::F64),
    );
    let gap = fast
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(gap <= 2e-5, "prefill vs reference: {gap}");
    // The f32 call is one the tiled kernel takes; with a dense mask it is not.
    let inputs = |mask: bool| PromptInputs {
        query: t::<F32>(&q, [B, S, N, D], DType::F32)
            .into_primitive()
            .tensor(),
        key: t::<F32>(&k, [B, SKV, NKV, D], DType::F32)
            .into_primitive()
            .tensor(),
        value: t::<F32>(&v, [B, SKV, NKV, D], DType::F32)
            .into_primitive()
            .tensor(),
        atten_mask: mask.then(|| {
            Tensor::<F32, 3>::zeros([B, S, SKV], &Default::default())
                .into_primitive()
                .tensor()
        }),
        pse_shift: None,
    };
    assert!(causal_prefill::<F32>(&inputs(false), &spec).is_some());
    assert!(causal_prefill::<F32>(&inputs(true), &spec).is_none());
}
