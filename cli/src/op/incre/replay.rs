//! `incre`: CANN's incremental flash attention (`ffi::names::ifa_v4`) on a safetensors bundle: the
//! f64 reference
//! (`--device reference`), else the public ops API on `NdArray` (`cpu`, the fast decode
//! kernel) or `Ascend` (`sim`, `npu`).
//!
//! Key/value: `key` / `value` (contiguous), `key.0`, `key.1`, … / `value.0`, … (the tensor-list
//! form), or with `blocktable` the paged caches `key` / `value`. int8 KV (with
//! `antiquantScale`) is widened to f32 exactly; the output is rounded once to the query's dtype
//! or quantised to int8 with `quantScale2` / `quantOffset2`.

use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorData;
use safetensors::Dtype;

use crate::device::{
    acl_runtime, data, download, host, mask_data, on_backend, output, primitive, upload, OnBackend,
};
use crate::io::{Bundle, HostTensor};
use crate::names::{concat, OpNames};
use crate::op::bundle_checks::{
    block_table, float_dtype, int8_f32_refusal, offset_like_scale, post_quant, refuse_int8_query,
    same_dtype, PROMPT_INCRE_ATTRS, PROMPT_INCRE_TENSORS,
};
use crate::replay::note;
use crate::{CliError, Device};
use burn_ascend::backend::attention::builders;
use burn_ascend::contract::incre::KvInput;
use burn_ascend::kernels::reference::incre::{incre_flash_attention, incre_flash_attention_int8};
use burn_ascend::ops::incre::{
    parse_ifa_layout, IncreHostValues, IncreKvShapes, IncreShapes, IncreSpec, KvDims,
};
use burn_ascend::{AttentionBackend, AttnError, IncreInputs, IncreKv};
use burn_ascend_cann::acl::ffi::names;
use burn_ascend_cann::acl::{DataType, DeviceTensor, Tensor};

/// The names `incre` reads.
pub const NAMES: OpNames = OpNames {
    tensors: &TENSORS,
    tensor_lists: &["key", "value"],
    attributes: &ATTRS,
};

/// This op's line of `run --help` (what it reads of its own, what it writes).
pub const HELP: &str =
    "incremental attention, KV also in tensor-list form (key.0, key.1, ..., value.0, ...) → attentionOut";

const TENSORS: [&str; 15] = concat(
    PROMPT_INCRE_TENSORS,
    [
        "kvPaddingSize",
        "blocktable",
        "antiquantScale",
        "antiquantOffset",
        "quantScale2",
        "quantOffset2",
        "dequantScale1",
        "quantScale1",
        "dequantScale2",
    ],
);

const ATTRS: [&str; 6] = concat(PROMPT_INCRE_ATTRS, ["blockSize", "innerPrecise"]);

enum KvForm<'a> {
    One(&'a HostTensor, &'a HostTensor),
    List(Vec<&'a HostTensor>, Vec<&'a HostTensor>),
}

fn kv_form(b: &Bundle) -> Result<KvForm<'_>, AttnError> {
    if let (Some(k), Some(v)) = (b.tensors.get("key"), b.tensors.get("value")) {
        return Ok(KvForm::One(k, v));
    }
    let list = |prefix: &str| -> Vec<&HostTensor> {
        (0..)
            .map_while(|i| b.tensors.get(&format!("{prefix}.{i}")))
            .collect()
    };
    let (k, v) = (list("key"), list("value"));
    if k.is_empty() {
        return Err(AttnError::invalid(
            "key",
            "required tensor is missing (key, or the list key.0, key.1, …)",
        ));
    }
    if v.is_empty() {
        return Err(AttnError::invalid("value", "required tensor is missing"));
    }
    Ok(KvForm::List(k, v))
}

fn spec_from(b: &Bundle, qdt: Dtype) -> Result<IncreSpec, AttnError> {
    let layout = parse_ifa_layout(b.attr_str("inputLayout", "BSH"))?;
    let mut spec = IncreSpec::new(
        b.attr_required("numHeads")?,
        b.attr("scaleValue", 1.0)?,
        layout,
    );
    spec.num_key_value_heads = b.attr("numKeyValueHeads", 0)?;
    spec.block_size = b.attr("blockSize", 0)?;
    spec.inner_precise = b.attr("innerPrecise", 1)?;
    spec.actual_seq_lengths = b.opt_i64("actualSeqLengths")?;
    if let Some(p) = b.opt_i64("kvPaddingSize")? {
        if p.len() != 1 {
            return Err(AttnError::invalid(
                "kvPaddingSize",
                format!("must hold one value, got {}", p.len()),
            ));
        }
        spec.kv_padding_size = Some(p[0]);
    }
    spec.block_table = block_table(b, "blocktable")?;
    spec.post_quant = post_quant(b, qdt)?;
    Ok(spec)
}

