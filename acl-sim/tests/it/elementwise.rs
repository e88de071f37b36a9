//! The simulated elementwise aclnn ops the Burn backend runs natively (comparisons, SWhere, masked
//! fill, copy, logic, cast, Amax/Amin/ArgMax/ArgMin/MaxDim/MinDim, unary activations and math,
//! GeluV2, pow/clamp by a scalar, random fills) against plain host computations, through strided
//! and broadcast views; and CANN's validation: a null required argument → 161001, a bad dtype,
//! shape, dim or attribute → 161002, with a recent-error message.

use burn_ascend_test_support::assert_close;
use std::ptr::{null, null_mut};

use burn_ascend_cann::acl::aclnn::{self, Compare, Unary};
use burn_ascend_cann::acl::ffi::{
    AclOpExecutor, AclStatus, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR,
};
use burn_ascend_cann::acl::tensor::recent_error;
use burn_ascend_cann::acl::{
    DataType, DeviceTensor, IntArray, Runtime, Scalar, Tensor, TensorDesc,
};
use half::{bf16, f16};

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn i64s(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bools(b: &[u8]) -> Vec<bool> {
    b.iter().map(|&x| x != 0).collect()
}

fn up_raw(rt: &Runtime, dims: &[usize], dt: DataType, bytes: &[u8]) -> DeviceTensor {
    rt.upload(TensorDesc::contiguous(dims, dt).unwrap(), bytes)
        .unwrap()
}

fn up(rt: &Runtime, dims: &[usize], v: &[f32]) -> DeviceTensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    up_raw(rt, dims, DataType::Float, &b)
}

fn up_i64(rt: &Runtime, dims: &[usize], v: &[i64]) -> DeviceTensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    up_raw(rt, dims, DataType::Int64, &b)
}

fn up_bool(rt: &Runtime, dims: &[usize], v: &[bool]) -> DeviceTensor {
    let b: Vec<u8> = v.iter().map(|&x| u8::from(x)).collect();
    up_raw(rt, dims, DataType::Bool, &b)
}

fn zeros(rt: &Runtime, dims: &[usize], dt: DataType) -> DeviceTensor {
    rt.zeros(TensorDesc::contiguous(dims, dt).unwrap()).unwrap()
}

const A: [f32; 6] = [1.0, -2.0, 3.0, 0.5, 0.0, -0.5];
const B: [f32; 3] = [1.0, 0.0, 3.5];

