//! The Ascend dispatch layer against its host simulation (not CANN), continued from
//! `attention.rs`: the fallbacks when an entry point is missing (V5 → base, PFA V3 → V1), the
//! cache formats, the call builder's strides and offsets, and the scatter's tiling rules.

use burn_ascend_acl_sim as sim;
use burn_ascend_backend::attention::builders;
use burn_ascend_cann::acl::aclnn;
use burn_ascend_cann::acl::ffi::{ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR};
use burn_ascend_cann::acl::tensor::recent_error;
use burn_ascend_cann::acl::{AclError, DataType, Format, IntArray, Runtime, Tensor, TensorDesc};
use burn_ascend_contract::prompt::{PfaLayout, PromptInputs, PromptSpec};
use burn_ascend_contract::scatter::{CacheMode, ScatterInputs, ScatterKind, ScatterSpec};
use burn_ascend_contract::varlen::{VarlenGradInputs, VarlenGrads, VarlenInputs};
use burn_ascend_kernels::reference::varlen as reference;

use super::attention::*;

#[test]
fn missing_v5_falls_back_to_the_base_varlen_api_only_without_a_sink() {
    let c = Case::new();
    let rt = Runtime::with_api(sim::api_without(true, false), 0).unwrap();
    assert!(rt.api().varlen_fwd_v5.is_none());
    let (out, _, _) = varlen_fwd(&rt, &c, false).unwrap();
    let want = reference::varlen_fwd(&c.problem(false), &c.q, &c.k, &c.v);
    assert!(max_diff(&out, &want.attention_out) < 1e-5);

    let err = varlen_fwd(&rt, &c, true).unwrap_err();
    assert!(matches!(err, AclError::Unsupported(_)), "{err}");
    assert!(
        err.to_string()
            .starts_with("unsupported: sink need aclnnFlashAttentionVarLenScoreV5"),
        "{err}"
    );
}

#[test]
fn missing_pfa_v3_falls_back_to_v1_only_for_what_v1_has() {
    let rt = Runtime::with_api(sim::api_without(false, true), 0).unwrap();
    let (b, s, n, d) = (2usize, 3usize, 2usize, 8usize);
    let (q, k, v) = (
        rand(7, b * s * n * d),
        rand(8, b * s * n * d),
        rand(9, b * s * n * d),
    );
    let dims = [b, s, n * d];
    let prompt = |rt: &Runtime, spec: &PromptSpec| -> Result<Vec<f32>, AclError> {
        // FLOAT16: CANN's PFA takes no FLOAT query.
        let (qt, kt, vt, o) = (
            up_f16(rt, &dims, &q),
            up_f16(rt, &dims, &k),
            up_f16(rt, &dims, &v),
            zeros_f16(rt, &dims),
        );
        let x = PromptInputs {
            query: qt.handle()?,
            key: kt.handle()?,
            value: vt.handle()?,
            atten_mask: None,
            pse_shift: None,
        };
        builders::prompt(rt, spec, &x.as_ref(), &o.handle()?)?;
        Ok(halfs(&o.download()?))
    };
    let mut spec = PromptSpec::new(n, 0.3, PfaLayout::Bsh);
    let got = prompt(&rt, &spec).unwrap();
    let via_v3 = prompt(&burn_ascend_acl_sim::runtime().unwrap(), &spec).unwrap();
    assert_eq!(got, via_v3, "V1 and V3 agree on what both have");
    spec.sparse_mode = 2;
    let err = prompt(&rt, &spec).unwrap_err();
    assert!(matches!(err, AclError::Unsupported(_)), "{err}");
}

