//! The Ascend dispatch layer against its host simulation of the ACL ABI (not CANN):
//! descriptor building (a stride or parameter-order bug must show), the two-stage contract,
//! status codes 161001 / 161002 with `aclGetRecentErrMsg`, and the V5 → base / PFA V3 → V1
//! fallbacks.

use std::ptr::{null, null_mut};

use burn_ascend_acl_sim as sim;
use burn_ascend_backend::attention::aclnn;
use burn_ascend_cann::acl::ffi::{AclOpExecutor, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR};
use burn_ascend_cann::acl::ops::{self, VarlenFwdArgs};
use burn_ascend_cann::acl::tensor::recent_error;
use burn_ascend_cann::acl::{
    AclError, DataType, DeviceTensor, Format, IntArray, Runtime, Tensor, TensorDesc,
};
use burn_ascend_contract::prompt::{PfaLayout, PromptSpec};
use burn_ascend_contract::scatter::{CacheMode, ScatterKind, ScatterSpec};
use burn_ascend_contract::varlen::VarlenSpec;
use burn_ascend_kernels::reference::varlen as reference;
use burn_ascend_kernels::varlen::{VarlenAttrs as KAttrs, VarlenDims, VarlenProblem};

fn rand(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn up(rt: &Runtime, dims: &[usize], v: &[f32]) -> DeviceTensor {
    rt.upload(
        TensorDesc::contiguous(dims, DataType::Float).unwrap(),
        &bytes(v),
    )
    .unwrap()
}

fn zeros(rt: &Runtime, dims: &[usize]) -> DeviceTensor {
    rt.zeros(TensorDesc::contiguous(dims, DataType::Float).unwrap())
        .unwrap()
}

/// attentionOut, softmaxMax, softmaxSum.
type FwdOut = (Vec<f32>, Vec<f32>, Vec<f32>);

/// The varlen forward of `c` through the backend's call builder.
fn varlen_fwd(rt: &Runtime, c: &Case, sink: bool) -> Result<FwdOut, AclError> {
    let (q, k, v) = (
        up(rt, &[c.tq(), c.n, c.d], &c.q),
        up(rt, &[c.tkv(), c.nkv, c.d], &c.k),
        up(rt, &[c.tkv(), c.nkv, c.d], &c.v),
    );
    let s = sink.then(|| up(rt, &[c.n], &c.sink));
    let (o, m, su) = (
        zeros(rt, &[c.tq(), c.n, c.d]),
        zeros(rt, &[c.tq(), c.n, 8]),
        zeros(rt, &[c.tq(), c.n, 8]),
    );
    {
        let sh = s.as_ref().map(|s| s.handle().unwrap());
        aclnn::varlen_fwd(
            rt,
            &c.spec(),
            c.n,
            &aclnn::VarlenFwdTensors {
                dtype: DataType::Float,
                query: &q.handle()?,
                key: &k.handle()?,
                value: &v.handle()?,
                sink: sh.as_ref(),
                attention_out: &o.handle()?,
                softmax_max: &m.handle()?,
                softmax_sum: &su.handle()?,
            },
        )?;
    }
    let down = |t: &DeviceTensor| floats(&t.download().unwrap());
    Ok((down(&o), down(&m), down(&su)))
}

/// Two sequences (3 and 5 query tokens over 4 and 5 KV tokens), N = 4, Nkv = 2, D = Dv = 8.
struct Case {
    seq_q: Vec<usize>,
    seq_kv: Vec<usize>,
    n: usize,
    nkv: usize,
    d: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    dy: Vec<f32>,
    sink: Vec<f32>,
    scale: f64,
}

impl Case {
    fn new() -> Self {
        let (seq_q, seq_kv) = (vec![3, 5], vec![4, 5]);
        let (n, nkv, d) = (4, 2, 8);
        let (tq, tkv) = (8, 9);
        Self {
            q: rand(1, tq * n * d),
            k: rand(2, tkv * nkv * d),
            v: rand(3, tkv * nkv * d),
            dy: rand(4, tq * n * d),
            sink: rand(5, n),
            seq_q,
            seq_kv,
            n,
            nkv,
            d,
            scale: 0.35,
        }
    }
    fn tq(&self) -> usize {
        self.seq_q.iter().sum()
    }
    fn tkv(&self) -> usize {
        self.seq_kv.iter().sum()
    }
    fn cum(v: &[usize]) -> Vec<i64> {
        v.iter()
            .scan(0i64, |a, &x| {
                *a += x as i64;
                Some(*a)
            })
            .collect()
    }
    fn problem(&self, sink: bool) -> VarlenProblem<'_> {
        let dims = VarlenDims {
            head_num: self.n,
            kv_head_num: self.nkv,
            head_dim: self.d,
            value_dim: self.d,
            seq_q: self.seq_q.clone(),
            seq_kv: self.seq_kv.clone(),
        };
        let mut p = VarlenProblem::new(dims, KAttrs::new(self.scale));
        if sink {
            p.sink = Some(&self.sink);
        }
        p
    }
    fn spec(&self) -> VarlenSpec {
        VarlenSpec::new(
            Case::cum(&self.seq_q),
            Case::cum(&self.seq_kv),
            self.n,
            self.scale,
        )
    }
}

