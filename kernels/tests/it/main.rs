//! burn-ascend-kernels' integration tests, one binary: a module per suite. (The simulated
//! aclnn ops are tested in `acl-sim/tests/it`.)
//!
//! Process-wide state: none of these suites changes any. The kernels' scratch buffers are
//! thread-local, and the tests that depend on the thread count build local rayon pools.

mod common;

mod cpu_decode;
mod cpu_varlen;
mod fia_fast;
mod fia_reference;
mod fused;
mod varlen_forward;
mod varlen_forward_features;
mod varlen_gradcheck;
