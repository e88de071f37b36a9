//! The grouped matmul: the contract's rules (each refusal naming the aclnn parameter), the op on
//! `NdArray` against the f64 reference, its `Autodiff` backward against central finite
//! differences in f64, and its refusals through the public function.
//!
//! Tolerances: forward in f32 against the f64 reference, `1e-5` absolute (inputs in [-1, 1],
//! K ≤ 8: a few f32 ulps of the largest output); f64 gradients against central differences of
//! step `1e-6`: `|analytic − numeric| ≤ 1e-8 + 1e-7·|analytic|` (the loss is quadratic in no
//! input, so the difference is exact up to rounding).

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{DType, Tensor, TensorData};

use burn_ascend_kernels::reference::grouped_matmul::{grouped_matmul_k, grouped_matmul_m};

use burn_ascend_contract::DataType;
use burn_ascend_ops::grouped_matmul::{
    grouped_matmul, grouped_matmul_k as gmm_k, GroupListType, GroupType, GroupedMatmulShapes,
    GroupedMatmulSpec,
};
use burn_ascend_ops::AttnError;

type F32 = NdArray<f32>;
type F64 = NdArray<f64>;

/// Deterministic values in [-1, 1].
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn t<B: burn::tensor::backend::Backend, const D: usize>(
    v: &[f64],
    shape: [usize; D],
    dt: DType,
) -> Tensor<B, D> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), shape),
        (&Default::default(), dt),
    )
}

fn host<B: burn::tensor::backend::Backend, const D: usize>(x: Tensor<B, D>) -> Vec<f64> {
    x.into_data().convert::<f64>().to_vec().unwrap()
}

