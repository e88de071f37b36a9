//! The fused transformer ops (RMSNorm, SwiGLU, rotary position embedding, softmax
//! cross-entropy): no bundle replay, the selftest's cases only.

pub mod selftest;
