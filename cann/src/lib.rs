//! CANN's bindings for burn-ascend, loaded at **run time** (nothing of CANN is needed to build):
//!
//! - [`acl`]: the ACL runtime, the aclnn function table and one function per aclnn op, the
//!   loader; the host simulation of the same ABI that CI runs is the crate
//!   `burn-ascend-acl-sim`.
//! - [`hccl`]: HCCL collectives for data-parallel training.
//!
//! The element types (`aclDataType`) are the op vocabulary's, defined in the Burn-free
//! contract (`burn_ascend_contract::DataType`) and re-exported here as [`acl::DataType`].

// Declared first: it defines the `c_prototype!` macro the FFI modules use.
#[macro_use]
pub mod prototype;
pub mod acl;
pub mod hccl;
