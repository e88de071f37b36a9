//! Host-side cost of one dispatched attention call, measured against the simulation with its
//! compute turned off (on this thread only): descriptor creation, int arrays, the
//! `GetWorkspaceSize` stage, the cached workspace, the launch stage and the stream
//! synchronisation — everything the dispatch layer does on the host, nothing of the kernel.
//!
//! Two figures:
//! - `per_call_us`: every call builds its descriptors afresh (what
//!   the call builders do);
//! - `reused_descriptors_us`: descriptors and int arrays built once and reused across calls
//!   (CANN allows reusing `aclTensor`s; the executor is single-use unless made repeatable with
//!   `aclSetAclOpExecutorRepeatable`, which this layer does not use), so only the two stages
//!   and the synchronisation remain.
//!
//! The simulation's own bookkeeping (registries behind mutexes) is counted too, so the figures
//! are an upper bound for the Rust side of a real CANN call; CANN's own host work (tiling) is
//! not included.

use std::time::Instant;

use burn_ascend_cann::acl::aclnn::{varlen_fwd, VarlenFwdArgs};
use burn_ascend_cann::acl::{DataType, IntArray, Result, Tensor, TensorDesc};

/// Host overhead of one varlen forward dispatch, in µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostOverhead {
    /// Descriptors built per call.
    pub per_call_us: f64,
    /// Descriptors reused across calls.
    pub reused_descriptors_us: f64,
    /// Calls timed for each figure.
    pub iterations: usize,
}

/// Measures [`HostOverhead`] on the simulation over `iterations` calls (after a warm-up) of a
/// small varlen forward (2 sequences, N = 4, Nkv = 2, D = 64, with a sink).
pub fn host_overhead(iterations: usize) -> Result<HostOverhead> {
    let rt = crate::runtime()?;
    let api = rt.api();
    let (t, n, nkv, d) = (16usize, 4usize, 2usize, 64usize);
    let z = |dims: &[usize], dt: DataType| rt.zeros(TensorDesc::contiguous(dims, dt)?);
    let q = z(&[t, n, d], DataType::Float16)?;
    let k = z(&[t, nkv, d], DataType::Float16)?;
    let v = z(&[t, nkv, d], DataType::Float16)?;
    let sink = z(&[n], DataType::Float)?;
    let o = z(&[t, n, d], DataType::Float16)?;
    let smax = z(&[t, n, 8], DataType::Float)?;
    let ssum = z(&[t, n, 8], DataType::Float)?;
    let cum = [7i64, 16];

    crate::set_compute(false);
    let result = (|| {
        let one_call = || -> Result<()> {
            let (qh, kh, vh, sh) = (q.handle()?, k.handle()?, v.handle()?, sink.handle()?);
            let (oh, mh, uh) = (o.handle()?, smax.handle()?, ssum.handle()?);
            let cq = IntArray::new(api, &cum)?;
            let ck = IntArray::new(api, &cum)?;
            varlen_fwd(&rt, &args(&qh, &kh, &vh, &sh, &oh, &mh, &uh, &cq, &ck, n))?;
            rt.synchronize()
        };
        for _ in 0..iterations.min(100) {
            one_call()?;
        }
        let start = Instant::now();
        for _ in 0..iterations {
            one_call()?;
        }
        let per_call_us = start.elapsed().as_secs_f64() * 1e6 / iterations.max(1) as f64;

        let (qh, kh, vh, sh) = (q.handle()?, k.handle()?, v.handle()?, sink.handle()?);
        let (oh, mh, uh) = (o.handle()?, smax.handle()?, ssum.handle()?);
        let cq = IntArray::new(api, &cum)?;
        let ck = IntArray::new(api, &cum)?;
        let a = args(&qh, &kh, &vh, &sh, &oh, &mh, &uh, &cq, &ck, n);
        let start = Instant::now();
        for _ in 0..iterations {
            varlen_fwd(&rt, &a)?;
            rt.synchronize()?;
        }
        let reused_descriptors_us = start.elapsed().as_secs_f64() * 1e6 / iterations.max(1) as f64;
        Ok(HostOverhead {
            per_call_us,
            reused_descriptors_us,
            iterations,
        })
    })();
    crate::set_compute(true);
    result
}

/// [`host_overhead`] with 2000 iterations, per-call figure in µs (what a bench prints).
pub fn host_overhead_us() -> Result<f64> {
    Ok(host_overhead(2000)?.per_call_us)
}

#[allow(clippy::too_many_arguments)]
fn args<'a>(
    q: &'a Tensor<'a>,
    k: &'a Tensor<'a>,
    v: &'a Tensor<'a>,
    sink: &'a Tensor<'a>,
    o: &'a Tensor<'a>,
    smax: &'a Tensor<'a>,
    ssum: &'a Tensor<'a>,
    cq: &'a IntArray,
    ck: &'a IntArray,
    n: usize,
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
        sink: Some(sink),
        prefix: None,
        actual_seq_q_len: Some(cq),
        actual_seq_kv_len: Some(ck),
        q_start_idx: None,
        kv_start_idx: None,
        scale_value: 0.125,
        keep_prob: 1.0,
        pre_tokens: 2_147_483_647,
        next_tokens: 2_147_483_647,
        head_num: n as i64,
        input_layout: "TND",
        inner_precise: 0,
        sparse_mode: 0,
        pse_type: 1,
        softmax_out_layout: "",
        softmax_max: smax,
        softmax_sum: ssum,
        softmax_out: None,
        attention_out: o,
    }
}
