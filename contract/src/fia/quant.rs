//! FIA's antiquant and sink rules.

use crate::checked;
use crate::error::{ensure, AttnError, Result};

use super::{FiaAntiquantMode, FiaDequantIndex, FiaDims, FiaShapes, FiaSpec};

impl FiaSpec {
    /// With int8 KV, how the key's and value's antiquant are indexed.
    pub(super) fn validate_antiquant(
        &self,
        dims: &FiaDims,
        s: &FiaShapes,
    ) -> Result<Option<[FiaDequantIndex; 2]>> {
        let (nkv, d) = (dims.kv_heads, dims.head_dim);
        let channels = checked::product("antiquantScale", "Nkv·D", &[nkv, d])?;
        for (scale, offset, [scale_name, offset_name]) in [
            (
                &s.antiquant_scale,
                &s.antiquant_offset,
                ["antiquantScale", "antiquantOffset"],
            ),
            (
                &s.key_antiquant_scale,
                &s.key_antiquant_offset,
                ["keyAntiquantScale", "keyAntiquantOffset"],
            ),
            (
                &s.value_antiquant_scale,
                &s.value_antiquant_offset,
                ["valueAntiquantScale", "valueAntiquantOffset"],
            ),
        ] {
            match (scale, offset) {
                (None, Some(_)) => {
                    return Err(AttnError::invalid(
                        offset_name,
                        format!("needs {scale_name}"),
                    ))
                }
                (Some(sc), Some(o)) => ensure!(
                    o == sc,
                    offset_name,
                    "must have the scale's shape {sc:?}, got {o:?}"
                ),
                _ => {}
            }
        }
        let mut combined = None;
        if let Some(shape) = &s.antiquant_scale {
            match FiaAntiquantMode::from_attr("antiquantMode", self.antiquant_mode)? {
                FiaAntiquantMode::PerChannel => {}
                FiaAntiquantMode::PerToken => {
                    return Err(AttnError::Unsupported(
                        "antiquantMode 1 with the combined antiquantScale (use keyAntiquantScale / valueAntiquantScale per token)".into(),
                    ))
                }
            }
            let ok = match *shape.as_slice() {
                [2] => true,
                [2, a, 1, b] | [2, a, b] => a == nkv && b == d,
                [2, h] => h == channels,
                _ => false,
            };
            ensure!(
                ok,
                "antiquantScale",
                "shape must be (2) or per channel (2,{nkv},1,{d}), (2,{nkv},{d}), (2,{channels}), got {shape:?}"
            );
            let index = if shape.len() == 1 {
                FiaDequantIndex::PerTensor
            } else {
                FiaDequantIndex::PerChannel
            };
            combined = Some([index; 2]);
        }
        ensure!(
            s.key_antiquant_scale.is_some() == s.value_antiquant_scale.is_some(),
            if s.key_antiquant_scale.is_some() {
                "valueAntiquantScale"
            } else {
                "keyAntiquantScale"
            },
            "keyAntiquantScale and valueAntiquantScale are given together or not at all"
        );
        let mut separate = None;
        if let (Some(k), Some(v)) = (&s.key_antiquant_scale, &s.value_antiquant_scale) {
            let km = FiaAntiquantMode::from_attr("keyAntiquantMode", self.key_antiquant_mode)?;
            let vm = FiaAntiquantMode::from_attr("valueAntiquantMode", self.value_antiquant_mode)?;
            ensure!(
                km == vm
                    || (dims.decode()
                        && km == FiaAntiquantMode::PerChannel
                        && vm == FiaAntiquantMode::PerToken),
                "valueAntiquantMode",
                "must equal keyAntiquantMode ({}) except key 0 / value 1 in decode, got {}",
                self.key_antiquant_mode,
                self.value_antiquant_mode
            );
            let ki = check_kv_antiquant(dims, k, km, "keyAntiquantScale")?;
            let vi = check_kv_antiquant(dims, v, vm, "valueAntiquantScale")?;
            ensure!(
                s.key_antiquant_offset.is_some() == s.value_antiquant_offset.is_some(),
                "valueAntiquantOffset",
                "keyAntiquantOffset and valueAntiquantOffset are given together or not at all"
            );
            separate = Some([ki, vi]);
        }
        let index = separate.or(combined);
        if s.kv_int8 {
            ensure!(
                index.is_some(),
                "antiquantScale",
                "int8 key/value need antiquantScale or keyAntiquantScale/valueAntiquantScale"
            );
        } else {
            ensure!(
                index.is_none(),
                "antiquantScale",
                "antiquant parameters are only taken with int8 key/value"
            );
        }
        Ok(index)
    }

