//! `varlen-fwd` / `varlen-bwd`: CANN's varlen flash attention forward and backward
//! (`ffi::names::varlen_fwd_v5`, `varlen_grad_v5`) on a safetensors bundle: the f64 reference
//! (`--device reference`), else the public ops API on `NdArray` (`cpu`) or `Ascend` (`sim`,
//! `npu`).

use half::{bf16, f16};
use safetensors::Dtype;

use burn::tensor::TensorData;

use crate::device::{
    burn_dtype, data, data_opt, host_primitive, mask_data, on_backend, primitive, OnBackend,
};
use crate::io::{rank3, Bundle, HostTensor, WireFloat};
use crate::names::{concat, OpNames};
use crate::op::bundle_checks::not_the_compressed_mask;
use crate::{CliError, Device};
use burn_ascend::kernels::reference::varlen as reference;
use burn_ascend::ops::varlen::VARLEN_LAYOUT;
use burn_ascend::ops::varlen::{
    check_alibi_compressed_values, compressed_mask, AttenMask, DenseMask, MaskSpec, Pse,
    VarlenBwdShapes, VarlenProblem, VarlenShapes, VarlenSpec,
};
use burn_ascend::{
    AttentionBackend, AttnError, PseType, SoftmaxLayout, SparseMode, VarlenGradInputs, VarlenInputs,
};

const VARLEN_COMMON_TENSORS: [&str; 13] = [
    "query",
    "key",
    "value",
    "sink",
    "attenMask",
    "realShift",
    "pseShift",
    "dropMask",
    "prefix",
    "qStartIdx",
    "kvStartIdx",
    "actualSeqQLen",
    "actualSeqKvLen",
];

const VARLEN_COMMON_ATTRS: [&str; 9] = [
    "inputLayout",
    "headNum",
    "scaleValue",
    "keepProb",
    "preTokens",
    "nextTokens",
    "innerPrecise",
    "sparseMode",
    "pseType",
];

const VARLEN_FWD_TENSORS: [&str; 13] = VARLEN_COMMON_TENSORS;
// Both softmax layouts in both directions: a bundle dumped from a training step carries the
// forward's `softmaxOutLayout` and the backward's `softmaxInLayout`; `spec_from` refuses the
// pair when they disagree, so neither is ignored.
const VARLEN_LAYOUT_ATTRS: [&str; 11] =
    concat(VARLEN_COMMON_ATTRS, ["softmaxOutLayout", "softmaxInLayout"]);
const VARLEN_FWD_ATTRS: [&str; 11] = VARLEN_LAYOUT_ATTRS;
const VARLEN_BWD_TENSORS: [&str; 18] = concat(
    VARLEN_COMMON_TENSORS,
    ["dy", "attentionIn", "softmaxMax", "softmaxSum", "sinkIn"],
);
const VARLEN_BWD_ATTRS: [&str; 11] = VARLEN_LAYOUT_ATTRS;

/// The names `varlen-fwd` reads.
pub const FWD_NAMES: OpNames = OpNames {
    tensors: &VARLEN_FWD_TENSORS,
    tensor_lists: &[],
    attributes: &VARLEN_FWD_ATTRS,
};

/// This op's line of `run --help` (what it reads of its own, what it writes).
pub const FWD_HELP: &str = "varlen's forward → attentionOut, softmaxMax, softmaxSum";

/// The names `varlen-bwd` reads.
pub const BWD_NAMES: OpNames = OpNames {
    tensors: &VARLEN_BWD_TENSORS,
    tensor_lists: &[],
    attributes: &VARLEN_BWD_ATTRS,
};

/// This op's line of `run --help` (what it reads of its own, what it writes).
pub const BWD_HELP: &str =
    "varlen's backward (dy, attentionIn, softmaxMax, softmaxSum, sinkIn too) → dq, dk, dv, dpse (a pse given), dsink (a sink given)";

