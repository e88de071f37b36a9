//! The simulated fused backward: `aclnnFlashAttentionUnpaddingScoreGradV5` and its no-sink
//! base `aclnnFlashAttentionUnpaddingScoreGrad`, including each CANN release's dsink post step
//! ([`crate::cann_release`]; see [`DsinkPost`]): 8.5.0-beta.1 keeps only the last chunk past
//! the threshold, 8.5.0 and 9.0.0 drop the last chunk at an exact multiple of it, 9.1.0 is
//! right at every size.

use super::*;
use crate::wire::submit;
use burn_ascend_contract::DsinkPostStep;

struct VarlenGradCall {
    x: Varlen,
    dy: SimTensor,
    softmax_max: SimTensor,
    softmax_sum: SimTensor,
    attention_in: SimTensor,
    dq: SimTensor,
    dk: SimTensor,
    dv: SimTensor,
    /// `dpseOut`: checked, never written — no arch32 grad kernel writes it (spec Appendix,
    /// `flash_attention_score_grad_infershape.cpp` ~105–108 only gives it the pse's shape).
    dpse: Option<SimTensor>,
    dsink: Option<SimTensor>,
    /// The dsink post step of the release the simulation pretends to be, read at the first
    /// stage (on the caller's thread: a test's per-thread release reaches the stream's worker).
    dsink_post: DsinkPostStep,
}

impl VarlenGradCall {
    fn check(&self) -> SimResult<()> {
        let d = &self.x.dims;
        let (tq, n) = (d.t_q(), d.head_num);
        let qdt = self.x.q.dtype;
        for (t, name, want) in [
            (&self.dy, "dy", vec![tq, n, d.value_dim]),
            (&self.attention_in, "attentionIn", vec![tq, n, d.value_dim]),
            (&self.dq, "dqOut", self.x.q.dims.clone()),
            (&self.dk, "dkOut", self.x.k.dims.clone()),
            (&self.dv, "dvOut", self.x.v.dims.clone()),
        ] {
            check_dims(t, name, &want)?;
            if t.dtype != qdt {
                return invalid(format!(
                    "{name}: dtype must equal the query's {qdt:?}, got {:?}",
                    t.dtype
                ));
            }
        }
        for (s, name) in [
            (&self.softmax_max, "softmaxMax"),
            (&self.softmax_sum, "softmaxSum"),
        ] {
            check_dims(s, name, &[tq, n, 8])?;
            if s.dtype != DataType::Float {
                return invalid(format!("{name}: dtype must be FLOAT"));
            }
        }
        if let Some(dp) = &self.dpse {
            // The op's own dpse output has the pse's shape ([0] without one) and is view-copied
            // into a non-FLOAT dpseOut (`aclnn_flash_attention_score_grad.cpp` ~1130, ViewCopy),
            // so such a dpseOut must have that shape; torch_npu passes a pse-shaped one
            // (op-plugin `FlashAttentionKernelNpuOpApi.cpp` ~1119–1123).
            let want = self.x.pse.as_ref().map_or(vec![0], |p| p.dims.clone());
            if dp.dtype != DataType::Float && dp.dims != want {
                return invalid(format!(
                    "dpseOut: must have the pse's shape {want:?}, got {:?}",
                    dp.dims
                ));
            }
        }
        match (&self.x.sink, &self.dsink) {
            (Some(_), None) => Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "dsinkOut is null but sinkIn is given".into(),
            )),
            (Some(_), Some(ds)) if ds.dims != [n] || ds.dtype != DataType::Float => {
                invalid(format!(
                    "dsinkOut: must be FLOAT [{n}], got {:?} {:?}",
                    ds.dtype, ds.dims
                ))
            }
            _ => Ok(()),
        }
    }

    fn run(&self) -> SimResult<()> {
        by_query_dtype!(self)
    }

    fn run_typed<W: Wire>(&self) -> SimResult<()> {
        let data = self.x.data()?;
        let p = self.x.problem(&data);
        let g = burn_ascend_kernels::cpu::varlen_bwd(
            &p,
            &typed::<W>(&self.x.q, "query")?,
            &typed::<W>(&self.x.k, "key")?,
            &typed::<W>(&self.x.v, "value")?,
            &typed::<W>(&self.dy, "dy")?,
            &typed::<W>(&self.attention_in, "attentionIn")?,
            &typed::<f32>(&self.softmax_max, "softmaxMax")?,
            &typed::<f32>(&self.softmax_sum, "softmaxSum")?,
        );
        self.dq.write("dqOut", &encode(&g.dq))?;
        self.dk.write("dkOut", &encode(&g.dk))?;
        self.dv.write("dvOut", &encode(&g.dv))?;
        if let (Some(t), Some(ds)) = (&self.dsink, &g.dsink) {
            let post = DsinkPost::new(&p.dims, self.x.q.dtype);
            let ds = match self.dsink_post {
                DsinkPostStep::ReducePerCorePartials => ds.clone(),
                _ if post.exact() => ds.clone(),
                step => post.reduce(&dsink_partials::<W>(&p, &post, self, &data)?, step),
            };
            t.write("dsinkOut", &encode(&ds))?;
        }
        Ok(())
    }
}

