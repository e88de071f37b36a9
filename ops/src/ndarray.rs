//! `NdArray` runs the CPU kernels (the reference, until the fast kernels land) on the tensors'
//! host memory instead of the composite.

use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::backend::NdArray;
use burn::tensor::backend::Backend;

use burn_ascend_kernels::reference::varlen as reference;

use crate::backend::{
    AttentionBackend, VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs,
};
use crate::error::Result;
use crate::host::{from_vec, to_vec};
use crate::varlen::composite::{bwd_shapes, shapes};
use crate::varlen::VarlenSpec;

impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> AttentionBackend
    for NdArray<E, I, Q>
where
    NdArrayTensor: From<SharedArray<E>>,
    NdArrayTensor: From<SharedArray<I>>,
{
    fn varlen_fwd(inputs: VarlenInputs<Self>, spec: &VarlenSpec) -> Result<VarlenOutputs<Self>> {
        cpu_varlen_fwd::<Self>(inputs, spec)
    }

    fn varlen_bwd(inputs: VarlenGradInputs<Self>, spec: &VarlenSpec) -> Result<VarlenGrads<Self>> {
        cpu_varlen_bwd::<Self>(inputs, spec)
    }
}

/// The varlen forward on host memory through the CPU kernels, for any backend.
pub fn cpu_varlen_fwd<B: Backend>(
    inputs: VarlenInputs<B>,
    spec: &VarlenSpec,
) -> Result<VarlenOutputs<B>> {
    let dims = spec.validate_fwd(&shapes(&inputs))?;
    let device = B::float_device(&inputs.query);
    let sink = inputs.sink.map(to_vec::<B>);
    let (t, n, dv) = (dims.t_q(), dims.head_num, dims.value_dim);
    let p = spec.problem(dims, sink.as_deref());
    let out = reference::varlen_fwd(
        &p,
        &to_vec::<B>(inputs.query),
        &to_vec::<B>(inputs.key),
        &to_vec::<B>(inputs.value),
    );
    Ok(VarlenOutputs {
        attention_out: from_vec::<B>(out.attention_out, &[t, n, dv], &device),
        softmax_max: from_vec::<B>(out.softmax_max, &[t, n, 8], &device),
        softmax_sum: from_vec::<B>(out.softmax_sum, &[t, n, 8], &device),
    })
}

/// The varlen backward on host memory through the CPU kernels, for any backend.
pub fn cpu_varlen_bwd<B: Backend>(
    inputs: VarlenGradInputs<B>,
    spec: &VarlenSpec,
) -> Result<VarlenGrads<B>> {
    let dims = spec.validate_bwd(&shapes(&inputs.inputs), &bwd_shapes(&inputs))?;
    let device = B::float_device(&inputs.dy);
    let VarlenGradInputs {
        inputs: fwd,
        dy,
        attention_in,
        softmax_max,
        softmax_sum,
    } = inputs;
    let sink = fwd.sink.map(to_vec::<B>);
    let (tq, tkv, n, nkv, d, dv) = (
        dims.t_q(),
        dims.t_kv(),
        dims.head_num,
        dims.kv_head_num,
        dims.head_dim,
        dims.value_dim,
    );
    let p = spec.problem(dims, sink.as_deref());
    let g = reference::varlen_bwd(
        &p,
        &to_vec::<B>(fwd.query),
        &to_vec::<B>(fwd.key),
        &to_vec::<B>(fwd.value),
        &to_vec::<B>(dy),
        &to_vec::<B>(attention_in),
        &to_vec::<B>(softmax_max),
        &to_vec::<B>(softmax_sum),
    );
    Ok(VarlenGrads {
        dq: from_vec::<B>(g.dq, &[tq, n, d], &device),
        dk: from_vec::<B>(g.dk, &[tkv, nkv, d], &device),
        dv: from_vec::<B>(g.dv, &[tkv, nkv, dv], &device),
        dsink: g.dsink.map(|s| from_vec::<B>(s, &[n], &device)),
    })
}
