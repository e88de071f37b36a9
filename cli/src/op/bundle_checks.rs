//! The bundle checks several ops share (prompt, incremental and fused inference attention read
//! their float inputs and int8 output alike): one place, so the ops refuse the same input with
//! the same line.

use safetensors::Dtype;

use crate::io::{Bundle, HostTensor};
use burn_ascend::ops::incre::BlockTable;
use burn_ascend::ops::prompt::{PostQuantSpec, PFA_COMPRESSED_MASK};
use burn_ascend::AttnError;

/// The tensors prompt and incremental attention both read first (CANN's two prototypes open
/// alike): query, key, value, the mask, the pse and the query lengths.
pub const PROMPT_INCRE_TENSORS: [&str; 6] = [
    "query",
    "key",
    "value",
    "attenMask",
    "pseShift",
    "actualSeqLengths",
];

/// The attributes prompt and incremental attention both read first: the layout and the heads.
pub const PROMPT_INCRE_ATTRS: [&str; 4] =
    ["inputLayout", "numHeads", "scaleValue", "numKeyValueHeads"];

/// Checks a float input's dtype (F16, BF16 or F32); int8 Q/K/V is not modelled.
pub fn float_dtype(t: &HostTensor, name: &'static str) -> Result<Dtype, AttnError> {
    match t.dtype {
        Dtype::F16 | Dtype::BF16 | Dtype::F32 => Ok(t.dtype),
        Dtype::I8 => Err(AttnError::Unsupported(format!(
            "int8 {name} (full quantisation with deqScale1/quantScale1/deqScale2) is not modelled"
        ))),
        other => Err(AttnError::invalid(
            name,
            format!("dtype must be FLOAT16 or BFLOAT16 (FLOAT32 on the host), got {other:?}"),
        )),
    }
}

/// Why an int8 `attentionOut` with an f32 query cannot run on `sim` / `npu`: CANN's op takes
/// FLOAT16 / BFLOAT16 queries only (its `*_def.cpp`), and the composite an f32 call otherwise
/// runs computes in Burn float tensors, which cannot hold int8 output.
pub fn int8_f32_refusal(op: &str) -> AttnError {
    AttnError::Unsupported(format!(
        "quantScale2 (int8 attentionOut) with an f32 query on --device sim|npu: {op} takes \
         FLOAT16/BFLOAT16 queries only (pass an f16 or bf16 bundle, or use --device reference)"
    ))
}

/// `quantScale2` / `quantOffset2`: FLOAT32, or BFLOAT16 with a BF16 query; same dtype/shape.
pub fn post_quant(b: &Bundle, query: Dtype) -> Result<Option<PostQuantSpec>, AttnError> {
    let Some(s) = b.optional(&["quantScale2"]) else {
        if b.optional(&["quantOffset2"]).is_some() {
            return Err(AttnError::invalid("quantOffset2", "needs quantScale2"));
        }
        return Ok(None);
    };
    if !(s.dtype == Dtype::F32 || (s.dtype == Dtype::BF16 && query == Dtype::BF16)) {
        return Err(AttnError::invalid(
            "quantScale2",
            format!(
                "dtype must be FLOAT32 (BFLOAT16 only with a BF16 query), got {:?}",
                s.dtype
            ),
        ));
    }
    let offset = match b.optional(&["quantOffset2"]) {
        None => None,
        Some(o) => {
            offset_like_scale((o, "quantOffset2"), (s, "quantScale2"))?;
            Some(o.f32_values("quantOffset2")?.into())
        }
    };
    Ok(Some(PostQuantSpec {
        scale: s.f32_values("quantScale2")?.into(),
        offset,
    }))
}

/// Element `e` (row-major) of CANN's compressed causal mask (`PFA_COMPRESSED_MASK`): 1 strictly
/// above the diagonal.
pub fn compressed_mask_bit(e: usize) -> u8 {
    let side = PFA_COMPRESSED_MASK[1];
    u8::from(e % side > e / side)
}

/// Whether a mask's 0/1 bytes are CANN's compressed causal mask (its shape checked apart).
pub fn is_compressed_mask(bytes: &[u8]) -> bool {
    let [rows, cols] = PFA_COMPRESSED_MASK;
    bytes.len() == rows * cols
        && (bytes.iter().enumerate()).all(|(e, &x)| x == compressed_mask_bit(e))
}

/// The refusal of an `attenMask` that is not CANN's compressed mask under a compressed
/// `sparseMode`: the device reads that fixed mask whatever the bundle holds, so anything else
/// would silently give wrong results there. `expected` is the mask's shape as the op writes it.
pub fn not_the_compressed_mask(
    sparse_mode: impl std::fmt::Display,
    expected: &str,
    got: &[usize],
) -> AttnError {
    AttnError::invalid(
        "attenMask",
        format!(
            "sparseMode {sparse_mode} takes CANN's compressed mask {expected} (1 strictly above the diagonal), got shape {got:?} with other content"
        ),
    )
}

/// An offset applies elementwise with its scale: the same dtype and shape.
pub fn offset_like_scale(
    (offset, offset_name): (&HostTensor, &'static str),
    (scale, scale_name): (&HostTensor, &'static str),
) -> Result<(), AttnError> {
    if offset.dtype != scale.dtype || offset.shape != scale.shape {
        return Err(AttnError::invalid(
            offset_name,
            format!(
                "must have {scale_name}'s dtype and shape ({:?} {:?}), got {:?} {:?}",
                scale.dtype, scale.shape, offset.dtype, offset.shape
            ),
        ));
    }
    Ok(())
}

/// Same dtype as the query, or an error naming `name`.
pub fn same_dtype(t: &HostTensor, name: &'static str, query: Dtype) -> Result<(), AttnError> {
    if t.dtype != query {
        return Err(AttnError::invalid(
            name,
            format!("dtype must equal the query's {query:?}, got {:?}", t.dtype),
        ));
    }
    Ok(())
}

/// Refuses the scales of full int8 quantisation (an int8 query): not modelled. Their names are
/// the op's (`deqScale1` for prompt, `dequantScale1` for incre).
pub fn refuse_int8_query(b: &Bundle, scales: [&str; 3]) -> Result<(), AttnError> {
    match scales
        .into_iter()
        .find(|name| b.tensors.contains_key(*name))
    {
        Some(name) => Err(AttnError::Unsupported(format!(
            "{name}: full int8 quantisation (int8 query) is not modelled"
        ))),
        None => Ok(()),
    }
}

/// The paged caches' block table `name` (INT32), if the bundle has one.
pub fn block_table(b: &Bundle, name: &'static str) -> Result<Option<BlockTable>, AttnError> {
    let Some(t) = b.optional(&[name]) else {
        return Ok(None);
    };
    if t.dtype != Dtype::I32 {
        return Err(AttnError::invalid(
            name,
            format!("dtype must be INT32, got {:?}", t.dtype),
        ));
    }
    let ids: Vec<i32> = t.i64_values(name)?.into_iter().map(|x| x as i32).collect();
    Ok(Some(BlockTable {
        data: ids.into(),
        shape: t.shape.clone(),
    }))
}
