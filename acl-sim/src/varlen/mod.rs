//! Simulated varlen flash attention: `aclnnFlashAttentionVarLenScoreV5`, its no-sink base
//! `aclnnFlashAttentionVarLenScore` and the fused backward
//! `aclnnFlashAttentionUnpaddingScoreGradV5`, TND only, on this workspace's fast CPU kernels
//! (`burn_ascend_kernels::cpu`).
//!
//! As every simulated op, each first stage (the function named by the op's table field)
//! decodes and checks every argument it was handed (161001 for a null required one, 161002
//! for a bad dtype / shape / format / attribute) and records an executor whose job reads the
//! device memory at launch, runs the CPU kernel and writes the outputs through their
//! descriptors; the second stage is [`crate::state::launch`].

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::varlen::{
    lengths_from_varlen_cumulative, AttenMask, DenseMask, Pse, PseType, SoftmaxLayout, SparseMode,
    VarlenAttrs, VarlenDims, VarlenProblem, ALIBI_COMPRESSED_ROWS, VARLEN_LAYOUT,
};
use half::{bf16, f16};

use crate::state::{
    self, c_str, int_array, invalid, required, tensor, SimErr, SimResult, SimTensor,
};
use crate::wire::{
    check_dims, check_rank, encode, floats, mask01, submit, typed, unsupported, Wire, IA, T,
};

/// Runs a varlen call's `run_typed` with its query's element type (FLOAT16, BFLOAT16, else
/// FLOAT).
macro_rules! by_query_dtype {
    ($call:ident) => {
        match $call.x.q.dtype {
            DataType::Float16 => $call.run_typed::<f16>(),
            DataType::Bf16 => $call.run_typed::<bf16>(),
            _ => $call.run_typed::<f32>(),
        }
    };
}

/// Decodes a V5 varlen call `$p`, forward or backward: `$pse` and `$sink` name its pse and sink
/// parameters, `$sm` (spelled `$sm_name` in messages) its softmax layout.
macro_rules! decode_v5 {
    ($p:ident, $pse:ident, $sink:ident, ($sm:ident, $sm_name:literal), $pass:expr) => {{
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let (layout, sm_layout) = unsafe {
            (
                c_str($p.input_layout, "inputLayout")?,
                c_str($p.$sm, $sm_name)?,
            )
        };
        decode_varlen(
            $p.query,
            $p.key,
            $p.value,
            $p.$pse,
            $p.drop_mask,
            $p.padding_mask,
            $p.atten_mask,
            $p.$sink,
            $p.prefix,
            $p.actual_seq_q_len,
            $p.actual_seq_kv_len,
            $p.q_start_idx,
            $p.kv_start_idx,
            $p.scale_value,
            $p.keep_prob,
            $p.pre_tokens,
            $p.next_tokens,
            $p.head_num,
            layout,
            $p.inner_precise,
            $p.sparse_mode,
            $p.pse_type,
            sm_layout,
            $pass,
        )?
    }};
}

mod grad;

/// The decoded inputs and attributes shared by varlen forward and backward.
struct Varlen {
    q: SimTensor,
    k: SimTensor,
    v: SimTensor,
    pse: Option<SimTensor>,
    drop: Option<SimTensor>,
    mask: Option<SimTensor>,
    mask_compressed: bool,
    sink: Option<SimTensor>,
    prefix: Option<Vec<i64>>,
    q_start: i64,
    kv_start: i64,
    dims: VarlenDims,
    attrs: VarlenAttrs,
}

/// Host copies of the optional inputs, borrowed by the problem.
struct VarlenData {
    mask: Vec<u8>,
    pse: Vec<f32>,
    drop: Option<Vec<u8>>,
    sink: Option<Vec<f32>>,
}

