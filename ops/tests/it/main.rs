//! burn-ascend-ops' integration tests, one binary: a module per suite.

mod fused;
mod varlen_validation;
