//! Prompt attention, incremental attention and the cache scatter on the Burn paths — the
//! composite (any backend), `NdArray` (CPU kernels) and `Autodiff<NdArray>` (forward-only) —
//! against the CPU reference, plus one test per validation rule checking the parameter named.

pub(crate) mod fia;
mod fia_rules;
pub(crate) mod incre;
mod incre_rules;
pub(crate) mod prompt;
mod prompt_rules;
pub(crate) mod scatter;
mod scatter_rules;

use std::sync::Arc;

use crate::common::{close, Rng};
use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData};
use burn_ascend::contract::incre::KvInput;
use burn_ascend::kernels::reference::incre::incre_flash_attention;
use burn_ascend::kernels::reference::prompt::prompt_flash_attention;
use burn_ascend::ops::host::{from_vec, to_vec};
use burn_ascend::ops::incre::{
    composite as icomp, BlockTable, IfaLayout, IncreHostValues, IncreKvShapes, IncreShapes,
    IncreSpec,
};
use burn_ascend::ops::prompt::{
    composite as pcomp, PfaLayout, PostQuantSpec, PromptMaskKind, PromptShapes, PromptSpec,
};
use burn_ascend::ops::scatter::{
    composite as scomp, scatter_checked, CacheMode, ScatterKind, ScatterShapes, ScatterSpec,
};
use burn_ascend::{
    incre_flash_attention as incre_api, prompt_flash_attention as prompt_api, scatter_pa_kv_cache,
    AttnError, FiaBackend, IncreInputs, IncreKv, PromptBackend, PromptInputs, ScatterBackend,
    ScatterInputs,
};
use burn_ascend_cann::acl::DataType;

type B = NdArray;
type AD = Autodiff<NdArray>;

// Tolerances: the composite computes in f32 against the reference's f64 accumulation; 1e-5
// absolute plus 1e-4 relative covers rounding of O(1) values. The NdArray path is the
// reference rounded to f32, so it must match exactly.
pub(crate) const ATOL: f32 = 1e-5;
pub(crate) const RTOL: f32 = 1e-4;

fn f32s(v: Vec<f64>) -> Vec<f32> {
    v.into_iter().map(|x| x as f32).collect()
}

fn expect_param(name: &str, r: Result<impl std::fmt::Debug, AttnError>, param: &str) {
    match r {
        Err(e) => assert_eq!(e.param(), Some(param), "{name}: {e}"),
        Ok(v) => panic!("{name}: accepted ({v:?}), expected an error naming {param}"),
    }
}
