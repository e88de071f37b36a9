//! The Ascend Burn backend: `type B = Autodiff<Ascend>` trains an ordinary Burn model with its
//! tensors in NPU memory (or in the host simulation of CANN's ABI, [`AscendDevice::sim`]).
//!
//! Layout as `burn-tch`: [`backend`] (the backend type), [`device`], [`element`], [`tensor`]
//! (the primitive: device buffer, shape, element strides, offset, dtype), `tensor_ops/` (one file
//! per op trait). Native ops call aclnn through `burn_ascend_cann::acl`; everything else
//! runs through the counted host [`fallback`]. The attention ops of this project run natively
//! through [`burn_ascend_ops::AttentionBackend`] ([`attention`]).
//!
//! [`graph`]: ACL graph capture of a closure of ops into a [`CapturedGraph`] replayed as one
//! launch, with its inputs rewritten in place between replays ([`write_in_place`]).
//!
//! Device memory comes from a caching pool per device ([`memory`]: segments split into blocks
//! and merged again, [`empty_cache`], [`memory_stats`]).
//!
//! `unsafe` lives only in the storage modules [`tensor`] and [`memory`] (`Send`/`Sync` of the
//! device storage and of segments, and the blocks' views of their segments, with their
//! justification); aclnn calls go through the kernels crate's safe wrappers.

pub mod attention;
pub mod backend;
pub mod collective;
pub mod device;
pub mod element;
pub mod fallback;
pub mod fused;
pub mod graph;
mod grouped_matmul;
mod linear;
pub mod memory;
mod moe_gating;
mod optim;
pub mod profile;
pub mod qtensor;
pub mod release;
pub mod tensor;
mod tensor_ops;

pub use backend::Ascend;
pub use device::{device_counters, is_available, synchronize, AscendDevice, AscendKind};
pub use fallback::{fallback_count, fallback_counts};
pub use graph::{capture, write_in_place, CapturedGraph, GraphError};
pub use memory::{
    empty_cache, memory_stats, record_large_requests, reserve_large, reserve_small,
    reset_peak_stats, take_large_requests, MemoryStats,
};
pub use optim::adamw_step_in_place;
pub use qtensor::AscendQTensor;
pub use tensor::AscendTensor;
// The error of the collectives ([`collective::ProcessGroup`]), for callers that map it.
pub use burn_ascend_cann::hccl::HcclError;