fn max_gap(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Counts of each layout: empty groups first, last, between, all but one, one group.
const LAYOUTS: [&[usize]; 5] = [
    &[3, 0, 4],
    &[0, 0, 5, 0],
    &[7],
    &[1, 1, 0, 2, 3],
    &[0, 6, 1],
];

fn cumsum(counts: &[usize]) -> GroupedMatmulSpec {
    let mut end = 0i64;
    GroupedMatmulSpec {
        group_list: counts
            .iter()
            .map(|&c| {
                end += c as i64;
                end
            })
            .collect(),
        group_list_type: GroupListType::Cumsum,
        ..GroupedMatmulSpec::from_counts(counts)
    }
}

#[test]
fn grouped_matmul_matches_the_f64_reference_for_every_group_layout() {
    let (k, n) = (5, 3);
    for (i, counts) in LAYOUTS.iter().enumerate() {
        let (g, m) = (counts.len(), counts.iter().sum::<usize>());
        let (x, w, b) = (
            values(m * k, i as u64),
            values(g * k * n, 100 + i as u64),
            values(g * n, 200 + i as u64),
        );
        let want = grouped_matmul_m(&x, &w, Some(&b), counts, k, n);
        for spec in [GroupedMatmulSpec::from_counts(counts), cumsum(counts)] {
            let got = grouped_matmul::<F32>(
                t(&x, [m, k], DType::F32),
                t(&w, [g, k, n], DType::F32),
                Some(t(&b, [g, n], DType::F32)),
                &spec,
            )
            .unwrap();
            let gap = max_gap(&host(got), &want);
            assert!(
                gap <= 1e-5,
                "{counts:?} {:?}: gap {gap}",
                spec.group_list_type
            );
        }
        // groupType 2 over the same groups: x [n, m] · weight [m, k] split along m.
        let want = grouped_matmul_k(&values(n * m, 7), &x, counts, n, k);
        let got = gmm_k::<F32>(
            t(&values(n * m, 7), [n, m], DType::F32),
            t(&x, [m, k], DType::F32),
            &GroupedMatmulSpec::from_counts(counts),
        )
        .unwrap();
        assert_eq!(got.dims(), [g, n, k]);
        let gap = max_gap(&host(got), &want);
        assert!(gap <= 1e-5, "{counts:?} groupType 2: gap {gap}");
    }
}

#[test]
fn grouped_matmul_gradients_equal_central_finite_differences_in_f64() {
    type A = Autodiff<F64>;
    let (k, n) = (3, 4);
    let counts = [2usize, 0, 3, 1];
    let (g, m) = (counts.len(), counts.iter().sum::<usize>());
    let spec = GroupedMatmulSpec::from_counts(&counts);
    let inputs = [values(m * k, 1), values(g * k * n, 2), values(g * n, 3)];
    let probe = values(m * n, 4);
    let loss = |v: &[Vec<f64>]| -> f64 {
        let y = grouped_matmul::<F64>(
            t(&v[0], [m, k], DType::F64),
            t(&v[1], [g, k, n], DType::F64),
            Some(t(&v[2], [g, n], DType::F64)),
            &spec,
        )
        .unwrap();
        host((y * t::<F64, 2>(&probe, [m, n], DType::F64)).sum())[0]
    };
    let x = t::<A, 2>(&inputs[0], [m, k], DType::F64).require_grad();
    let w = t::<A, 3>(&inputs[1], [g, k, n], DType::F64).require_grad();
    let b = t::<A, 2>(&inputs[2], [g, n], DType::F64).require_grad();
    let y = grouped_matmul::<A>(x.clone(), w.clone(), Some(b.clone()), &spec).unwrap();
    let grads = (y * t::<A, 2>(&probe, [m, n], DType::F64)).sum().backward();
    let analytic = [
        host(x.grad(&grads).unwrap()),
        host(w.grad(&grads).unwrap()),
        host(b.grad(&grads).unwrap()),
    ];
    let step = 1e-6;
    let mut checked = 0;
    for (which, name) in ["x", "weight", "bias"].iter().enumerate() {
        for i in 0..inputs[which].len() {
            let mut plus = inputs.to_vec();
            plus[which][i] += step;
            let mut minus = inputs.to_vec();
            minus[which][i] -= step;
            let numeric = (loss(&plus) - loss(&minus)) / (2.0 * step);
            let a = analytic[which][i];
            assert!(
                (a - numeric).abs() <= 1e-8 + 1e-7 * a.abs(),
                "{name}[{i}]: analytic {a} vs finite differences {numeric}"
            );
            checked += 1;
        }
        // The empty group's weight and bias get exactly zero.
        if which > 0 {
            let per = inputs[which].len() / g;
            assert!(
                analytic[which][per..2 * per].iter().all(|&v| v == 0.0),
                "{name}"
            );
        }
    }
    assert_eq!(checked, m * k + g * k * n + g * n);
}

#[test]
fn grouped_matmul_refuses_bad_input_naming_the_aclnn_parameter() {
    let x = || t::<F32, 2>(&values(6, 1), [3, 2], DType::F32);
    let w = || t::<F32, 3>(&values(8, 2), [2, 2, 2], DType::F32);
    let param = |r: burn_ascend_ops::Result<Tensor<F32, 2>>| r.unwrap_err().param();
    let short = GroupedMatmulSpec::from_counts(&[1, 1]);
    assert_eq!(
        param(grouped_matmul(x(), w(), None, &short)),
        Some("groupListOptional")
    );
    let ok = GroupedMatmulSpec::from_counts(&[1, 2]);
    let bad_bias = t::<F32, 2>(&values(2, 3), [1, 2], DType::F32);
    assert_eq!(
        param(grouped_matmul(x(), w(), Some(bad_bias), &ok)),
        Some("biasOptional")
    );
    let bad_w = t::<F32, 3>(&values(12, 2), [2, 3, 2], DType::F32);
    assert_eq!(param(grouped_matmul(x(), bad_w, None, &ok)), Some("weight"));
    let three = GroupedMatmulSpec::from_counts(&[1, 1, 1]);
    assert_eq!(
        param(grouped_matmul(x(), w(), None, &three)),
        Some("groupListOptional")
    );
}

// ---- the contract

fn contract_shapes(x: &[usize], w: &[usize], b: Option<&[usize]>) -> GroupedMatmulShapes {
    GroupedMatmulShapes {
        x: x.to_vec(),
        weight: w.to_vec(),
        bias: b.map(<[usize]>::to_vec),
        dtypes: [
            Some(DataType::Float),
            Some(DataType::Float),
            b.map(|_| DataType::Float),
        ],
    }
}

fn param(e: AttnError) -> &'static str {
    e.param().unwrap_or("none")
}

