//! The shapes (and, where the contract checks them, the dtypes) of a call's tensors, as the
//! contract's validation takes them: one function per op, over any tensor kind with metadata
//! (a backend's float primitive, `NdArray`'s or `Ascend`'s tensors). The composites and every
//! backend's impl validate through these, so each op's carrier is described once.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorMetadata;

use burn_ascend_contract::fia::{FiaInputs, FiaShapes};
use burn_ascend_contract::incre::{IncreInputs, IncreShapes};
use burn_ascend_contract::prompt::{PromptInputs, PromptShapes};
use burn_ascend_contract::scatter::{ScatterInputs, ScatterShapes};
use burn_ascend_contract::varlen::{VarlenBwdShapes, VarlenGradInputs, VarlenInputs, VarlenShapes};

use crate::host::acl_dtype;

fn dims_of<B: Backend>(t: &FloatTensor<B>) -> Vec<usize> {
    t.shape().to_vec()
}

/// The varlen forward's inputs.
pub fn varlen<T: TensorMetadata>(i: &VarlenInputs<T>) -> VarlenShapes {
    let dims3 = |t: &T| t.shape().dims::<3>();
    VarlenShapes {
        query: dims3(&i.query),
        key: dims3(&i.key),
        value: dims3(&i.value),
        sink: i.sink.as_ref().map(|s| s.shape().dims::<1>()[0]),
        pse: i.pse.as_ref().map(|p| p.shape().to_vec()),
        atten_mask: i.atten_mask.as_ref().map(|m| m.shape().to_vec()),
        alibi_slopes: i.alibi_slopes.as_ref().map(|s| s.shape().to_vec()),
        drop_mask: i.drop_mask.as_ref().map(|m| m.shape().to_vec()),
    }
}

/// The varlen backward's extra inputs (the forward's are [`varlen`] of `i.inputs`).
pub fn varlen_bwd<T: TensorMetadata>(i: &VarlenGradInputs<T>) -> VarlenBwdShapes {
    let dims3 = |t: &T| t.shape().dims::<3>();
    VarlenBwdShapes {
        dy: dims3(&i.dy),
        attention_in: dims3(&i.attention_in),
        softmax_max: dims3(&i.softmax_max),
        softmax_sum: dims3(&i.softmax_sum),
    }
}

/// Prompt attention's tensors.
pub fn prompt<T: TensorMetadata>(i: &PromptInputs<T>) -> PromptShapes {
    PromptShapes {
        query: i.query.shape().to_vec(),
        key: i.key.shape().to_vec(),
        value: i.value.shape().to_vec(),
        atten_mask: i.atten_mask.as_ref().map(|t| t.shape().to_vec()),
        pse_shift: i.pse_shift.as_ref().map(|t| t.shape().to_vec()),
    }
}

/// Incremental attention's tensors. In the Burn API int8 KV travels as float tensors holding
/// the int8 values, so `kv_int8` is "antiquantScale is given".
pub fn incre<B: Backend>(i: &IncreInputs<FloatTensor<B>>) -> IncreShapes {
    i.shapes(dims_of::<B>, i.antiquant_scale.is_some())
}

/// Fused inference attention's tensors. int8 KV travels as float tensors holding the int8
/// values, so `kv_int8` is "an antiquant is given".
pub fn fia<B: Backend>(i: &FiaInputs<FloatTensor<B>>) -> FiaShapes {
    i.shapes(dims_of::<B>, i.quantised())
}

/// The cache scatter's tensors, with their dtypes.
pub fn scatter<T: TensorMetadata>(i: &ScatterInputs<T>) -> ScatterShapes {
    let d = |t: &T| t.shape().to_vec();
    ScatterShapes {
        key: d(&i.key),
        value: i.value.as_ref().map(d),
        key_cache: d(&i.key_cache),
        value_cache: i.value_cache.as_ref().map(d),
        dtypes: [
            acl_dtype(i.key.dtype()),
            i.value.as_ref().and_then(|t| acl_dtype(t.dtype())),
            acl_dtype(i.key_cache.dtype()),
            i.value_cache.as_ref().and_then(|t| acl_dtype(t.dtype())),
        ],
    }
}
