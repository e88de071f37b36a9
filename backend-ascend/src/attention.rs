//! The attention ops of this project on Ascend (`burn_ascend_ops::AttentionBackend`).

use burn_ascend_ops::AttentionBackend;

use crate::Ascend;

impl AttentionBackend for Ascend {}
