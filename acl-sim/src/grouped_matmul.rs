//! Simulated `aclnnGroupedMatmulV4`, the non-quantised single-tensor calls (splitItem 2/3) that
//! torch_npu's `npu_grouped_matmul` and MindSpeed's `npu_gmm` / `npu_gmm_backward` make:
//! groupType 0 (M axis) and 2 (K axis). Rules from ops-transformer
//! `gmm/grouped_matmul/docs/aclnnGroupedMatmulV4.md` (Atlas A2 / A3):
//!
//! First stage: null x, weight or out → 161001; otherwise 161002 for a list of length other than
//! 1, splitItem not 2/3, groupType other than 0/2 (−1 and 1 are not simulated), groupListType
//! other than 0/1 (2 is not simulated), actType other than 0 (activations are quantised-only),
//! any quantisation / activation list given, a missing groupListOptional or one that is not
//! INT64 `[g]` with `g` ≤ 1024, the non-quantised dtype table (x = weight = out in FLOAT16 /
//! BFLOAT16 / FLOAT32; bias FLOAT16 with FLOAT16, FLOAT32 with BFLOAT16 and FLOAT32), shapes
//! (groupType 0: x `[M, K]`, weight `[g, K, N]`, bias `[g, N]`, out `[M, N]`; groupType 2:
//! x `[M, K]`, weight `[K, N]`, no bias, out `[g, M, N]`), x transposed with groupType 0 or not
//! transposed with groupType 2, weight transposed with groupType 2, a last dim of x or weight
//! of 65536 or more.
//!
//! The group list's values are on the device: CANN checks them in the kernel, so a list that
//! is negative, decreasing (cumsum) or does not cover the split axis fails at launch as 361001
//! (`ACLNN_ERR_RUNTIME_ERROR`) and writes nothing. The kernel is the f64 reference
//! (`burn_ascend_kernels::reference::grouped_matmul`), rounded once to out's dtype.

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::grouped_matmul::{GroupListType, MAX_GROUPS, MAX_LAST_DIM};
use burn_ascend_kernels::reference::grouped_matmul::{grouped_matmul_k, grouped_matmul_m};

use crate::state::{self, guard, invalid, SimErr, SimResult, SimTensor};
use crate::wire::{encode_f64, floats, ints, submit_sized};

const SIM_WORKSPACE: u64 = 1024;
const OP: &str = names::grouped_matmul_v4;

type TL = *const AclTensorList;

/// The one tensor of a required single-tensor list.
fn single(p: TL, name: &str) -> SimResult<SimTensor> {
    let Some(mut ts) = state::tensor_list(p, name)? else {
        return Err(SimErr(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{OP}: {name} is null"),
        ));
    };
    if ts.len() != 1 {
        return invalid(format!(
            "{OP}: {name} must hold one tensor with splitItem 2/3 (single-tensor x, weight and out), got {}",
            ts.len()
        ));
    }
    Ok(ts.remove(0))
}

/// Whether a rank-2 view is the transpose of a contiguous buffer (`[r, c]` with strides
/// `[1, r]`); a dim of 1 makes both layouts one.
fn transposed(t: &SimTensor) -> bool {
    let (r, c) = (t.dims[0], t.dims[1]);
    r > 1 && c > 1 && t.strides == [1, r]
}

fn row_major(t: &SimTensor) -> bool {
    let r = t.dims.len();
    let (rows, cols) = (t.dims[r - 2], t.dims[r - 1]);
    rows <= 1 || cols <= 1 || (t.strides[r - 1] == 1 && t.strides[r - 2] == cols)
}

fn float_dtype(t: &SimTensor, name: &str) -> SimResult<()> {
    match t.dtype {
        DataType::Float16 | DataType::Bf16 | DataType::Float => Ok(()),
        other => invalid(format!(
            "{OP}: {name} dtype must be FLOAT16, BFLOAT16 or FLOAT (non-quantised), got {other:?}"
        )),
    }
}

