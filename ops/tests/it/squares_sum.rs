//! A global-norm clip's two halves: the sum of squares — the CPU path (in place, f64 chunks),
//! the composite default (grouped concatenations) and the `Autodiff` pass-through against a
//! plain f64 sum — and the scaling of every gradient by the clip factor.

use crate::common::data;
use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_ascend_ops::optim::composite;
use burn_ascend_ops::OptimBackend;

type B = NdArray;
type A = Autodiff<NdArray>;

fn prim<Bk: Backend>(v: &[f32], shape: &[usize]) -> FloatTensor<Bk> {
    Bk::float_from_data(
        TensorData::new(v.to_vec(), shape.to_vec()),
        &Default::default(),
    )
}

fn value<Bk: Backend>(p: FloatTensor<Bk>) -> f64 {
    Tensor::<Bk, 1>::from_primitive(TensorPrimitive::Float(p))
        .into_data()
        .convert::<f64>()
        .into_vec::<f64>()
        .unwrap()[0]
}

#[test]
fn the_sum_of_squares_of_many_gradients_equals_the_plain_sum_on_the_cpu_composed_and_under_autodiff(
) {
    // Shapes of a layer's gradients, one past a parallel chunk of the CPU kernel.
    let shapes: [&[usize]; 4] = [&[70_001], &[33, 48], &[5], &[2, 3, 4]];
    let values: Vec<Vec<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| data(s.iter().product(), i as u64 + 1))
        .collect();
    let want: f64 = values
        .iter()
        .flatten()
        .map(|&v| (v as f64) * (v as f64))
        .sum();
    let tensors = || -> Vec<FloatTensor<B>> {
        values
            .iter()
            .zip(shapes)
            .map(|(v, s)| prim::<B>(v, s))
            .collect()
    };
    let cpu = value::<B>(B::squares_sum(tensors()).unwrap());
    assert!((cpu - want).abs() <= 1e-6 * want, "cpu {cpu} vs {want}");
    let composed = value::<B>(composite::squares_sum::<B>(tensors()).unwrap());
    assert!(
        (composed - want).abs() <= 1e-5 * want,
        "composite {composed} vs {want}"
    );
    let tracked: Vec<FloatTensor<A>> = values
        .iter()
        .zip(shapes)
        .map(|(v, s)| prim::<A>(v, s))
        .collect();
    let through = value::<A>(A::squares_sum(tracked).unwrap());
    assert_eq!(through, cpu, "Autodiff hands the sum to the inner backend");
    assert!(B::squares_sum(Vec::new()).is_none());
    assert!(composite::squares_sum::<B>(Vec::new()).is_none());
}

/// A tensor's values in order, whatever its rank.
fn values<Bk: Backend>(p: FloatTensor<Bk>) -> Vec<f32> {
    use burn::tensor::TensorMetadata;
    let n = p.shape().num_elements();
    let flat = Bk::float_reshape(p, burn::tensor::Shape::from(vec![n]));
    Tensor::<Bk, 1>::from_primitive(TensorPrimitive::Float(flat))
        .into_data()
        .into_vec::<f32>()
        .unwrap()
}

#[test]
fn scaling_gradients_by_the_clip_factor_multiplies_each_element_once_on_the_cpu_composed_and_under_autodiff(
) {
    let shapes: [&[usize]; 3] = [&[70_001], &[33, 48], &[2, 3, 4]];
    let values_in: Vec<Vec<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| data(s.iter().product(), i as u64 + 7))
        .collect();
    let factor = 0.3717f32;
    let scale = || prim::<B>(&[factor], &[1]);
    let mut cpu = Vec::new();
    for (v, s) in values_in.iter().zip(shapes) {
        let got = values::<B>(B::scale_by(prim::<B>(v, s), scale()));
        let composed = values::<B>(composite::scale_by::<B>(prim::<B>(v, s), scale()));
        let want: Vec<f32> = v.iter().map(|x| x * factor).collect();
        assert_eq!(got, want, "the CPU path is one f32 product per element");
        assert_eq!(composed, want, "the composite is Burn's broadcast product");
        let through = values::<A>(A::scale_by(prim::<A>(v, s), prim::<A>(&[factor], &[1])));
        assert_eq!(
            through, got,
            "Autodiff hands the product to the inner backend"
        );
        cpu.push(got);
    }
    // A gradient another tensor still holds is scaled on a copy: the holder's values stay.
    let held = prim::<B>(&values_in[1], shapes[1]);
    let scaled = B::scale_by(held.clone(), scale());
    assert_eq!(values::<B>(held), values_in[1]);
    assert_eq!(values::<B>(scaled), cpu[1]);
}
