//! The composite scatter: one `slice_assign` per written token (Rope windows reduced with
//! `mean_dim`), on any backend. Validation runs first, so a refused call returns before any
//! tensor operation.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorMetadata};

use burn_ascend_contract::scatter::{
    check_compressed_scatter, check_scatter, CacheMode, CompressedScatterArgs, PlainScatterArgs,
};
use burn_ascend_kernels::cpu::scatter::scatter_pa_kv_cache;
use burn_ascend_kernels::reference::scatter::{scatter_pa_kv_cache_compressed, RefElem};

use crate::common::tensor::{unwrap, wrap};
use crate::error::{AttnError, Result};
use crate::scatter::{ScatterDims, ScatterInputs, ScatterOutputs, ScatterShapes, ScatterSpec};

fn flat<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 1> {
    let n: usize = t.shape().iter().product();
    wrap::<B, 1>(B::float_reshape(t, [n].into()))
}

/// Scatters one of key (`which = 0`) / value (`which = 1`) into its cache.
fn scatter_one<B: Backend>(
    spec: &ScatterSpec,
    dims: &ScatterDims,
    which: usize,
    src: FloatTensor<B>,
    cache: FloatTensor<B>,
) -> FloatTensor<B> {
    let shape = cache.shape();
    let cs: [usize; 4] = shape.to_vec().try_into().expect("validated rank 4");
    let d = if which == 0 {
        dims.k_head_size
    } else {
        dims.v_head_size
    };
    let (n, bs) = (dims.num_heads, dims.block_size);
    if spec.scatter_mode.compressed().is_some() {
        let src: Tensor<B, 3> = wrap(src);
        let mut c: Tensor<B, 2> = wrap::<B, 4>(cache).reshape([cs[0] * cs[1], d]);
        let starts = spec.seq_starts();
        for (b, h, slot, from, to) in spec.compressed_writes(dims) {
            let rows = src
                .clone()
                .narrow(0, starts[b] + from, to - from)
                .narrow(1, h, 1)
                .reshape([to - from, d]);
            let row = if to - from == 1 {
                rows
            } else {
                rows.mean_dim(0)
            };
            c = c.slice_assign([slot..slot + 1, 0..d], row);
        }
        return unwrap(c.reshape(cs));
    }
    let src = flat::<B>(src);
    let nd = n * d;
    let mut c: Tensor<B, 4> = wrap(cache);
    for (t, &slot) in spec.slot_mapping.iter().enumerate() {
        if slot < 0 {
            continue;
        }
        let s = slot as usize;
        let start = dims.source_start(which, t);
        let row = src.clone().narrow(0, start, nd);
        let (blk, off) = (s / bs, s % bs);
        c = match spec.cache_mode {
            CacheMode::PaNz => {
                let last = dims.nz_last;
                c.slice_assign(
                    [blk..blk + 1, 0..nd / last, off..off + 1, 0..last],
                    row.reshape([1, nd / last, 1, last]),
                )
            }
            _ => c.slice_assign(
                [blk..blk + 1, off..off + 1, 0..n, 0..d],
                row.reshape([1, 1, n, d]),
            ),
        };
    }
    unwrap(c)
}

/// Composite `aclnnScatterPaKvCache`: returns the updated caches.
pub fn scatter_kv<B: Backend>(
    inputs: ScatterInputs<FloatTensor<B>>,
    spec: &ScatterSpec,
) -> Result<ScatterOutputs<FloatTensor<B>>> {
    let dims = spec.validate(&crate::scatter::shapes(&inputs))?;
    let key_cache = scatter_one::<B>(spec, &dims, 0, inputs.key, inputs.key_cache);
    let value_cache = match (inputs.value, inputs.value_cache) {
        (Some(v), Some(vc)) if dims.has_value => Some(scatter_one::<B>(spec, &dims, 1, v, vc)),
        (_, vc) => vc,
    };
    Ok(ScatterOutputs {
        key_cache,
        value_cache,
    })
}

/// Runs the CPU reference scatter on validated host buffers (`T` of the caches' dtype, so that
/// PA_NZ's `32 / sizeof(T)` matches). The reference's own check runs again as a guard.
pub fn scatter_host<T: RefElem>(
    spec: &ScatterSpec,
    dims: &ScatterDims,
    key: &[T],
    value: Option<&[T]>,
    key_cache: &mut [T],
    value_cache: Option<&mut [T]>,
) -> Result<()> {
    let guard = |e: String| AttnError::invalid("slotMapping", e);
    let value = value.filter(|_| dims.has_value);
    let value_cache = value_cache.filter(|_| dims.has_value);
    let vlen = value_cache.as_ref().map(|c| c.len());
    if let Some(mode) = spec.scatter_mode.compressed() {
        let seq_lens = spec.seq_lens.as_deref().unwrap_or(&[]);
        let a = CompressedScatterArgs {
            key,
            value,
            slot_mapping: &spec.slot_mapping,
            compress_lens: spec.compress_lens.as_deref().unwrap_or(&[]),
            seq_lens,
            compress_seq_offset: spec.compress_seq_offset.as_deref(),
            num_heads: dims.num_heads,
            k_head_size: dims.k_head_size,
            v_head_size: dims.v_head_size,
            num_blocks: dims.num_blocks,
            block_size: dims.block_size,
            mode,
        };
        check_compressed_scatter(&a, key_cache.len(), vlen).map_err(guard)?;
        scatter_pa_kv_cache_compressed(&a, key_cache, value_cache);
    } else {
        let a = PlainScatterArgs {
            key,
            value,
            slot_mapping: &spec.slot_mapping[..],
            num_tokens: dims.num_tokens,
            num_heads: dims.num_heads,
            k_head_size: dims.k_head_size,
            v_head_size: dims.v_head_size,
            num_blocks: dims.num_blocks,
            block_size: dims.block_size,
            cache_mode: spec.cache_mode,
            scatter_mode: dims.scatter_mode(),
        };
        check_scatter(&a, key_cache.len(), vlen).map_err(guard)?;
        scatter_pa_kv_cache(&a, key_cache, value_cache);
    }
    Ok(())
}

/// Validates a host-side scatter completely, then writes: on error nothing was written. The
/// entry point for host buffers (the CLI); `T` is the caches' element type.
pub fn scatter_checked<T: RefElem>(
    spec: &ScatterSpec,
    shapes: &ScatterShapes,
    key: &[T],
    value: Option<&[T]>,
    key_cache: &mut [T],
    value_cache: Option<&mut [T]>,
) -> Result<ScatterDims> {
    let dims = spec.validate(shapes)?;
    let count = |s: &[usize]| s.iter().product::<usize>();
    let mut lens = vec![
        ("key", key.len(), count(&shapes.key)),
        ("keyCache", key_cache.len(), count(&shapes.key_cache)),
    ];
    if let (Some(v), Some(s)) = (value, &shapes.value) {
        lens.push(("value", v.len(), count(s)));
    }
    if let (Some(v), Some(s)) = (&value_cache, &shapes.value_cache) {
        lens.push(("valueCache", v.len(), count(s)));
    }
    for (name, have, want) in lens {
        if have != want {
            return Err(AttnError::invalid(
                name,
                format!("has {have} elements, its shape needs {want}"),
            ));
        }
    }
    if std::mem::size_of::<T>() != 32 / dims.nz_last {
        return Err(AttnError::invalid(
            "keyCache",
            "host element type does not match the caches' dtype",
        ));
    }
    scatter_host(spec, &dims, key, value, key_cache, value_cache)?;
    Ok(dims)
}
