//! The simulated elementwise and matmul aclnn ops (`aclnnAdd/Sub/Mul/Div`, `aclnnMatmul`) the
//! Burn backend calls: results through strided / broadcast views, and CANN's validation
//! (null → 161001, dtype or shape → 161002) with a recent-error message.

use std::ptr::{null, null_mut};

use burn_ascend_cann::acl::ffi::{AclOpExecutor, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR};
use burn_ascend_cann::acl::tensor::recent_error;
use burn_ascend_cann::acl::{aclnn, DataType, DeviceTensor, Runtime, Scalar, Tensor, TensorDesc};

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn up(rt: &Runtime, dims: &[usize], v: &[f32]) -> DeviceTensor {
    rt.upload(
        TensorDesc::contiguous(dims, DataType::Float).unwrap(),
        &bytes(v),
    )
    .unwrap()
}

#[test]
fn add_sub_mul_div_broadcast_and_read_strided_views() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let a = up(&rt, &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = up(&rt, &[3], &[10., 20., 30.]);
    let out = rt
        .zeros(TensorDesc::contiguous(&[2, 3], DataType::Float).unwrap())
        .unwrap();
    let (ah, bh, oh) = (
        a.handle().unwrap(),
        b.handle().unwrap(),
        out.handle().unwrap(),
    );
    let two = Scalar::f32(rt.api(), 2.0).unwrap();
    aclnn::add(&rt, &ah, &bh, &two, &oh).unwrap();
    assert_eq!(
        floats(&out.download().unwrap()),
        [21., 42., 63., 24., 45., 66.]
    );
    aclnn::sub(&rt, &ah, &bh, &two, &oh).unwrap();
    assert_eq!(
        floats(&out.download().unwrap()),
        [-19., -38., -57., -16., -35., -54.]
    );
    aclnn::mul(&rt, &ah, &bh, &oh).unwrap();
    assert_eq!(
        floats(&out.download().unwrap()),
        [10., 40., 90., 40., 100., 180.]
    );
    aclnn::div(&rt, &bh, &ah, &oh).unwrap();
    assert_eq!(
        floats(&out.download().unwrap()),
        [10., 10., 10., 2.5, 4., 5.]
    );
    // a transposed view of `a` ([3, 2], strides [1, 3]) times itself
    let tdesc = TensorDesc::strided(&[3, 2], &[1, 3], 0, 6, DataType::Float).unwrap();
    let th = Tensor::new(&a.buf, &tdesc).unwrap();
    let out2 = rt
        .zeros(TensorDesc::contiguous(&[3, 2], DataType::Float).unwrap())
        .unwrap();
    let o2 = out2.handle().unwrap();
    aclnn::mul(&rt, &th, &th, &o2).unwrap();
    assert_eq!(
        floats(&out2.download().unwrap()),
        [1., 16., 4., 25., 9., 36.]
    );
}

#[test]
fn matmul_with_broadcast_batch() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let a = up(
        &rt,
        &[2, 2, 3],
        &[1., 2., 3., 4., 5., 6., 0., 1., 0., 1., 0., 0.],
    );
    let b = up(&rt, &[1, 3, 1], &[1., 1., 1.]);
    let out = rt
        .zeros(TensorDesc::contiguous(&[2, 2, 1], DataType::Float).unwrap())
        .unwrap();
    let (ah, bh, oh) = (
        a.handle().unwrap(),
        b.handle().unwrap(),
        out.handle().unwrap(),
    );
    aclnn::matmul(&rt, &ah, &bh, &oh, 0).unwrap();
    assert_eq!(floats(&out.download().unwrap()), [6., 15., 1., 1.]);
    // inner dims that differ: 161002
    let bad = up(&rt, &[1, 2, 1], &[1., 1.]);
    let badh = bad.handle().unwrap();
    let e = aclnn::matmul(&rt, &ah, &badh, &oh, 0).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
    assert!(e.to_string().contains("inner dims"), "{e}");
}

#[test]
fn null_and_bad_dtype_or_shape_are_refused_like_cann() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let api = rt.api();
    let a = up(&rt, &[2, 3], &[0.; 6]);
    let out = rt
        .zeros(TensorDesc::contiguous(&[2, 3], DataType::Float).unwrap())
        .unwrap();
    let ints = rt
        .upload(
            TensorDesc::contiguous(&[2, 3], DataType::Int32).unwrap(),
            &[0u8; 24],
        )
        .unwrap();
    let wrong = rt
        .zeros(TensorDesc::contiguous(&[3, 2], DataType::Float).unwrap())
        .unwrap();
    let (ah, oh, ih, wh) = (
        a.handle().unwrap(),
        out.handle().unwrap(),
        ints.handle().unwrap(),
        wrong.handle().unwrap(),
    );
    let f = api.mul.unwrap();
    let call = |x, y, o| {
        let (mut ws, mut ex) = (0u64, null_mut::<AclOpExecutor>());
        // SAFETY: aclnnMulGetWorkspaceSize's prototype; live handles or null.
        unsafe { (f.workspace)(x, y, o, &mut ws, &mut ex) }
    };
    assert_eq!(
        call(null(), ah.as_ptr(), oh.as_ptr()),
        ACLNN_ERR_PARAM_NULLPTR
    );
    assert!(
        recent_error(api).contains("self is null"),
        "{}",
        recent_error(api)
    );
    assert_eq!(
        call(ah.as_ptr(), ih.as_ptr(), oh.as_ptr()),
        ACLNN_ERR_PARAM_INVALID
    );
    assert!(recent_error(api).contains("dtype"), "{}", recent_error(api));
    assert_eq!(
        call(ah.as_ptr(), ah.as_ptr(), wh.as_ptr()),
        ACLNN_ERR_PARAM_INVALID
    );
    assert!(
        recent_error(api).contains("broadcast shape"),
        "{}",
        recent_error(api)
    );
    // aclnnAdd needs alpha
    let add = api.add.unwrap();
    let (mut ws, mut ex) = (0u64, null_mut::<AclOpExecutor>());
    // SAFETY: aclnnAddGetWorkspaceSize's prototype; live handles, a null alpha.
    let st = unsafe {
        (add.workspace)(
            ah.as_ptr(),
            ah.as_ptr(),
            null(),
            oh.as_ptr(),
            &mut ws,
            &mut ex,
        )
    };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
}
