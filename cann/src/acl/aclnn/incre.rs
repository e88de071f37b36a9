//! Incremental flash attention: `aclnnIncreFlashAttentionV4`.

use super::call::{attr, cptr, ia, t};
use super::two_stage;
use crate::acl::error::Result;
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Tensor, TensorList};

/// Arguments of `aclnnIncreFlashAttentionV4`, in prototype order.
pub struct IncreArgs<'a> {
    pub query: &'a Tensor<'a>,
    pub key: &'a TensorList<'a>,
    pub value: &'a TensorList<'a>,
    pub pse_shift: Option<&'a Tensor<'a>>,
    pub atten_mask: Option<&'a Tensor<'a>>,
    pub actual_seq_lengths: Option<&'a IntArray>,
    pub dequant_scale1: Option<&'a Tensor<'a>>,
    pub quant_scale1: Option<&'a Tensor<'a>>,
    pub dequant_scale2: Option<&'a Tensor<'a>>,
    pub quant_scale2: Option<&'a Tensor<'a>>,
    pub quant_offset2: Option<&'a Tensor<'a>>,
    pub antiquant_scale: Option<&'a Tensor<'a>>,
    pub antiquant_offset: Option<&'a Tensor<'a>>,
    pub blocktable: Option<&'a Tensor<'a>>,
    pub kv_padding_size: Option<&'a Tensor<'a>>,
    pub num_heads: i64,
    pub scale_value: f64,
    pub input_layout: &'a str,
    pub num_key_value_heads: i64,
    pub block_size: i64,
    pub inner_precise: i64,
    pub attention_out: &'a Tensor<'a>,
}

/// Incremental attention: `aclnnIncreFlashAttentionV4`.
pub fn incre(rt: &Runtime, a: &IncreArgs<'_>) -> Result<()> {
    let (name, f) = op!(rt, ifa_v4)?;
    let layout = attr("inputLayout", a.input_layout)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype of seed 000 in order; handles live for
        // the call, nulls only for optional inputs, the string NUL-terminated.
        unsafe {
            (f.workspace)(
                a.query.as_ptr(),
                a.key.as_ptr(),
                a.value.as_ptr(),
                t(a.pse_shift),
                t(a.atten_mask),
                ia(a.actual_seq_lengths),
                t(a.dequant_scale1),
                t(a.quant_scale1),
                t(a.dequant_scale2),
                t(a.quant_scale2),
                t(a.quant_offset2),
                t(a.antiquant_scale),
                t(a.antiquant_offset),
                t(a.blocktable),
                t(a.kv_padding_size),
                a.num_heads,
                a.scale_value,
                cptr(&layout),
                a.num_key_value_heads,
                a.block_size,
                a.inner_precise,
                a.attention_out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}
