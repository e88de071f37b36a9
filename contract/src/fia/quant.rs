//! FIA's antiquant and sink rules.

use crate::checked;
use crate::error::{ensure, AttnError, Result};

use super::{FiaAntiquantMode, FiaDims, FiaSpec, KvAntiquant};

impl FiaSpec {
    pub(super) fn validate_antiquant(&self, dims: &FiaDims, kv_int8: bool) -> Result<()> {
        let (nkv, d) = (dims.kv_heads, dims.head_dim);
        let channels = checked::product("antiquantScale", "Nkv·D", &[nkv, d])?;
        if let Some(aq) = &self.antiquant {
            match FiaAntiquantMode::from_attr("antiquantMode", self.antiquant_mode)? {
                FiaAntiquantMode::PerChannel => {}
                FiaAntiquantMode::PerToken => {
                    return Err(AttnError::Unsupported(
                        "antiquantMode 1 with the combined antiquantScale (use keyAntiquantScale / valueAntiquantScale per token)".into(),
                    ))
                }
            }
            let ok = match *aq.shape.as_slice() {
                [2] => true,
                [2, a, 1, b] | [2, a, b] => a == nkv && b == d,
                [2, h] => h == channels,
                _ => false,
            };
            ensure!(
                ok,
                "antiquantScale",
                "shape must be (2) or per channel (2,{nkv},1,{d}), (2,{nkv},{d}), (2,{channels}), got {:?}",
                aq.shape
            );
            let len = if aq.shape.len() == 1 { 2 } else { 2 * channels };
            ensure!(
                aq.scale.len() == len,
                "antiquantScale",
                "has {} values, shape {:?} needs {len}",
                aq.scale.len(),
                aq.shape
            );
            if let Some(o) = &aq.offset {
                ensure!(
                    o.len() == len,
                    "antiquantOffset",
                    "must have antiquantScale's shape {:?} ({len} values), got {}",
                    aq.shape,
                    o.len()
                );
            }
        }
        ensure!(
            self.key_antiquant.is_some() == self.value_antiquant.is_some(),
            if self.key_antiquant.is_some() {
                "valueAntiquantScale"
            } else {
                "keyAntiquantScale"
            },
            "keyAntiquantScale and valueAntiquantScale are given together or not at all"
        );
        if let (Some(k), Some(v)) = (&self.key_antiquant, &self.value_antiquant) {
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
            self.check_kv_antiquant(dims, k, km, ["keyAntiquantScale", "keyAntiquantOffset"])?;
            self.check_kv_antiquant(dims, v, vm, ["valueAntiquantScale", "valueAntiquantOffset"])?;
            ensure!(
                k.offset.is_some() == v.offset.is_some(),
                "valueAntiquantOffset",
                "keyAntiquantOffset and valueAntiquantOffset are given together or not at all"
            );
        }
        if kv_int8 {
            ensure!(
                self.quantised(),
                "antiquantScale",
                "int8 key/value need antiquantScale or keyAntiquantScale/valueAntiquantScale"
            );
        } else {
            ensure!(
                !self.quantised(),
                "antiquantScale",
                "antiquant parameters are only taken with int8 key/value"
            );
        }
        Ok(())
    }

    fn check_kv_antiquant(
        &self,
        dims: &FiaDims,
        q: &KvAntiquant,
        mode: FiaAntiquantMode,
        [scale_name, offset_name]: [&'static str; 2],
    ) -> Result<()> {
        let (nkv, d) = (dims.kv_heads, dims.head_dim);
        let channels = nkv.saturating_mul(d);
        let len = match mode {
            FiaAntiquantMode::PerChannel => {
                let per_tensor = matches!(*q.shape.as_slice(), [1]);
                let sh = q.shape.as_slice();
                let ok = per_tensor
                    || matches!(*sh, [1, a, 1, b] | [1, a, b] | [a, b] | [a, 1, b] if a == nkv && b == d)
                    || matches!(*sh, [1, h] | [h] if h == channels);
                ensure!(
                    ok,
                    scale_name,
                    "per channel shape must be (1) or (1,{nkv},1,{d}), (1,{nkv},{d}), (1,{channels}), ({nkv},{d}), ({nkv},1,{d}), ({channels}), got {:?}",
                    q.shape
                );
                if per_tensor {
                    1
                } else {
                    channels
                }
            }
            FiaAntiquantMode::PerToken => {
                let (b, s) = match *q.shape.as_slice() {
                    [b, s] | [1, b, s] => (b, s),
                    _ => {
                        return Err(AttnError::invalid(
                            scale_name,
                            format!(
                                "per token shape must be (B, S) or (1, B, S), got {:?}",
                                q.shape
                            ),
                        ))
                    }
                };
                ensure!(
                    b == dims.batch && s >= dims.kv_seq,
                    scale_name,
                    "per token shape must be (B = {}, S >= {}) (paged: maxBlockNumPerSeq·blockSize), got {:?}",
                    dims.batch,
                    dims.kv_seq,
                    q.shape
                );
                checked::product(scale_name, "its element count", &[b, s])?
            }
        };
        ensure!(
            q.scale.len() == len,
            scale_name,
            "has {} values, shape {:?} needs {len}",
            q.scale.len(),
            q.shape
        );
        if let Some(o) = &q.offset {
            ensure!(
                o.len() == len,
                offset_name,
                "must have the scale's shape {:?} ({len} values), got {}",
                q.shape,
                o.len()
            );
        }
        Ok(())
    }

    pub(super) fn validate_sink(&self, dims: &FiaDims, sink: Option<&[usize]>) -> Result<()> {
        let Some(sink) = sink else {
            return Ok(());
        };
        ensure!(
            sink == [dims.num_heads],
            "learnableSink",
            "must be [Q_N] = [{}], got shape {sink:?}",
            dims.num_heads
        );
        ensure!(
            !self.quantised(),
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
            self.pse_shift.is_none(),
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
