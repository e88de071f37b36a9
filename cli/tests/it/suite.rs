//! One attention suite for every backend, in the spirit of Burn's `burn-backend-tests`: the same
//! cases (`common::cases()` for varlen, the prompt / incremental / scatter case lists), the
//! same CPU references and the same tolerances, run through
//!
//! - the composite (Burn ops only, what any backend gets by default),
//! - `NdArray` (the fast CPU kernels),
//! - `Autodiff<NdArray>`,
//! - `Ascend` on the host simulation of the ACL ABI, where every call must be an aclnn call
//!   (the counted host fallback must not move: pse, ALiBi and dropout included),
//! - `Ascend` on a real NPU, when one is present (else the test says why it skipped).

use burn::backend::{Autodiff, NdArray};
use burn_ascend::backend::{fallback_count, is_available, Ascend, AscendDevice};
use burn_ascend::ops::host::{from_vec, to_vec};
use burn_ascend::ops::{fia, incre, prompt, scatter, varlen};
use burn_ascend::{AttentionBackend, VarlenGradInputs};

use crate::common::{cases, close};
use crate::prompt_incre_scatter::fia::{fia_cases, fia_inputs_on, fia_ref, lse_close};
use crate::prompt_incre_scatter::incre::{host_kv, incre_cases, incre_inputs_on, incre_ref};
use crate::prompt_incre_scatter::prompt::{prompt_cases, prompt_inputs_on, prompt_ref};
use crate::prompt_incre_scatter::scatter::{scatter_cases, scatter_inputs_on, scatter_ref};
use crate::prompt_incre_scatter::{ATOL, RTOL};
use crate::varlen_burn::{inputs_on, reference_run};

/// Which implementation of the ops runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    /// The composite default (Burn tensor ops).
    Composite,
    /// The backend's own `AttentionBackend` impl.
    Native,
}

/// Varlen forward and backward on every case against the f64-accumulating reference.
fn varlen_suite<B: AttentionBackend>(dev: &B::Device, path: Path) {
    for c in cases() {
        let (rf, rb) = reference_run(&c);
        let fwd = match path {
            Path::Composite => varlen::composite::varlen_fwd::<B>(inputs_on::<B>(&c, dev), &c.spec),
            Path::Native => B::varlen_fwd(inputs_on::<B>(&c, dev), &c.spec),
        }
        .expect(&c.name);
        let name = |s: &str| format!("{path:?}:{}:{s}", c.name);
        let check = |what: &str, got: Vec<f32>, want: &[f32]| {
            close(&name(what), &got, want, ATOL, RTOL).unwrap();
        };
        check(
            "out",
            to_vec::<B>(fwd.attention_out.clone()),
            &rf.attention_out,
        );
        check("max", to_vec::<B>(fwd.softmax_max.clone()), &rf.softmax_max);
        check("sum", to_vec::<B>(fwd.softmax_sum.clone()), &rf.softmax_sum);
        let grad_inputs = VarlenGradInputs {
            inputs: inputs_on::<B>(&c, dev),
            dy: from_vec::<B>(c.dy.clone(), &[c.tq(), c.n, c.dv], dev),
            attention_in: fwd.attention_out,
            softmax_max: fwd.softmax_max,
            softmax_sum: fwd.softmax_sum,
        };
        let g = match path {
            Path::Composite => varlen::composite::varlen_bwd::<B>(grad_inputs, &c.spec),
            Path::Native => B::varlen_bwd(grad_inputs, &c.spec),
        }
        .expect(&c.name);
        check("dq", to_vec::<B>(g.dq), &rb.dq);
        check("dk", to_vec::<B>(g.dk), &rb.dk);
        check("dv", to_vec::<B>(g.dv), &rb.dv);
        assert_eq!(g.dsink.is_some(), c.sink.is_some(), "{}", name("dsink"));
        if let (Some(a), Some(b)) = (g.dsink, &rb.dsink) {
            check("dsink", to_vec::<B>(a), b);
        }
    }
}

/// Prompt attention on every case (layouts, GQA, masks, pse, lengths, empty KV).
fn prompt_suite<B: AttentionBackend>(dev: &B::Device, path: Path) {
    for c in prompt_cases() {
        let want = prompt_ref(&c);
        assert!(
            want.iter().any(|&x| x != 0.0) || c.name == "bsh_empty_kv",
            "{}: the case computes something",
            c.name
        );
        let got = match path {
            Path::Composite => {
                prompt::composite::prompt_fwd::<B>(prompt_inputs_on::<B>(&c, dev), &c.spec)
            }
            Path::Native => B::prompt_fwd(prompt_inputs_on::<B>(&c, dev), &c.spec),
        }
        .expect(c.name);
        let dims = c.spec.validate(&c.shapes).unwrap();
        assert_eq!(
            burn::tensor::TensorMetadata::shape(&got).to_vec(),
            dims.out_shape(),
            "{path:?}:{}: shape",
            c.name
        );
        close(c.name, &to_vec::<B>(got), &want, ATOL, RTOL).unwrap();
    }
}

