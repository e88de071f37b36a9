//! The opaque handle types of the C ABI (nnopbase's tensors, int arrays, tensor lists, scalars
//! and executors; the runtime's stream) and the status type every function returns.

use std::ffi::{c_int, c_void};

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
