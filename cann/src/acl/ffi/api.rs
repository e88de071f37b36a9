//! [`AclApi`], the function table, with [`names`], [`op`] and [`func`], generated from the
//! one list of [`super::table`].

use std::ffi::c_void;

use super::{AclOpExecutor, AclStatus, AclrtStream, Prototype};

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
        /// its parameter struct and C name ([`TableFn`](crate::prototype::TableFn)), e.g. for the simulation's
        /// [`Implements`](crate::prototype::Implements) of each op's first stage.
        pub mod op {
            table_markers! { $($f: $c($p)),* }
        }

        /// One marker type per runtime, nnopbase and graph-capture function of the table,
        /// named by its field ([`TableFn`](crate::prototype::TableFn)), as [`op`] for the aclnn ops.
        pub mod func {
            table_markers! { $($rf: $rc($rp),)* $($gf: $gc($gp)),* }
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
