//! Linear layers as a Burn backend extension: `y = x · W (+ b)` with the weight in either
//! layout ([`WeightLayout`]: Burn's `[in, out]`, or torch's `[out, in]` — a tied embedding read
//! as the output head), and its two gradients. The default bodies are the composite (Burn's
//! matmul: `aclnnMatmul` on `Ascend`); `NdArray` runs the threaded CPU product
//! ([`burn_ascend_kernels::cpu::linear`]) on the tensors' memory as it lies — no contiguous copy
//! of a transposed weight, no copy of the weight at all; `Autodiff<B, C>` records one node whose
//! backward computes only the gradients its parents need (a frozen LoRA base gets no `dW`).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use crate::error::{AttnError, Result};
use crate::view::ViewBackend;

pub mod api;
mod autodiff;
pub mod composite;
pub mod ndarray;

pub use burn_ascend_kernels::cpu::linear::WeightLayout;

/// Linear layers as a Burn backend extension (see the [module docs](self)). Every method takes
/// `x` / `dy` as matrices (`[M, in]` / `[M, out]`); [`api::linear`] flattens the leading
/// dimensions. Its backends also view tensors under other shapes without a copy
/// ([`ViewBackend`]), which is how a model splits a projection's output into heads.
pub trait LinearBackend: ViewBackend {
    /// `y [M, out] = x [M, in] · W (+ bias [out])`, `W` in `layout`.
    fn linear_fwd(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        layout: WeightLayout,
    ) -> Result<FloatTensor<Self>> {
        composite::linear_fwd::<Self>(x, weight, bias, layout)
    }

    /// `dx [M, in] = dy [M, out] · Wᵀ`.
    fn linear_bwd_x(
        dy: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        layout: WeightLayout,
    ) -> Result<FloatTensor<Self>> {
        composite::linear_bwd_x::<Self>(dy, weight, layout)
    }

    /// The weight's gradient, shaped as the weight: `xᵀ · dy` or `dyᵀ · x`.
    fn linear_bwd_weight(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        layout: WeightLayout,
    ) -> Result<FloatTensor<Self>> {
        composite::linear_bwd_weight::<Self>(x, dy, layout)
    }
}

/// `(inputs, outputs)` of a weight of `shape` in `layout`.
pub fn weight_dims(shape: &[usize], layout: WeightLayout) -> (usize, usize) {
    match layout {
        WeightLayout::InOut => (shape[0], shape[1]),
        WeightLayout::OutIn => (shape[1], shape[0]),
    }
}

/// Checks a forward's shapes and dtypes: `x [M, in]`, a 2-D weight whose `in` matches, a bias
/// `[out]`, all of one dtype. Returns `(M, in, out)`.
pub fn validate<B: Backend>(
    x: &FloatTensor<B>,
    weight: &FloatTensor<B>,
    bias: Option<&FloatTensor<B>>,
    layout: WeightLayout,
) -> Result<(usize, usize, usize)> {
    let (xs, ws) = (x.shape().to_vec(), weight.shape().to_vec());
    if xs.len() != 2 {
        return Err(AttnError::invalid(
            "x",
            format!("must be 2-D [M, in], got {xs:?}"),
        ));
    }
    if ws.len() != 2 {
        return Err(AttnError::invalid(
            "weight",
            format!("must be 2-D, got {ws:?}"),
        ));
    }
    let (k, n) = weight_dims(&ws, layout);
    if xs[1] != k {
        return Err(AttnError::invalid(
            "weight",
            format!(
                "{ws:?} in layout {layout:?} takes {k} inputs, x {xs:?} has {}",
                xs[1]
            ),
        ));
    }
    if weight.dtype() != x.dtype() {
        return Err(AttnError::invalid(
            "weight",
            format!(
                "dtype {:?} differs from x's {:?}",
                weight.dtype(),
                x.dtype()
            ),
        ));
    }
    if let Some(b) = bias {
        if b.shape().to_vec() != [n] {
            return Err(AttnError::invalid(
                "bias",
                format!("must be [{n}], got {:?}", b.shape().to_vec()),
            ));
        }
        if b.dtype() != x.dtype() {
            return Err(AttnError::invalid(
                "bias",
                format!("dtype {:?} differs from x's {:?}", b.dtype(), x.dtype()),
            ));
        }
    }
    Ok((xs[0], k, n))
}