/// The dsink reduction of the arch32 grad kernel up to CANN 9.0.0, with its defects
/// (`flash_attention_score_grad/op_kernel/arch32/flash_attention_score_grad_post.h`
/// ~1029–1077, the SameAB template that every sink call takes: `…_tiling_s1s2_bn2gs1s2_sab.cpp`
/// `IsCapable` returns true for a 1-D sink).
///
/// The main kernel (`…_s1s2_bn2gs1s2_sab.h` ~3640–3815) writes, per query head n1 and per
/// (sequence, 512×512 cube block, vector half), one f32 partial Σ p_sink,i·(P∘dP)_ij into a
/// workspace region of `dataSizePerN1 = B·s1Pad·s2Pad/baseMN` floats per head
/// (`s1Pad`/`s2Pad`: the longest Sq/Skv rounded up to 256; `baseMN = 128·64`; B without the
/// trailing empty sequences). The post step reads each head's region in chunks of
/// `2·postUbBaseSize` bytes: 8.5.0-beta.1 keeps `dsinkCalc = −ReduceSum(chunk)` — it
/// *overwrites* per chunk, so only the last chunk survives once
/// `dataSizePerN1·4 > 2·postUbBaseSize`; 8.5.0 and 9.0.0 accumulate (`dsinkCalc +=`). On
/// both, with `dataSizePerN1·4` an exact multiple the last chunk is empty (`tail = 0`), its
/// share is dropped and `copyOffset` falls behind for the following heads. 9.1.0 (`ce9556718`)
/// has no chunk loop: per-core partials, one `ReduceSum` per head — modelled as the exact
/// dsink.
///
/// `postUbBaseSize` (`…_sab.cpp` `DoPostTiling` ~1875): `(ubSize − 2·nzReserved) / coex /
/// 256·256` with `ubSize` = the A2/A3 UB (192 KiB) − 8 KiB (`MATMUL_SIZE`), `coex` = 3, or 10
/// with `nzReserved = ⌈D/16⌉·32·4` when the second matmul writes NZ (f16/bf16, D ∈ {72, 80, 88,
/// 96} and max Sq ≥ 128, ~950–958). For D = 128 that is 62 720 bytes: the result is exact only
/// while `B·⌈Sq/256⌉·⌈Skv/256⌉·8 < 31 360` floats (64 sequences of 4096 tokens are far beyond).
///
/// Modelled, not bit-exact: the cube block is the tiling's 512×512 default (`AdjustCvInner`
/// may pick others, which moves partials between chunks but not the defect), and sequence b's
/// partials start after those of the sequences before it. The kernel indexes them at
/// `2·s2Outer·s1Outer·bIdx` with the *current* sequence's block counts, which collides when
/// sequences have different block counts — a second suspected defect the backend's own dsink
/// (always computed on the device, `burn_ascend_backend::attention`) also sidesteps; only
/// hardware can confirm it. `ReduceSum` over 0 items is taken as 0.
struct DsinkPost {
    /// Query heads N.
    heads: usize,
    /// Sequences B the tiling counts (trailing sequences with Sq = Skv = 0 dropped).
    batch: usize,
    /// Partials per head, `dataSizePerN1`.
    per_head: usize,
    /// Floats per post chunk, `2·postUbBaseSize / 4`.
    chunk: usize,
}

/// A2/A3 unified buffer per vector core.
const UB_BYTES: usize = 192 * 1024;
/// The grad tiling's `MATMUL_SIZE`, kept out of the UB.
const MATMUL_SIZE: usize = 8 * 1024;
/// `s1Inner·s2Inner` = `INITIAL_S1_SPLIT_NUM · INITIAL_S2_SPLIT_NUM`.
const BASE_MN: usize = 128 * 64;
/// The cube block (`SAMEAB_S1_BASE × SAMEAB_S2_BASE`).
const CV_INNER: usize = 512;

