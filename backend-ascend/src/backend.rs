//! The [`Ascend`] backend type.

use burn_ascend_cann::acl;
use burn_backend::quantization::{QuantLevel, QuantMode, QuantScheme, QuantStore, QuantValue};
use burn_backend::{Backend, BackendTypes, BoolStore, DType, DTypeUsage, DTypeUsageSet};

use crate::device::AscendDevice;
use crate::fallback::Host;
use crate::qtensor::AscendQTensor;
use crate::tensor::AscendTensor;

/// Burn on Huawei Ascend NPUs (or on the host simulation of CANN's ABI).
///
/// Tensors live in device memory ([`AscendTensor`]); the ops listed as native in
/// `docs/ascend-backend.md` run aclnn kernels; every other op runs through the counted host
/// fallback ([`crate::fallback_counts`]). Float dtypes f32/f16/bf16, int i64/i32, bool.
#[derive(Clone, Copy, Default, Debug)]
pub struct Ascend;

impl BackendTypes for Ascend {
    type Device = AscendDevice;

    type FloatTensorPrimitive = AscendTensor;
    type FloatElem = f32;

    type IntTensorPrimitive = AscendTensor;
    type IntElem = i64;

    type BoolTensorPrimitive = AscendTensor;
    type BoolElem = bool;

    type QuantizedTensorPrimitive = AscendQTensor;
}

impl Backend for Ascend {
    fn name(device: &AscendDevice) -> String {
        format!("ascend<{device}>")
    }

    fn sync(device: &AscendDevice) -> Result<(), burn_backend::ExecutionError> {
        // Ops are queued on the device's stream; this is the wait for all of them.
        crate::device::try_runtime(device)
            .and_then(|rt| rt.synchronize().map_err(|e| e.to_string()))
            .map_err(|reason| burn_backend::ExecutionError::WithContext {
                reason: format!("Ascend {device}: {reason}"),
            })
    }

    fn seed(_device: &AscendDevice, seed: u64) {
        // Float random fills run on the device (`aclnnInplaceUniform`/`Normal`/`Bernoulli`,
        // keyed on this seed); the rest (int fills, f64) through the host fallback.
        crate::tensor_ops::native_elementwise::seed(seed);
        <Host as Backend>::seed(&burn_ndarray::NdArrayDevice::Cpu, seed);
    }

    fn dtype_usage(_device: &AscendDevice, dtype: DType) -> DTypeUsageSet {
        match dtype {
            DType::F64
            | DType::F32
            | DType::F16
            | DType::BF16
            | DType::I64
            | DType::I32
            | DType::I16
            | DType::I8
            | DType::U64
            | DType::U32
            | DType::U16
            | DType::U8
            | DType::Bool(BoolStore::Native) => DTypeUsage::general(),
            DType::QFloat(QuantScheme {
                level: QuantLevel::Tensor | QuantLevel::Block(_),
                mode: QuantMode::Symmetric,
                value: QuantValue::Q8F | QuantValue::Q8S,
                store: QuantStore::Native,
                ..
            }) => DTypeUsage::general(),
            _ => DTypeUsageSet::empty(),
        }
    }

    fn device_count(type_id: u16) -> usize {
        match type_id {
            0 => usize::from(cfg!(feature = "sim")),
            _ => acl::loader::cann()
                .and_then(acl::device_count)
                .map_or(0, |n| n as usize),
        }
    }
}
