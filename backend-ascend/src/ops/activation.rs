//! Activations: Burn's defaults, composed of the float ops (native where those are).

use burn_backend::ops::ActivationOps;

use crate::Ascend;

impl ActivationOps<Self> for Ascend {}