    pub(super) fn validate_sink(&self, dims: &FiaDims, s: &FiaShapes) -> Result<()> {
        let Some(sink) = &s.learnable_sink else {
            return Ok(());
        };
        ensure!(
            *sink == [dims.num_heads],
            "learnableSink",
            "must be [Q_N] = [{}], got shape {sink:?}",
            dims.num_heads
        );
        ensure!(
            !dims.quantised(),
            "learnableSink",
            "only without quantisation (no antiquant)"
        );
        ensure!(
            dims.head_dim_v == 64 || dims.head_dim_v == 128,
            "learnableSink",
            "needs V_D 64 or 128, got {}",
            dims.head_dim_v
        );
        ensure!(
            s.pse_shift.is_none(),
            "learnableSink",
            "not supported with pseShift"
        );
        ensure!(
            self.query_padding_size.is_none() && self.kv_padding_size.is_none(),
            "learnableSink",
            "not supported with left padding (queryPaddingSize / kvPaddingSize)"
        );
        Ok(())
    }
}

/// A separate key or value antiquant scale's shape checked for `mode`; how it is indexed.
fn check_kv_antiquant(
    dims: &FiaDims,
    shape: &[usize],
    mode: FiaAntiquantMode,
    scale_name: &'static str,
) -> Result<FiaDequantIndex> {
    let (nkv, d) = (dims.kv_heads, dims.head_dim);
    let channels = nkv.saturating_mul(d);
    match mode {
        FiaAntiquantMode::PerChannel => {
            let per_tensor = matches!(*shape, [1]);
            let ok = per_tensor
                || matches!(*shape, [1, a, 1, b] | [1, a, b] | [a, b] | [a, 1, b] if a == nkv && b == d)
                || matches!(*shape, [1, h] | [h] if h == channels);
            ensure!(
                ok,
                scale_name,
                "per channel shape must be (1) or (1,{nkv},1,{d}), (1,{nkv},{d}), (1,{channels}), ({nkv},{d}), ({nkv},1,{d}), ({channels}), got {shape:?}"
            );
            Ok(if per_tensor {
                FiaDequantIndex::PerTensor
            } else {
                FiaDequantIndex::PerChannel
            })
        }
        FiaAntiquantMode::PerToken => {
            let (b, s) = match *shape {
                [b, s] | [1, b, s] => (b, s),
                _ => {
                    return Err(AttnError::invalid(
                        scale_name,
                        format!("per token shape must be (B, S) or (1, B, S), got {shape:?}"),
                    ))
                }
            };
            ensure!(
                b == dims.batch && s >= dims.kv_seq,
                scale_name,
                "per token shape must be (B = {}, S >= {}) (paged: maxBlockNumPerSeq·blockSize), got {shape:?}",
                dims.batch,
                dims.kv_seq
            );
            checked::product(scale_name, "its element count", &[b, s])?;
            Ok(FiaDequantIndex::PerToken { cols: s })
        }
    }
}

/// Checks `learnableSink`'s values where a caller holds them on the host (a replayed call read
/// from files): every logit finite. CANN reads whatever the tensor holds; a device tensor (a
/// model's trained sinks) is not read back to check it.
pub fn check_learnable_sink_values(values: &[f32]) -> Result<()> {
    ensure!(
        values.iter().all(|x| x.is_finite()),
        "learnableSink",
        "values must be finite"
    );
    Ok(())
}