impl DsinkPost {
    fn new(dims: &VarlenDims, dtype: DataType) -> Self {
        let pairs: Vec<(usize, usize)> = dims
            .seq_q
            .iter()
            .copied()
            .zip(dims.seq_kv.iter().copied())
            .collect();
        let trailing_empty = pairs
            .iter()
            .skip(1)
            .rev()
            .take_while(|&&(q, k)| q == 0 && k == 0)
            .count();
        let batch = pairs.len() - trailing_empty;
        let pad = |x: usize| x.div_ceil(256) * 256;
        let s1 = dims.seq_q.iter().copied().max().unwrap_or(0);
        let s2 = dims.seq_kv.iter().copied().max().unwrap_or(0);
        let per_head = batch * pad(s1) * pad(s2) / BASE_MN;
        let d = dims.head_dim;
        let nz_out = dtype != DataType::Float && matches!(d, 72 | 80 | 88 | 96) && s1 >= 128;
        let (coex, nz_reserved) = if nz_out {
            (10, d.div_ceil(16) * 32 * 4)
        } else {
            (3, 0)
        };
        let post_ub = (UB_BYTES - MATMUL_SIZE - 2 * nz_reserved) / coex / 256 * 256;
        Self {
            heads: dims.head_num,
            batch,
            per_head,
            chunk: 2 * post_ub / 4,
        }
    }

    /// Whether the kernel's single chunk holds every partial (its dsink is then right).
    fn exact(&self) -> bool {
        self.per_head < self.chunk
    }

    /// The chunked post step (`step`: 8.5.0-beta.1 overwrites per chunk, 8.5.0 and 9.0.0
    /// accumulate) over the workspace of partials (`heads · per_head` floats), literally.
    fn reduce(&self, ws: &[f32], step: DsinkPostStep) -> Vec<f32> {
        let bytes = self.per_head * 4;
        let chunk_bytes = self.chunk * 4;
        let copies = bytes.div_ceil(chunk_bytes);
        let tail = bytes % chunk_bytes;
        let mut offset = 0usize;
        (0..self.heads)
            .map(|_| {
                let mut dsink = 0.0f32;
                for c in 0..copies {
                    let size = if c == copies - 1 { tail } else { chunk_bytes };
                    let items = size / 4;
                    let end = (offset + items).min(ws.len());
                    let part = -ws[offset.min(end)..end].iter().sum::<f32>();
                    if step == DsinkPostStep::OverwritePerChunk {
                        dsink = part;
                    } else {
                        dsink += part;
                    }
                    offset += items;
                }
                dsink
            })
            .collect()
    }
}

