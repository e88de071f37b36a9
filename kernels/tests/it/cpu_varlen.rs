//! The fast CPU kernels (`kernels::cpu`) against the reference (`kernels::reference`).
//!
//! Every check feeds both implementations the *same* inputs: q, k, v (and dy) rounded to the
//! kernel's element type, then widened back to f64 for the reference, which accumulates in f64.
//! The backward of both is fed the reference forward's output and statistics, so the gradient
//! comparison isolates the backward.
//!
//! Tolerances (|got − exp| ≤ abs + rel·|exp|):
//! - f32, D ≤ 128: out and dq/dk/dv/dsink 2e-5 abs + 1e-4 rel (f32 tiles and an f32 polynomial
//!   exp vs f64 accumulation). softmaxMax/Sum 1e-5 abs + 1e-5 rel; the special values
//!   (0, −FLT_MAX, +FLT_MAX, and the sink/1 of fully masked rows with a sink) exactly.
//! - f16 / bf16: both sides round to T once on output, and an f32-level difference can flip that
//!   rounding, so one ulp of T (2^-10, 2^-7 relative) on top of the f32 tolerance; the
//!   reference result rounded to T is what is compared.
//! - f64: compute is f32, so the f32 tolerance.

use crate::common::*;
use burn_ascend_contract::varlen::{PseType, SoftmaxLayout, SparseMode};
use burn_ascend_contract::Element;
use burn_ascend_kernels::cpu;
use burn_ascend_kernels::reference::varlen as reference;
use half::{bf16, f16};

#[derive(Clone, Copy, Debug)]
struct Tol {
    abs: f64,
    rel: f64,
}

const F32_TOL: Tol = Tol {
    abs: 2e-5,
    rel: 1e-4,
};
const STAT_TOL: Tol = Tol {
    abs: 1e-5,
    rel: 1e-5,
};

/// Forward and backward of `cpu` in element type `T` against the reference in f64 on the same
/// (rounded) inputs. `tol` applies to out and the gradients.
fn check_with<T: Element>(c: &Case, tol: Tol, backward: bool) {
    let p = c.problem();
    let (q, k, v) = (to_elem::<T>(&c.q), to_elem::<T>(&c.k), to_elem::<T>(&c.v));
    let (q64, k64, v64) = (to_f64(&q), to_f64(&k), to_f64(&v));
    let want = reference::varlen_fwd::<f64>(&p, &q64, &k64, &v64);
    let got = cpu::varlen_fwd::<T>(&p, &q, &k, &v);
    let ctx = format!("{:?} / {:?}", c.dims, c.attrs);
    // The reference rounded to T is what a perfect T kernel returns.
    let want_out = to_f64(&to_elem::<T>(&want.attention_out));
    if let Err(e) = check_close(
        "out",
        &to_f64(&got.attention_out),
        &want_out,
        tol.abs,
        tol.rel,
    ) {
        panic!("forward of {ctx}: {e}");
    }
    for (what, g, w) in [
        ("softmax_max", &got.softmax_max, &want.softmax_max),
        ("softmax_sum", &got.softmax_sum, &want.softmax_sum),
    ] {
        if let Err(e) = check_stats(what, g, w, STAT_TOL.abs, STAT_TOL.rel) {
            panic!("forward of {ctx}: {e}");
        }
    }
    if !backward {
        return;
    }
    let dy = to_elem::<T>(&loss_weights(c, 99));
    let out_t = to_elem::<T>(&want.attention_out);
    let wg = reference::varlen_bwd::<f64>(
        &p,
        &q64,
        &k64,
        &v64,
        &to_f64(&dy),
        &to_f64(&out_t),
        &want.softmax_max,
        &want.softmax_sum,
    );
    let gg = cpu::varlen_bwd::<T>(
        &p,
        &q,
        &k,
        &v,
        &dy,
        &out_t,
        &want.softmax_max,
        &want.softmax_sum,
    );
    for (what, g, w) in [
        ("dq", &gg.dq, &wg.dq),
        ("dk", &gg.dk, &wg.dk),
        ("dv", &gg.dv, &wg.dv),
    ] {
        let w = to_f64(&to_elem::<T>(w));
        if let Err(e) = check_close(what, &to_f64(g), &w, tol.abs, tol.rel) {
            panic!("backward of {ctx}: {e}");
        }
    }
    match (&gg.dpse, &wg.dpse) {
        (Some(g), Some(w)) => {
            let w = to_f64(&to_elem::<T>(w));
            if let Err(e) = check_close("dpse", &to_f64(g), &w, tol.abs, tol.rel) {
                panic!("backward of {ctx}: {e}");
            }
        }
        (None, None) => {}
        _ => panic!("dpse presence differs for {ctx}"),
    }
    match (&gg.dsink, &wg.dsink) {
        (Some(g), Some(w)) => {
            let (g, w): (Vec<f64>, Vec<f64>) = (
                g.iter().map(|&x| x as f64).collect(),
                w.iter().map(|&x| x as f64).collect(),
            );
            // dsink sums over every row of the head: scale the abs tolerance by the rows.
            let rows = c.dims.t_q().max(1) as f64;
            if let Err(e) = check_close("dsink", &g, &w, tol.abs * rows.sqrt(), tol.rel) {
                panic!("backward of {ctx}: {e}");
            }
        }
        (None, None) => {}
        _ => panic!("dsink presence differs for {ctx}"),
    }
}

