//! burn-ascend-ops' integration tests, one binary: a module per suite.

mod grouped_matmul;
mod varlen_validation;
