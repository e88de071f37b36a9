//! `aclnnRotaryPositionEmbedding` / `aclnnRotaryPositionEmbeddingGrad` (cannmirror/ops-transformer
//! `posembedding/rotary_position_embedding*`; what torch_npu's `npu_rotary_mul` and
//! `npu_rotary_position_embedding` call): `y = x · cos + rotate(x) · sin`, `cos` and `sin`
//! broadcast over `x`'s leading dimensions, the last dimension `D` shared.
//!
//! Prototypes:
//! `aclnnRotaryPositionEmbeddingGetWorkspaceSize(const aclTensor *x, const aclTensor *cos,
//! const aclTensor *sin, int64_t mode, aclTensor *out, …)` and
//! `aclnnRotaryPositionEmbeddingGradGetWorkspaceSize(const aclTensor *dy, const aclTensor *cos,
//! const aclTensor *sin, const aclTensor *xOptional, int64_t mode, const aclTensor *dxOut,
//! const aclTensor *dcosOut, const aclTensor *dsinOut, …)` (a null `xOptional` computes no
//! `dcosOut` / `dsinOut`, which must still be non-null: the docs' example passes empty ones).
//!
//! The rules checked, as the docs state them for Atlas A2 / A3:
//! - dtypes BFLOAT16, FLOAT16, FLOAT32, `cos` / `sin` / `out` as `x` (checked by the callers);
//! - `x` 4-D (the grad's table: 4; the forward also takes 3-D TND, which the Burn paths never
//!   produce, so both are held to 4 here and the shapes below are stated for 4-D);
//! - `cos` and `sin` the same shape, each dimension 1 or `x`'s, the last `D`; `D` even and
//!   below 896;
//! - `mode` 0 (half, `rotate_half` as Llama / Qwen / gpt-oss use) or 1 (interleave, GPT-J);
//!   2 (quarter) and 3 (interleave-half) are Ascend 950 only;
//! - the layouts: half takes `cos` broadcast as `11SD`, `B1SD`, `BNSD` for BNSD `x` (and the
//!   same patterns for BSND `1S1D`, `BS1D` and SBND `S11D`, `SB1D`), i.e. any pattern but a
//!   broadcast first dimension under two full ones; interleave takes only `11SD` / `1S1D` /
//!   `S11D`: at most one leading dimension of `cos` above 1.
//!
//! Not modelled: the tiling limits on `B` and `N` (`B, N < 1000`; `B·N ≤ 1024` when `dcos` /
//! `dsin` are computed), which need the layout's names and are far above this project's shapes.

use crate::ensure;
use crate::error::{AttnError, Result};

/// `mode`: how the last dimension's elements pair up for the rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RotaryMode {
    /// 0: element `i` pairs with `i + D/2` (`rotate_half`: `cat(-x2, x1)`).
    #[default]
    Half,
    /// 1: element `2i` pairs with `2i + 1` (`stack(-x_odd, x_even)`).
    Interleave,
}

impl RotaryMode {
    /// The aclnn `mode` value.
    pub fn aclnn(self) -> i64 {
        match self {
            Self::Half => 0,
            Self::Interleave => 1,
        }
    }

    /// From the aclnn `mode` value (Atlas A2 / A3: 0 or 1).
    pub fn from_aclnn(mode: i64) -> Result<Self> {
        match mode {
            0 => Ok(Self::Half),
            1 => Ok(Self::Interleave),
            2 | 3 => Err(AttnError::invalid(
                "mode",
                format!("{mode} (quarter / interleave-half) is Ascend 950 only; Atlas A2 / A3 take 0 (half) or 1 (interleave)"),
            )),
            _ => Err(AttnError::invalid(
                "mode",
                format!("must be 0 (half) or 1 (interleave), got {mode}"),
            )),
        }
    }
}

/// `x` as rows of `d`, and which row of `cos` / `sin` each row of `x` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotaryDims {
    /// `x`'s leading dimensions (three).
    pub lead: [usize; 3],
    /// `cos`'s leading dimensions (each 1 or `lead`'s).
    pub cos_lead: [usize; 3],
    /// The last dimension.
    pub d: usize,
}

impl RotaryDims {
    /// Rows of `x` (the product of its leading dimensions).
    pub fn rows(&self) -> usize {
        self.lead.iter().product()
    }

    /// Rows of `cos` / `sin`.
    pub fn cos_rows(&self) -> usize {
        self.cos_lead.iter().product()
    }

    /// The row of `cos` that row `r` of `x` reads (broadcast dimensions index 0).
    pub fn cos_row(&self, r: usize) -> usize {
        let (mut rest, mut out, mut stride) = (r, 0, 1);
        for k in (0..3).rev() {
            let i = rest % self.lead[k];
            rest /= self.lead[k];
            if self.cos_lead[k] != 1 {
                out += i * stride;
            }
            stride *= self.cos_lead[k];
        }
        out
    }
}

/// The D limit of Atlas A2 / A3 (`D < 896`).
pub const MAX_HEAD_DIM: usize = 896;

fn check(
    xname: &'static str,
    x: &[usize],
    cos: &[usize],
    sin: &[usize],
    mode: RotaryMode,
) -> Result<RotaryDims> {
    ensure!(
        x.len() == 4,
        xname,
        "must be 4-D ([B, S, N, D], [B, N, S, D] or [S, B, N, D]), got {x:?}"
    );
    let d = x[3];
    ensure!(
        d > 0 && d.is_multiple_of(2) && d < MAX_HEAD_DIM,
        xname,
        "last dimension D must be even, above 0 and below {MAX_HEAD_DIM}, got {d} ({x:?})"
    );
    ensure!(
        cos.len() == 4 && cos[3] == d,
        "cos",
        "must be 4-D with the last dimension {xname}'s D = {d}, got {cos:?}"
    );
    ensure!(
        cos.iter().zip(x).all(|(&c, &v)| c == 1 || c == v),
        "cos",
        "each dimension must be 1 or {xname}'s ({x:?}), got {cos:?}"
    );
    ensure!(
        sin == cos,
        "sin",
        "must have cos's shape {cos:?}, got {sin:?}"
    );
    let full: Vec<usize> = (0..3).filter(|&k| cos[k] != 1).collect();
    match mode {
        RotaryMode::Half => ensure!(
            full != [1, 2],
            "cos",
            "layout {cos:?} for {xname} {x:?} is not one of 11SD / B1SD / BNSD (and the BSND, SBND equivalents) that half mode takes"
        ),
        RotaryMode::Interleave => ensure!(
            full.len() <= 1,
            "cos",
            "interleave mode takes cos as 11SD / 1S1D / S11D (one leading dimension above 1), got {cos:?} for {xname} {x:?}"
        ),
    }
    Ok(RotaryDims {
        lead: [x[0], x[1], x[2]],
        cos_lead: [cos[0], cos[1], cos[2]],
        d,
    })
}

/// Validates the forward: `x`, `cos`, `sin` (see the [module docs](self)).
pub fn validate_fwd(
    x: &[usize],
    cos: &[usize],
    sin: &[usize],
    mode: RotaryMode,
) -> Result<RotaryDims> {
    check("x", x, cos, sin, mode)
}

/// Validates the backward without `xOptional`: `dy` under the forward's rules on `x`.
pub fn validate_bwd(
    dy: &[usize],
    cos: &[usize],
    sin: &[usize],
    mode: RotaryMode,
) -> Result<RotaryDims> {
    check("dy", dy, cos, sin, mode)
}