#[test]
fn a_pa_nz_cache_goes_as_nd_and_a_fractal_nz_descriptor_is_refused() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    // f16: last = 16; N·D = 32 → cache [nb = 2, 2, bs = 16, 16].
    let (t, n, d) = (3usize, 2usize, 16usize);
    let key: Vec<u8> = (0..t * n * d)
        .flat_map(|i| half::f16::from_f32(i as f32 + 1.0).to_le_bytes())
        .collect();
    let cache = vec![0u8; 2 * 2 * 16 * 16 * 2];
    let slots: Vec<u8> = [0i32, 5, 17].iter().flat_map(|x| x.to_le_bytes()).collect();
    let (kd, cd, sd) = ([t, n, d], [2usize, 2, 16, 16], [t]);
    let nz = builders::cache_desc(CacheMode::PaNz, &cd, DataType::Float16).unwrap();
    assert_eq!(nz.format, Format::Nd, "PA_NZ caches are described as ND");
    {
        let kt = rt
            .upload(
                TensorDesc::contiguous(&kd, DataType::Float16).unwrap(),
                &key,
            )
            .unwrap();
        let ct = rt.upload(nz.clone(), &cache).unwrap();
        let mut spec = ScatterSpec::new(vec![0, 5, 17]);
        spec.cache_mode = CacheMode::PaNz;
        builders::scatter(
            &rt,
            &spec,
            &ScatterInputs {
                key: &kt.handle().unwrap(),
                key_cache: &ct.handle().unwrap(),
                value: None,
                value_cache: None,
            },
        )
        .expect("ND PA_NZ descriptor through the call builder");
        // Slot 17 = block 1, offset 1: key token 2's element e at [1, e / 16, 1, e % 16].
        let got = ct.download().unwrap();
        let at = |i: usize| half::f16::from_le_bytes([got[2 * i], got[2 * i + 1]]).to_f32();
        assert_eq!(
            at(((2 + 1) * 16 + 1) * 16 + 3),
            (2 * 32 + 16 + 3 + 1) as f32
        );
    }

    // Handle level with a FRACTAL_NZ cache descriptor: refused (the op declares only ND).
    let api = rt.api();
    let up = |desc, b: &[u8]| rt.upload(desc, b).unwrap();
    let kt = up(
        TensorDesc::contiguous(&kd, DataType::Float16).unwrap(),
        &key,
    );
    let fractal = TensorDesc {
        format: Format::FractalNz,
        ..nz
    };
    let ct = up(fractal, &cache);
    let st = up(
        TensorDesc::contiguous(&sd, DataType::Int32).unwrap(),
        &slots,
    );
    let (kh, ch, sh) = (
        kt.handle().unwrap(),
        ct.handle().unwrap(),
        st.handle().unwrap(),
    );
    let err = aclnn::scatter(
        &rt,
        &aclnn::ScatterArgs {
            key: &kh,
            key_cache: &ch,
            slot_mapping: &sh,
            value: None,
            value_cache: None,
            compress_lens: None,
            compress_seq_offset: None,
            seq_lens: None,
            cache_mode: "PA_NZ",
            scatter_mode: "None",
            strides: None,
            offsets: None,
        },
    )
    .unwrap_err();
    assert_eq!(err.status(), Some(ACLNN_ERR_PARAM_INVALID), "{err}");
    assert!(
        recent_error(api).contains("FractalNz") || err.to_string().contains("FractalNz"),
        "{err}"
    );
}

/// The varlen backward of `c` (after its own forward) through the backend's call builder:
/// dq, dk, dv and (with a sink) dsink.
fn varlen_grad(rt: &Runtime, c: &Case, sink: bool) -> Result<Vec<Vec<f32>>, AclError> {
    let (out, smax, ssum) = varlen_fwd(rt, c, sink)?;
    let (qd, kd) = ([c.tq(), c.n, c.d], [c.tkv(), c.nkv, c.d]);
    let ts = [
        up(rt, &qd, &c.q),
        up(rt, &kd, &c.k),
        up(rt, &kd, &c.v),
        up(rt, &qd, &c.dy),
        up(rt, &[c.tq(), c.n, 8], &smax),
        up(rt, &[c.tq(), c.n, 8], &ssum),
        up(rt, &qd, &out),
        up(rt, &[c.n], &c.sink),
    ];
    let gs = [
        zeros(rt, &qd),
        zeros(rt, &kd),
        zeros(rt, &kd),
        zeros(rt, &[c.n]),
    ];
    {
        let h: Vec<Tensor<'_>> = ts.iter().map(|t| t.handle().unwrap()).collect();
        let g: Vec<Tensor<'_>> = gs.iter().map(|t| t.handle().unwrap()).collect();
        builders::varlen_grad(
            rt,
            &c.spec(),
            c.n,
            DataType::Float,
            &VarlenGradInputs {
                inputs: VarlenInputs {
                    sink: sink.then_some(&h[7]),
                    ..VarlenInputs::new(&h[0], &h[1], &h[2])
                },
                dy: &h[3],
                softmax_max: &h[4],
                softmax_sum: &h[5],
                attention_in: &h[6],
            },
            &VarlenGrads {
                dq: &g[0],
                dk: &g[1],
                dv: &g[2],
                dpse: None,
                dsink: sink.then_some(&g[3]),
            },
        )?;
    }
    let n = if sink { 4 } else { 3 };
    Ok(gs[..n]
        .iter()
        .map(|t| floats(&t.download().unwrap()))
        .collect())
}

