//! The grouped matmul of a mixture of experts, `aclnnGroupedMatmulV4` as torch_npu's
//! `npu_grouped_matmul` and MindSpeed's `npu_gmm` call it: x, weight, bias and out each one
//! tensor (`splitItem` 3), split along one axis by `groupListOptional`.
//!
//! Two calls, both from ops-transformer `gmm/grouped_matmul/docs/aclnnGroupedMatmulV4.md`
//! (Atlas A2 / A3 table "不同groupType支持场景", 单单单):
//!
//! - `groupType` 0 (the M axis, the forward and the input gradient): `x [M, K]` rows sorted by
//!   group, `weight [g, K, N]`, optional `bias [g, N]`, `out [M, N]` where the rows of group
//!   `i` are `x_i · weight_i + bias_i`. The group list has one entry per group (at most 1024);
//!   as `Cumsum` (groupListType 0) a non-negative non-decreasing sequence whose last value
//!   equals `M`, as `Count` (groupListType 1) non-negative sizes summing to `M`.
//! - `groupType` 2 (the K axis, the weight gradient): `x [M, K]` (passed transposed: a view of
//!   a `[K, M]` buffer), `weight [K, N]`, no bias, `out [g, M, N]` with
//!   `out_i = x[:, K_i] · weight[K_i, :]` over group `i`'s slice `K_i` of the shared axis; the
//!   group list then splits K (last value / sum equal to `K`). MindSpeed's `npu_gmm_backward`
//!   computes `dW` this way (`npu_gmm(xt, grad, …, group_type=2)`), and `dx` as a groupType-0
//!   call on the transposed weights.
//!
//! dtypes (non-quantised): x and weight one of FLOAT16, BFLOAT16, FLOAT32 (DOUBLE on the host
//! paths only, for the f64 gradient checks); out the same; bias FLOAT16 for FLOAT16 x and
//! FLOAT32 for BFLOAT16 / FLOAT32 x on A2 / A3 (the 910_95 table also takes a bias in x's
//! dtype, which the host paths accept). x's and weight's last dims must be below 65536.

use crate::dtype::DataType;
use crate::ensure;
use crate::error::{AttnError, Result};

/// `groupListType`: how `groupListOptional` describes the groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupListType {
    /// 0: cumulative ends (`[3, 3, 7]`: rows 0..3, none, 3..7).
    Cumsum,
    /// 1: sizes (`[3, 0, 4]`).
    Count,
}

impl GroupListType {
    /// The aclnn attribute.
    pub fn as_attr(self) -> i64 {
        match self {
            Self::Cumsum => 0,
            Self::Count => 1,
        }
    }

    /// From the aclnn attribute (2, the `[g, 2]` sparse form, is not implemented).
    pub fn from_attr(v: i64) -> Result<Self> {
        match v {
            0 => Ok(Self::Cumsum),
            1 => Ok(Self::Count),
            2 => Err(AttnError::Unsupported(
                "groupListType 2 (the [g, 2] sparse group list)".into(),
            )),
            _ => Err(AttnError::invalid(
                "groupListType",
                format!("must be 0 (cumsum) or 1 (count), got {v}"),
            )),
        }
    }
}

/// `groupType`: the axis the group list splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupType {
    /// 0: M, the rows of x and out (forward, input gradient).
    M,
    /// 2: K, the shared reduction axis (weight gradient); out gets a leading group axis.
    K,
}

impl GroupType {
    /// The aclnn attribute.
    pub fn as_attr(self) -> i64 {
        match self {
            Self::M => 0,
            Self::K => 2,
        }
    }

    /// From the aclnn attribute (-1, no grouping, and 1, N, are not implemented; N-axis
    /// grouping is not supported on A2 / A3 at all).
    pub fn from_attr(v: i64) -> Result<Self> {
        match v {
            0 => Ok(Self::M),
            2 => Ok(Self::K),
            -1 | 1 => Err(AttnError::Unsupported(format!(
                "groupType {v} (only 0, the M axis, and 2, the K axis)"
            ))),
            _ => Err(AttnError::invalid(
                "groupType",
                format!("must be -1, 0, 1 or 2, got {v}"),
            )),
        }
    }
}

/// `splitItem` of every call here: x, weight and out are each one tensor.
pub const SPLIT_ITEM: i64 = 3;
/// The most groups `groupListOptional` may hold (single-tensor weight).
pub const MAX_GROUPS: usize = 1024;
/// x's and weight's last dims must be below this.
pub const MAX_LAST_DIM: usize = 65536;

/// The attributes of a grouped matmul call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupedMatmulSpec {
    /// `groupListOptional` (INT64 on the device), one entry per group.
    pub group_list: Vec<i64>,
    /// `groupListType`.
    pub group_list_type: GroupListType,
    /// `groupType`.
    pub group_type: GroupType,
}

impl GroupedMatmulSpec {
    /// An M-axis call (the forward) from per-group row counts.
    pub fn from_counts(counts: &[usize]) -> Self {
        Self {
            group_list: counts.iter().map(|&c| c as i64).collect(),
            group_list_type: GroupListType::Count,
            group_type: GroupType::M,
        }
    }

    /// The same groups along the other axis (the weight gradient of an M-axis call is the
    /// K-axis call over the same list, and back).
    pub fn with_group_type(&self, group_type: GroupType) -> Self {
        Self {
            group_type,
            ..self.clone()
        }
    }