#[test]
fn varlen_forward_and_backward_through_the_simulation_match_the_reference() {
    let c = Case::new();
    let rt = burn_ascend_acl_sim::runtime().unwrap();
    let (out, smax, ssum) = varlen_fwd(&rt, &c, true).unwrap();
    let p = c.problem(true);
    let want = reference::varlen_fwd(&p, &c.q, &c.k, &c.v);
    assert_eq!(out.len(), c.tq() * c.n * c.d);
    assert!(max_diff(&out, &want.attention_out) < 1e-5);
    assert!(max_diff(&smax, &want.softmax_max) < 1e-5);
    assert!(max_diff(&ssum, &want.softmax_sum) < 1e-4);

    let (qd, kd) = ([c.tq(), c.n, c.d], [c.tkv(), c.nkv, c.d]);
    let ts = [
        up(&rt, &qd, &c.q),
        up(&rt, &kd, &c.k),
        up(&rt, &kd, &c.v),
        up(&rt, &qd, &c.dy),
        up(&rt, &[c.tq(), c.n, 8], &smax),
        up(&rt, &[c.tq(), c.n, 8], &ssum),
        up(&rt, &qd, &out),
        up(&rt, &[c.n], &c.sink),
    ];
    let gs = [
        zeros(&rt, &qd),
        zeros(&rt, &kd),
        zeros(&rt, &kd),
        zeros(&rt, &[c.n]),
    ];
    {
        let h: Vec<Tensor<'_>> = ts.iter().map(|t| t.handle().unwrap()).collect();
        let g: Vec<Tensor<'_>> = gs.iter().map(|t| t.handle().unwrap()).collect();
        aclnn::varlen_grad(
            &rt,
            &c.spec(),
            c.n,
            &aclnn::VarlenGradTensors {
                dtype: DataType::Float,
                query: &h[0],
                key: &h[1],
                value: &h[2],
                dy: &h[3],
                softmax_max: &h[4],
                softmax_sum: &h[5],
                attention_in: &h[6],
                sink: Some(&h[7]),
                dq: &g[0],
                dk: &g[1],
                dv: &g[2],
                dsink: Some(&g[3]),
            },
        )
        .unwrap();
    }
    let [dq, dk, dv, ds] = gs.map(|t| floats(&t.download().unwrap()));
    let wg = reference::varlen_bwd(
        &p,
        &c.q,
        &c.k,
        &c.v,
        &c.dy,
        &want.attention_out,
        &want.softmax_max,
        &want.softmax_sum,
    );
    assert!(max_diff(&dq, &wg.dq) < 1e-4);
    assert!(max_diff(&dk, &wg.dk) < 1e-4);
    assert!(max_diff(&dv, &wg.dv) < 1e-4);
    assert!(max_diff(&ds, wg.dsink.as_ref().expect("dsink with a sink")) < 1e-4);
}

/// Everything for a handle-level varlen forward, so tests can tamper with one argument.
struct Handles {
    rt: Runtime,
    q: burn_ascend_cann::acl::DeviceTensor,
    k: burn_ascend_cann::acl::DeviceTensor,
    v: burn_ascend_cann::acl::DeviceTensor,
    o: burn_ascend_cann::acl::DeviceTensor,
    smax: burn_ascend_cann::acl::DeviceTensor,
    ssum: burn_ascend_cann::acl::DeviceTensor,
    cq: IntArray,
    ckv: IntArray,
}