#[allow(clippy::too_many_arguments)]
fn decode_varlen(
    query: T,
    key: T,
    value: T,
    real_shift: T,
    drop_mask: T,
    padding_mask: T,
    atten_mask: T,
    sink: T,
    prefix: IA,
    seq_q: IA,
    seq_kv: IA,
    q_start: IA,
    kv_start: IA,
    scale: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    layout: Option<String>,
    inner_precise: i64,
    sparse_mode: i64,
    pse_type: i64,
    softmax_layout: Option<String>,
    pass: Pass,
) -> SimResult<Varlen> {
    let q = required(query, "query")?;
    let k = required(key, "key")?;
    let v = required(value, "value")?;
    if tensor(padding_mask, "paddingMask")?.is_some() {
        return unsupported("paddingMask (reserved by CANN)");
    }
    let layout =
        layout.ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "inputLayout is null".into()))?;
    if layout != VARLEN_LAYOUT {
        return invalid(format!(
            "inputLayout: varlen takes \"TND\", got \"{layout}\""
        ));
    }
    for (t, name) in [(&q, "query"), (&k, "key"), (&v, "value")] {
        check_rank(t, name, 3)?;
        if !matches!(
            t.dtype,
            DataType::Float | DataType::Float16 | DataType::Bf16
        ) {
            return invalid(format!(
                "{name}: dtype must be FLOAT16, BFLOAT16 or FLOAT, got {:?}",
                t.dtype
            ));
        }
        if t.format != Format::Nd {
            return invalid(format!("{name}: format must be ND, got {:?}", t.format));
        }
    }
    if k.dtype != q.dtype || v.dtype != q.dtype {
        return invalid("key, value: dtype must equal the query's");
    }
    let (tq, n, d) = (q.dims[0], q.dims[1], q.dims[2]);
    let (tkv, nkv, dk) = (k.dims[0], k.dims[1], k.dims[2]);
    if head_num != n as i64 {
        return invalid(format!("headNum {head_num} must equal the query's N {n}"));
    }
    if nkv == 0 || !n.is_multiple_of(nkv) || dk != d || v.dims[0] != tkv || v.dims[1] != nkv {
        return invalid(format!(
            "key {:?} / value {:?} do not fit query {:?} (N a multiple of Nkv, same D, same T and Nkv)",
            k.dims, v.dims, q.dims
        ));
    }
    let seq = |p: IA, name: &str, total: usize| -> SimResult<Vec<usize>> {
        let c = int_array(p, name)?.ok_or_else(|| {
            SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{name} is null (required with TND)"),
            )
        })?;
        let (lens, end) = lengths_from_varlen_cumulative(&c)
            .filter(|(l, _)| !l.is_empty())
            .ok_or_else(|| {
                SimErr(
                    ACLNN_ERR_PARAM_INVALID,
                    format!("{name}: must be cumulative and non-decreasing, got {c:?}"),
                )
            })?;
        if end != total as i64 {
            return invalid(format!("{name}: must end at T = {total}, got {c:?}"));
        }
        Ok(lens)
    };
    let sq = seq(seq_q, "actualSeqQLen", tq)?;
    let skv = seq(seq_kv, "actualSeqKvLen", tkv)?;
    if sq.len() != skv.len() {
        return invalid("actualSeqQLen and actualSeqKvLen must have one entry per sequence each");
    }
    let mut attrs = VarlenAttrs::new(scale);
    attrs.keep_prob = keep_prob;
    attrs.pre_tokens = pre_tokens;
    attrs.next_tokens = next_tokens;
    attrs.inner_precise = inner_precise;
    attrs.sparse_mode = SparseMode::from_attr(sparse_mode).ok_or_else(|| {
        SimErr(
            ACLNN_ERR_PARAM_INVALID,
            format!("sparseMode {sparse_mode} is not 0-4 or 6-8"),
        )
    })?;
    attrs.pse_type = PseType::from_attr(pse_type).ok_or_else(|| {
        SimErr(
            ACLNN_ERR_PARAM_INVALID,
            format!("pseType {pse_type} is not 0-3"),
        )
    })?;
    let sl = softmax_layout.unwrap_or_default();
    attrs.softmax_layout = SoftmaxLayout::from_attr(&sl).ok_or_else(|| {
        SimErr(
            ACLNN_ERR_PARAM_INVALID,
            format!("softmax layout \"{sl}\" is not \"\" or \"same_as_input\""),
        )
    })?;
    if !(scale.is_finite() && keep_prob > 0.0 && keep_prob <= 1.0) {
        return invalid(format!(
            "scaleValue {scale} / keepProb {keep_prob} out of range"
        ));
    }
    let dims = VarlenDims {
        head_num: n,
        kv_head_num: nkv,
        head_dim: d,
        value_dim: v.dims[2],
        seq_q: sq,
        seq_kv: skv,
    };
    let mask = tensor(atten_mask, "attenMask")?;
    let mask_compressed = mask.is_some() && attrs.sparse_mode.takes_compressed_mask();
    if let Some(m) = &mask {
        if !matches!(m.dtype, DataType::Bool | DataType::Uint8) {
            return invalid(format!(
                "attenMask: dtype must be BOOL or UINT8, got {:?}",
                m.dtype
            ));
        }
        if !mask_compressed {
            // The arch32 tiling's attenMaskShapeType branch (`flash_attention_score_tiling_
            // general.cpp`): exactly [maxSq, maxSkv], [1, 1, ..], [B, 1, ..] or [B, N, ..].
            let batch = dims.batch();
            let max_q = dims.seq_q.iter().copied().max().unwrap_or(0);
            let max_kv = dims.seq_kv.iter().copied().max().unwrap_or(0);
            let per_batch = match m.dims.as_slice() {
                [r, c] if (*r, *c) == (max_q, max_kv) => Some(false),
                [b, h, r, c] if (*r, *c) == (max_q, max_kv) => match (*b, *h) {
                    (1, 1) => Some(false),
                    (b, 1) if b == batch => Some(true),
                    (b, h) if b == batch && h == n => Some(true),
                    _ => None,
                },
                _ => None,
            };
            let Some(per_batch) = per_batch else {
                return invalid(format!(
                    "attenMask: shape {:?} must be [maxSq, maxSkv] = [{max_q}, {max_kv}], \
                     [1, 1, maxSq, maxSkv], [B, 1, maxSq, maxSkv] or [B, N, maxSq, maxSkv]",
                    m.dims
                ));
            };
            // The real kernel reads a per-batch mask at packed offsets Σ Sq·Skv with the
            // mask's row stride (`ComputeOffsetForNoCompress`); the simulation does not
            // reproduce that reading and refuses where it differs from the top-left one.
            if per_batch
                && batch > 1
                && dims
                    .seq_q
                    .iter()
                    .zip(&dims.seq_kv)
                    .any(|(&q, &k)| (q, k) != (max_q, max_kv))
            {
                return invalid(format!(
                    "attenMask: a per-batch mask {:?} with sequences shorter than the longest \
                     is read at packed offsets by the kernel (not simulated)",
                    m.dims
                ));
            }
        }
    }
    let pse = tensor(real_shift, "realShift")?;
    if let Some(p) = &pse {
        let want = match attrs.pse_type {
            PseType::InnerMulAdd | PseType::InnerMulAddSqrt => {
                if p.numel() != n && p.numel() != n * dims.batch() {
                    return invalid(format!(
                        "realShift: alibi slopes must be [N] or [B, N], got {:?}",
                        p.dims
                    ));
                }
                p.numel()
            }
            _ if alibi_compressed_dims(&p.dims, n, &dims) => p.numel(),
            _ => (0..dims.batch())
                .map(|b| n * dims.seq_q[b] * dims.seq_kv[b])
                .sum(),
        };
        if p.numel() != want {
            return invalid(format!(
                "realShift: needs {want} elements (N·Sq·Skv per sequence), got {:?}",
                p.dims
            ));
        }
        if alibi_compressed_dims(&p.dims, n, &dims) {
            if dims.seq_q != dims.seq_kv {
                return invalid(
                    "realShift: the ALiBi-compressed pse needs Sq = Skv in every sequence",
                );
            }
        } else if matches!(attrs.pse_type, PseType::OuterMulAdd | PseType::OuterAddMul) {
            check_dense_pse_dims(&p.dims, want, pass)?;
        }
    }
    let drop = tensor(drop_mask, "dropMask")?;
    if let Some(m) = &drop {
        let bits: usize = (0..dims.batch())
            .map(|b| n * dims.seq_q[b] * dims.seq_kv[b])
            .sum();
        if m.dtype != DataType::Uint8 || m.numel() * 8 < bits {
            return invalid(format!(
                "dropMask: UINT8 with {} bits needed, got {:?} {:?}",
                bits, m.dtype, m.dims
            ));
        }
    }
    let sink = tensor(sink, "sink")?;
    if let Some(s) = &sink {
        if s.dtype != DataType::Float || s.dims != [n] {
            return invalid(format!(
                "sink: must be FLOAT [headNum = {n}], got {:?} {:?}",
                s.dtype, s.dims
            ));
        }
    }
    let prefix = int_array(prefix, "prefix")?;
    if attrs.sparse_mode == SparseMode::PrefixCompress
        && mask.is_some()
        && prefix.as_ref().is_none_or(|p| p.len() < dims.batch())
    {
        return invalid("prefix: sparseMode 6 needs one entry per sequence");
    }
    let start = |p: IA, name: &str| -> SimResult<i64> {
        Ok(int_array(p, name)?
            .and_then(|v| v.first().copied())
            .unwrap_or(0))
    };
    crate::cost::note_attention(|| crate::cost::Attention {
        seqs: dims
            .seq_q
            .iter()
            .copied()
            .zip(dims.seq_kv.iter().copied())
            .collect(),
        heads: dims.head_num,
        kv_heads: dims.kv_head_num,
        head_dim: dims.head_dim,
        value_dim: dims.value_dim,
        keep: crate::cost::Keep::of_sparse_mode(
            attrs.sparse_mode as i64,
            attrs.pre_tokens,
            attrs.next_tokens,
        ),
        q_elem: q.dtype.size(),
        kv_elem: k.dtype.size(),
        backward: matches!(pass, Pass::Backward),
        dtype: q.dtype,
    });
    Ok(Varlen {
        q_start: start(q_start, "qStartIdx")?,
        kv_start: start(kv_start, "kvStartIdx")?,
        q,
        k,
        v,
        pse,
        drop,
        mask,
        mask_compressed,
        sink,
        prefix,
        dims,
        attrs,
    })
}

