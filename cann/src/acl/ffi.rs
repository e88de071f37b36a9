//! The C ABI of ACL / aclnn as this crate calls it: opaque handle types (`handles`), the enum
//! values of `aclDataType` / `aclFormat` and the status codes (here), the prototypes (one module
//! per op or family: `runtime`, `nnopbase`, `graph`, `varlen`, `prompt`, `incre`, `fia`,
//! `scatter`, …), and [`AclApi`] (`api`), the table of `unsafe extern "C"` function pointers
//! filled either from CANN's shared libraries ([`super::loader`]) or from the host simulation
//! (crate `burn-ascend-acl-sim`). Which function has which prototype is listed once, in
//! [`table`]; [`AclApi`], [`names`], [`op`] and [`func`] are generated from it.
//!
//! Prototypes are copied from the aclnn docs (`shared/seeds`, `shared/reference`) and the ACL
//! runtime headers (`acl/acl_rt.h`, `aclnn/acl_meta.h`); enum values from spec §7. Every
//! pointer argument is exactly one C pointer and every integer has the C header's width, so
//! the table is ABI-compatible with CANN on LP64 Linux (the only platform CANN ships for).
//! `tools/abi-check/run.sh` checks every prototype, enum value and status code against CANN's
//! real headers.

use std::ffi::c_int;

#[macro_use]
mod prototype;
mod api;
mod elementwise;
mod fia;
mod fused;
mod graph;
mod grouped_matmul;
mod handles;
mod incre;
mod index;
mod math;
mod moe_gating;
mod nnopbase;
mod optim;
mod prompt;
mod runtime;
mod scatter;
pub mod table;
mod varlen;
pub use crate::prototype::{Implements, Prototype, TableFn};
pub use api::*;
pub use elementwise::*;
pub use fia::*;
pub use fused::*;
pub use graph::*;
pub use grouped_matmul::*;
pub use handles::*;
pub use incre::*;
pub use index::*;
pub use math::*;
pub use moe_gating::*;
pub use nnopbase::*;
pub use optim::*;
pub use prompt::*;
pub use runtime::*;
pub use scatter::*;
pub use varlen::*;

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
