//! `--device sim|npu`: the bridge from bundles to the Ascend dispatch layer
//! (`burn_ascend_kernels::acl`). `npu` opens CANN at run time (device `$ASCEND_DEVICE_ID`, else
//! 0); `sim` runs the same dispatch code against the host simulation of the ACL ABI (not CANN).

use safetensors::Dtype;

use super::io::HostTensor;
use super::{CliError, Device};
use crate::kernels::acl::host::{HostArg, HostOut};
use crate::kernels::acl::{self, AclError, DataType, Runtime};
use crate::AttnError;

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

/// A bundle tensor as a dispatch input (bytes as they are).
pub fn arg<'a>(t: &'a HostTensor, name: &'static str) -> Result<HostArg<'a>, AttnError> {
    Ok(HostArg {
        dtype: acl_dtype(t.dtype, name)?,
        dims: &t.shape,
        bytes: &t.bytes,
    })
}

/// An optional bundle tensor as a dispatch input.
pub fn opt_arg<'a>(
    t: Option<&'a HostTensor>,
    name: &'static str,
) -> Result<Option<HostArg<'a>>, AttnError> {
    t.map(|t| arg(t, name)).transpose()
}

/// A dispatch output as a bundle tensor.
pub fn to_host(o: HostOut) -> HostTensor {
    HostTensor {
        dtype: st_dtype(o.dtype),
        shape: o.dims,
        bytes: o.bytes,
    }
}
