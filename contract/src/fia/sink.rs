//! The dtype of FIA's `learnableSink`: which one CANN's kernels read depends on the path a call
//! takes and on the CANN release, not on the query's dtype.
//!
//! Read from CANN's own sources (`cannmirror/ops-transformer`,
//! `attention/fused_infer_attention_score`; Atlas A2/A3):
//!
//! - **CANN ≤ 8.5** (branches 8.5.0-beta.1 `05c401f9`, 8.5.0 `8fff8f927`; 9.0.0-beta.1
//!   `2a529a0a2` still behaves so): `op_host/fused_infer_attention_score_def.cpp:505-507` lists
//!   only `DT_BF16` for `learnable_sink`; a call with a sink never takes the TND split-fuse path
//!   (`op_host/fused_infer_attention_score_tiling.cpp:1241`, `!isLearnableSink`); every A2/A3
//!   kernel reads it as bf16 (`attention/common/op_kernel/arch32/fia_block_vec_nonquant.h:52`,
//!   `using SINK_T = bfloat16_t`). So BFLOAT16 whatever the query.
//! - **CANN 9.x** (from `20ea81afa`, 2026-02-07; branches 9.0.0 `1a341f415`, 9.1.0
//!   `3311e26e5`, master `25fb6b928`): the definition lists `DT_BF16, DT_FLOAT16` (master
//!   `fused_infer_attention_score_def.cpp:507`), and tiling picks the path first
//!   (`TilingFusedInferAttentionScore`, master `fused_infer_attention_score_tiling.cpp:2199`):
//!   - the **TND split-fuse** path when `CheckSpecConditions` holds (master
//!     `op_host/arch22/fused_infer_attention_score_tiling_v3.cpp:1199-1250`, the same test as
//!     `IsUsingFAI` in `fused_infer_attention_score_tiling.cpp:1569-1617`): layout TND, no rope
//!     split, sparse mode 0/3/4, MHA without (BF16 query and `innerPrecise` 1) and without
//!     (mode 0 with a mask) or GQA with `innerPrecise` 0, equal head dims ≤ 256, a 3-D paged
//!     cache's block size a multiple of 16 and ≤ 512 (a 4-D cache never) — except a BF16
//!     sink with head dim 64, which is sent to FIA v3 (`tiling_v3.cpp:1224`). There the sink
//!     must have the query's dtype (`CheckFAILearnableSink`, `tiling.cpp:1131-1134`);
//!   - otherwise the **FIA v3** template, which requires BF16 on A2/A3
//!     (`arch22/fused_infer_attention_score_tiling_check_feature.cpp:516-518`;
//!     `checkers/learnable_sink_checker.cpp:54-58`; unit test `tErr_LearnableSinkWrongDtype`
//!     in `tests/ut/op_host/arch22/test_fused_infer_attention_score_tiling.csv:53`: F16 query,
//!     BSH, F16 sink → "learnable_sink dtype is not BF16"); its kernels still read bf16
//!     (master `attention/common/op_kernel/arch22/fia_block_vec_nonquant.h:60`).
//!
//! So with an F16 query in BSH / BSND / BNSD / BNSD_BSND a BF16 sink is accepted and required
//! on every release; in TND on 9.x the split-fuse path wants the query's dtype; a BF16 query
//! takes a BF16 sink everywhere.
//!
//! A FLOAT query never reaches CANN's FIA (A2/A3 FIA's definition lists FLOAT16, BFLOAT16 and
//! INT8 queries only; the simulation refuses FLOAT too): it is the host paths' and the `Ascend`
//! composite's, whose sink is FLOAT, so host-precision callers keep their exact numbers.

use crate::error::{AttnError, Result};
use crate::release::CannRelease;
use crate::DataType;

use super::{FiaDims, FiaSpec, PfaLayout};

/// Which of FIA's A2/A3 paths runs a call with a `learnableSink`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FiaSinkPath {
    /// The FIA v3 template: reads the sink as BFLOAT16.
    FiaV3,
    /// The TND split-fuse path (CANN 9.x): the sink in the query's dtype.
    SplitFuse,
    /// A FLOAT query: the host paths' and the composite's (CANN's FIA takes no FLOAT query);
    /// FLOAT sink.
    FloatQuery,
}

impl FiaSinkPath {
    /// How errors name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::FiaV3 => "the FIA v3 template",
            Self::SplitFuse => "the TND split-fuse path",
            Self::FloatQuery => "a FLOAT query (host / composite only)",
        }
    }
}

fn dtype_name(d: DataType) -> String {
    match d {
        DataType::Float => "FLOAT".into(),
        DataType::Float16 => "FLOAT16".into(),
        DataType::Bf16 => "BFLOAT16".into(),
        other => format!("{other:?}"),
    }
}

