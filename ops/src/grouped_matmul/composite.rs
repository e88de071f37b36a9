//! The composite grouped matmul: one `matmul` per non-empty group on any backend (an empty
//! group costs nothing with groupType 0 and is a zero block with groupType 2). Validation runs
//! first, so a refused call returns before any tensor operation.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorMetadata, TensorPrimitive};

use super::{shapes, GroupType, GroupedMatmulSpec};
use crate::error::Result;

fn wrap<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// [`super::GroupedMatmulBackend::grouped_matmul`] from Burn primitives.
pub fn grouped_matmul<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    spec: &GroupedMatmulSpec,
) -> Result<FloatTensor<B>> {
    let dims = spec.validate(&shapes::<B>(&x, &weight, bias.as_ref()))?;
    let dt = x.dtype();
    let device = B::float_device(&x);
    let x = wrap::<B, 2>(x);
    let starts = dims.starts();
    let (m, k, n) = (dims.m, dims.k, dims.n);
    let out = match spec.group_type {
        GroupType::M => {
            let weight = wrap::<B, 3>(weight);
            let bias = bias.map(|b| wrap::<B, 2>(b).cast(dt));
            let blocks: Vec<Tensor<B, 2>> = dims
                .sizes
                .iter()
                .zip(&starts)
                .enumerate()
                .filter(|(_, (&size, _))| size > 0)
                .map(|(g, (&size, &start))| {
                    let w = weight.clone().narrow(0, g, 1).reshape([k, n]);
                    let y = x.clone().narrow(0, start, size).matmul(w);
                    match &bias {
                        Some(b) => y + b.clone().narrow(0, g, 1),
                        None => y,
                    }
                })
                .collect();
            if blocks.is_empty() {
                Tensor::<B, 2>::zeros([m, n], &device).cast(dt)
            } else {
                Tensor::cat(blocks, 0)
            }
            .into_primitive()
            .tensor()
        }
        GroupType::K => {
            let weight = wrap::<B, 2>(weight);
            let blocks: Vec<Tensor<B, 3>> = dims
                .sizes
                .iter()
                .zip(&starts)
                .map(|(&size, &start)| {
                    if size == 0 {
                        return Tensor::<B, 3>::zeros([1, m, n], &device).cast(dt);
                    }
                    let y = x
                        .clone()
                        .narrow(1, start, size)
                        .matmul(weight.clone().narrow(0, start, size));
                    y.reshape([1, m, n])
                })
                .collect();
            Tensor::cat(blocks, 0).into_primitive().tensor()
        }
    };
    Ok(out)
}
