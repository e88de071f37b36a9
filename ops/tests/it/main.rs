//! burn-ascend-ops' integration tests, one binary: a module per suite.

mod common;
mod fused;
mod grouped_matmul;
mod host;
mod linear;
mod prompt_prefill;
mod squares_sum;
mod varlen_carrier;
mod varlen_validation;
mod view;
