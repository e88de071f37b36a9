//! A tensor's elements under another shape, as a Burn backend extension: what the model does
//! between a projection's `[T, N·D]` and attention's `[T, N, D]`, and around the rotary
//! embedding's `[1, T, N, D]`. The default body is the backend's own reshape (metadata only on
//! `Ascend`); `NdArray` returns a view of the same memory when the array is in standard layout
//! — Burn 0.21's `NdArray` reshape copies every array, and under `Autodiff` its node copies the
//! gradient back, six copies of a layer's activations each way in a training step;
//! `Autodiff<B, C>` records one node whose backward views the gradient under the input's shape.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Shape;

pub mod api;
mod autodiff;
mod ndarray;

/// Reshapes without a copy where the backend can (see the [module docs](self)).
pub trait ViewBackend: Backend {
    /// `t`'s elements, in order, under `shape` (the same element count, checked by
    /// [`api::reshape`]).
    fn reshape_view(t: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        Self::float_reshape(t, shape)
    }
}
