//! The grouped matmul of a mixture of experts: `aclnnGroupedMatmulV4`.

use super::two_stage;
use crate::acl::error::Result;
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{Tensor, TensorList};

/// Arguments of `aclnnGroupedMatmulV4`, in prototype order. The quantisation and activation
/// inputs and outputs this build never passes (`scaleOptional` … `perTokenScaleOptional`,
/// `activation*Optional`, `dynQuantScaleOutOptional`) are sent as null and `actType` as 0
/// (none), as torch_npu does for a non-quantised call.
pub struct GroupedMatmulArgs<'a> {
    pub x: &'a TensorList<'a>,
    pub weight: &'a TensorList<'a>,
    pub bias: Option<&'a TensorList<'a>>,
    /// INT64 `[g]`.
    pub group_list: Option<&'a Tensor<'a>>,
    pub split_item: i64,
    pub group_type: i64,
    pub group_list_type: i64,
    pub out: &'a TensorList<'a>,
}

/// `aclnnGroupedMatmulV4`.
pub fn grouped_matmul_v4(rt: &Runtime, a: &GroupedMatmulArgs<'_>) -> Result<()> {
    let (name, f) = op!(rt, grouped_matmul_v4)?;
    let n = std::ptr::null();
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnGroupedMatmulV4GetWorkspaceSize's prototype in
        // order; the handles live for the call, nulls only for optional inputs and outputs.
        unsafe {
            (f.workspace)(
                a.x.as_ptr(),
                a.weight.as_ptr(),
                a.bias.map_or(n, TensorList::as_ptr),
                n,
                n,
                n,
                n,
                n,
                a.group_list.map_or(std::ptr::null(), Tensor::as_ptr),
                n,
                n,
                n,
                a.split_item,
                a.group_type,
                a.group_list_type,
                0,
                a.out.as_ptr(),
                n,
                n,
                ws,
                ex,
            )
        }
    })
}