#[test]
fn comparisons_broadcast_through_views_and_scalars() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let a = up(&rt, &[2, 3], &A);
    let b = up(&rt, &[3], &B);
    let out = zeros(&rt, &[2, 3], DataType::Bool);
    let (ah, bh, oh) = (
        a.handle().unwrap(),
        b.handle().unwrap(),
        out.handle().unwrap(),
    );
    let host = |c: Compare, x: f32, y: f32| match c {
        Compare::Eq => x == y,
        Compare::Ne => x != y,
        Compare::Gt => x > y,
        Compare::Ge => x >= y,
        Compare::Lt => x < y,
        Compare::Le => x <= y,
    };
    let all = [
        Compare::Eq,
        Compare::Ne,
        Compare::Gt,
        Compare::Ge,
        Compare::Lt,
        Compare::Le,
    ];
    for c in all {
        aclnn::compare_tensor(&rt, c, &ah, &bh, &oh).unwrap();
        let want: Vec<bool> = (0..6).map(|i| host(c, A[i], B[i % 3])).collect();
        assert_eq!(bools(&out.download().unwrap()), want, "{c:?} tensor");
        let s = Scalar::f32(rt.api(), 0.5).unwrap();
        aclnn::compare_scalar(&rt, c, &ah, &s, &oh).unwrap();
        let want: Vec<bool> = A.iter().map(|&x| host(c, x, 0.5)).collect();
        assert_eq!(bools(&out.download().unwrap()), want, "{c:?} scalar");
    }
    // a transposed view [3, 2] (strides [1, 3]) against itself transposed back: all equal
    let tdesc = TensorDesc::strided(&[3, 2], &[1, 3], 0, 6, DataType::Float).unwrap();
    let th = Tensor::new(&a.buf, &tdesc).unwrap();
    let out2 = zeros(&rt, &[3, 2], DataType::Bool);
    let colt = up(&rt, &[3, 1], &[0.0, -1.0, 1.0]);
    let (o2, colh) = (out2.handle().unwrap(), colt.handle().unwrap());
    aclnn::compare_tensor(&rt, Compare::Gt, &th, &colh, &o2).unwrap();
    // th[i][j] = A[j*3 + i] > col[i]
    let col = [0.0f32, -1.0, 1.0];
    let want: Vec<bool> = (0..6)
        .map(|k| A[(k % 2) * 3 + k / 2] > col[k / 2])
        .collect();
    assert_eq!(bools(&out2.download().unwrap()), want);
    // int64 operands
    let x = up_i64(&rt, &[4], &[1, -5, 7, 1 << 40]);
    let y = up_i64(&rt, &[4], &[1, 5, -7, 1 << 40]);
    let out3 = zeros(&rt, &[4], DataType::Bool);
    let (xh, yh, o3) = (
        x.handle().unwrap(),
        y.handle().unwrap(),
        out3.handle().unwrap(),
    );
    aclnn::compare_tensor(&rt, Compare::Eq, &xh, &yh, &o3).unwrap();
    assert_eq!(bools(&out3.download().unwrap()), [true, false, false, true]);
    let s = Scalar::i64(rt.api(), 1).unwrap();
    aclnn::compare_scalar(&rt, Compare::Le, &xh, &s, &o3).unwrap();
    assert_eq!(bools(&out3.download().unwrap()), [true, true, false, false]);
}

#[test]
fn select_masked_fill_copy_and_logic() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let a = up(&rt, &[2, 3], &A);
    let b = up(&rt, &[3], &B);
    let cond = up_bool(&rt, &[2, 1], &[true, false]);
    let out = zeros(&rt, &[2, 3], DataType::Float);
    let (ah, bh, ch, oh) = (
        a.handle().unwrap(),
        b.handle().unwrap(),
        cond.handle().unwrap(),
        out.handle().unwrap(),
    );
    aclnn::s_where(&rt, &ch, &ah, &bh, &oh).unwrap();
    assert_eq!(
        f32s(&out.download().unwrap()),
        [1.0, -2.0, 3.0, 1.0, 0.0, 3.5]
    );

    // copy `b` broadcast into `out`, then fill where a mask [3] is true
    aclnn::inplace_copy(&rt, &oh, &bh).unwrap();
    assert_eq!(
        f32s(&out.download().unwrap()),
        [1.0, 0.0, 3.5, 1.0, 0.0, 3.5]
    );
    let mask = up_bool(&rt, &[3], &[false, true, false]);
    let mh = mask.handle().unwrap();
    let v = Scalar::f32(rt.api(), -9.0).unwrap();
    aclnn::inplace_masked_fill_scalar(&rt, &oh, &mh, &v).unwrap();
    assert_eq!(
        f32s(&out.download().unwrap()),
        [1.0, -9.0, 3.5, 1.0, -9.0, 3.5]
    );

    let p = up_bool(&rt, &[2, 2], &[true, true, false, false]);
    let q = up_bool(&rt, &[2], &[true, false]);
    let r = zeros(&rt, &[2, 2], DataType::Bool);
    let (ph, qh, rh) = (
        p.handle().unwrap(),
        q.handle().unwrap(),
        r.handle().unwrap(),
    );
    aclnn::logical(&rt, true, &ph, &qh, &rh).unwrap();
    assert_eq!(bools(&r.download().unwrap()), [true, false, false, false]);
    aclnn::logical(&rt, false, &ph, &qh, &rh).unwrap();
    assert_eq!(bools(&r.download().unwrap()), [true, true, true, false]);
    aclnn::logical_not(&rt, &ph, &rh).unwrap();
    assert_eq!(bools(&r.download().unwrap()), [false, false, true, true]);
}