/// The main kernel's dsink partials (see [`DsinkPost`]): for head h, sequence b and cube block
/// (s1o, s2o), Σ over the block of `exp(sink_h − m_i)/l_i · P_ij · dP_ij` (dP with dropout),
/// at slot `2·(s2o + s2Outer_b·s1o) + 2·Σ_{b'<b} s1Outer_b'·s2Outer_b'` of the head's region
/// (the second vector half's slot is left 0: a pair never straddles a chunk).
fn dsink_partials<W: Wire>(
    p: &VarlenProblem,
    post: &DsinkPost,
    call: &VarlenGradCall,
    data: &VarlenData,
) -> SimResult<Vec<f32>> {
    let d = &p.dims;
    let (n, nkv, dd, dv, g) = (
        d.head_num,
        d.kv_head_num,
        d.head_dim,
        d.value_dim,
        d.group(),
    );
    let f64s = |v: Vec<W>| v.into_iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    let q = f64s(typed::<W>(&call.x.q, "query")?);
    let k = f64s(typed::<W>(&call.x.k, "key")?);
    let v = f64s(typed::<W>(&call.x.v, "value")?);
    let dy = f64s(typed::<W>(&call.dy, "dy")?);
    let smax = typed::<f32>(&call.softmax_max, "softmaxMax")?;
    let ssum = typed::<f32>(&call.softmax_sum, "softmaxSum")?;
    let sink = data.sink.as_deref().unwrap_or(&[]);
    let (q_off, kv_off, pse_off) = (d.q_offsets(), d.kv_offsets(), p.pse_offsets());
    let mut ws = vec![0.0f32; n * post.per_head];
    let mut seq_base = 0usize;
    for b in 0..post.batch {
        let (sq, skv) = (d.seq_q[b], d.seq_kv[b]);
        let (s1o_n, s2o_n) = (sq.div_ceil(CV_INNER), skv.div_ceil(CV_INNER));
        if sq == 0 || skv == 0 {
            continue;
        }
        let rule = p.rule(b);
        for h in 0..n {
            let kvh = h / g;
            for i in 0..sq {
                let row = (q_off[b] + i) * n + h;
                let at = p.attrs.softmax_layout.stat_index(q_off[b], sq, n, h, i);
                let (m, l) = (smax[at] as f64, ssum[at] as f64);
                if l == 0.0 {
                    continue;
                }
                let p_sink = (sink[h] as f64 - m).exp() / l;
                let qi = &q[row * dd..][..dd];
                let dyi = &dy[row * dv..][..dv];
                for j in 0..skv {
                    if !p.allowed(&rule, b, h, i, j) {
                        continue;
                    }
                    let kv_row = (kv_off[b] + j) * nkv + kvh;
                    let qk: f64 = qi
                        .iter()
                        .zip(&k[kv_row * dd..][..dd])
                        .map(|(a, c)| a * c)
                        .sum();
                    let s = p.score(qk, p.pse_value(pse_off[b], b, h, i, j));
                    let pij = (s - m).exp() / l;
                    let drop = p.dropout_factor(pse_off[b] + (h * sq + i) * skv + j);
                    let dp: f64 = dyi
                        .iter()
                        .zip(&v[kv_row * dv..][..dv])
                        .map(|(a, c)| a * c)
                        .sum();
                    let slot = seq_base + 2 * ((j / CV_INNER) + s2o_n * (i / CV_INNER));
                    if slot < post.per_head {
                        ws[h * post.per_head + slot] += (p_sink * pij * dp * drop) as f32;
                    }
                }
            }
        }
        seq_base += 2 * s1o_n * s2o_n;
    }
    Ok(ws)
}

/// The backward's first stage, for V5 or a base call widened to V5 (`op` names the op called).
fn grad_stage(op: &'static str, p: VarlenGradV5Params) -> SimResult<()> {
    if !p.query_rope.is_null() || !p.key_rope.is_null() {
        return unsupported("queryRope / keyRope");
    }
    if !p.softmax_in.is_null() {
        return unsupported("softmaxIn (reserved by CANN)");
    }
    let x = decode_v5!(
        p,
        pse_shift,
        sink_in,
        (softmax_in_layout, "softmaxInLayout"),
        Pass::Backward
    );
    let call = grad_call(
        x,
        (p.dy, p.softmax_max, p.softmax_sum, p.attention_in),
        (p.dq_out, p.dk_out, p.dv_out, p.dpse_out, p.dsink_out),
    )?;
    submit(op, move || call.run(), p.workspace_size, p.executor)
}

first_stage!(varlen_grad_v5, |p| {
    state::guard(|| grad_stage(names::varlen_grad_v5, p))
});

/// The backward's call from its decoded inputs and the raw output handles.
fn grad_call(
    x: Varlen,
    (dy, softmax_max, softmax_sum, attention_in): (T, T, T, T),
    (dq_out, dk_out, dv_out, dpse_out, dsink_out): (T, T, T, T, T),
) -> SimResult<VarlenGradCall> {
    let need = |p: T, name: &str| -> SimResult<SimTensor> {
        tensor(p, name)?.ok_or_else(|| {
            SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{name} is null (the simulation recomputes from it)"),
            )
        })
    };
    let call = VarlenGradCall {
        dy: required(dy, "dy")?,
        softmax_max: need(softmax_max, "softmaxMax")?,
        softmax_sum: need(softmax_sum, "softmaxSum")?,
        attention_in: need(attention_in, "attentionIn")?,
        dq: required(dq_out, "dqOut")?,
        dk: required(dk_out, "dkOut")?,
        dv: required(dv_out, "dvOut")?,
        dpse: tensor(dpse_out, "dpseOut")?,
        dsink: tensor(dsink_out, "dsinkOut")?,
        dsink_post: crate::release::cann_release()
            .map_err(|e| SimErr(ACLNN_ERR_PARAM_INVALID, e.to_string()))?
            .dsink_post_step(),
        x,
    };
    call.check()?;
    Ok(call)
}

// `aclnnFlashAttentionUnpaddingScoreGrad`: the backward without sink, start indices, rope or
// softmax layout; pse is pseType 1.
first_stage!(varlen_grad_base, |p| {
    state::guard(|| grad_stage(names::varlen_grad_base, p.to_wide()))
});
