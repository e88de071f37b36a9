//! The two-stage call every aclnn function of [`super`] goes through, and the helpers they
//! share: handle pointers of optional arguments, attribute strings, the "not available" error,
//! the table lookup macros `op!` and `op_enum!`.

use std::ffi::{c_char, CString};
use std::ptr::{null, null_mut};

use crate::acl::error::{AclError, Result};
use crate::acl::ffi::*;
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{check, IntArray, Tensor};

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
    crate::acl::profile::timed(op, || two_stage_untimed(rt, op, launch, get_workspace))
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

pub(super) fn t(x: Option<&Tensor<'_>>) -> *const AclTensor {
    x.map_or(null(), Tensor::as_ptr)
}

pub(super) fn ia(x: Option<&IntArray>) -> *const AclIntArray {
    x.map_or(null(), IntArray::as_ptr)
}

pub(super) fn attr(param: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| AclError::invalid(param, "attribute string contains a NUL byte"))
}

/// aclnn declares attribute strings `char *` but does not write through them.
pub(super) fn cptr(s: &CString) -> *mut c_char {
    s.as_ptr().cast_mut()
}

pub(super) fn missing(op: &str) -> AclError {
    let where_ = crate::acl::loader::cann_dir()
        .map(|d| format!(" in {}", d.display()))
        .unwrap_or_default();
    AclError::Unsupported(format!("{op} is not available{where_}"))
}

/// An op's entry of the table, or the "not available" error naming it.
pub(super) fn entry<W: Copy>(f: Option<OpFns<W>>, name: &str) -> Result<OpFns<W>> {
    f.ok_or_else(|| missing(name))
}

/// `op!(rt, field)`: `(C name, entry)` of the table's op `field` in `rt`'s API, or the "not
/// available" error naming it.
macro_rules! op {
    ($rt:expr, $field:ident) => {
        $crate::acl::aclnn::call::entry($rt.api().$field, $crate::acl::ffi::names::$field)
            .map(|f| ($crate::acl::ffi::names::$field, f))
    };
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
                    $(Self::$v => $crate::acl::ffi::names::$f),*
                }
            }

            /// The op's entry of `api` (`None` where absent).
            fn entry(self, api: &$crate::acl::ffi::AclApi) -> Option<$crate::acl::ffi::OpFns<$w>> {
                match self {
                    $(Self::$v => api.$f),*
                }
            }
        }
    };
}
