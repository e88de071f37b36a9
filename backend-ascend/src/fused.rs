//! The fused transformer ops of a training step on Ascend (`burn_ascend_ops::FusedBackend`): one aclnn
//! launch each way — `aclnnRmsNorm` / `aclnnRmsNormGrad`, `aclnnRotaryPositionEmbedding` /
//! `aclnnRotaryPositionEmbeddingGrad` (the latter without `xOptional`: `dx` only, the tables
//! being constants), `aclnnSwiGlu` / `aclnnSwiGluGrad`,
//! `aclnnCrossEntropyLoss` / `aclnnCrossEntropyLossGrad` (mean reduction, no weight, no label
//! smoothing, no z-loss) — queued on the device's stream, nothing read back. Shapes are
//! validated by the contract first (typed [`AttnError`]s naming the aclnn parameter); dtypes
//! outside the docs' tables (f64, mixed) take the CPU kernels through the counted host fallback
//! (`rms_norm_fwd`, …). Targets are not read on the host: one outside `[0, C)` fails the launch
//! and surfaces at the next synchronisation, as on CANN.

use burn_ascend_cann::acl::aclnn::{
    self, CrossEntropyLossArgs, CrossEntropyLossGradArgs, RotaryPositionEmbeddingGradArgs,
};
use burn_ascend_cann::acl::names;
use burn_ascend_ops::error::Result;
use burn_ascend_ops::fused::ndarray::{
    cpu_cross_entropy_bwd, cpu_cross_entropy_fwd, cpu_rms_norm_bwd, cpu_rms_norm_fwd,
    cpu_rotary_bwd, cpu_rotary_fwd, cpu_swiglu_bwd, cpu_swiglu_fwd,
};
use burn_ascend_ops::fused::{
    validate, CrossEntropyOutputs, FusedBackend, RmsNormDims, RmsNormGrads, RmsNormOutputs,
    RotaryMode,
};
use burn_backend::ops::{FloatTensorOps, IntTensorOps};
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{DType, IntDType, Shape};

use crate::device::{runtime, AscendDevice};
use crate::element::is_acl_float;
use crate::fallback::count;
use crate::tensor::{device_error, same_device, AscendTensor};
use crate::tensor_ops::base::contiguous;
use crate::Ascend;

fn alloc(shape: Vec<usize>, dtype: DType, device: &AscendDevice) -> AscendTensor {
    AscendTensor::alloc(Shape::from(shape), dtype, device)
}

/// `gamma` takes x's dtype or FLOAT32 (the docs' tables).
fn gamma_ok(x: DType, gamma: DType) -> bool {
    is_acl_float(x) && (gamma == x || gamma == DType::F32)
}

/// `t` in `dtype` (the rotary tables take `x`'s dtype, as torch_npu's `npu_rotary_mul` casts
/// them); no launch when it already is.
fn as_dtype(t: AscendTensor, dtype: DType) -> AscendTensor {
    if t.dtype == dtype {
        t
    } else {
        Ascend::float_cast(t, dtype.into())
    }
}

impl FusedBackend for Ascend {
    fn rms_norm_fwd(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        epsilon: f64,
    ) -> Result<RmsNormOutputs<Self>> {
        const OP: &str = names::rms_norm;
        let (shape, _) = validate::rms_norm_fwd(&x, &gamma, epsilon)?;
        let device = same_device(OP, &[&x, &gamma])?;
        if !gamma_ok(x.dtype, gamma.dtype) {
            count("rms_norm_fwd");
            return cpu_rms_norm_fwd::<Self>(x, gamma, epsilon);
        }
        let y = alloc(shape.clone(), x.dtype, &device);
        let rstd = alloc(RmsNormDims::rstd_shape(&shape), DType::F32, &device);
        let rt = runtime(&device);
        let ds = [x.desc(OP), gamma.desc(OP), y.desc(OP), rstd.desc(OP)];
        aclnn::rms_norm(
            &rt,
            &x.handle(&ds[0], OP),
            &gamma.handle(&ds[1], OP),
            epsilon,
            &y.handle(&ds[2], OP),
            &rstd.handle(&ds[3], OP),
        )
        .map_err(|e| device_error(OP, e))?;
        Ok(RmsNormOutputs { y, rstd })
    }