/// An explicit `attenMask` from the bundle: its bytes (non-zero = masked) and its shape.
type HostMask = (Vec<u8>, Vec<usize>);

/// The bundle's inputs the call carries as tensors (`VarlenInputs::atten_mask`,
/// `VarlenInputs::pse`, `VarlenInputs::alibi_slopes`, `VarlenInputs::drop_mask`), not in the
/// spec.
#[derive(Default)]
struct HostTensors {
    /// The explicit mask.
    mask: Option<HostMask>,
    /// An external pse (pseType 0/1), flat `[pseTotalLen]` or ALiBi-compressed
    /// `[1|B, N, 1024, maxSkv]`: its values and shape.
    pse: Option<(Vec<f32>, Vec<usize>)>,
    /// ALiBi slopes (pseType 2/3) `[N]` or `[B, N]`: their values and shape.
    slopes: Option<(Vec<f32>, Vec<usize>)>,
    /// The bit-packed `dropMask` bytes.
    drop: Option<Vec<u8>>,
}

impl HostTensors {
    /// The call's carrier as the API takes it: query, key and value in the query's wire dtype
    /// `dt`, the sink (`sink`, named `sink_name` in errors) in f32, with this bundle's optional
    /// tensors (the pse in `dt`).
    fn carrier(
        &self,
        [q, k, v]: [&HostTensor; 3],
        (sink, sink_name): (Option<&HostTensor>, &'static str),
        dt: Dtype,
    ) -> Result<VarlenInputs<TensorData>, AttnError> {
        let (query, key, value) = (
            data(q, "query", dt)?,
            data(k, "key", dt)?,
            data(v, "value", dt)?,
        );
        Ok(VarlenInputs {
            sink: data_opt(sink, sink_name, Dtype::F32)?,
            pse: self.pse_data(dt),
            atten_mask: self.mask_data(),
            alibi_slopes: self.slopes_data(),
            drop_mask: self.drop_data(),
            ..VarlenInputs::new(query, key, value)
        })
    }

    /// The mask as the API takes it: a float tensor of 0/1.
    fn mask_data(&self) -> Option<TensorData> {
        (self.mask.as_ref()).map(|(bytes, shape)| mask_data(bytes, shape, Dtype::F32))
    }

    /// The pse as the API takes it, in the query's wire dtype `dt` (the op's pse dtype).
    fn pse_data(&self, dt: Dtype) -> Option<TensorData> {
        self.pse.as_ref().map(|(v, shape)| {
            TensorData::new(v.clone(), shape.clone()).convert_dtype(burn_dtype(dt))
        })
    }

    /// The ALiBi slopes as the API takes them: f32, as the op reads them.
    fn slopes_data(&self) -> Option<TensorData> {
        (self.slopes.as_ref()).map(|(v, shape)| TensorData::new(v.clone(), shape.clone()))
    }

    /// The dropout mask as the API takes it: its byte values as f32 (exact).
    fn drop_data(&self) -> Option<TensorData> {
        (self.drop.as_ref()).map(|m| {
            let v: Vec<f32> = m.iter().map(|&b| f32::from(b)).collect();
            TensorData::new(v, [m.len()])
        })
    }

    /// The shapes validation reads: query, key and value (`[T, N, D]` each), the sink's
    /// length, and this bundle's optional tensors.
    fn shapes(&self, [query, key, value]: [[usize; 3]; 3], sink: Option<usize>) -> VarlenShapes {
        let shape = |t: &Option<(_, Vec<usize>)>| t.as_ref().map(|(_, s)| s.clone());
        VarlenShapes {
            query,
            key,
            value,
            sink,
            pse: shape(&self.pse),
            atten_mask: self.mask.as_ref().map(|(_, s)| s.clone()),
            alibi_slopes: shape(&self.slopes),
            drop_mask: self.drop.as_ref().map(|m| vec![m.len()]),
        }
    }

    /// The value rules validation (which sees shapes) leaves to the holder of the values: an
    /// ALiBi-compressed pse must be constant along its diagonals.
    fn check_values(&self) -> Result<(), AttnError> {
        match &self.pse {
            Some((values, shape)) if shape.len() == 4 => {
                check_alibi_compressed_values(values, shape)
            }
            _ => Ok(()),
        }
    }
}

/// The reference's view of `p` with the bundle's mask bytes and pse values.
fn with_host<'a>(
    mut p: VarlenProblem<'a>,
    host: &'a HostTensors,
) -> Result<VarlenProblem<'a>, AttnError> {
    p.pse = Pse::of_tensor(
        host.pse.as_ref().map(|(v, s)| (&v[..], &s[..])),
        host.slopes.as_ref().map(|(v, _)| &v[..]),
        p.dims.head_num,
    );
    p.drop_mask = host.drop.as_deref();
    if let Some((bytes, shape)) = &host.mask {
        let m = DenseMask::from_shape(bytes, shape).ok_or_else(|| {
            AttnError::invalid(
                "attenMask",
                format!(
                    "has {} elements, shape {shape:?} needs their product",
                    bytes.len()
                ),
            )
        })?;
        p.atten_mask = AttenMask::Dense(m);
    }
    Ok(p)
}

