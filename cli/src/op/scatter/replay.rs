//! `scatter`: CANN's paged KV cache scatter (`ffi::names::scatter_pa_kv_cache`) on a safetensors
//! bundle. Reads `key`, `value`,
//! `keyCache`, `valueCache`, `slotMapping` and the compressed-mode index tensors; writes the
//! updated `keyCache` (and `valueCache`) with the input caches' dtype and shape. The element
//! type is kept (f16/bf16/int8/f32) so PA_NZ's `32 / sizeof(dtype)` is the caches'.
//!
//! The host scatter validates every call (values included) and is `reference`'s answer; `cpu`
//! (f32 caches) and `sim` / `npu` (float caches) then run the public ops API on `NdArray` /
//! `Ascend`.

use burn::tensor::TensorData;
use half::{bf16, f16};
use safetensors::Dtype;

use crate::device::{
    acl_dtype, acl_runtime, data, download, host_primitive, on_backend, primitive, upload,
    OnBackend,
};
use crate::io::{Bundle, HostTensor, WireFloat};
use crate::names::OpNames;
use crate::{CliError, Device};
use burn_ascend::backend::attention::builders;
use burn_ascend::kernels::reference::scatter::RefElem;
use burn_ascend::ops::scatter::{
    parse_cache_mode, scatter_checked, ScatterDims, ScatterKind, ScatterShapes, ScatterSpec,
};
use burn_ascend::{AttentionBackend, AttnError, ScatterInputs};
use burn_ascend_cann::acl::DeviceTensor;

/// The names `scatter` reads.
pub const NAMES: OpNames = OpNames {
    tensors: &[
        "key",
        "value",
        "keyCache",
        "valueCache",
        "slotMapping",
        "compressLens",
        "compressSeqOffset",
        "seqLens",
    ],
    tensor_lists: &[],
    attributes: &["cacheMode", "scatterMode", "strides", "offsets"],
};

/// This op's line of `run --help` (what it reads of its own, what it writes).
pub const HELP: &str = "the paged KV cache scatter → keyCache, valueCache";

/// A cache element that travels as little-endian bytes: the floats as every op's bundle holds
/// them ([`WireFloat`]), and int8 (a quantised cache).
trait Wire: RefElem + Copy {
    const SIZE: usize = std::mem::size_of::<Self>();
    fn get(b: &[u8]) -> Self;
    fn put(self, out: &mut Vec<u8>);
}

impl<T: WireFloat + RefElem + Copy> Wire for T {
    fn get(b: &[u8]) -> Self {
        T::from_le(b)
    }
    fn put(self, out: &mut Vec<u8>) {
        self.push_le(out);
    }
}

