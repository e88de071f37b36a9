//! FIA's mask and pse rules: the mask kind against the sparse mode and the carrier's tensor,
//! the dense mask's and the pse's shapes against the call.

use crate::checked;
use crate::error::{ensure, AttnError, Result};

use super::{FiaDims, FiaMask, FiaSpec};

impl FiaSpec {
    /// The dense mask's `(batch dim, rows, cols)`, when there is one.
    pub(super) fn validate_mask(
        &self,
        dims: &FiaDims,
        shape: Option<&[usize]>,
    ) -> Result<Option<(usize, usize, usize)>> {
        let mode = self.sparse_mode;
        match (self.atten_mask, shape) {
            (FiaMask::Dense, None) => {
                return Err(AttnError::invalid(
                    "attenMask",
                    "a dense mask needs its tensor (the carrier's atten_mask)",
                ))
            }
            (FiaMask::None | FiaMask::Compressed, Some(shape)) => {
                return Err(AttnError::invalid(
                    "attenMask",
                    format!(
                        "a mask tensor {shape:?} goes with the dense kind (sparseMode 0 or 1); {}",
                        if self.atten_mask == FiaMask::None {
                            "the spec says no mask"
                        } else {
                            "the compressed mask of modes 2-4 is CANN's constant, not a tensor of the call"
                        }
                    ),
                ))
            }
            _ => {}
        }
        if !mask_fits_mode(self.atten_mask, mode)? {
            return Ok(None);
        }
        let dense = match shape {
            None => None,
            Some(shape) => {
                let (mb, rows, cols) = match *shape {
                    // (B, KV_S) in decode, (Q_S, KV_S) otherwise.
                    [a, c] if dims.decode() => (a, 1, c),
                    [r, c] => (1, r, c),
                    [b, r, c] | [b, 1, r, c] => (b, r, c),
                    _ => {
                        return Err(AttnError::invalid(
                            "attenMask",
                            format!(
                                "shape must be (Q_S,KV_S), (1|B,Q_S,KV_S) or (1|B,1,Q_S,KV_S) (decode also (B,KV_S)), got {shape:?}"
                            ),
                        ))
                    }
                };
                ensure!(
                    mb == 1 || mb == dims.batch,
                    "attenMask",
                    "batch dim must be 1 or B = {}, got {mb}",
                    dims.batch
                );
                ensure!(
                    rows >= dims.q_seq && cols >= dims.kv_seq,
                    "attenMask",
                    "[Q_S, KV_S] = [{rows}, {cols}] must cover [{}, {}] (paged: maxBlockNumPerSeq·blockSize)",
                    dims.q_seq,
                    dims.kv_seq
                );
                checked::product("attenMask", "its element count", &[mb, rows, cols])?;
                Some((mb, rows, cols))
            }
        };
        let (pre, next) = (i128::from(self.pre_tokens), i128::from(self.next_tokens));
        if mode == 4 {
            ensure!(
                pre + next >= 0,
                "preTokens",
                "band (sparseMode 4) needs preTokens + nextTokens >= 0, got pre {pre} next {next}"
            );
        }
        Ok(dense)
    }
}

/// `pseShift`'s shape `[B|1, N, rows, cols]`, checked against the call.
pub(super) fn validate_pse(dims: &FiaDims, shape: Option<&[usize]>) -> Result<Option<[usize; 4]>> {
    let Some(shape) = shape else {
        return Ok(None);
    };
    let &[pb, pn, rows, cols] = shape else {
        return Err(AttnError::invalid(
            "pseShift",
            format!("shape must be (B|1, N, Q_S, KV_S), got {shape:?}"),
        ));
    };
    ensure!(
        (pb == 1 || pb == dims.batch) && pn == dims.num_heads,
        "pseShift",
        "shape must be (B|1, N, Q_S, KV_S) with B = {}, N = {}, got {shape:?}",
        dims.batch,
        dims.num_heads
    );
    ensure!(
        rows >= dims.q_seq && cols >= dims.kv_seq,
        "pseShift",
        "[Q_S, KV_S] = [{rows}, {cols}] must be >= [{}, {}] (paged: maxBlockNumPerSeq·blockSize)",
        dims.q_seq,
        dims.kv_seq
    );
    checked::product("pseShift", "its element count", &[pb, pn, rows, cols])?;
    Ok(Some([pb, pn, rows, cols]))
}

/// The `attenMask` / `sparseMode` pairing (as PFA's): no mask only with mode 0, the compressed
/// 2048×2048 mask with modes 2–4, a full mask with 0 or 1. `Ok(false)`: no mask.
fn mask_fits_mode(mask: FiaMask, mode: i64) -> Result<bool> {
    match mask {
        FiaMask::None => {
            ensure!(
                mode == 0,
                "attenMask",
                "required with sparseMode {mode} (full mask for 1, compressed 2048x2048 for 2-4)"
            );
            Ok(false)
        }
        FiaMask::Compressed => {
            ensure!(
                (2..=4).contains(&mode),
                "attenMask",
                "the compressed mask goes with sparseMode 2, 3 or 4, not {mode}"
            );
            Ok(true)
        }
        FiaMask::Dense => {
            ensure!(
                mode <= 1,
                "attenMask",
                "sparseMode {mode} takes CANN's compressed 2048x2048 mask, not a full one"
            );
            Ok(true)
        }
    }
}
