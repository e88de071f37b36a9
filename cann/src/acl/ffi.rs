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

use std::ffi::{c_int, c_void};

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
mod nnopbase;
mod optim;
mod prompt;
mod runtime;
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
pub use nnopbase::*;
pub use optim::*;
pub use prompt::*;
pub use runtime::*;
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

// ---- ops (libopapi.so / libopapi_*.so) ---------------------------------------------------------

/// The launch stage shared by every aclnn op: `aclnnStatus aclnnX(void *workspace,
/// uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)`.
pub type AclnnLaunch = unsafe extern "C" fn(
    workspace: *mut c_void,
    workspace_size: u64,
    executor: *mut AclOpExecutor,
    stream: AclrtStream,
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