/// Whether a pse of `pse_dims` is the ALiBi-compressed `[1|B, N, 1024, maxSkv]` form, as the
/// TND tiling classifies a 4-D pse (`flash_attention_score_tiling_general.cpp`, pseShapeType).
fn alibi_compressed_dims(pse_dims: &[usize], n: usize, dims: &VarlenDims) -> bool {
    let max_kv = dims.seq_kv.iter().copied().max().unwrap_or(0);
    matches!(*pse_dims, [b, h, ALIBI_COMPRESSED_ROWS, s2]
        if (b == 1 || b == dims.batch()) && h == n && s2 == max_kv)
}

/// Which op decodes the arguments: the forward and the backward tiling want a dense TND pse
/// in different ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Forward,
    Backward,
}

/// The rank rules of a dense (pseType 0/1) pse in TND, as the tilings check them:
/// - forward: `flash_attention_score/op_host/arch32/flash_attention_score_tiling_general.cpp`
///   classifies the pse by its dim 0 alone (`AnalyzeOptionalInput`, ~1524: dim 0 = N·Σ Sq·Skv)
///   but every template's `SetPseAlibiParams` (~3876) refuses fewer than 2 dims and reads
///   dim −2 = 1024 as the compressed ALiBi pse; so `[pseTotalLen, 1, 1]` (the trailing ones
///   keep dim −2 away from 1024);
/// - backward: `flash_attention_score_grad/op_host/arch32/…_s1s2_bn2gs1s2_sab.cpp`
///   (`ProcessPseInfo`, ~528) and `…_s1s2_bn2gs1s2.cpp` (~465) take a TND outer pse only as
///   1-D `[pseTotalLen]` (anything else must be the 4-D ALiBi form).
fn check_dense_pse_dims(dims: &[usize], total: usize, pass: Pass) -> SimResult<()> {
    let ok = match pass {
        Pass::Forward => {
            dims.len() >= 2
                && dims[0] == total
                && dims[1..].iter().all(|&d| d == 1)
                && dims[dims.len() - 2] != 1024
        }
        Pass::Backward => dims == [total],
    };
    if ok {
        return Ok(());
    }
    match pass {
        Pass::Forward => invalid(format!(
            "realShift: a dense TND pse must be [{total}, 1, …] (at least 2 dims, dim 0 = N·Σ Sq·Skv, dim −2 ≠ 1024), got {dims:?}"
        )),
        Pass::Backward => invalid(format!(
            "pseShift: a dense TND pse must be 1-D [{total}] (N·Σ Sq·Skv), got {dims:?}"
        )),
    }
}

