//! Dtypes the native kernels do not take go through the counted host fallback. The test reads
//! the counts it moves, so it holds [`crate::exclusive`] (as the native-path tests that read
//! counts do): no other device test runs meanwhile.

use burn::tensor::{Tensor, TensorData};
use burn_ascend_backend::{fallback_count, Ascend, AscendDevice};

/// u16/u32/u64 have an aclDataType but are outside the comparison / cast kernels' dtype lists:
/// they take the counted host fallback (not a 161002 panic) and give NdArray's answers.
#[test]
fn wide_unsigned_ints_take_the_host_fallback() {
    let _lock = crate::exclusive();
    use burn::tensor::{Int, IntDType};
    let dev = AscendDevice::sim();
    let t = Tensor::<Ascend, 1, Int>::from_data(TensorData::new(vec![1i64, 5, 3], [3]), &dev);
    let before = (
        fallback_count("int_cast"),
        fallback_count("int_greater_elem"),
    );
    let u = t.cast(IntDType::U32);
    let g = u.clone().greater_elem(2);
    assert_eq!(
        (
            fallback_count("int_cast"),
            fallback_count("int_greater_elem")
        ),
        (before.0 + 1, before.1 + 1)
    );
    assert_eq!(g.into_data().to_vec::<bool>().unwrap(), [false, true, true]);
    assert_eq!(u.into_data().to_vec::<u32>().unwrap(), [1, 5, 3]);
}
