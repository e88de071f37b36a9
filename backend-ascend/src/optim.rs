//! The optimizer step of issue 27 on Ascend (`burn_ascend_ops::OptimBackend`).

use burn_ascend_ops::optim::OptimBackend;

use crate::Ascend;

impl OptimBackend for Ascend {}
