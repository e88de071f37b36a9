//! The simulated indexing and layout ops (`aclnnIndexSelect`, `aclnnGather`, `aclnnIndexAdd`,
//! `aclnnScatterAdd`, `aclnnCat`, `aclnnInplaceCopy`, `aclnnRepeat`, `aclnnFlip`) against plain
//! host computations, through strided views, and CANN's validation: null → 161001, dtype /
//! shape / dim → 161002, an index value out of range → 361001 at launch (nothing written).

use std::ptr::{null, null_mut};

use burn_ascend_cann::acl::ffi::{
    AclOpExecutor, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ACLNN_ERR_RUNTIME_ERROR,
};
use burn_ascend_cann::acl::tensor::recent_error;
use burn_ascend_cann::acl::{
    aclnn, DataType, DeviceTensor, IntArray, Runtime, Scalar, Tensor, TensorDesc, TensorList,
};
use half::f16;

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

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

fn up_i32(rt: &Runtime, dims: &[usize], v: &[i32]) -> DeviceTensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(TensorDesc::contiguous(dims, DataType::Int32).unwrap(), &b)
        .unwrap()
}

fn zeros(rt: &Runtime, dims: &[usize], dt: DataType) -> DeviceTensor {
    rt.zeros(TensorDesc::contiguous(dims, dt).unwrap()).unwrap()
}

fn seq(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

#[test]
fn index_select_i64_and_i32_through_a_transposed_view() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let a = up(&rt, &[3, 4], &seq(12));
    let idx = up_i64(&rt, &[3], &[2, 0, 2]);
    let out = zeros(&rt, &[3, 4], DataType::Float);
    let (ah, ih, oh) = (
        a.handle().unwrap(),
        idx.handle().unwrap(),
        out.handle().unwrap(),
    );
    aclnn::index_select(&rt, &ah, 0, &ih, &oh).unwrap();
    let want: Vec<f32> = [2, 0, 2]
        .iter()
        .flat_map(|&r| (0..4).map(move |c| (r * 4 + c) as f32))
        .collect();
    assert_eq!(floats(&out.download().unwrap()), want);

    // dim 1 (as -1) of the transposed view [4, 3] (strides [1, 4]), i32 indices
    let t = TensorDesc::strided(&[4, 3], &[1, 4], 0, 12, DataType::Float).unwrap();
    let th = Tensor::new(&a.buf, &t).unwrap();
    let idx32 = up_i32(&rt, &[2], &[1, 1]);
    let out2 = zeros(&rt, &[4, 2], DataType::Float);
    let (i2, o2) = (idx32.handle().unwrap(), out2.handle().unwrap());
    aclnn::index_select(&rt, &th, -1, &i2, &o2).unwrap();
    // transposed[r][c] = a[c][r]; column 1 of the transpose is row 1 of a
    let want2: Vec<f32> = (0..4).flat_map(|r| [(4 + r) as f32; 2]).collect();
    assert_eq!(floats(&out2.download().unwrap()), want2);
}

#[test]
fn gather_and_scatter_add_match_the_host() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let a = up(&rt, &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let idx = up_i64(&rt, &[2, 2], &[2, 0, 1, 1]);
    let out = zeros(&rt, &[2, 2], DataType::Float);
    let (ah, ih, oh) = (
        a.handle().unwrap(),
        idx.handle().unwrap(),
        out.handle().unwrap(),
    );
    aclnn::gather(&rt, &ah, 1, &ih, &oh).unwrap();
    assert_eq!(floats(&out.download().unwrap()), [3., 1., 5., 5.]);

    // scatter_add along dim 0 with duplicate rows: out = self + Σ src at index
    let src = up(&rt, &[3, 3], &seq(9));
    let sidx = up_i32(&rt, &[3, 3], &[1, 0, 1, 1, 1, 0, 1, 0, 1]);
    let sout = zeros(&rt, &[2, 3], DataType::Float);
    let (sh, sih, soh) = (
        src.handle().unwrap(),
        sidx.handle().unwrap(),
        sout.handle().unwrap(),
    );
    aclnn::scatter_add(&rt, &ah, 0, &sih, &sh, &soh).unwrap();
    let mut want = vec![1f32, 2., 3., 4., 5., 6.];
    let iv = [1, 0, 1, 1, 1, 0, 1, 0, 1];
    for r in 0..3 {
        for c in 0..3 {
            want[iv[r * 3 + c] * 3 + c] += (r * 3 + c) as f32;
        }
    }
    assert_eq!(floats(&sout.download().unwrap()), want);

    // src must be contiguous (aclnnScatterAdd.md): a transposed src is refused
    let tsrc = TensorDesc::strided(&[3, 3], &[1, 3], 0, 9, DataType::Float).unwrap();
    let tsh = Tensor::new(&src.buf, &tsrc).unwrap();
    let e = aclnn::scatter_add(&rt, &ah, 0, &sih, &tsh, &soh).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
    assert!(e.to_string().contains("contiguous"), "{e}");
}

