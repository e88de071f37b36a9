//! A mixture of experts' router in one launch: `aclnnMoeGatingTopKSoftmaxV2`.

use super::two_stage;
use crate::acl::error::Result;
use crate::acl::runtime::Runtime;
use crate::acl::tensor::Tensor;

/// Arguments of `aclnnMoeGatingTopKSoftmaxV2`, in prototype order. `finishedOptional` is sent
/// as null (every row routed, as the model's calls need).
pub struct MoeGatingArgs<'a> {
    /// `[rows, E]` or `[B, S, E]`, FLOAT16 / BFLOAT16 / FLOAT.
    pub x: &'a Tensor<'a>,
    pub k: i64,
    /// 0: softmax, then top-k; 1: top-k, then softmax.
    pub renorm: i64,
    /// Only read with `renorm` 0.
    pub output_softmax_result_flag: bool,
    /// `x`'s shape with the last dimension `k`, `x`'s dtype.
    pub y_out: &'a Tensor<'a>,
    /// As `y_out`, INT32.
    pub expert_idx_out: &'a Tensor<'a>,
    /// `x`'s shape, FLOAT; required with `renorm` 0 and the flag set.
    pub softmax_result_out: Option<&'a Tensor<'a>>,
}

/// `aclnnMoeGatingTopKSoftmaxV2`.
pub fn moe_gating_top_k_softmax_v2(rt: &Runtime, a: &MoeGatingArgs<'_>) -> Result<()> {
    let (name, f) = op!(rt, moe_gating_top_k_softmax_v2)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnMoeGatingTopKSoftmaxV2GetWorkspaceSize's prototype
        // in order; the handles live for the call, nulls only for optional ones.
        unsafe {
            (f.workspace)(
                a.x.as_ptr(),
                std::ptr::null(),
                a.k,
                a.renorm,
                a.output_softmax_result_flag,
                a.y_out.as_ptr(),
                a.expert_idx_out.as_ptr(),
                a.softmax_result_out
                    .map_or(std::ptr::null(), Tensor::as_ptr),
                ws,
                ex,
            )
        }
    })
}