#[test]
fn casts_round_once_to_the_target() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let v = [1.1f32, -2.7, 65504.0, 1e-8, 0.333_333_34, -0.0];
    let a = up(&rt, &[6], &v);
    let ah = a.handle().unwrap();
    let h = zeros(&rt, &[6], DataType::Float16);
    let hh = h.handle().unwrap();
    aclnn::cast(&rt, &ah, DataType::Float16, &hh).unwrap();
    let got: Vec<f16> = h
        .download()
        .unwrap()
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]))
        .collect();
    let want: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
    assert_eq!(got, want);
    let bf = zeros(&rt, &[6], DataType::Bf16);
    let bh = bf.handle().unwrap();
    aclnn::cast(&rt, &ah, DataType::Bf16, &bh).unwrap();
    let got: Vec<bf16> = bf
        .download()
        .unwrap()
        .chunks_exact(2)
        .map(|c| bf16::from_le_bytes([c[0], c[1]]))
        .collect();
    let want: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
    assert_eq!(got, want);
    let i = zeros(&rt, &[6], DataType::Int64);
    let ih = i.handle().unwrap();
    aclnn::cast(&rt, &ah, DataType::Int64, &ih).unwrap();
    assert_eq!(i64s(&i.download().unwrap()), [1, -2, 65504, 0, 0, 0]);
    // bool → f32 and back through f32 → bool
    let m = up_bool(&rt, &[6], &[true, false, true, true, false, false]);
    let f = zeros(&rt, &[6], DataType::Float);
    let (mh, fh) = (m.handle().unwrap(), f.handle().unwrap());
    aclnn::cast(&rt, &mh, DataType::Float, &fh).unwrap();
    assert_eq!(f32s(&f.download().unwrap()), [1., 0., 1., 1., 0., 0.]);
    let back = zeros(&rt, &[6], DataType::Bool);
    let bkh = back.handle().unwrap();
    aclnn::cast(&rt, &ah, DataType::Bool, &bkh).unwrap();
    assert_eq!(
        bools(&back.download().unwrap()),
        [true, true, true, true, true, false]
    );
}

#[test]
fn max_min_reductions_with_and_without_indices() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    // [[1, -2, 3], [0.5, 0, -0.5]] read transposed as [3, 2]
    let a = up(&rt, &[2, 3], &A);
    let ah = a.handle().unwrap();
    let tdesc = TensorDesc::strided(&[3, 2], &[1, 3], 0, 6, DataType::Float).unwrap();
    let th = Tensor::new(&a.buf, &tdesc).unwrap();

    let o = zeros(&rt, &[2, 1], DataType::Float);
    let oh = o.handle().unwrap();
    let d1 = IntArray::new(rt.api(), &[1]).unwrap();
    aclnn::amax(&rt, true, &ah, &d1, true, &oh).unwrap();
    assert_eq!(f32s(&o.download().unwrap()), [3.0, 0.5]);
    aclnn::amax(&rt, false, &ah, &d1, true, &oh).unwrap();
    assert_eq!(f32s(&o.download().unwrap()), [-2.0, -0.5]);
    // all dims of the transposed view, keepDim false → a 0-d result
    let all = IntArray::new(rt.api(), &[0, -1]).unwrap();
    let s = zeros(&rt, &[], DataType::Float);
    let sh = s.handle().unwrap();
    aclnn::amax(&rt, true, &th, &all, false, &sh).unwrap();
    assert_eq!(f32s(&s.download().unwrap()), [3.0]);

    // along dim 0 of the view [3, 2]: rows are (1, 0.5), (-2, 0), (3, -0.5)
    let idx = zeros(&rt, &[1, 2], DataType::Int64);
    let ih = idx.handle().unwrap();
    aclnn::arg(&rt, true, &th, 0, true, &ih).unwrap();
    assert_eq!(i64s(&idx.download().unwrap()), [2, 0]);
    aclnn::arg(&rt, false, &th, 0, true, &ih).unwrap();
    assert_eq!(i64s(&idx.download().unwrap()), [1, 2]);
    let vals = zeros(&rt, &[2], DataType::Float);
    let idx2 = zeros(&rt, &[2], DataType::Int64);
    let (vh, i2h) = (vals.handle().unwrap(), idx2.handle().unwrap());
    aclnn::dim_with_indices(&rt, true, &th, -2, false, &vh, &i2h).unwrap();
    assert_eq!(f32s(&vals.download().unwrap()), [3.0, 0.5]);
    assert_eq!(i64s(&idx2.download().unwrap()), [2, 0]);
    aclnn::dim_with_indices(&rt, false, &th, 0, false, &vh, &i2h).unwrap();
    assert_eq!(f32s(&vals.download().unwrap()), [-2.0, -0.5]);
    assert_eq!(i64s(&idx2.download().unwrap()), [1, 2]);
    // ties: the first index
    let t = up(&rt, &[4], &[1.0, 5.0, 5.0, 0.0]);
    let i1 = zeros(&rt, &[1], DataType::Int64);
    let (tth, i1h) = (t.handle().unwrap(), i1.handle().unwrap());
    aclnn::arg(&rt, true, &tth, 0, true, &i1h).unwrap();
    assert_eq!(i64s(&i1.download().unwrap()), [1]);
}