    fn rms_norm_bwd(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> Result<RmsNormGrads<Self>> {
        const OP: &str = names::rms_norm_grad;
        let (shape, _) = validate::rms_norm_bwd(&dy, &x, &rstd, &gamma)?;
        let gshape = gamma.shape.to_vec();
        let device = same_device(OP, &[&dy, &x, &rstd, &gamma])?;
        if !gamma_ok(x.dtype, gamma.dtype) || dy.dtype != x.dtype || rstd.dtype != DType::F32 {
            count("rms_norm_bwd");
            return cpu_rms_norm_bwd::<Self>(dy, x, rstd, gamma);
        }
        let dx = alloc(shape, x.dtype, &device);
        let dgamma = alloc(gshape, DType::F32, &device);
        let rt = runtime(&device);
        let ts = [&dy, &x, &rstd, &gamma, &dx, &dgamma];
        let ds: Vec<_> = ts.iter().map(|t| t.desc(OP)).collect();
        let h: Vec<_> = ts.iter().zip(&ds).map(|(t, d)| t.handle(d, OP)).collect();
        aclnn::rms_norm_grad(&rt, &h[0], &h[1], &h[2], &h[3], &h[4], &h[5])
            .map_err(|e| device_error(OP, e))?;
        drop(h);
        // dgammaOut is FLOAT32 on CANN; the gradient takes gamma's dtype.
        let dgamma = match gamma.dtype {
            DType::F32 => dgamma,
            dt => Self::float_cast(dgamma, dt.into()),
        };
        Ok(RmsNormGrads { dx, dgamma })
    }

    fn rotary_embedding_fwd(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        mode: RotaryMode,
    ) -> Result<FloatTensor<Self>> {
        const OP: &str = names::rotary_position_embedding;
        let (shape, _) = validate::rotary_fwd(&x, &cos, &sin, mode)?;
        let device = same_device(OP, &[&x, &cos, &sin])?;
        if !is_acl_float(x.dtype) || !is_acl_float(cos.dtype) || !is_acl_float(sin.dtype) {
            count("rotary_embedding_fwd");
            return cpu_rotary_fwd::<Self>(x, cos, sin, mode);
        }
        let (cos, sin) = (as_dtype(cos, x.dtype), as_dtype(sin, x.dtype));
        let out = alloc(shape, x.dtype, &device);
        let rt = runtime(&device);
        let ts = [&x, &cos, &sin, &out];
        let ds: Vec<_> = ts.iter().map(|t| t.desc(OP)).collect();
        let h: Vec<_> = ts.iter().zip(&ds).map(|(t, d)| t.handle(d, OP)).collect();
        aclnn::rotary_position_embedding(&rt, &h[0], &h[1], &h[2], mode.aclnn(), &h[3])
            .map_err(|e| device_error(OP, e))?;
        drop(h);
        Ok(out)
    }

    fn rotary_embedding_bwd(
        dy: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        mode: RotaryMode,
    ) -> Result<FloatTensor<Self>> {
        const OP: &str = names::rotary_position_embedding_grad;
        let (shape, _) = validate::rotary_bwd(&dy, &cos, &sin, mode)?;
        let device = same_device(OP, &[&dy, &cos, &sin])?;
        if !is_acl_float(dy.dtype) || !is_acl_float(cos.dtype) || !is_acl_float(sin.dtype) {
            count("rotary_embedding_bwd");
            return cpu_rotary_bwd::<Self>(dy, cos, sin, mode);
        }
        let (cos, sin) = (as_dtype(cos, dy.dtype), as_dtype(sin, dy.dtype));
        let dx = alloc(shape, dy.dtype, &device);
        // No xOptional: dcosOut / dsinOut are required but unused, empty as in the docs' example.
        let dcos = alloc(vec![1, 1, 1, 0], dy.dtype, &device);
        let dsin = alloc(vec![1, 1, 1, 0], dy.dtype, &device);
        let rt = runtime(&device);
        let ts = [&dy, &cos, &sin, &dx, &dcos, &dsin];
        let ds: Vec<_> = ts.iter().map(|t| t.desc(OP)).collect();
        let h: Vec<_> = ts.iter().zip(&ds).map(|(t, d)| t.handle(d, OP)).collect();
        aclnn::rotary_position_embedding_grad(
            &rt,
            &RotaryPositionEmbeddingGradArgs {
                dy: &h[0],
                cos: &h[1],
                sin: &h[2],
                x_optional: None,
                mode: mode.aclnn(),
                dx_out: &h[3],
                dcos_out: &h[4],
                dsin_out: &h[5],
            },
        )
        .map_err(|e| device_error(OP, e))?;
        drop(h);
        Ok(dx)
    }

    fn swiglu_fwd(x: FloatTensor<Self>, dim: i64) -> Result<FloatTensor<Self>> {
        const OP: &str = names::swi_glu;
        let (shape, d) = validate::swiglu_fwd(&x, dim)?;
        if !is_acl_float(x.dtype) {
            count("swiglu_fwd");
            return cpu_swiglu_fwd::<Self>(x, dim);
        }
        let device = x.device();
        // aclnnSwiGlu takes no strided views.
        let x = contiguous(x);
        let out = alloc(d.out_shape(&shape), x.dtype, &device);
        let rt = runtime(&device);
        let (xd, od) = (x.desc(OP), out.desc(OP));
        aclnn::swi_glu(&rt, &x.handle(&xd, OP), dim, &out.handle(&od, OP))
            .map_err(|e| device_error(OP, e))?;
        Ok(out)
    }

    fn swiglu_bwd(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        dim: i64,
    ) -> Result<FloatTensor<Self>> {
        const OP: &str = names::swi_glu_grad;
        let (shape, _) = validate::swiglu_bwd(&dy, &x, dim)?;
        let device = same_device(OP, &[&dy, &x])?;
        if !is_acl_float(x.dtype) || dy.dtype != x.dtype {
            count("swiglu_bwd");
            return cpu_swiglu_bwd::<Self>(dy, x, dim);
        }
        let (dy, x) = (contiguous(dy), contiguous(x));
        let out = alloc(shape, x.dtype, &device);
        let rt = runtime(&device);
        let (gd, xd, od) = (dy.desc(OP), x.desc(OP), out.desc(OP));
        aclnn::swi_glu_grad(
            &rt,
            &dy.handle(&gd, OP),
            &x.handle(&xd, OP),
            dim,
            &out.handle(&od, OP),
        )
        .map_err(|e| device_error(OP, e))?;
        Ok(out)
    }

    fn cross_entropy_fwd(
        input: FloatTensor<Self>,
        target: IntTensor<Self>,
        ignore_index: i64,
    ) -> Result<CrossEntropyOutputs<Self>> {
        const OP: &str = names::cross_entropy_loss;
        let (shape, d) = validate::cross_entropy_fwd(&input, &target, ignore_index)?;
        let device = same_device(OP, &[&input, &target])?;
        if !is_acl_float(input.dtype) || !matches!(target.dtype, DType::I64 | DType::I32) {
            count("cross_entropy_fwd");
            return cpu_cross_entropy_fwd::<Self>(input, target, ignore_index);
        }
        let (input, target) = (contiguous(input), contiguous(target));
        let dt = input.dtype;
        let loss = alloc(vec![1], dt, &device);
        let log_prob = alloc(shape, dt, &device);
        // Required outputs even without z-loss (CANN rejects null ones).
        let zloss = alloc(vec![1], dt, &device);
        let lse = alloc(vec![d.n], dt, &device);
        let rt = runtime(&device);
        let ts = [&input, &target, &loss, &log_prob, &zloss, &lse];
        let ds: Vec<_> = ts.iter().map(|t| t.desc(OP)).collect();
        let h: Vec<_> = ts.iter().zip(&ds).map(|(t, d)| t.handle(d, OP)).collect();
        aclnn::cross_entropy_loss(
            &rt,
            &CrossEntropyLossArgs {
                input: &h[0],
                target: &h[1],
                weight_optional: None,
                reduction_optional: "mean",
                ignore_index,
                label_smoothing: 0.0,
                lse_square_scale_for_zloss: 0.0,
                return_zloss: false,
                loss_out: &h[2],
                log_prob_out: &h[3],
                zloss_out: &h[4],
                lse_for_zloss_out: &h[5],
            },
        )
        .map_err(|e| device_error(OP, e))?;
        drop(h);
        Ok(CrossEntropyOutputs { loss, log_prob })
    }

    fn cross_entropy_bwd(
        grad_loss: FloatTensor<Self>,
        log_prob: FloatTensor<Self>,
        target: IntTensor<Self>,
        ignore_index: i64,
    ) -> Result<FloatTensor<Self>> {
        const OP: &str = names::cross_entropy_loss_grad;
        let (shape, _) = validate::cross_entropy_bwd(&grad_loss, &log_prob, &target, ignore_index)?;
        let device = same_device(OP, &[&grad_loss, &log_prob, &target])?;
        if !is_acl_float(log_prob.dtype)
            || grad_loss.dtype != log_prob.dtype
            || !matches!(target.dtype, DType::I64 | DType::I32)
        {
            count("cross_entropy_bwd");
            return cpu_cross_entropy_bwd::<Self>(grad_loss, log_prob, target, ignore_index);
        }
        let log_prob = contiguous(log_prob);
        // The gradient's target is INT64 only.
        let target = match target.dtype {
            DType::I64 => contiguous(target),
            _ => Self::int_cast(target, IntDType::I64),
        };
        // gradLoss is 0-D for the mean reduction: the one element as a rank-0 view.
        let grad_loss = contiguous(grad_loss);
        let g0 = grad_loss.view(Shape::from(Vec::<usize>::new()), vec![], grad_loss.offset);
        let out = alloc(shape, log_prob.dtype, &device);
        let rt = runtime(&device);
        let ts = [&g0, &log_prob, &target, &out];
        let ds: Vec<_> = ts.iter().map(|t| t.desc(OP)).collect();
        let h: Vec<_> = ts.iter().zip(&ds).map(|(t, d)| t.handle(d, OP)).collect();
        aclnn::cross_entropy_loss_grad(
            &rt,
            &CrossEntropyLossGradArgs {
                grad_loss: &h[0],
                log_prob: &h[1],
                target: &h[2],
                weight_optional: None,
                grad_zloss_optional: None,
                lse_for_zloss_optional: None,
                reduction_optional: "mean",
                ignore_index,
                label_smoothing: 0.0,
                lse_square_scale_for_zloss: 0.0,
                out: &h[3],
            },
        )
        .map_err(|e| device_error(OP, e))?;
        drop(h);
        Ok(out)
    }
}
