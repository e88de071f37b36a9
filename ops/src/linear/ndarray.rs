//! `NdArray` runs the threaded CPU product on the operands' memory as it lies: a row-major or
//! transposed f32 array is read in place (the weight is never copied, nor re-laid out per
//! call); only a view with gaps (a narrowed slice) is copied first. Other dtypes, and other
//! backends calling these host functions, take the composite.

use burn::backend::ndarray::NdArrayTensor;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, TensorMetadata};

use burn_ascend_kernels::cpu::gemm::Mat;
use burn_ascend_kernels::cpu::linear as cpu;

use super::{composite, validate, weight_dims, LinearBackend, WeightLayout};
use crate::common::ndarray::ndarray_on_host;
use crate::error::Result;
use crate::host::{from_vec, to_vec};

ndarray_on_host! {
    LinearBackend {
        fn linear_fwd(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            bias: Option<FloatTensor<Self>>,
            layout: WeightLayout,
        ) -> Result<FloatTensor<Self>> => cpu_linear_fwd;
        fn linear_bwd_x(dy: FloatTensor<Self>, weight: FloatTensor<Self>, layout: WeightLayout)
            -> Result<FloatTensor<Self>> => cpu_linear_bwd_x;
        fn linear_bwd_weight(x: FloatTensor<Self>, dy: FloatTensor<Self>, layout: WeightLayout)
            -> Result<FloatTensor<Self>> => cpu_linear_bwd_weight;
    }
}

/// A 2-D f32 operand: a view of an `NdArray` array's memory, or a row-major copy.
enum Operand<'a> {
    Borrowed(Mat<'a>),
    Copied(Vec<f32>, usize, usize),
}

impl Operand<'_> {
    /// The operand as a strided matrix view.
    fn mat(&self) -> Mat<'_> {
        match self {
            Self::Copied(v, rows, cols) => Mat::row_major(v, *rows, *cols, *cols),
            Self::Borrowed(m) => *m,
        }
    }
}

/// The 2-D f32 array of `nd` as a view of its memory, when its elements fill one slice
/// (row-major or transposed, no gaps, non-negative strides).
fn borrowed_mat(nd: &NdArrayTensor) -> Option<Mat<'_>> {
    let NdArrayTensor::F32(storage) = nd else {
        return None;
    };
    let view = storage.view();
    if view.ndim() != 2 || view.strides().iter().any(|&s| s < 0) {
        return None;
    }
    let data = view.to_slice_memory_order()?;
    let (shape, strides) = (view.shape(), view.strides());
    // Non-negative strides and no gaps: element (0, 0) is the slice's first.
    Some(Mat {
        data,
        rows: shape[0],
        cols: shape[1],
        rs: strides[0] as usize,
        cs: strides[1] as usize,
    })
}

/// `t` (2-D f32, `rows × cols`) as an operand: `t`'s own memory when it is an `NdArray` array
/// without gaps, else a row-major copy.
fn operand<B: Backend>(t: &FloatTensor<B>) -> Operand<'_> {
    use std::any::Any;
    let any: &dyn Any = t;
    if let Some(m) = any.downcast_ref::<NdArrayTensor>().and_then(borrowed_mat) {
        return Operand::Borrowed(m);
    }
    let [rows, cols] = t.shape().dims::<2>();
    Operand::Copied(to_vec::<B>(t.clone()), rows, cols)
}

/// The weight's `[in, out]` view.
fn in_out(w: Mat<'_>, layout: WeightLayout) -> Mat<'_> {
    match layout {
        WeightLayout::InOut => w,
        WeightLayout::OutIn => w.t(),
    }
}

/// Whether the kernel takes these operands (f32); others run the composite.
fn f32_only<B: Backend>(ts: &[&FloatTensor<B>]) -> bool {
    ts.iter().all(|t| t.dtype() == DType::F32)
}

/// The forward through the CPU kernel, for any backend.
pub fn cpu_linear_fwd<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    layout: WeightLayout,
) -> Result<FloatTensor<B>> {
    let (m, _, n) = validate::<B>(&x, &weight, bias.as_ref(), layout)?;
    if !f32_only::<B>(&[&x, &weight]) {
        return composite::linear_fwd::<B>(x, weight, bias, layout);
    }
    let device = B::float_device(&x);
    let b = bias.map(|b| to_vec::<B>(b));
    let (xo, wo) = (operand::<B>(&x), operand::<B>(&weight));
    let y = cpu::linear_fwd(xo.mat(), in_out(wo.mat(), layout), b.as_deref());
    Ok(from_vec::<B>(y, &[m, n], &device))
}

/// `dx` through the CPU kernel, for any backend.
pub fn cpu_linear_bwd_x<B: Backend>(
    dy: FloatTensor<B>,
    weight: FloatTensor<B>,
    layout: WeightLayout,
) -> Result<FloatTensor<B>> {
    if !f32_only::<B>(&[&dy, &weight]) {
        return composite::linear_bwd_x::<B>(dy, weight, layout);
    }
    let (k, _) = weight_dims(&weight.shape().to_vec(), layout);
    let m = dy.shape().dims::<2>()[0];
    let device = B::float_device(&dy);
    let (dyo, wo) = (operand::<B>(&dy), operand::<B>(&weight));
    let dx = cpu::linear_dx(dyo.mat(), in_out(wo.mat(), layout));
    Ok(from_vec::<B>(dx, &[m, k], &device))
}

/// `dW` through the CPU kernel, for any backend.
pub fn cpu_linear_bwd_weight<B: Backend>(
    x: FloatTensor<B>,
    dy: FloatTensor<B>,
    layout: WeightLayout,
) -> Result<FloatTensor<B>> {
    if !f32_only::<B>(&[&x, &dy]) {
        return composite::linear_bwd_weight::<B>(x, dy, layout);
    }
    let (k, n) = (x.shape().dims::<2>()[1], dy.shape().dims::<2>()[1]);
    let device = B::float_device(&x);
    let (xo, dyo) = (operand::<B>(&x), operand::<B>(&dy));
    let dw = cpu::linear_dw(xo.mat(), dyo.mat(), layout);
    let shape = match layout {
        WeightLayout::InOut => [k, n],
        WeightLayout::OutIn => [n, k],
    };
    Ok(from_vec::<B>(dw, &shape, &device))
}