fn erf_ref(x: f64) -> f64 {
    // Taylor series, exact enough for |x| <= 3 at f32 precision.
    let mut sum = 0.0;
    let mut term = x;
    let mut n = 0.0;
    while term.abs() > 1e-17 {
        sum += term / (2.0 * n + 1.0);
        n += 1.0;
        term *= -x * x / n;
    }
    2.0 / std::f64::consts::PI.sqrt() * sum
}

#[test]
fn unary_math_activations_pow_and_clamp() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let v: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.75).collect();
    let a = up(&rt, &[3, 4], &v);
    let o = zeros(&rt, &[3, 4], DataType::Float);
    let (ah, oh) = (a.handle().unwrap(), o.handle().unwrap());
    type F = fn(f32) -> f32;
    let cases: [(Unary, F); 7] = [
        (Unary::Relu, |x| x.max(0.0)),
        (Unary::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        (Unary::Neg, |x| -x),
        (Unary::Reciprocal, |x| 1.0 / x),
        (Unary::Sin, f32::sin),
        (Unary::Cos, f32::cos),
        (Unary::Erf, |x| erf_ref(f64::from(x)) as f32),
    ];
    for (op, f) in cases {
        aclnn::unary(&rt, op, &ah, &oh).unwrap();
        let want: Vec<f32> = v.iter().map(|&x| f(x)).collect();
        assert_close("out", &f32s(&o.download().unwrap()), &want, 1e-6, 1e-6);
    }
    aclnn::gelu_v2(&rt, &ah, 0, &oh).unwrap();
    let want: Vec<f32> = v
        .iter()
        .map(|&x| {
            let x = f64::from(x);
            (0.5 * x * (1.0 + erf_ref(x / 2f64.sqrt()))) as f32
        })
        .collect();
    assert_close("out", &f32s(&o.download().unwrap()), &want, 1e-6, 1e-6);
    aclnn::gelu_v2(&rt, &ah, 1, &oh).unwrap();
    let tanh_form: Vec<f32> = v
        .iter()
        .map(|&x| {
            let c = (2.0 / std::f32::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        })
        .collect();
    assert_close("out", &f32s(&o.download().unwrap()), &tanh_form, 1e-5, 1e-5);

    let e = Scalar::f32(rt.api(), 2.5).unwrap();
    aclnn::pow_tensor_scalar(&rt, &ah, &e, &oh).unwrap();
    let got = f32s(&o.download().unwrap());
    for (g, &x) in got.iter().zip(&v) {
        if x < 0.0 {
            assert!(g.is_nan(), "negative base to a fractional power: {g}");
        } else {
            assert_close("out", &[*g], &[x.powf(2.5)], 1e-6, 1e-6);
        }
    }
    let lo = Scalar::f32(rt.api(), -1.0).unwrap();
    let hi = Scalar::f32(rt.api(), 1.5).unwrap();
    aclnn::clamp(&rt, &ah, Some(&lo), Some(&hi), &oh).unwrap();
    let want: Vec<f32> = v.iter().map(|&x| x.clamp(-1.0, 1.5)).collect();
    assert_eq!(f32s(&o.download().unwrap()), want);
    aclnn::clamp(&rt, &ah, Some(&lo), None, &oh).unwrap();
    let want: Vec<f32> = v.iter().map(|&x| x.max(-1.0)).collect();
    assert_eq!(f32s(&o.download().unwrap()), want);
    aclnn::clamp(&rt, &ah, None, Some(&hi), &oh).unwrap();
    let want: Vec<f32> = v.iter().map(|&x| x.min(1.5)).collect();
    assert_eq!(f32s(&o.download().unwrap()), want);
}

fn moments(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var)
}

