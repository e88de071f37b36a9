//! Fused inference attention on the device: `aclnnFusedInferAttentionScoreV4` (the base
//! `aclnnFusedInferAttentionScore` when V4 is absent and the call has no sink and no separate
//! K/V antiquant) over the query and a one-tensor KV list (contiguous, or the paged caches with
//! their block table). The spec's host-side inputs (mask, pse, block table, padding sizes,
//! antiquant scales, sink) are uploaded for the call: the per-channel scales in the query's
//! dtype, the per-token scales as FLOAT, and the sink in the dtype the path the call takes
//! reads on the installed CANN release ([`FiaSpec::learnable_sink_dtype`]: the dtype follows
//! the path and the release, BFLOAT16 on FIA v3 whatever the query, the query's on 9.x's TND
//! split-fuse path) — the model's sink,
//! in whatever dtype its parameters have, arrives as exact f32 values and is converted once,
//! at its upload. int8 KV is cast to INT8 on the device as in `incre.rs`. An f32 call runs the
//! composite on the native ops (counted as [`FIA_COMPOSITE`]): CANN's FIA takes no FLOAT query.

use burn_ascend_cann::acl::ffi::DataType;
use burn_ascend_cann::acl::{aclnn, Result as AclResult, Runtime, Tensor, TensorList};
use burn_ascend_contract::fia::{FiaAntiquantMode, FiaMask, FiaSpec};
use burn_ascend_ops::error::Result;
use burn_ascend_ops::fia::ndarray::cpu_fia_fwd;
use burn_ascend_ops::fia::{composite, FiaBackend, FiaInputs, FiaOutputs};
use burn_backend::{DType, Shape};

use super::common::{
    compressed_prompt_mask, dtype_path, handle_of, ints, mask_to_bool, on_device, same_device,
    upload_block_table, upload_i64, view_handle, DtypePath,
};
use crate::device::{runtime, AscendDevice};
use crate::fallback::count;
use crate::release::cann_release;
use crate::tensor::{device_error, AscendTensor};
use crate::tensor_ops::native_elementwise;
use crate::Ascend;

/// f32 fused inference attention through the composite (see [`super::PROMPT_COMPOSITE`]).
pub const FIA_COMPOSITE: &str = "fia_composite";

/// Label of the call in error messages.
const OP: &str = "fia_fwd";

/// Index metadata of a fused inference attention call already on the device, used instead of
/// the spec's host copy (which then only gives the shape): a captured graph's block table,
/// rewritten in place between replays.
#[derive(Default, Clone, Copy)]
pub struct FiaDeviceMeta<'a> {
    /// `blockTable` (INT32 `[B, max blocks]`).
    pub block_table: Option<&'a Tensor<'a>>,
}

/// `aclnnFusedInferAttentionScoreV4` (or the base op) for a validated spec: the call's tensors
/// as aclnn handles (the one-tensor key / value lists are made here) in the dtypes the op
/// takes: the dense mask BOOL/INT8/UINT8, pse and per-channel scales in the query's float
/// dtype, per-token scales FLOAT; `x.learnable_sink` is `[N]` in the dtype the call's path
/// reads ([`FiaSpec::learnable_sink_dtype`] for [`cann_release`]), or a replayed call's own;
/// `out.softmax_lse` (FLOAT) is given when `softmaxLseFlag` is. Only the spec's host
/// metadata is uploaded here (block table, padding sizes); the compressed mask of modes 2-4
/// is a runtime constant.
pub fn fused_infer_attention(
    rt: &Runtime,
    spec: &FiaSpec,
    x: FiaInputs<Tensor<'_>>,
    out: FiaOutputs<&Tensor<'_>>,
) -> AclResult<()> {
    fused_infer_attention_with(rt, spec, x, out, FiaDeviceMeta::default())
}

