//! How an aclnn first stage's prototype is declared once: `aclnn_prototype!` is
//! [`c_prototype!`](crate::prototype) for a function returning `aclnnStatus` (the `…Ws` function
//! type, the `…Params` struct, the C entry point), and the pointer spellings the prototypes use.

pub(super) use std::ffi::c_char;

pub(super) use super::{AclOpExecutor, AclScalar, AclStatus};

// The spellings the prototypes use (`use super::prototype::*` in each op's module): each one C
// pointer, as the headers pass them.
/// `const aclTensor *` (also `aclTensor *`: the pointee's constness does not change the ABI).
pub(super) type T = *const super::AclTensor;
/// `const aclIntArray *`.
pub(super) type IA = *const super::AclIntArray;
/// `const aclTensorList *`.
pub(super) type TL = *const super::AclTensorList;
/// `uint64_t *workspaceSize`.
pub(super) type Ws = *mut u64;
/// `aclOpExecutor **executor`.
pub(super) type Ex = *mut *mut AclOpExecutor;

/// Declares one aclnn first stage's prototype (see the [module docs](self)):
///
/// ```text
/// aclnn_prototype! {
///     /// docs of the function type
///     AddWs, AddParams(self_: T, other: T, …, workspace_size: Ws, executor: Ex)
/// }
/// ```
macro_rules! aclnn_prototype {
    ($(#[$m:meta])* $ws:ident, $params:ident($($p:ident: $t:ty),* $(,)?)) => {
        c_prototype! { $(#[$m])* $ws, $params($($p: $t),*) -> AclStatus }
    };
}
