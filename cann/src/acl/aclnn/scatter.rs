//! The paged KV cache scatter: `aclnnScatterPaKvCache`.

use super::call::{attr, cptr, ia, t};
use super::two_stage;
use crate::acl::error::Result;
use crate::acl::runtime::Runtime;
use crate::acl::tensor::{IntArray, Tensor};

/// Arguments of `aclnnScatterPaKvCache`, in prototype order. The caches are updated in place.
pub struct ScatterArgs<'a> {
    pub key: &'a Tensor<'a>,
    pub key_cache: &'a Tensor<'a>,
    pub slot_mapping: &'a Tensor<'a>,
    pub value: Option<&'a Tensor<'a>>,
    pub value_cache: Option<&'a Tensor<'a>>,
    pub compress_lens: Option<&'a Tensor<'a>>,
    pub compress_seq_offset: Option<&'a Tensor<'a>>,
    pub seq_lens: Option<&'a Tensor<'a>>,
    pub cache_mode: &'a str,
    pub scatter_mode: &'a str,
    pub strides: Option<&'a IntArray>,
    pub offsets: Option<&'a IntArray>,
}

/// KV cache scatter: `aclnnScatterPaKvCache`.
pub fn scatter(rt: &Runtime, a: &ScatterArgs<'_>) -> Result<()> {
    let (name, f) = op!(rt, scatter_pa_kv_cache)?;
    let cache_mode = attr("cacheMode", a.cache_mode)?;
    let scatter_mode = attr("scatterMode", a.scatter_mode)?;
    two_stage(rt, name, f.launch, |ws, ex| {
        // SAFETY: the arguments follow the prototype of seed 004 in order; handles live for
        // the call, nulls only for optional inputs, the strings NUL-terminated.
        unsafe {
            (f.workspace)(
                a.key.as_ptr(),
                a.key_cache.as_ptr(),
                a.slot_mapping.as_ptr(),
                t(a.value),
                t(a.value_cache),
                t(a.compress_lens),
                t(a.compress_seq_offset),
                t(a.seq_lens),
                cptr(&cache_mode),
                cptr(&scatter_mode),
                ia(a.strides),
                ia(a.offsets),
                ws,
                ex,
            )
        }
    })
}