const FWD_BASE: &str = "aclnnFlashAttentionVarLenScore";
const FWD_V5: &str = "aclnnFlashAttentionVarLenScoreV5";
const GRAD_BASE: &str = "aclnnFlashAttentionUnpaddingScoreGrad";
const GRAD_V5: &str = "aclnnFlashAttentionUnpaddingScoreGradV5";

/// Launches of the four varlen entry points on this thread so far.
fn varlen_launches() -> [usize; 4] {
    [FWD_BASE, FWD_V5, GRAD_BASE, GRAD_V5].map(sim::launches)
}

fn launched_since(before: [usize; 4]) -> [usize; 4] {
    let now = varlen_launches();
    [0, 1, 2, 3].map(|i| now[i] - before[i])
}

/// As torch_npu (op-plugin `FlashAttentionKernelNpuOpApi.cpp` ~1177–1197, 1523, 1556): the
/// base ops without a sink, the V5 ops only with one; both give the reference's numbers.
#[test]
fn without_a_sink_the_base_varlen_ops_run_and_with_one_the_v5_ops() {
    let c = Case::new();
    let rt = sim::runtime().unwrap();
    for sink in [false, true] {
        let before = varlen_launches();
        let g = varlen_grad(&rt, &c, sink).unwrap();
        let want = if sink { [0, 1, 0, 1] } else { [1, 0, 1, 0] };
        assert_eq!(launched_since(before), want, "sink {sink}");
        let p = c.problem(sink);
        let f = reference::varlen_fwd(&p, &c.q, &c.k, &c.v);
        let w = reference::varlen_bwd(
            &p,
            &c.q,
            &c.k,
            &c.v,
            &c.dy,
            &f.attention_out,
            &f.softmax_max,
            &f.softmax_sum,
        );
        assert!(max_diff(&g[0], &w.dq) < 1e-4 && max_diff(&g[2], &w.dv) < 1e-4);
        if sink {
            assert!(max_diff(&g[3], w.dsink.as_ref().unwrap()) < 1e-4);
        }
    }
}

