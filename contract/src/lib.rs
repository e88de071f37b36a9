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
//! Each op's `problem` module is its plain-data description — layouts, modes, the argument
//! struct of one call over host slices, the addressing and masking rules — which the f64
//! reference and the fast CPU kernels (`burn-ascend-kernels`) compute from. Element types are
//! `aclDataType`s ([`DataType`]) and host elements implement [`Element`]: this crate depends on
//! no tensor library, on no CANN binding and on no other crate of the project.

pub mod broadcast;
mod checked;
pub mod dropout;
pub mod dtype;
pub mod element;
pub mod error;
pub mod fia;
pub mod fused;
pub mod grouped_matmul;
pub mod incre;
pub mod moe_gating;
pub mod optim;
pub mod post_quant;
pub mod prompt;
pub mod release;
pub mod scatter;
pub mod varlen;

pub use dtype::DataType;
pub use element::Element;
pub use error::{AttnError, Result};
pub use release::{CannRelease, DsinkPostStep};
