//! The host helpers the CPU paths lean on: a reshape that keeps an `NdArray` array's buffer,
//! and the borrowed read of an array's values.

use burn::backend::NdArray;
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::TensorMetadata;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_ascend_ops::host::{host_f32, reshape};

type B = NdArray;

#[test]
fn a_reshape_keeps_a_standard_arrays_buffer_and_copies_a_transposed_one_in_row_major_order() {
    let values: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let t = B::float_from_data(
        TensorData::new(values.clone(), [2, 3, 4]),
        &Default::default(),
    );
    let before = host_f32::<B>(&t).as_ptr();
    let r = reshape::<B>(t, &[2, 12]);
    assert_eq!(r.shape().dims::<2>(), [2, 12]);
    let after = host_f32::<B>(&r);
    assert!(
        matches!(after, std::borrow::Cow::Borrowed(_)),
        "the reshaped array is read in place"
    );
    assert_eq!(after.as_ptr(), before, "the same buffer, not a copy");
    assert_eq!(&*after, values.as_slice());
    // A transposed view cannot keep its buffer: the values come out in the new shape's order.
    let m = Tensor::<B, 2>::from_data(TensorData::new(values.clone(), [4, 6]), &Default::default());
    let tr = m.transpose().into_primitive().tensor();
    let r = reshape::<B>(tr, &[24]);
    let got = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(r))
        .into_data()
        .into_vec::<f32>()
        .unwrap();
    let want: Vec<f32> = (0..6)
        .flat_map(|c| (0..4).map(move |r| (r * 6 + c) as f32))
        .collect();
    assert_eq!(got, want);
}