/// A case's q, k, v as `T`.
fn qkv<T: Element>(c: &Case) -> (Vec<T>, Vec<T>, Vec<T>) {
    (to_elem::<T>(&c.q), to_elem::<T>(&c.k), to_elem::<T>(&c.v))
}

/// A rayon pool of one thread (fresh thread-local buffers).
fn one_thread_pool() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
}

fn check(c: &Case) {
    check_with::<f32>(c, F32_TOL, true);
}

fn maybe_sink(c: Case, rng: &mut Rng, sink: bool) -> Case {
    if sink {
        c.with_sink(rng)
    } else {
        c
    }
}

// ---------------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------------

#[test]
fn head_layouts_and_head_dims() {
    let mut rng = Rng::new(1);
    for (n, nkv) in [(4, 4), (4, 2), (4, 1), (8, 2), (3, 1)] {
        for d in [1, 3, 64, 128] {
            for sink in [false, true] {
                let c = Case::new(&mut rng, n, nkv, d, d, &[5, 17, 1], &[7, 17, 9]);
                check(&maybe_sink(c, &mut rng, sink));
            }
        }
    }
}

#[test]
fn value_dim_smaller_than_head_dim() {
    let mut rng = Rng::new(2);
    for (d, dv) in [(64, 32), (128, 64), (3, 1), (65, 17)] {
        let c = Case::new(&mut rng, 4, 2, d, dv, &[40, 3], &[70, 9]).with_sink(&mut rng);
        check(&c);
        let c = Case::new(&mut rng, 4, 1, d, dv, &[40, 3], &[70, 9])
            .mode(SparseMode::RightDownCausal)
            .compressed();
        check(&c);
    }
}

/// Sequences spanning several query tiles (512 / G tokens) and kv tiles (512 forward, 128
/// backward) with ragged tails, and an empty one in between.
#[test]
fn long_sequences_span_tiles() {
    let mut rng = Rng::new(3);
    let sq = [300, 0, 517, 64, 1];
    let skv = [300, 5, 600, 64, 257];
    for (n, nkv) in [(2, 2), (4, 1)] {
        for sink in [false, true] {
            let c = Case::new(&mut rng, n, nkv, 64, 64, &sq, &skv);
            check(&maybe_sink(c, &mut rng, sink));
            let c = Case::new(&mut rng, n, nkv, 64, 64, &sq, &skv)
                .mode(SparseMode::RightDownCausal)
                .compressed();
            check(&maybe_sink(c, &mut rng, sink));
            let c = Case::new(&mut rng, n, nkv, 64, 64, &sq, &skv)
                .mode(SparseMode::LeftUpCausal)
                .compressed();
            check(&maybe_sink(c, &mut rng, sink));
        }
    }
}

