//! The simulated `aclnnMoeGatingTopKSoftmaxV2` through the crate's binding
//! (`aclnn::moe_gating_top_k_softmax_v2`): the f64 reference's numbers for both `renorm`
//! values, and CANN's validation — a dtype outside the docs' table is 161002, the tiling's
//! shape and attribute rules 561002 — with nothing written by a refused call.

use burn_ascend_cann::acl::ffi::{ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID};
use burn_ascend_cann::acl::{aclnn, DataType, DeviceTensor, Runtime, TensorDesc};
use burn_ascend_contract::moe_gating::{GatingDims, GatingOrder};
use burn_ascend_kernels::reference::moe_gating::moe_gating_top_k_softmax;

fn up(rt: &Runtime, dims: &[usize], dt: DataType, bytes: &[u8]) -> DeviceTensor {
    rt.upload(TensorDesc::contiguous(dims, dt).unwrap(), bytes)
        .unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Logits `[4, 5]`, distinct within each row.
fn logits() -> Vec<f32> {
    (0..20).map(|i| ((i * 7) % 20) as f32 / 5.0 - 2.0).collect()
}

struct Call {
    x: DeviceTensor,
    y: DeviceTensor,
    idx: DeviceTensor,
    soft: DeviceTensor,
}

fn call(rt: &Runtime, k: usize) -> Call {
    Call {
        x: up(rt, &[4, 5], DataType::Float, &f32_bytes(&logits())),
        y: up(rt, &[4, k], DataType::Float, &f32_bytes(&vec![9.0; 4 * k])),
        idx: up(rt, &[4, k], DataType::Int32, &vec![0; 16 * k]),
        soft: up(rt, &[4, 5], DataType::Float, &f32_bytes(&[9.0; 20])),
    }
}

fn run(
    rt: &Runtime,
    c: &Call,
    k: i64,
    renorm: i64,
    flag: bool,
) -> burn_ascend_cann::acl::Result<()> {
    let (x, y, idx, soft) = (
        c.x.handle().unwrap(),
        c.y.handle().unwrap(),
        c.idx.handle().unwrap(),
        c.soft.handle().unwrap(),
    );
    aclnn::moe_gating_top_k_softmax_v2(
        rt,
        &aclnn::MoeGatingArgs {
            x: &x,
            k,
            renorm,
            output_softmax_result_flag: flag,
            y_out: &y,
            expert_idx_out: &idx,
            softmax_result_out: flag.then_some(&soft),
        },
    )
}

#[test]
fn the_router_computes_the_reference_for_both_renorm_values() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let xs: Vec<f64> = logits().iter().map(|&v| v as f64).collect();
    let d = GatingDims {
        rows: 4,
        experts: 5,
        k: 2,
    };
    for (order, flag) in [
        (GatingOrder::TopKThenSoftmax, false),
        (GatingOrder::SoftmaxThenTopK, true),
    ] {
        let c = call(&rt, 2);
        run(&rt, &c, 2, order.as_attr(), flag).unwrap();
        rt.synchronize().unwrap();
        let want = moe_gating_top_k_softmax(&xs, &d, order);
        let f = |b: Vec<u8>| -> Vec<f64> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect()
        };
        let y = f(c.y.download().unwrap());
        let idx: Vec<i64> = c
            .idx
            .download()
            .unwrap()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
            .collect();
        assert_eq!(idx, want.expert_idx, "{order:?}");
        let gap = y
            .iter()
            .zip(&want.y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(gap <= 1e-7, "{order:?}: {gap}");
        let soft = f(c.soft.download().unwrap());
        if flag {
            let g = soft
                .iter()
                .zip(&want.softmax)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(g <= 1e-7, "softmaxResultOutOptional: {g}");
        } else {
            assert_eq!(soft, vec![9.0; 20], "renorm 1 writes no softmax");
        }
    }
}

#[test]
fn the_router_refuses_what_cann_refuses() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let refused = |r: burn_ascend_cann::acl::Result<()>, status: i32, what: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.status(), Some(status), "{what}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    };
    let c = call(&rt, 2);
    // The tiling refuses k = 0 (the docs' table says 0 <= k), k > E, renorm 2, and renorm 0
    // with outputSoftmaxResultFlag but no softmaxResultOutOptional.
    refused(run(&rt, &c, 0, 1, false), ACLNN_ERR_INNER_TILING_ERROR, "k");
    refused(run(&rt, &c, 6, 1, false), ACLNN_ERR_INNER_TILING_ERROR, "k");
    refused(
        run(&rt, &c, 2, 2, false),
        ACLNN_ERR_INNER_TILING_ERROR,
        "renorm",
    );
    let (x, y, idx) = (
        c.x.handle().unwrap(),
        c.y.handle().unwrap(),
        c.idx.handle().unwrap(),
    );
    let no_soft = aclnn::moe_gating_top_k_softmax_v2(
        &rt,
        &aclnn::MoeGatingArgs {
            x: &x,
            k: 2,
            renorm: 0,
            output_softmax_result_flag: true,
            y_out: &y,
            expert_idx_out: &idx,
            softmax_result_out: None,
        },
    );
    refused(
        no_soft,
        ACLNN_ERR_INNER_TILING_ERROR,
        "softmaxResultOutOptional",
    );
    // yOut's last dim must be k.
    let c3 = call(&rt, 3);
    let (x3, y3, i2) = (
        c.x.handle().unwrap(),
        c3.y.handle().unwrap(),
        c.idx.handle().unwrap(),
    );
    let wrong = aclnn::moe_gating_top_k_softmax_v2(
        &rt,
        &aclnn::MoeGatingArgs {
            x: &x3,
            k: 2,
            renorm: 1,
            output_softmax_result_flag: false,
            y_out: &y3,
            expert_idx_out: &i2,
            softmax_result_out: None,
        },
    );
    refused(wrong, ACLNN_ERR_INNER_TILING_ERROR, "yOut");
    // expertIdxOut must be INT32 (the dtype table: 161002).
    let i64_idx = up(&rt, &[4, 2], DataType::Int64, &[0; 64]);
    let ih = i64_idx.handle().unwrap();
    let wrong_dtype = aclnn::moe_gating_top_k_softmax_v2(
        &rt,
        &aclnn::MoeGatingArgs {
            x: &x,
            k: 2,
            renorm: 1,
            output_softmax_result_flag: false,
            y_out: &y,
            expert_idx_out: &ih,
            softmax_result_out: None,
        },
    );
    refused(wrong_dtype, ACLNN_ERR_PARAM_INVALID, "expertIdxOut");
    // Nothing was written by a refused call.
    assert_eq!(c.y.download().unwrap(), f32_bytes(&[9.0; 8]));
}
