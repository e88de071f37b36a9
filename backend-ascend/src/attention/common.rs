//! What the attention ops' device paths share: the checks of a call's tensors (one device),
//! the aclnn handles over a device tensor, the conversion of an optional input on the device,
//! and the pieces of the aclnn argument builders (uploads of the spec's host metadata, runtime
//! constants such as CANN's compressed masks and empty outputs, `aclIntArray`s, `quantScale2`).
//!
//! Nothing of the builder half knows Burn; each builder queues its call and returns without
//! waiting: the uploads it owns are stream-ordered (`Runtime::upload`), so dropping them at the
//! end frees them only after the stream's next synchronisation.

use std::sync::Arc;

use half::{bf16, f16};

use burn_ascend_cann::acl::aclnn::Compare;
use burn_ascend_cann::acl::{
    AclError, DataType, DeviceTensor, IntArray, Result, Runtime, Tensor, TensorDesc,
};
use burn_ascend_contract::incre::BlockTable;
use burn_ascend_contract::prompt::PFA_COMPRESSED_MASK;
use burn_backend::{BoolStore, DType};

use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{fail, AscendTensor};
use crate::tensor_ops::native_elementwise;

pub(super) use crate::tensor::same_device;

/// Where an attention call runs on this backend, by its query's dtype and its key's and
/// value's ([`dtype_path`]).
pub(super) enum DtypePath {
    /// The counted host fallback (the CPU kernels): a query dtype other than f32 / f16 / bf16,
    /// or a key or value in another dtype than the query's.
    Host,
    /// The counted composite on the native ops: an f32 query, which CANN's prompt, incremental
    /// and fused inference attention do not take (their op definitions list FLOAT16 and
    /// BFLOAT16 queries only).
    Composite,
    /// CANN's kernel.
    Kernel,
}

/// The [`DtypePath`] of a call whose query has `dtype` and whose key and value tensors are
/// `kv`; a fallback is counted under `host`, a composite under `composite`, before the caller
/// runs it.
pub(super) fn dtype_path<'a>(
    dtype: DType,
    kv: impl IntoIterator<Item = &'a AscendTensor>,
    host: &'static str,
    composite: &'static str,
) -> DtypePath {
    if !is_acl_float(dtype) || kv.into_iter().any(|t| t.dtype != dtype) {
        count(host);
        DtypePath::Host
    } else if dtype == DType::F32 {
        count(composite);
        DtypePath::Composite
    } else {
        DtypePath::Kernel
    }
}

/// An aclnn handle over `t`'s storage described by `desc`.
pub(super) fn handle<'a>(t: &'a AscendTensor, desc: &TensorDesc, op: &str) -> Tensor<'a> {
    Tensor::new(t.storage.buffer(), desc).unwrap_or_else(|e| fail(op, e))
}

/// [`handle`] described as the view `t` is.
pub(super) fn view_handle<'a>(t: &'a AscendTensor, op: &str) -> Tensor<'a> {
    handle(t, &t.desc(op), op)
}

/// An optional input through a device conversion: `Some(None)` when absent, `None` when the
/// conversion has no device kernel (the caller falls back).
pub(super) fn on_device(
    t: &Option<AscendTensor>,
    convert: impl Fn(&AscendTensor) -> Option<AscendTensor>,
) -> Option<Option<AscendTensor>> {
    match t {
        None => Some(None),
        Some(t) => convert(t).map(Some),
    }
}

/// A mask given as a float tensor holding 0/1 as the BOOL tensor the attention ops take
/// (non-zero = masked), on the device (`aclnnNeScalar`); `None` without a device kernel.
pub(super) fn mask_to_bool(mask: &AscendTensor) -> Option<AscendTensor> {
    native_elementwise::compare_scalar(
        Compare::Ne,
        mask,
        burn_backend::Scalar::Float(0.0),
        BoolStore::Native,
    )
}

pub(super) fn upload(
    rt: &Runtime,
    bytes: &[u8],
    dims: &[usize],
    dtype: DataType,
) -> Result<DeviceTensor> {
    rt.upload(TensorDesc::contiguous(dims, dtype)?, bytes)
}