impl Wire for i8 {
    fn get(b: &[u8]) -> Self {
        i8::from_le_bytes([b[0]])
    }
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

fn decode<T: Wire>(t: &HostTensor) -> Vec<T> {
    t.bytes.chunks_exact(T::SIZE).map(T::get).collect()
}

fn encode<T: Wire>(v: &[T], like: &HostTensor) -> HostTensor {
    let mut bytes = Vec::with_capacity(v.len() * T::SIZE);
    v.iter().for_each(|x| x.put(&mut bytes));
    HostTensor {
        dtype: like.dtype,
        shape: like.shape.clone(),
        bytes,
    }
}

/// Index tensors: INT32 or INT64, all the same dtype as slotMapping.
fn index(b: &Bundle, name: &'static str, dtype: Dtype) -> Result<Option<Vec<i64>>, AttnError> {
    match b.optional(&[name]) {
        None => Ok(None),
        Some(t) if t.dtype != dtype => Err(AttnError::invalid(
            name,
            format!(
                "dtype must equal slotMapping's {dtype:?}, got {:?}",
                t.dtype
            ),
        )),
        Some(t) => Ok(Some(t.i64_values(name)?)),
    }
}

fn spec_from(b: &Bundle) -> Result<ScatterSpec, AttnError> {
    let slots = b.required("slotMapping")?;
    if !matches!(slots.dtype, Dtype::I32 | Dtype::I64) {
        return Err(AttnError::invalid(
            "slotMapping",
            format!("dtype must be INT32 or INT64, got {:?}", slots.dtype),
        ));
    }
    let mut spec = ScatterSpec::new(slots.i64_values("slotMapping")?);
    spec.slot_mapping_shape = slots.shape.clone();
    spec.cache_mode = parse_cache_mode(b.attr_str("cacheMode", "Norm"))?;
    spec.scatter_mode = ScatterKind::parse(b.attr_str("scatterMode", "None"))?;
    spec.compress_lens = index(b, "compressLens", slots.dtype)?;
    spec.compress_seq_offset = index(b, "compressSeqOffset", slots.dtype)?;
    spec.seq_lens = index(b, "seqLens", slots.dtype)?;
    spec.strides = b.attr_list("strides")?;
    spec.offsets = b.attr_list("offsets")?;
    Ok(spec)
}

fn run<T: Wire>(
    spec: &ScatterSpec,
    shapes: &ScatterShapes,
    key: &HostTensor,
    value: Option<&HostTensor>,
    key_cache: &HostTensor,
    value_cache: Option<&HostTensor>,
) -> Result<Bundle, CliError> {
    let k = decode::<T>(key);
    let v = value.map(decode::<T>);
    let mut kc = decode::<T>(key_cache);
    let mut vc = value_cache.map(decode::<T>);
    scatter_checked(spec, shapes, &k, v.as_deref(), &mut kc, vc.as_deref_mut())?;
    let mut res = Bundle::of([("keyCache", encode(&kc, key_cache))]);
    if let (Some(vc), Some(like)) = (vc, value_cache) {
        res.insert("valueCache", encode(&vc, like));
    }
    Ok(res)
}

/// `scatter`.
pub fn scatter(b: &Bundle, device: Device) -> Result<Bundle, CliError> {
    let key = b.required("key")?;
    let key_cache = b.required("keyCache")?;
    let value = b.optional(&["value"]).filter(|t| !t.shape.is_empty());
    let value_cache = b.optional(&["valueCache"]).filter(|t| !t.shape.is_empty());
    let spec = spec_from(b)?;
    let shapes = ScatterShapes {
        key: key.shape.clone(),
        value: value.map(|t| t.shape.clone()),
        key_cache: key_cache.shape.clone(),
        value_cache: value_cache.map(|t| t.shape.clone()),
        dtypes: [
            acl_dtype(key.dtype, "key").ok(),
            value.and_then(|t| acl_dtype(t.dtype, "value").ok()),
            acl_dtype(key_cache.dtype, "keyCache").ok(),
            value_cache.and_then(|t| acl_dtype(t.dtype, "valueCache").ok()),
        ],
    };
    // The host scatter is the validation every device gets before dispatch: it checks the
    // contract and the values (slots in range and unique, compressed lengths) on copies of
    // the caches, so `sim` and `npu` refuse exactly what `cpu` refuses, with the same line.
    let host = match key.dtype {
        Dtype::F32 => run::<f32>(&spec, &shapes, key, value, key_cache, value_cache),
        Dtype::F16 => run::<f16>(&spec, &shapes, key, value, key_cache, value_cache),
        Dtype::BF16 => run::<bf16>(&spec, &shapes, key, value, key_cache, value_cache),
        Dtype::I8 => run::<i8>(&spec, &shapes, key, value, key_cache, value_cache),
        other => Err(AttnError::invalid("key", format!("unsupported dtype {other:?}")).into()),
    }?;
    let dims = spec.validate(&shapes)?;
    match (device, key.dtype) {
        (Device::Reference, _) => Ok(host),
        // Nothing to write; CANN's tiling refuses numTokens = 0, the host paths succeed.
        _ if dims.num_tokens == 0 => Ok(host),
        // NdArray holds no f16 / bf16 / int8 (nor keeps PA_NZ's `32 / sizeof(dtype)`): the
        // host scatter above is the answer.
        (Device::Cpu, d) if d != Dtype::F32 => Ok(host),
        // int8 caches: a Burn float tensor cannot hold them; CANN's own int8 scatter.
        (_, Dtype::I8) => int8_on_device(device, &spec, &dims, key, value, key_cache, value_cache),
        (_, dtype) => {
            let d = |t: &HostTensor, name| data(t, name, dtype);
            on_backend(
                device,
                Scatter {
                    spec,
                    dtype,
                    key: d(key, "key")?,
                    value: value.map(|t| d(t, "value")).transpose()?,
                    key_cache: d(key_cache, "keyCache")?,
                    value_cache: value_cache.map(|t| d(t, "valueCache")).transpose()?,
                },
            )
        }
    }
}

/// The validated scatter on a Burn backend (the API's `scatter_kv`, rank-free: an Nct source
/// is the strided storage).
struct Scatter {
    spec: ScatterSpec,
    dtype: Dtype,
    key: TensorData,
    value: Option<TensorData>,
    key_cache: TensorData,
    value_cache: Option<TensorData>,
}

impl OnBackend for Scatter {
    fn run<B: AttentionBackend>(self, dev: &B::Device) -> Result<Bundle, CliError> {
        let p = |t| primitive::<B>(t, dev);
        let out = B::scatter_kv(
            ScatterInputs {
                key: p(self.key),
                value: self.value.map(p),
                key_cache: p(self.key_cache),
                value_cache: self.value_cache.map(p),
            },
            &self.spec,
        )?;
        let mut res = Bundle::of([("keyCache", host_primitive::<B>(out.key_cache, self.dtype))]);
        if let Some(vc) = out.value_cache {
            res.insert("valueCache", host_primitive::<B>(vc, self.dtype));
        }
        Ok(res)
    }
}

/// int8 caches on `sim` / `npu` through the backend's call builder.
fn int8_on_device(
    device: Device,
    spec: &ScatterSpec,
    dims: &ScatterDims,
    key: &HostTensor,
    value: Option<&HostTensor>,
    key_cache: &HostTensor,
    value_cache: Option<&HostTensor>,
) -> Result<Bundle, CliError> {
    let rt = acl_runtime(device)?;
    // Nct sources travel as their storage, described as the view [T, N, D] strided by
    // strides[0] (builders::nct_source_desc).
    let source = |t: &HostTensor, name, which| -> Result<DeviceTensor, CliError> {
        if spec.scatter_mode != ScatterKind::Nct {
            return upload(&rt, t, name);
        }
        let elems = t.shape.iter().product();
        let desc = builders::nct_source_desc(dims, which, 0, elems, acl_dtype(t.dtype, name)?)?;
        Ok(rt.upload(desc, &t.bytes)?)
    };
    let cache = |t: &HostTensor, name| -> Result<DeviceTensor, CliError> {
        let desc = builders::cache_desc(spec.cache_mode, &t.shape, acl_dtype(t.dtype, name)?)?;
        Ok(rt.upload(desc, &t.bytes)?)
    };
    let kd = source(key, "key", 0)?;
    let vd = value.map(|t| source(t, "value", 1)).transpose()?;
    let kc = cache(key_cache, "keyCache")?;
    let vc = value_cache.map(|t| cache(t, "valueCache")).transpose()?;
    {
        let vh = vd.as_ref().map(DeviceTensor::handle).transpose()?;
        let vch = vc.as_ref().map(DeviceTensor::handle).transpose()?;
        builders::scatter(
            &rt,
            spec,
            &ScatterInputs {
                key: &kd.handle()?,
                key_cache: &kc.handle()?,
                value: vh.as_ref(),
                value_cache: vch.as_ref(),
            },
        )?;
    }
    let mut res = Bundle::of([("keyCache", download(&kc)?)]);
    if let Some(vc) = &vc {
        res.insert("valueCache", download(vc)?);
    }
    Ok(res)
}
