//! Incremental (decode) attention on the device: `aclnnIncreFlashAttentionV4` over contiguous
//! KV, the tensor-list form or the paged caches with their block table. The mask, pse and
//! antiquant scales are the carrier's tensors, converted on the device to the dtypes the op
//! takes (the mask BOOL, the rest the query's); the spec's host-side inputs (block table,
//! `kvPaddingSize`) are uploaded for the call. An f32 call runs
//! the composite on the native ops (counted as [`INCRE_COMPOSITE`]): CANN's IFA takes no FLOAT.
//!
//! int8 KV reaches the Burn API as float tensors holding the int8 values (exact); with
//! an antiquant scale the key and value are cast to INT8 on the device (`aclnnCast`) and the
//! scale / offset cast to the query's dtype, so the op runs its own dequantisation. The cast reads
//! the KV once more per call: a cache kept in int8 Burn tensors would avoid it, but Burn's
//! float-tensor API for this op does not carry one.
//!
//! The builder half ([`incre`]) knows no Burn: the validated spec plus aclnn handles in, one
//! aclnn call out; the op-replay CLI's `--device sim|npu` calls it too.

use burn_ascend_cann::acl::{aclnn, Result as AclResult, Runtime, Tensor, TensorList};
use burn_ascend_ops::error::{AttnError, Result};
use burn_ascend_ops::incre::ndarray::cpu_incre_fwd;
use burn_ascend_ops::incre::{composite, IncreBackend, IncreInputs, IncreSpec};
use burn_backend::{DType, Shape};

use super::common::{
    dtype_path, handle_of, ints, mask_to_bool, on_device, post_quant, same_device,
    upload_block_table, upload_i64, view_handle, DtypePath,
};
use crate::device::runtime;
use crate::fallback::count;
use crate::tensor::{device_error, AscendTensor};
use crate::tensor_ops::native_elementwise;
use crate::Ascend;

/// f32 incremental attention through the composite (see [`super::PROMPT_COMPOSITE`]).
pub const INCRE_COMPOSITE: &str = "incre_composite";

/// Label of the call in error messages.
const OP: &str = "incre_fwd";

impl IncreBackend for Ascend {
    fn incre_fwd(inputs: IncreInputs<AscendTensor>, spec: &IncreSpec) -> Result<AscendTensor> {
        spec.validate(&burn_ascend_ops::incre::shapes::<Ascend>(&inputs))?;
        if spec.post_quant.is_some() {
            return Err(AttnError::Unsupported(
                "int8 attentionOut (quantScale2) on the Burn API: use the host path \
             (burn-ascend run incre --device npu)"
                    .into(),
            ));
        }
        let device = same_device(OP, &inputs.all())?;
        let dtype = inputs.query.dtype;
        let (keys, values) = inputs.kv.as_ref().into_lists();
        match dtype_path(dtype, keys.into_iter().chain(values), OP, INCRE_COMPOSITE) {
            DtypePath::Host => return cpu_incre_fwd::<Ascend>(inputs, spec),
            // CANN's IFA takes FLOAT16 / BFLOAT16 queries only (`incre_flash_attention_def.cpp`).
            DtypePath::Composite => return composite::incre_fwd::<Ascend>(inputs, spec),
            DtypePath::Kernel => {}
        }
        // int8 KV (antiquant) goes to the op as INT8, cast on the device; other KV as it is.
        let kv = match inputs.antiquant_scale {
            None => inputs.kv.clone(),
            Some(_) => {
                let cast = inputs
                    .kv
                    .as_ref()
                    .map(|t| native_elementwise::cast(t, DType::I8));
                let (k, v) = cast.as_ref().into_lists();
                if k.iter().chain(&v).any(|t| t.is_none()) {
                    count(OP);
                    return cpu_incre_fwd::<Ascend>(inputs, spec);
                }
                cast.map(|t| t.expect("every cast succeeded (checked above)"))
            }
        };
        // The optional inputs in the dtypes the op takes, converted on the device: the mask BOOL
        // (non-zero = masked), pse and antiquant scales in the query's dtype.
        let (Some(atten_mask), Some(pse_shift), Some(antiquant_scale), Some(antiquant_offset)) = (
            on_device(&inputs.atten_mask, mask_to_bool),
            on_device(&inputs.pse_shift, |t| native_elementwise::cast(t, dtype)),
            on_device(&inputs.antiquant_scale, |t| {
                native_elementwise::cast(t, dtype)
            }),
            on_device(&inputs.antiquant_offset, |t| {
                native_elementwise::cast(t, dtype)
            }),
        ) else {
            count(OP);
            return cpu_incre_fwd::<Ascend>(inputs, spec);
        };
        let x = IncreInputs {
            query: inputs.query,
            kv,
            atten_mask,
            pse_shift,
            antiquant_scale,
            antiquant_offset,
        };
        let rt = runtime(&device);
        let out = AscendTensor::alloc(Shape::from(x.query.shape.to_vec()), dtype, &device);
        incre(
            &rt,
            spec,
            x.as_ref().map(|t| view_handle(t, OP)),
            &view_handle(&out, OP),
        )
        .map_err(|e| device_error(OP, e))?;
        Ok(out)
    }
}