    /// The group sizes, validated against `total` (the length of the split axis): each entry
    /// non-negative, cumulative ends non-decreasing, and the whole list covering exactly
    /// `total`. Names `groupListOptional`.
    pub fn sizes(&self, total: usize) -> Result<Vec<usize>> {
        let g = &self.group_list;
        ensure!(
            !g.is_empty() && g.len() <= MAX_GROUPS,
            "groupListOptional",
            "must hold 1 to {MAX_GROUPS} groups, got {}",
            g.len()
        );
        let mut sizes = Vec::with_capacity(g.len());
        let mut end = 0i64;
        for (i, &v) in g.iter().enumerate() {
            ensure!(
                v >= 0,
                "groupListOptional",
                "entry {i} is {v}: entries must be non-negative"
            );
            let size = match self.group_list_type {
                GroupListType::Cumsum => {
                    ensure!(
                        v >= end,
                        "groupListOptional",
                        "cumsum (groupListType 0) must be non-decreasing: entry {i} is {v} after {end}"
                    );
                    let s = v - end;
                    end = v;
                    s
                }
                GroupListType::Count => {
                    end = end.checked_add(v).ok_or_else(|| {
                        AttnError::invalid("groupListOptional", "sizes overflow int64")
                    })?;
                    v
                }
            };
            sizes.push(size as usize);
        }
        ensure!(
            end == total as i64,
            "groupListOptional",
            "groups cover {end} {} but the split axis has {total}",
            match self.group_type {
                GroupType::M => "rows of x",
                GroupType::K => "columns of x (rows of weight)",
            }
        );
        Ok(sizes)
    }

    /// Checks a call's shapes and dtypes; returns its dimensions.
    pub fn validate(&self, s: &GroupedMatmulShapes) -> Result<GroupedMatmulDims> {
        let xd = s.dtypes[0].ok_or_else(|| AttnError::invalid("x", "dtype unknown"))?;
        ensure!(
            matches!(
                xd,
                DataType::Float16 | DataType::Bf16 | DataType::Float | DataType::Double
            ),
            "x",
            "dtype must be FLOAT16, BFLOAT16 or FLOAT32 (DOUBLE on the host), got {xd:?}"
        );
        ensure!(
            s.dtypes[1] == Some(xd),
            "weight",
            "dtype must equal x's {xd:?}, got {:?}",
            s.dtypes[1]
        );
        ensure!(s.x.len() == 2, "x", "must be rank 2, got {:?}", s.x);
        let (m, k) = (s.x[0], s.x[1]);
        let dims = match self.group_type {
            GroupType::M => {
                ensure!(
                    s.weight.len() == 3,
                    "weight",
                    "must be [g, K, N] (rank 3) with groupType 0, got {:?}",
                    s.weight
                );
                let (g, kw, n) = (s.weight[0], s.weight[1], s.weight[2]);
                ensure!(
                    kw == k,
                    "weight",
                    "K (dim 1) must equal x's last dim {k}, got {:?}",
                    s.weight
                );
                ensure!(
                    self.group_list.len() == g,
                    "groupListOptional",
                    "must hold one entry per group of weight ({g}), got {}",
                    self.group_list.len()
                );
                if let Some(b) = &s.bias {
                    ensure!(
                        b.as_slice() == [g, n],
                        "biasOptional",
                        "must be [g, N] = [{g}, {n}], got {b:?}"
                    );
                    let bd = s.dtypes[2];
                    let ok =
                        bd == Some(xd) || (xd != DataType::Double && bd == Some(DataType::Float));
                    ensure!(
                        ok,
                        "biasOptional",
                        "dtype must be x's {xd:?} or FLOAT32, got {bd:?}"
                    );
                }
                let sizes = self.sizes(m)?;
                GroupedMatmulDims { m, k, n, sizes }
            }
            GroupType::K => {
                ensure!(
                    s.weight.len() == 2,
                    "weight",
                    "must be [K, N] (rank 2) with groupType 2, got {:?}",
                    s.weight
                );
                ensure!(
                    s.weight[0] == k,
                    "weight",
                    "K (dim 0) must equal x's last dim {k}, got {:?}",
                    s.weight
                );
                ensure!(
                    s.bias.is_none(),
                    "biasOptional",
                    "must be null with groupType 2"
                );
                let sizes = self.sizes(k)?;
                GroupedMatmulDims {
                    m,
                    k,
                    n: s.weight[1],
                    sizes,
                }
            }
        };
        ensure!(
            dims.k < MAX_LAST_DIM,
            "x",
            "last dim must be below {MAX_LAST_DIM}, got {}",
            dims.k
        );
        ensure!(
            dims.n < MAX_LAST_DIM,
            "weight",
            "last dim (N) must be below {MAX_LAST_DIM}, got {}",
            dims.n
        );
        ensure!(
            dims.m <= i32::MAX as usize,
            "x",
            "dim 0 must be at most {}, got {}",
            i32::MAX,
            dims.m
        );
        Ok(dims)
    }
}

/// Shapes and dtypes of a call's tensors (logical shapes: with groupType 2, x is `[M, K]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupedMatmulShapes {
    /// `x`.
    pub x: Vec<usize>,
    /// `weight`.
    pub weight: Vec<usize>,
    /// `biasOptional`.
    pub bias: Option<Vec<usize>>,
    /// dtypes of x, weight, bias.
    pub dtypes: [Option<DataType>; 3],
}

/// The dimensions of a validated call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupedMatmulDims {
    /// x's rows.
    pub m: usize,
    /// The reduction axis.
    pub k: usize,
    /// out's columns.
    pub n: usize,
    /// Each group's size along the split axis.
    pub sizes: Vec<usize>,
}

impl GroupedMatmulDims {
    /// Where each group starts along the split axis.
    pub fn starts(&self) -> Vec<usize> {
        let mut at = 0;
        self.sizes
            .iter()
            .map(|&s| {
                let start = at;
                at += s;
                start
            })
            .collect()
    }
}
