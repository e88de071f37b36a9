//! Varlen flash attention, forward (`aclnnFlashAttentionVarLenScore`, or its V5) and backward
//! (`aclnnFlashAttentionUnpaddingScoreGrad`, or its V5). Both directions pick their entry point
//! the same way ([`varlen_call`]) and name each argument of the V5 prototype (the parameter
//! structs of [`crate::acl::ffi`]), narrowed to the base op's when that is the one called.

use std::ffi::CString;

use super::call::{attr, cptr, ia, missing, t, two_stage};
use crate::acl::error::{AclError, Result};
use crate::acl::ffi::{
    names, AclOpExecutor, AclStatus, OpFns, Prototype, VarlenFwdV5Params, VarlenGradV5Params,
};
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Tensor};

type Ws = *mut u64;
type Ex = *mut *mut AclOpExecutor;

/// Arguments of `aclnnFlashAttentionVarLenScoreV5` (the base op takes the subset it has), in
/// prototype order.
pub struct VarlenFwdArgs<'a> {
    pub query: &'a Tensor<'a>,
    pub query_rope: Option<&'a Tensor<'a>>,
    pub key: &'a Tensor<'a>,
    pub key_rope: Option<&'a Tensor<'a>>,
    pub value: &'a Tensor<'a>,
    pub real_shift: Option<&'a Tensor<'a>>,
    pub drop_mask: Option<&'a Tensor<'a>>,
    pub padding_mask: Option<&'a Tensor<'a>>,
    pub atten_mask: Option<&'a Tensor<'a>>,
    pub sink: Option<&'a Tensor<'a>>,
    pub prefix: Option<&'a IntArray>,
    pub actual_seq_q_len: Option<&'a IntArray>,
    pub actual_seq_kv_len: Option<&'a IntArray>,
    pub q_start_idx: Option<&'a IntArray>,
    pub kv_start_idx: Option<&'a IntArray>,
    pub scale_value: f64,
    pub keep_prob: f64,
    pub pre_tokens: i64,
    pub next_tokens: i64,
    pub head_num: i64,
    pub input_layout: &'a str,
    pub inner_precise: i64,
    pub sparse_mode: i64,
    pub pse_type: i64,
    pub softmax_out_layout: &'a str,
    pub softmax_max: &'a Tensor<'a>,
    pub softmax_sum: &'a Tensor<'a>,
    pub softmax_out: Option<&'a Tensor<'a>>,
    pub attention_out: &'a Tensor<'a>,
}

/// Arguments of `aclnnFlashAttentionUnpaddingScoreGradV5` (the base op takes the subset it
/// has), in prototype order.
pub struct VarlenGradArgs<'a> {
    pub query: &'a Tensor<'a>,
    pub query_rope: Option<&'a Tensor<'a>>,
    pub key: &'a Tensor<'a>,
    pub key_rope: Option<&'a Tensor<'a>>,
    pub value: &'a Tensor<'a>,
    pub dy: &'a Tensor<'a>,
    pub pse_shift: Option<&'a Tensor<'a>>,
    pub drop_mask: Option<&'a Tensor<'a>>,
    pub padding_mask: Option<&'a Tensor<'a>>,
    pub atten_mask: Option<&'a Tensor<'a>>,
    pub softmax_max: Option<&'a Tensor<'a>>,
    pub softmax_sum: Option<&'a Tensor<'a>>,
    pub softmax_in: Option<&'a Tensor<'a>>,
    pub attention_in: Option<&'a Tensor<'a>>,
    pub sink_in: Option<&'a Tensor<'a>>,
    pub prefix: Option<&'a IntArray>,
    pub actual_seq_q_len: Option<&'a IntArray>,
    pub actual_seq_kv_len: Option<&'a IntArray>,
    pub q_start_idx: Option<&'a IntArray>,
    pub kv_start_idx: Option<&'a IntArray>,
    pub scale_value: f64,
    pub keep_prob: f64,
    pub pre_tokens: i64,
    pub next_tokens: i64,
    pub head_num: i64,
    pub input_layout: &'a str,
    pub inner_precise: i64,
    pub sparse_mode: i64,
    pub pse_type: i64,
    pub softmax_in_layout: &'a str,
    pub dq: &'a Tensor<'a>,
    pub dq_rope: Option<&'a Tensor<'a>>,
    pub dk: &'a Tensor<'a>,
    pub dk_rope: Option<&'a Tensor<'a>>,
    pub dv: &'a Tensor<'a>,
    pub dpse: Option<&'a Tensor<'a>>,
    pub dsink: Option<&'a Tensor<'a>>,
}