#[test]
fn index_add_accumulates_duplicates_in_order_with_alpha_in_f32_and_f16() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let a = up(&rt, &[4, 2], &seq(8));
    let idx = up_i64(&rt, &[3], &[3, 1, 3]);
    let src = up(&rt, &[3, 2], &[1., 2., 10., 20., 100., 200.]);
    let out = zeros(&rt, &[4, 2], DataType::Float);
    let alpha = Scalar::f32(rt.api(), 2.0).unwrap();
    let (ah, ih, sh, oh) = (
        a.handle().unwrap(),
        idx.handle().unwrap(),
        src.handle().unwrap(),
        out.handle().unwrap(),
    );
    aclnn::index_add(&rt, &ah, 0, &ih, &sh, &alpha, &oh).unwrap();
    assert_eq!(
        floats(&out.download().unwrap()),
        [0., 1., 22., 43., 4., 5., 208., 411.]
    );

    // f16, dim 1
    let h = |v: &[f32]| -> Vec<u8> {
        v.iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect()
    };
    let a16 = rt
        .upload(
            TensorDesc::contiguous(&[2, 3], DataType::Float16).unwrap(),
            &h(&[1., 2., 3., 4., 5., 6.]),
        )
        .unwrap();
    let s16 = rt
        .upload(
            TensorDesc::contiguous(&[2, 2], DataType::Float16).unwrap(),
            &h(&[0.5, 0.25, 1., 2.]),
        )
        .unwrap();
    let i2 = up_i32(&rt, &[2], &[0, 0]);
    let o16 = zeros(&rt, &[2, 3], DataType::Float16);
    let one = Scalar::f32(rt.api(), 1.0).unwrap();
    let (a16h, s16h, i2h, o16h) = (
        a16.handle().unwrap(),
        s16.handle().unwrap(),
        i2.handle().unwrap(),
        o16.handle().unwrap(),
    );
    aclnn::index_add(&rt, &a16h, 1, &i2h, &s16h, &one, &o16h).unwrap();
    let got: Vec<f32> = o16
        .download()
        .unwrap()
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    assert_eq!(got, [1.75, 2., 3., 7., 5., 6.]);
}

