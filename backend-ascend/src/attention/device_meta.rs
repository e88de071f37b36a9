//! The paged-cache calls of a **captured decode step**, whose per-token metadata live in
//! device tensors instead of host vectors: the cache scatter with its slot mapping on the
//! device, and fused inference attention with its block table and mask on the device. A
//! graph records the calls once; before each replay the caller rewrites those tensors in
//! place ([`crate::graph::write_in_place`]) — the token's slots, the grown block table, the
//! mask that hides the cache positions not yet written — as vllm-ascend updates its ACL
//! graphs' attention metadata between replays. `actualSeqLengthsKv`, a host `aclIntArray`
//! baked into the recorded call, changes by re-issuing the call ([`PagedDecodeCall::launch`])
//! inside a task-group update (`crate::graph::update_task_group`) before the replay.
//!
//! Both write or read the caches **where they lie**: the scatter updates the cache's buffer
//! whether or not other handles share it (a decode graph owns its caches' contents), unlike
//! the functional `scatter_pa_kv_cache`, which copies a shared cache first.

use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::fia::{FiaInputs, FiaKv, FiaOutputs, FiaSpec};
use burn_ascend_ops::scatter::{ScatterInputs, ScatterShapes, ScatterSpec};
use burn_backend::{DType, Shape};

use super::common::{handle, same_device, view_handle};
use super::fia::{fused_infer_attention_with, FiaDeviceMeta};
use super::scatter::scatter_with_slots;
use crate::device::runtime;
use crate::element::is_acl_float;
use crate::release::cann_release;
use crate::tensor::{device_error, AscendTensor};
use crate::tensor_ops::native_elementwise;

const SCATTER: &str = "scatter_kv_slots";
const FIA: &str = "fia_decode_paged";

fn unsupported(op: &str, why: String) -> AttnError {
    AttnError::Unsupported(format!("{op}: {why}"))
}

fn contiguous_whole(op: &str, name: &str, t: &AscendTensor) -> Result<()> {
    if t.is_contiguous() {
        Ok(())
    } else {
        Err(unsupported(op, format!("{name} must be contiguous")))
    }
}

/// Writes `key` / `value` `[T, Nkv, D]` into the caches `[blocks, blockSize, Nkv, D]` at the
/// slots `slots` (INT64 `[T]`, on the device), in place (`aclnnScatterPaKvCache`, Norm mode).
pub fn scatter_kv_slots(
    key: &AscendTensor,
    value: &AscendTensor,
    key_cache: &AscendTensor,
    value_cache: &AscendTensor,
    slots: &AscendTensor,
) -> Result<()> {
    let device = same_device(SCATTER, &[key, value, key_cache, value_cache, slots])?;
    let dtype = key.dtype;
    if !is_acl_float(dtype)
        || [value, key_cache, value_cache]
            .iter()
            .any(|t| t.dtype != dtype)
    {
        return Err(unsupported(
            SCATTER,
            format!("key, value and caches must share one float dtype, got {dtype:?}"),
        ));
    }
    if slots.dtype != DType::I64 || slots.shape.num_dims() != 1 {
        return Err(AttnError::invalid(
            "slotMapping",
            format!("must be INT64 [T], got {:?} {:?}", slots.dtype, slots.shape),
        ));
    }
    for (name, t) in [("key_cache", key_cache), ("value_cache", value_cache)] {
        contiguous_whole(SCATTER, name, t)?;
    }
    let t = key.shape[0];
    // The spec's host slots (0..T) only give the shape; the device's are used.
    let spec = ScatterSpec::new((0..t as i64).collect());
    spec.validate(&ScatterShapes {
        key: key.shape.to_vec(),
        value: Some(value.shape.to_vec()),
        key_cache: key_cache.shape.to_vec(),
        value_cache: Some(value_cache.shape.to_vec()),
        dtypes: [Some(key.acl_dtype(SCATTER)); 4],
    })?;
    if slots.shape[0] != t {
        return Err(AttnError::invalid(
            "slotMapping",
            format!("must hold one slot per token ({t}), got {}", slots.shape[0]),
        ));
    }
    let rt = runtime(&device);
    let d = |x: &AscendTensor| x.desc(SCATTER);
    let (kd, vd, kcd, vcd, sd) = (d(key), d(value), d(key_cache), d(value_cache), d(slots));
    scatter_with_slots(
        &rt,
        &spec,
        &ScatterInputs {
            key: &handle(key, &kd, SCATTER),
            key_cache: &handle(key_cache, &kcd, SCATTER),
            value: Some(&handle(value, &vd, SCATTER)),
            value_cache: Some(&handle(value_cache, &vcd, SCATTER)),
        },
        Some(&handle(slots, &sd, SCATTER)),
    )
    .map_err(|e| device_error(SCATTER, e))
}

/// One decode attention call of a captured step (`S = 1`, BSND query `[B, 1, N, D]`) over
/// the paged caches `[blocks, blockSize, Nkv·D]`, its device operands bound once: the block
/// table (INT32 `[B, max blocks]`), the optional dense mask (UINT8 `[B, max blocks ·
/// blockSize]`, 1 = hidden: a sliding window), the sinks cast to the dtype FIA takes and the
/// output. [`Self::launch`] issues FIA into that output with a spec's host attributes —
/// inside a capture, and again inside a task-group update with new `actualSeqLengthsKv`
/// (vllm-ascend's `update_attn_params` re-issues `npu_fused_infer_attention_score.out` into
/// the captured output likewise, `vllm_ascend/compilation/acl_graph.py`): it allocates and
/// uploads nothing.
#[derive(Debug, Clone)]
pub struct PagedDecodeCall {
    query: AscendTensor,
    key_cache: AscendTensor,
    value_cache: AscendTensor,
    sink: Option<AscendTensor>,
    block_table: AscendTensor,
    mask: Option<AscendTensor>,
    out: AscendTensor,
}

