//! The linear op on Burn tensors: what the model calls.

use burn::tensor::{Tensor, TensorPrimitive};

use super::{LinearBackend, WeightLayout};
use crate::error::Result;
use crate::view::api::reshape;

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
    // A 2-D input goes in as it is; others are viewed as matrices (Burn's `NdArray` reshape
    // copies, and its `Autodiff` node copies the gradient back, which for a language model's
    // head was a copy of the logits each way).
    let x2 = if D == 2 {
        x.into_primitive().tensor()
    } else {
        reshape(x, [m, k])?.into_primitive().tensor()
    };
    let y = B::linear_fwd(
        x2,
        weight.into_primitive().tensor(),
        bias.map(|b| b.into_primitive().tensor()),
        layout,
    )?;
    if D == 2 {
        return Ok(Tensor::from_primitive(TensorPrimitive::Float(y)));
    }
    let y = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(y));
    let n = y.dims()[1];
    let mut out = dims;
    out[D - 1] = n;
    reshape(y, out)
}