/// f32 host values as a tensor of the float `dtype` (the op's own: pse).
pub(super) fn upload_float(
    rt: &Runtime,
    v: &[f32],
    dims: &[usize],
    dtype: DataType,
) -> Result<DeviceTensor> {
    let bytes: Vec<u8> = match dtype {
        DataType::Float => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DataType::Float16 => v
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect(),
        DataType::Bf16 => v
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect(),
        other => {
            return Err(AclError::Invalid {
                param: "dtype".into(),
                rule: format!("float input in {other:?}: must be FLOAT, FLOAT16 or BFLOAT16"),
            })
        }
    };
    upload(rt, &bytes, dims, dtype)
}

/// A `blockTable` on the device: INT32, as IFA and FIA take it.
pub(super) fn upload_block_table(rt: &Runtime, t: &BlockTable) -> Result<DeviceTensor> {
    let bytes: Vec<u8> = t.data.iter().flat_map(|x| x.to_le_bytes()).collect();
    upload(rt, &bytes, &t.shape, DataType::Int32)
}

pub(super) fn upload_i64(rt: &Runtime, v: &[i64], dims: &[usize]) -> Result<DeviceTensor> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    upload(rt, &bytes, dims, DataType::Int64)
}

/// The handle of an optional device tensor the builder owns.
pub(super) fn handle_of<T: AsRef<DeviceTensor>>(t: &Option<T>) -> Result<Option<Tensor<'_>>> {
    t.as_ref().map(|t| t.as_ref().handle()).transpose()
}

/// A device input of a call that is a runtime constant shared by every call (CANN's compressed
/// masks, empty outputs); the caller's tensors come as handles.
pub(super) type Held = Arc<DeviceTensor>;

/// A constant `UINT8` mask cached on the runtime under `key` (CANN's compressed masks are
/// 2048×2048 and the same for every call).
pub(super) fn constant_mask(
    rt: &Runtime,
    key: &str,
    make: impl FnOnce() -> (Vec<u8>, Vec<usize>),
) -> Result<Arc<DeviceTensor>> {
    rt.constant(key, || {
        let (bytes, dims) = make();
        Ok((TensorDesc::contiguous(&dims, DataType::Uint8)?, bytes))
    })
}

pub(super) fn ints(rt: &Runtime, v: Option<&[i64]>) -> Result<Option<IntArray>> {
    v.map(|v| IntArray::new(rt.api(), v)).transpose()
}

/// An empty tensor of `dtype` for an unused output: a runtime constant shared by every call
/// (nothing is written to zero elements), so that a graph capture, which may not allocate,
/// can record the call.
pub(super) fn empty(rt: &Runtime, dtype: DataType) -> Result<Held> {
    rt.constant(&format!("empty {dtype:?}"), || {
        Ok((TensorDesc::contiguous(&[0], dtype)?, Vec::new()))
    })
}

/// `quantScale2` / `quantOffset2` (int8 output) on the device, FLOAT `[len]`.
pub(super) fn post_quant(
    rt: &Runtime,
    q: Option<&burn_ascend_contract::prompt::PostQuantSpec>,
) -> Result<(Option<DeviceTensor>, Option<DeviceTensor>)> {
    let Some(q) = q else {
        return Ok((None, None));
    };
    let scale = upload_float(rt, &q.scale, &[q.scale.len()], DataType::Float)?;
    let offset = q
        .offset
        .as_ref()
        .map(|o| upload_float(rt, o, &[o.len()], DataType::Float))
        .transpose()?;
    Ok((Some(scale), offset))
}

/// CANN's compressed 2048×2048 `attenMask` of PFA / FIA sparse modes 2–4 (1 strictly above the
/// diagonal): a runtime constant, uploaded once per runtime.
pub(super) fn compressed_prompt_mask(rt: &Runtime) -> Result<Held> {
    constant_mask(rt, "prompt compressed mask", || {
        let [rows, cols] = PFA_COMPRESSED_MASK;
        let m: Vec<u8> = (0..rows * cols)
            .map(|x| u8::from(x % cols > x / cols))
            .collect();
        (m, PFA_COMPRESSED_MASK.to_vec())
    })
}
