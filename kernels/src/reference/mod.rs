//! The CPU reference: plain loops, f64 accumulation, no tiling, no parallelism.
//!
//! Every faster path (the fast CPU kernels, the composite Burn path, the Ascend dispatch) is
//! tested against these functions, so they follow the spec line by line and nothing else.

pub mod fia;
pub mod fused;
pub mod grouped_matmul;
pub mod incre;
pub mod moe_gating;
pub mod optim;
pub mod prompt;
pub mod scatter;
pub mod varlen;

#[cfg(test)]
mod test_util;
