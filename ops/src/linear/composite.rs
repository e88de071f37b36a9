//! The linear op composed of Burn primitives, for every backend (on `Ascend`, Burn's matmul is
//! `aclnnMatmul`).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use super::{validate, WeightLayout};
use crate::error::Result;

/// The weight as the `[in, out]` matrix the forward multiplies by (a view).
fn in_out<B: Backend>(weight: FloatTensor<B>, layout: WeightLayout) -> FloatTensor<B> {
    match layout {
        WeightLayout::InOut => weight,
        WeightLayout::OutIn => B::float_swap_dims(weight, 0, 1),
    }
}

/// `x · W (+ bias)`.
pub fn linear_fwd<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    layout: WeightLayout,
) -> Result<FloatTensor<B>> {
    let (_, _, n) = validate::<B>(&x, &weight, bias.as_ref(), layout)?;
    let y = B::float_matmul(x, in_out::<B>(weight, layout));
    Ok(match bias {
        Some(b) => B::float_add(y, B::float_reshape(b, [1, n].into())),
        None => y,
    })
}

/// `dy · Wᵀ`.
pub fn linear_bwd_x<B: Backend>(
    dy: FloatTensor<B>,
    weight: FloatTensor<B>,
    layout: WeightLayout,
) -> Result<FloatTensor<B>> {
    let w = in_out::<B>(weight, layout);
    Ok(B::float_matmul(dy, B::float_swap_dims(w, 0, 1)))
}

/// `xᵀ · dy` (`[in, out]`) or `dyᵀ · x` (`[out, in]`).
pub fn linear_bwd_weight<B: Backend>(
    x: FloatTensor<B>,
    dy: FloatTensor<B>,
    layout: WeightLayout,
) -> Result<FloatTensor<B>> {
    debug_assert_eq!(x.shape().dims::<2>()[0], dy.shape().dims::<2>()[0]);
    Ok(match layout {
        WeightLayout::InOut => B::float_matmul(B::float_swap_dims(x, 0, 1), dy),
        WeightLayout::OutIn => B::float_matmul(B::float_swap_dims(dy, 0, 1), x),
    })
}