#[test]
fn random_fills_have_the_right_moments_and_are_keyed_on_seed_and_offset() {
    const N: usize = 200_000;
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let t = zeros(&rt, &[N], DataType::Float);
    let th = t.handle().unwrap();

    // U[-1, 3): mean 1, variance 16/12; tolerance ~6 standard errors.
    aclnn::inplace_uniform(&rt, &th, -1.0, 3.0, 42, 0).unwrap();
    let u = f32s(&t.download().unwrap());
    assert!(u.iter().all(|&x| (-1.0..3.0).contains(&x)));
    let (m, var) = moments(&u);
    assert!((m - 1.0).abs() < 0.02, "uniform mean {m}");
    assert!((var - 16.0 / 12.0).abs() < 0.02, "uniform variance {var}");
    // same (seed, offset): same values; another offset or seed: different ones
    aclnn::inplace_uniform(&rt, &th, -1.0, 3.0, 42, 0).unwrap();
    assert_eq!(f32s(&t.download().unwrap()), u);
    aclnn::inplace_uniform(&rt, &th, -1.0, 3.0, 42, N as u64).unwrap();
    assert_ne!(f32s(&t.download().unwrap()), u);
    aclnn::inplace_uniform(&rt, &th, -1.0, 3.0, 43, 0).unwrap();
    assert_ne!(f32s(&t.download().unwrap()), u);

    // N(2, 0.5²)
    aclnn::inplace_normal(&rt, &th, 2.0, 0.5, 7, 0).unwrap();
    let z = f32s(&t.download().unwrap());
    let (m, var) = moments(&z);
    assert!((m - 2.0).abs() < 0.01, "normal mean {m}");
    assert!((var - 0.25).abs() < 0.01, "normal variance {var}");
    let within = z.iter().filter(|&&x| (x - 2.0).abs() < 0.5).count() as f64 / N as f64;
    assert!(
        (within - 0.6827).abs() < 0.01,
        "P(|z - mean| < std) = {within}"
    );

    // Bernoulli(0.3) into f16
    let h = zeros(&rt, &[N], DataType::Float16);
    let hh = h.handle().unwrap();
    let p = Scalar::f64(rt.api(), 0.3).unwrap();
    aclnn::inplace_bernoulli(&rt, &hh, &p, 9, 0).unwrap();
    let b: Vec<f32> = h
        .download()
        .unwrap()
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    assert!(b.iter().all(|&x| x == 0.0 || x == 1.0));
    let (m, _) = moments(&b);
    assert!((m - 0.3).abs() < 0.01, "bernoulli mean {m}");
}

fn status_and_message(
    api: &'static burn_ascend_cann::acl::AclApi,
    st: AclStatus,
) -> (AclStatus, String) {
    (st, recent_error(api))
}