impl Varlen {
    fn data(&self) -> SimResult<VarlenData> {
        Ok(VarlenData {
            mask: match (&self.mask, self.mask_compressed) {
                (Some(m), false) => mask01(m, "attenMask")?,
                _ => Vec::new(),
            },
            pse: match &self.pse {
                Some(p) => floats(p, "realShift")?,
                None => Vec::new(),
            },
            drop: self.drop.as_ref().map(|m| m.read("dropMask")).transpose()?,
            sink: self
                .sink
                .as_ref()
                .map(|s| typed::<f32>(s, "sink"))
                .transpose()?,
        })
    }

    fn problem<'a>(&'a self, data: &'a VarlenData) -> VarlenProblem<'a> {
        let atten_mask = match (&self.mask, self.mask_compressed) {
            (None, _) => AttenMask::None,
            (Some(_), true) => AttenMask::Compressed,
            (Some(m), false) => {
                let (batch, heads, rows, cols) = match *m.dims.as_slice() {
                    [r, c] => (1, 1, r, c),
                    [b, h, r, c] => (b, h, r, c),
                    _ => unreachable!("checked in the first stage"),
                };
                AttenMask::Dense(DenseMask {
                    data: &data.mask,
                    batch,
                    heads,
                    rows,
                    cols,
                })
            }
        };
        let pse = match (&self.pse, self.attrs.pse_type) {
            (None, _) => Pse::None,
            (Some(_), PseType::InnerMulAdd | PseType::InnerMulAddSqrt) => Pse::Alibi {
                slopes: &data.pse,
                per_batch: data.pse.len() != self.dims.head_num,
            },
            (Some(p), _) if p.dims.len() == 4 => Pse::AlibiCompressed {
                data: &data.pse,
                batches: p.dims[0],
                s2: p.dims[3],
            },
            (Some(_), _) => Pse::Dense(&data.pse),
        };
        VarlenProblem {
            dims: self.dims.clone(),
            attrs: self.attrs.clone(),
            atten_mask,
            pse,
            drop_mask: data.drop.as_deref(),
            prefix: self.prefix.as_deref(),
            q_start_idx: self.q_start,
            kv_start_idx: self.kv_start,
            sink: data.sink.as_deref(),
        }
    }
}

