//! `NdArray` runs prompt attention on the CPU ([`cpu_prompt_fwd`]) instead of the composite;
//! other backends' host fallbacks call the same function. A serving prefill — causal from the
//! bottom right (sparse mode 3), BSND, f32, no pse, no quantisation, every query row with a key
//! to attend — runs on the tiled varlen forward, packed to TND; any other call on the f64
//! reference.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use burn::tensor::DType;
use burn_ascend_contract::varlen::{AttenMask, SparseMode, VarlenAttrs, VarlenDims, VarlenProblem};
use burn_ascend_kernels::cpu::varlen_fwd;
use burn_ascend_kernels::reference::prompt::prompt_flash_attention;

use super::{PfaLayout, PromptMaskKind};

use super::{composite, PromptBackend, PromptInputs, PromptSpec};
use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;
use crate::host::{from_vec, to_vec};

ndarray_on_host! {
    PromptBackend {
        fn prompt_fwd(inputs: PromptInputs<FloatTensor<Self>>, spec: &PromptSpec)
            -> Result<FloatTensor<Self>> => cpu_prompt_fwd;
    }
}

/// Prompt attention on host memory through the CPU reference, for any backend.
pub fn cpu_prompt_fwd<B: Backend>(
    inputs: PromptInputs<FloatTensor<B>>,
    spec: &PromptSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&crate::prompt::shapes(&inputs))?;
    composite::unsupported_on_burn(spec)?;
    let device = B::float_device(&inputs.query);
    if let Some(out) = causal_prefill::<B>(&inputs, spec) {
        return Ok(from_vec::<B>(out, &dims.out_shape(), &device));
    }
    let shape = |t: &FloatTensor<B>| t.shape().to_vec();
    let mask = inputs.atten_mask.map(|m| {
        let s = shape(&m);
        let bytes: Vec<u8> = to_vec::<B>(m).iter().map(|&x| u8::from(x != 0.0)).collect();
        (bytes, s)
    });
    let pse = inputs.pse_shift.map(|p| (shape(&p), to_vec::<B>(p)));
    let (q, k, v) = (
        to_vec::<B>(inputs.query),
        to_vec::<B>(inputs.key),
        to_vec::<B>(inputs.value),
    );
    let args = spec.args(
        &dims,
        &q,
        &k,
        &v,
        mask.as_ref().map(|(d, s)| (&d[..], &s[..])),
        pse.as_ref().map(|(s, d)| (&d[..], &s[..])),
    )?;
    let out = prompt_flash_attention(&args);
    let out = out.into_iter().map(|x| x as f32).collect();
    Ok(from_vec::<B>(out, &dims.out_shape(), &device))
}

/// A serving prefill (see the [module docs](self)) on the tiled varlen forward: BSND's query
/// `[B, S, N, D]` is already TND-packed with S rows per batch; each batch's first
/// `actualSeqLengthsKv` key rows are packed after one another. `None` when the call is
/// anything else (the reference runs it).
pub fn causal_prefill<B: Backend>(
    inputs: &PromptInputs<FloatTensor<B>>,
    spec: &PromptSpec,
) -> Option<Vec<f32>> {
    let plain = spec.sparse_mode == 3
        && spec.input_layout == PfaLayout::Bsnd
        && spec.post_quant.is_none()
        && inputs.pse_shift.is_none()
        && inputs.atten_mask.is_none()
        && matches!(
            spec.atten_mask,
            PromptMaskKind::Compressed | PromptMaskKind::None
        )
        && [&inputs.query, &inputs.key, &inputs.value]
            .iter()
            .all(|t| t.dtype() == DType::F32);
    if !plain {
        return None;
    }
    let (qs, ks, vs) = (
        inputs.query.shape().to_vec(),
        inputs.key.shape().to_vec(),
        inputs.value.shape().to_vec(),
    );
    let [b, s, n, d] = <[usize; 4]>::try_from(qs).ok()?;
    let [kb, skv, nkv, kd] = <[usize; 4]>::try_from(ks).ok()?;
    if kb != b || kd != d || vs != [b, skv, nkv, d] || n != spec.num_heads {
        return None;
    }
    // Every query row must see a key (the kernel's fully masked rows are not the reference's
    // concern here, so such calls stay with it), and the query lengths must be whole.
    if spec
        .actual_seq_lengths
        .as_ref()
        .is_some_and(|l| l.iter().any(|&x| x != s as i64))
    {
        return None;
    }
    let kv_lens: Vec<usize> = match &spec.actual_seq_lengths_kv {
        Some(l) if l.len() == b => l.iter().map(|&x| x.max(0) as usize).collect(),
        Some(_) => return None,
        None => vec![skv; b],
    };
    if kv_lens.iter().any(|&l| l < s || l > skv) {
        return None;
    }
    let q = to_vec::<B>(inputs.query.clone());
    let pack = |t: &FloatTensor<B>| {
        let all = to_vec::<B>(t.clone());
        let row = nkv * d;
        let mut out = Vec::with_capacity(kv_lens.iter().sum::<usize>() * row);
        for (bi, &len) in kv_lens.iter().enumerate() {
            out.extend_from_slice(&all[bi * skv * row..(bi * skv + len) * row]);
        }
        out
    };
    let (k, v) = (pack(&inputs.key), pack(&inputs.value));
    let mut attrs = VarlenAttrs::new(spec.scale_value);
    attrs.sparse_mode = SparseMode::RightDownCausal;
    let dims = VarlenDims {
        head_num: n,
        kv_head_num: nkv,
        head_dim: d,
        value_dim: d,
        seq_q: vec![s; b],
        seq_kv: kv_lens,
    };
    let mut problem = VarlenProblem::new(dims, attrs);
    // Without a mask varlen computes every position (CANN's rule); mode 3's pattern is the
    // compressed mask's.
    problem.atten_mask = AttenMask::Compressed;
    Some(varlen_fwd(&problem, &q, &k, &v).attention_out)
}