impl Handles {
    fn new(c: &Case) -> Self {
        let rt = burn_ascend_acl_sim::runtime().unwrap();
        let up = |dims: &[usize], v: &[f32]| {
            rt.upload(
                TensorDesc::contiguous(dims, DataType::Float).unwrap(),
                &bytes(v),
            )
            .unwrap()
        };
        let z = |dims: &[usize]| {
            rt.zeros(TensorDesc::contiguous(dims, DataType::Float).unwrap())
                .unwrap()
        };
        let api = rt.api();
        Self {
            q: up(&[c.tq(), c.n, c.d], &c.q),
            k: up(&[c.tkv(), c.nkv, c.d], &c.k),
            v: up(&[c.tkv(), c.nkv, c.d], &c.v),
            o: z(&[c.tq(), c.n, c.d]),
            smax: z(&[c.tq(), c.n, 8]),
            ssum: z(&[c.tq(), c.n, 8]),
            cq: IntArray::new(api, &Case::cum(&c.seq_q)).unwrap(),
            ckv: IntArray::new(api, &Case::cum(&c.seq_kv)).unwrap(),
            rt,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn args<'a>(
        &'a self,
        c: &Case,
        q: &'a Tensor<'a>,
        k: &'a Tensor<'a>,
        v: &'a Tensor<'a>,
        o: &'a Tensor<'a>,
        m: &'a Tensor<'a>,
        s: &'a Tensor<'a>,
    ) -> VarlenFwdArgs<'a> {
        VarlenFwdArgs {
            query: q,
            query_rope: None,
            key: k,
            key_rope: None,
            value: v,
            real_shift: None,
            drop_mask: None,
            padding_mask: None,
            atten_mask: None,
            sink: None,
            prefix: None,
            actual_seq_q_len: Some(&self.cq),
            actual_seq_kv_len: Some(&self.ckv),
            q_start_idx: None,
            kv_start_idx: None,
            scale_value: c.scale,
            keep_prob: 1.0,
            pre_tokens: 2_147_483_647,
            next_tokens: 2_147_483_647,
            head_num: c.n as i64,
            input_layout: "TND",
            inner_precise: 0,
            sparse_mode: 0,
            pse_type: 1,
            softmax_out_layout: "",
            softmax_max: m,
            softmax_sum: s,
            softmax_out: None,
            attention_out: o,
        }
    }

    fn out(&self) -> Vec<f32> {
        floats(&self.o.download().unwrap())
    }
}

#[test]
fn a_transposed_stride_in_a_descriptor_is_caught() {
    let c = Case::new();
    let h = Handles::new(&c);
    let want = reference::varlen_fwd(&c.problem(false), &c.q, &c.k, &c.v).attention_out;
    let (k, v, o, m, s) = (
        h.k.handle().unwrap(),
        h.v.handle().unwrap(),
        h.o.handle().unwrap(),
        h.smax.handle().unwrap(),
        h.ssum.handle().unwrap(),
    );

    // The right descriptor: contiguous [T, N, D].
    let q = h.q.handle().unwrap();
    ops::varlen_fwd(&h.rt, &h.args(&c, &q, &k, &v, &o, &m, &s)).unwrap();
    h.rt.synchronize().unwrap();
    assert!(
        max_diff(&h.out(), &want) < 1e-5,
        "correct strides reproduce the reference"
    );

    // The bug: N and D strides swapped (a "transposed" view of the same bytes). Still inside
    // the storage, so nothing refuses it — but the simulation reads through the strides, so
    // the result must differ from the reference.
    let (t, n, d) = (c.tq(), c.n, c.d);
    let bad =
        TensorDesc::strided(&[t, n, d], &[n * d, 1, n], 0, t * n * d, DataType::Float).unwrap();
    let qbad = Tensor::new(&h.q.buf, &bad).unwrap();
    ops::varlen_fwd(&h.rt, &h.args(&c, &qbad, &k, &v, &o, &m, &s)).unwrap();
    h.rt.synchronize().unwrap();
    assert!(
        max_diff(&h.out(), &want) > 1e-2,
        "a transposed query stride must change the simulated result"
    );

    // A stride that walks past the storage is refused when the descriptor is built.
    let err = TensorDesc::strided(
        &[t, n, d],
        &[n * d + 1, d, 1],
        0,
        t * n * d,
        DataType::Float,
    )
    .unwrap_err();
    assert!(matches!(err, AclError::Invalid { .. }), "{err}");
    // And by the simulated aclCreateTensor if the check is bypassed (raw call).
    let api = h.rt.api();
    let (dims, strides, storage) = (
        [t as i64, n as i64, d as i64],
        [(n * d + 1) as i64, d as i64, 1],
        [(t * n * d) as i64],
    );
    // SAFETY: arrays valid for the lengths passed; the data pointer is a live device buffer.
    let p = unsafe {
        (api.create_tensor)(
            dims.as_ptr(),
            3,
            DataType::Float.raw(),
            strides.as_ptr(),
            0,
            2,
            storage.as_ptr(),
            1,
            h.q.buf.as_ptr(),
        )
    };
    assert!(p.is_null());
    assert!(
        recent_error(api).contains("beyond storage"),
        "{}",
        recent_error(api)
    );
}

