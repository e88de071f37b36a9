//! The view op on Burn tensors: what the model calls.

use burn::tensor::{Shape, Tensor, TensorPrimitive};

use super::ViewBackend;
use crate::error::{AttnError, Result};

/// `t`'s elements, in order, under `shape`: Burn's `Tensor::reshape` without its copy on
/// `NdArray` (a view of the same memory when `t` is contiguous). Refused naming `shape` when
/// the element counts differ.
pub fn reshape<B: ViewBackend, const D1: usize, const D2: usize>(
    t: Tensor<B, D1>,
    shape: [usize; D2],
) -> Result<Tensor<B, D2>> {
    let from = t.dims();
    if from.iter().product::<usize>() != shape.iter().product::<usize>() {
        return Err(AttnError::invalid(
            "shape",
            format!("{shape:?} does not hold the {from:?} tensor's elements"),
        ));
    }
    let y = B::reshape_view(t.into_primitive().tensor(), Shape::from(shape.to_vec()));
    Ok(Tensor::from_primitive(TensorPrimitive::Float(y)))
}
