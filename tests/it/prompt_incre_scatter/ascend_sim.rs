//! The cases of every op on the `Ascend` backend (the host simulation).

use super::incre::*;
use super::prompt::*;
use super::scatter::*;
use super::*;

/// Every prompt, incremental (masks, pse, padding, lists, paged caches, int8 antiquant) and
/// scatter case above on the `Ascend` backend over the host simulation of the ACL ABI, against
/// the same references, each call dispatched as an aclnn op (the host fallback never runs).
#[test]
fn ascend_simulation_matches_the_references_without_fallback() {
    use burn_ascend::backend::{fallback_count, Ascend};
    type A = Ascend;
    let ops = ["prompt_fwd", "incre_fwd", "scatter_kv"];
    let before = ops.map(fallback_count);
    for c in prompt_cases() {
        let want = prompt_ref(&c);
        let got =
            <A as AttentionBackend>::prompt_fwd(prompt_inputs::<A>(&c), &c.spec).expect(c.name);
        close(c.name, &to_vec::<A>(got), &want, ATOL, RTOL).unwrap();
    }
    for (mut c, form) in incre_cases() {
        let h = host_kv(&mut c, &form);
        let want = incre_ref(&c, &h);
        let got =
            <A as AttentionBackend>::incre_fwd(incre_inputs::<A>(&c, &h), &c.spec).expect(c.name);
        close(c.name, &to_vec::<A>(got), &want, ATOL, RTOL).unwrap();
    }
    for c in scatter_cases() {
        let (kc, vc) = scatter_ref(&c);
        let got =
            <A as AttentionBackend>::scatter_kv(scatter_inputs_on::<A>(&c), &c.spec).expect(c.name);
        close(c.name, &to_vec::<A>(got.key_cache), &kc, 1e-6, 1e-6).unwrap();
        match (got.value_cache.map(to_vec::<A>), vc) {
            (Some(g), Some(w)) => close(c.name, &g, &w, 1e-6, 1e-6).unwrap(),
            (g, w) => assert_eq!(g.is_some(), w.is_some(), "{}: value cache", c.name),
        }
    }
    assert_eq!(ops.map(fallback_count), before, "a serving op fell back");
}
