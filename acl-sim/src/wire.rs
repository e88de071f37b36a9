//! Element decoding shared by the simulated attention ops: typed reads of a tensor's view
//! (FLOAT / FLOAT16 / BFLOAT16 / INT8, INT32 / INT64 indices, masks), encodings of results and
//! shape checks.

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::post_quant::PostQuant;
use burn_ascend_contract::Element;
use half::{bf16, f16};

use crate::state::{invalid, new_executor, SimResult, SimTensor};

/// The workspace every simulated op asks for, so the two-stage contract (allocate at least
/// this much, pass it back) is exercised.
pub(crate) const SIM_WORKSPACE: u64 = 4096;

/// A first stage's tail: records the executor of `op` that runs `job` at the second stage, with
/// [`SIM_WORKSPACE`] bytes of workspace, and writes it to the out-pointers `ws` / `ex`, which a
/// first stage passes on unchanged from its C caller.
pub(crate) fn submit(
    op: &'static str,
    job: impl FnMut() -> SimResult<()> + Send + 'static,
    ws: *mut u64,
    ex: *mut *mut AclOpExecutor,
) -> SimResult<()> {
    submit_sized(op, SIM_WORKSPACE, job, ws, ex)
}

/// [`submit`] for an op that asks for `workspace` bytes.
pub(crate) fn submit_sized(
    op: &'static str,
    workspace: u64,
    job: impl FnMut() -> SimResult<()> + Send + 'static,
    ws: *mut u64,
    ex: *mut *mut AclOpExecutor,
) -> SimResult<()> {
    // SAFETY: the out-pointers are the C caller's, writable per the op's prototype (null ones
    // are refused by `new_executor`).
    unsafe { new_executor(op, workspace, Box::new(job), ws, ex) }
}

pub(crate) type T = *const AclTensor;
pub(crate) type IA = *const AclIntArray;
pub(crate) type TL = *const AclTensorList;

