//! The simulated aclnn ops. Each `…_ws` function is the op's first stage: it decodes and
//! checks every argument it was handed (161001 for a null required one, 161002 for a bad
//! dtype / shape / format / attribute) and records an executor whose job reads the device
//! memory at launch, runs the CPU kernel and writes the outputs through their descriptors.
//! Each `…_launch` function is the second stage ([`state::launch`]).

use std::ffi::{c_char, c_void};

use half::{bf16, f16};

use super::state::{
    self, c_str, int_array, invalid, new_executor, required, tensor, tensor_list, SimErr,
    SimResult, SimTensor,
};
use crate::acl::ffi::*;
use crate::reference::incre::{
    self as ifa, Antiquant, IfaLayout, IfaMask, IfaPse, IncreFlashAttentionArgs, KvInput,
    PagedLayout,
};
use crate::reference::prompt::{self as pfa, PfaLayout, PromptFlashAttentionArgs, PseShift};
use crate::reference::scatter::{
    check_compressed_scatter, check_scatter, scatter_pa_kv_cache, scatter_pa_kv_cache_compressed,
    CacheMode, CompressMode, CompressedScatterArgs, ScatterArgs as RefScatterArgs, ScatterMode,
};
use crate::varlen::{
    lengths_from_cumulative, AttenMask, DenseMask, Pse, PseType, SoftmaxLayout, SparseMode,
    VarlenAttrs, VarlenDims, VarlenProblem,
};
use crate::Element;

/// The workspace every simulated op asks for, so the two-stage contract (allocate at least
/// this much, pass it back) is exercised.
const SIM_WORKSPACE: u64 = 4096;

type T = *const AclTensor;
type IA = *const AclIntArray;
type TL = *const AclTensorList;

// ---- element decoding --------------------------------------------------------------------

/// An element moved as little-endian bytes.
trait Wire: Element {
    const DTYPE: DataType;
    fn get(b: &[u8]) -> Self;
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! wire {
    ($t:ty, $d:expr, $n:expr) => {
        impl Wire for $t {
            const DTYPE: DataType = $d;
            fn get(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("element size"))
            }
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}
wire!(f32, DataType::Float, 4);
wire!(f16, DataType::Float16, 2);
wire!(bf16, DataType::Bf16, 2);
wire!(i8, DataType::Int8, 1);

fn typed<W: Wire>(t: &SimTensor, name: &str) -> SimResult<Vec<W>> {
    if t.dtype != W::DTYPE {
        return invalid(format!(
            "{name}: expected {:?}, got {:?}",
            W::DTYPE,
            t.dtype
        ));
    }
    Ok(t.read(name)?
        .chunks_exact(W::DTYPE.size())
        .map(W::get)
        .collect())
}

fn encode<W: Wire>(v: &[W]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * W::DTYPE.size());
    v.iter().for_each(|x| x.put(&mut out));
    out
}

/// A float tensor (FLOAT, FLOAT16, BFLOAT16) widened to f32 (exact).
fn floats(t: &SimTensor, name: &str) -> SimResult<Vec<f32>> {
    Ok(match t.dtype {
        DataType::Float => typed::<f32>(t, name)?,
        DataType::Float16 => typed::<f16>(t, name)?.into_iter().map(f32::from).collect(),
        DataType::Bf16 => typed::<bf16>(t, name)?.into_iter().map(f32::from).collect(),
        other => {
            return invalid(format!(
                "{name}: dtype must be FLOAT16, BFLOAT16 or FLOAT, got {other:?}"
            ))
        }
    })
}

/// Float or INT8 values widened to f32 (exact).
fn floats_or_i8(t: &SimTensor, name: &str) -> SimResult<Vec<f32>> {
    if t.dtype == DataType::Int8 {
        Ok(typed::<i8>(t, name)?.into_iter().map(f32::from).collect())
    } else {
        floats(t, name)
    }
}

/// An INT32 / INT64 tensor widened to i64.
fn ints(t: &SimTensor, name: &str) -> SimResult<Vec<i64>> {
    let b = t.read(name)?;
    Ok(match t.dtype {
        DataType::Int32 => b
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().expect("4")) as i64)
            .collect(),
        DataType::Int64 => b
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8")))
            .collect(),
        other => {
            return invalid(format!(
                "{name}: dtype must be INT32 or INT64, got {other:?}"
            ))
        }
    })
}

/// A mask (BOOL, UINT8, INT8) as 0/1 bytes.
fn mask01(t: &SimTensor, name: &str) -> SimResult<Vec<u8>> {
    match t.dtype {
        DataType::Bool | DataType::Uint8 | DataType::Int8 => {
            Ok(t.read(name)?.into_iter().map(|x| (x != 0) as u8).collect())
        }
        other => invalid(format!(
            "{name}: dtype must be BOOL, UINT8 or INT8, got {other:?}"
        )),
    }
}

/// f64 results rounded once to a float output dtype.
fn encode_f64(v: &[f64], dtype: DataType, name: &str) -> SimResult<Vec<u8>> {
    Ok(match dtype {
        DataType::Float => encode(&v.iter().map(|&x| f32::from_f64(x)).collect::<Vec<_>>()),
        DataType::Float16 => encode(&v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>()),
        DataType::Bf16 => encode(&v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>()),
        other => {
            return invalid(format!(
                "{name}: dtype must be FLOAT16, BFLOAT16 or FLOAT, got {other:?}"
            ))
        }
    })
}

fn check_dims(t: &SimTensor, name: &str, want: &[usize]) -> SimResult<()> {
    if t.dims != want {
        return invalid(format!("{name}: shape must be {want:?}, got {:?}", t.dims));
    }
    Ok(())
}

fn check_rank(t: &SimTensor, name: &str, rank: usize) -> SimResult<()> {
    if t.dims.len() != rank {
        return invalid(format!(
            "{name}: must be rank {rank}, got shape {:?}",
            t.dims
        ));
    }
    Ok(())
}

fn unsupported<R>(what: &str) -> SimResult<R> {
    invalid(format!("unsupported in the simulation: {what}"))
}