/// [`fused_infer_attention`] with the block table on the device (`dev`).
pub fn fused_infer_attention_with(
    rt: &Runtime,
    spec: &FiaSpec,
    x: FiaInputs<Tensor<'_>>,
    out: FiaOutputs<&Tensor<'_>>,
    dev: FiaDeviceMeta<'_>,
) -> AclResult<()> {
    let (key, value) = x.kv.into_pair();
    let (key, value) = (
        TensorList::new(rt.api(), vec![key])?,
        TensorList::new(rt.api(), vec![value])?,
    );
    let compressed = match spec.atten_mask {
        FiaMask::Compressed => Some(compressed_prompt_mask(rt)?),
        FiaMask::None | FiaMask::Dense => None,
    };
    let table = spec
        .block_table
        .as_ref()
        .filter(|_| dev.block_table.is_none())
        .map(|t| upload_block_table(rt, t))
        .transpose()?;
    let qpad = spec
        .query_padding_size
        .map(|p| upload_i64(rt, &[p], &[1]))
        .transpose()?;
    let kvpad = spec
        .kv_padding_size
        .map(|p| upload_i64(rt, &[p], &[1]))
        .transpose()?;
    let compressed = handle_of(&compressed)?;
    let mask = x.atten_mask.as_ref().or(compressed.as_ref());
    let table = handle_of(&table)?;
    let table = dev.block_table.or(table.as_ref());
    let (qpad, kvpad) = (handle_of(&qpad)?, handle_of(&kvpad)?);
    let asl = ints(rt, spec.actual_seq_lengths.as_deref())?;
    let asl_kv = ints(rt, spec.actual_seq_lengths_kv.as_deref())?;
    aclnn::fused_infer_attention_score_v4(
        rt,
        &aclnn::FiaArgs {
            query: &x.query,
            key: &key,
            value: &value,
            pse_shift: x.pse_shift.as_ref(),
            atten_mask: mask,
            actual_seq_lengths: asl.as_ref(),
            actual_seq_lengths_kv: asl_kv.as_ref(),
            antiquant_scale: x.antiquant_scale.as_ref(),
            antiquant_offset: x.antiquant_offset.as_ref(),
            block_table: table,
            query_padding_size: qpad.as_ref(),
            kv_padding_size: kvpad.as_ref(),
            key_antiquant_scale: x.key_antiquant_scale.as_ref(),
            key_antiquant_offset: x.key_antiquant_offset.as_ref(),
            value_antiquant_scale: x.value_antiquant_scale.as_ref(),
            value_antiquant_offset: x.value_antiquant_offset.as_ref(),
            learnable_sink: x.learnable_sink.as_ref(),
            num_heads: spec.num_heads as i64,
            scale_value: spec.scale_value,
            pre_tokens: spec.pre_tokens,
            next_tokens: spec.next_tokens,
            input_layout: spec.input_layout.as_attr(),
            num_key_value_heads: spec.num_key_value_heads as i64,
            sparse_mode: spec.sparse_mode,
            inner_precise: spec.inner_precise,
            block_size: spec.block_size as i64,
            antiquant_mode: spec.antiquant_mode,
            softmax_lse_flag: spec.softmax_lse_flag,
            key_antiquant_mode: spec.key_antiquant_mode,
            value_antiquant_mode: spec.value_antiquant_mode,
            attention_out: out.attention_out,
            softmax_lse: out.softmax_lse,
        },
    )
}

/// The Burn float dtype of a float `aclDataType`.
fn float_dtype(d: DataType) -> Option<DType> {
    match d {
        DataType::Float => Some(DType::F32),
        DataType::Float16 => Some(DType::F16),
        DataType::Bf16 => Some(DType::BF16),
        _ => None,
    }
}

