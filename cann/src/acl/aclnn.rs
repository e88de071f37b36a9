//! One function per aclnn op, over handles. Every argument of the C prototype is a named field
//! of the op's argument struct, passed in prototype order in exactly one place; the two-stage
//! call (`GetWorkspaceSize` → workspace → launch) is [`two_stage`].
//!
//! Launches are asynchronous on the runtime's stream; callers synchronise before reading
//! results (the attention call builders in `burn_ascend_backend::attention::builders` do).

use std::ffi::{c_char, CString};
use std::ptr::{null, null_mut};

use super::error::{AclError, Result};
use super::ffi::*;
use super::runtime::Runtime;
use super::tensor::{check, IntArray, Scalar, Tensor, TensorList};

pub use elementwise::*;

/// The two-stage call: `get_workspace(&mut size, &mut executor)`, then the cached workspace,
/// then `launch(workspace, size, executor, stream)`. Errors name `op` (with the
/// `GetWorkspaceSize` suffix for the first stage), carry the status and `aclGetRecentErrMsg()`.
///
/// If the workspace cannot be allocated after the first stage succeeded, the executor is
/// leaked (aclnn has no API to release a non-repeatable executor before launch).
pub fn two_stage(
    rt: &Runtime,
    op: &str,
    launch: AclnnLaunch,
    get_workspace: impl FnOnce(&mut u64, &mut *mut AclOpExecutor) -> AclStatus,
) -> Result<()> {
    super::profile::timed(op, || two_stage_untimed(rt, op, launch, get_workspace))
}

fn two_stage_untimed(
    rt: &Runtime,
    op: &str,
    launch: AclnnLaunch,
    get_workspace: impl FnOnce(&mut u64, &mut *mut AclOpExecutor) -> AclStatus,
) -> Result<()> {
    let api = rt.api();
    let mut size = 0u64;
    let mut executor: *mut AclOpExecutor = null_mut();
    let st = get_workspace(&mut size, &mut executor);
    check(api, st, &format!("{op}GetWorkspaceSize"))?;
    if executor.is_null() {
        return Err(AclError::Status {
            call: format!("{op}GetWorkspaceSize"),
            status: ACLNN_ERR_INNER,
            message: "returned success without an executor".into(),
        });
    }
    rt.with_workspace(size, |workspace| {
        // SAFETY: `executor` was just produced by this op's first stage and is consumed
        // exactly once here; `workspace` is null for size 0 or a live device buffer of at
        // least `size` bytes that the runtime keeps until the stream has finished with it;
        // the stream is live.
        let st = unsafe { launch(workspace, size, executor, rt.stream().as_ptr()) };
        check(api, st, op)
    })
}

fn t(x: Option<&Tensor<'_>>) -> *const AclTensor {
    x.map_or(null(), Tensor::as_ptr)
}

fn ia(x: Option<&IntArray>) -> *const AclIntArray {
    x.map_or(null(), IntArray::as_ptr)
}

fn attr(param: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| AclError::invalid(param, "attribute string contains a NUL byte"))
}

/// aclnn declares attribute strings `char *` but does not write through them.
fn cptr(s: &CString) -> *mut c_char {
    s.as_ptr().cast_mut()
}

fn missing(op: &str) -> AclError {
    let where_ = super::loader::cann_dir()
        .map(|d| format!(" in {}", d.display()))
        .unwrap_or_default();
    AclError::Unsupported(format!("{op} is not available{where_}"))
}

/// An op's entry of the table, or the "not available" error naming it.
fn entry<W: Copy>(f: Option<OpFns<W>>, name: &str) -> Result<OpFns<W>> {
    f.ok_or_else(|| missing(name))
}

/// `op!(rt, field)`: `(C name, entry)` of the table's op `field` in `rt`'s API, or the "not
/// available" error naming it.
macro_rules! op {
    ($rt:expr, $field:ident) => {
        $crate::acl::aclnn::entry($rt.api().$field, $crate::acl::ffi::names::$field)
            .map(|f| ($crate::acl::ffi::names::$field, f))
    };
}

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

/// Which entry point a varlen call takes, as torch_npu chooses (op-plugin
/// `FlashAttentionKernelNpuOpApi.cpp`, `npu_fusion_attention` / `_backward`: the V5 ops only
/// with a sink, the base ops otherwise), falling back both ways by what the loader found:
/// the base op when the call needs nothing only V5 has and the base op is present, else V5;
/// no V5 for a call that needs it is an "unsupported" error naming what needs it.
enum VarlenEntry<B, V> {
    Base(B),
    V5(V),
}