/// Builds the spec from the bundle's tensors and attributes, and the inputs the call carries
/// as tensors. `backward` selects the names that differ (`softmaxInLayout`, `sinkIn`).
fn spec_from(
    b: &Bundle,
    query: [usize; 3],
    backward: bool,
) -> Result<(VarlenSpec, HostTensors), AttnError> {
    let layout = b.attr_str("inputLayout", VARLEN_LAYOUT);
    if layout != VARLEN_LAYOUT {
        return Err(AttnError::invalid(
            "inputLayout",
            format!("varlen takes only \"TND\", got \"{layout}\""),
        ));
    }
    let seq = |name: &'static str| b.required(name)?.i64_values(name);
    // scaleValue has no default in aclnn; torch_npu's npu_fusion_attention defaults it to 1.0.
    let mut spec = VarlenSpec::new(
        seq("actualSeqQLen")?,
        seq("actualSeqKvLen")?,
        b.attr("headNum", query[1])?,
        b.attr("scaleValue", 1.0)?,
    );
    let a = &mut spec.attrs;
    a.keep_prob = b.attr("keepProb", 1.0)?;
    a.pre_tokens = b.attr("preTokens", 2_147_483_647)?;
    a.next_tokens = b.attr("nextTokens", 2_147_483_647)?;
    a.inner_precise = b.attr("innerPrecise", 0)?;
    let mode: i64 = b.attr("sparseMode", 0)?;
    a.sparse_mode = SparseMode::from_attr(mode).ok_or_else(|| {
        AttnError::invalid(
            "sparseMode",
            format!("must be 0-4 or 6-8 for varlen, got {mode}"),
        )
    })?;
    let pse_type: i64 = b.attr("pseType", 1)?;
    a.pse_type = PseType::from_attr(pse_type)
        .ok_or_else(|| AttnError::invalid("pseType", format!("must be 0-3, got {pse_type}")))?;
    let ((layout_name, other_name), layout_attr) = if backward {
        let names = ("softmaxInLayout", "softmaxOutLayout");
        (names, b.attr_str("softmaxInLayout", ""))
    } else {
        let names = ("softmaxOutLayout", "softmaxInLayout");
        (names, b.attr_str("softmaxOutLayout", ""))
    };
    // The other direction's layout may travel in the same bundle (a dumped training step); it
    // describes the same softmaxMax/softmaxSum, so it must agree (this one's value or its
    // default "") rather than be ignored.
    if let Some(other) = b.metadata.get(other_name) {
        if other != layout_attr {
            return Err(AttnError::invalid(
                layout_name,
                format!(
                    "\"{layout_attr}\" disagrees with {other_name} \"{other}\" in the same bundle"
                ),
            ));
        }
    }
    a.softmax_layout = SoftmaxLayout::from_attr(layout_attr).ok_or_else(|| {
        AttnError::invalid(
            layout_name,
            format!("must be \"\" or \"same_as_input\", got \"{layout_attr}\""),
        )
    })?;

    let mut host = HostTensors::default();
    if let Some(m) = b.optional(&["attenMask"]) {
        let data = m.mask_values("attenMask")?;
        spec.atten_mask = match compressed_mask(spec.attrs.sparse_mode) {
            // Modes 2-8: the device reads CANN's fixed compressed mask.
            Some((expected, shape)) => {
                if m.shape != shape
                    || data
                        .iter()
                        .map(|&x| (x != 0) as u8)
                        .ne(expected.iter().copied())
                {
                    return Err(not_the_compressed_mask(
                        mode,
                        &format!("{shape:?}"),
                        &m.shape,
                    ));
                }
                MaskSpec::Compressed
            }
            None => {
                host.mask = Some((data, m.shape.clone()));
                MaskSpec::Dense
            }
        };
    }
    if let Some(p) = b.optional(&["realShift", "pseShift"]) {
        // An input of the op like the sink: a tensor, the pse or (pseType 2/3) the slopes.
        let values = Some((p.f32_values("realShift")?, p.shape.clone()));
        match spec.attrs.pse_type {
            PseType::InnerMulAdd | PseType::InnerMulAddSqrt => host.slopes = values,
            _ => host.pse = values,
        }
    }
    if let Some(m) = b.optional(&["dropMask"]) {
        host.drop = Some(m.mask_values("dropMask")?);
    }
    if let Some(p) = b.optional(&["prefix"]) {
        spec.prefix = Some(p.i64_values("prefix")?);
    }
    let scalar = |name: &'static str| -> Result<Option<i64>, AttnError> {
        match b.optional(&[name]) {
            None => Ok(None),
            Some(t) => match t.i64_values(name)?.as_slice() {
                [] => Ok(None),
                [v] => Ok(Some(*v)),
                v => Err(AttnError::invalid(
                    name,
                    format!("must hold one value, got {}", v.len()),
                )),
            },
        }
    };
    spec.q_start_idx = scalar("qStartIdx")?;
    spec.kv_start_idx = scalar("kvStartIdx")?;
    Ok((spec, host))
}

