//! The simulation's cost model (`burn_ascend_acl_sim::cost`): the FLOPs and HBM bytes it
//! counts for a launch against numbers computed by hand, and the roofline time from them.

use burn_ascend_acl_sim::cost::{atlas_a2, pairs_for_tests, take_recorded_on_this_thread};
use burn_ascend_acl_sim::OpCost;
use burn_ascend_cann::acl::aclnn;

use crate::attention::{up, varlen_fwd, zeros, Case};

/// The costs the calling thread's launches of the ops named `op…` recorded.
fn costs_of(op: &str) -> Vec<OpCost> {
    take_recorded_on_this_thread()
        .into_iter()
        .filter(|(name, _)| name.starts_with(op))
        .map(|(_, c)| c)
        .collect()
}

#[test]
fn a_matmul_launch_counts_two_m_n_k_flops_and_its_operands_bytes() {
    // Never turned off again: another test of this binary may be counting at the same time.
    burn_ascend_acl_sim::set_cost_model(true);
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    // A batch of 2 of [3, 5] · [5, 4] (f32).
    let a = up(&rt, &[2, 3, 5], &[0.5; 30]);
    let b = up(&rt, &[2, 5, 4], &[0.25; 40]);
    let o = zeros(&rt, &[2, 3, 4]);
    let _ = take_recorded_on_this_thread();
    aclnn::matmul(
        &rt,
        &a.handle().unwrap(),
        &b.handle().unwrap(),
        &o.handle().unwrap(),
        0,
    )
    .unwrap();
    rt.synchronize().unwrap();
    let got = costs_of("aclnnMatmul");
    // Its first stage decoded self, mat2 and out.
    assert_eq!(got.len(), 1, "one launch: {got:?}");
    let c = got[0];
    // 2·M·N·K per batch: 2 · 2 · 3 · 4 · 5 = 240; bytes (30 + 40 + 24) f32 = 376.
    assert_eq!(c.flops, 240.0);
    assert_eq!(c.bytes, 376.0);
    assert_eq!(c.peak, atlas_a2::PEAK_F32);
    // Memory-bound at this size: 376 B / 1.6 TB/s.
    assert!((c.seconds() - 376.0 / 1.6e12).abs() < 1e-18);
}

#[test]
fn a_varlen_attention_launch_counts_its_unmasked_pairs_and_its_tokens_bytes() {
    burn_ascend_acl_sim::set_cost_model(true);
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    // Sequences of 3 queries over 4 keys and 5 over 5, N = 4, Nkv = 2, D = Dv = 8, f32, no
    // mask: 3·4 + 5·5 = 37 pairs per head.
    let c = Case::new();
    let _ = take_recorded_on_this_thread();
    varlen_fwd(&rt, &c, false).unwrap();
    let got = costs_of("aclnnFlashAttentionVarLenScore");
    assert_eq!(got.len(), 1, "one launch: {got:?}");
    // 37 pairs · 4 heads · 2 · (8 + 8) = 4736 FLOPs; Q and O: 8 tokens · 4 heads · (8 + 8)
    // f32 = 2048 bytes, K and V: 9 tokens · 2 heads · (8 + 8) f32 = 1152 bytes.
    assert_eq!(got[0].flops, 4736.0);
    assert_eq!(got[0].bytes, 3200.0);
}

#[test]
fn masks_keep_the_pairs_of_their_sparse_mode() {
    let all = i64::MAX;
    // Full: Sq·Skv.
    assert_eq!(pairs_for_tests(0, all, all, 3, 4), 12.0);
    // 2, top-left causal (j ≤ i): 1 + 2 + 3.
    assert_eq!(pairs_for_tests(2, all, all, 3, 4), 6.0);
    // 3, bottom-right causal (j ≤ i + 1): 2 + 3 + 4.
    assert_eq!(pairs_for_tests(3, all, all, 3, 4), 9.0);
    // Square causal: S(S + 1)/2.
    assert_eq!(pairs_for_tests(3, all, all, 1024, 1024), 524_800.0);
    // 4, a band of the query and 1 key before it: 1 + 2·4.
    assert_eq!(pairs_for_tests(4, 1, 0, 5, 5), 9.0);
    // 0 with a window of 2 before and 0 after (top-left): 1 + 2 + 3 + 3 + 3.
    assert_eq!(pairs_for_tests(0, 2, 0, 5, 5), 12.0);
}

#[test]
fn the_roofline_takes_the_slower_of_arithmetic_and_memory() {
    // 2·4096³ bf16 FLOPs over 3 · 4096² · 2 bytes: compute-bound.
    let n = 4096.0f64;
    let c = OpCost {
        flops: 2.0 * n * n * n,
        bytes: 3.0 * n * n * 2.0,
        peak: atlas_a2::PEAK_BF16,
        link_bytes: 0.0,
    };
    assert!((atlas_a2::PEAK_BF16 - 294.912e12).abs() < 1e6);
    assert!((c.seconds() - 2.0 * n * n * n / 294.912e12).abs() < 1e-12);
    let copy = OpCost {
        link_bytes: 31.5e9,
        ..OpCost::default()
    };
    assert!((copy.seconds() - 1.0).abs() < 1e-12);
}
