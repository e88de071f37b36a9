//! The C ABI of ACL / aclnn as this crate calls it: opaque handle types, the enum values of
//! `aclDataType` / `aclFormat`, status codes, the prototypes, and [`AclApi`], the table of
//! `unsafe extern "C"` function pointers filled either from CANN's shared libraries
//! ([`super::loader`]) or from the host simulation (crate `burn-ascend-acl-sim`). Which
//! function has which prototype is listed once, in [`table`]; [`AclApi`] and [`names`] are
//! generated from it.
//!
//! Prototypes are copied from the aclnn docs (`shared/seeds`, `shared/reference`) and the ACL
//! runtime headers (`acl/acl_rt.h`, `aclnn/acl_meta.h`); enum values from spec §7. Every
//! pointer argument below is exactly one C pointer and every integer has the C header's width,
//! so the table is ABI-compatible with CANN on LP64 Linux (the only platform CANN ships for).
//! `tools/abi-check/run.sh` checks every prototype, enum value and status code here against
//! CANN's real headers.

use std::ffi::{c_char, c_int, c_void};

mod elementwise;
mod fused;
mod graph;
mod grouped_matmul;
mod optim;
pub mod table;
pub use elementwise::*;
pub use fused::*;
pub use graph::*;
pub use grouped_matmul::*;
pub use optim::*;

/// `aclTensor` (opaque; created by `aclCreateTensor`).
#[repr(C)]
pub struct AclTensor {
    _opaque: [u8; 0],
}
/// `aclIntArray` (opaque).
#[repr(C)]
pub struct AclIntArray {
    _opaque: [u8; 0],
}
/// `aclTensorList` (opaque).
#[repr(C)]
pub struct AclTensorList {
    _opaque: [u8; 0],
}
/// `aclOpExecutor` (opaque; produced by `…GetWorkspaceSize`, consumed by the launch).
#[repr(C)]
pub struct AclOpExecutor {
    _opaque: [u8; 0],
}
/// `aclScalar` (opaque; created by `aclCreateScalar`).
#[repr(C)]
pub struct AclScalar {
    _opaque: [u8; 0],
}
/// `aclrtStream`.
pub type AclrtStream = *mut c_void;
/// `aclError` (runtime) and `aclnnStatus` (op API) are both `int32_t`.
pub type AclStatus = c_int;

/// `ACL_SUCCESS` / `ACLNN_SUCCESS`.
pub const ACL_SUCCESS: AclStatus = 0;
/// `ACL_ERROR_INVALID_PARAM` (runtime).
pub const ACL_ERROR_INVALID_PARAM: AclStatus = 100_000;
/// `ACL_ERROR_REPEAT_INITIALIZE`: `aclInit` called twice in one process (harmless).
pub const ACL_ERROR_REPEAT_INITIALIZE: AclStatus = 100_002;
/// `ACL_ERROR_BAD_ALLOC` (runtime).
pub const ACL_ERROR_BAD_ALLOC: AclStatus = 200_000;
/// `ACL_ERROR_RT_MEMORY_ALLOCATION`: `aclrtMalloc` found no device memory.
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: AclStatus = 207_001;
/// `ACLNN_ERR_PARAM_NULLPTR`: a required argument is null.
pub const ACLNN_ERR_PARAM_NULLPTR: AclStatus = 161_001;
/// `ACLNN_ERR_PARAM_INVALID`: bad dtype, shape, attribute or call order.
pub const ACLNN_ERR_PARAM_INVALID: AclStatus = 161_002;
/// `ACLNN_ERR_RUNTIME_ERROR`.
pub const ACLNN_ERR_RUNTIME_ERROR: AclStatus = 361_001;
/// `ACLNN_ERR_INNER` (internal error).
pub const ACLNN_ERR_INNER: AclStatus = 561_000;
/// `ACLNN_ERR_INNER_TILING_ERROR` (ScatterPaKvCache reports a bad rank with it).
pub const ACLNN_ERR_INNER_TILING_ERROR: AclStatus = 561_002;
/// `ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND`: `ASCEND_OPP_PATH` is not set.
pub const ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND: AclStatus = 561_107;

/// `aclDataType` values (spec §7): the op vocabulary's, owned by the contract.
pub use burn_ascend_contract::DataType;

/// `aclFormat` values used here (spec §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Format {
    Nchw = 0,
    Nhwc = 1,
    Nd = 2,
    FractalNz = 29,
}