/// The bundle's optional tensor inputs (`attenMask`, `pseShift`, `antiquantScale`,
/// `antiquantOffset`), dtypes and mask values checked, with their host values: the mask as
/// 0/1 bytes, the others as f32.
struct Optional<'a> {
    mask: Option<(&'a HostTensor, Vec<u8>)>,
    pse: Option<(&'a HostTensor, Vec<f32>)>,
    scale: Option<(&'a HostTensor, Vec<f32>)>,
    offset: Option<(&'a HostTensor, Vec<f32>)>,
}

impl<'a> Optional<'a> {
    fn read(b: &'a Bundle, qdt: Dtype) -> Result<Self, AttnError> {
        let mask = match b.optional(&["attenMask"]) {
            Some(m) => Some((m, m.mask01_values("attenMask")?)),
            None => None,
        };
        let pse = match b.optional(&["pseShift"]) {
            Some(p) => {
                same_dtype(p, "pseShift", qdt)?;
                Some((p, p.f32_values("pseShift")?))
            }
            None => None,
        };
        let (mut scale, mut offset) = (None, None);
        if let Some(s) = b.optional(&["antiquantScale"]) {
            if !(s.dtype == qdt || s.dtype == Dtype::F32) {
                return Err(AttnError::invalid(
                    "antiquantScale",
                    format!(
                        "dtype must be the query's {qdt:?} or FLOAT32, got {:?}",
                        s.dtype
                    ),
                ));
            }
            if let Some(o) = b.optional(&["antiquantOffset"]) {
                offset_like_scale((o, "antiquantOffset"), (s, "antiquantScale"))?;
                offset = Some((o, o.f32_values("antiquantOffset")?));
            }
            scale = Some((s, s.f32_values("antiquantScale")?));
        } else if b.optional(&["antiquantOffset"]).is_some() {
            return Err(AttnError::invalid(
                "antiquantOffset",
                "needs antiquantScale",
            ));
        }
        Ok(Self {
            mask,
            pse,
            scale,
            offset,
        })
    }

    /// The shapes validation reads, added to `shapes`.
    fn shapes(&self, mut shapes: IncreShapes) -> IncreShapes {
        fn shape<V>(t: &Option<(&HostTensor, V)>) -> Option<Vec<usize>> {
            t.as_ref().map(|(t, _)| t.shape.clone())
        }
        shapes.atten_mask = shape(&self.mask);
        shapes.pse_shift = shape(&self.pse);
        shapes.antiquant_scale = shape(&self.scale);
        shapes.antiquant_offset = shape(&self.offset);
        shapes
    }

    /// The host values, for the reference.
    fn host(&self) -> IncreHostValues<'_> {
        IncreHostValues {
            atten_mask: self.mask.as_ref().map(|(_, v)| &v[..]),
            pse_shift: self.pse.as_ref().map(|(_, v)| &v[..]),
            antiquant_scale: self.scale.as_ref().map(|(_, v)| &v[..]),
            antiquant_offset: self.offset.as_ref().map(|(_, v)| &v[..]),
        }
    }

    /// The values as the Burn API takes them: the mask as 0/1 floats and the pse in the
    /// query's dtype, the antiquant as exact f32 (the backend converts where the op needs).
    fn data(&self, qdt: Dtype) -> Result<[Option<TensorData>; 4], AttnError> {
        let mask = (self.mask.as_ref()).map(|(t, v)| mask_data(v, &t.shape, qdt));
        Ok([
            mask,
            self.pse
                .as_ref()
                .map(|(t, _)| data(t, "pseShift", qdt))
                .transpose()?,
            self.scale
                .as_ref()
                .map(|(t, _)| data(t, "antiquantScale", Dtype::F32))
                .transpose()?,
            self.offset
                .as_ref()
                .map(|(t, _)| data(t, "antiquantOffset", Dtype::F32))
                .transpose()?,
        ])
    }
}

/// `incre` on `device`.
pub fn incre(b: &Bundle, device: Device) -> Result<Bundle, CliError> {
    refuse_int8_query(b, ["dequantScale1", "quantScale1", "dequantScale2"])?;
    let q = b.required("query")?;
    let qdt = float_dtype(q, "query")?;
    let form = kv_form(b)?;
    let all: Vec<(&HostTensor, &'static str)> = match &form {
        KvForm::One(k, v) => vec![(*k, "key"), (*v, "value")],
        KvForm::List(k, v) => k
            .iter()
            .map(|t| (*t, "key"))
            .chain(v.iter().map(|t| (*t, "value")))
            .collect(),
    };
    let kdt = all[0].0.dtype;
    for &(t, name) in &all {
        if t.dtype != kdt || !(t.dtype == qdt || t.dtype == Dtype::I8) {
            return Err(AttnError::invalid(
                name,
                format!(
                    "dtype must be the query's {qdt:?} or INT8, the same for all of key/value, got {:?}",
                    t.dtype
                ),
            )
            .into());
        }
    }
    let mut spec = spec_from(b, qdt)?;
    let optional = Optional::read(b, qdt)?;
    let kv_shapes = match (&form, spec.block_table.is_some()) {
        (KvForm::One(k, v), true) => IncreKvShapes::Paged {
            key_cache: k.shape.clone(),
            value_cache: v.shape.clone(),
        },
        (KvForm::One(k, v), false) => IncreKvShapes::Contiguous {
            key: k.shape.clone(),
            value: v.shape.clone(),
        },
        (KvForm::List(k, v), false) => IncreKvShapes::List {
            key: k.iter().map(|t| t.shape.clone()).collect(),
            value: v.iter().map(|t| t.shape.clone()).collect(),
        },
        (KvForm::List(..), true) => {
            return Err(AttnError::invalid(
                "blocktable",
                "page attention takes one key and one value cache, not tensor lists",
            )
            .into())
        }
    };
    let dims = spec.validate(&optional.shapes(IncreShapes::new(
        q.shape.clone(),
        kv_shapes,
        kdt == Dtype::I8,
    )))?;
    if let Some(why) = spec.ignored_left_padding(&dims) {
        // CANN runs the call as if it had no kvPaddingSize; so does the replay, on every
        // device (the Burn API would refuse it, for its own callers' sake).
        note(
            "incre",
            format!(
                "kvPaddingSize ignored, as CANN ignores it when {why} (it applies it only with \
                 one key/value tensor, actualSeqLengths and no blocktable)"
            ),
        );
        spec.kv_padding_size = None;
    }
    if spec.post_quant.is_some() {
        // int8 attentionOut (quantScale2): a Burn float tensor cannot hold it, so the public
        // API refuses it; the host devices run the reference, `sim` / `npu` CANN's int8 path.
        if device.is_acl() {
            if q.dtype == Dtype::F32 {
                return Err(int8_f32_refusal(names::ifa_v4).into());
            }
            return int8_on_device(device, &spec, q, &form, &optional);
        }
    } else if device != Device::Reference {
        // int8 KV travels to the API as floats (in the query's dtype) holding the int8 values.
        let kv = |ts: &[&HostTensor], name| -> Result<Vec<TensorData>, AttnError> {
            ts.iter().map(|t| data(t, name, qdt)).collect()
        };
        let (key, value) = match &form {
            KvForm::One(k, v) => (kv(&[k], "key")?, kv(&[v], "value")?),
            KvForm::List(k, v) => (kv(k, "key")?, kv(v, "value")?),
        };
        return on_backend(
            device,
            Incre {
                list: matches!(form, KvForm::List(..)),
                paged: spec.block_table.is_some(),
                spec,
                dtype: qdt,
                query: data(q, "query", qdt)?,
                key,
                value,
                optional: optional.data(qdt)?,
            },
        );
    }
    let qv = q.f32_values("query")?;
    let run = |kv: KvInput<'_, f32>| -> HostTensor {
        let a = spec.args(&dims, &qv, kv, optional.host());
        let shape = q.shape.clone();
        match spec.post_quant() {
            Some(pq) => HostTensor::from_i8(&incre_flash_attention_int8(&a, &pq), shape),
            None => HostTensor::from_f64_as(&incre_flash_attention(&a), shape, qdt),
        }
    };
    let out = match form {
        KvForm::One(k, v) => {
            let (kv_, vv) = (k.f32_or_i8_values("key")?, v.f32_or_i8_values("value")?);
            match dims.kv {
                KvDims::Contiguous { kv_seq } => run(KvInput::Contiguous {
                    key: &kv_,
                    value: &vv,
                    kv_seq,
                }),
                _ => run(spec.paged(&dims, &kv_, &vv)?),
            }
        }
        KvForm::List(k, v) => {
            let kl: Vec<Vec<f32>> = k
                .iter()
                .map(|t| t.f32_or_i8_values("key"))
                .collect::<Result<_, _>>()?;
            let vl: Vec<Vec<f32>> = v
                .iter()
                .map(|t| t.f32_or_i8_values("value"))
                .collect::<Result<_, _>>()?;
            let (kr, vr): (Vec<&[f32]>, Vec<&[f32]>) = (
                kl.iter().map(Vec::as_slice).collect(),
                vl.iter().map(Vec::as_slice).collect(),
            );
            run(KvInput::TensorList {
                key: &kr,
                value: &vr,
            })
        }
    };
    Ok(Bundle::of([("attentionOut", out)]))
}

/// The validated incremental attention on a Burn backend
/// ([`burn_ascend::incre_flash_attention`]).
struct Incre {
    spec: IncreSpec,
    dtype: Dtype,
    /// The tensor-list form (`key.0`, …), else one tensor each (paged with a block table).
    list: bool,
    paged: bool,
    query: TensorData,
    key: Vec<TensorData>,
    value: Vec<TensorData>,
    /// `attenMask`, `pseShift`, `antiquantScale`, `antiquantOffset` ([`Optional::data`]).
    optional: [Option<TensorData>; 4],
}

impl OnBackend for Incre {
    fn run<B: AttentionBackend>(self, dev: &B::Device) -> Result<Bundle, CliError> {
        let prims = |ts: Vec<TensorData>| -> Vec<FloatTensor<B>> {
            ts.into_iter().map(|t| primitive::<B>(t, dev)).collect()
        };
        let (mut key, mut value) = (prims(self.key), prims(self.value));
        let kv = if self.list {
            IncreKv::List { key, value }
        } else {
            let (key, value) = (key.swap_remove(0), value.swap_remove(0));
            if self.paged {
                IncreKv::Paged {
                    key_cache: key,
                    value_cache: value,
                }
            } else {
                IncreKv::Contiguous { key, value }
            }
        };
        let [atten_mask, pse_shift, antiquant_scale, antiquant_offset] =
            self.optional.map(|t| t.map(|t| primitive::<B>(t, dev)));
        let rank = self.query.shape.len();
        let inputs = IncreInputs {
            query: primitive::<B>(self.query, dev),
            kv,
            atten_mask,
            pse_shift,
            antiquant_scale,
            antiquant_offset,
        };
        let out = if rank == 3 {
            host(
                burn_ascend::incre_flash_attention_with::<B, 3>(inputs, &self.spec)?,
                self.dtype,
            )
        } else {
            host(
                burn_ascend::incre_flash_attention_with::<B, 4>(inputs, &self.spec)?,
                self.dtype,
            )
        };
        Ok(Bundle::of([("attentionOut", out)]))
    }
}

/// int8 `attentionOut` on `sim` / `npu` through the backend's call builder (the one output the
/// Burn API cannot carry).
fn int8_on_device(
    device: Device,
    spec: &IncreSpec,
    q: &HostTensor,
    form: &KvForm<'_>,
    optional: &Optional<'_>,
) -> Result<Bundle, CliError> {
    let rt = acl_runtime(device)?;
    let (keys, values): (Vec<&HostTensor>, Vec<&HostTensor>) = match form {
        KvForm::One(k, v) => (vec![*k], vec![*v]),
        KvForm::List(k, v) => (k.to_vec(), v.to_vec()),
    };
    let up = |ts: &[&HostTensor], name| -> Result<Vec<DeviceTensor>, CliError> {
        ts.iter().map(|t| upload(&rt, t, name)).collect()
    };
    let (keys, values) = (up(&keys, "key")?, up(&values, "value")?);
    let qd = upload(&rt, q, "query")?;
    let o = output(&rt, &q.shape, DataType::Int8)?;
    // The mask as its file has it (BOOL/INT8/UINT8), pse in the query's dtype (checked), the
    // antiquant scales converted to the query's dtype as the op takes them.
    let in_query_dtype = |t: &Option<(&HostTensor, Vec<f32>)>, name| match t {
        None => Ok(None),
        Some((t, v)) => {
            let v: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
            upload(
                &rt,
                &HostTensor::from_f64_as(&v, t.shape.clone(), q.dtype),
                name,
            )
            .map(Some)
        }
    };
    let mask = optional
        .mask
        .as_ref()
        .map(|(t, _)| upload(&rt, t, "attenMask"))
        .transpose()?;
    let pse = optional
        .pse
        .as_ref()
        .map(|(t, _)| upload(&rt, t, "pseShift"))
        .transpose()?;
    let aq_scale = in_query_dtype(&optional.scale, "antiquantScale")?;
    let aq_offset = in_query_dtype(&optional.offset, "antiquantOffset")?;
    fn handle(t: &Option<DeviceTensor>) -> Result<Option<Tensor<'_>>, CliError> {
        Ok(t.as_ref().map(DeviceTensor::handle).transpose()?)
    }
    fn handles(ts: &[DeviceTensor]) -> Result<Vec<Tensor<'_>>, CliError> {
        Ok(ts
            .iter()
            .map(DeviceTensor::handle)
            .collect::<Result<_, _>>()?)
    }
    builders::incre(
        &rt,
        spec,
        IncreInputs {
            query: qd.handle()?,
            kv: IncreKv::List {
                key: handles(&keys)?,
                value: handles(&values)?,
            },
            atten_mask: handle(&mask)?,
            pse_shift: handle(&pse)?,
            antiquant_scale: handle(&aq_scale)?,
            antiquant_offset: handle(&aq_offset)?,
        },
        &o.handle()?,
    )?;
    Ok(Bundle::of([("attentionOut", download(&o)?)]))
}