/// Incremental attention on every case (contiguous / list / paged KV, masks, pse, padding,
/// int8 antiquant).
fn incre_suite<B: AttentionBackend>(dev: &B::Device, path: Path) {
    for (mut c, form) in incre_cases() {
        let h = host_kv(&mut c, &form);
        let want = incre_ref(&c, &h);
        let got = match path {
            Path::Composite => {
                incre::composite::incre_fwd::<B>(incre_inputs_on::<B>(&c, &h, dev), &c.spec)
            }
            Path::Native => B::incre_fwd(incre_inputs_on::<B>(&c, &h, dev), &c.spec),
        }
        .expect(c.name);
        assert_eq!(
            burn::tensor::TensorMetadata::shape(&got).to_vec(),
            c.q_shape,
            "{path:?}:{}: shape",
            c.name
        );
        close(c.name, &to_vec::<B>(got), &want, ATOL, RTOL).unwrap();
    }
}

/// The KV cache scatter on every case (Norm, PA_NZ, Nct, key-only, Alibi / Rope / Omni).
fn scatter_suite<B: AttentionBackend>(dev: &B::Device, path: Path) {
    for c in scatter_cases() {
        let (kc, vc) = scatter_ref(&c);
        assert!(
            kc.iter().any(|&x| x != -7.0),
            "{}: something was written",
            c.name
        );
        let got = match path {
            Path::Composite => {
                scatter::composite::scatter_kv::<B>(scatter_inputs_on::<B>(&c, dev), &c.spec)
            }
            Path::Native => B::scatter_kv(scatter_inputs_on::<B>(&c, dev), &c.spec),
        }
        .expect(c.name);
        // Plain copies are exact; Rope/Omni means differ by f32 vs f64 rounding.
        close(c.name, &to_vec::<B>(got.key_cache), &kc, 1e-6, 1e-6).unwrap();
        match (got.value_cache.map(to_vec::<B>), vc) {
            (Some(g), Some(w)) => close(c.name, &g, &w, 1e-6, 1e-6).unwrap(),
            (g, w) => assert_eq!(g.is_some(), w.is_some(), "{}: value cache", c.name),
        }
    }
}

/// Fused inference attention on every case (prefill and decode, GQA, paged KV, masks, pse,
/// left padding, int8 KV, sink, LSE).
fn fia_suite<B: AttentionBackend>(dev: &B::Device, path: Path) {
    for c in fia_cases() {
        let (want, want_lse) = fia_ref(&c);
        let got = match path {
            Path::Composite => fia::composite::fia_fwd::<B>(fia_inputs_on::<B>(&c, dev), &c.spec),
            Path::Native => B::fia_fwd(fia_inputs_on::<B>(&c, dev), &c.spec),
        }
        .expect(c.name);
        let dims = c.spec.validate(&c.shapes).unwrap();
        assert_eq!(
            burn::tensor::TensorMetadata::shape(&got.attention_out).to_vec(),
            dims.out_shape(),
            "{path:?}:{}: shape",
            c.name
        );
        close(c.name, &to_vec::<B>(got.attention_out), &want, ATOL, RTOL).unwrap();
        match got.softmax_lse {
            Some(l) => {
                assert_eq!(
                    burn::tensor::TensorMetadata::shape(&l).to_vec(),
                    dims.lse_shape(),
                    "{path:?}:{}: LSE shape",
                    c.name
                );
                lse_close(c.name, &to_vec::<B>(l), &want_lse);
            }
            None => assert!(!c.spec.softmax_lse_flag, "{}: LSE missing", c.name),
        }
    }
}

fn attention_suite<B: AttentionBackend>(dev: &B::Device, path: Path) {
    varlen_suite::<B>(dev, path);
    prompt_suite::<B>(dev, path);
    incre_suite::<B>(dev, path);
    fia_suite::<B>(dev, path);
    scatter_suite::<B>(dev, path);
}

/// The ops' host-fallback counters of the `Ascend` backend.
const OPS: [&str; 6] = [
    "varlen_fwd",
    "varlen_bwd",
    "prompt_fwd",
    "incre_fwd",
    "fia_fwd",
    "scatter_kv",
];

#[test]
fn the_attention_suite_passes_on_the_composite() {
    attention_suite::<NdArray>(&Default::default(), Path::Composite);
}

#[test]
fn the_attention_suite_passes_on_ndarray() {
    attention_suite::<NdArray>(&Default::default(), Path::Native);
}

#[test]
fn the_attention_suite_passes_on_autodiff_ndarray() {
    attention_suite::<Autodiff<NdArray>>(&Default::default(), Path::Native);
}

#[test]
fn the_attention_suite_passes_on_the_ascend_simulation_without_fallback() {
    let before = OPS.map(fallback_count);
    attention_suite::<Ascend>(&AscendDevice::sim(), Path::Native);
    assert_eq!(
        OPS.map(fallback_count),
        before,
        "an attention op fell back to the host"
    );
}

#[test]
fn the_attention_suite_passes_on_an_npu_when_present() {
    let device = AscendDevice::npu(0);
    if let Err(why) = is_available(&device) {
        eprintln!("skipped: no NPU ({why})");
        return;
    }
    let before = OPS.map(fallback_count);
    attention_suite::<Ascend>(&device, Path::Native);
    assert_eq!(
        OPS.map(fallback_count),
        before,
        "an attention op fell back to the host"
    );
}