impl Format {
    /// The enum value as passed through the C ABI.
    pub fn raw(self) -> i32 {
        self as i32
    }

    /// Decodes a raw `aclFormat`.
    pub fn from_raw(v: i32) -> Option<Self> {
        Some(match v {
            0 => Self::Nchw,
            1 => Self::Nhwc,
            2 => Self::Nd,
            29 => Self::FractalNz,
            _ => return None,
        })
    }
}

/// `aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST`.
pub const ACL_MEM_MALLOC_HUGE_FIRST: c_int = 0;
/// `aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE`.
pub const ACL_MEMCPY_HOST_TO_DEVICE: c_int = 1;
/// `aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST`.
pub const ACL_MEMCPY_DEVICE_TO_HOST: c_int = 2;
/// `aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE`.
pub const ACL_MEMCPY_DEVICE_TO_DEVICE: c_int = 3;

// ---- runtime (libascendcl.so) ----------------------------------------------------------------

/// `aclError aclInit(const char *configPath)`.
pub type AclInit = unsafe extern "C" fn(config_path: *const c_char) -> AclStatus;
/// `aclError aclFinalize()`.
pub type AclFinalize = unsafe extern "C" fn() -> AclStatus;
/// `aclError aclrtSetDevice(int32_t)` / `aclrtResetDevice(int32_t)`.
pub type AclrtDevice = unsafe extern "C" fn(device_id: i32) -> AclStatus;
/// `aclError aclrtGetDeviceCount(uint32_t *count)`.
pub type AclrtGetDeviceCount = unsafe extern "C" fn(count: *mut u32) -> AclStatus;
/// `aclError aclrtCreateStream(aclrtStream *stream)`.
pub type AclrtCreateStream = unsafe extern "C" fn(stream: *mut AclrtStream) -> AclStatus;
/// `aclError aclrtDestroyStream(aclrtStream)` / `aclrtSynchronizeStream(aclrtStream)`.
pub type AclrtStreamFn = unsafe extern "C" fn(stream: AclrtStream) -> AclStatus;
/// `aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)`.
pub type AclrtMalloc =
    unsafe extern "C" fn(dev_ptr: *mut *mut c_void, size: usize, policy: c_int) -> AclStatus;
/// `aclError aclrtFree(void *devPtr)`.
pub type AclrtFree = unsafe extern "C" fn(dev_ptr: *mut c_void) -> AclStatus;
/// `aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
/// aclrtMemcpyKind kind)`.
pub type AclrtMemcpy = unsafe extern "C" fn(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: c_int,
) -> AclStatus;
/// `const char *aclGetRecentErrMsg()`.
pub type AclGetRecentErrMsg = unsafe extern "C" fn() -> *const c_char;
/// `aclError aclrtMallocHost(void **hostPtr, size_t size)`: page-locked host memory, which the
/// host side of `aclrtMemcpyAsync` needs.
pub type AclrtMallocHost =
    unsafe extern "C" fn(host_ptr: *mut *mut c_void, size: usize) -> AclStatus;
/// `aclError aclrtFreeHost(void *hostPtr)`.
pub type AclrtFreeHost = unsafe extern "C" fn(host_ptr: *mut c_void) -> AclStatus;
/// `aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
/// aclrtMemcpyKind kind, aclrtStream stream)`.
pub type AclrtMemcpyAsync = unsafe extern "C" fn(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: c_int,
    stream: AclrtStream,
) -> AclStatus;
/// `aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
/// aclrtStream stream)`.
pub type AclrtMemsetAsync = unsafe extern "C" fn(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: AclrtStream,
) -> AclStatus;
/// `aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion,
/// int32_t *patchVersion)` (`acl/acl_rt.h`): the ACL interface version, not the CANN package's.
pub type AclrtGetVersion =
    unsafe extern "C" fn(major: *mut i32, minor: *mut i32, patch: *mut i32) -> AclStatus;

// ---- nnopbase (libnnopbase.so) ---------------------------------------------------------------