impl PagedDecodeCall {
    /// Binds the operands of a decode attention call, checking them against `spec` (heads,
    /// scale, block size, sparse mode 0, a host placeholder of the block table's shape, the
    /// mask's kind [`burn_ascend_ops::fia::FiaMask::Dense`] with a mask, the lengths of the
    /// first launch); casts the sinks (a launch) and allocates the output.
    pub fn new(
        query: &AscendTensor,
        key_cache: &AscendTensor,
        value_cache: &AscendTensor,
        sinks: Option<&AscendTensor>,
        block_table: &AscendTensor,
        mask: Option<&AscendTensor>,
        spec: &FiaSpec,
    ) -> Result<Self> {
        let mut tensors = vec![query, key_cache, value_cache, block_table];
        tensors.extend(mask);
        let device = same_device(FIA, &tensors)?;
        let dtype = query.dtype;
        if !is_acl_float(dtype) || key_cache.dtype != dtype || value_cache.dtype != dtype {
            return Err(unsupported(
                FIA,
                format!("query and caches must share one float dtype, got {dtype:?}"),
            ));
        }
        if block_table.dtype != DType::I32 || mask.is_some_and(|m| m.dtype != DType::U8) {
            return Err(AttnError::invalid(
                "blockTable",
                format!(
                    "the block table must be INT32 and the mask UINT8, got {:?} and {:?}",
                    block_table.dtype,
                    mask.map(|m| m.dtype)
                ),
            ));
        }
        let dims = spec.validate(&burn_ascend_ops::fia::shapes::<crate::Ascend>(
            &Self::inputs(query, key_cache, value_cache, sinks, mask),
        ))?;
        let rt = runtime(&device);
        let sink = match sinks {
            None => None,
            Some(s) => {
                let want =
                    spec.learnable_sink_dtype(&dims, query.acl_dtype(FIA), cann_release(&rt)?)?;
                let to = match want {
                    burn_ascend_cann::acl::DataType::Bf16 => DType::BF16,
                    burn_ascend_cann::acl::DataType::Float16 => DType::F16,
                    _ => DType::F32,
                };
                Some(native_elementwise::cast(s, to).ok_or_else(|| {
                    unsupported(
                        FIA,
                        format!("the sink cannot be cast to {to:?} on the device"),
                    )
                })?)
            }
        };
        let out = AscendTensor::alloc(Shape::from(dims.out_shape()), dtype, &device);
        Ok(Self {
            query: query.clone(),
            key_cache: key_cache.clone(),
            value_cache: value_cache.clone(),
            sink,
            block_table: block_table.clone(),
            mask: mask.cloned(),
            out,
        })
    }

    /// The call's carrier: the mask is the UINT8 device mask as it is (the op takes UINT8;
    /// its shape is what validation reads).
    fn inputs(
        query: &AscendTensor,
        key_cache: &AscendTensor,
        value_cache: &AscendTensor,
        sinks: Option<&AscendTensor>,
        mask: Option<&AscendTensor>,
    ) -> FiaInputs<AscendTensor> {
        FiaInputs {
            atten_mask: mask.cloned(),
            ..FiaInputs::new(
                query.clone(),
                FiaKv::Paged {
                    key_cache: key_cache.clone(),
                    value_cache: value_cache.clone(),
                },
                sinks.cloned(),
            )
        }
    }

    /// The output `[B, 1, N, D]` every launch writes.
    pub fn output(&self) -> &AscendTensor {
        &self.out
    }

    /// Issues FIA on the bound operands with `spec`'s host attributes (checked against them
    /// first: its `actualSeqLengthsKv` may not exceed the block table's width), writing the
    /// bound output. Queues one launch and nothing else.
    pub fn launch(&self, spec: &FiaSpec) -> Result<()> {
        let inputs = Self::inputs(
            &self.query,
            &self.key_cache,
            &self.value_cache,
            self.sink.as_ref(),
            self.mask.as_ref(),
        );
        spec.validate(&burn_ascend_ops::fia::shapes::<crate::Ascend>(&inputs))?;
        let rt = runtime(&self.query.device());
        fn h(t: &AscendTensor) -> burn_ascend_cann::acl::Tensor<'_> {
            view_handle(t, FIA)
        }
        let bh = h(&self.block_table);
        let out = h(&self.out);
        fused_infer_attention_with(
            &rt,
            spec,
            inputs.as_ref().map(h),
            FiaOutputs {
                attention_out: &out,
                softmax_lse: None,
            },
            FiaDeviceMeta {
                block_table: Some(&bh),
            },
        )
        .map_err(|e| device_error(FIA, e))
    }
}

/// Decode attention over the paged caches with the block table and optional mask on the
/// device ([`PagedDecodeCall`], launched once): the output.
pub fn fia_decode_paged(
    query: &AscendTensor,
    key_cache: &AscendTensor,
    value_cache: &AscendTensor,
    sinks: Option<&AscendTensor>,
    block_table: &AscendTensor,
    mask: Option<&AscendTensor>,
    spec: &FiaSpec,
) -> Result<AscendTensor> {
    let call = PagedDecodeCall::new(
        query,
        key_cache,
        value_cache,
        sinks,
        block_table,
        mask,
        spec,
    )?;
    call.launch(spec)?;
    Ok(call.out)
}
