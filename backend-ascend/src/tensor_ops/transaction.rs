//! Transactions: Burn's default (each tensor's `into_data`, a device-to-host copy).

use burn_backend::ops::TransactionOps;

use crate::Ascend;

impl TransactionOps<Self> for Ascend {}