/// The simulation takes exactly the dense mask shapes CANN's TND tiling takes, and refuses a
/// per-batch mask over sequences shorter than the longest (the kernel's packed reading).
#[test]
fn dense_masks_in_tnd_take_the_tiling_shapes_only() {
    let c = Case::new(); // lengths [3, 5] / [4, 5]: maxSq 5, maxSkv 5
    let h = Handles::new(&c);
    let (q, k, v, o, m, s) = (
        h.q.handle().unwrap(),
        h.k.handle().unwrap(),
        h.v.handle().unwrap(),
        h.o.handle().unwrap(),
        h.smax.handle().unwrap(),
        h.ssum.handle().unwrap(),
    );
    let call = |dims: &[usize]| {
        let n: usize = dims.iter().product();
        let mask =
            h.rt.upload(
                TensorDesc::contiguous(dims, DataType::Uint8).unwrap(),
                &vec![0u8; n],
            )
            .unwrap();
        let mh = mask.handle().unwrap();
        let mut a = h.args(&c, &q, &k, &v, &o, &m, &s);
        a.atten_mask = Some(&mh);
        let r = ops::varlen_fwd(&h.rt, &a).and_then(|()| h.rt.synchronize());
        r.map_err(|e| e.status())
    };
    assert_eq!(call(&[5, 5]), Ok(()));
    assert_eq!(call(&[1, 1, 5, 5]), Ok(()));
    for bad in [
        // larger than the longest sequence; per head but shared by the batches; per batch
        // while sequence 0 is shorter; rank 5
        vec![6, 5],
        vec![5, 6],
        vec![1, 4, 5, 5],
        vec![2, 1, 5, 5],
        vec![2, 4, 5, 5],
        vec![1, 1, 1, 5, 5],
    ] {
        assert_eq!(call(&bad), Err(Some(ACLNN_ERR_PARAM_INVALID)), "{bad:?}");
    }
}

#[test]
fn swapped_key_and_value_arguments_are_caught() {
    let c = Case::new();
    let h = Handles::new(&c);
    let want = reference::varlen_fwd(&c.problem(false), &c.q, &c.k, &c.v).attention_out;
    let (q, k, v, o, m, s) = (
        h.q.handle().unwrap(),
        h.k.handle().unwrap(),
        h.v.handle().unwrap(),
        h.o.handle().unwrap(),
        h.smax.handle().unwrap(),
        h.ssum.handle().unwrap(),
    );
    // Same shapes (D = Dv), so only the values can tell: the result must differ.
    ops::varlen_fwd(&h.rt, &h.args(&c, &q, &v, &k, &o, &m, &s)).unwrap();
    h.rt.synchronize().unwrap();
    assert!(max_diff(&h.out(), &want) > 1e-2);
    // Query and key swapped: shapes differ (T, N), refused with 161002.
    let err = ops::varlen_fwd(&h.rt, &h.args(&c, &k, &q, &v, &o, &m, &s)).unwrap_err();
    assert_eq!(err.status(), Some(ACLNN_ERR_PARAM_INVALID), "{err}");
    assert!(
        err.to_string()
            .contains("aclnnFlashAttentionVarLenScoreGetWorkspaceSize"),
        "no sink: the base op, as torch_npu calls it: {err}"
    );
}

