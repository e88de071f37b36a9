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

#[macro_use]
mod prototype;
mod elementwise;
mod fia;
mod fused;
mod graph;
mod grouped_matmul;
mod incre;
mod index;
mod math;
mod optim;
mod prompt;
mod scatter;
pub mod table;
mod varlen;
pub use crate::prototype::{Implements, Prototype, TableFn};
pub use elementwise::*;
pub use fia::*;
pub use fused::*;
pub use graph::*;
pub use grouped_matmul::*;
pub use incre::*;
pub use index::*;
pub use math::*;
pub use optim::*;
pub use prompt::*;
pub use scatter::*;
pub use varlen::*;

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

c_prototype! {
    /// `aclError aclInit(const char *configPath)`.
    AclInit, AclInitParams(
        config_path: *const c_char,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclFinalize()`.
    AclFinalize, AclFinalizeParams(
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtSetDevice(int32_t)` / `aclrtResetDevice(int32_t)`.
    AclrtDevice, AclrtDeviceParams(
        device_id: i32,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtGetDeviceCount(uint32_t *count)`.
    AclrtGetDeviceCount, AclrtGetDeviceCountParams(
        count: *mut u32,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtCreateStream(aclrtStream *stream)`.
    AclrtCreateStream, AclrtCreateStreamParams(
        stream: *mut AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtDestroyStream(aclrtStream)` / `aclrtSynchronizeStream(aclrtStream)`.
    AclrtStreamFn, AclrtStreamFnParams(
        stream: AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)`.
    AclrtMalloc, AclrtMallocParams(
        dev_ptr: *mut *mut c_void,
        size: usize,
        policy: c_int,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtFree(void *devPtr)`.
    AclrtFree, AclrtFreeParams(
        dev_ptr: *mut c_void,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
    /// aclrtMemcpyKind kind)`.
    AclrtMemcpy, AclrtMemcpyParams(
        dst: *mut c_void,
        dest_max: usize,
        src: *const c_void,
        count: usize,
        kind: c_int,
    ) -> AclStatus
}

c_prototype! {
    /// `const char *aclGetRecentErrMsg()`.
    AclGetRecentErrMsg, AclGetRecentErrMsgParams(
    ) -> *const c_char
}

c_prototype! {
    /// `aclError aclrtMallocHost(void **hostPtr, size_t size)`: page-locked host memory, which the
    /// host side of `aclrtMemcpyAsync` needs.
    AclrtMallocHost, AclrtMallocHostParams(
        host_ptr: *mut *mut c_void,
        size: usize,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtFreeHost(void *hostPtr)`.
    AclrtFreeHost, AclrtFreeHostParams(
        host_ptr: *mut c_void,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
    /// aclrtMemcpyKind kind, aclrtStream stream)`.
    AclrtMemcpyAsync, AclrtMemcpyAsyncParams(
        dst: *mut c_void,
        dest_max: usize,
        src: *const c_void,
        count: usize,
        kind: c_int,
        stream: AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
    /// aclrtStream stream)`.
    AclrtMemsetAsync, AclrtMemsetAsyncParams(
        dev_ptr: *mut c_void,
        max_count: usize,
        value: i32,
        count: usize,
        stream: AclrtStream,
    ) -> AclStatus
}

c_prototype! {
    /// `aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion,
    /// int32_t *patchVersion)` (`acl/acl_rt.h`): the ACL interface version, not the CANN package's.
    AclrtGetVersion, AclrtGetVersionParams(
        major: *mut i32,
        minor: *mut i32,
        patch: *mut i32,
    ) -> AclStatus
}

// ---- nnopbase (libnnopbase.so) ---------------------------------------------------------------

c_prototype! {
    /// `aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
    /// aclDataType dataType, const int64_t *stride, int64_t offset, aclFormat format,
    /// const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData)`.
    AclCreateTensor, AclCreateTensorParams(
        view_dims: *const i64,
        view_dims_num: u64,
        data_type: i32,
        stride: *const i64,
        offset: i64,
        format: i32,
        storage_dims: *const i64,
        storage_dims_num: u64,
        tensor_data: *mut c_void,
    ) -> *mut AclTensor
}

c_prototype! {
    /// `aclnnStatus aclDestroyTensor(const aclTensor *)`.
    AclDestroyTensor, AclDestroyTensorParams(
        tensor: *const AclTensor,
    ) -> AclStatus
}

c_prototype! {
    /// `aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size)`.
    AclCreateIntArray, AclCreateIntArrayParams(
        value: *const i64,
        size: u64,
    ) -> *mut AclIntArray
}

c_prototype! {
    /// `aclnnStatus aclDestroyIntArray(const aclIntArray *)`.
    AclDestroyIntArray, AclDestroyIntArrayParams(
        array: *const AclIntArray,
    ) -> AclStatus
}

c_prototype! {
    /// `aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size)`.
    AclCreateTensorList, AclCreateTensorListParams(
        value: *const *const AclTensor,
        size: u64,
    ) -> *mut AclTensorList
}

c_prototype! {
    /// `aclnnStatus aclDestroyTensorList(const aclTensorList *)` — also destroys the tensors in it.
    AclDestroyTensorList, AclDestroyTensorListParams(
        list: *const AclTensorList,
    ) -> AclStatus
}

c_prototype! {
    /// `aclScalar *aclCreateScalar(void *value, aclDataType dataType)` (nnopbase copies the value).
    AclCreateScalar, AclCreateScalarParams(
        value: *mut c_void,
        data_type: i32,
    ) -> *mut AclScalar
}

c_prototype! {
    /// `aclnnStatus aclDestroyScalar(const aclScalar *scalar)`.
    AclDestroyScalar, AclDestroyScalarParams(
        scalar: *const AclScalar,
    ) -> AclStatus
}

// ---- ops (libopapi.so / libopapi_*.so) ---------------------------------------------------------

/// The launch stage shared by every aclnn op: `aclnnStatus aclnnX(void *workspace,
/// uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)`.
pub type AclnnLaunch = unsafe extern "C" fn(
    workspace: *mut c_void,
    workspace_size: u64,
    executor: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus;

// ---- indexing and layout ops --------------------------------------------------------------------

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

/// Generates [`AclApi`], [`names`], [`op`], [`func`] and [`AclApi::presence`] from the table.
macro_rules! declare_api {
    (
        runtime { $($rf:ident: $rc:ident($rp:ty)),* }
        graph { $($gf:ident: $gc:ident($gp:ty)),* }
        ops { $($(#[$a:meta])* $f:ident: $c:ident($p:ty)),* }
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
                pub $rf: <$rp as Prototype>::FnPtr,
            )*
            $(
                #[doc = concat!("`", stringify!($gc), "` (optional: graph capture).")]
                pub $gf: Option<<$gp as Prototype>::FnPtr>,
            )*
            $(
                #[doc = concat!("`", stringify!($c), "`.")]
                $(#[$a])*
                pub $f: Option<OpFns<<$p as Prototype>::FnPtr>>,
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

        /// One marker type per aclnn op of the table, named by its field: what ties an op to
        /// its parameter struct and C name ([`TableFn`]), e.g. for the simulation's
        /// [`Implements`] of each op's first stage.
        #[allow(non_camel_case_types)]
        pub mod op {
            use super::TableFn;
            $(
                #[doc = concat!("`", stringify!($c), "`.")]
                #[derive(Debug, Clone, Copy)]
                pub struct $f;

                impl TableFn for $f {
                    type Params = $p;
                    const NAME: &'static str = stringify!($c);
                }
            )*
        }

        /// One marker type per runtime, nnopbase and graph-capture function of the table,
        /// named by its field ([`TableFn`]), as [`op`] for the aclnn ops.
        #[allow(non_camel_case_types)]
        pub mod func {
            use super::TableFn;
            $(
                #[doc = concat!("`", stringify!($rc), "`.")]
                #[derive(Debug, Clone, Copy)]
                pub struct $rf;

                impl TableFn for $rf {
                    type Params = $rp;
                    const NAME: &'static str = stringify!($rc);
                }
            )*
            $(
                #[doc = concat!("`", stringify!($gc), "`.")]
                #[derive(Debug, Clone, Copy)]
                pub struct $gf;

                impl TableFn for $gf {
                    type Params = $gp;
                    const NAME: &'static str = stringify!($gc);
                }
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