fn shape(t: &SimTensor, name: &str, want: &[usize]) -> SimResult<()> {
    if t.dims != want {
        return invalid(format!("{OP}: {name} must be {want:?}, got {:?}", t.dims));
    }
    Ok(())
}

fn rank(t: &SimTensor, name: &str, r: usize) -> SimResult<()> {
    if t.dims.len() != r {
        return invalid(format!("{OP}: {name} must be rank {r}, got {:?}", t.dims));
    }
    Ok(())
}

/// Group sizes from the list's values, as the kernel reads them; the run-time failure of CANN.
fn sizes(list: &[i64], kind: GroupListType, total: usize) -> SimResult<Vec<usize>> {
    let fail = |why: String| {
        Err(SimErr(
            ACLNN_ERR_RUNTIME_ERROR,
            format!("{OP}: groupListOptional {list:?}: {why} (CANN fails at run time; nothing was written)"),
        ))
    };
    let mut out = Vec::with_capacity(list.len());
    let mut end = 0i64;
    for &v in list {
        if v < 0 {
            return fail("entries must be non-negative".into());
        }
        let s = match kind {
            GroupListType::Cumsum if v < end => {
                return fail("cumsum must be non-decreasing".into())
            }
            GroupListType::Cumsum => v - end,
            GroupListType::Count => v,
        };
        end += s;
        out.push(s as usize);
    }
    if end != total as i64 {
        return fail(format!("groups cover {end} but the split axis has {total}"));
    }
    Ok(out)
}

