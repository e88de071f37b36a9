//! Devices of `burn-ascend run`: the one road ([`on_backend`]: bundle tensors → Burn tensors
//! on `NdArray` or `Ascend` → the public ops API → bundle) and, for the int8 outputs and caches
//! Burn's float tensors cannot carry, the bridge to the aclnn call builders the `Ascend`
//! backend itself uses ([`burn_ascend::backend::attention::builders`]; also the probes'). `npu`
//! opens CANN at run time (device `$ASCEND_DEVICE_ID`, else 0); `sim` runs the same calls
//! against the host simulation of the ACL ABI (not CANN).

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, Tensor, TensorData, TensorPrimitive};
use safetensors::Dtype;

use crate::io::{Bundle, HostTensor};
use crate::CliError;
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::{AttentionBackend, AttnError};
use burn_ascend_cann::acl::{self, AclError, DataType, DeviceTensor, Runtime, TensorDesc};

/// Where an op runs (`--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    /// The plain CPU reference (f64 accumulation).
    Reference,
    /// The public ops API on Burn's `NdArray` (its fast CPU kernels).
    Cpu,
    /// The public ops API on the `Ascend` backend against its host simulation of the ACL ABI
    /// (not CANN): the backend's code path, checked on machines without an NPU.
    Sim,
    /// The public ops API on the `Ascend` backend on a real NPU through CANN's aclnn, loaded
    /// at run time (device `$ASCEND_DEVICE_ID`, else 0).
    Npu,
}

impl Device {
    /// Errors for devices that cannot run ops here: `npu` without CANN's libraries (one line
    /// naming every path tried).
    pub fn ensure_available(self) -> Result<(), CliError> {
        probe(self)
    }

    /// Whether ops run through the aclnn dispatch layer (`sim`, `npu`).
    pub fn is_acl(self) -> bool {
        matches!(self, Self::Sim | Self::Npu)
    }
}

impl From<AclError> for CliError {
    fn from(e: AclError) -> Self {
        match e {
            AclError::Unsupported(m) => CliError::Attn(AttnError::Unsupported(m)),
            other => CliError::Device(other.to_string()),
        }
    }
}

/// A runtime over the host simulation (crate `burn-ascend-acl-sim`).
#[cfg(feature = "sim")]
fn sim_runtime() -> Result<Runtime, CliError> {
    Ok(burn_ascend_acl_sim::runtime()?)
}

/// Without the `sim` feature: the error saying so.
#[cfg(not(feature = "sim"))]
fn sim_runtime() -> Result<Runtime, CliError> {
    Err(CliError::Device(
        "--device sim: the host simulation of the ACL ABI is not compiled in (build burn-ascend with its `sim` feature)".into(),
    ))
}

/// Checks an aclnn device can be used, without opening a runtime: for `npu`, that CANN's
/// libraries load (else the one-line error naming every path tried).
pub fn probe(device: Device) -> Result<(), CliError> {
    if device == Device::Npu {
        acl::loader::cann()?;
    }
    Ok(())
}

/// The `aclDataType` of a safetensors dtype.
pub fn acl_dtype(d: Dtype, name: &'static str) -> Result<DataType, AttnError> {
    Ok(match d {
        Dtype::F32 => DataType::Float,
        Dtype::F16 => DataType::Float16,
        Dtype::BF16 => DataType::Bf16,
        Dtype::F64 => DataType::Double,
        Dtype::I8 => DataType::Int8,
        Dtype::U8 => DataType::Uint8,
        Dtype::BOOL => DataType::Bool,
        Dtype::I16 => DataType::Int16,
        Dtype::U16 => DataType::Uint16,
        Dtype::I32 => DataType::Int32,
        Dtype::U32 => DataType::Uint32,
        Dtype::I64 => DataType::Int64,
        Dtype::U64 => DataType::Uint64,
        other => {
            return Err(AttnError::invalid(
                name,
                format!("dtype {other:?} has no aclDataType"),
            ))
        }
    })
}

