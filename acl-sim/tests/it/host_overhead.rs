//! Host-side cost of one dispatched varlen forward (simulation, compute off). Prints the
//! figures; run with `cargo test -p burn-ascend-acl-sim --release --test it host_overhead --
//! --nocapture`.

#[test]
fn host_overhead_of_one_dispatched_call() {
    let h = burn_ascend_acl_sim::bench::host_overhead(2000).unwrap();
    println!(
        "acl host overhead per varlen forward call (simulation, compute off, {} calls): {:.2} µs with descriptors built per call, {:.2} µs with descriptors reused",
        h.iterations, h.per_call_us, h.reused_descriptors_us
    );
    assert!(h.per_call_us.is_finite() && h.per_call_us > 0.0);
    // The goal is <= 20 µs per call in release. The bound allows 3x that in release, and in
    // the test profile (the simulation at opt-level 2, the bindings and the contract at 1,
    // beside the other tests on CI's 2 cores) 300 µs: measured 41-98 µs there on a loaded
    // 2-core machine (2026-11-27), so a call that got 5x slower fails it.
    let bound_us = if cfg!(debug_assertions) { 300.0 } else { 60.0 };
    assert!(
        h.per_call_us < bound_us,
        "host overhead {:.1} µs per call exceeds {bound_us} µs: {h:?}",
        h.per_call_us
    );
}