#[test]
fn null_required_arguments_give_161001_and_bad_dtypes_161002() {
    let c = Case::new();
    let h = Handles::new(&c);
    let api = h.rt.api();
    let f = api.varlen_fwd_v5.unwrap();
    let (k, v, o, m, s) = (
        h.k.handle().unwrap(),
        h.v.handle().unwrap(),
        h.o.handle().unwrap(),
        h.smax.handle().unwrap(),
        h.ssum.handle().unwrap(),
    );
    let layout = std::ffi::CString::new("TND").unwrap();
    let empty = std::ffi::CString::new("").unwrap();
    let call = |q: *const burn_ascend_cann::acl::ffi::AclTensor| {
        let (mut ws, mut ex) = (0u64, null_mut::<AclOpExecutor>());
        // SAFETY: the V5 prototype; live handles or null; NUL-terminated strings.
        unsafe {
            (f.workspace)(
                q,
                null(),
                k.as_ptr(),
                null(),
                v.as_ptr(),
                null(),
                null(),
                null(),
                null(),
                null(),
                null(),
                h.cq.as_ptr(),
                h.ckv.as_ptr(),
                null(),
                null(),
                c.scale,
                1.0,
                65536,
                65536,
                c.n as i64,
                layout.as_ptr().cast_mut(),
                0,
                0,
                1,
                empty.as_ptr().cast_mut(),
                m.as_ptr(),
                s.as_ptr(),
                null(),
                o.as_ptr(),
                &mut ws,
                &mut ex,
            )
        }
    };
    assert_eq!(call(null()), ACLNN_ERR_PARAM_NULLPTR);
    assert!(
        recent_error(api).contains("query is null"),
        "{}",
        recent_error(api)
    );

    // An INT32 query.
    let ints =
        h.rt.zeros(TensorDesc::contiguous(&[c.tq(), c.n, c.d], DataType::Int32).unwrap())
            .unwrap();
    let qi = ints.handle().unwrap();
    assert_eq!(call(qi.as_ptr()), ACLNN_ERR_PARAM_INVALID);
    assert!(recent_error(api).contains("dtype"), "{}", recent_error(api));

    // Through the safe layer the error carries op, status and message on one line.
    let err = ops::varlen_fwd(&h.rt, &h.args(&c, &qi, &k, &v, &o, &m, &s)).unwrap_err();
    let line = err.to_string();
    assert!(
        line.contains("161002")
            && line.contains("ACLNN_ERR_PARAM_INVALID")
            && line.contains("[simulation]"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1);
}

#[test]
fn the_two_stage_order_and_workspace_size_are_enforced() {
    let c = Case::new();
    let h = Handles::new(&c);
    let api = h.rt.api();
    let f = api.varlen_fwd_v5.unwrap();
    let (q, k, v, o, m, s) = (
        h.q.handle().unwrap(),
        h.k.handle().unwrap(),
        h.v.handle().unwrap(),
        h.o.handle().unwrap(),
        h.smax.handle().unwrap(),
        h.ssum.handle().unwrap(),
    );
    let layout = std::ffi::CString::new("TND").unwrap();
    let empty = std::ffi::CString::new("").unwrap();
    let first_stage = || {
        let (mut ws, mut ex) = (0u64, null_mut::<AclOpExecutor>());
        // SAFETY: as above.
        let st = unsafe {
            (f.workspace)(
                q.as_ptr(),
                null(),
                k.as_ptr(),
                null(),
                v.as_ptr(),
                null(),
                null(),
                null(),
                null(),
                null(),
                null(),
                h.cq.as_ptr(),
                h.ckv.as_ptr(),
                null(),
                null(),
                c.scale,
                1.0,
                65536,
                65536,
                c.n as i64,
                layout.as_ptr().cast_mut(),
                0,
                0,
                1,
                empty.as_ptr().cast_mut(),
                m.as_ptr(),
                s.as_ptr(),
                null(),
                o.as_ptr(),
                &mut ws,
                &mut ex,
            )
        };
        assert_eq!(st, 0, "{}", recent_error(api));
        (ws, ex)
    };
    let stream = h.rt.stream().as_ptr();
    let wsbuf = burn_ascend_cann::acl::DeviceBuffer::alloc(api, 1 << 16).unwrap();

    // Launch without a first stage.
    // SAFETY: the launch prototype; a bogus executor is exactly what is being tested, and the
    // simulation never dereferences executors.
    let st = unsafe {
        (f.launch)(
            wsbuf.as_ptr(),
            1 << 16,
            0x1234 as *mut AclOpExecutor,
            stream,
        )
    };
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID);
    assert!(
        recent_error(api).contains("was not produced by"),
        "{}",
        recent_error(api)
    );

    // A workspace smaller than asked for.
    let (ws, ex) = first_stage();
    assert!(ws > 0);
    // SAFETY: as above.
    let st = unsafe { (f.launch)(wsbuf.as_ptr(), ws - 1, ex, stream) };
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID);
    assert!(
        recent_error(api).contains("smaller than"),
        "{}",
        recent_error(api)
    );

    // Right order: runs; launching the same executor again is refused.
    let (ws, ex) = first_stage();
    // SAFETY: as above.
    assert_eq!(unsafe { (f.launch)(wsbuf.as_ptr(), ws, ex, stream) }, 0);
    // SAFETY: as above.
    let st = unsafe { (f.launch)(wsbuf.as_ptr(), ws, ex, stream) };
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID);
    assert!(
        recent_error(api).contains("already launched"),
        "{}",
        recent_error(api)
    );

    // An executor handed to another op's launch.
    let (ws, ex) = first_stage();
    let other = api.scatter_pa_kv_cache.unwrap();
    // SAFETY: as above.
    let st = unsafe { (other.launch)(wsbuf.as_ptr(), ws, ex, stream) };
    assert_eq!(st, ACLNN_ERR_PARAM_INVALID);
    assert!(
        recent_error(api).contains("belongs to"),
        "{}",
        recent_error(api)
    );
}

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
        let (qt, kt, vt, o) = (
            up(rt, &dims, &q),
            up(rt, &dims, &k),
            up(rt, &dims, &v),
            zeros(rt, &dims),
        );
        aclnn::prompt(
            rt,
            spec,
            &aclnn::PromptTensors {
                dtype: DataType::Float,
                query: &qt.handle()?,
                key: &kt.handle()?,
                value: &vt.handle()?,
                attention_out: &o.handle()?,
            },
        )?;
        Ok(floats(&o.download()?))
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
    let nz = aclnn::cache_desc(CacheMode::PaNz, &cd, DataType::Float16).unwrap();
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
        aclnn::scatter(
            &rt,
            &spec,
            &aclnn::ScatterTensors {
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
    let err = ops::scatter(
        &rt,
        &ops::ScatterArgs {
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
        aclnn::varlen_grad(
            rt,
            &c.spec(),
            c.n,
            &aclnn::VarlenGradTensors {
                dtype: DataType::Float,
                query: &h[0],
                key: &h[1],
                value: &h[2],
                dy: &h[3],
                softmax_max: &h[4],
                softmax_sum: &h[5],
                attention_in: &h[6],
                sink: sink.then_some(&h[7]),
                dq: &g[0],
                dk: &g[1],
                dv: &g[2],
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
    assert_eq!(aclnn::scatter_strides_offsets(&spec), ([1, 1], [0, 0]));
    spec.strides = Some(vec![7, 9]);
    spec.offsets = Some(vec![2, 3]);
    assert_eq!(aclnn::scatter_strides_offsets(&spec), ([1, 1], [0, 0]));
    spec.scatter_mode = ScatterKind::Nct;
    assert_eq!(aclnn::scatter_strides_offsets(&spec), ([7, 9], [2, 3]));
}

/// A Norm f32 scatter at handle level: key `[t, 1, 8]`, cache `[2, 4, 1, 8]`.
fn norm_scatter(
    rt: &Runtime,
    key_dims: &[usize],
    slots: &[i32],
    scatter_mode: &str,
    strides: Option<&[i64]>,
) -> Result<(), AclError> {
    let key = vec![1.0f32; key_dims.iter().product()];
    let kt = up(rt, key_dims, &key);
    let ct = zeros(rt, &[2, 4, 1, 8]);
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
    ops::scatter(
        rt,
        &ops::ScatterArgs {
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