fn sink_of(b: &Bundle, names: &[&str]) -> Result<Option<Vec<f32>>, AttnError> {
    match b.optional(names) {
        None => Ok(None),
        Some(t) => {
            if t.dtype != Dtype::F32 || t.shape.len() != 1 {
                return Err(AttnError::invalid(
                    "sink",
                    format!("must be F32 [headNum], got {:?} {:?}", t.dtype, t.shape),
                ));
            }
            Ok(Some(t.values::<f32>("sink")?))
        }
    }
}

/// Dispatches on the query dtype; key, value (and dy, attentionIn) must share it.
macro_rules! by_dtype {
    ($b:expr, $d:expr, $f:ident) => {
        match $b.required("query")?.dtype {
            Dtype::F32 => $f::<f32>($b, $d),
            Dtype::F16 => $f::<f16>($b, $d),
            Dtype::BF16 => $f::<bf16>($b, $d),
            other => Err(AttnError::invalid(
                "query",
                format!("dtype must be F16, BF16 or F32, got {other:?}"),
            )
            .into()),
        }
    };
}

/// `varlen-fwd`.
pub fn forward(b: &Bundle, device: Device) -> Result<Bundle, CliError> {
    by_dtype!(b, device, forward_typed)
}

/// `varlen-bwd`.
pub fn backward(b: &Bundle, device: Device) -> Result<Bundle, CliError> {
    by_dtype!(b, device, backward_typed)
}

fn stats(v: &[f32], t: usize, n: usize) -> HostTensor {
    HostTensor::from_values(v, vec![t, n, 8])
}

