//! Simulated `aclnnMoeGatingTopKSoftmaxV2` (ops-transformer `moe/moe_gating_top_k_softmax_v2`,
//! Atlas A2 / A3). First stage, as the docs' table and the tiling
//! (`moe_gating_top_k_softmax_v2_tiling_base.cpp`) check: a null `x`, `yOut` or `expertIdxOut`
//! → 161001; `x` or `yOut` outside FLOAT16 / BFLOAT16 / FLOAT or of different dtypes,
//! `expertIdxOut` not INT32, a `finishedOptional` not BOOL → 161002; the tiling's shape and
//! attribute rules (`x` rank 2 or 3 with a non-zero last dimension, `k` in `1 ..= min(E,
//! 1024)` — the docs' `0 <= k` is stricter in the tiling —, `renorm` 0 or 1, `finishedOptional`
//! of `x`'s shape without the last dimension, the outputs' shapes, with `renorm` 0 and
//! `outputSoftmaxResultFlag` a FLOAT `softmaxResultOutOptional` of `x`'s shape) → 561002
//! (`ACLNN_ERR_INNER_TILING_ERROR`, the docs' code for them). A `finishedOptional` the
//! simulation does not model (rows marked finished) → 161002 naming it. Launch: the f64
//! reference (`burn_ascend_kernels::reference::moe_gating`), rounded once to `yOut`'s dtype.

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::moe_gating::{validate, GatingOrder};
use burn_ascend_kernels::reference::moe_gating::moe_gating_top_k_softmax;

use crate::state::{self, required, tensor, SimErr, SimResult, SimTensor};
use crate::wire::{dtype_in, encode_f64, floats, submit, unsupported};

const OP: &str = names::moe_gating_top_k_softmax_v2;
const FLOAT3: &[DataType] = &[DataType::Float, DataType::Float16, DataType::Bf16];

fn tiling<R>(msg: String) -> SimResult<R> {
    Err(SimErr(ACLNN_ERR_INNER_TILING_ERROR, format!("{OP}: {msg}")))
}

fn shape(t: &SimTensor, name: &str, want: &[usize]) -> SimResult<()> {
    if t.dims != want {
        return tiling(format!("{name} shape must be {want:?}, got {:?}", t.dims));
    }
    Ok(())
}

first_stage!(moe_gating_top_k_softmax_v2, |p| {
    state::guard(|| {
        let x = required(p.x, "x")?;
        let y = required(p.y_out, "yOut")?;
        let idx = required(p.expert_idx_out, "expertIdxOut")?;
        let finished = tensor(p.finished, "finishedOptional")?;
        let soft = tensor(p.softmax_result_out, "softmaxResultOutOptional")?;
        dtype_in(&x, OP, "x", FLOAT3)?;
        dtype_in(&y, OP, "yOut", &[x.dtype])?;
        dtype_in(&idx, OP, "expertIdxOut", &[DataType::Int32])?;
        if let Some(f) = &finished {
            dtype_in(f, OP, "finishedOptional", &[DataType::Bool])?;
        }
        let order = GatingOrder::from_attr(p.renorm).or_else(|e| tiling(e.to_string()))?;
        let d = validate(&x.dims, p.k, finished.as_ref().map(|f| f.dims.as_slice()))
            .or_else(|e| tiling(e.to_string()))?;
        let out = d.out_shape(&x.dims);
        shape(&y, "yOut", &out)?;
        shape(&idx, "expertIdxOut", &out)?;
        let soft =
            match (order, p.output_softmax_result_flag, soft) {
                (GatingOrder::SoftmaxThenTopK, true, None) => return tiling(
                    "softmaxResultOutOptional is null with renorm 0 and outputSoftmaxResultFlag"
                        .into(),
                ),
                (GatingOrder::SoftmaxThenTopK, true, Some(s)) => {
                    if s.dtype != DataType::Float {
                        return tiling(format!(
                            "softmaxResultOutOptional dtype must be FLOAT, got {:?}",
                            s.dtype
                        ));
                    }
                    shape(&s, "softmaxResultOutOptional", &x.dims)?;
                    Some(s)
                }
                // The flag is not read with renorm 1 (no softmax output then).
                _ => None,
            };
        if finished.is_some() {
            return unsupported(&format!(
                "{OP}: finishedOptional (rows marked finished) is not simulated"
            ));
        }
        submit(
            OP,
            move || {
                let xs: Vec<f64> = floats(&x, "x")?.into_iter().map(f64::from).collect();
                let g = moe_gating_top_k_softmax(&xs, &d, order);
                y.write("yOut", &encode_f64(&g.y, y.dtype, "yOut")?)?;
                let ids: Vec<u8> = g
                    .expert_idx
                    .iter()
                    .flat_map(|&i| (i as i32).to_le_bytes())
                    .collect();
                idx.write("expertIdxOut", &ids)?;
                if let Some(s) = &soft {
                    s.write(
                        "softmaxResultOutOptional",
                        &encode_f64(&g.softmax, s.dtype, "softmaxResultOutOptional")?,
                    )?;
                }
                Ok(())
            },
            p.workspace_size,
            p.executor,
        )
    })
});
