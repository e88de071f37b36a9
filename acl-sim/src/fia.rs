//! Simulated fused inference attention: `aclnnFusedInferAttentionScoreV4` and the base
//! `aclnnFusedInferAttentionScore`, on the CPU reference (`burn_ascend_kernels::reference::fia`).
//!
//! The first stage reads shapes, dtypes, attributes and the host int arrays only: it builds the
//! contract's [`FiaSpec`] with zero placeholders for the contents of the index metadata (block
//! table, padding sizes) and the call's shapes (every tensor input's) and runs its validation,
//! so every rule on shapes is checked before the executor exists. The launch reads the
//! contents, validates the spec again with them (block ids, padding values) and runs the
//! reference on the tensors' values.
//!
//! `learnableSink`'s dtype is checked as the CANN release the simulation pretends to be
//! ([`crate::cann_release`]; the newest the project has read by default) takes
//! it: BFLOAT16 on FIA v3, the query's on 9.x's TND split-fuse path (the kernels
//! read it so; `burn_ascend_contract::fia::sink` cites the sources).

use std::cell::Cell;
use std::sync::Arc;

use burn_ascend_cann::acl::ffi::*;
use burn_ascend_contract::fia::{
    parse_fia_layout, FiaHostValues, FiaKvShapes, FiaMask, FiaShapes, FiaSpec,
};
use burn_ascend_contract::incre::BlockTable;
use burn_ascend_contract::prompt::PfaLayout;
use burn_ascend_contract::AttnError;
use burn_ascend_kernels::reference::fia::fused_infer_attention;

use crate::release::cann_release;
use crate::state::{
    self, c_str, int_array, invalid, required, tensor, tensor_list, SimErr, SimResult, SimTensor,
};
use crate::wire::{
    check_dims, encode, encode_f64, floats, floats_or_i8, half_query, ints, mask01, submit,
    unsupported, TL,
};

thread_local! {
    /// The dtype of the last `learnableSink` a first stage on this thread accepted.
    static LAST_SINK_DTYPE: Cell<Option<DataType>> = const { Cell::new(None) };
}

/// Forgets [`last_learnable_sink_dtype`] (with [`crate::set_cann_release`]).
pub(crate) fn forget_last_sink_dtype() {
    LAST_SINK_DTYPE.with(|c| c.set(None));
}

/// The dtype of the last `learnableSink` a first stage on this thread accepted (what a caller
/// sent), for tests.
pub fn last_learnable_sink_dtype() -> Option<DataType> {
    LAST_SINK_DTYPE.with(Cell::get)
}

fn contract(e: AttnError) -> SimErr {
    match e {
        AttnError::Unsupported(what) => SimErr(
            ACLNN_ERR_PARAM_INVALID,
            format!("unsupported in the simulation: {what}"),
        ),
        e => SimErr(ACLNN_ERR_PARAM_INVALID, e.to_string()),
    }
}

/// The tensor inputs whose contents the launch reads.
struct FiaTensors {
    q: SimTensor,
    k: SimTensor,
    v: SimTensor,
    mask: Option<SimTensor>,
    pse: Option<SimTensor>,
    table: Option<SimTensor>,
    query_padding: Option<SimTensor>,
    kv_padding: Option<SimTensor>,
    antiquant: [Option<SimTensor>; 2],
    key_antiquant: [Option<SimTensor>; 2],
    value_antiquant: [Option<SimTensor>; 2],
    sink: Option<SimTensor>,
    out: SimTensor,
    lse: Option<SimTensor>,
}

fn zeros<X: Default + Clone>(t: &SimTensor) -> Arc<[X]> {
    vec![X::default(); t.numel()].into()
}

