//! The simulated fused transformer ops (RMSNorm, rotary embedding, SwiGLU, cross-entropy) through
//! the aclnn calls of `burn_ascend_cann::acl::aclnn`: results against the f64 references, and
//! CANN's validation — a null required output → 161001; a shape, dtype, layout or attribute the
//! docs refuse → 161002 naming the parameter; an out-of-range target fails at execute.

use burn_ascend_cann::acl::aclnn::{
    self, CrossEntropyLossArgs, CrossEntropyLossGradArgs, RotaryPositionEmbeddingGradArgs,
};
use burn_ascend_cann::acl::ffi::{ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR};
use burn_ascend_cann::acl::{AclError, DataType, DeviceTensor, Runtime, TensorDesc};
use burn_ascend_contract::fused::{rotary as rules, RotaryMode};
use burn_ascend_kernels::reference::fused::{cross_entropy, rms_norm, rotary, swiglu};
use burn_ascend_test_support::assert_close;

fn up(rt: &Runtime, dims: &[usize], v: &[f32]) -> DeviceTensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(TensorDesc::contiguous(dims, DataType::Float).unwrap(), &b)
        .unwrap()
}

fn up_i64(rt: &Runtime, dims: &[usize], v: &[i64]) -> DeviceTensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(TensorDesc::contiguous(dims, DataType::Int64).unwrap(), &b)
        .unwrap()
}

fn zeros(rt: &Runtime, dims: &[usize]) -> DeviceTensor {
    rt.zeros(TensorDesc::contiguous(dims, DataType::Float).unwrap())
        .unwrap()
}

fn read(t: &DeviceTensor) -> Vec<f64> {
    t.download()
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
        .collect()
}

fn data(n: usize, k: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 + k * 11) % 29) as f32 / 9.0 - 1.5)
        .collect()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

fn h(t: &DeviceTensor) -> burn_ascend_cann::acl::Tensor<'_> {
    t.handle().unwrap()
}

/// The status and recent-error message of a refused call.
fn refused(r: Result<(), AclError>) -> (i32, String) {
    match r.expect_err("the call must be refused") {
        e @ AclError::Status { .. } => (e.status().unwrap(), e.to_string()),
        e => panic!("expected a status, got {e}"),
    }
}

