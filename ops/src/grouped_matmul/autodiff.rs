//! `Autodiff<B, C>`: the groupType-0 grouped matmul is one graph node whose backward is
//! MindSpeed's `npu_gmm_backward` (`dx` a groupType-0 grouped matmul of `dy` with the
//! transposed weights, `dW` a groupType-2 one of `xᵀ` and `dy`), both on the inner backend, so
//! on `Ascend` the backward runs as aclnn grouped matmuls too; `dbias` is the per-group row sum
//! of `dy`, computed as the groupType-2 product of a row of ones with `dy`. A groupType-2 call
//! (nobody differentiates a weight gradient) runs the composite, which Burn differentiates.
//!
//! Lives in the crate that defines the trait (Rust's orphan rule).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::Autodiff;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorMetadata, TensorPrimitive};

use super::{composite, GroupType, GroupedMatmulBackend, GroupedMatmulSpec};
use crate::common::autodiff::stateful_node;
use crate::error::Result;

#[derive(Debug)]
struct GroupedMatmulBackward;

/// Saved for the backward: the inputs (inner primitives), the bias's dtype and the spec.
#[derive(Debug, Clone)]
struct GroupedMatmulState<B: GroupedMatmulBackend> {
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias_dtype: Option<DType>,
    spec: GroupedMatmulSpec,
}

/// The gradients of a groupType-0 grouped matmul.
#[derive(Debug, Clone)]
pub struct GroupedMatmulGrads<B: GroupedMatmulBackend> {
    /// `[M, K]`.
    pub dx: FloatTensor<B>,
    /// `[g, K, N]`.
    pub dweight: FloatTensor<B>,
    /// `[g, N]` in the bias's dtype, when there was a bias.
    pub dbias: Option<FloatTensor<B>>,
}

/// The gradients of `y = grouped_matmul(x, weight, bias)` (groupType 0) given `dy [M, N]`, each
/// by the inner backend's grouped matmul.
pub fn grouped_matmul_grads<B: GroupedMatmulBackend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias_dtype: Option<DType>,
    spec: &GroupedMatmulSpec,
) -> Result<GroupedMatmulGrads<B>> {
    let m_spec = spec.with_group_type(GroupType::M);
    let k_spec = spec.with_group_type(GroupType::K);
    let weight_t = B::float_swap_dims(weight, 1, 2);
    let dx = B::grouped_matmul(dy.clone(), weight_t, None, &m_spec)?;
    let x_t = B::float_swap_dims(x, 0, 1);
    let dw = B::grouped_matmul(x_t, dy.clone(), None, &k_spec)?;
    let dbias = match bias_dtype {
        Some(bdt) => {
            let [m, n] = dy.shape().dims::<2>();
            let device = B::float_device(&dy);
            let ones = Tensor::<B, 2>::ones([1, m], &device)
                .cast(dy.dtype())
                .into_primitive()
                .tensor();
            let db = B::grouped_matmul(ones, dy, None, &k_spec)?;
            let g = spec.group_list.len();
            let db = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(db))
                .reshape([g, n])
                .cast(bdt);
            Some(db.into_primitive().tensor())
        }
        None => None,
    };
    Ok(GroupedMatmulGrads {
        dx,
        dweight: dw,
        dbias,
    })
}

impl<B: GroupedMatmulBackend> Backward<B, 3> for GroupedMatmulBackward {
    type State = GroupedMatmulState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let dy = grads.consume::<B>(&ops.node);
        let s = ops.state;
        // The forward validated the same shapes, so a failure here is a backend fault.
        let g = grouped_matmul_grads::<B>(dy, s.x, s.weight, s.bias_dtype, &s.spec)
            .unwrap_or_else(|e| panic!("grouped matmul backward failed: {e}"));
        let [px, pw, pb] = ops.parents;
        for (parent, grad) in [(px, Some(g.dx)), (pw, Some(g.dweight)), (pb, g.dbias)] {
            if let (Some(node), Some(grad)) = (parent, grad) {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: GroupedMatmulBackend, C: CheckpointStrategy> GroupedMatmulBackend for Autodiff<B, C> {
    fn grouped_matmul(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        spec: &GroupedMatmulSpec,
    ) -> Result<FloatTensor<Self>> {
        if spec.group_type == GroupType::K {
            return composite::grouped_matmul::<Self>(x, weight, bias, spec);
        }
        // Without a bias the third parent is x again and never receives a gradient.
        let prep = stateful_node::<C, _, _, _>(
            GroupedMatmulBackward,
            [&x, &weight, bias.as_ref().unwrap_or(&x)],
        );
        let bias_dtype = bias.as_ref().map(|b| b.primitive.dtype());
        let (xp, wp) = (x.primitive, weight.primitive);
        let out = B::grouped_matmul(xp.clone(), wp.clone(), bias.map(|b| b.primitive), spec)?;
        Ok(match prep {
            OpsKind::Tracked(prep) => prep.finish(
                GroupedMatmulState {
                    x: xp,
                    weight: wp,
                    bias_dtype,
                    spec: spec.clone(),
                },
                out,
            ),
            OpsKind::UnTracked(prep) => prep.finish(out),
        })
    }
}
