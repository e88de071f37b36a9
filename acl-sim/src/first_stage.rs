//! How the simulation implements an aclnn op's first stage without writing its C signature:
//! `first_stage!(field, |params| { let XParams { … } = params; … })` implements
//! [`FirstStage`](burn_ascend_cann::acl::ffi::FirstStage) of the table's op `field` for
//! [`Sim`](crate::Sim), over the op's parameter struct (generated in `burn_ascend_cann` from
//! the prototype, with the C entry point that packs the arguments into it). The registration
//! (`crate::register`) takes every op's entry from the table, so an op without an
//! implementation here does not compile.

/// Implements the first stage of the table's op `$field` for [`crate::Sim`]; `$params` names
/// the op's parameter struct in `$body`.
macro_rules! first_stage {
    ($field:ident, |$params:ident| $body:block) => {
        impl
            burn_ascend_cann::acl::ffi::FirstStage<burn_ascend_cann::acl::ffi::op::$field>
            for $crate::Sim
        {
            unsafe fn first_stage(
                $params: <burn_ascend_cann::acl::ffi::op::$field as burn_ascend_cann::acl::ffi::AclnnOp>::Params,
            ) -> burn_ascend_cann::acl::ffi::AclStatus $body
        }
    };
}
