//! The view op: `NdArray` returns the input's own memory for a contiguous tensor (and the
//! values of Burn's reshape for a strided one), its `Autodiff` node gives the gradient of
//! Burn's reshape, and a shape of another element count is refused naming `shape`.
//! Reshapes move no arithmetic, so every comparison is exact.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData};

use burn_ascend_ops::host::host_f32;
use burn_ascend_ops::{reshape, AttnError};
use burn_ascend_test_support::Rng;

type F32 = NdArray<f32>;

fn tensor<B: burn::tensor::backend::Backend, const D: usize>(
    v: Vec<f32>,
    shape: [usize; D],
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(v, shape), &Default::default())
}

#[test]
fn a_contiguous_tensor_is_viewed_in_its_own_memory() {
    let v = Rng::new(1).vec_f32(6 * 8, 1.0);
    let x = tensor::<F32, 2>(v.clone(), [6, 8]);
    let before = host_f32::<F32>(&x.clone().into_primitive().tensor()).as_ptr();
    let y = reshape(x, [6, 2, 4]).unwrap();
    let prim = y.clone().into_primitive().tensor();
    assert_eq!(host_f32::<F32>(&prim).as_ptr(), before, "the view copied");
    assert_eq!(y.dims(), [6, 2, 4]);
    assert_eq!(y.into_data().to_vec::<f32>().unwrap(), v);
}

#[test]
fn a_strided_tensor_gets_the_values_of_burns_reshape() {
    let v = Rng::new(2).vec_f32(6 * 8, 1.0);
    let xt = tensor::<F32, 2>(v, [6, 8]).transpose();
    let ours = reshape(xt.clone(), [4, 12]).unwrap().into_data();
    let burns = xt.reshape([4, 12]).into_data();
    assert_eq!(
        ours.to_vec::<f32>().unwrap(),
        burns.to_vec::<f32>().unwrap()
    );
}

#[test]
fn the_gradient_through_a_view_is_that_through_burns_reshape() {
    type A = Autodiff<F32>;
    let mut rng = Rng::new(3);
    let (v, w) = (rng.vec_f32(6 * 8, 1.0), rng.vec_f32(6 * 8, 1.0));
    let weight = tensor::<A, 3>(w, [6, 2, 4]);
    let grad = |ours: bool| {
        let x = tensor::<A, 2>(v.clone(), [6, 8]).require_grad();
        let y = if ours {
            reshape(x.clone(), [6, 2, 4]).unwrap()
        } else {
            x.clone().reshape([6, 2, 4])
        };
        let grads = (y * weight.clone()).sum().backward();
        let g = x.grad(&grads).unwrap();
        assert_eq!(g.dims(), [6, 8]);
        g.into_data().to_vec::<f32>().unwrap()
    };
    assert_eq!(grad(true), grad(false));
}

#[test]
fn a_shape_of_another_element_count_is_refused_naming_shape() {
    let x = tensor::<F32, 2>(vec![0.0; 12], [3, 4]);
    match reshape(x, [5, 2]) {
        Err(AttnError::Invalid { param, .. }) => assert_eq!(param, "shape"),
        other => panic!("expected a refusal naming shape, got {other:?}"),
    }
}