/// An element moved as little-endian bytes.
pub(crate) trait Wire: Element {
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

pub(crate) fn typed<W: Wire>(t: &SimTensor, name: &str) -> SimResult<Vec<W>> {
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

pub(crate) fn encode<W: Wire>(v: &[W]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * W::DTYPE.size());
    v.iter().for_each(|x| x.put(&mut out));
    out
}

/// A float tensor (FLOAT, FLOAT16, BFLOAT16) widened to f32 (exact).
pub(crate) fn floats(t: &SimTensor, name: &str) -> SimResult<Vec<f32>> {
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

/// The values of an optional tensor (`None` where it is absent).
pub(crate) fn opt_floats(t: Option<&SimTensor>, name: &str) -> SimResult<Option<Vec<f32>>> {
    t.map(|t| floats(t, name)).transpose()
}

/// Writes `attentionOut`: int8 through `quantScale2` / `quantOffset2` where a scale is given
/// (`int8` computes it), else `float`'s values rounded to `out`'s dtype.
pub(crate) fn write_attention_out(
    (quant_scale2, quant_offset2): (Option<&SimTensor>, Option<&SimTensor>),
    out: &SimTensor,
    int8: impl FnOnce(&PostQuant) -> Vec<i8>,
    float: impl FnOnce() -> Vec<f64>,
) -> SimResult<()> {
    let bytes = match quant_scale2 {
        Some(s) => {
            let scale = floats(s, "quantScale2")?;
            let offset = opt_floats(quant_offset2, "quantOffset2")?;
            let quant = PostQuant {
                scale: &scale,
                offset: offset.as_deref(),
            };
            encode(&int8(&quant))
        }
        None => encode_f64(&float(), out.dtype, "attentionOut")?,
    };
    out.write("attentionOut", &bytes)
}

/// Float or INT8 values widened to f32 (exact).
pub(crate) fn floats_or_i8(t: &SimTensor, name: &str) -> SimResult<Vec<f32>> {
    if t.dtype == DataType::Int8 {
        Ok(typed::<i8>(t, name)?.into_iter().map(f32::from).collect())
    } else {
        floats(t, name)
    }
}

/// An INT32 / INT64 tensor widened to i64.
pub(crate) fn ints(t: &SimTensor, name: &str) -> SimResult<Vec<i64>> {
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
pub(crate) fn mask01(t: &SimTensor, name: &str) -> SimResult<Vec<u8>> {
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
pub(crate) fn encode_f64(v: &[f64], dtype: DataType, name: &str) -> SimResult<Vec<u8>> {
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

pub(crate) fn check_dims(t: &SimTensor, name: &str, want: &[usize]) -> SimResult<()> {
    if t.dims != want {
        return invalid(format!("{name}: shape must be {want:?}, got {:?}", t.dims));
    }
    Ok(())
}

/// `attentionOut`'s shape and dtype: int8 where the call post-quantises (`quantScale2` given),
/// else the query's.
pub(crate) fn check_attention_out(
    out: &SimTensor,
    dims: &[usize],
    int8: bool,
    query: DataType,
) -> SimResult<()> {
    check_dims(out, "attentionOut", dims)?;
    let want = if int8 { DataType::Int8 } else { query };
    if out.dtype != want {
        return invalid(format!(
            "attentionOut: dtype must be {want:?}, got {:?}",
            out.dtype
        ));
    }
    Ok(())
}

/// `t`'s dtype is one of `allowed` (else an error naming `op` and the parameter `name`).
pub(crate) fn dtype_in(t: &SimTensor, op: &str, name: &str, allowed: &[DataType]) -> SimResult<()> {
    if allowed.contains(&t.dtype) {
        Ok(())
    } else {
        invalid(format!(
            "{op}: {name} dtype must be one of {allowed:?}, got {:?}",
            t.dtype
        ))
    }
}

pub(crate) fn check_rank(t: &SimTensor, name: &str, rank: usize) -> SimResult<()> {
    if t.dims.len() != rank {
        return invalid(format!(
            "{name}: must be rank {rank}, got shape {:?}",
            t.dims
        ));
    }
    Ok(())
}

pub(crate) fn unsupported<R>(what: &str) -> SimResult<R> {
    invalid(format!("unsupported in the simulation: {what}"))
}

/// The query dtype rule of the inference attention ops on Atlas A2/A3: CANN's op definitions
/// (cannmirror/ops-transformer `attention/prompt_flash_attention/op_host/
/// prompt_flash_attention_def.cpp`, `incre_flash_attention/…/incre_flash_attention_def.cpp`,
/// `fused_infer_attention_score/…/fused_infer_attention_score_def.cpp`: the default
/// `this->Input("query")` lists, not 310P's or `aicore_config_95`'s) list FLOAT16, BFLOAT16 and
/// (PFA, FIA) INT8 — never FLOAT — and the seeds docs say the same ("query数据类型支持FLOAT16、
/// BFLOAT16"). A FLOAT query is ACLNN_ERR_PARAM_INVALID, as on the NPU; an INT8 query the
/// definition lists but the simulation has no kernel for is `unsupported`.
pub(crate) fn half_query(q: &SimTensor, op: &str, int8_listed: bool) -> SimResult<()> {
    match q.dtype {
        DataType::Float16 | DataType::Bf16 => Ok(()),
        DataType::Int8 if int8_listed => unsupported(&format!("{op}: int8 query")),
        dt => {
            let listed = if int8_listed {
                "FLOAT16, BFLOAT16 or INT8"
            } else {
                "FLOAT16 or BFLOAT16"
            };
            invalid(format!(
                "query: dtype must be {listed} ({op} on Atlas A2/A3 takes no FLOAT), got {dt:?}"
            ))
        }
    }
}

/// `name` (pse, antiquant scale/offset) in the query's dtype, as the definitions pair them
/// (every FLOAT16 / BFLOAT16 query column of the PFA / IFA defs has pse_shift and IFA's
/// antiquant_scale / antiquant_offset in the query's dtype).
pub(crate) fn query_dtype(t: &SimTensor, name: &str, q: DataType) -> SimResult<()> {
    if t.dtype != q {
        return invalid(format!(
            "{name}: dtype must be the query's {q:?}, got {:?}",
            t.dtype
        ));
    }
    Ok(())
}
