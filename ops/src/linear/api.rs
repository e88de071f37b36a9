//! The linear op on Burn tensors: what the model calls.

use burn::tensor::{Tensor, TensorPrimitive};

use super::{LinearBackend, WeightLayout};
use crate::error::Result;

/// `x · W (+ bias)` over the last dimension of `x` (`[..., in]` → `[..., out]`), the weight in
/// `layout`: Burn's `Linear` holds `[in, out]`, a tied embedding read as the output head
/// `[out, in]`. Differentiable in all three through one node under `Autodiff`.
pub fn linear<B: LinearBackend, const D: usize>(
    x: Tensor<B, D>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    layout: WeightLayout,
) -> Result<Tensor<B, D>> {
    let dims = x.dims();
    let k = dims[D - 1];
    let m = dims[..D - 1].iter().product::<usize>();
    let x2 = x.reshape([m, k]);
    let y = B::linear_fwd(
        x2.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.map(|b| b.into_primitive().tensor()),
        layout,
    )?;
    let y = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(y));
    let n = y.dims()[1];
    let mut out = dims;
    out[D - 1] = n;
    Ok(y.reshape(out))
}