/// `aclnnIncreFlashAttentionV4` for a validated spec: the call's tensors as aclnn handles (the
/// key / value tensor lists are made here from the carrier's
/// [`IncreKv`](burn_ascend_contract::incre::IncreKv); the mask BOOL/INT8/UINT8, pse and
/// antiquant scales in the query's float dtype); `attention_out` in it too, or INT8 with
/// `quantScale2`. Only the spec's host metadata is uploaded here (block table,
/// `kvPaddingSize`, `quantScale2`).
pub fn incre(
    rt: &Runtime,
    spec: &IncreSpec,
    x: IncreInputs<Tensor<'_>>,
    attention_out: &Tensor<'_>,
) -> AclResult<()> {
    let (keys, values) = x.kv.into_lists();
    let (key, value) = (
        TensorList::new(rt.api(), keys)?,
        TensorList::new(rt.api(), values)?,
    );
    let table = spec
        .block_table
        .as_ref()
        .map(|t| upload_block_table(rt, t))
        .transpose()?;
    // kvPaddingSize is an INT64 tensor of one element.
    let pad = spec
        .kv_padding_size
        .map(|p| upload_i64(rt, &[p], &[1]))
        .transpose()?;
    let (qs2, qo2) = post_quant(rt, spec.post_quant.as_ref())?;
    {
        let (table, pad) = (handle_of(&table)?, handle_of(&pad)?);
        let (qs2, qo2) = (handle_of(&qs2)?, handle_of(&qo2)?);
        let asl = ints(rt, spec.actual_seq_lengths.as_deref())?;
        aclnn::incre(
            rt,
            &aclnn::IncreArgs {
                query: &x.query,
                key: &key,
                value: &value,
                pse_shift: x.pse_shift.as_ref(),
                atten_mask: x.atten_mask.as_ref(),
                actual_seq_lengths: asl.as_ref(),
                dequant_scale1: None,
                quant_scale1: None,
                dequant_scale2: None,
                quant_scale2: qs2.as_ref(),
                quant_offset2: qo2.as_ref(),
                antiquant_scale: x.antiquant_scale.as_ref(),
                antiquant_offset: x.antiquant_offset.as_ref(),
                blocktable: table.as_ref(),
                kv_padding_size: pad.as_ref(),
                num_heads: spec.num_heads as i64,
                scale_value: spec.scale_value,
                input_layout: spec.input_layout.as_attr(),
                num_key_value_heads: spec.num_key_value_heads as i64,
                block_size: spec.block_size as i64,
                inner_precise: spec.inner_precise,
                attention_out,
            },
        )?;
    }
    Ok(())
}