#[test]
fn simulated_fused_ops_compute_the_references() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let (x, g, dy) = (data(3 * 8, 1), data(8, 2), data(3 * 8, 3));
    let (xd, gd) = (up(&rt, &[3, 8], &x), up(&rt, &[8], &g));
    let (y, rstd) = (zeros(&rt, &[3, 8]), zeros(&rt, &[3, 1]));
    aclnn::rms_norm(&rt, &h(&xd), &h(&gd), 1e-6, &h(&y), &h(&rstd)).unwrap();
    let (ry, rr) = rms_norm::rms_norm_fwd(&f64s(&x), &f64s(&g), 3, 8, 1e-6);
    assert_close("yOut", &read(&y), &ry, 1e-5, 0.0);
    assert_close("rstdOut", &read(&rstd), &rr, 1e-5, 0.0);
    let (dyd, dx, dg) = (up(&rt, &[3, 8], &dy), zeros(&rt, &[3, 8]), zeros(&rt, &[8]));
    aclnn::rms_norm_grad(&rt, &h(&dyd), &h(&xd), &h(&rstd), &h(&gd), &h(&dx), &h(&dg)).unwrap();
    let (rdx, rdg) = rms_norm::rms_norm_bwd(&f64s(&dy), &f64s(&x), &read(&rstd), &f64s(&g), 3, 8);
    assert_close("dxOut", &read(&dx), &rdx, 1e-5, 0.0);
    assert_close("dgammaOut", &read(&dg), &rdg, 1e-5, 0.0);

    let out = zeros(&rt, &[3, 4]);
    aclnn::swi_glu(&rt, &h(&xd), -1, &h(&out)).unwrap();
    assert_close(
        "swiglu out",
        &read(&out),
        &swiglu::swiglu_fwd(&f64s(&x), 3, 4, 1),
        1e-5,
        0.0,
    );
    let (gy, sdx) = (up(&rt, &[3, 4], &dy[..12]), zeros(&rt, &[3, 8]));
    aclnn::swi_glu_grad(&rt, &h(&gy), &h(&xd), 1, &h(&sdx)).unwrap();
    assert_close(
        "swiglu grad",
        &read(&sdx),
        &swiglu::swiglu_bwd(&f64s(&dy[..12]), &f64s(&x), 3, 4, 1),
        1e-5,
        0.0,
    );

    let t = up_i64(&rt, &[3], &[7, 0, -100]);
    let (loss, lp, zl, lse) = (
        zeros(&rt, &[1]),
        zeros(&rt, &[3, 8]),
        zeros(&rt, &[1]),
        zeros(&rt, &[3]),
    );
    let (th, lossh, lph, zlh, lseh) = (h(&t), h(&loss), h(&lp), h(&zl), h(&lse));
    let xh = h(&xd);
    let fwd = |reduction: &'static str| CrossEntropyLossArgs {
        input: &xh,
        target: &th,
        weight_optional: None,
        reduction_optional: reduction,
        ignore_index: -100,
        label_smoothing: 0.0,
        lse_square_scale_for_zloss: 0.0,
        return_zloss: false,
        loss_out: &lossh,
        log_prob_out: &lph,
        zloss_out: &zlh,
        lse_for_zloss_out: &lseh,
    };
    aclnn::cross_entropy_loss(&rt, &fwd("mean")).unwrap();
    let (rl, rlp) = cross_entropy::cross_entropy_fwd(&f64s(&x), &[7, 0, -100], 3, 8, -100);
    assert_close("lossOut", &read(&loss), &[rl], 1e-5, 0.0);
    assert_close("logProbOut", &read(&lp), &rlp, 1e-5, 0.0);
    let g0 = {
        let b = 0.5f32.to_le_bytes();
        rt.upload(TensorDesc::contiguous(&[], DataType::Float).unwrap(), &b)
            .unwrap()
    };
    let gx = zeros(&rt, &[3, 8]);
    let (g0h, gxh) = (h(&g0), h(&gx));
    let bwd = CrossEntropyLossGradArgs {
        grad_loss: &g0h,
        log_prob: &lph,
        target: &th,
        weight_optional: None,
        grad_zloss_optional: None,
        lse_for_zloss_optional: None,
        reduction_optional: "mean",
        ignore_index: -100,
        label_smoothing: 0.0,
        lse_square_scale_for_zloss: 0.0,
        out: &gxh,
    };
    aclnn::cross_entropy_loss_grad(&rt, &bwd).unwrap();
    let rdx = cross_entropy::cross_entropy_bwd(0.5, &rlp, &[7, 0, -100], 3, 8, -100);
    assert_close("xGradOut", &read(&gx), &rdx, 1e-5, 0.0);

    // Refusals, as CANN's first stage.
    let (st, msg) = refused(aclnn::cross_entropy_loss(&rt, &fwd("sum")));
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("reductionOptional"), "{msg}");
    let bad_gamma = up(&rt, &[7], &data(7, 4));
    let (st, msg) = refused(aclnn::rms_norm(
        &rt,
        &xh,
        &h(&bad_gamma),
        1e-6,
        &h(&y),
        &h(&rstd),
    ));
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("gamma"), "{msg}");
    let (st, msg) = refused(aclnn::swi_glu(&rt, &xh, 2, &h(&out)));
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("dimOptional"), "{msg}");
    // A transposed (non-contiguous) x: aclnnSwiGlu takes no strided views.
    let xt_desc = TensorDesc::strided(&[8, 3], &[1, 8], 0, 24, DataType::Float).unwrap();
    let xt = burn_ascend_cann::acl::Tensor::new(&xd.buf, &xt_desc).unwrap();
    let (st, msg) = refused(aclnn::swi_glu(&rt, &xt, 0, &h(&zeros(&rt, &[4, 3]))));
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("contiguous"), "{msg}");
    // gradLoss must be 0-D for "mean".
    let g1 = up(&rt, &[1], &[0.5]);
    let g1h = h(&g1);
    let (st, msg) = refused(aclnn::cross_entropy_loss_grad(
        &rt,
        &CrossEntropyLossGradArgs {
            grad_loss: &g1h,
            ..bwd
        },
    ));
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("gradLoss"), "{msg}");
    // A target outside [0, C) fails at execute (the first stage cannot read device memory).
    let bad_t = up_i64(&rt, &[3], &[7, 8, 0]);
    let bth = h(&bad_t);
    // On a stream of its own: the failure stays with it.
    let rt2 = burn_ascend_acl_sim::runtime().unwrap();
    rt.synchronize().unwrap();
    let r = aclnn::cross_entropy_loss(
        &rt2,
        &CrossEntropyLossArgs {
            target: &bth,
            ..fwd("mean")
        },
    )
    .and_then(|_| rt2.synchronize());
    let e = r.expect_err("an out-of-range target must fail the launch");
    assert!(e.to_string().contains("target[1] = 8"), "{e}");
    let _ = ACLNN_ERR_PARAM_NULLPTR;
}