/// The spec with its host metadata's contents (block table, padding sizes) read from their
/// tensors (`real`), or zero placeholders of their shapes (the first stage).
fn fill(base: &FiaSpec, t: &FiaTensors, real: bool) -> SimResult<FiaSpec> {
    let mut s = base.clone();
    let one = |x: &Option<SimTensor>, name: &str| -> SimResult<Option<i64>> {
        match x {
            None => Ok(None),
            Some(x) if real => Ok(Some(*ints(x, name)?.first().unwrap_or(&0))),
            Some(_) => Ok(Some(0)),
        }
    };
    if let Some(b) = &t.table {
        s.block_table = Some(BlockTable {
            data: if real {
                ints(b, "blockTable")?
                    .into_iter()
                    .map(|x| x as i32)
                    .collect::<Vec<_>>()
                    .into()
            } else {
                zeros(b)
            },
            shape: b.dims.clone(),
        });
    }
    s.query_padding_size = one(&t.query_padding, "queryPaddingSize")?;
    s.kv_padding_size = one(&t.kv_padding, "kvPaddingSize")?;
    Ok(s)
}

/// The optional tensor inputs' host values (the dense mask as 0/1 bytes, the rest as f32).
struct HostValues {
    mask: Option<Vec<u8>>,
    pse: Option<Vec<f32>>,
    /// Scale and offset of the combined, the key's and the value's antiquant.
    antiquant: [[Option<Vec<f32>>; 2]; 3],
    sink: Option<Vec<f32>>,
}

impl HostValues {
    fn read(spec: &FiaSpec, t: &FiaTensors) -> SimResult<Self> {
        let fl =
            |x: &Option<SimTensor>, name: &str| x.as_ref().map(|x| floats(x, name)).transpose();
        let pair = |p: &[Option<SimTensor>; 2], names: [&str; 2]| -> SimResult<_> {
            Ok([fl(&p[0], names[0])?, fl(&p[1], names[1])?])
        };
        Ok(Self {
            // The compressed mask's content is fixed by the mode (checked in the first stage).
            mask: match (&t.mask, spec.atten_mask) {
                (Some(m), FiaMask::Dense) => Some(mask01(m, "attenMask")?),
                _ => None,
            },
            pse: fl(&t.pse, "pseShift")?,
            antiquant: [
                pair(&t.antiquant, ["antiquantScale", "antiquantOffset"])?,
                pair(
                    &t.key_antiquant,
                    ["keyAntiquantScale", "keyAntiquantOffset"],
                )?,
                pair(
                    &t.value_antiquant,
                    ["valueAntiquantScale", "valueAntiquantOffset"],
                )?,
            ],
            sink: fl(&t.sink, "learnableSink")?,
        })
    }

    fn view(&self) -> FiaHostValues<'_> {
        let [[aqs, aqo], [kqs, kqo], [vqs, vqo]] = &self.antiquant;
        FiaHostValues {
            atten_mask: self.mask.as_deref(),
            pse_shift: self.pse.as_deref(),
            antiquant_scale: aqs.as_deref(),
            antiquant_offset: aqo.as_deref(),
            key_antiquant_scale: kqs.as_deref(),
            key_antiquant_offset: kqo.as_deref(),
            value_antiquant_scale: vqs.as_deref(),
            value_antiquant_offset: vqo.as_deref(),
            learnable_sink: self.sink.as_deref(),
        }
    }
}

struct FiaCall {
    spec: FiaSpec,
    shapes: FiaShapes,
    t: FiaTensors,
}

impl FiaCall {
    fn run(&self) -> SimResult<()> {
        let spec = fill(&self.spec, &self.t, true)?;
        let dims = spec.validate(&self.shapes).map_err(contract)?;
        let q = floats(&self.t.q, "query")?;
        let k = floats_or_i8(&self.t.k, "key")?;
        let v = floats_or_i8(&self.t.v, "value")?;
        let host = HostValues::read(&spec, &self.t)?;
        let out = fused_infer_attention(&spec.args(&dims, &q, &k, &v, host.view()));
        self.t.out.write(
            "attentionOut",
            &encode_f64(&out.attention_out, self.t.out.dtype, "attentionOut")?,
        )?;
        if let Some(l) = &self.t.lse {
            if spec.softmax_lse_flag {
                l.write("softmaxLse", &encode(&out.softmax_lse))?;
            }
        }
        Ok(())
    }
}