fn varlen_entry<B, V>(
    needs_v5: &[&str],
    base: Option<B>,
    v5: Option<V>,
    (base_name, v5_name): (&str, &str),
) -> Result<VarlenEntry<B, V>> {
    match (needs_v5.is_empty(), base, v5) {
        (true, Some(b), _) => Ok(VarlenEntry::Base(b)),
        (_, _, Some(v)) => Ok(VarlenEntry::V5(v)),
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

/// Varlen forward: `aclnnFlashAttentionVarLenScore` when the call needs nothing only V5 has
/// (no sink, rope, start indices, pseType other than 1 with a pse, softmax layout), else
/// `aclnnFlashAttentionVarLenScoreV5`; see [`varlen_entry`] for the fallbacks.
pub fn varlen_fwd(rt: &Runtime, a: &VarlenFwdArgs<'_>) -> Result<()> {
    let api = rt.api();
    let layout = attr("inputLayout", a.input_layout)?;
    let sm_layout = attr("softmaxOutLayout", a.softmax_out_layout)?;
    let needs = varlen_needs_v5(
        a.sink.is_some(),
        a.query_rope.is_some() || a.key_rope.is_some(),
        a.q_start_idx.is_some() || a.kv_start_idx.is_some(),
        a.real_shift.is_some() && a.pse_type != 1,
        !a.softmax_out_layout.is_empty(),
    );
    let entry = varlen_entry(
        &needs,
        api.varlen_fwd_base,
        api.varlen_fwd_v5,
        (names::varlen_fwd_base, names::varlen_fwd_v5),
    )?;
    let f = match entry {
        VarlenEntry::V5(f) => f,
        VarlenEntry::Base(f) => {
            return two_stage(rt, names::varlen_fwd_base, f.launch, |ws, ex| {
                // SAFETY: the arguments follow the base prototype (seed 003) in order; every
                // handle is live for the call (borrowed by `a`), nulls only where the docs
                // allow optional inputs, the string is NUL-terminated and outlives the call,
                // `ws`/`ex` are out-pointers.
                unsafe {
                    (f.workspace)(
                        a.query.as_ptr(),
                        a.key.as_ptr(),
                        a.value.as_ptr(),
                        t(a.real_shift),
                        t(a.drop_mask),
                        t(a.padding_mask),
                        t(a.atten_mask),
                        ia(a.prefix),
                        ia(a.actual_seq_q_len),
                        ia(a.actual_seq_kv_len),
                        a.scale_value,
                        a.keep_prob,
                        a.pre_tokens,
                        a.next_tokens,
                        a.head_num,
                        cptr(&layout),
                        a.inner_precise,
                        a.sparse_mode,
                        a.softmax_max.as_ptr(),
                        a.softmax_sum.as_ptr(),
                        t(a.softmax_out),
                        a.attention_out.as_ptr(),
                        ws,
                        ex,
                    )
                }
            });
        }
    };
    two_stage(rt, names::varlen_fwd_v5, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the V5 prototype in order; every handle is live
        // for the call (borrowed by `a`), nulls only where the docs allow optional inputs,
        // the strings are NUL-terminated and outlive the call, `ws`/`ex` are out-pointers.
        unsafe {
            (f.workspace)(
                a.query.as_ptr(),
                t(a.query_rope),
                a.key.as_ptr(),
                t(a.key_rope),
                a.value.as_ptr(),
                t(a.real_shift),
                t(a.drop_mask),
                t(a.padding_mask),
                t(a.atten_mask),
                t(a.sink),
                ia(a.prefix),
                ia(a.actual_seq_q_len),
                ia(a.actual_seq_kv_len),
                ia(a.q_start_idx),
                ia(a.kv_start_idx),
                a.scale_value,
                a.keep_prob,
                a.pre_tokens,
                a.next_tokens,
                a.head_num,
                cptr(&layout),
                a.inner_precise,
                a.sparse_mode,
                a.pse_type,
                cptr(&sm_layout),
                a.softmax_max.as_ptr(),
                a.softmax_sum.as_ptr(),
                t(a.softmax_out),
                a.attention_out.as_ptr(),
                ws,
                ex,
            )
        }
    })
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

/// Varlen backward: `aclnnFlashAttentionUnpaddingScoreGrad` when the call needs nothing only
/// V5 has (as for [`varlen_fwd`]), else `aclnnFlashAttentionUnpaddingScoreGradV5`; see
/// [`varlen_entry`] for the fallbacks.
pub fn varlen_grad(rt: &Runtime, a: &VarlenGradArgs<'_>) -> Result<()> {
    let api = rt.api();
    let layout = attr("inputLayout", a.input_layout)?;
    let sm_layout = attr("softmaxInLayout", a.softmax_in_layout)?;
    let needs = varlen_needs_v5(
        a.sink_in.is_some(),
        a.query_rope.is_some() || a.key_rope.is_some(),
        a.q_start_idx.is_some() || a.kv_start_idx.is_some(),
        a.pse_shift.is_some() && a.pse_type != 1,
        !a.softmax_in_layout.is_empty(),
    );
    let entry = varlen_entry(
        &needs,
        api.varlen_grad_base,
        api.varlen_grad_v5,
        (names::varlen_grad_base, names::varlen_grad_v5),
    )?;
    let f = match entry {
        VarlenEntry::V5(f) => f,
        VarlenEntry::Base(f) => {
            return two_stage(rt, names::varlen_grad_base, f.launch, |ws, ex| {
                // SAFETY: the arguments follow the base prototype
                // (`aclnn_flash_attention_score_grad.h`) in order; handles are live for the
                // call, nulls only for optional inputs, the string NUL-terminated.
                unsafe {
                    (f.workspace)(
                        a.query.as_ptr(),
                        a.key.as_ptr(),
                        a.value.as_ptr(),
                        a.dy.as_ptr(),
                        t(a.pse_shift),
                        t(a.drop_mask),
                        t(a.padding_mask),
                        t(a.atten_mask),
                        t(a.softmax_max),
                        t(a.softmax_sum),
                        t(a.softmax_in),
                        t(a.attention_in),
                        ia(a.prefix),
                        ia(a.actual_seq_q_len),
                        ia(a.actual_seq_kv_len),
                        a.scale_value,
                        a.keep_prob,
                        a.pre_tokens,
                        a.next_tokens,
                        a.head_num,
                        cptr(&layout),
                        a.inner_precise,
                        a.sparse_mode,
                        a.dq.as_ptr(),
                        a.dk.as_ptr(),
                        a.dv.as_ptr(),
                        t(a.dpse),
                        ws,
                        ex,
                    )
                }
            });
        }
    };
    two_stage(rt, names::varlen_grad_v5, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype of seed 002 in order; handles are live
        // for the call, nulls only for optional inputs/outputs, strings NUL-terminated.
        unsafe {
            (f.workspace)(
                a.query.as_ptr(),
                t(a.query_rope),
                a.key.as_ptr(),
                t(a.key_rope),
                a.value.as_ptr(),
                a.dy.as_ptr(),
                t(a.pse_shift),
                t(a.drop_mask),
                t(a.padding_mask),
                t(a.atten_mask),
                t(a.softmax_max),
                t(a.softmax_sum),
                t(a.softmax_in),
                t(a.attention_in),
                t(a.sink_in),
                ia(a.prefix),
                ia(a.actual_seq_q_len),
                ia(a.actual_seq_kv_len),
                ia(a.q_start_idx),
                ia(a.kv_start_idx),
                a.scale_value,
                a.keep_prob,
                a.pre_tokens,
                a.next_tokens,
                a.head_num,
                cptr(&layout),
                a.inner_precise,
                a.sparse_mode,
                a.pse_type,
                cptr(&sm_layout),
                a.dq.as_ptr(),
                t(a.dq_rope),
                a.dk.as_ptr(),
                t(a.dk_rope),
                a.dv.as_ptr(),
                t(a.dpse),
                t(a.dsink),
                ws,
                ex,
            )
        }
    })
}

/// Arguments of `aclnnPromptFlashAttentionV3`, in prototype order.
pub struct PromptArgs<'a> {
    pub query: &'a Tensor<'a>,
    pub key: &'a Tensor<'a>,
    pub value: &'a Tensor<'a>,
    pub pse_shift: Option<&'a Tensor<'a>>,
    pub atten_mask: Option<&'a Tensor<'a>>,
    pub actual_seq_lengths: Option<&'a IntArray>,
    pub actual_seq_lengths_kv: Option<&'a IntArray>,
    pub deq_scale1: Option<&'a Tensor<'a>>,
    pub quant_scale1: Option<&'a Tensor<'a>>,
    pub deq_scale2: Option<&'a Tensor<'a>>,
    pub quant_scale2: Option<&'a Tensor<'a>>,
    pub quant_offset2: Option<&'a Tensor<'a>>,
    pub num_heads: i64,
    pub scale_value: f64,
    pub pre_tokens: i64,
    pub next_tokens: i64,
    pub input_layout: &'a str,
    pub num_key_value_heads: i64,
    pub sparse_mode: i64,
    pub inner_precise: i64,
    pub attention_out: &'a Tensor<'a>,
}