#[test]
fn empty_sequences() {
    let mut rng = Rng::new(4);
    let shapes: [(&[usize], &[usize]); 5] = [
        (&[3, 0, 2], &[2, 3, 4]),
        (&[3, 0, 2], &[2, 0, 3]),
        (&[3, 2, 200], &[2, 0, 300]),
        (&[0, 2, 0], &[0, 3, 0]),
        (&[2], &[0]),
    ];
    for (sq, skv) in shapes {
        for sink in [false, true] {
            for layout in [SoftmaxLayout::SequenceHeadMajor, SoftmaxLayout::SameAsInput] {
                let c = Case::new(&mut rng, 4, 2, 8, 8, sq, skv).layout(layout);
                check(&maybe_sink(c, &mut rng, sink));
            }
        }
    }
    let c = Case::new(&mut rng, 2, 2, 3, 3, &[3, 0, 2, 2], &[2, 3, 0, 4])
        .mode(SparseMode::LeftUpCausal)
        .compressed()
        .with_sink(&mut rng);
    check(&c);
}

// ---------------------------------------------------------------------------------------------
// Sparse modes
// ---------------------------------------------------------------------------------------------

#[test]
fn dense_mask_modes_0_and_1() {
    let mut rng = Rng::new(10);
    let windows = [
        (INT_MAX, INT_MAX),
        (1, 0),
        (40, 3),
        (INT_MAX, 0),
        (90, -30),
        (-1, 3),
    ];
    for (pre, next) in windows {
        for (mb, mh) in [(1, 1), (3, 4)] {
            for sink in [false, true] {
                let c = Case::new(&mut rng, 4, 2, 16, 16, &[40, 2, 130], &[300, 3, 90])
                    .mode(SparseMode::DefaultMask)
                    .pre_next(pre, next)
                    .random_dense_mask(&mut rng, mb, mh, 0.25);
                check(&maybe_sink(c, &mut rng, sink));
            }
        }
    }
    for (mb, mh) in [(3, 1), (1, 1), (3, 4)] {
        for density in [0.1, 0.9] {
            let c = Case::new(&mut rng, 4, 2, 16, 16, &[40, 2, 130], &[300, 3, 90])
                .mode(SparseMode::AllMask)
                .pre_next(0, 0)
                .random_dense_mask(&mut rng, mb, mh, density);
            check(&c);
        }
    }
}

