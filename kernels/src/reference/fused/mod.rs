//! The f64 references of the fused transformer ops (one launch each where a training step ran
//! several): RMSNorm (`aclnnRmsNorm` /
//! `aclnnRmsNormGrad`), rotary position embedding (`aclnnRotaryPositionEmbedding` /
//! `aclnnRotaryPositionEmbeddingGrad`), SwiGLU (`aclnnSwiGlu` / `aclnnSwiGluGrad`) and softmax
//! cross-entropy (`aclnnCrossEntropyLoss` / `aclnnCrossEntropyLossGrad`), each as CANN's docs
//! state the formula: plain loops, f64 throughout. The oracle of the fast CPU kernels
//! ([`crate::cpu::fused`]), of the composite on Burn and of the simulation.

// Plain index loops on purpose: the references read as the docs' formulas.
#![allow(clippy::needless_range_loop)]

pub mod cross_entropy;
pub mod rms_norm;
pub mod rotary;
pub mod swiglu;
