//! Output post-quantisation to int8 through `quantScale2` / `quantOffset2`, one rule for the
//! attention ops that take it (PFA, IFA): the ops differ only in how many channels the scale
//! has, which each op's alias documents ([`crate::prompt::PfaPostQuant`],
//! [`crate::incre::IfaPostQuant`]).

use half::f16;

/// int8 output through `quantScale2` / `quantOffset2`, values widened to f32 (FLOAT32 or
/// BFLOAT16 on the device; bf16 → f32 is exact). `scale.len()` is 1 (per-tensor) or one value
/// per output channel (index `h·D + d`); `offset`, if present, has the same length as `scale`;
/// absent means 0.
#[derive(Clone, Copy, Debug)]
pub struct PostQuant<'a> {
    pub scale: &'a [f32],
    pub offset: Option<&'a [f32]>,
}

impl PostQuant<'_> {
    /// `y = x·scale + offset`, then cast to f16 (round-to-nearest-even) and f16 → int8
    /// (round-to-nearest-even), as in the ops-transformer post-quant vector code
    /// (`vf_post_quant.h`: `Muls`, `Adds`, `Cast<half, float, CAST_RINT>`,
    /// `Cast<int8, half, CAST_RINT>`). The kernel's cast trait says `NO_SAT`; saturation to
    /// `[-128, 127]` is what the hardware f16→s8 conversion does (UNCONFIRMED) and what the
    /// reference does. The docs (约束说明) give no rounding rule.
    pub fn quantize(&self, x: f64, channel: usize) -> i8 {
        let pick = |v: &[f32]| -> f64 {
            if v.len() == 1 {
                v[0] as f64
            } else {
                v[channel] as f64
            }
        };
        let scale = pick(self.scale);
        let offset = self.offset.map_or(0.0, pick);
        let y = f16::from_f64(x * scale + offset).to_f64();
        y.round_ties_even() as i8
    }
}