/// Prompt attention: `aclnnPromptFlashAttentionV3`, or `aclnnPromptFlashAttention` (V1) when
/// V3 is absent and the call needs nothing only V3 has (KV lengths, quantisation, a sparse
/// mode, innerPrecise other than 1).
pub fn prompt(rt: &Runtime, a: &PromptArgs<'_>) -> Result<()> {
    let api = rt.api();
    let layout = attr("inputLayout", a.input_layout)?;
    if let Some(f) = api.pfa_v3 {
        return two_stage(rt, names::pfa_v3, f.launch, |ws, ex| {
            // SAFETY: the arguments follow the V3 prototype in order; handles live for the
            // call, nulls only for optional inputs, the string NUL-terminated.
            unsafe {
                (f.workspace)(
                    a.query.as_ptr(),
                    a.key.as_ptr(),
                    a.value.as_ptr(),
                    t(a.pse_shift),
                    t(a.atten_mask),
                    ia(a.actual_seq_lengths),
                    ia(a.actual_seq_lengths_kv),
                    t(a.deq_scale1),
                    t(a.quant_scale1),
                    t(a.deq_scale2),
                    t(a.quant_scale2),
                    t(a.quant_offset2),
                    a.num_heads,
                    a.scale_value,
                    a.pre_tokens,
                    a.next_tokens,
                    cptr(&layout),
                    a.num_key_value_heads,
                    a.sparse_mode,
                    a.inner_precise,
                    a.attention_out.as_ptr(),
                    ws,
                    ex,
                )
            }
        });
    }
    let Some(f) = api.pfa_v1 else {
        return Err(missing(&format!(
            "{} (and {})",
            names::pfa_v3,
            names::pfa_v1
        )));
    };
    let quant = [
        a.deq_scale1,
        a.quant_scale1,
        a.deq_scale2,
        a.quant_scale2,
        a.quant_offset2,
    ];
    if a.actual_seq_lengths_kv.is_some()
        || quant.iter().any(Option::is_some)
        || a.sparse_mode != 0
        || a.inner_precise != 1
    {
        return Err(AclError::Unsupported(format!(
            "actualSeqLengthsKv, quantisation, sparseMode != 0 and innerPrecise != 1 need {}, which this CANN lacks",
            names::pfa_v3
        )));
    }
    two_stage(rt, names::pfa_v1, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the V1 prototype (seed 001) in order.
        unsafe {
            (f.workspace)(
                a.query.as_ptr(),
                a.key.as_ptr(),
                a.value.as_ptr(),
                t(a.pse_shift),
                t(a.atten_mask),
                ia(a.actual_seq_lengths),
                a.num_heads,
                a.scale_value,
                a.pre_tokens,
                a.next_tokens,
                cptr(&layout),
                a.num_key_value_heads,
                a.attention_out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

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

/// Arguments of `aclnnScatterPaKvCache`, in prototype order. The caches are updated in place.
pub struct ScatterArgs<'a> {
    pub key: &'a Tensor<'a>,
    pub key_cache: &'a Tensor<'a>,
    pub slot_mapping: &'a Tensor<'a>,
    pub value: Option<&'a Tensor<'a>>,
    pub value_cache: Option<&'a Tensor<'a>>,
    pub compress_lens: Option<&'a Tensor<'a>>,
    pub compress_seq_offset: Option<&'a Tensor<'a>>,
    pub seq_lens: Option<&'a Tensor<'a>>,
    pub cache_mode: &'a str,
    pub scatter_mode: &'a str,
    pub strides: Option<&'a IntArray>,
    pub offsets: Option<&'a IntArray>,
}

/// KV cache scatter: `aclnnScatterPaKvCache`.
pub fn scatter(rt: &Runtime, a: &ScatterArgs<'_>) -> Result<()> {
    let (name, f) = op!(rt, scatter_pa_kv_cache)?;
    let cache_mode = attr("cacheMode", a.cache_mode)?;
    let scatter_mode = attr("scatterMode", a.scatter_mode)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype of seed 004 in order; handles live for
        // the call, nulls only for optional inputs, the strings NUL-terminated.
        unsafe {
            (f.workspace)(
                a.key.as_ptr(),
                a.key_cache.as_ptr(),
                a.slot_mapping.as_ptr(),
                t(a.value),
                t(a.value_cache),
                t(a.compress_lens),
                t(a.compress_seq_offset),
                t(a.seq_lens),
                cptr(&cache_mode),
                cptr(&scatter_mode),
                ia(a.strides),
                ia(a.offsets),
                ws,
                ex,
            )
        }
    })
}

/// `out = self + alpha·other` (`aclnnAdd`), broadcasting.
pub fn add(
    rt: &Runtime,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    alpha: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, add)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnAddGetWorkspaceSize's prototype; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), alpha.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self - alpha·other` (`aclnnSub`), broadcasting.
pub fn sub(
    rt: &Runtime,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    alpha: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, sub)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnSubGetWorkspaceSize's prototype; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), alpha.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self * other` (`aclnnMul`), broadcasting.
pub fn mul(rt: &Runtime, a: &Tensor<'_>, b: &Tensor<'_>, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, mul)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnMulGetWorkspaceSize's prototype; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self / other` (`aclnnDiv`), broadcasting.
pub fn div(rt: &Runtime, a: &Tensor<'_>, b: &Tensor<'_>, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, div)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnDivGetWorkspaceSize's prototype; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self @ mat2` (`aclnnMatmul`), batch dims broadcast. `cube_math_type`: 0 keeps the
/// dtype, 1 allows fp32→fp16, 2 fp32→hf32, 3 fp16/bf16 in fp32 (aclnn's `cubeMathType`).
pub fn matmul(
    rt: &Runtime,
    a: &Tensor<'_>,
    b: &Tensor<'_>,
    out: &Tensor<'_>,
    cube_math_type: i8,
) -> Result<()> {
    let (name, f) = op!(rt, matmul)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnMatmulGetWorkspaceSize's prototype; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), b.as_ptr(), out.as_ptr(), cube_math_type, ws, ex) }
    })
}

