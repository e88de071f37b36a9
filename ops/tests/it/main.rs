//! burn-ascend-ops' integration tests, one binary: a module per suite.

mod common;
mod fused;
mod grouped_matmul;
mod linear;
mod varlen_carrier;
mod varlen_validation;
