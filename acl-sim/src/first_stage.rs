//! How the simulation implements a table's function without writing its C signature:
//! `first_stage!(field, |p| { … })` implements [`Implements`] of the aclnn table's op `field`
//! (its first stage), `runtime_fn!(field, |p| { … })` that of its runtime, nnopbase or
//! graph-capture function `field` and `hccl_fn!(field, |p| { … })` that of the HCCL table's
//! function `field` for [`Sim`](crate::Sim), over the function's parameter struct `p` (generated in
//! `burn_ascend_cann` from the prototype, with the C entry point that packs the arguments into
//! it). The registrations take every entry from the tables, so a function without an
//! implementation here does not compile.
//!
//! [`Implements`]: burn_ascend_cann::prototype::Implements

/// Implements the table's function `$marker` for [`crate::Sim`]; `$params` names its parameter
/// struct in `$body`.
macro_rules! implement {
    ($marker:path, |$params:ident| $body:block) => {
        impl burn_ascend_cann::prototype::Implements<$marker> for $crate::Sim {
            unsafe fn call(
                $params: <$marker as burn_ascend_cann::prototype::TableFn>::Params,
            ) -> <<$marker as burn_ascend_cann::prototype::TableFn>::Params as burn_ascend_cann::prototype::Prototype>::Ret
                $body
        }
    };
}

/// The first stage of the aclnn table's op `$field` (see [`implement`]).
macro_rules! first_stage {
    ($field:ident, |$params:ident| $body:block) => {
        implement!(burn_ascend_cann::acl::ffi::op::$field, |$params| $body);
    };
}

/// The HCCL table's function `$field` (see [`implement`]).
macro_rules! hccl_fn {
    ($field:ident, |$params:ident| $body:block) => {
        implement!(burn_ascend_cann::hccl::ffi::func::$field, |$params| $body);
    };
}

/// The runtime, nnopbase or graph-capture function `$field` of the aclnn table (see
/// [`implement`]).
macro_rules! runtime_fn {
    ($field:ident, |$params:ident| $body:block) => {
        implement!(burn_ascend_cann::acl::ffi::func::$field, |$params| $body);
    };
}
