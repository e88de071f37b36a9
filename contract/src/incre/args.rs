//! The CPU reference's arguments of a validated incremental attention call: the spec's
//! attributes, the dimensions validation found, and the tensors' host values.

use super::{
    Antiquant, IfaMask, IfaPostQuant, IfaPse, IncreDims, IncreFlashAttentionArgs, IncreSpec,
    KvDims, KvInput,
};
use crate::error::{AttnError, Result};

/// The host values of the optional tensor inputs ([`super::IncreInputs`]'s `atten_mask`,
/// `pse_shift`, `antiquant_scale`, `antiquant_offset`), as the reference reads them: the mask
/// as bytes (non-zero = masked), the rest as f32, each row-major in the shape validation saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct IncreHostValues<'a> {
    /// `attenMask`.
    pub atten_mask: Option<&'a [u8]>,
    /// `pseShift`.
    pub pse_shift: Option<&'a [f32]>,
    /// `antiquantScale`.
    pub antiquant_scale: Option<&'a [f32]>,
    /// `antiquantOffset`.
    pub antiquant_offset: Option<&'a [f32]>,
}

impl IncreSpec {
    /// The CPU reference's arguments for a validated call (f32 host buffers; int8 KV values
    /// widened to f32 exactly; `host`: the optional inputs' values, the ones `dims` was
    /// validated with).
    pub fn args<'a>(
        &'a self,
        dims: &IncreDims,
        query: &'a [f32],
        kv: KvInput<'a, f32>,
        host: IncreHostValues<'a>,
    ) -> IncreFlashAttentionArgs<'a, f32, f32> {
        let mut a = IncreFlashAttentionArgs::new(
            query,
            kv,
            self.input_layout,
            dims.batch,
            dims.num_heads,
            dims.head_dim,
            self.scale_value,
        );
        a.num_key_value_heads = dims.kv_heads;
        a.inner_precise = self.inner_precise;
        a.actual_seq_lengths = self.actual_seq_lengths.as_deref();
        a.kv_padding_size = self.kv_padding_size;
        a.atten_mask = host
            .atten_mask
            .zip(dims.mask_cols)
            .map(|(data, cols)| IfaMask { data, cols });
        a.pse_shift = host.pse_shift.zip(dims.pse_shape).map(|(data, p)| IfaPse {
            data,
            batched: p[0] != 1,
            cols: p[3],
        });
        a.antiquant =
            host.antiquant_scale
                .zip(dims.antiquant_per_channel)
                .map(|(scale, per_channel)| Antiquant {
                    scale,
                    offset: host.antiquant_offset,
                    per_channel,
                });
        a
    }

    /// The reference's paged KV input for validated caches; a call `dims` does not describe as
    /// paged, or a spec without `blocktable`, is refused naming `blocktable`.
    pub fn paged<'a>(
        &'a self,
        dims: &IncreDims,
        key_cache: &'a [f32],
        value_cache: &'a [f32],
    ) -> Result<KvInput<'a, f32>> {
        let (
            KvDims::Paged {
                layout,
                max_blocks,
                block_size,
                ..
            },
            Some(table),
        ) = (&dims.kv, self.block_table.as_ref())
        else {
            return Err(AttnError::invalid(
                "blocktable",
                "the paged KV input of a call validated without a block table",
            ));
        };
        Ok(KvInput::Paged {
            key_cache,
            value_cache,
            layout: *layout,
            block_table: &table.data,
            max_blocks_per_seq: *max_blocks,
            block_size: *block_size,
        })
    }

    /// The reference's post-quant view of `quantScale2` / `quantOffset2`.
    pub fn post_quant(&self) -> Option<IfaPostQuant<'_>> {
        self.post_quant.as_ref().map(|q| IfaPostQuant {
            scale: &q.scale,
            offset: q.offset.as_deref(),
        })
    }
}