struct VarlenFwdCall {
    x: Varlen,
    softmax_max: SimTensor,
    softmax_sum: SimTensor,
    out: SimTensor,
}

impl VarlenFwdCall {
    fn check(&self) -> SimResult<()> {
        let d = &self.x.dims;
        let (t, n) = (d.t_q(), d.head_num);
        check_dims(&self.out, "attentionOut", &[t, n, d.value_dim])?;
        if self.out.dtype != self.x.q.dtype {
            return invalid("attentionOut: dtype must equal the query's");
        }
        for (s, name) in [
            (&self.softmax_max, "softmaxMax"),
            (&self.softmax_sum, "softmaxSum"),
        ] {
            check_dims(s, name, &[t, n, 8])?;
            if s.dtype != DataType::Float {
                return invalid(format!("{name}: dtype must be FLOAT"));
            }
        }
        Ok(())
    }

    fn run(&self) -> SimResult<()> {
        by_query_dtype!(self)
    }

    fn run_typed<W: Wire>(&self) -> SimResult<()> {
        let data = self.x.data()?;
        let p = self.x.problem(&data);
        let (q, k, v) = (
            typed::<W>(&self.x.q, "query")?,
            typed::<W>(&self.x.k, "key")?,
            typed::<W>(&self.x.v, "value")?,
        );
        let o = burn_ascend_kernels::cpu::varlen_fwd(&p, &q, &k, &v);
        self.out.write("attentionOut", &encode(&o.attention_out))?;
        self.softmax_max
            .write("softmaxMax", &encode(&o.softmax_max))?;
        self.softmax_sum
            .write("softmaxSum", &encode(&o.softmax_sum))
    }
}

/// The forward's first stage, for V5 or a base call widened to V5 (`op` names the op called).
fn fwd_stage(op: &'static str, p: VarlenFwdV5Params) -> SimResult<()> {
    if !p.query_rope.is_null() || !p.key_rope.is_null() {
        return unsupported("queryRope / keyRope");
    }
    let x = decode_v5!(
        p,
        real_shift,
        sink,
        (softmax_out_layout, "softmaxOutLayout"),
        Pass::Forward
    );
    let call = VarlenFwdCall {
        x,
        softmax_max: required(p.softmax_max_out, "softmaxMaxOut")?,
        softmax_sum: required(p.softmax_sum_out, "softmaxSumOut")?,
        out: required(p.attention_out_out, "attentionOutOut")?,
    };
    call.check()?;
    submit(op, move || call.run(), p.workspace_size, p.executor)
}

first_stage!(varlen_fwd_v5, |p| {
    state::guard(|| fwd_stage(names::varlen_fwd_v5, p))
});

// The base API has no sink, start indices or softmax layout; pse is pseType 1.
first_stage!(varlen_fwd_base, |p| {
    state::guard(|| fwd_stage(names::varlen_fwd_base, p.to_wide()))
});