/// `out = self + alpha·other` with a scalar `other` (`aclnnAdds`).
pub fn adds(
    rt: &Runtime,
    a: &Tensor<'_>,
    other: &Scalar,
    alpha: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, adds)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnAddsGetWorkspaceSize's prototype; handles are live.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                other.as_ptr(),
                alpha.as_ptr(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `out = self · other` with a scalar `other` (`aclnnMuls`).
pub fn muls(rt: &Runtime, a: &Tensor<'_>, other: &Scalar, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, muls)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnMulsGetWorkspaceSize's prototype; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), other.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self / other` with a scalar `other` (`aclnnDivs`).
pub fn divs(rt: &Runtime, a: &Tensor<'_>, other: &Scalar, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, divs)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnDivsGetWorkspaceSize's prototype; handles are live.
        unsafe { (f.workspace)(a.as_ptr(), other.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// An enum of ops sharing one prototype, each variant naming its table field: the enum,
/// `name()` (the C name) and `entry(api)` (the table entry).
macro_rules! op_enum {
    ($(#[$m:meta])* $vis:vis enum $name:ident($w:ty) { $($v:ident => $f:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name {
            $($v),*
        }

        impl $name {
            /// The aclnn op name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$v => names::$f),*
                }
            }

            /// The op's entry of `api` (`None` where absent).
            fn entry(self, api: &AclApi) -> Option<OpFns<$w>> {
                match self {
                    $(Self::$v => api.$f),*
                }
            }
        }
    };
}

op_enum! {
    /// The unary elementwise ops wired here.
    pub enum Unary(UnaryWs) {
        Exp => exp,
        Log => log,
        Sqrt => sqrt,
        Abs => abs,
        Tanh => tanh,
        Relu => relu,
        Sigmoid => sigmoid,
        Neg => neg,
        Reciprocal => reciprocal,
        Sin => sin,
        Cos => cos,
        Erf => erf,
    }
}

/// `out = op(self)` elementwise.
pub fn unary(rt: &Runtime, op: Unary, a: &Tensor<'_>, out: &Tensor<'_>) -> Result<()> {
    let f = entry(op.entry(rt.api()), op.name())?;
    two_stage(rt, op.name(), f.launch, |ws, ex| {
        // SAFETY: the arguments follow the unary prototype `(self, out, ws, executor)`.
        unsafe { (f.workspace)(a.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// Sum (`aclnnReduceSum`) or mean (`aclnnMean`) over `dims`, in `dtype`.
pub fn reduce(
    rt: &Runtime,
    mean: bool,
    a: &Tensor<'_>,
    dims: &IntArray,
    keep_dim: bool,
    dtype: DataType,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = if mean {
        op!(rt, mean)?
    } else {
        op!(rt, reduce_sum)?
    };
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the reduce prototype; handles are live.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                dims.as_ptr(),
                keep_dim,
                dtype.raw(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

// ---- indexing and layout ----------------------------------------------------------------------

/// `out = self.index_select(dim, index)` (`aclnnIndexSelect`); `index` is 0-D/1-D INT32/INT64.
pub fn index_select(
    rt: &Runtime,
    a: &Tensor<'_>,
    dim: i64,
    index: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, index_select)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnIndexSelectGetWorkspaceSize's prototype; handles
        // are live for the call.
        unsafe { (f.workspace)(a.as_ptr(), dim, index.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self.gather(dim, index)` (`aclnnGather`); `out` has `index`'s shape.
pub fn gather(
    rt: &Runtime,
    a: &Tensor<'_>,
    dim: i64,
    index: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, gather)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnGatherGetWorkspaceSize's prototype; handles are
        // live for the call.
        unsafe { (f.workspace)(a.as_ptr(), dim, index.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self` with `alpha·source` added at `index` along `dim` (`aclnnIndexAdd`).
pub fn index_add(
    rt: &Runtime,
    a: &Tensor<'_>,
    dim: i64,
    index: &Tensor<'_>,
    source: &Tensor<'_>,
    alpha: &Scalar,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, index_add)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnIndexAddGetWorkspaceSize's prototype; handles are
        // live for the call.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                dim,
                index.as_ptr(),
                source.as_ptr(),
                alpha.as_ptr(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `out = self` with `src` scattered and summed at `index` along `dim` (`aclnnScatterAdd`).
/// `src` and `out` must be contiguous (aclnnScatterAdd.md).
pub fn scatter_add(
    rt: &Runtime,
    a: &Tensor<'_>,
    dim: i64,
    index: &Tensor<'_>,
    src: &Tensor<'_>,
    out: &Tensor<'_>,
) -> Result<()> {
    let (name, f) = op!(rt, scatter_add)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnScatterAddGetWorkspaceSize's prototype; handles
        // are live for the call.
        unsafe {
            (f.workspace)(
                a.as_ptr(),
                dim,
                index.as_ptr(),
                src.as_ptr(),
                out.as_ptr(),
                ws,
                ex,
            )
        }
    })
}

/// `out = cat(tensors, dim)` (`aclnnCat`).
pub fn cat(rt: &Runtime, tensors: &TensorList<'_>, dim: i64, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, cat)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnCatGetWorkspaceSize's prototype; the list and
        // `out` are live for the call.
        unsafe { (f.workspace)(tensors.as_ptr(), dim, out.as_ptr(), ws, ex) }
    })
}

/// `self_ref ← src` (`aclnnInplaceCopy`): `self_ref` may be any (strided) view; `src`
/// broadcasts to its shape.
pub fn inplace_copy(rt: &Runtime, self_ref: &Tensor<'_>, src: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, inplace_copy)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnInplaceCopyGetWorkspaceSize's prototype; handles
        // are live for the call.
        unsafe { (f.workspace)(self_ref.as_ptr(), src.as_ptr(), ws, ex) }
    })
}

/// `out = self.repeat(repeats)` (`aclnnRepeat`, torch's `repeat`: tile per dim).
pub fn repeat(rt: &Runtime, a: &Tensor<'_>, repeats: &IntArray, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, repeat)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnRepeatGetWorkspaceSize's prototype; handles are
        // live for the call.
        unsafe { (f.workspace)(a.as_ptr(), repeats.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

/// `out = self.flip(dims)` (`aclnnFlip`).
pub fn flip(rt: &Runtime, a: &Tensor<'_>, dims: &IntArray, out: &Tensor<'_>) -> Result<()> {
    let (name, f) = op!(rt, flip)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow aclnnFlipGetWorkspaceSize's prototype; handles are
        // live for the call.
        unsafe { (f.workspace)(a.as_ptr(), dims.as_ptr(), out.as_ptr(), ws, ex) }
    })
}

// Declared last: it uses the `op!` and `op_enum!` macros above.
mod elementwise;
mod fia;
mod grouped_matmul;
pub use fia::*;
pub use grouped_matmul::*;
mod fused;
pub use fused::*;
mod optim;
pub use optim::*;
