//! Linear layers on Ascend (`burn_ascend_ops::LinearBackend`): the composite, so the forward and
//! both gradients are Burn's matmul — `aclnnMatmul` on the device, a transposed weight passed
//! as the strided view it is. The views of their outputs (`ViewBackend`, which the linear op's
//! backends implement) are the backend's reshape, metadata only.

use burn_ascend_ops::{LinearBackend, ViewBackend};

use crate::Ascend;

impl LinearBackend for Ascend {}

impl ViewBackend for Ascend {}