#[test]
fn compressed_modes_2_3_4_6_7_8() {
    let mut rng = Rng::new(11);
    type Config = (
        SparseMode,
        &'static [usize],
        &'static [usize],
        &'static [(i64, i64)],
        Option<&'static [i64]>,
    );
    let configs: [Config; 8] = [
        (
            SparseMode::LeftUpCausal,
            &[70, 300, 9],
            &[300, 100, 40],
            &[(INT_MAX, INT_MAX)],
            None,
        ),
        (
            SparseMode::RightDownCausal,
            &[70, 260, 9],
            &[300, 270, 40],
            &[(INT_MAX, INT_MAX)],
            None,
        ),
        (
            SparseMode::Band,
            &[300, 70, 5],
            &[260, 300, 9],
            &[
                (INT_MAX, INT_MAX),
                (0, 0),
                (37, 5),
                (100, -20),
                (-10, 40),
                (INT_MAX, 0),
            ],
            None,
        ),
        (
            SparseMode::PrefixCompress,
            &[70, 260, 9],
            &[300, 270, 40],
            &[(INT_MAX, INT_MAX)],
            Some(&[0, 37, 300]),
        ),
        (
            SparseMode::PrefixCompress,
            &[70, 260, 9],
            &[300, 270, 40],
            &[(INT_MAX, INT_MAX)],
            Some(&[270, 300, 3]),
        ),
        // Mode 7: the band sequence is the last with Sq > 0 (b = 1, Sq 300, Skv 310):
        // pre ≥ 310, −10 ≤ next ≤ 0.
        (
            SparseMode::RightDownCausalBand,
            &[100, 300, 0],
            &[120, 310, 4],
            &[(310, 0), (INT_MAX, -10), (400, -5)],
            None,
        ),
        // Mode 8: the band sequence is the first with Sq > 0 (b = 1, Skv 270): pre ≥ 270.
        (
            SparseMode::BandLeftUpCausal,
            &[0, 300, 100],
            &[3, 270, 150],
            &[(270, 0), (INT_MAX, -1), (300, 30)],
            None,
        ),
        (
            SparseMode::RightDownCausalBand,
            &[257],
            &[300],
            &[(300, 0), (300, -43)],
            None,
        ),
    ];
    for (mode, sq, skv, windows, prefix) in configs {
        for &(pre, next) in windows {
            for (n, nkv) in [(2, 2), (4, 1)] {
                for sink in [false, true] {
                    let mut c = Case::new(&mut rng, n, nkv, 8, 8, sq, skv)
                        .mode(mode)
                        .pre_next(pre, next)
                        .compressed();
                    c.prefix = prefix.map(<[i64]>::to_vec);
                    check(&maybe_sink(c, &mut rng, sink));
                }
            }
        }
    }
}

/// Band-shaped masks on sequences longer than a forward kv tile (512 columns) and many query
/// tiles, so whole tiles are skipped on both sides of the band, interior tiles are computed
/// without masking and boundary tiles are masked per element (also across the prefix edge of
/// mode 6 and the band sequence of modes 7 / 8).
#[test]
fn band_modes_skip_and_mask_whole_tiles() {
    let mut rng = Rng::new(14);
    type Config = (
        SparseMode,
        &'static [usize],
        &'static [usize],
        (i64, i64),
        Option<&'static [i64]>,
    );
    let configs: [Config; 7] = [
        (
            SparseMode::RightDownCausal,
            &[1100, 300],
            &[1300, 300],
            (INT_MAX, INT_MAX),
            None,
        ),
        (SparseMode::Band, &[1200], &[1300], (200, 150), None),
        (SparseMode::Band, &[1300], &[1200], (0, 600), None),
        (
            SparseMode::PrefixCompress,
            &[900, 300],
            &[1300, 400],
            (INT_MAX, INT_MAX),
            Some(&[700, 513]),
        ),
        (
            SparseMode::RightDownCausalBand,
            &[600, 1000],
            &[600, 1100],
            (1100, -40),
            None,
        ),
        (
            SparseMode::BandLeftUpCausal,
            &[1000, 600],
            &[1100, 700],
            (1100, 300),
            None,
        ),
        (SparseMode::DefaultMask, &[1200], &[1250], (300, 20), None),
    ];
    for (mode, sq, skv, (pre, next), prefix) in configs {
        let mut c = Case::new(&mut rng, 2, 1, 8, 8, sq, skv)
            .mode(mode)
            .pre_next(pre, next)
            .with_sink(&mut rng);
        c = if mode == SparseMode::DefaultMask {
            c.random_dense_mask(&mut rng, 1, 1, 0.05)
        } else {
            c.compressed()
        };
        c.prefix = prefix.map(<[i64]>::to_vec);
        check(&c);
    }
}