fn forward_typed<T: WireFloat>(b: &Bundle, device: Device) -> Result<Bundle, CliError> {
    let (q, k, v) = (
        b.required("query")?,
        b.required("key")?,
        b.required("value")?,
    );
    let query = rank3(q, "query")?;
    let sink = sink_of(b, &["sink"])?;
    let (spec, host) = spec_from(b, query, false)?;
    let qkv = [query, rank3(k, "key")?, rank3(v, "value")?];
    let dims = spec.validate_fwd(&host.shapes(qkv, sink.as_ref().map(Vec::len)))?;
    host.check_values()?;
    let (t, n, dv) = (dims.t_q(), dims.head_num, dims.value_dim);
    // Decoded on every device: the dtype checks are host validation every device needs.
    let (qv, kv, vv) = (
        q.values::<T>("query")?,
        k.values::<T>("key")?,
        v.values::<T>("value")?,
    );
    if device != Device::Reference {
        let dt = T::DTYPE;
        return on_backend(
            device,
            Forward {
                spec,
                dtype: dt,
                inputs: host.carrier([q, k, v], (b.optional(&["sink"]), "sink"), dt)?,
            },
        );
    }
    let p = with_host(spec.problem(dims, sink.as_deref()), &host)?;
    let out = reference::varlen_fwd(&p, &qv, &kv, &vv);
    Ok(Bundle::of([
        (
            "attentionOut",
            HostTensor::from_values(&out.attention_out, vec![t, n, dv]),
        ),
        ("softmaxMax", stats(&out.softmax_max, t, n)),
        ("softmaxSum", stats(&out.softmax_sum, t, n)),
    ]))
}

/// The validated forward on a Burn backend (`AttentionBackend::varlen_fwd`, what
/// [`burn_ascend::varlen_score`] calls, with the explicit mask as a tensor).
struct Forward {
    spec: VarlenSpec,
    /// The inputs' (and `attentionOut`'s) wire dtype.
    dtype: Dtype,
    /// The call's tensors ([`HostTensors::carrier`]).
    inputs: VarlenInputs<TensorData>,
}

impl OnBackend for Forward {
    fn run<B: AttentionBackend>(self, dev: &B::Device) -> Result<Bundle, CliError> {
        let out = B::varlen_fwd(self.inputs.map(|d| primitive::<B>(d, dev)), &self.spec)?;
        let h = |t, dt| host_primitive::<B>(t, dt);
        Ok(Bundle::of([
            ("attentionOut", h(out.attention_out, self.dtype)),
            ("softmaxMax", h(out.softmax_max, Dtype::F32)),
            ("softmaxSum", h(out.softmax_sum, Dtype::F32)),
        ]))
    }
}