// ---- varlen ------------------------------------------------------------------------------

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
) -> SimResult<Varlen> {
    let q = required(query, "query")?;
    let k = required(key, "key")?;
    let v = required(value, "value")?;
    if tensor(padding_mask, "paddingMask")?.is_some() {
        return unsupported("paddingMask (reserved by CANN)");
    }
    let layout =
        layout.ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "inputLayout is null".into()))?;
    if layout != "TND" {
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
        let lens = lengths_from_cumulative(&c)
            .filter(|l| !l.is_empty())
            .ok_or_else(|| {
                SimErr(
                    ACLNN_ERR_PARAM_INVALID,
                    format!("{name}: must be cumulative and non-decreasing, got {c:?}"),
                )
            })?;
        if c.last().copied() != Some(total as i64) {
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
    attrs.sparse_mode = SparseMode::from_i64(sparse_mode).ok_or_else(|| {
        SimErr(
            ACLNN_ERR_PARAM_INVALID,
            format!("sparseMode {sparse_mode} is not 0-4 or 6-8"),
        )
    })?;
    attrs.pse_type = PseType::from_i64(pse_type).ok_or_else(|| {
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
            let (mut rows, mut cols) = (0, 0);
            let ok = match m.dims.as_slice() {
                [r, c] => {
                    (rows, cols) = (*r, *c);
                    true
                }
                [b, h, r, c] => {
                    (rows, cols) = (*r, *c);
                    (*b == 1 || *b == dims.batch()) && (*h == 1 || *h == n)
                }
                _ => false,
            };
            let max_q = dims.seq_q.iter().copied().max().unwrap_or(0);
            let max_kv = dims.seq_kv.iter().copied().max().unwrap_or(0);
            if !ok || rows < max_q || cols < max_kv {
                return invalid(format!("attenMask: shape {:?} must be [Sq, Skv] or [B|1, N|1, Sq, Skv] covering the longest sequence", m.dims));
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
        match self.x.q.dtype {
            DataType::Float16 => self.run_typed::<f16>(),
            DataType::Bf16 => self.run_typed::<bf16>(),
            _ => self.run_typed::<f32>(),
        }
    }

    fn run_typed<W: Wire>(&self) -> SimResult<()> {
        let data = self.x.data()?;
        let p = self.x.problem(&data);
        let (q, k, v) = (
            typed::<W>(&self.x.q, "query")?,
            typed::<W>(&self.x.k, "key")?,
            typed::<W>(&self.x.v, "value")?,
        );
        let o = crate::cpu::varlen_fwd(&p, &q, &k, &v);
        self.out.write("attentionOut", &encode(&o.attention_out))?;
        self.softmax_max
            .write("softmaxMax", &encode(&o.softmax_max))?;
        self.softmax_sum
            .write("softmaxSum", &encode(&o.softmax_sum))
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn varlen_fwd_v5_ws(
    query: T,
    query_rope: T,
    key: T,
    key_rope: T,
    value: T,
    real_shift: T,
    drop_mask: T,
    padding_mask: T,
    atten_mask: T,
    sink: T,
    prefix: IA,
    actual_seq_q_len: IA,
    actual_seq_kv_len: IA,
    q_start_idx: IA,
    kv_start_idx: IA,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    pse_type: i64,
    softmax_out_layout: *mut c_char,
    softmax_max_out: T,
    softmax_sum_out: T,
    _softmax_out_out: T,
    attention_out_out: T,
    workspace_size: *mut u64,
    executor: *mut *mut AclOpExecutor,
) -> AclStatus {
    const OP: &str = "aclnnFlashAttentionVarLenScoreV5";
    state::guard(|| {
        if !query_rope.is_null() || !key_rope.is_null() {
            return unsupported("queryRope / keyRope");
        }
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let (layout, sm_layout) = unsafe {
            (
                c_str(input_layout, "inputLayout")?,
                c_str(softmax_out_layout, "softmaxOutLayout")?,
            )
        };
        let x = decode_varlen(
            query,
            key,
            value,
            real_shift,
            drop_mask,
            padding_mask,
            atten_mask,
            sink,
            prefix,
            actual_seq_q_len,
            actual_seq_kv_len,
            q_start_idx,
            kv_start_idx,
            scale_value,
            keep_prob,
            pre_tokens,
            next_tokens,
            head_num,
            layout,
            inner_precise,
            sparse_mode,
            pse_type,
            sm_layout,
        )?;
        let call = VarlenFwdCall {
            x,
            softmax_max: required(softmax_max_out, "softmaxMaxOut")?,
            softmax_sum: required(softmax_sum_out, "softmaxSumOut")?,
            out: required(attention_out_out, "attentionOutOut")?,
        };
        call.check()?;
        // SAFETY: the out-pointers come from the caller per the prototype.
        unsafe {
            new_executor(
                OP,
                SIM_WORKSPACE,
                Box::new(move || call.run()),
                workspace_size,
                executor,
            )
        }
    })
}

pub(super) unsafe extern "C" fn varlen_fwd_v5_launch(
    ws: *mut c_void,
    size: u64,
    ex: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    state::launch("aclnnFlashAttentionVarLenScoreV5", ws, size, ex, stream)
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn varlen_fwd_base_ws(
    query: T,
    key: T,
    value: T,
    real_shift: T,
    drop_mask: T,
    padding_mask: T,
    atten_mask: T,
    prefix: IA,
    actual_seq_q_len: IA,
    actual_seq_kv_len: IA,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    softmax_max_out: T,
    softmax_sum_out: T,
    _softmax_out_out: T,
    attention_out_out: T,
    workspace_size: *mut u64,
    executor: *mut *mut AclOpExecutor,
) -> AclStatus {
    const OP: &str = "aclnnFlashAttentionVarLenScore";
    state::guard(|| {
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let layout = unsafe { c_str(input_layout, "inputLayout")? };
        // The base API has no sink, start indices or softmax layout; pse is pseType 1.
        let x = decode_varlen(
            query,
            key,
            value,
            real_shift,
            drop_mask,
            padding_mask,
            atten_mask,
            std::ptr::null(),
            prefix,
            actual_seq_q_len,
            actual_seq_kv_len,
            std::ptr::null(),
            std::ptr::null(),
            scale_value,
            keep_prob,
            pre_tokens,
            next_tokens,
            head_num,
            layout,
            inner_precise,
            sparse_mode,
            1,
            None,
        )?;
        let call = VarlenFwdCall {
            x,
            softmax_max: required(softmax_max_out, "softmaxMaxOut")?,
            softmax_sum: required(softmax_sum_out, "softmaxSumOut")?,
            out: required(attention_out_out, "attentionOutOut")?,
        };
        call.check()?;
        // SAFETY: the out-pointers come from the caller per the prototype.
        unsafe {
            new_executor(
                OP,
                SIM_WORKSPACE,
                Box::new(move || call.run()),
                workspace_size,
                executor,
            )
        }
    })
}

pub(super) unsafe extern "C" fn varlen_fwd_base_launch(
    ws: *mut c_void,
    size: u64,
    ex: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    state::launch("aclnnFlashAttentionVarLenScore", ws, size, ex, stream)
}

struct VarlenGradCall {
    x: Varlen,
    dy: SimTensor,
    softmax_max: SimTensor,
    softmax_sum: SimTensor,
    attention_in: SimTensor,
    dq: SimTensor,
    dk: SimTensor,
    dv: SimTensor,
    dsink: Option<SimTensor>,
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
        match self.x.q.dtype {
            DataType::Float16 => self.run_typed::<f16>(),
            DataType::Bf16 => self.run_typed::<bf16>(),
            _ => self.run_typed::<f32>(),
        }
    }

    fn run_typed<W: Wire>(&self) -> SimResult<()> {
        let data = self.x.data()?;
        let p = self.x.problem(&data);
        let g = crate::cpu::varlen_bwd(
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
            t.write("dsinkOut", &encode(ds))?;
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn varlen_grad_v5_ws(
    query: T,
    query_rope: T,
    key: T,
    key_rope: T,
    value: T,
    dy: T,
    pse_shift: T,
    drop_mask: T,
    padding_mask: T,
    atten_mask: T,
    softmax_max: T,
    softmax_sum: T,
    softmax_in: T,
    attention_in: T,
    sink_in: T,
    prefix: IA,
    actual_seq_q_len: IA,
    actual_seq_kv_len: IA,
    q_start_idx: IA,
    kv_start_idx: IA,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    pse_type: i64,
    softmax_in_layout: *mut c_char,
    dq_out: T,
    _dq_rope_out: T,
    dk_out: T,
    _dk_rope_out: T,
    dv_out: T,
    _dpse_out: T,
    dsink_out: T,
    workspace_size: *mut u64,
    executor: *mut *mut AclOpExecutor,
) -> AclStatus {
    const OP: &str = "aclnnFlashAttentionUnpaddingScoreGradV5";
    state::guard(|| {
        if !query_rope.is_null() || !key_rope.is_null() {
            return unsupported("queryRope / keyRope");
        }
        if !softmax_in.is_null() {
            return unsupported("softmaxIn (reserved by CANN)");
        }
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let (layout, sm_layout) = unsafe {
            (
                c_str(input_layout, "inputLayout")?,
                c_str(softmax_in_layout, "softmaxInLayout")?,
            )
        };
        let x = decode_varlen(
            query,
            key,
            value,
            pse_shift,
            drop_mask,
            padding_mask,
            atten_mask,
            sink_in,
            prefix,
            actual_seq_q_len,
            actual_seq_kv_len,
            q_start_idx,
            kv_start_idx,
            scale_value,
            keep_prob,
            pre_tokens,
            next_tokens,
            head_num,
            layout,
            inner_precise,
            sparse_mode,
            pse_type,
            sm_layout,
        )?;
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
            dsink: tensor(dsink_out, "dsinkOut")?,
            x,
        };
        call.check()?;
        // SAFETY: the out-pointers come from the caller per the prototype.
        unsafe {
            new_executor(
                OP,
                SIM_WORKSPACE,
                Box::new(move || call.run()),
                workspace_size,
                executor,
            )
        }
    })
}

pub(super) unsafe extern "C" fn varlen_grad_v5_launch(
    ws: *mut c_void,
    size: u64,
    ex: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    state::launch(
        "aclnnFlashAttentionUnpaddingScoreGradV5",
        ws,
        size,
        ex,
        stream,
    )
}

// ---- prompt attention --------------------------------------------------------------------

struct PromptCall {
    q: SimTensor,
    k: SimTensor,
    v: SimTensor,
    pse: Option<SimTensor>,
    mask: Option<SimTensor>,
    asl: Option<Vec<i64>>,
    asl_kv: Option<Vec<i64>>,
    quant_scale2: Option<SimTensor>,
    quant_offset2: Option<SimTensor>,
    layout: PfaLayout,
    batch: usize,
    q_seq: usize,
    kv_seq: usize,
    n: usize,
    nkv: usize,
    d: usize,
    dv: usize,
    scale: f64,
    pre: i64,
    next: i64,
    sparse: i64,
    inner_precise: i64,
    out: SimTensor,
}

impl PromptCall {
    fn run(&self) -> SimResult<()> {
        let (q, k, v) = (
            floats(&self.q, "query")?,
            floats(&self.k, "key")?,
            floats(&self.v, "value")?,
        );
        let mut a = PromptFlashAttentionArgs::new(
            &q[..],
            &k[..],
            &v[..],
            self.layout,
            self.batch,
            self.q_seq,
            self.kv_seq,
            self.n,
            self.d,
            self.scale,
        );
        a.head_dim_v = self.dv;
        a.num_key_value_heads = self.nkv;
        a.pre_tokens = self.pre;
        a.next_tokens = self.next;
        a.sparse_mode =
            pfa::SparseMode::from_i64(self.sparse).unwrap_or(pfa::SparseMode::DefaultMask);
        a.inner_precise = self.inner_precise;
        a.actual_seq_lengths = self.asl.as_deref();
        a.actual_seq_lengths_kv = self.asl_kv.as_deref();
        let mask = match &self.mask {
            Some(m) if !(2..=4).contains(&self.sparse) => {
                Some((mask01(m, "attenMask")?, m.dims.clone()))
            }
            _ => None,
        };
        a.atten_mask = match (&self.mask, &mask) {
            (None, _) => None,
            // Modes 2-4 never read the mask's contents.
            (Some(_), None) => Some(pfa::AttenMask {
                data: &[],
                batched: false,
                rows: 0,
                cols: 0,
            }),
            (Some(_), Some((data, shape))) => {
                let (mb, rows, cols) = match *shape.as_slice() {
                    [r, c] => (1, r, c),
                    [b, r, c] | [b, _, r, c] => (b, r, c),
                    _ => unreachable!("checked in the first stage"),
                };
                Some(pfa::AttenMask {
                    data,
                    batched: mb != 1,
                    rows,
                    cols,
                })
            }
        };
        let pse = self
            .pse
            .as_ref()
            .map(|p| floats(p, "pseShift"))
            .transpose()?;
        if let (Some(data), Some(p)) = (&pse, &self.pse) {
            a.pse_shift = Some(PseShift {
                data,
                batched: p.dims[0] != 1,
                rows: p.dims[2],
                cols: p.dims[3],
            });
        }
        let bytes = match &self.quant_scale2 {
            Some(s) => {
                let scale = floats(s, "quantScale2")?;
                let offset = self
                    .quant_offset2
                    .as_ref()
                    .map(|o| floats(o, "quantOffset2"))
                    .transpose()?;
                let pq = pfa::PostQuant {
                    scale: &scale,
                    offset: offset.as_deref(),
                };
                encode(&pfa::prompt_flash_attention_int8(&a, &pq))
            }
            None => encode_f64(
                &pfa::prompt_flash_attention(&a),
                self.out.dtype,
                "attentionOut",
            )?,
        };
        self.out.write("attentionOut", &bytes)
    }
}

fn parse_pfa_layout(s: &str) -> SimResult<PfaLayout> {
    Ok(match s {
        "BSH" => PfaLayout::Bsh,
        "BSND" => PfaLayout::Bsnd,
        "BNSD" => PfaLayout::Bnsd,
        "BNSD_BSND" => PfaLayout::BnsdBsnd,
        "TND" => PfaLayout::Tnd,
        other => {
            return invalid(format!(
                "inputLayout \"{other}\" is not BSH, BSND, BNSD, BNSD_BSND or TND"
            ))
        }
    })
}

#[allow(clippy::too_many_arguments)]
fn decode_prompt(
    query: T,
    key: T,
    value: T,
    pse_shift: T,
    atten_mask: T,
    asl: IA,
    asl_kv: IA,
    quant_scale2: T,
    quant_offset2: T,
    num_heads: i64,
    scale: f64,
    pre: i64,
    next: i64,
    layout: Option<String>,
    num_kv_heads: i64,
    sparse: i64,
    inner_precise: i64,
    attention_out: T,
) -> SimResult<PromptCall> {
    let q = required(query, "query")?;
    let k = required(key, "key")?;
    let v = required(value, "value")?;
    let out = required(attention_out, "attentionOut")?;
    let layout = parse_pfa_layout(
        &layout.ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "inputLayout is null".into()))?,
    )?;
    for (t, name) in [(&q, "query"), (&k, "key"), (&v, "value")] {
        if !matches!(
            t.dtype,
            DataType::Float | DataType::Float16 | DataType::Bf16
        ) {
            return invalid(format!(
                "{name}: dtype must be FLOAT16, BFLOAT16 or FLOAT, got {:?}",
                t.dtype
            ));
        }
        if t.dtype != q.dtype {
            return invalid(format!("{name}: dtype must equal the query's"));
        }
    }
    if num_heads <= 0 || num_kv_heads < 0 {
        return invalid(format!(
            "numHeads {num_heads} / numKeyValueHeads {num_kv_heads} out of range"
        ));
    }
    let n = num_heads as usize;
    let nkv = if num_kv_heads == 0 {
        n
    } else {
        num_kv_heads as usize
    };
    if !n.is_multiple_of(nkv) {
        return invalid(format!(
            "numHeads {n} must be a multiple of numKeyValueHeads {nkv}"
        ));
    }
    let rank = match layout {
        PfaLayout::Bsh | PfaLayout::Tnd => 3,
        _ => 4,
    };
    let split = |t: &SimTensor, heads: usize, name: &str| -> SimResult<[usize; 4]> {
        check_rank(t, name, rank)?;
        let s = &t.dims;
        Ok(match layout {
            PfaLayout::Bsh => {
                if s[2] == 0 || !s[2].is_multiple_of(heads) {
                    return invalid(format!(
                        "{name}: H = {} is not a positive multiple of {heads}",
                        s[2]
                    ));
                }
                [s[0], s[1], heads, s[2] / heads]
            }
            PfaLayout::Bsnd => [s[0], s[1], s[2], s[3]],
            PfaLayout::Bnsd | PfaLayout::BnsdBsnd => [s[0], s[2], s[1], s[3]],
            PfaLayout::Tnd => [1, s[0], s[1], s[2]],
        })
    };
    let [qb, qs, qn, d] = split(&q, n, "query")?;
    let [kb, ks, kn, dk] = split(&k, nkv, "key")?;
    let [vb, vs, vn, dv] = split(&v, nkv, "value")?;
    let tnd = layout == PfaLayout::Tnd;
    if qn != n
        || kn != nkv
        || dk != d
        || [vb, vs, vn] != [kb, ks, kn]
        || (!tnd && (kb != qb || dv != d))
    {
        return invalid(format!(
            "query {:?}, key {:?}, value {:?} do not agree with numHeads {n}, numKeyValueHeads {nkv} and inputLayout {layout:?}",
            q.dims, k.dims, v.dims
        ));
    }
    let asl = int_array(asl, "actualSeqLengths")?;
    let asl_kv = int_array(asl_kv, "actualSeqLengthsKv")?;
    let batch = if tnd {
        match (&asl, &asl_kv) {
            (Some(a), Some(b)) if a.len() == b.len() && !a.is_empty() => a.len(),
            _ => return Err(SimErr(ACLNN_ERR_PARAM_NULLPTR, "actualSeqLengths and actualSeqLengthsKv are required (cumulative, same length) with TND".into())),
        }
    } else {
        for (name, l, full) in [
            ("actualSeqLengths", &asl, qs),
            ("actualSeqLengthsKv", &asl_kv, ks),
        ] {
            if let Some(l) = l {
                let used = if l.len() == 1 {
                    &l[..]
                } else {
                    &l[..qb.min(l.len())]
                };
                if !(l.len() == 1 || l.len() >= qb)
                    || used.iter().any(|&x| x < 0 || x > full as i64)
                {
                    return invalid(format!(
                        "{name}: {l:?} must have 1 or B entries in [0, {full}]"
                    ));
                }
            }
        }
        qb
    };
    if tnd {
        for (name, l, total) in [
            ("actualSeqLengths", &asl, qs),
            ("actualSeqLengthsKv", &asl_kv, ks),
        ] {
            let l = l.as_ref().expect("checked");
            if lengths_from_cumulative(l).is_none() || l.last().is_some_and(|&x| x as usize > total)
            {
                return invalid(format!(
                    "{name}: {l:?} must be cumulative and end at most at T = {total}"
                ));
            }
        }
    }
    if !(0..=4).contains(&sparse) {
        return invalid(format!(
            "sparseMode {sparse}: prompt attention supports 0-4"
        ));
    }
    let mask = tensor(atten_mask, "attenMask")?;
    if let Some(m) = &mask {
        if !matches!(m.dtype, DataType::Bool | DataType::Int8 | DataType::Uint8) {
            return invalid(format!(
                "attenMask: dtype must be BOOL, INT8 or UINT8, got {:?}",
                m.dtype
            ));
        }
        if !(2..=4).contains(&sparse) {
            let ok = match m.dims.as_slice() {
                [r, c] => *r >= qs && *c >= ks,
                [b, r, c] | [b, 1, r, c] => (*b == 1 || *b == batch) && *r >= qs && *c >= ks,
                _ => false,
            };
            if !ok {
                return invalid(format!("attenMask: shape {:?} must be (Sq, Skv), (B|1, Sq, Skv) or (B|1, 1, Sq, Skv) covering Sq = {qs}, Skv = {ks}", m.dims));
            }
        }
    }
    let pse = tensor(pse_shift, "pseShift")?;
    if let Some(p) = &pse {
        let ok = p.dims.len() == 4
            && (p.dims[0] == 1 || p.dims[0] == batch)
            && p.dims[1] == n
            && p.dims[2] >= qs
            && p.dims[3] >= ks;
        if !ok {
            return invalid(format!(
                "pseShift: shape {:?} must be (B|1, N, >=Sq, >=Skv)",
                p.dims
            ));
        }
    }
    let quant_scale2 = tensor(quant_scale2, "quantScale2")?;
    let quant_offset2 = tensor(quant_offset2, "quantOffset2")?;
    if quant_offset2.is_some() && quant_scale2.is_none() {
        return invalid("quantOffset2 needs quantScale2");
    }
    let out_dims = match layout {
        PfaLayout::Bsh => vec![batch, qs, n * dv],
        PfaLayout::Bsnd | PfaLayout::BnsdBsnd => vec![batch, qs, n, dv],
        PfaLayout::Bnsd => vec![batch, n, qs, dv],
        PfaLayout::Tnd => vec![qs, n, dv],
    };
    check_dims(&out, "attentionOut", &out_dims)?;
    let want_dt = if quant_scale2.is_some() {
        DataType::Int8
    } else {
        q.dtype
    };
    if out.dtype != want_dt {
        return invalid(format!(
            "attentionOut: dtype must be {want_dt:?}, got {:?}",
            out.dtype
        ));
    }
    Ok(PromptCall {
        q,
        k,
        v,
        pse,
        mask,
        asl,
        asl_kv,
        quant_scale2,
        quant_offset2,
        layout,
        batch,
        q_seq: qs,
        kv_seq: ks,
        n,
        nkv,
        d,
        dv,
        scale,
        pre,
        next,
        sparse,
        inner_precise,
        out,
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn pfa_v3_ws(
    query: T,
    key: T,
    value: T,
    pse_shift: T,
    atten_mask: T,
    actual_seq_lengths: IA,
    actual_seq_lengths_kv: IA,
    deq_scale1: T,
    quant_scale1: T,
    deq_scale2: T,
    quant_scale2: T,
    quant_offset2: T,
    num_heads: i64,
    scale_value: f64,
    pre_tokens: i64,
    next_tokens: i64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    sparse_mode: i64,
    inner_precise: i64,
    attention_out: T,
    workspace_size: *mut u64,
    executor: *mut *mut AclOpExecutor,
) -> AclStatus {
    const OP: &str = "aclnnPromptFlashAttentionV3";
    state::guard(|| {
        if !deq_scale1.is_null() || !quant_scale1.is_null() || !deq_scale2.is_null() {
            return unsupported("int8 query (deqScale1 / quantScale1 / deqScale2)");
        }
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let layout = unsafe { c_str(input_layout, "inputLayout")? };
        let call = decode_prompt(
            query,
            key,
            value,
            pse_shift,
            atten_mask,
            actual_seq_lengths,
            actual_seq_lengths_kv,
            quant_scale2,
            quant_offset2,
            num_heads,
            scale_value,
            pre_tokens,
            next_tokens,
            layout,
            num_key_value_heads,
            sparse_mode,
            inner_precise,
            attention_out,
        )?;
        // SAFETY: the out-pointers come from the caller per the prototype.
        unsafe {
            new_executor(
                OP,
                SIM_WORKSPACE,
                Box::new(move || call.run()),
                workspace_size,
                executor,
            )
        }
    })
}

pub(super) unsafe extern "C" fn pfa_v3_launch(
    ws: *mut c_void,
    size: u64,
    ex: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    state::launch("aclnnPromptFlashAttentionV3", ws, size, ex, stream)
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn pfa_v1_ws(
    query: T,
    key: T,
    value: T,
    pse_shift: T,
    atten_mask: T,
    actual_seq_lengths: IA,
    num_heads: i64,
    scale_value: f64,
    pre_tokens: i64,
    next_tokens: i64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    attention_out: T,
    workspace_size: *mut u64,
    executor: *mut *mut AclOpExecutor,
) -> AclStatus {
    const OP: &str = "aclnnPromptFlashAttention";
    state::guard(|| {
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let layout = unsafe { c_str(input_layout, "inputLayout")? };
        // V1: no KV lengths, no quantisation, sparse mode 0, innerPrecise 1.
        let call = decode_prompt(
            query,
            key,
            value,
            pse_shift,
            atten_mask,
            actual_seq_lengths,
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null(),
            num_heads,
            scale_value,
            pre_tokens,
            next_tokens,
            layout,
            num_key_value_heads,
            0,
            1,
            attention_out,
        )?;
        if call.layout == PfaLayout::Tnd {
            return invalid("inputLayout TND needs aclnnPromptFlashAttentionV3");
        }
        // SAFETY: the out-pointers come from the caller per the prototype.
        unsafe {
            new_executor(
                OP,
                SIM_WORKSPACE,
                Box::new(move || call.run()),
                workspace_size,
                executor,
            )
        }
    })
}

pub(super) unsafe extern "C" fn pfa_v1_launch(
    ws: *mut c_void,
    size: u64,
    ex: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    state::launch("aclnnPromptFlashAttention", ws, size, ex, stream)
}

// ---- incremental attention ---------------------------------------------------------------

enum IncreKv {
    Contiguous {
        kv_seq: usize,
    },
    List,
    Paged {
        layout: PagedLayout,
        max_blocks: usize,
        block_size: usize,
        table: SimTensor,
    },
}

struct IncreCall {
    q: SimTensor,
    keys: Vec<SimTensor>,
    values: Vec<SimTensor>,
    kv: IncreKv,
    pse: Option<SimTensor>,
    mask: Option<SimTensor>,
    asl: Option<Vec<i64>>,
    quant_scale2: Option<SimTensor>,
    quant_offset2: Option<SimTensor>,
    antiquant_scale: Option<SimTensor>,
    antiquant_offset: Option<SimTensor>,
    kv_padding: Option<i64>,
    layout: IfaLayout,
    batch: usize,
    n: usize,
    nkv: usize,
    d: usize,
    scale: f64,
    inner_precise: i64,
    out: SimTensor,
}

impl IncreCall {
    fn run(&self) -> SimResult<()> {
        let q = floats(&self.q, "query")?;
        let keys = self
            .keys
            .iter()
            .map(|t| floats_or_i8(t, "key"))
            .collect::<SimResult<Vec<_>>>()?;
        let values = self
            .values
            .iter()
            .map(|t| floats_or_i8(t, "value"))
            .collect::<SimResult<Vec<_>>>()?;
        let table: Vec<i32>;
        let (kr, vr): (Vec<&[f32]>, Vec<&[f32]>) = (
            keys.iter().map(Vec::as_slice).collect(),
            values.iter().map(Vec::as_slice).collect(),
        );
        let kv = match &self.kv {
            IncreKv::Contiguous { kv_seq } => KvInput::Contiguous {
                key: &keys[0],
                value: &values[0],
                kv_seq: *kv_seq,
            },
            IncreKv::List => KvInput::TensorList {
                key: &kr,
                value: &vr,
            },
            IncreKv::Paged {
                layout,
                max_blocks,
                block_size,
                table: t,
            } => {
                table = ints(t, "blocktable")?
                    .into_iter()
                    .map(|x| x as i32)
                    .collect();
                KvInput::Paged {
                    key_cache: &keys[0],
                    value_cache: &values[0],
                    layout: *layout,
                    block_table: &table,
                    max_blocks_per_seq: *max_blocks,
                    block_size: *block_size,
                }
            }
        };
        let mut a = IncreFlashAttentionArgs::new(
            &q[..],
            kv,
            self.layout,
            self.batch,
            self.n,
            self.d,
            self.scale,
        );
        a.num_key_value_heads = self.nkv;
        a.inner_precise = self.inner_precise;
        a.actual_seq_lengths = self.asl.as_deref();
        a.kv_padding_size = self.kv_padding;
        let mask = self
            .mask
            .as_ref()
            .map(|m| mask01(m, "attenMask"))
            .transpose()?;
        if let (Some(data), Some(m)) = (&mask, &self.mask) {
            a.atten_mask = Some(IfaMask {
                data,
                cols: *m.dims.last().unwrap_or(&0),
            });
        }
        let pse = self
            .pse
            .as_ref()
            .map(|p| floats(p, "pseShift"))
            .transpose()?;
        if let (Some(data), Some(p)) = (&pse, &self.pse) {
            a.pse_shift = Some(IfaPse {
                data,
                batched: p.dims[0] != 1,
                cols: p.dims[3],
            });
        }
        let aq_scale = self
            .antiquant_scale
            .as_ref()
            .map(|s| floats(s, "antiquantScale"))
            .transpose()?;
        let aq_offset = self
            .antiquant_offset
            .as_ref()
            .map(|s| floats(s, "antiquantOffset"))
            .transpose()?;
        if let (Some(scale), Some(t)) = (&aq_scale, &self.antiquant_scale) {
            a.antiquant = Some(Antiquant {
                scale,
                offset: aq_offset.as_deref(),
                per_channel: t.dims.len() > 1,
            });
        }
        let bytes = match &self.quant_scale2 {
            Some(s) => {
                let scale = floats(s, "quantScale2")?;
                let offset = self
                    .quant_offset2
                    .as_ref()
                    .map(|o| floats(o, "quantOffset2"))
                    .transpose()?;
                let pq = ifa::PostQuant {
                    scale: &scale,
                    offset: offset.as_deref(),
                };
                encode(&ifa::incre_flash_attention_int8(&a, &pq))
            }
            None => encode_f64(
                &ifa::incre_flash_attention(&a),
                self.out.dtype,
                "attentionOut",
            )?,
        };
        self.out.write("attentionOut", &bytes)
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn ifa_v4_ws(
    query: T,
    key: TL,
    value: TL,
    pse_shift: T,
    atten_mask: T,
    actual_seq_lengths: IA,
    dequant_scale1: T,
    quant_scale1: T,
    dequant_scale2: T,
    quant_scale2: T,
    quant_offset2: T,
    antiquant_scale: T,
    antiquant_offset: T,
    blocktable: T,
    kv_padding_size: T,
    num_heads: i64,
    scale_value: f64,
    input_layout: *mut c_char,
    num_key_value_heads: i64,
    block_size: i64,
    inner_precise: i64,
    attention_out: T,
    workspace_size: *mut u64,
    executor: *mut *mut AclOpExecutor,
) -> AclStatus {
    const OP: &str = "aclnnIncreFlashAttentionV4";
    state::guard(|| {
        if !dequant_scale1.is_null() || !quant_scale1.is_null() || !dequant_scale2.is_null() {
            return unsupported("int8 query (dequantScale1 / quantScale1 / dequantScale2)");
        }
        let q = required(query, "query")?;
        let keys = tensor_list(key, "key")?
            .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "key is null".into()))?;
        let values = tensor_list(value, "value")?
            .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "value is null".into()))?;
        let out = required(attention_out, "attentionOut")?;
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let layout = unsafe { c_str(input_layout, "inputLayout")? }
            .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "inputLayout is null".into()))?;
        let layout = match layout.as_str() {
            "BSH" => IfaLayout::Bsh,
            "BSND" => IfaLayout::Bsnd,
            "BNSD" => IfaLayout::Bnsd,
            other => return invalid(format!("inputLayout \"{other}\" is not BSH, BSND or BNSD")),
        };
        if !matches!(
            q.dtype,
            DataType::Float | DataType::Float16 | DataType::Bf16
        ) {
            return invalid(format!(
                "query: dtype must be FLOAT16, BFLOAT16 or FLOAT, got {:?}",
                q.dtype
            ));
        }
        if num_heads <= 0 || num_key_value_heads < 0 {
            return invalid("numHeads / numKeyValueHeads out of range");
        }
        let n = num_heads as usize;
        let nkv = if num_key_value_heads == 0 {
            n
        } else {
            num_key_value_heads as usize
        };
        if !n.is_multiple_of(nkv) {
            return invalid(format!(
                "numHeads {n} must be a multiple of numKeyValueHeads {nkv}"
            ));
        }
        let (batch, qn, d) = match (layout, q.dims.as_slice()) {
            (IfaLayout::Bsh, [b, 1, h]) if *h % n == 0 => (*b, n, *h / n),
            (IfaLayout::Bsnd, [b, 1, qn, d]) | (IfaLayout::Bnsd, [b, qn, 1, d]) => (*b, *qn, *d),
            _ => {
                return invalid(format!(
                    "query: shape {:?} is not a single-token {layout:?} query with numHeads {n}",
                    q.dims
                ))
            }
        };
        if qn != n || d == 0 || batch == 0 {
            return invalid(format!(
                "query: shape {:?} does not match numHeads {n}",
                q.dims
            ));
        }
        if keys.is_empty() || keys.len() != values.len() {
            return invalid("key, value: non-empty tensor lists of equal length");
        }
        let kdt = keys[0].dtype;
        if !(kdt == q.dtype || kdt == DataType::Int8)
            || keys.iter().chain(&values).any(|t| t.dtype != kdt)
        {
            return invalid("key, value: dtype must be the query's or INT8, the same for all");
        }
        let antiquant_scale = tensor(antiquant_scale, "antiquantScale")?;
        let antiquant_offset = tensor(antiquant_offset, "antiquantOffset")?;
        if kdt == DataType::Int8 && antiquant_scale.is_none() {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "antiquantScale is null but key/value are INT8".into(),
            ));
        }
        let table = tensor(blocktable, "blocktable")?;
        let kv_row = |t: &SimTensor| -> Option<(usize, usize)> {
            // (batch, S) of a contiguous KV tensor in the layout, checking Nkv and D.
            match (layout, t.dims.as_slice()) {
                (IfaLayout::Bsh, [b, s, h]) if *h == nkv * d => Some((*b, *s)),
                (IfaLayout::Bsnd, [b, s, hn, hd]) if *hn == nkv && *hd == d => Some((*b, *s)),
                (IfaLayout::Bnsd, [b, hn, s, hd]) if *hn == nkv && *hd == d => Some((*b, *s)),
                _ => None,
            }
        };
        let kv = if let Some(table) = table {
            if keys.len() != 1 {
                return invalid("key: page attention takes one cache per list");
            }
            if table.dtype != DataType::Int32 || table.dims.len() != 2 || table.dims[0] != batch {
                return invalid(format!(
                    "blocktable: must be INT32 (B = {batch}, maxBlocks), got {:?} {:?}",
                    table.dtype, table.dims
                ));
            }
            if block_size <= 0 {
                return invalid(format!(
                    "blockSize {block_size} must be positive with page attention"
                ));
            }
            let bs = block_size as usize;
            let layout_p = match keys[0].dims.as_slice() {
                [_, s, h] if *s == bs && *h == nkv * d => PagedLayout::Bsh,
                [_, hn, s, hd] if *hn == nkv && *s == bs && *hd == d => PagedLayout::Bnsd,
                other => return invalid(format!("key: paged cache {other:?} is not (blocknum, blockSize, H) or (blocknum, Nkv, blockSize, D)")),
            };
            if values[0].dims != keys[0].dims {
                return invalid("value: paged cache must have the key cache's shape");
            }
            if actual_seq_lengths.is_null() {
                return Err(SimErr(
                    ACLNN_ERR_PARAM_NULLPTR,
                    "actualSeqLengths is required with page attention".into(),
                ));
            }
            IncreKv::Paged {
                layout: layout_p,
                max_blocks: table.dims[1],
                block_size: bs,
                table,
            }
        } else if keys.len() == 1 {
            match (kv_row(&keys[0]), kv_row(&values[0])) {
                (Some((kb, s)), Some(v)) if kb == batch && v == (kb, s) => {
                    IncreKv::Contiguous { kv_seq: s }
                }
                _ => {
                    return invalid(format!(
                        "key {:?} / value {:?} do not fit query {:?} in layout {layout:?}",
                        keys[0].dims, values[0].dims, q.dims
                    ))
                }
            }
        } else {
            if keys.len() != batch {
                return invalid(format!(
                    "key: a tensor list needs B = {batch} tensors, got {}",
                    keys.len()
                ));
            }
            for (kt, vt) in keys.iter().zip(&values) {
                match (kv_row(kt), kv_row(vt)) {
                    (Some((1, s)), Some((1, s2))) if s == s2 => {}
                    _ => return invalid(format!("key/value list entries must be batch-1 tensors in layout {layout:?}, got {:?} / {:?}", kt.dims, vt.dims)),
                }
            }
            IncreKv::List
        };
        let asl = int_array(actual_seq_lengths, "actualSeqLengths")?;
        let kv_padding = match tensor(kv_padding_size, "kvPaddingSize")? {
            None => None,
            Some(t) => {
                if t.dtype != DataType::Int64 || t.numel() != 1 {
                    return invalid(format!(
                        "kvPaddingSize: must be one INT64, got {:?} {:?}",
                        t.dtype, t.dims
                    ));
                }
                Some(t)
            }
        };
        let kv_padding = kv_padding
            .map(|t| ints(&t, "kvPaddingSize").map(|v| v[0]))
            .transpose()?;
        let mask = tensor(atten_mask, "attenMask")?;
        if let Some(m) = &mask {
            if !matches!(m.dtype, DataType::Bool | DataType::Int8 | DataType::Uint8)
                || m.dims.first() != Some(&batch)
            {
                return invalid(format!(
                    "attenMask: must be BOOL/INT8/UINT8 (B, …, S), got {:?} {:?}",
                    m.dtype, m.dims
                ));
            }
        }
        let pse = tensor(pse_shift, "pseShift")?;
        if let Some(p) = &pse {
            if p.dims.len() != 4
                || !(p.dims[0] == 1 || p.dims[0] == batch)
                || p.dims[1] != n
                || p.dims[2] != 1
            {
                return invalid(format!(
                    "pseShift: must be (B|1, N, 1, S), got {:?}",
                    p.dims
                ));
            }
        }
        let quant_scale2 = tensor(quant_scale2, "quantScale2")?;
        let quant_offset2 = tensor(quant_offset2, "quantOffset2")?;
        check_dims(&out, "attentionOut", &q.dims)?;
        let want_dt = if quant_scale2.is_some() {
            DataType::Int8
        } else {
            q.dtype
        };
        if out.dtype != want_dt {
            return invalid(format!(
                "attentionOut: dtype must be {want_dt:?}, got {:?}",
                out.dtype
            ));
        }
        let call = IncreCall {
            q,
            keys,
            values,
            kv,
            pse,
            mask,
            asl,
            quant_scale2,
            quant_offset2,
            antiquant_scale,
            antiquant_offset,
            kv_padding,
            layout,
            batch,
            n,
            nkv,
            d,
            scale: scale_value,
            inner_precise,
            out,
        };
        // SAFETY: the out-pointers come from the caller per the prototype.
        unsafe {
            new_executor(
                OP,
                SIM_WORKSPACE,
                Box::new(move || call.run()),
                workspace_size,
                executor,
            )
        }
    })
}

pub(super) unsafe extern "C" fn ifa_v4_launch(
    ws: *mut c_void,
    size: u64,
    ex: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    state::launch("aclnnIncreFlashAttentionV4", ws, size, ex, stream)
}

// ---- scatter -----------------------------------------------------------------------------

struct ScatterCall {
    key: SimTensor,
    key_cache: SimTensor,
    slots: SimTensor,
    value: Option<SimTensor>,
    value_cache: Option<SimTensor>,
    compress_lens: Option<SimTensor>,
    compress_seq_offset: Option<SimTensor>,
    seq_lens: Option<SimTensor>,
    cache_mode: CacheMode,
    compress: Option<CompressMode>,
    nct: Option<([usize; 2], [usize; 2])>,
    num_tokens: usize,
    num_heads: usize,
    dk: usize,
    dv: usize,
    num_blocks: usize,
    block_size: usize,
}

impl ScatterCall {
    fn run(&self) -> SimResult<()> {
        match self.key.dtype {
            DataType::Float => self.run_typed::<f32>(),
            DataType::Float16 => self.run_typed::<f16>(),
            DataType::Bf16 => self.run_typed::<bf16>(),
            _ => self.run_typed::<i8>(),
        }
    }

    fn run_typed<W: Wire>(&self) -> SimResult<()> {
        let key = typed::<W>(&self.key, "key")?;
        let value = self
            .value
            .as_ref()
            .map(|t| typed::<W>(t, "value"))
            .transpose()?;
        let mut kc = typed::<W>(&self.key_cache, "keyCacheRef")?;
        let mut vc = self
            .value_cache
            .as_ref()
            .map(|t| typed::<W>(t, "valueCacheRef"))
            .transpose()?;
        let slots = ints(&self.slots, "slotMapping")?;
        let vlen = vc.as_ref().map(Vec::len);
        let fail = |e: String| SimErr(ACLNN_ERR_PARAM_INVALID, format!("slotMapping: {e}"));
        if let Some(mode) = self.compress {
            let get =
                |t: &Option<SimTensor>, name: &str| t.as_ref().map(|t| ints(t, name)).transpose();
            let clens = get(&self.compress_lens, "compressLens")?.unwrap_or_default();
            let seq_lens = get(&self.seq_lens, "seqLens")?.unwrap_or_default();
            let offs = get(&self.compress_seq_offset, "compressSeqOffset")?;
            let a = CompressedScatterArgs {
                key: &key,
                value: value.as_deref(),
                slot_mapping: &slots,
                compress_lens: &clens,
                seq_lens: &seq_lens,
                compress_seq_offset: offs.as_deref(),
                num_heads: self.num_heads,
                k_head_size: self.dk,
                v_head_size: self.dv,
                num_blocks: self.num_blocks,
                block_size: self.block_size,
                mode,
            };
            check_compressed_scatter(&a, kc.len(), vlen).map_err(fail)?;
            scatter_pa_kv_cache_compressed(&a, &mut kc, vc.as_deref_mut());
        } else {
            let a = RefScatterArgs {
                key: &key,
                value: value.as_deref(),
                slot_mapping: &slots,
                num_tokens: self.num_tokens,
                num_heads: self.num_heads,
                k_head_size: self.dk,
                v_head_size: self.dv,
                num_blocks: self.num_blocks,
                block_size: self.block_size,
                cache_mode: self.cache_mode,
                scatter_mode: match self.nct {
                    Some((strides, offsets)) => ScatterMode::Nct { strides, offsets },
                    None => ScatterMode::None,
                },
            };
            check_scatter(&a, kc.len(), vlen).map_err(fail)?;
            scatter_pa_kv_cache(&a, &mut kc, vc.as_deref_mut());
        }
        self.key_cache.write("keyCacheRef", &encode(&kc))?;
        if let (Some(t), Some(vc)) = (&self.value_cache, &vc) {
            t.write("valueCacheRef", &encode(vc))?;
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn scatter_ws(
    key: T,
    key_cache_ref: T,
    slot_mapping: T,
    value: T,
    value_cache_ref: T,
    compress_lens: T,
    compress_seq_offset: T,
    seq_lens: T,
    cache_mode: *mut c_char,
    scatter_mode: *mut c_char,
    strides: IA,
    offsets: IA,
    workspace_size: *mut u64,
    executor: *mut *mut AclOpExecutor,
) -> AclStatus {
    const OP: &str = "aclnnScatterPaKvCache";
    state::guard(|| {
        let key = required(key, "key")?;
        let key_cache = required(key_cache_ref, "keyCacheRef")?;
        let slots = required(slot_mapping, "slotMapping")?;
        // Scenario 6: value and valueCache empty.
        let nonempty = |t: Option<SimTensor>| t.filter(|t| !t.dims.is_empty() && t.numel() > 0);
        let value = nonempty(tensor(value, "value")?);
        let value_cache = nonempty(tensor(value_cache_ref, "valueCacheRef")?);
        // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
        let (cm, sm) = unsafe {
            (
                c_str(cache_mode, "cacheMode")?,
                c_str(scatter_mode, "scatterMode")?,
            )
        };
        let cache_mode = match cm.as_deref().unwrap_or("Norm") {
            "" | "Norm" => CacheMode::Norm,
            "PA_NZ" => CacheMode::PaNz,
            other => return invalid(format!("cacheMode \"{other}\" is not Norm or PA_NZ")),
        };
        let (nct, compress) = match sm.as_deref().unwrap_or("None") {
            "" | "None" => (false, None),
            "Nct" => (true, None),
            "Alibi" => (false, Some(CompressMode::Alibi)),
            "Rope" => (false, Some(CompressMode::Rope)),
            "Omni" => (false, Some(CompressMode::Omni)),
            other => {
                return invalid(format!(
                    "scatterMode \"{other}\" is not None, Nct, Alibi, Rope or Omni"
                ))
            }
        };
        let kd = key.dtype;
        if !matches!(
            kd,
            DataType::Float | DataType::Float16 | DataType::Bf16 | DataType::Int8
        ) {
            return unsupported(&format!(
                "key dtype {kd:?} (the simulation moves FLOAT16, BFLOAT16, INT8 and FLOAT)"
            ));
        }
        if key_cache.dtype != kd || value.iter().chain(&value_cache).any(|t| t.dtype != kd) {
            return invalid("keyCacheRef, value, valueCacheRef: dtype must equal key's");
        }
        if value.is_some() != value_cache.is_some() {
            return invalid("value and valueCacheRef must both be given or both be empty");
        }
        if !matches!(slots.dtype, DataType::Int32 | DataType::Int64) || slots.dims.len() != 1 {
            return invalid(format!(
                "slotMapping: must be 1-D INT32 or INT64, got {:?} {:?}",
                slots.dtype, slots.dims
            ));
        }
        let want_format = if cache_mode == CacheMode::PaNz {
            Format::FractalNz
        } else {
            Format::Nd
        };
        for t in std::iter::once(&key_cache).chain(&value_cache) {
            if t.format != want_format {
                return invalid(format!(
                    "cache format must be {want_format:?} with cacheMode {cache_mode:?}, got {:?}",
                    t.format
                ));
            }
        }
        if key.dims.len() != 3 {
            return Err(SimErr(
                ACLNN_ERR_INNER_TILING_ERROR,
                format!("key: must be rank 3, got {:?}", key.dims),
            ));
        }
        if key_cache.dims.len() != 4 || value_cache.as_ref().is_some_and(|c| c.dims.len() != 4) {
            return Err(SimErr(
                ACLNN_ERR_INNER_TILING_ERROR,
                "caches must be rank 4".into(),
            ));
        }
        let kc = key_cache.dims.clone();
        let last = 32 / kd.size();
        let (n, dk) = (key.dims[1], key.dims[2]);
        let (num_blocks, block_size, cn, cdk) = match cache_mode {
            CacheMode::Norm if compress.is_some() => (kc[0], kc[1], n, kc[3]),
            CacheMode::Norm => (kc[0], kc[1], kc[2], kc[3]),
            _ => {
                if kc[3] != last || kc[1] * last != n * dk {
                    return invalid(format!(
                        "keyCacheRef: PA_NZ cache must be [nb, N·D/{last}, bs, {last}], got {kc:?}"
                    ));
                }
                (kc[0], kc[2], n, dk)
            }
        };
        if !nct && (cn != n || cdk != dk) {
            return invalid(format!(
                "keyCacheRef {kc:?} does not match key {:?}",
                key.dims
            ));
        }
        let dv = match (&value, &value_cache) {
            (Some(v), Some(vc)) => match cache_mode {
                CacheMode::Norm => vc.dims[3],
                _ => v.dims.get(2).copied().unwrap_or(0),
            },
            _ => 0,
        };
        let two = |p: IA, name: &str| -> SimResult<Option<[usize; 2]>> {
            match int_array(p, name)? {
                None => Ok(None),
                Some(v) if v.len() == 2 && v.iter().all(|&x| x >= 0) => {
                    Ok(Some([v[0] as usize, v[1] as usize]))
                }
                Some(v) => invalid(format!(
                    "{name}: must hold 2 non-negative values, got {v:?}"
                )),
            }
        };
        let nct = if nct {
            match (two(strides, "strides")?, two(offsets, "offsets")?) {
                (Some(s), Some(o)) => Some((s, o)),
                _ => {
                    return Err(SimErr(
                        ACLNN_ERR_PARAM_NULLPTR,
                        "strides and offsets are required with scatterMode Nct".into(),
                    ))
                }
            }
        } else {
            None
        };
        let call = ScatterCall {
            num_tokens: slots.dims[0],
            key,
            key_cache,
            slots,
            value,
            value_cache,
            compress_lens: tensor(compress_lens, "compressLens")?,
            compress_seq_offset: tensor(compress_seq_offset, "compressSeqOffset")?,
            seq_lens: tensor(seq_lens, "seqLens")?,
            cache_mode,
            compress,
            nct,
            num_heads: cn,
            dk: cdk,
            dv,
            num_blocks,
            block_size,
        };
        // SAFETY: the out-pointers come from the caller per the prototype.
        unsafe {
            new_executor(
                OP,
                SIM_WORKSPACE,
                Box::new(move || call.run()),
                workspace_size,
                executor,
            )
        }
    })
}

pub(super) unsafe extern "C" fn scatter_launch(
    ws: *mut c_void,
    size: u64,
    ex: *mut AclOpExecutor,
    stream: AclrtStream,
) -> AclStatus {
    state::launch("aclnnScatterPaKvCache", ws, size, ex, stream)
}