/// Key sequences longer than the backward's span groups cover in one round (up to 4 × 1024
/// columns), so a group adds several spans' dQ into its buffer: full, bottom-right causal and
/// a band that leaves whole spans unseen by some query tiles; GQA and a sink; then dense mask,
/// dropout, dense pse and ALiBi on spans that start after column 0.
#[test]
fn kv_longer_than_one_span_per_group() {
    let mut rng = Rng::new(15);
    let configs: [(SparseMode, (i64, i64)); 3] = [
        (SparseMode::DefaultMask, (INT_MAX, INT_MAX)),
        (SparseMode::RightDownCausal, (INT_MAX, INT_MAX)),
        (SparseMode::Band, (900, -300)),
    ];
    for (mode, (pre, next)) in configs {
        let mut c = Case::new(&mut rng, 4, 2, 16, 16, &[400, 90], &[4700, 2100])
            .mode(mode)
            .pre_next(pre, next)
            .with_sink(&mut rng);
        if mode != SparseMode::DefaultMask {
            c = c.compressed();
        }
        check(&c);
    }
    // Per-element work on tiles of a span that starts after column 0: a dense mask, dropout,
    // a dense pse and ALiBi.
    let c = Case::new(&mut rng, 2, 1, 16, 16, &[200], &[3300])
        .random_dense_mask(&mut rng, 1, 1, 0.1)
        .with_dropout(0.85, 3)
        .with_sink(&mut rng);
    check(&c);
    let c = Case::new(&mut rng, 2, 2, 16, 16, &[150], &[2600])
        .with_dense_pse(&mut rng, PseType::OuterMulAdd)
        .with_sink(&mut rng);
    check(&c);
    let c = Case::new(&mut rng, 4, 1, 16, 16, &[120, 40], &[3100, 1500])
        .mode(SparseMode::RightDownCausal)
        .compressed()
        .with_alibi(&mut rng, PseType::InnerMulAdd, true, 3, -2)
        .with_sink(&mut rng);
    check(&c);
}

/// D = 0 (which the ops layer refuses, but the kernels take): empty outputs, zero dsink, no
/// panic.
#[test]
fn zero_head_dim_gives_empty_gradients() {
    let mut rng = Rng::new(16);
    let c = Case::new(&mut rng, 4, 2, 0, 0, &[30, 1100], &[40, 1200]).with_sink(&mut rng);
    let p = c.problem();
    let (q, k, v) = qkv::<f32>(&c);
    let f = cpu::varlen_fwd::<f32>(&p, &q, &k, &v);
    assert!(f.attention_out.is_empty());
    let g = cpu::varlen_bwd::<f32>(
        &p,
        &q,
        &k,
        &v,
        &f.attention_out,
        &f.attention_out,
        &f.softmax_max,
        &f.softmax_sum,
    );
    assert!(g.dq.is_empty() && g.dk.is_empty() && g.dv.is_empty());
    assert_eq!(g.dsink, Some(vec![0.0; 4]));
}

/// Rows with nothing to attend: mode 1 with all-ones mask rows, mode 4 with a band that misses
/// rows, mode 0 with pre = −1. The exact conventions are checked by `check_stats` (special
/// values exact) and the zero outputs by the comparison.
#[test]
fn fully_masked_rows() {
    let mut rng = Rng::new(12);
    for sink in [false, true] {
        let mut c = Case::new(&mut rng, 2, 1, 8, 8, &[3, 2], &[300, 4]).mode(SparseMode::AllMask);
        let (rows, cols) = (3, 300);
        let mut data = vec![0u8; rows * cols];
        data[cols..2 * cols].fill(1); // row 1 fully masked
        c.mask = MaskSpec::Dense {
            data,
            batch: 1,
            heads: 1,
            rows,
            cols,
        };
        check(&maybe_sink(c, &mut rng, sink));
        let c = Case::new(&mut rng, 2, 2, 8, 8, &[300], &[40])
            .mode(SparseMode::Band)
            .pre_next(0, 0)
            .compressed();
        let c = maybe_sink(c, &mut rng, sink);
        check(&c);
        // Explicitly: row 0 has nothing (δ = −260, only j = i − 260).
        let got =
            cpu::varlen_fwd::<f32>(&c.problem(), &to_elem(&c.q), &to_elem(&c.k), &to_elem(&c.v));
        let (m, l) = match &c.sink {
            Some(s) => (s[0], 1.0),
            None => (f32::MIN, f32::MAX),
        };
        assert_eq!(got.softmax_max[0..8], [m; 8]);
        assert_eq!(got.softmax_sum[0..8], [l; 8]);
        assert!(got.attention_out[..8].iter().all(|&x| x == 0.0));
        let c = Case::new(&mut rng, 1, 1, 8, 8, &[3], &[3])
            .mode(SparseMode::DefaultMask)
            .pre_next(-1, 1)
            .random_dense_mask(&mut rng, 1, 1, 0.0);
        check(&maybe_sink(c, &mut rng, sink));
    }
}

