//! burn-ascend-ops' integration tests, one binary: a module per suite.

mod varlen_validation;
