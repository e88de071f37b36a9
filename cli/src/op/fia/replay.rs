//! `fia`: CANN's fused inference attention (`ffi::names::fia_v4`) on a safetensors bundle: the f64
//! reference
//! (`--device reference`), else the public ops API on `NdArray` (`cpu`) or `Ascend` (`sim`,
//! `npu`). `attentionOut` is in the query's dtype; `softmaxLse` (with `softmaxLseFlag = true`)
//! is FLOAT32.

use burn::tensor::TensorData;
use safetensors::Dtype;

use crate::device::{
    acl_dtype, acl_runtime, data, host, mask_data, on_backend, primitive, OnBackend,
};
use crate::io::{Bundle, HostTensor};
use crate::names::{concat, OpNames};
use crate::op::bundle_checks::{
    block_table, float_dtype, is_compressed_mask, not_the_compressed_mask, same_dtype,
};
use crate::release::check_on_host;
use crate::{CliError, Device};
use burn_ascend::backend::release::cann_release;
use burn_ascend::kernels::reference::fia::fused_infer_attention as fia_reference;
use burn_ascend::ops::fia::{
    check_learnable_sink_values, parse_fia_layout, FiaHostValues, FiaKvShapes, FiaMask, FiaShapes,
    FiaSpec,
};
use burn_ascend::ops::prompt::{INT_MAX_TOKENS, PFA_COMPRESSED_MASK};
use burn_ascend::{fused_infer_attention_with, AttentionBackend, AttnError, FiaInputs, FiaKv};

/// The tensors `fia` runs.
const RUN_TENSORS: [&str; 17] = [
    "query",
    "key",
    "value",
    "pseShift",
    "attenMask",
    "actualSeqLengths",
    "actualSeqLengthsKv",
    "blockTable",
    "queryPaddingSize",
    "kvPaddingSize",
    "antiquantScale",
    "antiquantOffset",
    "keyAntiquantScale",
    "keyAntiquantOffset",
    "valueAntiquantScale",
    "valueAntiquantOffset",
    "learnableSink",
];

/// Inputs the CLI knows but does not run: their own `unsupported` error, not "unknown".
pub(crate) const LEFT_OUT: [&str; 12] = [
    "deqScale1",
    "quantScale1",
    "deqScale2",
    "quantScale2",
    "quantOffset2",
    "keySharedPrefix",
    "valueSharedPrefix",
    "actualSharedPrefixLen",
    "queryRope",
    "keyRope",
    "keyRopeAntiquantScale",
    "dequantScaleQuery",
];

const TENSORS: [&str; 29] = concat(RUN_TENSORS, LEFT_OUT);

/// The names `fia` reads. The inputs left out ([`LEFT_OUT`]: quantisation, shared prefix,
/// rope) are known so that they get their "unsupported" error rather than "unknown".
pub const NAMES: OpNames = OpNames {
    tensors: &TENSORS,
    tensor_lists: &[],
    attributes: &[
        "numHeads",
        "scaleValue",
        "preTokens",
        "nextTokens",
        "inputLayout",
        "numKeyValueHeads",
        "sparseMode",
        "innerPrecise",
        "blockSize",
        "antiquantMode",
        "softmaxLseFlag",
        "keyAntiquantMode",
        "valueAntiquantMode",
    ],
};

/// This op's line of `run --help` (what it reads of its own, what it writes).
pub const HELP: &str =
    "fused inference attention (blockTable, queryPaddingSize, keyAntiquantScale, valueAntiquantScale, learnableSink, ...) → attentionOut, softmaxLse (with softmaxLseFlag true)";

fn one_i64(b: &Bundle, name: &'static str) -> Result<Option<i64>, AttnError> {
    match b.opt_i64(name)? {
        None => Ok(None),
        Some(v) if v.len() == 1 => Ok(Some(v[0])),
        Some(v) => Err(AttnError::invalid(
            name,
            format!("must hold one value, got {}", v.len()),
        )),
    }
}