/// With no mask, every mode computes everything.
#[test]
fn no_mask_ignores_mode() {
    let mut rng = Rng::new(13);
    for mode in [SparseMode::RightDownCausal, SparseMode::Band] {
        let c = Case::new(&mut rng, 2, 1, 8, 8, &[30, 270], &[40, 300])
            .mode(mode)
            .pre_next(0, 0);
        check(&c);
    }
}

// ---------------------------------------------------------------------------------------------
// Dropout, pse, layouts, sinks
// ---------------------------------------------------------------------------------------------

#[test]
fn dropout() {
    let mut rng = Rng::new(20);
    for (keep, seed) in [(0.8, 5), (0.5, 6)] {
        for sink in [false, true] {
            let c = Case::new(&mut rng, 4, 2, 16, 16, &[30, 0, 270], &[40, 2, 300])
                .with_dropout(keep, seed);
            check(&maybe_sink(c, &mut rng, sink));
            let c = Case::new(&mut rng, 4, 2, 16, 16, &[30, 0, 270], &[40, 2, 300])
                .mode(SparseMode::RightDownCausal)
                .compressed()
                .with_dropout(keep, seed);
            check(&maybe_sink(c, &mut rng, sink));
        }
    }
}

#[test]
fn pse_types_0_to_3() {
    let mut rng = Rng::new(21);
    for pse_type in [PseType::OuterMulAdd, PseType::OuterAddMul] {
        for sink in [false, true] {
            let c = Case::new(&mut rng, 4, 2, 16, 16, &[30, 270], &[40, 300])
                .mode(SparseMode::Band)
                .pre_next(50, 10)
                .compressed()
                .with_dense_pse(&mut rng, pse_type);
            check(&maybe_sink(c, &mut rng, sink));
        }
    }
    for pse_type in [PseType::InnerMulAdd, PseType::InnerMulAddSqrt] {
        for (per_batch, qs, ks) in [(false, 0, 0), (true, 3, -2)] {
            let c = Case::new(&mut rng, 4, 1, 16, 16, &[30, 270], &[40, 300])
                .mode(SparseMode::RightDownCausal)
                .compressed()
                .with_alibi(&mut rng, pse_type, per_batch, qs, ks)
                .with_sink(&mut rng);
            check(&c);
        }
    }
}

#[test]
fn softmax_layouts() {
    let mut rng = Rng::new(22);
    for layout in [SoftmaxLayout::SequenceHeadMajor, SoftmaxLayout::SameAsInput] {
        for sink in [false, true] {
            let c = Case::new(&mut rng, 4, 2, 16, 16, &[30, 0, 170, 5], &[40, 3, 200, 5])
                .mode(SparseMode::LeftUpCausal)
                .compressed()
                .layout(layout);
            check(&maybe_sink(c, &mut rng, sink));
        }
    }
}

/// Everything at once: GQA, band, dense pse, dropout, sink, same_as_input layout.
#[test]
fn combined_features() {
    let mut rng = Rng::new(23);
    let c = Case::new(&mut rng, 6, 2, 24, 20, &[130, 0, 300, 7], &[140, 9, 300, 7])
        .mode(SparseMode::Band)
        .pre_next(90, 20)
        .compressed()
        .with_dense_pse(&mut rng, PseType::OuterAddMul)
        .with_dropout(0.75, 17)
        .with_sink(&mut rng)
        .layout(SoftmaxLayout::SameAsInput);
    check(&c);
    let c = Case::new(&mut rng, 4, 4, 24, 24, &[130, 300], &[140, 300])
        .mode(SparseMode::DefaultMask)
        .pre_next(100, 0)
        .random_dense_mask(&mut rng, 2, 4, 0.3)
        .with_alibi(&mut rng, PseType::InnerMulAdd, true, 0, 5)
        .with_dropout(0.9, 18)
        .with_sink(&mut rng);
    check(&c);
}