fn backward_typed<T: WireFloat>(b: &Bundle, device: Device) -> Result<Bundle, CliError> {
    let get = |name: &'static str| -> Result<(&HostTensor, [usize; 3]), AttnError> {
        let t = b.required(name)?;
        Ok((t, rank3(t, name)?))
    };
    let ((q, qs), (k, ks), (v, vs)) = (get("query")?, get("key")?, get("value")?);
    let ((dy, dys), (o, os)) = (get("dy")?, get("attentionIn")?);
    let ((smax, ms), (ssum, ss)) = (get("softmaxMax")?, get("softmaxSum")?);
    let sink = sink_of(b, &["sinkIn", "sink"])?;
    let (spec, host) = spec_from(b, qs, true)?;
    let shapes = host.shapes([qs, ks, vs], sink.as_ref().map(Vec::len));
    let bwd = VarlenBwdShapes {
        dy: dys,
        attention_in: os,
        softmax_max: ms,
        softmax_sum: ss,
    };
    let dims = spec.validate_bwd(&shapes, &bwd)?;
    host.check_values()?;
    let (tq, tkv, n, nkv, d) = (
        dims.t_q(),
        dims.t_kv(),
        dims.head_num,
        dims.kv_head_num,
        dims.head_dim,
    );
    // Decoded on every device: the dtype checks are host validation every device needs.
    let (qv, kv, vv) = (
        q.values::<T>("query")?,
        k.values::<T>("key")?,
        v.values::<T>("value")?,
    );
    let (dyv, ov) = (dy.values::<T>("dy")?, o.values::<T>("attentionIn")?);
    let (smaxv, ssumv) = (
        smax.values::<f32>("softmaxMax")?,
        ssum.values::<f32>("softmaxSum")?,
    );
    if device != Device::Reference {
        let dt = T::DTYPE;
        return on_backend(
            device,
            Backward {
                spec,
                dtype: dt,
                inputs: host.carrier([q, k, v], (b.optional(&["sinkIn", "sink"]), "sinkIn"), dt)?,
                dy: data(dy, "dy", dt)?,
                forward: [
                    data(o, "attentionIn", dt)?,
                    data(smax, "softmaxMax", Dtype::F32)?,
                    data(ssum, "softmaxSum", Dtype::F32)?,
                ],
            },
        );
    }
    let p = with_host(spec.problem(dims, sink.as_deref()), &host)?;
    let g = reference::varlen_bwd(&p, &qv, &kv, &vv, &dyv, &ov, &smaxv, &ssumv);
    let mut res = Bundle::of([
        ("dq", HostTensor::from_values(&g.dq, vec![tq, n, d])),
        ("dk", HostTensor::from_values(&g.dk, vec![tkv, nkv, d])),
        ("dv", HostTensor::from_values(&g.dv, vec![tkv, nkv, d])),
    ]);
    if let Some(dp) = g.dpse {
        // An external pse's gradient, laid out as the pse (`[pseTotalLen]`).
        let len = dp.len();
        res.insert("dpse", HostTensor::from_values(&dp, vec![len]));
    }
    if let Some(ds) = g.dsink {
        res.insert("dsink", HostTensor::from_values(&ds, vec![n]));
    }
    Ok(res)
}

/// The validated backward on a Burn backend (`AttentionBackend::varlen_bwd`, what
/// [`burn_ascend::varlen_score_grad`] calls, with the explicit mask as a tensor). On `Ascend`
/// the backend replaces CANN's dsink before 9.1.0 (wrong past its post-chunk threshold) and computes dpse
/// (no arch32 grad kernel writes it), so every device gives the gradients users train on.
struct Backward {
    spec: VarlenSpec,
    dtype: Dtype,
    /// The forward's tensors ([`HostTensors::carrier`]; a flat pse receives dpse).
    inputs: VarlenInputs<TensorData>,
    dy: TensorData,
    /// `attentionIn`, `softmaxMax`, `softmaxSum`.
    forward: [TensorData; 3],
}

impl OnBackend for Backward {
    fn run<B: AttentionBackend>(self, dev: &B::Device) -> Result<Bundle, CliError> {
        let [o, smax, ssum] = self.forward;
        let p = |d| primitive::<B>(d, dev);
        let g = B::varlen_bwd(
            VarlenGradInputs {
                inputs: self.inputs.map(p),
                dy: p(self.dy),
                attention_in: p(o),
                softmax_max: p(smax),
                softmax_sum: p(ssum),
            },
            &self.spec,
        )?;
        let h = |t, dt| host_primitive::<B>(t, dt);
        let mut res = Bundle::of([
            ("dq", h(g.dq, self.dtype)),
            ("dk", h(g.dk, self.dtype)),
            ("dv", h(g.dv, self.dtype)),
        ]);
        if let Some(dp) = g.dpse {
            // In the pse's dtype (the query's), as the reference writes it and torch_npu
            // allocates it (`at::empty` with the pse's options).
            res.insert("dpse", h(dp, self.dtype));
        }
        if let Some(ds) = g.dsink {
            res.insert("dsink", h(ds, Dtype::F32));
        }
        Ok(res)
    }
}