fn kv_one(p: TL, name: &str) -> SimResult<SimTensor> {
    let list = tensor_list(p, name)?
        .ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, format!("{name} is null")))?;
    match <[SimTensor; 1]>::try_from(list) {
        Ok([t]) => Ok(t),
        Err(l) => unsupported(&format!(
            "{name}: a tensor list of {} tensors (one tensor per batch); pass one tensor",
            l.len()
        )),
    }
}

fn dtype_in(t: &SimTensor, name: &str, ok: &[DataType]) -> SimResult<()> {
    if ok.contains(&t.dtype) {
        Ok(())
    } else {
        invalid(format!(
            "{name}: dtype must be one of {ok:?}, got {:?}",
            t.dtype
        ))
    }
}

/// The first stage shared by V4 and the base op (widened to V4), from its decoded tensors.
fn decode(
    op: &'static str,
    t: FiaTensors,
    p: &FiaV4Params,
    layout: Option<String>,
) -> SimResult<()> {
    let FiaV4Params {
        actual_seq_lengths: asl,
        actual_seq_lengths_kv: asl_kv,
        num_heads,
        scale_value,
        pre_tokens,
        next_tokens,
        num_key_value_heads,
        sparse_mode,
        inner_precise,
        block_size,
        antiquant_mode,
        softmax_lse_flag,
        key_antiquant_mode,
        value_antiquant_mode,
        workspace_size: ws,
        executor: ex,
        ..
    } = *p;
    let layout = parse_fia_layout(
        &layout.ok_or_else(|| SimErr(ACLNN_ERR_PARAM_NULLPTR, "inputLayout is null".into()))?,
    )
    .map_err(contract)?;
    // FLOAT16 / BFLOAT16 / INT8 query, never FLOAT (`fused_infer_attention_score_def.cpp`).
    half_query(&t.q, names::fia_v4, true)?;
    let int8 = t.k.dtype == DataType::Int8;
    for (x, name) in [(&t.k, "key"), (&t.v, "value")] {
        if (x.dtype != t.q.dtype && x.dtype != DataType::Int8) || x.dtype != t.k.dtype {
            return invalid(format!(
                "{name}: dtype must be the query's or INT8 (both alike), got {:?}",
                x.dtype
            ));
        }
    }
    if let Some(m) = &t.mask {
        dtype_in(
            m,
            "attenMask",
            &[DataType::Bool, DataType::Int8, DataType::Uint8],
        )?;
    }
    if let Some(x) = &t.pse {
        if x.dtype != t.q.dtype {
            return invalid(format!(
                "pseShift: dtype must be the query's {:?}, got {:?}",
                t.q.dtype, x.dtype
            ));
        }
    }
    // The antiquant scales / offsets: FLOAT16, BFLOAT16 or FLOAT (per-token) in the def's lists.
    for (pair, name) in [
        (&t.antiquant, "antiquant"),
        (&t.key_antiquant, "keyAntiquant"),
        (&t.value_antiquant, "valueAntiquant"),
    ] {
        for (x, what) in pair.iter().zip(["Scale", "Offset"]) {
            if let Some(x) = x {
                dtype_in(
                    x,
                    &format!("{name}{what}"),
                    &[DataType::Float16, DataType::Bf16, DataType::Float],
                )?;
            }
        }
    }
    if let Some(b) = &t.table {
        dtype_in(b, "blockTable", &[DataType::Int32])?;
    }
    for (x, name) in [
        (&t.query_padding, "queryPaddingSize"),
        (&t.kv_padding, "kvPaddingSize"),
    ] {
        if let Some(x) = x {
            dtype_in(x, name, &[DataType::Int64])?;
            check_dims(x, name, &[1])?;
        }
    }
    dtype_in(&t.out, "attentionOut", &[t.q.dtype])?;
    if num_heads <= 0 || num_key_value_heads < 0 || block_size < 0 {
        return invalid("numHeads, numKeyValueHeads, blockSize out of range");
    }
    let mut spec = FiaSpec::new(num_heads as usize, scale_value, layout);
    spec.num_key_value_heads = num_key_value_heads as usize;
    spec.pre_tokens = pre_tokens;
    spec.next_tokens = next_tokens;
    spec.sparse_mode = sparse_mode;
    spec.inner_precise = inner_precise;
    spec.block_size = block_size as usize;
    spec.antiquant_mode = antiquant_mode;
    spec.softmax_lse_flag = softmax_lse_flag;
    spec.key_antiquant_mode = key_antiquant_mode;
    spec.value_antiquant_mode = value_antiquant_mode;
    spec.actual_seq_lengths = int_array(asl, "actualSeqLengths")?;
    spec.actual_seq_lengths_kv = int_array(asl_kv, "actualSeqLengthsKv")?;
    spec.atten_mask = match &t.mask {
        None => FiaMask::None,
        Some(m) if (2..=4).contains(&sparse_mode) => {
            let ok = matches!(
                m.dims.as_slice(),
                [2048, 2048] | [1, 2048, 2048] | [1, 1, 2048, 2048]
            );
            if !ok {
                return invalid(format!(
                    "attenMask: sparseMode {sparse_mode} takes the (2048, 2048) compressed mask, got {:?}",
                    m.dims
                ));
            }
            FiaMask::Compressed
        }
        Some(_) => FiaMask::Dense,
    };
    let kv = if t.table.is_some() {
        FiaKvShapes::Paged {
            key_cache: t.k.dims.clone(),
            value_cache: t.v.dims.clone(),
        }
    } else {
        FiaKvShapes::Contiguous {
            key: t.k.dims.clone(),
            value: t.v.dims.clone(),
        }
    };
    let dims_of = |x: &Option<SimTensor>| x.as_ref().map(|x| x.dims.clone());
    let shapes = FiaShapes {
        // The compressed mask is no tensor of the contract's call (its shape is checked above).
        atten_mask: dims_of(&t.mask).filter(|_| spec.atten_mask == FiaMask::Dense),
        pse_shift: dims_of(&t.pse),
        antiquant_scale: dims_of(&t.antiquant[0]),
        antiquant_offset: dims_of(&t.antiquant[1]),
        key_antiquant_scale: dims_of(&t.key_antiquant[0]),
        key_antiquant_offset: dims_of(&t.key_antiquant[1]),
        value_antiquant_scale: dims_of(&t.value_antiquant[0]),
        value_antiquant_offset: dims_of(&t.value_antiquant[1]),
        ..FiaShapes::new(
            t.q.dims.clone(),
            kv,
            int8,
            t.sink.as_ref().map(|x| x.dims.clone()),
        )
    };
    let placeholder = fill(&spec, &t, false)?;
    let dims = placeholder.validate(&shapes).map_err(contract)?;
    if let Some(x) = &t.sink {
        // The sink's dtype follows the path and the release, not the query: the kernel reads
        // it in the dtype its path and release fix.
        placeholder
            .check_learnable_sink_dtype(
                &dims,
                t.q.dtype,
                x.dtype,
                cann_release().map_err(contract)?,
            )
            .map_err(contract)?;
        LAST_SINK_DTYPE.with(|c| c.set(Some(x.dtype)));
    }
    check_dims(&t.out, "attentionOut", &dims.out_shape())?;
    match (&t.lse, softmax_lse_flag) {
        (Some(l), true) => {
            dtype_in(l, "softmaxLse", &[DataType::Float])?;
            check_dims(l, "softmaxLse", &dims.lse_shape())?;
        }
        (None, true) => {
            return Err(SimErr(
                ACLNN_ERR_PARAM_NULLPTR,
                "softmaxLse is null but softmaxLseFlag is true".into(),
            ))
        }
        _ => {}
    }
    crate::cost::note_attention(|| {
        // Per-batch lengths (TND: cumulative ends), else the tensors' S.
        let tnd = dims.layout == PfaLayout::Tnd;
        let lens = |a: &Option<Vec<i64>>, full| crate::cost::seq_lens(a, tnd, dims.batch, full);
        let p = &placeholder;
        crate::cost::Attention {
            seqs: lens(&p.actual_seq_lengths, dims.q_seq)
                .into_iter()
                .zip(lens(&p.actual_seq_lengths_kv, dims.kv_seq))
                .collect(),
            heads: dims.num_heads,
            kv_heads: dims.kv_heads,
            head_dim: dims.head_dim,
            value_dim: dims.head_dim_v,
            keep: crate::cost::Keep::of_sparse_mode(p.sparse_mode, p.pre_tokens, p.next_tokens),
            q_elem: t.q.dtype.size(),
            kv_elem: t.k.dtype.size(),
            backward: false,
            dtype: t.q.dtype,
        }
    });
    let call = FiaCall { spec, shapes, t };
    submit(op, move || call.run(), ws, ex)
}

