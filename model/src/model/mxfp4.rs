//! MXFP4 expert weights as the Hub stores openai/gpt-oss-* (`*_blocks` / `*_scales`),
//! dequantized on load as transformers dequantizes them (`_convert_moe_packed_tensors` in
//! `transformers/integrations/mxfp4.py`, 5.24).

use burn_ascend::AttnError;

/// FP4 E2M1 values by nibble (`FP4_VALUES` in transformers' `integrations/mxfp4.py`).
const FP4_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Dequantizes `blocks [E, R, G, B]` (u8, two FP4 values per byte, the low nibble first) with
/// `scales [E, R, G]` (u8, E8M0: the exponent plus 127) into f32 `[E, G·2B, R]`:
/// `value = FP4_VALUES[nibble] · 2^(scale − 127)` laid out `[E, R, G·2B]` and transposed to
/// `[E, G·2B, R]` (transformers' final `transpose(1, 2)`: the `x @ W` layout of
/// `GptOssExperts`). Bit-identical to transformers in f32: `torch.ldexp` multiplies by
/// `2^exp` computed in f32, which is exact down to subnormals and 0 below `2^-149`, and so is
/// the power of two here.
pub fn dequantize(
    name: &str,
    blocks: &[u8],
    blocks_shape: &[usize],
    scales: &[u8],
    scales_shape: &[usize],
) -> Result<(Vec<f32>, Vec<usize>), AttnError> {
    let bad = |rule: String| Err(AttnError::invalid("checkpoint", format!("{name}: {rule}")));
    if blocks_shape.len() != 4 || scales_shape != &blocks_shape[..3] {
        return bad(format!(
            "blocks must be [E, R, G, B] and scales [E, R, G], got {blocks_shape:?} and {scales_shape:?}"
        ));
    }
    let [e, r, g, b] = [
        blocks_shape[0],
        blocks_shape[1],
        blocks_shape[2],
        blocks_shape[3],
    ];
    if blocks.len() != e * r * g * b || scales.len() != e * r * g {
        return bad("data length does not match the shape".into());
    }
    let cols = g * 2 * b;
    let mut out = vec![0f32; e * r * cols];
    for ex in 0..e {
        for row in 0..r {
            for grp in 0..g {
                let s = (ex * r + row) * g + grp;
                // 2^(scale − 127) in f32 as torch.pow(2.0, int) gives it: exact powers of two,
                // 0 below the smallest subnormal, inf above f32's range.
                let p = (2f64).powi(i32::from(scales[s]) - 127) as f32;
                for byte in 0..b {
                    let v = blocks[s * b + byte];
                    let col = grp * 2 * b + 2 * byte;
                    // Transposed: element (row, col) of expert `ex` goes to (col, row).
                    out[(ex * cols + col) * r + row] = FP4_VALUES[usize::from(v & 0x0f)] * p;
                    out[(ex * cols + col + 1) * r + row] = FP4_VALUES[usize::from(v >> 4)] * p;
                }
            }
        }
    }
    Ok((out, vec![e, cols, r]))
}
