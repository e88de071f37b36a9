//! Incremental (decode) attention: `aclnnIncreFlashAttentionV4`.

pub mod composite;
mod spec;

pub use burn_ascend_kernels::reference::incre::{IfaLayout, PagedLayout, IFA_MASKED_SCORE};
pub use spec::{
    parse_ifa_layout, AntiquantSpec, BlockTable, IncreDims, IncreKvShapes, IncreMask, IncrePse,
    IncreShapes, IncreSpec, KvDims, IFA_MAX_BATCH, IFA_MAX_BLOCK_SIZE, IFA_MAX_HEADS,
    IFA_MAX_HEAD_DIM, IFA_MAX_LIST,
};
