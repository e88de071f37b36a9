//! The host simulation of the ACL ABI and the dispatch layer over it, in one test binary (one
//! module per former test file).

mod attention;
mod attention_fallbacks;
mod cost;
mod elementwise;
mod faults;
mod fia;
mod fia_sink;
mod fused;
mod graph_capture;
mod grouped_matmul;
mod guard;
mod hccl;
mod hccl_processes;
mod host_overhead;
mod index;
mod infer_dtypes;
mod leaks;
mod loader;
mod math;
mod moe_gating;
mod random_bounds;
mod streams;
