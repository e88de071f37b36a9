//! The fused transformer ops (RMSNorm, rotary embedding, SwiGLU, cross-entropy): their shapes and
//! attributes validated as CANN's docs state them, each error naming the aclnn parameter (`x`,
//! `gamma`, `epsilon`, `rstd`, `dy`, `dimOptional`, `yGrad`, `input`, `target`, `ignoreIndex`,
//! `gradLoss`, `logProb`, `cos`, `sin`, `mode`). Element types are checked where the call is made
//! (dtypes are a backend's concern).

pub mod cross_entropy;
pub mod rms_norm;
pub mod rotary;
pub mod swiglu;

pub use cross_entropy::CrossEntropyDims;
pub use rms_norm::RmsNormDims;
pub use rotary::{RotaryDims, RotaryMode};
pub use swiglu::SwiGluDims;
