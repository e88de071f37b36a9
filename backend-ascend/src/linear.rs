//! Linear layers on Ascend (`burn_ascend_ops::LinearBackend`): the composite, so the forward and
//! both gradients are Burn's matmul — `aclnnMatmul` on the device, a transposed weight passed
//! as the strided view it is.

use burn_ascend_ops::LinearBackend;

use crate::Ascend;

impl LinearBackend for Ascend {}