/// `aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
/// aclDataType dataType, const int64_t *stride, int64_t offset, aclFormat format,
/// const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData)`.
pub type AclCreateTensor = unsafe extern "C" fn(
    view_dims: *const i64,
    view_dims_num: u64,
    data_type: i32,
    stride: *const i64,
    offset: i64,
    format: i32,
    storage_dims: *const i64,
    storage_dims_num: u64,
    tensor_data: *mut c_void,
) -> *mut AclTensor;
/// `aclnnStatus aclDestroyTensor(const aclTensor *)`.
pub type AclDestroyTensor = unsafe extern "C" fn(tensor: *const AclTensor) -> AclStatus;
/// `aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size)`.
pub type AclCreateIntArray = unsafe extern "C" fn(value: *const i64, size: u64) -> *mut AclIntArray;
/// `aclnnStatus aclDestroyIntArray(const aclIntArray *)`.
pub type AclDestroyIntArray = unsafe extern "C" fn(array: *const AclIntArray) -> AclStatus;
/// `aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size)`.
pub type AclCreateTensorList =
    unsafe extern "C" fn(value: *const *const AclTensor, size: u64) -> *mut AclTensorList;
/// `aclnnStatus aclDestroyTensorList(const aclTensorList *)` — also destroys the tensors in it.
pub type AclDestroyTensorList = unsafe extern "C" fn(list: *const AclTensorList) -> AclStatus;

/// `aclScalar *aclCreateScalar(void *value, aclDataType dataType)` (nnopbase copies the value).
pub type AclCreateScalar =
    unsafe extern "C" fn(value: *mut c_void, data_type: i32) -> *mut AclScalar;
/// `aclnnStatus aclDestroyScalar(const aclScalar *scalar)`.
pub type AclDestroyScalar = unsafe extern "C" fn(scalar: *const AclScalar) -> AclStatus;

// ---- ops (libopapi.so / libopapi_*.so) ---------------------------------------------------------

type T = *const AclTensor;
type IA = *const AclIntArray;
type TL = *const AclTensorList;
type Ws = *mut u64;
type Ex = *mut *mut AclOpExecutor;