fn st_dtype(d: DataType) -> Dtype {
    match d {
        DataType::Float => Dtype::F32,
        DataType::Float16 => Dtype::F16,
        DataType::Bf16 => Dtype::BF16,
        DataType::Double => Dtype::F64,
        DataType::Int8 => Dtype::I8,
        DataType::Uint8 => Dtype::U8,
        DataType::Bool => Dtype::BOOL,
        DataType::Int16 => Dtype::I16,
        DataType::Uint16 => Dtype::U16,
        DataType::Int32 => Dtype::I32,
        DataType::Uint32 => Dtype::U32,
        DataType::Int64 => Dtype::I64,
        DataType::Uint64 => Dtype::U64,
    }
}

/// A bundle tensor on the device, bytes as they are.
pub fn upload(rt: &Runtime, t: &HostTensor, name: &'static str) -> Result<DeviceTensor, CliError> {
    let desc = TensorDesc::contiguous(&t.shape, acl_dtype(t.dtype, name)?)?;
    Ok(rt.upload(desc, &t.bytes)?)
}

/// An optional bundle tensor on the device.
pub fn upload_opt(
    rt: &Runtime,
    t: Option<&HostTensor>,
    name: &'static str,
) -> Result<Option<DeviceTensor>, CliError> {
    t.map(|t| upload(rt, t, name)).transpose()
}

/// A zero-filled contiguous output on the device.
pub fn output(rt: &Runtime, dims: &[usize], dtype: DataType) -> Result<DeviceTensor, CliError> {
    Ok(rt.zeros(TensorDesc::contiguous(dims, dtype)?)?)
}

/// A device tensor as a bundle tensor.
pub fn download(t: &DeviceTensor) -> Result<HostTensor, CliError> {
    Ok(HostTensor {
        dtype: st_dtype(t.desc.dtype),
        shape: t.desc.dims.iter().map(|&d| d as usize).collect(),
        bytes: t.download()?,
    })
}