#[test]
fn cat_of_views_inplace_copy_into_a_strided_view_repeat_and_flip() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let api = rt.api();
    let a = up(&rt, &[2, 2], &[1., 2., 3., 4.]);
    let b = up(&rt, &[2, 3], &seq(6));
    // cat along dim 1 of a's transpose and b
    let at = TensorDesc::strided(&[2, 2], &[1, 2], 0, 4, DataType::Float).unwrap();
    let list = TensorList::new(
        api,
        vec![Tensor::new(&a.buf, &at).unwrap(), b.handle().unwrap()],
    )
    .unwrap();
    let out = zeros(&rt, &[2, 5], DataType::Float);
    let oh = out.handle().unwrap();
    aclnn::cat(&rt, &list, 1, &oh).unwrap();
    assert_eq!(
        floats(&out.download().unwrap()),
        [1., 3., 0., 1., 2., 2., 4., 3., 4., 5.]
    );
    // mismatched sizes off the cat dim → 161002
    let bad = TensorList::new(api, vec![a.handle().unwrap(), b.handle().unwrap()]).unwrap();
    let e = aclnn::cat(&rt, &bad, 0, &oh).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");

    // copy [2] broadcast into the strided view out[:, 1..5;2] ([2, 2], strides [5, 2], off 1)
    let v = TensorDesc::strided(&[2, 2], &[5, 2], 1, 10, DataType::Float).unwrap();
    let vh = Tensor::new(&out.buf, &v).unwrap();
    let src = up(&rt, &[2], &[-1., -2.]);
    aclnn::inplace_copy(&rt, &vh, &src.handle().unwrap()).unwrap();
    assert_eq!(
        floats(&out.download().unwrap()),
        [1., -1., 0., -2., 2., 2., -1., 3., -2., 5.]
    );

    // repeat [2, 2] by [2, 1, 3] → [2, 2, 6]
    let reps = IntArray::new(api, &[2, 1, 3]).unwrap();
    let r = zeros(&rt, &[2, 2, 6], DataType::Float);
    aclnn::repeat(&rt, &a.handle().unwrap(), &reps, &r.handle().unwrap()).unwrap();
    let row = |x: f32, y: f32| [x, y, x, y, x, y];
    let want: Vec<f32> = (0..2)
        .flat_map(|_| row(1., 2.).into_iter().chain(row(3., 4.)))
        .collect();
    assert_eq!(floats(&r.download().unwrap()), want);

    // flip dims [0, 1] of b
    let dims = IntArray::new(api, &[0, -1]).unwrap();
    let f = zeros(&rt, &[2, 3], DataType::Float);
    aclnn::flip(&rt, &b.handle().unwrap(), &dims, &f.handle().unwrap()).unwrap();
    assert_eq!(floats(&f.download().unwrap()), [5., 4., 3., 2., 1., 0.]);
    // a repeated flip dim → 161002
    let twice = IntArray::new(api, &[1, -1]).unwrap();
    let e = aclnn::flip(&rt, &b.handle().unwrap(), &twice, &f.handle().unwrap()).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
}

/// An index out of range is a fault of the running kernel: the launch is queued, and the
/// stream's next synchronisation reports it (as a device fault surfaces on an NPU).
#[test]
fn an_index_out_of_range_fails_the_next_synchronisation_and_writes_nothing() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let a = up(&rt, &[3, 2], &seq(6));
    let out = up(&rt, &[2, 2], &[7.; 4]);
    let runtime_error = |e: burn_ascend_cann::acl::AclError, op: &str| {
        assert_eq!(e.status(), Some(ACLNN_ERR_RUNTIME_ERROR), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("aclrtSynchronizeStream"), "{msg}");
        assert!(msg.contains(op) && msg.contains("out of range"), "{msg}");
    };
    for bad in [3i64, -1] {
        let idx = up_i64(&rt, &[2], &[0, bad]);
        let (ah, ih, oh) = (
            a.handle().unwrap(),
            idx.handle().unwrap(),
            out.handle().unwrap(),
        );
        aclnn::index_select(&rt, &ah, 0, &ih, &oh).unwrap();
        runtime_error(rt.synchronize().unwrap_err(), "aclnnIndexSelect");
        assert_eq!(floats(&out.download().unwrap()), [7.; 4]);
    }
    // gather and scatter_add check their indices too
    let gidx = up_i64(&rt, &[1, 2], &[0, 2]);
    let gout = zeros(&rt, &[1, 2], DataType::Float);
    aclnn::gather(
        &rt,
        &a.handle().unwrap(),
        1,
        &gidx.handle().unwrap(),
        &gout.handle().unwrap(),
    )
    .unwrap();
    runtime_error(rt.synchronize().unwrap_err(), "aclnnGather");
    let src = up(&rt, &[1, 2], &[1., 1.]);
    let sout = zeros(&rt, &[3, 2], DataType::Float);
    aclnn::scatter_add(
        &rt,
        &a.handle().unwrap(),
        1,
        &gidx.handle().unwrap(),
        &src.handle().unwrap(),
        &sout.handle().unwrap(),
    )
    .unwrap();
    runtime_error(rt.synchronize().unwrap_err(), "aclnnScatterAdd");
}

