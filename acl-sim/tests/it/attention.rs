//! The Ascend dispatch layer against its host simulation of the ACL ABI (not CANN):
//! descriptor building (a stride or parameter-order bug must show), the two-stage contract,
//! status codes 161001 / 161002 with `aclGetRecentErrMsg`, and the V5 → base / PFA V3 → V1
//! fallbacks.

use burn_ascend_test_support::Rng;
use std::ptr::{null, null_mut};

use burn_ascend_backend::attention::builders;
use burn_ascend_cann::acl::aclnn::{self, VarlenFwdArgs};
use burn_ascend_cann::acl::ffi::{AclOpExecutor, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR};
use burn_ascend_cann::acl::tensor::recent_error;
use burn_ascend_cann::acl::{
    AclError, DataType, DeviceTensor, IntArray, Runtime, Tensor, TensorDesc,
};
use burn_ascend_contract::varlen::VarlenSpec;
use burn_ascend_contract::varlen::{VarlenAttrs as KAttrs, VarlenDims, VarlenProblem};
use burn_ascend_contract::varlen::{VarlenGradInputs, VarlenGrads, VarlenInputs, VarlenOutputs};
use burn_ascend_kernels::reference::varlen as reference;

/// `n` values uniform in [-1, 1), from `seed`.
pub(crate) fn rand(seed: u64, n: usize) -> Vec<f32> {
    Rng::new(seed).vec_f32(n, 1.0)
}

pub(crate) fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub(crate) fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub(crate) fn up(rt: &Runtime, dims: &[usize], v: &[f32]) -> DeviceTensor {
    rt.upload(
        TensorDesc::contiguous(dims, DataType::Float).unwrap(),
        &bytes(v),
    )
    .unwrap()
}

pub(crate) fn zeros(rt: &Runtime, dims: &[usize]) -> DeviceTensor {
    rt.zeros(TensorDesc::contiguous(dims, DataType::Float).unwrap())
        .unwrap()
}

/// `v` as FLOAT16 on the device (the inference attention ops and the scatter take no FLOAT).
pub(crate) fn up_f16(rt: &Runtime, dims: &[usize], v: &[f32]) -> DeviceTensor {
    let b: Vec<u8> = v
        .iter()
        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
        .collect();
    rt.upload(TensorDesc::contiguous(dims, DataType::Float16).unwrap(), &b)
        .unwrap()
}

pub(crate) fn zeros_f16(rt: &Runtime, dims: &[usize]) -> DeviceTensor {
    rt.zeros(TensorDesc::contiguous(dims, DataType::Float16).unwrap())
        .unwrap()
}

/// FLOAT16 bytes as f32.
pub(crate) fn halfs(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

/// attentionOut, softmaxMax, softmaxSum.
pub(crate) type FwdOut = (Vec<f32>, Vec<f32>, Vec<f32>);

/// The varlen forward of `c` through the backend's call builder.
pub(crate) fn varlen_fwd(rt: &Runtime, c: &Case, sink: bool) -> Result<FwdOut, AclError> {
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
        builders::varlen_fwd(
            rt,
            &c.spec(),
            c.n,
            DataType::Float,
            &VarlenInputs {
                sink: sh.as_ref(),
                ..VarlenInputs::new(&q.handle()?, &k.handle()?, &v.handle()?)
            },
            &VarlenOutputs {
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
pub(crate) struct Case {
    pub(crate) seq_q: Vec<usize>,
    pub(crate) seq_kv: Vec<usize>,
    pub(crate) n: usize,
    pub(crate) nkv: usize,
    pub(crate) d: usize,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) dy: Vec<f32>,
    pub(crate) sink: Vec<f32>,
    pub(crate) scale: f64,
}

impl Case {
    pub(crate) fn new() -> Self {
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
    pub(crate) fn tq(&self) -> usize {
        self.seq_q.iter().sum()
    }
    pub(crate) fn tkv(&self) -> usize {
        self.seq_kv.iter().sum()
    }
    pub(crate) fn cum(v: &[usize]) -> Vec<i64> {
        v.iter()
            .scan(0i64, |a, &x| {
                *a += x as i64;
                Some(*a)
            })
            .collect()
    }
    pub(crate) fn problem(&self, sink: bool) -> VarlenProblem<'_> {
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
    pub(crate) fn spec(&self) -> VarlenSpec {
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
        builders::varlen_grad(
            &rt,
            &c.spec(),
            c.n,
            DataType::Float,
            &VarlenGradInputs {
                inputs: VarlenInputs {
                    sink: Some(&h[7]),
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
    aclnn::varlen_fwd(&h.rt, &h.args(&c, &q, &k, &v, &o, &m, &s)).unwrap();
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
    aclnn::varlen_fwd(&h.rt, &h.args(&c, &qbad, &k, &v, &o, &m, &s)).unwrap();
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
        let r = aclnn::varlen_fwd(&h.rt, &a).and_then(|()| h.rt.synchronize());
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
    aclnn::varlen_fwd(&h.rt, &h.args(&c, &q, &v, &k, &o, &m, &s)).unwrap();
    h.rt.synchronize().unwrap();
    assert!(max_diff(&h.out(), &want) > 1e-2);
    // Query and key swapped: shapes differ (T, N), refused with 161002.
    let err = aclnn::varlen_fwd(&h.rt, &h.args(&c, &k, &q, &v, &o, &m, &s)).unwrap_err();
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
    let err = aclnn::varlen_fwd(&h.rt, &h.args(&c, &qi, &k, &v, &o, &m, &s)).unwrap_err();
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
