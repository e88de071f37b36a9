//! The uniform draw's bound helpers (`aclnnInplaceUniform`'s `[from, to)` in the element type):
//! the f64 draw rounded to f16 / bf16 / f32 may reach `to`, so the simulation clamps to the
//! largest representable value below it.

use burn_ascend_acl_sim::random_bounds_for_tests::{largest_below, round_to};
use burn_ascend_cann::acl::DataType;

#[test]
fn largest_below_is_the_representable_neighbour_under_the_bound() {
    assert_eq!(
        largest_below(4.0, DataType::Float),
        f64::from(4.0f32.next_down())
    );
    assert_eq!(largest_below(4.0, DataType::Float16), 4.0 - 1.0 / 512.0);
    assert_eq!(largest_below(4.0, DataType::Bf16), 4.0 - 1.0 / 64.0);
    assert_eq!(largest_below(-2.0, DataType::Float16), -2.0 - 1.0 / 512.0);
    // f32(0.1) lies above 0.1, so the answer is one step below it.
    assert!(largest_below(0.1, DataType::Float) < 0.1);
    assert!(round_to(largest_below(0.1, DataType::Float), DataType::Float) < 0.1);
}

#[test]
fn an_f64_draw_that_rounds_up_to_the_bound_stays_below_it_in_f32() {
    let x = round_to(4.0 - 1e-12, DataType::Float);
    assert_eq!(x, 4.0, "the premise: f32 rounding reaches the bound");
    assert!(largest_below(4.0, DataType::Float) < 4.0);
}