/// What of a varlen call only the V5 entry points take (empty: the base op can run it).
fn varlen_needs_v5(
    sink: bool,
    rope: bool,
    start_idx: bool,
    pse_type_not_1: bool,
    softmax_layout: bool,
) -> Vec<&'static str> {
    [
        (sink, "sink"),
        (rope, "queryRope/keyRope"),
        (start_idx, "qStartIdx/kvStartIdx"),
        (pse_type_not_1, "pseType other than 1"),
        (softmax_layout, "a softmax layout"),
    ]
    .into_iter()
    .filter_map(|(on, what)| on.then_some(what))
    .collect()
}

/// One varlen call: the base entry point when the call needs nothing only V5 has (`needs_v5`
/// empty) and the base op is present, else V5, as torch_npu chooses (op-plugin
/// `FlashAttentionKernelNpuOpApi.cpp`, `npu_fusion_attention` / `_backward`: the V5 ops only
/// with a sink); no V5 for a call that needs it is an "unsupported" error naming what needs it.
/// `base_params` / `v5_params` build the chosen op's arguments from the out-pointers.
///
/// # Safety
/// The parameters built must satisfy the op's C contract: live handles for the call, nulls
/// only where the op allows them, NUL-terminated strings that outlive the call.
unsafe fn varlen_call<B: Prototype<Ret = AclStatus>, V: Prototype<Ret = AclStatus>>(
    rt: &Runtime,
    needs_v5: &[&str],
    (base, base_name): (Option<OpFns<B::FnPtr>>, &str),
    (v5, v5_name): (Option<OpFns<V::FnPtr>>, &str),
    base_params: impl FnOnce(Ws, Ex) -> B,
    v5_params: impl FnOnce(Ws, Ex) -> V,
) -> Result<()> {
    match (needs_v5.is_empty(), base, v5) {
        (true, Some(f), _) => two_stage(rt, base_name, f.launch, |ws, ex| {
            // SAFETY: the caller's contract; `ws` / `ex` are the first stage's out-pointers.
            unsafe { base_params(ws, ex).call(f.workspace) }
        }),
        (_, _, Some(f)) => two_stage(rt, v5_name, f.launch, |ws, ex| {
            // SAFETY: as above.
            unsafe { v5_params(ws, ex).call(f.workspace) }
        }),
        (true, None, None) => Err(missing(&format!("{v5_name} (and {base_name})"))),
        (false, Some(_), None) => Err(AclError::Unsupported(format!(
            "{} need {v5_name}, which this CANN lacks (only {base_name} is present)",
            needs_v5.join(", ")
        ))),
        (false, None, None) => Err(missing(&format!(
            "{v5_name} (needed for {})",
            needs_v5.join(", ")
        ))),
    }
}

/// The attribute strings of a call: `inputLayout` and the softmax layout.
fn layouts(input: &str, (sm_param, sm): (&str, &str)) -> Result<(CString, CString)> {
    Ok((attr("inputLayout", input)?, attr(sm_param, sm)?))
}

/// Varlen forward: `aclnnFlashAttentionVarLenScore` when the call needs nothing only V5 has
/// (no sink, rope, start indices, pseType other than 1 with a pse, softmax layout), else
/// `aclnnFlashAttentionVarLenScoreV5`; see [`varlen_call`] for the fallbacks.
pub fn varlen_fwd(rt: &Runtime, a: &VarlenFwdArgs<'_>) -> Result<()> {
    let api = rt.api();
    let (layout, sm_layout) = layouts(a.input_layout, ("softmaxOutLayout", a.softmax_out_layout))?;
    let needs = varlen_needs_v5(
        a.sink.is_some(),
        a.query_rope.is_some() || a.key_rope.is_some(),
        a.q_start_idx.is_some() || a.kv_start_idx.is_some(),
        a.real_shift.is_some() && a.pse_type != 1,
        !a.softmax_out_layout.is_empty(),
    );
    let v5 = |workspace_size, executor| VarlenFwdV5Params {
        query: a.query.as_ptr(),
        query_rope: t(a.query_rope),
        key: a.key.as_ptr(),
        key_rope: t(a.key_rope),
        value: a.value.as_ptr(),
        real_shift: t(a.real_shift),
        drop_mask: t(a.drop_mask),
        padding_mask: t(a.padding_mask),
        atten_mask: t(a.atten_mask),
        sink: t(a.sink),
        prefix: ia(a.prefix),
        actual_seq_q_len: ia(a.actual_seq_q_len),
        actual_seq_kv_len: ia(a.actual_seq_kv_len),
        q_start_idx: ia(a.q_start_idx),
        kv_start_idx: ia(a.kv_start_idx),
        scale_value: a.scale_value,
        keep_prob: a.keep_prob,
        pre_tokens: a.pre_tokens,
        next_tokens: a.next_tokens,
        head_num: a.head_num,
        input_layout: cptr(&layout),
        inner_precise: a.inner_precise,
        sparse_mode: a.sparse_mode,
        pse_type: a.pse_type,
        softmax_out_layout: cptr(&sm_layout),
        softmax_max_out: a.softmax_max.as_ptr(),
        softmax_sum_out: a.softmax_sum.as_ptr(),
        softmax_out_out: t(a.softmax_out),
        attention_out_out: a.attention_out.as_ptr(),
        workspace_size,
        executor,
    };
    // SAFETY: every handle is live for the call (borrowed by `a`), nulls only where the docs
    // allow optional inputs, the strings are NUL-terminated and outlive the call.
    unsafe {
        varlen_call(
            rt,
            &needs,
            (api.varlen_fwd_base, names::varlen_fwd_base),
            (api.varlen_fwd_v5, names::varlen_fwd_v5),
            move |ws, ex| v5(ws, ex).to_narrow(),
            v5,
        )
    }
}

