//! The simulated fused transformer ops (what training a transformer calls per layer):
//! `aclnnRmsNorm`, `aclnnRmsNormGrad`, `aclnnRotaryPositionEmbedding`,
//! `aclnnRotaryPositionEmbeddingGrad`, `aclnnSwiGlu`, `aclnnSwiGluGrad`, `aclnnCrossEntropyLoss`,
//! `aclnnCrossEntropyLossGrad`. First stage: the docs' rules — a null required tensor → 161001; a
//! dtype outside the docs' table, a shape the contract refuses (`burn_ascend_contract::fused`, the
//! same rules the Burn paths apply), an attribute out of range, a non-contiguous tensor where the
//! docs say "不支持非连续的Tensor" (SwiGLU) or a CANN feature the simulation does not model (weights,
//! label smoothing, z-loss, reductions other than "mean") → 161002. Launch: the f64 reference of
//! `burn_ascend_kernels::reference::fused`, rounded once to the outputs' dtypes. Targets outside
//! `[0, C)` (and not `ignoreIndex`) fail the launch (561000), as the host cannot see device values
//! at the first stage.

use std::ffi::c_char;

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::fused::{cross_entropy, rms_norm, rotary, swiglu, RotaryMode};
use burn_ascend_kernels::reference::fused as reference;

use crate::state::{self, c_str, invalid, required, tensor, SimErr, SimResult, SimTensor};
use crate::wire::{dtype_in, encode_f64, floats, ints, submit, unsupported};

const FLOAT3: &[DataType] = &[DataType::Float, DataType::Float16, DataType::Bf16];

fn same_dtype(op: &str, a: &SimTensor, an: &str, b: &SimTensor, bn: &str) -> SimResult<()> {
    if a.dtype == b.dtype {
        Ok(())
    } else {
        invalid(format!(
            "{op}: {bn} dtype must equal {an}'s {:?}, got {:?}",
            a.dtype, b.dtype
        ))
    }
}

fn shape_is(op: &str, t: &SimTensor, name: &str, want: &[usize]) -> SimResult<()> {
    if t.dims == want {
        Ok(())
    } else {
        invalid(format!(
            "{op}: {name} shape must be {want:?}, got {:?}",
            t.dims
        ))
    }
}

/// The contract's refusal as the first stage's 161002.
fn contract<R>(op: &str, r: burn_ascend_contract::Result<R>) -> SimResult<R> {
    r.map_err(|e| SimErr(ACLNN_ERR_PARAM_INVALID, format!("{op}: {e}")))
}

fn contiguous(op: &str, t: &SimTensor, name: &str) -> SimResult<()> {
    let mut want = vec![0; t.dims.len()];
    let mut s = 1;
    for i in (0..t.dims.len()).rev() {
        want[i] = s;
        s *= t.dims[i];
    }
    let ok = t
        .dims
        .iter()
        .zip(&t.strides)
        .zip(&want)
        .all(|((&d, &a), &b)| d <= 1 || a == b);
    if ok {
        Ok(())
    } else {
        invalid(format!(
            "{op}: {name} must be contiguous (dims {:?}, strides {:?})",
            t.dims, t.strides
        ))
    }
}

fn f64s(t: &SimTensor, name: &str) -> SimResult<Vec<f64>> {
    Ok(floats(t, name)?.into_iter().map(f64::from).collect())
}