/// Fallbacks both ways by what the loader found: no base ops → V5 runs a no-sink call; no V5
/// backward → a sink is an "unsupported" error naming it, while no-sink calls still run.
#[test]
fn missing_varlen_entry_points_fall_back_both_ways_and_a_sink_without_v5_is_unsupported() {
    let c = Case::new();
    let no_base = sim::api_without_ops(&[FWD_BASE, GRAD_BASE]);
    assert!(no_base.varlen_fwd_base.is_none() && no_base.varlen_grad_base.is_none());
    let rt = Runtime::with_api(no_base, 0).unwrap();
    let before = varlen_launches();
    varlen_grad(&rt, &c, false).unwrap();
    assert_eq!(launched_since(before), [0, 1, 0, 1]);

    let rt = Runtime::with_api(sim::api_without_ops(&[GRAD_V5]), 0).unwrap();
    let before = varlen_launches();
    varlen_grad(&rt, &c, false).unwrap();
    assert_eq!(launched_since(before), [1, 0, 1, 0]);
    let err = varlen_grad(&rt, &c, true).unwrap_err();
    assert!(matches!(err, AclError::Unsupported(_)), "{err}");
    assert!(
        err.to_string()
            .starts_with("unsupported: sink need aclnnFlashAttentionUnpaddingScoreGradV5"),
        "{err}"
    );

    let rt = Runtime::with_api(
        sim::api_without_ops(&[FWD_V5, GRAD_V5, FWD_BASE, GRAD_BASE]),
        0,
    )
    .unwrap();
    let err = varlen_fwd(&rt, &c, false).unwrap_err();
    assert!(matches!(err, AclError::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("is not available"), "{err}");
}

#[test]
fn the_call_builder_passes_strides_and_offsets_as_torch_npu_does() {
    // Never null: [1, 1] / [0, 0] outside Nct (op-plugin ScatterPaKvCacheNpuOpApi.cpp), the
    // spec's with Nct.
    let mut spec = ScatterSpec::new(vec![0]);
    assert_eq!(builders::scatter_strides_offsets(&spec), ([1, 1], [0, 0]));
    spec.strides = Some(vec![7, 9]);
    spec.offsets = Some(vec![2, 3]);
    assert_eq!(builders::scatter_strides_offsets(&spec), ([1, 1], [0, 0]));
    spec.scatter_mode = ScatterKind::Nct;
    assert_eq!(builders::scatter_strides_offsets(&spec), ([7, 9], [2, 3]));
}

/// A Norm FLOAT16 scatter at handle level (Atlas A2/A3 takes no FLOAT key): key `[t, 1, 8]`,
/// cache `[2, 4, 1, 8]`.
fn norm_scatter(
    rt: &Runtime,
    key_dims: &[usize],
    slots: &[i32],
    scatter_mode: &str,
    strides: Option<&[i64]>,
) -> Result<(), AclError> {
    let key = vec![1.0f32; key_dims.iter().product()];
    let kt = up_f16(rt, key_dims, &key);
    let ct = zeros_f16(rt, &[2, 4, 1, 8]);
    let sb: Vec<u8> = slots.iter().flat_map(|x| x.to_le_bytes()).collect();
    let st = rt
        .upload(
            TensorDesc::contiguous(&[slots.len()], DataType::Int32).unwrap(),
            &sb,
        )
        .unwrap();
    let strides = strides.map(|s| IntArray::new(rt.api(), s).unwrap());
    let offsets = strides
        .as_ref()
        .map(|_| IntArray::new(rt.api(), &[0, 0]).unwrap());
    let (kh, ch, sh) = (kt.handle()?, ct.handle()?, st.handle()?);
    aclnn::scatter(
        rt,
        &aclnn::ScatterArgs {
            key: &kh,
            key_cache: &ch,
            slot_mapping: &sh,
            value: None,
            value_cache: None,
            compress_lens: None,
            compress_seq_offset: None,
            seq_lens: None,
            cache_mode: "Norm",
            scatter_mode,
            strides: strides.as_ref(),
            offsets: offsets.as_ref(),
        },
    )
}

#[test]
fn the_simulated_scatter_refuses_what_the_tiling_refuses() {
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    norm_scatter(&rt, &[2, 1, 8], &[0, 5], "None", None).expect("valid, null arrays outside Nct");
    // numTokens (key dim 0) = 0.
    let err = norm_scatter(&rt, &[0, 1, 8], &[], "None", None).unwrap_err();
    assert!(err.to_string().contains("numTokens"), "{err}");
    // numBlocks·blockSize = 8 < 9 tokens.
    let err = norm_scatter(&rt, &[9, 1, 8], &[-1; 9], "None", None).unwrap_err();
    assert!(err.to_string().contains("numBlocks"), "{err}");
    // Fewer slots than key tokens: the kernel would read slotMapping past its end.
    let err = norm_scatter(&rt, &[3, 1, 8], &[0, 1], "None", None).unwrap_err();
    assert_eq!(err.status(), Some(ACLNN_ERR_PARAM_INVALID), "{err}");
    // Nct without strides: the tiling dereferences them unchecked.
    let err = norm_scatter(&rt, &[2, 1, 8], &[0, 5], "Nct", None).unwrap_err();
    assert_eq!(err.status(), Some(ACLNN_ERR_PARAM_NULLPTR), "{err}");
    norm_scatter(&rt, &[2, 1, 8], &[0, 5], "Nct", Some(&[8, 1])).expect("Nct with strides");
}
