//! `--device sim|npu`: the bridge from bundles to the aclnn call builders the `Ascend` backend
//! itself uses ([`burn_ascend::backend::attention::aclnn`]): the bundle's tensors are uploaded as they
//! are, the outputs downloaded. `npu` opens CANN at run time (device `$ASCEND_DEVICE_ID`, else
//! 0); `sim` runs the same calls against the host simulation of the ACL ABI (not CANN).

use safetensors::Dtype;

use super::io::HostTensor;
use super::{CliError, Device};
use burn_ascend::AttnError;
use burn_ascend_cann::acl::{self, AclError, DataType, DeviceTensor, Runtime, TensorDesc};

impl From<AclError> for CliError {
    fn from(e: AclError) -> Self {
        match e {
            AclError::Unsupported(m) => CliError::Attn(AttnError::Unsupported(m)),
            other => CliError::Device(other.to_string()),
        }
    }
}

/// Opens the runtime of an aclnn device (`None` for the host devices).
pub fn runtime(device: Device) -> Result<Option<Runtime>, CliError> {
    Ok(match device {
        Device::Reference | Device::Cpu => None,
        Device::Sim => Some(sim_runtime()?),
        Device::Npu => Some(Runtime::npu(acl::default_device_id()?)?),
    })
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

/// The opened runtime of an aclnn device.
pub fn acl_runtime(device: Device) -> Result<Runtime, CliError> {
    runtime(device)?.ok_or_else(|| CliError::Device(format!("{device:?} is not an aclnn device")))
}