#[test]
fn null_and_bad_arguments_are_refused_like_cann() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let api = rt.api();
    let e = api;
    let a = up(&rt, &[2, 3], &A);
    let b = up(&rt, &[4], &[0.0; 4]);
    let bo = zeros(&rt, &[2, 3], DataType::Bool);
    let fo = zeros(&rt, &[2, 3], DataType::Float);
    let (ah, bh, boh, foh) = (
        a.handle().unwrap(),
        b.handle().unwrap(),
        bo.handle().unwrap(),
        fo.handle().unwrap(),
    );
    let (mut ws, mut ex) = (0u64, null_mut::<AclOpExecutor>());

    let eq = e.eq_tensor.unwrap().workspace;
    let (st, msg) = status_and_message(
        api,
        // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
        unsafe { eq(null(), ah.as_ptr(), boh.as_ptr(), &mut ws, &mut ex) },
    );
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR, "{msg}");
    assert!(msg.contains("self is null"), "{msg}");
    // shapes that do not broadcast
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        eq(ah.as_ptr(), bh.as_ptr(), boh.as_ptr(), &mut ws, &mut ex)
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("do not broadcast"), "{msg}");
    // out must be BOOL
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        eq(ah.as_ptr(), ah.as_ptr(), foh.as_ptr(), &mut ws, &mut ex)
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("out dtype"), "{msg}");
    // a null scalar
    let gts = e.gt_scalar.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe { gts(ah.as_ptr(), null(), boh.as_ptr(), &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);

    // SWhere: null condition; a float condition
    let sw = e.s_where.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe {
        sw(
            null(),
            ah.as_ptr(),
            ah.as_ptr(),
            foh.as_ptr(),
            &mut ws,
            &mut ex,
        )
    };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        sw(
            ah.as_ptr(),
            ah.as_ptr(),
            ah.as_ptr(),
            foh.as_ptr(),
            &mut ws,
            &mut ex,
        )
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("condition dtype"), "{msg}");

    // masked fill: a mask that does not broadcast to selfRef
    let mf = e.inplace_masked_fill_scalar.unwrap().workspace;
    let bm = zeros(&rt, &[4], DataType::Bool);
    let bmh = bm.handle().unwrap();
    let v = Scalar::f32(api, 1.0).unwrap();
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        mf(foh.as_ptr(), bmh.as_ptr(), v.as_ptr(), &mut ws, &mut ex)
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("must broadcast"), "{msg}");

    // cast: dtype argument differs from out's dtype
    let cast = e.cast.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        cast(
            ah.as_ptr(),
            DataType::Int64.raw(),
            foh.as_ptr(),
            &mut ws,
            &mut ex,
        )
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");

    // MaxDim: dim out of range; indices of a float dtype
    let md = e.max_dim.unwrap().workspace;
    let v2 = zeros(&rt, &[2, 1], DataType::Float);
    let i2 = zeros(&rt, &[2, 1], DataType::Int64);
    let (v2h, i2h) = (v2.handle().unwrap(), i2.handle().unwrap());
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        md(
            ah.as_ptr(),
            2,
            true,
            v2h.as_ptr(),
            i2h.as_ptr(),
            &mut ws,
            &mut ex,
        )
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("out of range"), "{msg}");
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        md(
            ah.as_ptr(),
            1,
            true,
            v2h.as_ptr(),
            v2h.as_ptr(),
            &mut ws,
            &mut ex,
        )
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("indices dtype"), "{msg}");
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe { md(ah.as_ptr(), 1, true, v2h.as_ptr(), null(), &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
    // Amax: a null dim array; out of the wrong shape
    let am = e.amax.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe { am(ah.as_ptr(), null(), true, v2h.as_ptr(), &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
    let d0 = IntArray::new(api, &[0]).unwrap();
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        am(
            ah.as_ptr(),
            d0.as_ptr(),
            true,
            v2h.as_ptr(),
            &mut ws,
            &mut ex,
        )
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("out must be [1, 3]"), "{msg}");

    // unary: an int input to a float-only op; GeluV2's approximate outside {0, 1}
    let ints = zeros(&rt, &[2, 3], DataType::Int64);
    let ih = ints.handle().unwrap();
    let sin = e.sin.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe { sin(ih.as_ptr(), ih.as_ptr(), &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID);
    let gelu = e.gelu_v2.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let (st, msg) = status_and_message(api, unsafe {
        gelu(ah.as_ptr(), 2, foh.as_ptr(), &mut ws, &mut ex)
    });
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID, "{msg}");
    assert!(msg.contains("approximate"), "{msg}");
    // clamp with neither bound
    let clamp = e.clamp.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe { clamp(ah.as_ptr(), null(), null(), foh.as_ptr(), &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
    let err = aclnn::clamp(&rt, &ah, None, None, &foh).unwrap_err();
    assert!(err.to_string().contains("at least one"), "{err}");
    // random: from > to; std < 0; prob > 1; a null selfRef
    let uni = e.inplace_uniform.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe { uni(foh.as_ptr(), 2.0, 1.0, 0, 0, &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID);
    // SAFETY: the op's GetWorkspaceSize prototype; a null selfRef is what is tested.
    let st = unsafe { uni(null(), 0.0, 1.0, 0, 0, &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
    let nor = e.inplace_normal.unwrap().workspace;
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe { nor(foh.as_ptr(), 0.0, -1.0, 0, 0, &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID);
    let ber = e.inplace_bernoulli.unwrap().workspace;
    let p = Scalar::f64(api, 1.5).unwrap();
    // SAFETY: the op's GetWorkspaceSize prototype; live handles or null.
    let st = unsafe { ber(foh.as_ptr(), p.as_ptr(), 0, 0, &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID);
    // the safe wrappers surface the status
    let err = aclnn::compare_tensor(&rt, Compare::Lt, &ah, &bh, &boh).unwrap_err();
    assert_eq!(err.status(), Some(ACLNN_ERR_PARAM_INVALID), "{err}");
}

#[test]
fn int_add_sub_mul_and_scalar_forms_are_exact() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let big = 1i64 << 60;
    let a = up_i64(&rt, &[2, 2], &[1, -2, big, 7]);
    let b = up_i64(&rt, &[2], &[10, 3]);
    let o = zeros(&rt, &[2, 2], DataType::Int64);
    let (ah, bh, oh) = (
        a.handle().unwrap(),
        b.handle().unwrap(),
        o.handle().unwrap(),
    );
    let two = Scalar::i64(rt.api(), 2).unwrap();
    aclnn::add(&rt, &ah, &bh, &two, &oh).unwrap();
    assert_eq!(i64s(&o.download().unwrap()), [21, 4, big + 20, 13]);
    aclnn::sub(&rt, &ah, &bh, &two, &oh).unwrap();
    assert_eq!(i64s(&o.download().unwrap()), [-19, -8, big - 20, 1]);
    aclnn::mul(&rt, &ah, &bh, &oh).unwrap();
    assert_eq!(
        i64s(&o.download().unwrap()),
        [10, -6, big.wrapping_mul(10), 21]
    );
    let s = Scalar::i64(rt.api(), -3).unwrap();
    let one = Scalar::i64(rt.api(), 1).unwrap();
    aclnn::adds(&rt, &ah, &s, &one, &oh).unwrap();
    assert_eq!(i64s(&o.download().unwrap()), [-2, -5, big - 3, 4]);
    aclnn::muls(&rt, &ah, &s, &oh).unwrap();
    assert_eq!(
        i64s(&o.download().unwrap()),
        [-3, 6, big.wrapping_mul(-3), -21]
    );
    // int32
    let c: Vec<u8> = [5i32, -6].iter().flat_map(|x| x.to_le_bytes()).collect();
    let c = up_raw(&rt, &[2], DataType::Int32, &c);
    let co = zeros(&rt, &[2], DataType::Int32);
    let (ch, coh) = (c.handle().unwrap(), co.handle().unwrap());
    aclnn::mul(&rt, &ch, &ch, &coh).unwrap();
    let got: Vec<i32> = co
        .download()
        .unwrap()
        .chunks_exact(4)
        .map(|x| i32::from_le_bytes(x.try_into().unwrap()))
        .collect();
    assert_eq!(got, [25, 36]);
    // a fractional alpha or mixed int widths are refused
    let half = Scalar::f32(rt.api(), 0.5).unwrap();
    let e = aclnn::add(&rt, &ah, &bh, &half, &oh).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
    assert!(e.to_string().contains("not integral"), "{e}");
    let e = aclnn::mul(&rt, &ah, &ch, &oh).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
}