#[test]
fn cumsum_and_count_lists_give_the_same_group_sizes() {
    let count = GroupedMatmulSpec::from_counts(&[3, 0, 4]);
    let cumsum = GroupedMatmulSpec {
        group_list: vec![3, 3, 7],
        group_list_type: GroupListType::Cumsum,
        ..count.clone()
    };
    assert_eq!(count.sizes(7).unwrap(), vec![3, 0, 4]);
    assert_eq!(cumsum.sizes(7).unwrap(), vec![3, 0, 4]);
    let d = count
        .validate(&contract_shapes(&[7, 5], &[3, 5, 2], Some(&[3, 2])))
        .unwrap();
    assert_eq!((d.m, d.k, d.n, d.starts()), (7, 5, 2, vec![0, 3, 3]));
}

#[test]
fn a_group_list_that_does_not_cover_the_split_axis_is_refused_naming_it() {
    let s = GroupedMatmulSpec::from_counts(&[3, 3]);
    let e = s
        .validate(&contract_shapes(&[7, 5], &[2, 5, 2], None))
        .unwrap_err();
    assert_eq!(param(e), "groupListOptional");
    let dec = GroupedMatmulSpec {
        group_list: vec![4, 3],
        group_list_type: GroupListType::Cumsum,
        group_type: GroupType::M,
    };
    let e = dec.sizes(4).unwrap_err();
    assert!(e.to_string().contains("non-decreasing"), "{e}");
    let neg = GroupedMatmulSpec::from_counts(&[]);
    assert_eq!(param(neg.sizes(0).unwrap_err()), "groupListOptional");
    let mut neg = GroupedMatmulSpec::from_counts(&[1]);
    neg.group_list[0] = -1;
    assert!(neg
        .sizes(0)
        .unwrap_err()
        .to_string()
        .contains("non-negative"));
}

#[test]
fn shape_and_dtype_faults_are_refused_naming_the_aclnn_parameter() {
    let s = GroupedMatmulSpec::from_counts(&[2, 1]);
    let cases: [(GroupedMatmulShapes, &str); 5] = [
        (contract_shapes(&[3, 4, 1], &[2, 4, 2], None), "x"),
        (contract_shapes(&[3, 4], &[2, 5, 2], None), "weight"),
        (
            contract_shapes(&[3, 4], &[3, 4, 2], None),
            "groupListOptional",
        ),
        (
            contract_shapes(&[3, 4], &[2, 4, 2], Some(&[2, 3])),
            "biasOptional",
        ),
        (
            GroupedMatmulShapes {
                dtypes: [Some(DataType::Bf16), Some(DataType::Float), None],
                ..contract_shapes(&[3, 4], &[2, 4, 2], None)
            },
            "weight",
        ),
    ];
    for (sh, want) in cases {
        assert_eq!(param(s.validate(&sh).unwrap_err()), want, "{sh:?}");
    }
    let int = GroupedMatmulShapes {
        dtypes: [Some(DataType::Int32), Some(DataType::Int32), None],
        ..contract_shapes(&[3, 4], &[2, 4, 2], None)
    };
    assert_eq!(param(s.validate(&int).unwrap_err()), "x");
    let k = s.with_group_type(GroupType::K);
    let e = k
        .validate(&contract_shapes(&[4, 3], &[3, 2], Some(&[2, 2])))
        .unwrap_err();
    assert_eq!(param(e), "biasOptional");
    assert_eq!(
        k.validate(&contract_shapes(&[4, 3], &[3, 2], None))
            .unwrap()
            .n,
        2
    );
}

#[test]
fn attributes_round_trip_and_unknown_values_are_refused() {
    for t in [GroupListType::Cumsum, GroupListType::Count] {
        assert_eq!(GroupListType::from_attr(t.as_attr()).unwrap(), t);
    }
    for t in [GroupType::M, GroupType::K] {
        assert_eq!(GroupType::from_attr(t.as_attr()).unwrap(), t);
    }
    assert_eq!(
        GroupListType::from_attr(5).unwrap_err().param(),
        Some("groupListType")
    );
    assert!(matches!(
        GroupListType::from_attr(2),
        Err(AttnError::Unsupported(_))
    ));
    assert_eq!(
        GroupType::from_attr(7).unwrap_err().param(),
        Some("groupType")
    );
    assert!(matches!(
        GroupType::from_attr(-1),
        Err(AttnError::Unsupported(_))
    ));
}