fn scale_pair(
    b: &Bundle,
    [scale, offset]: [&'static str; 2],
) -> Result<Option<(HostTensor, Option<HostTensor>)>, AttnError> {
    let Some(s) = b.optional(&[scale]) else {
        if b.optional(&[offset]).is_some() {
            return Err(AttnError::invalid(offset, format!("needs {scale}")));
        }
        return Ok(None);
    };
    if !matches!(s.dtype, Dtype::F16 | Dtype::BF16 | Dtype::F32) {
        return Err(AttnError::invalid(
            scale,
            format!(
                "dtype must be FLOAT16, BFLOAT16 or FLOAT32, got {:?}",
                s.dtype
            ),
        ));
    }
    let o = b.optional(&[offset]).cloned();
    if let Some(o) = &o {
        if o.dtype != s.dtype || o.shape != s.shape {
            return Err(AttnError::invalid(
                offset,
                format!(
                    "must have {scale}'s dtype and shape ({:?} {:?})",
                    s.dtype, s.shape
                ),
            ));
        }
    }
    Ok(Some((s.clone(), o)))
}

/// A bundle tensor with its f32 values.
type Valued = (HostTensor, Vec<f32>);

/// The bundle's optional tensor inputs, checked, with their host values: the dense mask as 0/1
/// bytes (a compressed mask is the spec's kind, not a tensor of the call), the others as f32.
struct Optional<'a> {
    mask: Option<(&'a HostTensor, Vec<u8>)>,
    pse: Option<(&'a HostTensor, Vec<f32>)>,
    /// Scale and offset of the combined, the key's and the value's antiquant.
    antiquant: [[Option<Valued>; 2]; 3],
}

impl Optional<'_> {
    /// The shapes validation reads, added to `shapes`.
    fn shapes(&self, mut shapes: FiaShapes) -> FiaShapes {
        fn shape<T: std::borrow::Borrow<HostTensor>, V>(t: &Option<(T, V)>) -> Option<Vec<usize>> {
            t.as_ref().map(|(t, _)| t.borrow().shape.clone())
        }
        let [[aqs, aqo], [kqs, kqo], [vqs, vqo]] = &self.antiquant;
        shapes.atten_mask = shape(&self.mask);
        shapes.pse_shift = shape(&self.pse);
        shapes.antiquant_scale = shape(aqs);
        shapes.antiquant_offset = shape(aqo);
        shapes.key_antiquant_scale = shape(kqs);
        shapes.key_antiquant_offset = shape(kqo);
        shapes.value_antiquant_scale = shape(vqs);
        shapes.value_antiquant_offset = shape(vqo);
        shapes
    }

    /// The host values, for the reference.
    fn host<'a>(&'a self, learnable_sink: Option<&'a [f32]>) -> FiaHostValues<'a> {
        let v = |t: &'a Option<Valued>| t.as_ref().map(|(_, v)| &v[..]);
        let [[aqs, aqo], [kqs, kqo], [vqs, vqo]] = &self.antiquant;
        FiaHostValues {
            atten_mask: self.mask.as_ref().map(|(_, v)| &v[..]),
            pse_shift: self.pse.as_ref().map(|(_, v)| &v[..]),
            antiquant_scale: v(aqs),
            antiquant_offset: v(aqo),
            key_antiquant_scale: v(kqs),
            key_antiquant_offset: v(kqo),
            value_antiquant_scale: v(vqs),
            value_antiquant_offset: v(vqo),
            learnable_sink,
        }
    }

    /// The values as the Burn API takes them, in the order of the carrier's optional tensors:
    /// the mask as 0/1 floats and the pse in the query's dtype, the antiquant as exact f32 (the
    /// backend converts where the op needs).
    fn data(&self, qdt: Dtype) -> Result<[Option<TensorData>; 8], AttnError> {
        let mask = (self.mask.as_ref()).map(|(t, v)| mask_data(v, &t.shape, qdt));
        let pse = self
            .pse
            .as_ref()
            .map(|(t, _)| data(t, "pseShift", qdt))
            .transpose()?;
        let f = |t: &Option<Valued>, name| {
            t.as_ref()
                .map(|(t, _)| data(t, name, Dtype::F32))
                .transpose()
        };
        let [[aqs, aqo], [kqs, kqo], [vqs, vqo]] = &self.antiquant;
        Ok([
            mask,
            pse,
            f(aqs, "antiquantScale")?,
            f(aqo, "antiquantOffset")?,
            f(kqs, "keyAntiquantScale")?,
            f(kqo, "keyAntiquantOffset")?,
            f(vqs, "valueAntiquantScale")?,
            f(vqo, "valueAntiquantOffset")?,
        ])
    }
}

fn spec_from(b: &Bundle, qdt: Dtype) -> Result<(FiaSpec, Optional<'_>), AttnError> {
    let layout = parse_fia_layout(b.attr_str("inputLayout", "BSH"))?;
    let mut spec = FiaSpec::new(
        b.attr_required("numHeads")?,
        b.attr("scaleValue", 1.0)?,
        layout,
    );
    spec.num_key_value_heads = b.attr("numKeyValueHeads", 0)?;
    spec.pre_tokens = b.attr("preTokens", INT_MAX_TOKENS)?;
    spec.next_tokens = b.attr("nextTokens", INT_MAX_TOKENS)?;
    spec.sparse_mode = b.attr("sparseMode", 0)?;
    spec.inner_precise = b.attr("innerPrecise", 0)?;
    spec.block_size = b.attr("blockSize", 0)?;
    spec.antiquant_mode = b.attr("antiquantMode", 0)?;
    spec.key_antiquant_mode = b.attr("keyAntiquantMode", 0)?;
    spec.value_antiquant_mode = b.attr("valueAntiquantMode", 0)?;
    spec.softmax_lse_flag = match b.attr_str("softmaxLseFlag", "false") {
        "true" => true,
        "false" => false,
        other => {
            return Err(AttnError::invalid(
                "softmaxLseFlag",
                format!("must be true or false, got '{other}'"),
            ))
        }
    };
    spec.actual_seq_lengths = b.opt_i64("actualSeqLengths")?;
    spec.actual_seq_lengths_kv = b.opt_i64("actualSeqLengthsKv")?;
    spec.query_padding_size = one_i64(b, "queryPaddingSize")?;
    spec.kv_padding_size = one_i64(b, "kvPaddingSize")?;
    let mut mask = None;
    if let Some(m) = b.optional(&["attenMask"]) {
        let data = m.mask01_values("attenMask")?;
        spec.atten_mask = if (2..=4).contains(&spec.sparse_mode) {
            // Leading dimensions of 1 are the same mask.
            let ok = m.shape.ends_with(&PFA_COMPRESSED_MASK)
                && m.shape.iter().rev().skip(2).all(|&d| d == 1)
                && is_compressed_mask(&data);
            if !ok {
                return Err(not_the_compressed_mask(
                    spec.sparse_mode,
                    "(2048, 2048)",
                    &m.shape,
                ));
            }
            FiaMask::Compressed
        } else {
            mask = Some((m, data));
            FiaMask::Dense
        };
    }
    let mut pse = None;
    if let Some(p) = b.optional(&["pseShift"]) {
        same_dtype(p, "pseShift", qdt)?;
        pse = Some((p, p.f32_values("pseShift")?));
    }
    spec.block_table = block_table(b, "blockTable")?;
    let mut antiquant: [[Option<Valued>; 2]; 3] = Default::default();
    for (pair, names) in antiquant.iter_mut().zip([
        ["antiquantScale", "antiquantOffset"],
        ["keyAntiquantScale", "keyAntiquantOffset"],
        ["valueAntiquantScale", "valueAntiquantOffset"],
    ]) {
        if let Some((s, o)) = scale_pair(b, names)? {
            let sv = s.f32_values(names[0])?;
            pair[1] = match o {
                Some(o) => {
                    let ov = o.f32_values(names[1])?;
                    Some((o, ov))
                }
                None => None,
            };
            pair[0] = Some((s, sv));
        }
    }
    Ok((
        spec,
        Optional {
            mask,
            pse,
            antiquant,
        },
    ))
}

/// `fia`.
pub fn fia(b: &Bundle, device: Device) -> Result<Bundle, CliError> {
    for name in LEFT_OUT {
        if b.tensors.contains_key(name) {
            return Err(AttnError::Unsupported(format!(
                "{name}: full quantisation, int8 output, shared prefix and rope split are not modelled for fia"
            ))
            .into());
        }
    }
    let (q, k, v) = (
        b.required("query")?,
        b.required("key")?,
        b.required("value")?,
    );
    let qdt = float_dtype(q, "query")?;
    for (t, name) in [(k, "key"), (v, "value")] {
        if t.dtype != k.dtype || !(t.dtype == qdt || t.dtype == Dtype::I8) {
            return Err(AttnError::invalid(
                name,
                format!(
                    "dtype must be the query's {qdt:?} or INT8 (key and value alike), got {:?}",
                    t.dtype
                ),
            )
            .into());
        }
    }
    let (spec, optional) = spec_from(b, qdt)?;
    // `learnableSink` is a tensor input like the query. Its dtype is checked once the path is
    // known (below): it follows the path and the CANN release, not the query (FIA v3 reads a
    // BF16 sink on every release, 9.x's split-fuse path an F16 one).
    let sink = b.optional(&["learnableSink"]);
    let sink_values = match sink {
        Some(s) => {
            float_dtype(s, "learnableSink")?;
            let values = s.f32_values("learnableSink")?;
            check_learnable_sink_values(&values)?;
            Some(values)
        }
        None => None,
    };
    let kv = if spec.block_table.is_some() {
        FiaKvShapes::Paged {
            key_cache: k.shape.clone(),
            value_cache: v.shape.clone(),
        }
    } else {
        FiaKvShapes::Contiguous {
            key: k.shape.clone(),
            value: v.shape.clone(),
        }
    };
    let dims = spec.validate(&optional.shapes(FiaShapes::new(
        q.shape.clone(),
        kv,
        k.dtype == Dtype::I8,
        sink.map(|s| s.shape.clone()),
    )))?;
    // The bundle's sink dtype is checked as CANN checks it, per path and release: against the
    // release the device reports on `sim` / `npu`; on `reference` and `cpu` against
    // `--cann-release`, else the call runs when some release takes it (with a note naming
    // those that refuse it). The backend then sends the sink in the dtype the chosen path reads.
    if let Some(s) = sink {
        let (sink_dtype, query_dtype) = (
            acl_dtype(s.dtype, "learnableSink")?,
            acl_dtype(qdt, "query")?,
        );
        let check = |release| {
            spec.check_learnable_sink_dtype(&dims, query_dtype, sink_dtype, release)
                .map(|_| ())
        };
        if device.is_acl() {
            check(cann_release(&acl_runtime(device)?)?)?;
        } else {
            check_on_host("fia", check)?;
        }
    }
    if device != Device::Reference {
        // int8 KV travels to the API as floats (in the query's dtype) holding the int8 values.
        return on_backend(
            device,
            Fia {
                paged: spec.block_table.is_some(),
                lse_rank: dims.lse_shape().len(),
                spec,
                dtype: qdt,
                qkv: [
                    data(q, "query", qdt)?,
                    data(k, "key", qdt)?,
                    data(v, "value", qdt)?,
                ],
                // Its f32 values: the backend sends them in the dtype the path reads.
                sink: sink
                    .map(|s| data(s, "learnableSink", Dtype::F32))
                    .transpose()?,
                optional: optional.data(qdt)?,
            },
        );
    }
    let (qv, kv, vv) = (
        q.f32_values("query")?,
        k.f32_or_i8_values("key")?,
        v.f32_or_i8_values("value")?,
    );
    let out =
        fia_reference(&spec.args(&dims, &qv, &kv, &vv, optional.host(sink_values.as_deref())));
    let mut res = Bundle::of([(
        "attentionOut",
        HostTensor::from_f64_as(&out.attention_out, dims.out_shape(), qdt),
    )]);
    if spec.softmax_lse_flag {
        res.insert(
            "softmaxLse",
            HostTensor::from_values(&out.softmax_lse, dims.lse_shape()),
        );
    }
    Ok(res)
}

/// The validated fused inference attention on a Burn backend ([`fused_infer_attention`]).
struct Fia {
    spec: FiaSpec,
    dtype: Dtype,
    paged: bool,
    /// `softmaxLse`'s rank: 3 for TND, else 4.
    lse_rank: usize,
    qkv: [TensorData; 3],
    /// `learnableSink`, when the call has one.
    sink: Option<TensorData>,
    /// The carrier's optional tensors ([`Optional::data`]).
    optional: [Option<TensorData>; 8],
}

impl Fia {
    fn call<B: AttentionBackend, const D: usize, const L: usize>(
        self,
        dev: &B::Device,
    ) -> Result<Bundle, CliError> {
        let [q, k, v] = self.qkv;
        let (k, v) = (primitive::<B>(k, dev), primitive::<B>(v, dev));
        let kv = if self.paged {
            FiaKv::Paged {
                key_cache: k,
                value_cache: v,
            }
        } else {
            FiaKv::Contiguous { key: k, value: v }
        };
        let p = |t: Option<TensorData>| t.map(|t| primitive::<B>(t, dev));
        let inputs = FiaInputs::new(primitive::<B>(q, dev), kv, p(self.sink))
            .with_optional(self.optional.map(p));
        let (out, lse) = fused_infer_attention_with::<B, D, L>(inputs, &self.spec)?;
        let mut res = Bundle::of([("attentionOut", host(out, self.dtype))]);
        if let Some(l) = lse {
            res.insert("softmaxLse", host(l, Dtype::F32));
        }
        Ok(res)
    }
}

impl OnBackend for Fia {
    fn run<B: AttentionBackend>(self, dev: &B::Device) -> Result<Bundle, CliError> {
        match (self.qkv[0].shape.len(), self.lse_rank) {
            (3, 3) => self.call::<B, 3, 3>(dev),
            (3, _) => self.call::<B, 3, 4>(dev),
            _ => self.call::<B, 4, 4>(dev),
        }
    }
}