first_stage!(rms_norm, |p| {
    const OP: &str = names::rms_norm;
    state::guard(|| {
        let x = required(p.x, "x")?;
        let g = required(p.gamma, "gamma")?;
        let y = required(p.y_out, "yOut")?;
        let r = required(p.rstd_out, "rstdOut")?;
        dtype_in(&x, OP, "x", FLOAT3)?;
        // The docs' table: gamma as x, or FLOAT32 with a 16-bit x.
        if g.dtype != x.dtype && g.dtype != DataType::Float {
            return invalid(format!(
                "{OP}: gamma dtype must be x's {:?} or FLOAT, got {:?}",
                x.dtype, g.dtype
            ));
        }
        same_dtype(OP, &x, "x", &y, "yOut")?;
        dtype_in(&r, OP, "rstdOut", &[DataType::Float])?;
        let d = contract(OP, rms_norm::validate_fwd(&x.dims, &g.dims, p.epsilon))?;
        shape_is(OP, &y, "yOut", &x.dims)?;
        let lead = &x.dims[..x.dims.len() - 1];
        if r.dims != lead && r.dims != rms_norm::RmsNormDims::rstd_shape(&x.dims) {
            return invalid(format!("{OP}: rstdOut shape must be x's with the normalised dimension 1, got {:?} for x {:?}", r.dims, x.dims));
        }
        submit(
            OP,
            move || {
                let (yv, rv) = reference::rms_norm::rms_norm_fwd(
                    &f64s(&x, "x")?,
                    &f64s(&g, "gamma")?,
                    d.rows,
                    d.cols,
                    p.epsilon,
                );
                y.write("yOut", &encode_f64(&yv, y.dtype, "yOut")?)?;
                r.write("rstdOut", &encode_f64(&rv, r.dtype, "rstdOut")?)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(rms_norm_grad, |p| {
    const OP: &str = names::rms_norm_grad;
    state::guard(|| {
        let dy = required(p.dy, "dy")?;
        let x = required(p.x, "x")?;
        let r = required(p.rstd, "rstd")?;
        let g = required(p.gamma, "gamma")?;
        let dx = required(p.dx_out, "dxOut")?;
        let dg = required(p.dgamma_out, "dgammaOut")?;
        dtype_in(&x, OP, "x", FLOAT3)?;
        same_dtype(OP, &x, "x", &dy, "dy")?;
        same_dtype(OP, &x, "x", &dx, "dxOut")?;
        dtype_in(&r, OP, "rstd", &[DataType::Float])?;
        dtype_in(&dg, OP, "dgammaOut", &[DataType::Float])?;
        if g.dtype != x.dtype && g.dtype != DataType::Float {
            return invalid(format!(
                "{OP}: gamma dtype must be x's {:?} or FLOAT, got {:?}",
                x.dtype, g.dtype
            ));
        }
        let d = contract(
            OP,
            rms_norm::validate_bwd(&dy.dims, &x.dims, &r.dims, &g.dims),
        )?;
        shape_is(OP, &dx, "dxOut", &x.dims)?;
        shape_is(OP, &dg, "dgammaOut", &g.dims)?;
        submit(
            OP,
            move || {
                let (dxv, dgv) = reference::rms_norm::rms_norm_bwd(
                    &f64s(&dy, "dy")?,
                    &f64s(&x, "x")?,
                    &f64s(&r, "rstd")?,
                    &f64s(&g, "gamma")?,
                    d.rows,
                    d.cols,
                );
                dx.write("dxOut", &encode_f64(&dxv, dx.dtype, "dxOut")?)?;
                dg.write("dgammaOut", &encode_f64(&dgv, dg.dtype, "dgammaOut")?)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(rotary_position_embedding, |p| {
    const OP: &str = names::rotary_position_embedding;
    state::guard(|| {
        let x = required(p.x, "x")?;
        let c = required(p.cos, "cos")?;
        let s = required(p.sin, "sin")?;
        let o = required(p.out, "out")?;
        dtype_in(&x, OP, "x", FLOAT3)?;
        same_dtype(OP, &x, "x", &c, "cos")?;
        same_dtype(OP, &x, "x", &s, "sin")?;
        same_dtype(OP, &x, "x", &o, "out")?;
        // The inputs may be strided views (the docs: 非连续Tensor √); the output may not.
        contiguous(OP, &o, "out")?;
        let mode = contract(OP, RotaryMode::from_aclnn(p.mode))?;
        let d = contract(OP, rotary::validate_fwd(&x.dims, &c.dims, &s.dims, mode))?;
        shape_is(OP, &o, "out", &x.dims)?;
        submit(
            OP,
            move || {
                let v = reference::rotary::rotary_fwd(
                    &f64s(&x, "x")?,
                    &f64s(&c, "cos")?,
                    &f64s(&s, "sin")?,
                    &d,
                    mode,
                );
                o.write("out", &encode_f64(&v, o.dtype, "out")?)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

/// Without `xOptional`, `dcosOut` / `dsinOut` are not written: they must be empty (the docs'
/// example passes `[1, 1, 1, 0]`) or `cos`-shaped.
fn unused_table_out(op: &str, t: &SimTensor, name: &str, cos: &[usize]) -> SimResult<()> {
    if t.numel() == 0 || t.dims == cos {
        Ok(())
    } else {
        invalid(format!(
            "{op}: {name} must be empty or cos's shape {cos:?} without xOptional, got {:?}",
            t.dims
        ))
    }
}

first_stage!(rotary_position_embedding_grad, |p| {
    const OP: &str = names::rotary_position_embedding_grad;
    state::guard(|| {
        let dy = required(p.dy, "dy")?;
        let c = required(p.cos, "cos")?;
        let s = required(p.sin, "sin")?;
        let x = tensor(p.x_optional, "xOptional")?;
        let dx = required(p.dx_out, "dxOut")?;
        let dc = required(p.dcos_out, "dcosOut")?;
        let ds = required(p.dsin_out, "dsinOut")?;
        dtype_in(&dy, OP, "dy", FLOAT3)?;
        for (t, n) in [
            (&c, "cos"),
            (&s, "sin"),
            (&dx, "dxOut"),
            (&dc, "dcosOut"),
            (&ds, "dsinOut"),
        ] {
            same_dtype(OP, &dy, "dy", t, n)?;
        }
        if let Some(x) = &x {
            same_dtype(OP, &dy, "dy", x, "xOptional")?;
            shape_is(OP, x, "xOptional", &dy.dims)?;
        }
        for (t, n) in [(&dx, "dxOut"), (&dc, "dcosOut"), (&ds, "dsinOut")] {
            contiguous(OP, t, n)?;
        }
        let mode = contract(OP, RotaryMode::from_aclnn(p.mode))?;
        let d = contract(OP, rotary::validate_bwd(&dy.dims, &c.dims, &s.dims, mode))?;
        shape_is(OP, &dx, "dxOut", &dy.dims)?;
        if x.is_some() {
            shape_is(OP, &dc, "dcosOut", &c.dims)?;
            shape_is(OP, &ds, "dsinOut", &c.dims)?;
        } else {
            unused_table_out(OP, &dc, "dcosOut", &c.dims)?;
            unused_table_out(OP, &ds, "dsinOut", &c.dims)?;
        }
        submit(
            OP,
            move || {
                let g = f64s(&dy, "dy")?;
                let v = reference::rotary::rotary_bwd(
                    &g,
                    &f64s(&c, "cos")?,
                    &f64s(&s, "sin")?,
                    &d,
                    mode,
                );
                dx.write("dxOut", &encode_f64(&v, dx.dtype, "dxOut")?)?;
                if let Some(x) = &x {
                    let (vc, vs) =
                        reference::rotary::rotary_bwd_tables(&g, &f64s(x, "xOptional")?, &d, mode);
                    dc.write("dcosOut", &encode_f64(&vc, dc.dtype, "dcosOut")?)?;
                    ds.write("dsinOut", &encode_f64(&vs, ds.dtype, "dsinOut")?)?;
                }
                Ok(())
            },
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(swi_glu, |p| {
    const OP: &str = names::swi_glu;
    state::guard(|| {
        let x = required(p.x, "x")?;
        let o = required(p.out, "out")?;
        dtype_in(&x, OP, "x", FLOAT3)?;
        same_dtype(OP, &x, "x", &o, "out")?;
        contiguous(OP, &x, "x")?;
        contiguous(OP, &o, "out")?;
        let d = contract(OP, swiglu::validate_fwd(&x.dims, p.dim_optional))?;
        shape_is(OP, &o, "out", &d.out_shape(&x.dims))?;
        submit(
            OP,
            move || {
                let v = reference::swiglu::swiglu_fwd(&f64s(&x, "x")?, d.outer, d.half, d.inner);
                o.write("out", &encode_f64(&v, o.dtype, "out")?)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(swi_glu_grad, |p| {
    const OP: &str = names::swi_glu_grad;
    state::guard(|| {
        let dy = required(p.y_grad, "yGrad")?;
        let x = required(p.x, "x")?;
        let o = required(p.out, "out")?;
        dtype_in(&x, OP, "x", FLOAT3)?;
        same_dtype(OP, &x, "x", &dy, "yGrad")?;
        same_dtype(OP, &x, "x", &o, "out")?;
        for (t, n) in [(&dy, "yGrad"), (&x, "x"), (&o, "out")] {
            contiguous(OP, t, n)?;
        }
        let d = contract(OP, swiglu::validate_bwd(&dy.dims, &x.dims, p.dim_optional))?;
        shape_is(OP, &o, "out", &x.dims)?;
        submit(
            OP,
            move || {
                let v = reference::swiglu::swiglu_bwd(
                    &f64s(&dy, "yGrad")?,
                    &f64s(&x, "x")?,
                    d.outer,
                    d.half,
                    d.inner,
                );
                o.write("out", &encode_f64(&v, o.dtype, "out")?)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

/// `reductionOptional`: only "mean" is modelled.
///
/// # Safety
/// A non-null `p` must point to a NUL-terminated string.
unsafe fn mean_reduction(op: &str, p: *mut c_char) -> SimResult<()> {
    // SAFETY: the caller's contract.
    match unsafe { c_str(p, "reductionOptional")? }.as_deref() {
        Some("mean") | None => Ok(()),
        Some(r @ ("sum" | "none")) => unsupported(&format!("{op}: reductionOptional \"{r}\"")),
        Some(r) => invalid(format!(
            "{op}: reductionOptional must be mean, sum or none, got {r:?}"
        )),
    }
}

/// Checks the targets' values at launch (device memory).
fn targets(t: &SimTensor, c: usize, ignore_index: i64) -> SimResult<Vec<i64>> {
    let v = ints(t, "target")?;
    cross_entropy::validate_targets(&v, c, ignore_index)
        .map_err(|e| SimErr(ACLNN_ERR_INNER, format!("target: {e}")))?;
    Ok(v)
}

first_stage!(cross_entropy_loss, |p| {
    let label_smoothing = p.label_smoothing;
    const OP: &str = names::cross_entropy_loss;
    state::guard(|| {
        let x = required(p.input, "input")?;
        let t = required(p.target, "target")?;
        let loss = required(p.loss_out, "lossOut")?;
        let lp = required(p.log_prob_out, "logProbOut")?;
        required(p.zloss_out, "zlossOut")?;
        required(p.lse_for_zloss_out, "lseForZlossOut")?;
        dtype_in(&x, OP, "input", FLOAT3)?;
        dtype_in(&t, OP, "target", &[DataType::Int32, DataType::Int64])?;
        same_dtype(OP, &x, "input", &loss, "lossOut")?;
        same_dtype(OP, &x, "input", &lp, "logProbOut")?;
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        unsafe { mean_reduction(OP, p.reduction_optional)? };
        if !(0.0..=1.0).contains(&label_smoothing) {
            return invalid(format!(
                "{OP}: labelSmoothing must be in [0, 1], got {label_smoothing}"
            ));
        }
        if tensor(p.weight_optional, "weightOptional")?.is_some() || label_smoothing != 0.0 {
            return unsupported(&format!(
                "{OP}: weightOptional or a non-zero labelSmoothing"
            ));
        }
        if p.return_zloss || p.lse_square_scale_for_zloss != 0.0 {
            return unsupported(&format!(
                "{OP}: z-loss (returnZloss, lseSquareScaleForZloss)"
            ));
        }
        let d = contract(
            OP,
            cross_entropy::validate_fwd(&x.dims, &t.dims, p.ignore_index),
        )?;
        shape_is(OP, &loss, "lossOut", &[1])?;
        shape_is(OP, &lp, "logProbOut", &x.dims)?;
        submit(
            OP,
            move || {
                let tv = targets(&t, d.c, p.ignore_index)?;
                let (l, lpv) = reference::cross_entropy::cross_entropy_fwd(
                    &f64s(&x, "input")?,
                    &tv,
                    d.n,
                    d.c,
                    p.ignore_index,
                );
                loss.write("lossOut", &encode_f64(&[l], loss.dtype, "lossOut")?)?;
                lp.write("logProbOut", &encode_f64(&lpv, lp.dtype, "logProbOut")?)
            },
            p.workspace_size,
            p.executor,
        )
    })
});

first_stage!(cross_entropy_loss_grad, |p| {
    const OP: &str = names::cross_entropy_loss_grad;
    state::guard(|| {
        let g = required(p.grad_loss, "gradLoss")?;
        let lp = required(p.log_prob, "logProb")?;
        let t = required(p.target, "target")?;
        let o = required(p.out, "out")?;
        dtype_in(&lp, OP, "logProb", FLOAT3)?;
        same_dtype(OP, &lp, "logProb", &g, "gradLoss")?;
        same_dtype(OP, &g, "gradLoss", &o, "out")?;
        dtype_in(&t, OP, "target", &[DataType::Int64])?;
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        unsafe { mean_reduction(OP, p.reduction_optional)? };
        if tensor(p.weight_optional, "weightOptional")?.is_some() || p.label_smoothing != 0.0 {
            return unsupported(&format!(
                "{OP}: weightOptional or a non-zero labelSmoothing"
            ));
        }
        if tensor(p.grad_zloss_optional, "gradZlossOptional")?.is_some()
            || tensor(p.lse_for_zloss_optional, "lseForZlossOptional")?.is_some()
            || p.lse_square_scale_for_zloss != 0.0
        {
            return unsupported(&format!("{OP}: z-loss"));
        }
        // The docs: gradLoss is 0-D for the mean reduction.
        if !g.dims.is_empty() {
            return invalid(format!(
                "{OP}: gradLoss must be 0-D for reductionOptional \"mean\", got {:?}",
                g.dims
            ));
        }
        let d = contract(
            OP,
            cross_entropy::validate_bwd(&g.dims, &lp.dims, &t.dims, p.ignore_index),
        )?;
        shape_is(OP, &o, "out", &lp.dims)?;
        submit(
            OP,
            move || {
                let tv = targets(&t, d.c, p.ignore_index)?;
                let gv = f64s(&g, "gradLoss")?[0];
                let v = reference::cross_entropy::cross_entropy_bwd(
                    gv,
                    &f64s(&lp, "logProb")?,
                    &tv,
                    d.n,
                    d.c,
                    p.ignore_index,
                );
                o.write("out", &encode_f64(&v, o.dtype, "out")?)
            },
            p.workspace_size,
            p.executor,
        )
    })
});