first_stage!(grouped_matmul_v4, |params| {
    let (split_item, act_type) = (params.split_item, params.act_type);
    guard(|| {
        let x = single(params.x, "x")?;
        let w = single(params.weight, "weight")?;
        let o = single(params.out, "out")?;
        let b = match state::tensor_list(params.bias, "biasOptional")? {
            None => None,
            Some(v) if v.is_empty() => None,
            Some(mut v) if v.len() == 1 => Some(v.remove(0)),
            Some(v) => {
                return invalid(format!(
                    "{OP}: biasOptional must hold one tensor like weight, got {}",
                    v.len()
                ))
            }
        };
        for (p, name) in [
            (params.scale, "scaleOptional"),
            (params.offset, "offsetOptional"),
            (params.antiquant_scale, "antiquantScaleOptional"),
            (params.antiquant_offset, "antiquantOffsetOptional"),
            (params.per_token_scale, "perTokenScaleOptional"),
            (params.activation_input, "activationInputOptional"),
            (
                params.activation_quant_scale,
                "activationQuantScaleOptional",
            ),
            (
                params.activation_quant_offset,
                "activationQuantOffsetOptional",
            ),
            (
                params.activation_feature_out,
                "activationFeatureOutOptional",
            ),
            (params.dyn_quant_scale_out, "dynQuantScaleOutOptional"),
        ] {
            if state::tensor_list(p, name)?.is_some_and(|v| !v.is_empty()) {
                return invalid(format!(
                    "{OP}: {name}: quantised and activation calls are not simulated (pass null)"
                ));
            }
        }
        if !(2..=3).contains(&split_item) {
            return invalid(format!(
                "{OP}: splitItem must be 2 or 3 (single-tensor out) with groupType 0 / 2, got {split_item}"
            ));
        }
        let kind = match params.group_list_type {
            0 => GroupListType::Cumsum,
            1 => GroupListType::Count,
            v => {
                return invalid(format!(
                    "{OP}: groupListType must be 0 or 1 (2 is not simulated), got {v}"
                ))
            }
        };
        if act_type != 0 {
            return invalid(format!(
                "{OP}: actType must be 0 (activations are for quantised calls), got {act_type}"
            ));
        }
        float_dtype(&x, "x")?;
        if w.dtype != x.dtype || o.dtype != x.dtype {
            return invalid(format!(
                "{OP}: x {:?}, weight {:?} and out {:?} must have one dtype",
                x.dtype, w.dtype, o.dtype
            ));
        }
        let Some(gl) = state::tensor(params.group_list, "groupListOptional")? else {
            return invalid(format!(
                "{OP}: groupListOptional is required with single-tensor x, weight and out"
            ));
        };
        if gl.dtype != DataType::Int64 || gl.dims.len() != 1 {
            return invalid(format!(
                "{OP}: groupListOptional must be INT64 [g], got {:?} {:?}",
                gl.dtype, gl.dims
            ));
        }
        let g = gl.dims[0];
        if g == 0 || g > MAX_GROUPS {
            return invalid(format!(
                "{OP}: groupListOptional must hold 1 to {MAX_GROUPS} groups, got {g}"
            ));
        }
        rank(&x, "x", 2)?;
        let (m, k) = (x.dims[0], x.dims[1]);
        let n = match params.group_type {
            0 => {
                rank(&w, "weight", 3)?;
                if w.dims[0] != g {
                    return invalid(format!(
                        "{OP}: groupListOptional holds {g} groups but weight {:?} has {}",
                        w.dims, w.dims[0]
                    ));
                }
                if w.dims[1] != k {
                    return invalid(format!(
                        "{OP}: weight must be [g, K, N] = [{g}, {k}, N], got {:?}",
                        w.dims
                    ));
                }
                let n = w.dims[2];
                if !row_major(&x) {
                    return invalid(format!("{OP}: x must not be transposed with groupType 0"));
                }
                if let Some(b) = &b {
                    shape(b, "biasOptional", &[g, n])?;
                    let want = match x.dtype {
                        DataType::Float16 => DataType::Float16,
                        _ => DataType::Float,
                    };
                    if b.dtype != want {
                        return invalid(format!(
                            "{OP}: biasOptional must be {want:?} with {:?} x, got {:?}",
                            x.dtype, b.dtype
                        ));
                    }
                }
                shape(&o, "out", &[m, n])?;
                n
            }
            2 => {
                rank(&w, "weight", 2)?;
                if w.dims[0] != k {
                    return invalid(format!(
                        "{OP}: weight must be [K, N] = [{k}, N], got {:?}",
                        w.dims
                    ));
                }
                if b.is_some() {
                    return invalid(format!("{OP}: biasOptional must be null with groupType 2"));
                }
                if m > 1 && k > 1 && !transposed(&x) {
                    return invalid(format!(
                        "{OP}: x must be transposed (a [K, M] buffer viewed as [M, K]) with groupType 2"
                    ));
                }
                if !row_major(&w) {
                    return invalid(format!("{OP}: weight must not be transposed with groupType 2"));
                }
                let n = w.dims[1];
                shape(&o, "out", &[g, m, n])?;
                n
            }
            v => {
                return invalid(format!(
                    "{OP}: groupType must be 0 or 2 with single-tensor x, weight and out (-1 and 1 are not simulated), got {v}"
                ))
            }
        };
        if k >= MAX_LAST_DIM || n >= MAX_LAST_DIM {
            return invalid(format!(
                "{OP}: the last dims of x ({k}) and weight ({n}) must be below {MAX_LAST_DIM}"
            ));
        }
        let job = move || -> SimResult<()> {
            let list = ints(&gl, "groupListOptional")?;
            let total = if params.group_type == 0 { m } else { k };
            let sizes = sizes(&list, kind, total)?;
            let wide = |t: &SimTensor, name: &str| -> SimResult<Vec<f64>> {
                Ok(floats(t, name)?.into_iter().map(f64::from).collect())
            };
            let (xv, wv) = (wide(&x, "x")?, wide(&w, "weight")?);
            let y = if params.group_type == 0 {
                let bv = b.as_ref().map(|b| wide(b, "biasOptional")).transpose()?;
                grouped_matmul_m(&xv, &wv, bv.as_deref(), &sizes, k, n)
            } else {
                grouped_matmul_k(&xv, &wv, &sizes, m, n)
            };
            o.write("out", &encode_f64(&y, o.dtype, "out")?)
        };
        submit_sized(
            OP,
            SIM_WORKSPACE,
            job,
            params.workspace_size,
            params.executor,
        )
    })
});