/// Varlen backward: `aclnnFlashAttentionUnpaddingScoreGrad` when the call needs nothing only
/// V5 has (as for [`varlen_fwd`]), else `aclnnFlashAttentionUnpaddingScoreGradV5`; see
/// [`varlen_call`] for the fallbacks.
pub fn varlen_grad(rt: &Runtime, a: &VarlenGradArgs<'_>) -> Result<()> {
    let api = rt.api();
    let (layout, sm_layout) = layouts(a.input_layout, ("softmaxInLayout", a.softmax_in_layout))?;
    let needs = varlen_needs_v5(
        a.sink_in.is_some(),
        a.query_rope.is_some() || a.key_rope.is_some(),
        a.q_start_idx.is_some() || a.kv_start_idx.is_some(),
        a.pse_shift.is_some() && a.pse_type != 1,
        !a.softmax_in_layout.is_empty(),
    );
    let v5 = |workspace_size, executor| VarlenGradV5Params {
        query: a.query.as_ptr(),
        query_rope: t(a.query_rope),
        key: a.key.as_ptr(),
        key_rope: t(a.key_rope),
        value: a.value.as_ptr(),
        dy: a.dy.as_ptr(),
        pse_shift: t(a.pse_shift),
        drop_mask: t(a.drop_mask),
        padding_mask: t(a.padding_mask),
        atten_mask: t(a.atten_mask),
        softmax_max: t(a.softmax_max),
        softmax_sum: t(a.softmax_sum),
        softmax_in: t(a.softmax_in),
        attention_in: t(a.attention_in),
        sink_in: t(a.sink_in),
        prefix: ia(a.prefix),
        actual_seq_q_len: ia(a.actual_seq_q_len),
        actual_seq_kv_len: ia(a.actual_seq_kv_len),
        q_start_idx: ia(a.q_start_idx),
        kv_start_idx: ia(a.kv_start_idx),
        scale_value: a.scale_value,
        keep_prob: a.keep_prob,
        pre_tokens: a.pre_tokens,
        next_tokens: a.next_tokens,
        head_num: a.head_num,
        input_layout: cptr(&layout),
        inner_precise: a.inner_precise,
        sparse_mode: a.sparse_mode,
        pse_type: a.pse_type,
        softmax_in_layout: cptr(&sm_layout),
        dq_out: a.dq.as_ptr(),
        dq_rope_out: t(a.dq_rope),
        dk_out: a.dk.as_ptr(),
        dk_rope_out: t(a.dk_rope),
        dv_out: a.dv.as_ptr(),
        dpse_out: t(a.dpse),
        dsink_out: t(a.dsink),
        workspace_size,
        executor,
    };
    // SAFETY: handles are live for the call (borrowed by `a`), nulls only for optional
    // inputs/outputs, the strings NUL-terminated and outliving the call.
    unsafe {
        varlen_call(
            rt,
            &needs,
            (api.varlen_grad_base, names::varlen_grad_base),
            (api.varlen_grad_v5, names::varlen_grad_v5),
            move |ws, ex| v5(ws, ex).to_narrow(),
            v5,
        )
    }
}