// ---------------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------------

fn narrow_cases(rng: &mut Rng) -> Vec<Case> {
    vec![
        Case::new(rng, 4, 2, 64, 64, &[70, 0, 200], &[90, 4, 300]).with_sink(rng),
        Case::new(rng, 4, 1, 128, 128, &[70, 200], &[90, 300])
            .mode(SparseMode::RightDownCausal)
            .compressed()
            .with_dense_pse(rng, PseType::OuterMulAdd)
            .with_dropout(0.8, 3)
            .layout(SoftmaxLayout::SameAsInput),
    ]
}

#[test]
fn f16_inputs() {
    let mut rng = Rng::new(30);
    let tol = Tol {
        abs: F32_TOL.abs,
        rel: F32_TOL.rel + 1.0 / 1024.0,
    };
    for c in narrow_cases(&mut rng) {
        check_with::<f16>(&c, tol, true);
    }
}

#[test]
fn bf16_inputs() {
    let mut rng = Rng::new(31);
    let tol = Tol {
        abs: F32_TOL.abs,
        rel: F32_TOL.rel + 1.0 / 128.0,
    };
    for c in narrow_cases(&mut rng) {
        check_with::<bf16>(&c, tol, true);
    }
}

#[test]
fn f64_inputs() {
    let mut rng = Rng::new(32);
    for c in narrow_cases(&mut rng) {
        check_with::<f64>(&c, F32_TOL, true);
    }
}

// ---------------------------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------------------------

/// The backward (and forward) are bitwise identical in rayon pools of 1, 2 and 3 threads and
/// run to run.
#[test]
fn backward_is_deterministic_across_thread_counts() {
    let mut rng = Rng::new(40);
    let cases = [
        Case::new(
            &mut rng,
            8,
            2,
            64,
            64,
            &[300, 0, 517, 64],
            &[300, 5, 600, 64],
        )
        .mode(SparseMode::RightDownCausal)
        .compressed()
        .with_sink(&mut rng),
        Case::new(&mut rng, 4, 4, 32, 16, &[260, 40], &[270, 300])
            .with_dropout(0.8, 1)
            .with_sink(&mut rng),
        // More kv spans than span groups: several spans per group buffer.
        Case::new(&mut rng, 4, 1, 16, 16, &[300], &[4500]).with_sink(&mut rng),
    ];
    for c in &cases {
        let p = c.problem();
        let (q, k, v) = qkv::<f32>(c);
        let dy = to_elem::<f32>(&loss_weights(c, 5));
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let f = cpu::varlen_fwd::<f32>(&p, &q, &k, &v);
                let g = cpu::varlen_bwd::<f32>(
                    &p,
                    &q,
                    &k,
                    &v,
                    &dy,
                    &f.attention_out,
                    &f.softmax_max,
                    &f.softmax_sum,
                );
                (f, g)
            })
        };
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let (f1, g1) = run(1);
        for threads in [1, 2, 3] {
            for _ in 0..2 {
                let (f, g) = run(threads);
                assert_eq!(bits(&f.attention_out), bits(&f1.attention_out));
                assert_eq!(bits(&f.softmax_max), bits(&f1.softmax_max));
                assert_eq!(bits(&f.softmax_sum), bits(&f1.softmax_sum));
                assert_eq!(bits(&g.dq), bits(&g1.dq), "dq, {threads} threads");
                assert_eq!(bits(&g.dk), bits(&g1.dk), "dk, {threads} threads");
                assert_eq!(bits(&g.dv), bits(&g1.dv), "dv, {threads} threads");
                assert_eq!(
                    bits(g.dsink.as_ref().unwrap()),
                    bits(g1.dsink.as_ref().unwrap()),
                    "dsink, {threads} threads"
                );
            }
        }
    }
}