#[test]
fn null_and_bad_dtype_dim_or_shape_are_refused_like_cann() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let api = rt.api();
    let a = up(&rt, &[3, 2], &seq(6));
    let idx = up_i64(&rt, &[2], &[0, 1]);
    let fidx = up(&rt, &[2], &[0., 1.]);
    let idx2d = up_i64(&rt, &[1, 2], &[0, 1]);
    let out = zeros(&rt, &[2, 2], DataType::Float);
    let wrong = zeros(&rt, &[3, 2], DataType::Float);
    let (ah, ih, fh, i2h, oh, wh) = (
        a.handle().unwrap(),
        idx.handle().unwrap(),
        fidx.handle().unwrap(),
        idx2d.handle().unwrap(),
        out.handle().unwrap(),
        wrong.handle().unwrap(),
    );
    let sel = api.index_select.unwrap();
    let call = |x, dim, i, o| {
        let (mut ws, mut ex) = (0u64, null_mut::<AclOpExecutor>());
        // SAFETY: aclnnIndexSelectGetWorkspaceSize's prototype; live handles or null.
        unsafe { (sel.workspace)(x, dim, i, o, &mut ws, &mut ex) }
    };
    let (a_, i_, o_) = (ah.as_ptr(), ih.as_ptr(), oh.as_ptr());
    assert_eq!(call(a_, 0, null(), o_), ACLNN_ERR_PARAM_NULLPTR);
    assert!(
        recent_error(api).contains("index is null"),
        "{}",
        recent_error(api)
    );
    assert_eq!(call(null(), 0, i_, o_), ACLNN_ERR_PARAM_NULLPTR);
    assert_eq!(call(a_, 0, fh.as_ptr(), o_), ACLNN_ERR_PARAM_INVALID);
    assert!(
        recent_error(api).contains("INT32 or INT64"),
        "{}",
        recent_error(api)
    );
    assert_eq!(call(a_, 2, i_, o_), ACLNN_ERR_PARAM_INVALID);
    assert!(
        recent_error(api).contains("out of range"),
        "{}",
        recent_error(api)
    );
    assert_eq!(call(a_, 0, i2h.as_ptr(), o_), ACLNN_ERR_PARAM_INVALID);
    assert_eq!(call(a_, 0, i_, wh.as_ptr()), ACLNN_ERR_PARAM_INVALID);
    assert!(
        recent_error(api).contains("out must be"),
        "{}",
        recent_error(api)
    );

    // IndexAdd: null alpha → 161001; source of the wrong shape → 161002
    let add = api.index_add.unwrap();
    let src = up(&rt, &[2, 2], &[0.; 4]);
    let (mut ws, mut ex) = (0u64, null_mut::<AclOpExecutor>());
    // SAFETY: aclnnIndexAddGetWorkspaceSize's prototype; live handles, a null alpha.
    let st = unsafe {
        (add.workspace)(
            a_,
            0,
            i_,
            src.handle().unwrap().as_ptr(),
            null(),
            wh.as_ptr(),
            &mut ws,
            &mut ex,
        )
    };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
    let one = Scalar::f32(api, 1.0).unwrap();
    let e = aclnn::index_add(&rt, &ah, 0, &ih, &ah, &one, &wh).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
    assert!(e.to_string().contains("source must be"), "{e}");

    // Cat: null list → 161001; Repeat: null repeats → 161001, too short → 161002
    let cat = api.cat.unwrap();
    // SAFETY: aclnnCatGetWorkspaceSize's prototype; a null list.
    let st = unsafe { (cat.workspace)(null(), 0, o_, &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
    let rep = api.repeat.unwrap();
    // SAFETY: aclnnRepeatGetWorkspaceSize's prototype; a null int array.
    let st = unsafe { (rep.workspace)(a_, null(), o_, &mut ws, &mut ex) };
    assert_eq!(st, ACLNN_ERR_PARAM_NULLPTR);
    let short = IntArray::new(api, &[2]).unwrap();
    let e = aclnn::repeat(&rt, &ah, &short, &oh).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
    // InplaceCopy: mixed dtypes and non-broadcasting shapes → 161002
    let ints = zeros(&rt, &[3, 2], DataType::Int32);
    let e = aclnn::inplace_copy(&rt, &ints.handle().unwrap(), &ah).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
    let e = aclnn::inplace_copy(&rt, &oh, &ah).unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
    assert!(e.to_string().contains("broadcast"), "{e}");
}