#[test]
fn simulated_rotary_embedding_and_its_grad_compute_the_reference_and_refuse_as_cann() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    // x [1, 4, 2, 8] (BSND), cos / sin [1, 4, 1, 8] (1S1D).
    let (xs, cs) = ([1, 4, 2, 8], [1, 4, 1, 8]);
    let (x, c, s, dy) = (data(64, 5), data(32, 6), data(32, 7), data(64, 8));
    let (xd, cd, sd, dyd) = (
        up(&rt, &xs, &x),
        up(&rt, &cs, &c),
        up(&rt, &cs, &s),
        up(&rt, &xs, &dy),
    );
    for mode in [RotaryMode::Half, RotaryMode::Interleave] {
        let dims = rules::validate_fwd(&xs, &cs, &cs, mode).unwrap();
        let out = zeros(&rt, &xs);
        aclnn::rotary_position_embedding(&rt, &h(&xd), &h(&cd), &h(&sd), mode.aclnn(), &h(&out))
            .unwrap();
        let ry = rotary::rotary_fwd(&f64s(&x), &f64s(&c), &f64s(&s), &dims, mode);
        assert_close("out", &read(&out), &ry, 1e-5, 0.0);
        // With xOptional: dx, dcos and dsin.
        let (dx, dc, ds) = (zeros(&rt, &xs), zeros(&rt, &cs), zeros(&rt, &cs));
        let (dyh, ch, sh, xh) = (h(&dyd), h(&cd), h(&sd), h(&xd));
        let (dxh, dch, dsh) = (h(&dx), h(&dc), h(&ds));
        let args = RotaryPositionEmbeddingGradArgs {
            dy: &dyh,
            cos: &ch,
            sin: &sh,
            x_optional: Some(&xh),
            mode: mode.aclnn(),
            dx_out: &dxh,
            dcos_out: &dch,
            dsin_out: &dsh,
        };
        aclnn::rotary_position_embedding_grad(&rt, &args).unwrap();
        let rdx = rotary::rotary_bwd(&f64s(&dy), &f64s(&c), &f64s(&s), &dims, mode);
        let (rdc, rds) = rotary::rotary_bwd_tables(&f64s(&dy), &f64s(&x), &dims, mode);
        assert_close("dxOut", &read(&dx), &rdx, 1e-5, 0.0);
        assert_close("dcosOut", &read(&dc), &rdc, 1e-5, 0.0);
        assert_close("dsinOut", &read(&ds), &rds, 1e-5, 0.0);
        // Without xOptional, dcosOut / dsinOut empty (the docs' example): dx only.
        let (e1, e2, dx2) = (
            zeros(&rt, &[1, 1, 1, 0]),
            zeros(&rt, &[1, 1, 1, 0]),
            zeros(&rt, &xs),
        );
        let (e1h, e2h, dx2h) = (h(&e1), h(&e2), h(&dx2));
        let no_x = RotaryPositionEmbeddingGradArgs {
            x_optional: None,
            dx_out: &dx2h,
            dcos_out: &e1h,
            dsin_out: &e2h,
            ..args
        };
        aclnn::rotary_position_embedding_grad(&rt, &no_x).unwrap();
        assert_close("dxOut without x", &read(&dx2), &rdx, 1e-5, 0.0);
        // With xOptional the table gradients must be cos-shaped.
        let (st, msg) = refused(aclnn::rotary_position_embedding_grad(
            &rt,
            &RotaryPositionEmbeddingGradArgs {
                x_optional: Some(&xh),
                ..no_x
            },
        ));
        assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
        assert!(msg.contains("dcosOut"), "{msg}");
    }
    // Refusals, as CANN's first stage.
    let out = zeros(&rt, &xs);
    let call = |x: &DeviceTensor, c: &DeviceTensor, s: &DeviceTensor, mode: i64| {
        refused(aclnn::rotary_position_embedding(
            &rt,
            &h(x),
            &h(c),
            &h(s),
            mode,
            &h(&out),
        ))
    };
    let (st, msg) = call(&xd, &cd, &sd, 2);
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("mode") && msg.contains("950"), "{msg}");
    let wide = up(&rt, &[1, 4, 2, 8], &data(64, 9));
    let (st, msg) = call(&xd, &cd, &wide, 0);
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("sin"), "{msg}");
    // Interleave takes only 11SD-like tables: cos [1, 4, 2, 8] has two leading dimensions.
    let (st, msg) = call(&xd, &wide, &wide, 1);
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("interleave"), "{msg}");
    let c16 = {
        let b: Vec<u8> = c
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        rt.upload(TensorDesc::contiguous(&cs, DataType::Float16).unwrap(), &b)
            .unwrap()
    };
    let (st, msg) = call(&xd, &c16, &sd, 0);
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("cos dtype"), "{msg}");
}