/// The opened runtime of an aclnn device (`sim`, `npu`), for the calls the Burn API cannot
/// carry (int8 outputs and caches) and the probes.
pub fn acl_runtime(device: Device) -> Result<Runtime, CliError> {
    match device {
        Device::Sim => sim_runtime(),
        Device::Npu => Ok(Runtime::npu(acl::default_device_id()?)?),
        other => Err(CliError::Device(format!(
            "{other:?} is not an aclnn device"
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// The one road: `cpu`, `sim` and `npu` build Burn tensors on `NdArray` or `Ascend` and call the
// public ops API (`burn_ascend::varlen_score`, …), so the CLI and `selftest` run exactly what
// users train and serve on. Only `--device reference` calls the f64 reference directly.

/// An op body generic over the backend: [`on_backend`] runs it on `NdArray` (`cpu`) or on
/// `Ascend` (`sim`, `npu`). (A trait rather than a closure: the body is generic over `B`.)
pub trait OnBackend {
    /// Runs the op on `device` of backend `B`.
    fn run<B: AttentionBackend>(self, device: &B::Device) -> Result<Bundle, CliError>;
}

/// The `Ascend` device of `sim` / `npu` (`npu`: `$ASCEND_DEVICE_ID`, else 0), opened: CANN's
/// libraries load (else one line naming every path tried) and the device opens.
pub fn ascend_device(device: Device) -> Result<AscendDevice, CliError> {
    let dev = match device {
        Device::Sim => AscendDevice::sim(),
        Device::Npu => {
            probe(device)?;
            AscendDevice::npu(acl::default_device_id()?.max(0) as u32)
        }
        other => {
            return Err(CliError::Device(format!(
                "{other:?} is not an Ascend device"
            )))
        }
    };
    burn_ascend::backend::is_available(&dev).map_err(CliError::Device)?;
    Ok(dev)
}

/// Runs `op` on the backend of `device`: `NdArray` for `cpu`, `Ascend` for `sim` / `npu`.
/// Callers validate the bundle first, so a refused input never opens a device.
pub fn on_backend<O: OnBackend>(device: Device, op: O) -> Result<Bundle, CliError> {
    match device {
        Device::Cpu => op.run::<NdArray>(&Default::default()),
        Device::Sim | Device::Npu => op.run::<Ascend>(&ascend_device(device)?),
        Device::Reference => Err(CliError::Device(
            "--device reference runs the f64 reference, not a Burn backend".into(),
        )),
    }
}

/// The Burn dtype of a float wire dtype (F32, F16, BF16).
pub(crate) fn burn_dtype(d: Dtype) -> DType {
    match d {
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        _ => DType::F32,
    }
}

/// A bundle tensor's values as `dtype` (a float wire dtype): floats and int8 widened to f32
/// exactly, then rounded once to `dtype` (exact for a tensor already in `dtype`, and for int8
/// KV, which travels to the API as floats holding the int8 values). Decoded before any device
/// opens: a tensor shorter than its shape is refused the same way on every device.
pub fn data(t: &HostTensor, name: &'static str, dtype: Dtype) -> Result<TensorData, AttnError> {
    let v = t.f32_or_i8_values(name)?;
    Ok(TensorData::new(v, Shape::from(t.shape.clone())).convert_dtype(burn_dtype(dtype)))
}

/// A mask's bytes (non-zero = masked) as the Burn API takes a mask: a float tensor of 0/1,
/// exact in every float `dtype`.
pub fn mask_data(bytes: &[u8], shape: &[usize], dtype: Dtype) -> TensorData {
    let v: Vec<f32> = bytes.iter().map(|&x| f32::from(u8::from(x != 0))).collect();
    TensorData::new(v, Shape::from(shape.to_vec())).convert_dtype(burn_dtype(dtype))
}

/// [`data`] of an optional tensor.
pub fn data_opt(
    t: Option<&HostTensor>,
    name: &'static str,
    dtype: Dtype,
) -> Result<Option<TensorData>, AttnError> {
    t.map(|t| data(t, name, dtype)).transpose()
}

/// A Burn tensor on `device` from decoded values, in their dtype where the backend holds it
/// (`Ascend`: f16, bf16, f32) and in f32 otherwise (`NdArray` has no half types: its kernels
/// compute in f32 and [`host`] rounds the result back to the wire dtype).
pub fn tensor<B: Backend, const D: usize>(data: TensorData, device: &B::Device) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(primitive::<B>(data, device)))
}

/// [`tensor`] as a primitive, for the inputs the API takes as primitives (KV forms, caches).
pub fn primitive<B: Backend>(data: TensorData, device: &B::Device) -> FloatTensor<B> {
    let data = if B::supports_dtype(device, data.dtype) {
        data
    } else {
        data.convert_dtype(DType::F32)
    };
    B::float_from_data(data, device)
}

/// [`host`] of a primitive.
pub fn host_primitive<B: Backend>(t: FloatTensor<B>, dtype: Dtype) -> HostTensor {
    let data = burn::tensor::try_read_sync(B::float_into_data(t))
        .expect("the Burn backends of the CLI read synchronously")
        .unwrap_or_else(|e| panic!("reading a result back to the host failed: {e:?}"));
    wire(data, dtype)
}

fn wire(data: TensorData, dtype: Dtype) -> HostTensor {
    let data = data.convert_dtype(burn_dtype(dtype));
    HostTensor {
        dtype,
        shape: data.shape.to_vec(),
        bytes: data.into_bytes().to_vec(),
    }
}

/// A Burn tensor read back as a bundle tensor of the float wire dtype `dtype` (rounded once
/// when the backend computed in a wider type).
pub fn host<B: Backend, const D: usize>(t: Tensor<B, D>, dtype: Dtype) -> HostTensor {
    wire(t.into_data(), dtype)
}
