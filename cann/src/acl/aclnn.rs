//! One function per aclnn op, over handles, one module per op (or family of elementwise
//! ops). Every argument of the C prototype is a named field of the op's argument struct, passed
//! in prototype order in exactly one place; the two-stage call (`GetWorkspaceSize` → workspace
//! → launch) is [`two_stage`].
//!
//! Launches are asynchronous on the runtime's stream; callers synchronise before reading
//! results (the attention call builders in `burn_ascend_backend::attention::builders` do).

// Declared first: it defines the `op!` and `op_enum!` macros the others use.
#[macro_use]
mod call;
mod elementwise;
mod fia;
mod fused;
mod grouped_matmul;
mod incre;
mod index;
mod math;
mod moe_gating;
mod optim;
mod prompt;
mod scatter;
mod varlen;

pub use call::two_stage;
pub use elementwise::*;
pub use fia::*;
pub use fused::*;
pub use grouped_matmul::*;
pub use incre::*;
pub use index::*;
pub use math::*;
pub use moe_gating::*;
pub use optim::*;
pub use prompt::*;
pub use scatter::*;
pub use varlen::*;
