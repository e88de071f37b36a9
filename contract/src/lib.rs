//! The op contract of burn-ascend, free of Burn: CANN's five attention operators as parameter
//! structs named after their aclnn parameters ([`varlen::VarlenSpec`],
//! [`prompt::PromptSpec`], [`incre::IncreSpec`], [`scatter::ScatterSpec`]), the validation of
//! every documented constraint, and the typed [`AttnError`] that names the broken parameter.
//!
//! Everything that speaks to an op shares this one vocabulary: the Burn extension trait and
//! its backends (`burn-ascend-ops`, `burn-ascend-backend`), the aclnn call builders, the
//! op-replay CLI, and the simulation. Each enum converts to and from its aclnn attribute in
//! exactly one place (`as_attr` / `from_attr`).
//!
//! Element types are `aclDataType`s ([`DataType`]), so nothing here depends on a tensor
//! library.

mod checked;
pub mod dtype;
pub mod error;
pub mod fia;
pub mod fused;
pub mod incre;
pub mod prompt;
pub mod scatter;
pub mod varlen;

pub use dtype::DataType;
pub use error::{AttnError, Result};
