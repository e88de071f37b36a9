//! HCCL, CANN's collective communication library (the NCCL of Ascend, what torch_npu's
//! `ProcessGroupHCCL` uses), called from Rust with `libhccl.so` opened at **run time**, like
//! aclnn: nothing of CANN is needed to build.
//!
//! - [`ffi`]: the C ABI (handle, `HcclResult` / `HcclDataType` / `HcclReduceOp` values,
//!   `HcclRootInfo`, prototypes) and [`HcclApi`], the function table generated from the one
//!   list in [`hccl_api_table!`](crate::hccl_api_table);
//! - [`loader`]: `libhccl.so` from the toolkit the ACL runtime was loaded from;
//! - [`Communicator`]: an RAII communicator (`HcclCommInitAll` for one process driving N
//!   devices, `HcclCommInitRootInfo` for one process per device) and the collectives data
//!   parallelism needs (`HcclAllReduce`, `HcclBroadcast`, `HcclAllGather`,
//!   `HcclReduceScatter`, `HcclBarrier`), queued on a
//!   [`Runtime`](crate::acl::Runtime)'s stream;
//! - [`launch`]: torchrun's launch variables and the root-info rendezvous over TCP;
//! - [`HcclError`]: typed errors carrying the call, the rank and the HCCL status.
//!
//! The second way to fill the table, a **host simulation of HCCL (not CANN)** with N simulated
//! devices in one process, is in the crate `burn-ascend-acl-sim` (`hccl_api()`).
//!
//! `unsafe` is confined to `loader` and `comm` (the calls through the table), each block with
//! a `// SAFETY:` line.

mod comm;
mod error;
pub mod ffi;
pub mod launch;
pub mod loader;

pub use comm::{root_info, Communicator};
pub use error::HcclError;
pub use ffi::{names, HcclApi, HcclDataType, HcclRootInfo, ReduceOp, HCCL_ROOT_INFO_BYTES};
pub use launch::LaunchEnv;
