//! The simulated `aclnnGroupedMatmulV4` through the crate's binding (`aclnn::grouped_matmul_v4`):
//! the f64 reference's numbers for a cumsum and a count list, and CANN's validation — the
//! first stage refuses what aclnnGroupedMatmulV4.md's A2 / A3 tables do not take (161002), and a
//! group list whose values do not cover x fails the next synchronisation (361001, nothing
//! written), as a kernel fault does on an NPU.

use burn_ascend_cann::acl::ffi::{ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_RUNTIME_ERROR};
use burn_ascend_cann::acl::{
    aclnn, DataType, DeviceTensor, Runtime, Tensor, TensorDesc, TensorList,
};
use burn_ascend_kernels::reference::grouped_matmul::grouped_matmul_m;

fn up(rt: &Runtime, dims: &[usize], v: &[f32]) -> DeviceTensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(TensorDesc::contiguous(dims, DataType::Float).unwrap(), &b)
        .unwrap()
}

fn up_i64(rt: &Runtime, v: &[i64]) -> DeviceTensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(
        TensorDesc::contiguous(&[v.len()], DataType::Int64).unwrap(),
        &b,
    )
    .unwrap()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn list<'a>(rt: &Runtime, t: Tensor<'a>) -> TensorList<'a> {
    TensorList::new(rt.api(), vec![t]).unwrap()
}

/// x `[5, 2]`, weight `[3, 2, 2]`, bias `[3, 2]`, groups {0, 1}, {}, {2, 3, 4}.
struct Call {
    x: DeviceTensor,
    w: DeviceTensor,
    b: DeviceTensor,
    out: DeviceTensor,
}

fn call(rt: &Runtime) -> (Call, Vec<f64>) {
    let x: Vec<f32> = (0..10).map(|i| i as f32 / 4.0 - 1.0).collect();
    let w: Vec<f32> = (0..12).map(|i| (i % 5) as f32 / 2.0 - 1.0).collect();
    let b = [0.5f32, -0.5, 9.0, 9.0, 1.0, 2.0];
    let want = grouped_matmul_m(
        &x.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        &w.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        Some(&b.iter().map(|&v| v as f64).collect::<Vec<_>>()),
        &[2, 0, 3],
        2,
        2,
    );
    let c = Call {
        x: up(rt, &[5, 2], &x),
        w: up(rt, &[3, 2, 2], &w),
        b: up(rt, &[3, 2], &b),
        out: up(rt, &[5, 2], &[7.0; 10]),
    };
    (c, want)
}

#[allow(clippy::too_many_arguments)]
fn run(
    rt: &Runtime,
    c: &Call,
    x: Tensor<'_>,
    bias: Option<Tensor<'_>>,
    group_list: &DeviceTensor,
    group_type: i64,
    group_list_type: i64,
    split_item: i64,
) -> burn_ascend_cann::acl::Result<()> {
    let (xl, wl, ol) = (
        list(rt, x),
        list(rt, c.w.handle().unwrap()),
        list(rt, c.out.handle().unwrap()),
    );
    let bl = bias.map(|b| list(rt, b));
    let gh = group_list.handle().unwrap();
    aclnn::grouped_matmul_v4(
        rt,
        &aclnn::GroupedMatmulArgs {
            x: &xl,
            weight: &wl,
            bias: bl.as_ref(),
            group_list: Some(&gh),
            split_item,
            group_type,
            group_list_type,
            out: &ol,
        },
    )
}

#[test]
fn grouped_matmul_v4_computes_the_reference_for_cumsum_and_count_lists() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let (c, want) = call(&rt);
    for (list, kind) in [(vec![2i64, 2, 5], 0), (vec![2, 0, 3], 1)] {
        let gl = up_i64(&rt, &list);
        let (x, b) = (c.x.handle().unwrap(), c.b.handle().unwrap());
        run(&rt, &c, x, Some(b), &gl, 0, kind, 3).unwrap();
        rt.synchronize().unwrap();
        let got = floats(&c.out.download().unwrap());
        let gap = got
            .iter()
            .zip(&want)
            .map(|(&g, &w)| (g as f64 - w).abs())
            .fold(0.0, f64::max);
        assert!(gap <= 1e-6, "groupListType {kind}: {got:?} vs {want:?}");
    }
}

#[test]
fn grouped_matmul_v4_refuses_what_cann_refuses() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();

    let (c, _) = call(&rt);
    let gl = up_i64(&rt, &[2, 0, 3]);
    let invalid = |r: burn_ascend_cann::acl::Result<()>, what: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.status(), Some(ACLNN_ERR_PARAM_INVALID), "{what}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    };
    let x = || c.x.handle().unwrap();
    let b = || Some(c.b.handle().unwrap());
    invalid(run(&rt, &c, x(), b(), &gl, 1, 1, 3), "groupType");
    invalid(run(&rt, &c, x(), b(), &gl, 0, 2, 3), "groupListType");
    invalid(run(&rt, &c, x(), b(), &gl, 0, 1, 0), "splitItem");
    let short = up_i64(&rt, &[2, 3]);
    invalid(run(&rt, &c, x(), b(), &short, 0, 1, 3), "groupListOptional");
    // x transposed (a [2, 5] buffer viewed as [5, 2]) with groupType 0.
    let tdesc = TensorDesc::strided(&[5, 2], &[1, 5], 0, 10, DataType::Float).unwrap();
    invalid(
        run(
            &rt,
            &c,
            Tensor::new(&c.x.buf, &tdesc).unwrap(),
            b(),
            &gl,
            0,
            1,
            3,
        ),
        "transposed",
    );
    // A bias of the wrong shape.
    let wrong = up(&rt, &[2, 2], &[0.0; 4]);
    invalid(
        run(&rt, &c, x(), Some(wrong.handle().unwrap()), &gl, 0, 1, 3),
        "biasOptional",
    );
    // Values on the device: a list covering 4 of x's 5 rows fails at run time, writes nothing.
    let four = up_i64(&rt, &[2, 0, 2]);
    run(&rt, &c, x(), b(), &four, 0, 1, 3).unwrap();
    let e = rt.synchronize().unwrap_err();
    assert_eq!(e.status(), Some(ACLNN_ERR_RUNTIME_ERROR), "{e}");
    assert!(e.to_string().contains("groupListOptional"), "{e}");
    assert_eq!(floats(&c.out.download().unwrap()), [7.0; 10]);
}
