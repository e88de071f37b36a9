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

/// Declares that the prototype `$narrow` is `$wide`'s less some parameters, as an op's older
/// entry point is its newer version's (varlen base and V5, PFA V1 and V3, FIA base and V4):
/// `$same` lists the parameters both have, `$only` the ones only `$wide` has with the value that
/// means what the narrow op does without them. A call builds the wide op's arguments once and
/// narrows them (`to_narrow`) when it calls the older op; the simulation widens a call of the
/// older op (`to_wide`) and runs it as the newer one.
///
/// ```text
/// narrower_prototype!(VarlenFwdBaseParams, VarlenFwdV5Params, [query, key, …], [sink: null, pse_type: 1, …]);
/// ```
macro_rules! narrower_prototype {
    ($narrow:ident, $wide:ident, [$($same:ident),* $(,)?], [$($only:ident: $meaning:expr),* $(,)?]) => {
        impl $wide {
            #[doc = concat!("These arguments for [`", stringify!($narrow), "`]: the ones it lacks are")]
            /// dropped (a caller narrows only a call that gives none of them).
            pub fn to_narrow(self) -> $narrow {
                $narrow { $($same: self.$same),* }
            }
        }

        impl $narrow {
            #[doc = concat!("This call as [`", stringify!($wide), "`] runs it: what that adds takes")]
            /// the value that means what this op does without it.
            pub fn to_wide(self) -> $wide {
                $wide { $($same: self.$same,)* $($only: $meaning),* }
            }
        }
    };
}
