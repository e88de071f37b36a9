//! KV cache scatter: `aclnnScatterPaKvCache`.

pub mod composite;
mod spec;

pub use burn_ascend_kernels::reference::scatter::{CacheMode, CompressMode};
pub use composite::{scatter_checked, scatter_host};
pub use spec::{
    parse_cache_mode, CompressedWrite, ScatterDims, ScatterKind, ScatterShapes, ScatterSpec,
};