/// The forward keeps its tile buffers per thread for the next call of the same shape: what a
/// previous call left in them (other data, masks, sinks, dropout) must not change a result,
/// and a call of another shape (here: with vs. without dropout) must not get them. Each
/// problem is run on a fresh one-thread pool (empty buffers), and again on one pool right
/// after the other problem of its pair; the bits must match, in f32 (K / V read in place)
/// and f16 (K / V converted into the kept tile buffers).
#[test]
fn forward_reused_buffers_do_not_leak_between_calls() {
    let mut rng = Rng::new(41);
    let pairs = [
        (
            Case::new(&mut rng, 4, 2, 32, 32, &[200, 64], &[200, 64]).with_sink(&mut rng),
            Case::new(&mut rng, 4, 2, 32, 32, &[64, 200], &[90, 200])
                .mode(SparseMode::RightDownCausal)
                .compressed(),
        ),
        (
            Case::new(&mut rng, 4, 1, 16, 16, &[150], &[150]).with_dropout(0.9, 3),
            Case::new(&mut rng, 4, 1, 16, 16, &[150, 7], &[150, 40])
                .with_dropout(0.7, 5)
                .mode(SparseMode::LeftUpCausal)
                .compressed()
                .with_sink(&mut rng),
        ),
        // Same sizes, without and with dropout: different buffer shapes.
        (
            Case::new(&mut rng, 4, 2, 32, 32, &[120], &[130]),
            Case::new(&mut rng, 4, 2, 32, 32, &[120], &[130]).with_dropout(0.8, 9),
        ),
    ];
    fn fwd<T: Element>(c: &Case) -> (Vec<u64>, Vec<u32>, Vec<u32>) {
        let p = c.problem();
        let (q, k, v) = qkv::<T>(c);
        let f = cpu::varlen_fwd::<T>(&p, &q, &k, &v);
        let stat_bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        (
            f.attention_out
                .iter()
                .map(|x| x.to_f64().to_bits())
                .collect(),
            stat_bits(&f.softmax_max),
            stat_bits(&f.softmax_sum),
        )
    }
    fn check_pairs<T: Element>(pairs: &[(Case, Case)]) {
        for (a, b) in pairs {
            let fresh_a = one_thread_pool().install(|| fwd::<T>(a));
            let fresh_b = one_thread_pool().install(|| fwd::<T>(b));
            let shared = one_thread_pool();
            assert_eq!(shared.install(|| fwd::<T>(a)), fresh_a);
            assert_eq!(shared.install(|| fwd::<T>(b)), fresh_b, "b after a");
            assert_eq!(shared.install(|| fwd::<T>(a)), fresh_a, "a after b");
        }
    }
    check_pairs::<f32>(&pairs);
    check_pairs::<f16>(&pairs);
}

/// A forward that panics (here: a precondition broken, K too short, the panic caught as the
/// ACL simulation does) must not leave broken tile buffers behind for the thread's next call.
#[test]
fn forward_after_a_caught_panic_is_unaffected() {
    let mut rng = Rng::new(42);
    let c = Case::new(&mut rng, 4, 2, 32, 32, &[150, 40], &[160, 40]).with_sink(&mut rng);
    let p = c.problem();
    let (q, k, v) = qkv::<f16>(&c);
    let run = || {
        let out = cpu::varlen_fwd::<f16>(&p, &q, &k, &v).attention_out;
        out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    };
    let pool = one_thread_pool();
    let want = pool.install(run);
    let short_k = &k[..k.len() / 2];
    let broken =
        pool.install(|| std::panic::catch_unwind(|| cpu::varlen_fwd::<f16>(&p, &q, short_k, &v)));
    assert!(broken.is_err(), "the short K should have panicked");
    assert_eq!(pool.install(run), want);
}