impl FiaSpec {
    /// Whether a call takes CANN 9.x's TND split-fuse path, the sink aside:
    /// `CheckSpecConditions` (`arch22/fused_infer_attention_score_tiling_v3.cpp:1199-1250`).
    /// Rope split and `quantScale2` are never given here.
    fn split_fuse(&self, dims: &FiaDims, query: DataType) -> bool {
        let sparse_ok = matches!(self.sparse_mode, 0 | 3 | 4);
        let masked = self.atten_mask != super::FiaMask::None;
        let mha = dims.kv_heads == dims.num_heads;
        let heads_ok = if mha {
            let bf16_precise = query == DataType::Bf16 && self.inner_precise == 1;
            let mode0_masked = self.sparse_mode == 0 && masked;
            !bf16_precise && !mode0_masked
        } else {
            self.inner_precise == 0
        };
        let (d, dv) = (dims.head_dim, dims.head_dim_v);
        let dims_ok = d == dv && d <= 256;
        // CheckSpecCondPA3Dim (`tiling_v3.cpp:1171-1183`); a 4-D cache (`kvDimNum` 4) is no
        // split-fuse case (`tiling_v3.cpp:1244-1251`), and TND takes only 3-D caches here.
        let paged_ok = dims.paged.is_none_or(|p| {
            p.layout == super::PagedLayout::Bsh
                && p.block_size.is_multiple_of(16)
                && p.block_size <= 512
        });
        dims.layout == PfaLayout::Tnd && sparse_ok && heads_ok && dims_ok && paged_ok
    }

    /// The path a call with a `learnableSink` of `sink`'s dtype takes on `release`.
    pub fn learnable_sink_path(
        &self,
        dims: &FiaDims,
        query: DataType,
        sink: DataType,
        release: CannRelease,
    ) -> FiaSinkPath {
        if query == DataType::Float {
            return FiaSinkPath::FloatQuery;
        }
        if !release.fia_sink_per_path() {
            // `!isLearnableSink` in IsUsingFAI (`tiling.cpp:1241` on 8.5.0).
            return FiaSinkPath::FiaV3;
        }
        // A BF16 sink with head dim 64 goes to FIA v3 (`tiling_v3.cpp:1224`).
        let to_v3 = dims.head_dim == 64 && sink == DataType::Bf16;
        if !to_v3 && self.split_fuse(dims, query) {
            FiaSinkPath::SplitFuse
        } else {
            FiaSinkPath::FiaV3
        }
    }

    /// The dtype to send `learnableSink` in for a `query` of this dtype on `release`: the one
    /// the path it then takes reads. On 9.x's split-fuse path the query's (a head dim 64 could
    /// also go to FIA v3 in BF16; the query's keeps an F16 sink's precision).
    pub fn learnable_sink_dtype(
        &self,
        dims: &FiaDims,
        query: DataType,
        release: CannRelease,
    ) -> Result<DataType> {
        let d = match query {
            DataType::Float => DataType::Float,
            DataType::Float16 | DataType::Bf16 => {
                match self.learnable_sink_path(dims, query, query, release) {
                    FiaSinkPath::SplitFuse => query,
                    _ => DataType::Bf16,
                }
            }
            other => {
                return Err(AttnError::invalid(
                    "query",
                    format!(
                        "with learnableSink FIA takes a FLOAT16 or BFLOAT16 query, got {}",
                        dtype_name(other)
                    ),
                ))
            }
        };
        Ok(d)
    }

    /// Checks that a `learnableSink` of dtype `sink` is one CANN `release` takes with a `query`
    /// of this dtype, and returns the path the call takes. Refused: an error naming
    /// `learnableSink`, the path and the release.
    pub fn check_learnable_sink_dtype(
        &self,
        dims: &FiaDims,
        query: DataType,
        sink: DataType,
        release: CannRelease,
    ) -> Result<FiaSinkPath> {
        let path = self.learnable_sink_path(dims, query, sink, release);
        let (want, why) = match path {
            FiaSinkPath::FloatQuery => (DataType::Float, "the query's"),
            FiaSinkPath::SplitFuse => (query, "the query's: CheckFAILearnableSink"),
            FiaSinkPath::FiaV3 if !release.fia_sink_per_path() => (
                DataType::Bf16,
                "the op definition lists only BFLOAT16; the kernels read bf16",
            ),
            FiaSinkPath::FiaV3 => (DataType::Bf16, "FIA v3 on A2/A3 reads bf16"),
        };
        if sink == want {
            return Ok(path);
        }
        Err(AttnError::invalid(
            "learnableSink",
            format!(
                "dtype must be {} ({why}) on {} with {} ({} query, inputLayout {}, D {}), got {}",
                dtype_name(want),
                path.name(),
                release.label(),
                dtype_name(query),
                dims.layout.as_attr(),
                dims.head_dim,
                dtype_name(sink)
            ),
        ))
    }
}