impl FiaBackend for Ascend {
    fn fia_fwd(
        inputs: FiaInputs<AscendTensor>,
        spec: &FiaSpec,
    ) -> Result<FiaOutputs<AscendTensor>> {
        let dims = spec.validate(&burn_ascend_ops::fia::shapes::<Ascend>(&inputs))?;
        let (q, (k, v)) = (&inputs.query, inputs.kv.as_ref().into_pair());
        let device = same_device(OP, &inputs.all())?;
        let dtype = q.dtype;
        match dtype_path(dtype, [k, v], OP, FIA_COMPOSITE) {
            DtypePath::Host => return cpu_fia_fwd::<Ascend>(inputs, spec),
            // CANN's FIA takes no FLOAT query (`fused_infer_attention_score_def.cpp`): the
            // composite on the native ops gives the f32 answer (the sink as the model keeps it).
            DtypePath::Composite => return composite::fia_fwd::<Ascend>(inputs, spec),
            DtypePath::Kernel => {}
        }
        // int8 KV (antiquant) goes to the op as INT8, cast on the device.
        let kv = match dims.quantised() {
            false => inputs.kv.clone(),
            true => {
                let cast = inputs
                    .kv
                    .as_ref()
                    .map(|t| native_elementwise::cast(t, DType::I8));
                let (ck, cv) = cast.as_ref().into_pair();
                if ck.is_none() || cv.is_none() {
                    count(OP);
                    return cpu_fia_fwd::<Ascend>(inputs, spec);
                }
                cast.map(|t| t.expect("both casts succeeded (checked above)"))
            }
        };
        let rt = runtime(&device);
        let acl_dtype = q.acl_dtype(OP);
        // The sink goes in the dtype the path reads on this CANN, whatever the model keeps it in:
        // cast on the device (the model's f32 parameter never visits the host).
        let sink = match &inputs.learnable_sink {
            None => None,
            Some(s) => {
                same_device(OP, &[q, s])?;
                let want = spec.learnable_sink_dtype(&dims, acl_dtype, cann_release(&rt)?)?;
                match float_dtype(want).and_then(|to| native_elementwise::cast(s, to)) {
                    Some(s) => Some(s),
                    None => {
                        count(OP);
                        return cpu_fia_fwd::<Ascend>(inputs, spec);
                    }
                }
            }
        };
        // The optional inputs in the dtypes the op takes, converted on the device: the dense mask
        // BOOL (non-zero = masked), pse and per-channel scales in the query's dtype, per-token
        // scales FLOAT.
        let separate = |mode: i64| match FiaAntiquantMode::from_attr("keyAntiquantMode", mode) {
            Ok(FiaAntiquantMode::PerToken) => DType::F32,
            _ => dtype,
        };
        let (kdt, vdt) = (
            separate(spec.key_antiquant_mode),
            separate(spec.value_antiquant_mode),
        );
        let cast =
            |t: &Option<AscendTensor>, to: DType| on_device(t, |t| native_elementwise::cast(t, to));
        let converted = [
            on_device(&inputs.atten_mask, mask_to_bool),
            cast(&inputs.pse_shift, dtype),
            cast(&inputs.antiquant_scale, dtype),
            cast(&inputs.antiquant_offset, dtype),
            cast(&inputs.key_antiquant_scale, kdt),
            cast(&inputs.key_antiquant_offset, kdt),
            cast(&inputs.value_antiquant_scale, vdt),
            cast(&inputs.value_antiquant_offset, vdt),
        ];
        let Ok(optional) = <[Option<AscendTensor>; 8]>::try_from(
            converted
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .unwrap_or_default(),
        ) else {
            count(OP);
            return cpu_fia_fwd::<Ascend>(inputs, spec);
        };
        let x = FiaInputs::new(inputs.query, kv, sink).with_optional(optional);
        let out = FiaOutputs {
            attention_out: AscendTensor::alloc(Shape::from(dims.out_shape()), dtype, &device),
            softmax_lse: spec
                .softmax_lse_flag
                .then(|| AscendTensor::alloc(Shape::from(dims.lse_shape()), DType::F32, &device)),
        };
        let out_handles = out.as_ref().map(|t| view_handle(t, OP));
        fused_infer_attention(
            &rt,
            spec,
            x.as_ref().map(|t| view_handle(t, OP)),
            out_handles.as_ref(),
        )
        .map_err(|e| device_error(OP, e))?;
        drop(out_handles);
        Ok(out)
    }

    fn fia_sink_available(device: &AscendDevice) -> bool {
        crate::device::try_runtime(device).is_ok_and(|rt| rt.api().fia_v4.is_some())
    }
}