/// The launch stage shared by every aclnn op: `aclnnStatus aclnnX(void *workspace,
/// uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)`.
pub type AclnnLaunch = unsafe extern "C" fn(
    workspace: *mut c_void,
    workspace_size: u64,
    executor: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus;

/// `aclnnFlashAttentionVarLenScoreV5GetWorkspaceSize` (aclnnFlashAttentionVarLenScoreV5.md).
pub type VarlenFwdV5Ws = unsafe extern "C" fn(
    query: T,
    query_rope: T,
    key: T,
    key_rope: T,
    value: T,
    real_shift: T,
    drop_mask: T,
    padding_mask: T,
    atten_mask: T,
    sink: T,
    prefix: IA,
    actual_seq_q_len: IA,
    actual_seq_kv_len: IA,
    q_start_idx: IA,
    kv_start_idx: IA,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    pse_type: i64,
    softmax_out_layout: *mut c_char,
    softmax_max_out: T,
    softmax_sum_out: T,
    softmax_out_out: T,
    attention_out_out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnFlashAttentionVarLenScoreGetWorkspaceSize` (seed 003): no rope, sink, start indices,
/// pseType or softmax layout.
pub type VarlenFwdBaseWs = unsafe extern "C" fn(
    query: T,
    key: T,
    value: T,
    real_shift: T,
    drop_mask: T,
    padding_mask: T,
    atten_mask: T,
    prefix: IA,
    actual_seq_q_len: IA,
    actual_seq_kv_len: IA,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    softmax_max_out: T,
    softmax_sum_out: T,
    softmax_out_out: T,
    attention_out_out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnFlashAttentionUnpaddingScoreGradV5GetWorkspaceSize` (seed 002).
pub type VarlenGradV5Ws = unsafe extern "C" fn(
    query: T,
    query_rope: T,
    key: T,
    key_rope: T,
    value: T,
    dy: T,
    pse_shift: T,
    drop_mask: T,
    padding_mask: T,
    atten_mask: T,
    softmax_max: T,
    softmax_sum: T,
    softmax_in: T,
    attention_in: T,
    sink_in: T,
    prefix: IA,
    actual_seq_q_len: IA,
    actual_seq_kv_len: IA,
    q_start_idx: IA,
    kv_start_idx: IA,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    pse_type: i64,
    softmax_in_layout: *mut c_char,
    dq_out: T,
    dq_rope_out: T,
    dk_out: T,
    dk_rope_out: T,
    dv_out: T,
    dpse_out: T,
    dsink_out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnFlashAttentionUnpaddingScoreGradGetWorkspaceSize` (ops-transformer
/// `flash_attention_score_grad/op_api/aclnn_flash_attention_score_grad.h`): the no-sink
/// backward torch_npu calls (op-plugin `FlashAttentionKernelNpuOpApi.cpp`).
pub type VarlenGradBaseWs = unsafe extern "C" fn(
    query: T,
    key: T,
    value: T,
    dy: T,
    pse_shift: T,
    drop_mask: T,
    padding_mask: T,
    atten_mask: T,
    softmax_max: T,
    softmax_sum: T,
    softmax_in: T,
    attention_in: T,
    prefix: IA,
    actual_seq_q_len: IA,
    actual_seq_kv_len: IA,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    dq_out: T,
    dk_out: T,
    dv_out: T,
    dpse_out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnPromptFlashAttentionV3GetWorkspaceSize` (aclnnPromptFlashAttentionV3.md).
pub type PfaV3Ws = unsafe extern "C" fn(
    query: T,
    key: T,
    value: T,
    pse_shift: T,
    atten_mask: T,
    actual_seq_lengths: IA,
    actual_seq_lengths_kv: IA,
    deq_scale1: T,
    quant_scale1: T,
    deq_scale2: T,
    quant_scale2: T,
    quant_offset2: T,
    num_heads: i64,
    scale_value: f64,
    pre_tokens: i64,
    next_tokens: i64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    sparse_mode: i64,
    inner_precise: i64,
    attention_out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnPromptFlashAttentionGetWorkspaceSize` (seed 001, "V1").
pub type PfaV1Ws = unsafe extern "C" fn(
    query: T,
    key: T,
    value: T,
    pse_shift: T,
    atten_mask: T,
    actual_seq_lengths: IA,
    num_heads: i64,
    scale_value: f64,
    pre_tokens: i64,
    next_tokens: i64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    attention_out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnIncreFlashAttentionV4GetWorkspaceSize` (seed 000).
pub type IfaV4Ws = unsafe extern "C" fn(
    query: T,
    key: TL,
    value: TL,
    pse_shift: T,
    atten_mask: T,
    actual_seq_lengths: IA,
    dequant_scale1: T,
    quant_scale1: T,
    dequant_scale2: T,
    quant_scale2: T,
    quant_offset2: T,
    antiquant_scale: T,
    antiquant_offset: T,
    blocktable: T,
    kv_padding_size: T,
    num_heads: i64,
    scale_value: f64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    block_size: i64,
    inner_precise: i64,
    attention_out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnFusedInferAttentionScoreV4GetWorkspaceSize`
/// (`shared/reference/aclnnFusedInferAttentionScoreV4.md`).
pub type FiaV4Ws = unsafe extern "C" fn(
    query: T,
    key: TL,
    value: TL,
    pse_shift: T,
    atten_mask: T,
    actual_seq_lengths: IA,
    actual_seq_lengths_kv: IA,
    deq_scale1: T,
    quant_scale1: T,
    deq_scale2: T,
    quant_scale2: T,
    quant_offset2: T,
    antiquant_scale: T,
    antiquant_offset: T,
    block_table: T,
    query_padding_size: T,
    kv_padding_size: T,
    key_antiquant_scale: T,
    key_antiquant_offset: T,
    value_antiquant_scale: T,
    value_antiquant_offset: T,
    key_shared_prefix: T,
    value_shared_prefix: T,
    actual_shared_prefix_len: IA,
    query_rope: T,
    key_rope: T,
    key_rope_antiquant_scale: T,
    dequant_scale_query: T,
    learnable_sink: T,
    num_heads: i64,
    scale_value: f64,
    pre_tokens: i64,
    next_tokens: i64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    sparse_mode: i64,
    inner_precise: i64,
    block_size: i64,
    antiquant_mode: i64,
    softmax_lse_flag: bool,
    key_antiquant_mode: i64,
    value_antiquant_mode: i64,
    query_quant_mode: i64,
    attention_out: T,
    softmax_lse: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnFusedInferAttentionScoreGetWorkspaceSize` (the base op: no separate key/value
/// antiquant, shared prefix, rope or sink; prototype from ops-transformer
/// `attention/fused_infer_attention_score/op_host/op_api/aclnn_fused_infer_attention_score.cpp`).
pub type FiaWs = unsafe extern "C" fn(
    query: T,
    key: TL,
    value: TL,
    pse_shift: T,
    atten_mask: T,
    actual_seq_lengths: IA,
    actual_seq_lengths_kv: IA,
    deq_scale1: T,
    quant_scale1: T,
    deq_scale2: T,
    quant_scale2: T,
    quant_offset2: T,
    antiquant_scale: T,
    antiquant_offset: T,
    block_table: T,
    query_padding_size: T,
    kv_padding_size: T,
    num_heads: i64,
    scale_value: f64,
    pre_tokens: i64,
    next_tokens: i64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    sparse_mode: i64,
    inner_precise: i64,
    block_size: i64,
    antiquant_mode: i64,
    softmax_lse_flag: bool,
    attention_out: T,
    softmax_lse: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnScatterPaKvCacheGetWorkspaceSize` (seed 004). The caches are in-place ("Ref").
pub type ScatterPaKvCacheWs = unsafe extern "C" fn(
    key: T,
    key_cache_ref: T,
    slot_mapping: T,
    value: T,
    value_cache_ref: T,
    compress_lens: T,
    compress_seq_offset: T,
    seq_lens: T,
    cache_mode: *mut c_char,
    scatter_mode: *mut c_char,
    strides: IA,
    offsets: IA,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnAddGetWorkspaceSize` / `aclnnSubGetWorkspaceSize`: `(const aclTensor *self,
/// const aclTensor *other, const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize,
/// aclOpExecutor **executor)`; `out = self ± alpha·other`, broadcasting.
pub type BinaryAlphaWs = unsafe extern "C" fn(
    self_: T,
    other: T,
    alpha: *const AclScalar,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnMulGetWorkspaceSize` / `aclnnDivGetWorkspaceSize`: `(const aclTensor *self,
/// const aclTensor *other, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)`.
pub type BinaryWs =
    unsafe extern "C" fn(self_: T, other: T, out: T, workspace_size: Ws, executor: Ex) -> AclStatus;

/// `aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
/// int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)`; batch dims
/// broadcast.
pub type MatmulWs = unsafe extern "C" fn(
    self_: T,
    mat2: T,
    out: T,
    cube_math_type: i8,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// A unary elementwise op, e.g. `aclnnExpGetWorkspaceSize(const aclTensor *self,
/// aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)`.
pub type UnaryWs =
    unsafe extern "C" fn(self_: T, out: T, workspace_size: Ws, executor: Ex) -> AclStatus;

/// `aclnnAddsGetWorkspaceSize` / `aclnnSubsGetWorkspaceSize`: `(const aclTensor *self,
/// const aclScalar *other, const aclScalar *alpha, aclTensor *out, …)`.
pub type ScalarAlphaWs = unsafe extern "C" fn(
    self_: T,
    other: *const AclScalar,
    alpha: *const AclScalar,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnMulsGetWorkspaceSize` / `aclnnDivsGetWorkspaceSize`: `(const aclTensor *self,
/// const aclScalar *other, aclTensor *out, …)`.
pub type ScalarWs = unsafe extern "C" fn(
    self_: T,
    other: *const AclScalar,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnReduceSumGetWorkspaceSize` / `aclnnMeanGetWorkspaceSize`: `(const aclTensor *self,
/// const aclIntArray *dim, bool keepDim, aclDataType dtype, aclTensor *out, …)`.
pub type ReduceWs = unsafe extern "C" fn(
    self_: T,
    dim: IA,
    keep_dim: bool,
    dtype: i32,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

// ---- indexing and layout ops --------------------------------------------------------------------

/// `aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
/// aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)` and
/// `aclnnGatherGetWorkspaceSize(const aclTensor *self, const int64_t dim, const aclTensor *index,
/// aclTensor *out, …)` (aclnn_index_select.h, aclnn_gather.h).
pub type IndexDimWs = unsafe extern "C" fn(
    self_: T,
    dim: i64,
    index: T,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnIndexAddGetWorkspaceSize(const aclTensor *self, const int64_t dim,
/// const aclTensor *index, const aclTensor *source, const aclScalar *alpha, aclTensor *out,
/// uint64_t *workspaceSize, aclOpExecutor **executor)` (aclnn_index_add.h).
pub type IndexAddWs = unsafe extern "C" fn(
    self_: T,
    dim: i64,
    index: T,
    source: T,
    alpha: *const AclScalar,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnScatterAddGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
/// const aclTensor *src, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)`
/// (aclnn_scatter_add.h).
pub type ScatterAddWs = unsafe extern "C" fn(
    self_: T,
    dim: i64,
    index: T,
    src: T,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnCatGetWorkspaceSize(const aclTensorList *tensors, int64_t dim, aclTensor *out,
/// uint64_t *workspaceSize, aclOpExecutor **executor)` (aclnn_cat.h).
pub type CatWs = unsafe extern "C" fn(
    tensors: TL,
    dim: i64,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// `aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src,
/// uint64_t *workspaceSize, aclOpExecutor **executor)` (aclnn_copy.h): `selfRef` (any view,
/// strided) receives `src`, broadcast to its shape.
pub type InplaceCopyWs =
    unsafe extern "C" fn(self_ref: T, src: T, workspace_size: Ws, executor: Ex) -> AclStatus;

/// `aclnnRepeatGetWorkspaceSize(const aclTensor *self, const aclIntArray *repeats,
/// aclTensor *out, …)` and `aclnnFlipGetWorkspaceSize(const aclTensor *self,
/// const aclIntArray *dims, aclTensor *out, …)` (aclnn_repeat.h, aclnn_flip.h).
pub type TensorIntArrayWs = unsafe extern "C" fn(
    self_: T,
    array: IA,
    out: T,
    workspace_size: Ws,
    executor: Ex,
) -> AclStatus;

/// One aclnn op: its `GetWorkspaceSize` stage and its launch stage.
#[derive(Clone, Copy)]
pub struct OpFns<W> {
    /// `aclnnXGetWorkspaceSize`.
    pub workspace: W,
    /// `aclnnX`.
    pub launch: AclnnLaunch,
}

/// Where a function table came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKind {
    /// CANN's own libraries, opened at run time.
    Cann,
    /// The host simulation of the ABI (crate `burn-ascend-acl-sim`; not CANN).
    Simulation,
}

/// Generates [`AclApi`], [`names`] and [`AclApi::presence`] from the table.
macro_rules! declare_api {
    (
        runtime { $($rf:ident: $rc:ident($rt:ty)),* }
        graph { $($gf:ident: $gc:ident($gt:ty)),* }
        ops { $($(#[$a:meta])* $f:ident: $c:ident($w:ty)),* }
    ) => {
        /// The function table, one field per entry of [`table`](crate::acl_api_table). Runtime
        /// and nnopbase entries are required; each op is optional (older or split CANN builds
        /// lack some) and its absence surfaces as an "unsupported" error when it is called.
        ///
        /// Plain function pointers: `Send + Sync` and `Copy`. Calling any of them is `unsafe`;
        /// the safe wrappers live in [`super::tensor`], [`super::runtime`] and [`super::ops`].
        #[derive(Clone, Copy)]
        pub struct AclApi {
            /// Where the table came from.
            pub kind: ApiKind,
            $(
                #[doc = concat!("`", stringify!($rc), "`.")]
                pub $rf: $rt,
            )*
            $(
                #[doc = concat!("`", stringify!($gc), "` (optional: graph capture).")]
                pub $gf: Option<$gt>,
            )*
            $(
                #[doc = concat!("`", stringify!($c), "`.")]
                $(#[$a])*
                pub $f: Option<OpFns<$w>>,
            )*
        }

        /// The C name of every entry of [`AclApi`], by field (`names::add` is `"aclnnAdd"`,
        /// `names::malloc` is `"aclrtMalloc"`): what error messages and the simulation use, so
        /// each name is written once, in the table.
        #[allow(non_upper_case_globals)]
        pub mod names {
            $(
                #[doc = concat!("`", stringify!($rc), "`.")]
                pub const $rf: &str = stringify!($rc);
            )*
            $(
                #[doc = concat!("`", stringify!($gc), "`.")]
                pub const $gf: &str = stringify!($gc);
            )*
            $(
                #[doc = concat!("`", stringify!($c), "`.")]
                pub const $f: &str = stringify!($c);
            )*
        }

        impl AclApi {
            /// The C name of every aclnn op of the table, in table order.
            pub const OPS: &'static [&'static str] = &[$(stringify!($c)),*];

            /// `(aclnn name, present)` for each op of the table, in table order.
            pub fn presence(&self) -> Vec<(&'static str, bool)> {
                vec![$((stringify!($c), self.$f.is_some())),*]
            }
        }
    };
}

crate::acl_api_table!(declare_api);

impl std::fmt::Debug for AclApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (present, absent): (Vec<_>, Vec<_>) =
            self.presence().into_iter().partition(|&(_, p)| p);
        let names =
            |v: Vec<(&'static str, bool)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        f.debug_struct("AclApi")
            .field("kind", &self.kind)
            .field("present", &names(present))
            .field("absent", &names(absent))
            .finish()
    }
}