/// FIA's first stage, for V4 or a base call widened to V4 (`op` names the op called).
fn fia_stage(op: &'static str, p: FiaV4Params) -> SimResult<()> {
    if [
        p.deq_scale1,
        p.quant_scale1,
        p.deq_scale2,
        p.dequant_scale_query,
    ]
    .iter()
    .any(|p| !p.is_null())
        || p.query_quant_mode != 0
    {
        return unsupported(
            "full quantisation (deqScale1 / quantScale1 / deqScale2 / dequantScaleQuery)",
        );
    }
    if !p.quant_scale2.is_null() || !p.quant_offset2.is_null() {
        return unsupported("int8 attentionOut (quantScale2 / quantOffset2)");
    }
    if !p.key_shared_prefix.is_null()
        || !p.value_shared_prefix.is_null()
        || !p.actual_shared_prefix_len.is_null()
    {
        return unsupported("shared prefix (keySharedPrefix / valueSharedPrefix)");
    }
    if !p.query_rope.is_null() || !p.key_rope.is_null() || !p.key_rope_antiquant_scale.is_null() {
        return unsupported("rope split (queryRope / keyRope)");
    }
    let t = FiaTensors {
        q: required(p.query, "query")?,
        k: kv_one(p.key, "key")?,
        v: kv_one(p.value, "value")?,
        mask: tensor(p.atten_mask, "attenMask")?,
        pse: tensor(p.pse_shift, "pseShift")?,
        table: tensor(p.block_table, "blockTable")?,
        query_padding: tensor(p.query_padding_size, "queryPaddingSize")?,
        kv_padding: tensor(p.kv_padding_size, "kvPaddingSize")?,
        antiquant: [
            tensor(p.antiquant_scale, "antiquantScale")?,
            tensor(p.antiquant_offset, "antiquantOffset")?,
        ],
        key_antiquant: [
            tensor(p.key_antiquant_scale, "keyAntiquantScale")?,
            tensor(p.key_antiquant_offset, "keyAntiquantOffset")?,
        ],
        value_antiquant: [
            tensor(p.value_antiquant_scale, "valueAntiquantScale")?,
            tensor(p.value_antiquant_offset, "valueAntiquantOffset")?,
        ],
        sink: tensor(p.learnable_sink, "learnableSink")?,
        out: required(p.attention_out, "attentionOut")?,
        lse: tensor(p.softmax_lse, "softmaxLse")?,
    };
    // SAFETY: aclnn's contract: attribute strings are null or NUL-terminated.
    let layout = unsafe { c_str(p.input_layout, "inputLayout")? };
    decode(op, t, &p, layout)
}

first_stage!(fia_v4, |p| { state::guard(|| fia_stage(names::fia_v4, p)) });

first_stage!(fia_base, |p| {
    state::guard(|| {
        if [
            p.deq_scale1,
            p.quant_scale1,
            p.deq_scale2,
            p.quant_scale2,
            p.quant_offset2,
        ]
        .iter()
        .any(|p| !p.is_null())
        {
            return unsupported("quantisation (deqScale1 / quantScale1 / deqScale2 / quantScale2)");
        }
        fia_stage(names::fia_base, p.to_wide())
    })
});
