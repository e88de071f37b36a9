//! CPU reference for `aclnnScatterPaKvCache`.
//!
//! Two entry points, each with a pure check that validates everything a write could touch,
//! separate from the write path so a caller can reject a call before mutating any cache:
//! - [`check_scatter`] / [`scatter_pa_kv_cache`]: scenarios 1 (PA_NZ), 2 (Norm, None or Nct),
//!   6 (key only), and NHSD (spec §6; listed in the kernel sources, not in the aclnn doc);
//! - [`check_compressed_scatter`] / [`scatter_pa_kv_cache_compressed`]: scenarios 4 (Alibi) and
//!   5 (Rope / Omni), 3-D key.
//!
//! Scenario 3 (4-D key, Ascend 950 only) is not modelled.
//!
//! Slot semantics (spec §6, and the ops-transformer kernel's CopyOut): for slot `s`,
//! `blk = s / block_size`, `off = s % block_size`; **`s < 0` skips the token**. The kernel also
//! skips `s >= num_blocks·block_size`; the write path does the same, and [`check_scatter`]
//! rejects such slots (the docs require `[0, num_blocks·block_size)`), as well as duplicates.

/// Slot / length index types (`slotMapping`, `compressLens`, … are INT32 or INT64).
pub trait SlotIndex: Copy {
    fn to_i64(self) -> i64;
}
impl SlotIndex for i32 {
    fn to_i64(self) -> i64 {
        self as i64
    }
}
impl SlotIndex for i64 {
    fn to_i64(self) -> i64 {
        self
    }
}

/// Element conversion, only needed by the Rope/Omni mean reduction.
/// The element trait of the kernels (f64, f32, f16, bf16, i8), under the name this module used.
pub use crate::Element as RefElem;

/// `cacheMode` (plus NHSD from the spec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// `"Norm"` / null: cache `[nb, bs, N, D]`, `cache[blk, off, :, :] = key[t]`.
    Norm,
    /// `"PA_NZ"`: cache `[nb, N·D/last, bs, last]` with `last = 32 / sizeof(T)`;
    /// `cache[blk, c, off, e] = key_flat[t][c·last + e]`.
    PaNz,
    /// NHSD: cache `[nb, N, bs, D]`, `cache[blk, n, off, :] = key[t, n, :]` (spec §6 only;
    /// UNCONFIRMED which aclnn string selects it).
    Nhsd,
}

impl CacheMode {
    /// The `cacheMode` attribute string, `None` for NHSD (no aclnn string is confirmed for it,
    /// so it never reaches aclnn: the backend runs it on the host).
    pub fn as_attr(self) -> Option<&'static str> {
        match self {
            Self::Norm => Some("Norm"),
            Self::PaNz => Some("PA_NZ"),
            Self::Nhsd => None,
        }
    }

    /// The mode of a `cacheMode` string (empty = `Norm`, as a null attribute).
    pub fn from_attr(s: &str) -> Option<Self> {
        match s {
            "" => Some(Self::Norm),
            s => [Self::Norm, Self::PaNz]
                .into_iter()
                .find(|m| m.as_attr() == Some(s)),
        }
    }
}

/// `scatterMode` for the non-compressed entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScatterMode {
    /// `"None"` / null: key is `[T, N, Dk]` contiguous.
    None,
    /// `"Nct"`: key token `t` is the `N·Dk` contiguous elements starting at
    /// `t·strides[0] + offsets[0]`; value uses `strides[1]` / `offsets[1]`. Norm only.
    Nct {
        strides: [usize; 2],
        offsets: [usize; 2],
    },
}

/// `32 / sizeof(T)`: the PA_NZ inner dimension (16 for f16/bf16, 32 for int8, 8 for f32).
pub fn nz_last_dim<T>() -> usize {
    32 / std::mem::size_of::<T>()
}

/// Inputs of the non-compressed scatter. `value == None` is scenario 6 (key only; then no
/// value cache is passed).
///
/// Preconditions (all checked by [`check_scatter`]):
/// - `key` holds `num_tokens` tokens of `N·Dk` elements (Nct: at the strided positions);
///   same for `value` with `Dv`; `slot_mapping.len() == num_tokens`;
/// - key cache `nb·bs·N·Dk` elements (all modes), value cache `nb·bs·N·Dv`;
/// - PA_NZ: `N·Dk` and `N·Dv` multiples of `last` (N·D·sizeof multiple of 32);
/// - Nct only with Norm; strides > 0;
/// - slots `< nb·bs`, unique among the non-negative ones; negative slots are skipped.
#[derive(Clone, Copy, Debug)]
pub struct PlainScatterArgs<'a, T, I> {
    pub key: &'a [T],
    pub value: Option<&'a [T]>,
    pub slot_mapping: &'a [I],
    pub num_tokens: usize,
    pub num_heads: usize,
    pub k_head_size: usize,
    pub v_head_size: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    pub cache_mode: CacheMode,
    pub scatter_mode: ScatterMode,
}

impl<T, I: SlotIndex> PlainScatterArgs<'_, T, I> {
    /// Start of token `t`'s `N·D` elements in key (`which = 0`) or value (`which = 1`).
    fn src_start(&self, which: usize, t: usize, d: usize) -> usize {
        match self.scatter_mode {
            ScatterMode::None => t * self.num_heads * d,
            ScatterMode::Nct { strides, offsets } => t * strides[which] + offsets[which],
        }
    }

    /// Element index in a cache of head size `d` for slot `s` and flat element `e < N·d`.
    fn dst(&self, s: usize, e: usize, d: usize, last: usize) -> usize {
        let (bs, nd) = (self.block_size, self.num_heads * d);
        let (blk, off) = (s / bs, s % bs);
        match self.cache_mode {
            CacheMode::Norm => s * nd + e,
            CacheMode::PaNz => ((blk * (nd / last) + e / last) * bs + off) * last + e % last,
            CacheMode::Nhsd => ((blk * self.num_heads + e / d) * bs + off) * d + e % d,
        }
    }
}

/// Validates everything [`scatter_pa_kv_cache`] reads or writes. Pure.
pub fn check_scatter<T, I: SlotIndex>(
    a: &PlainScatterArgs<T, I>,
    key_cache_len: usize,
    value_cache_len: Option<usize>,
) -> Result<(), String> {
    let max = a.num_blocks * a.block_size;
    if a.slot_mapping.len() != a.num_tokens {
        return Err(format!(
            "slotMapping has {} entries, expected num_tokens = {}",
            a.slot_mapping.len(),
            a.num_tokens
        ));
    }
    if a.value.is_some() != value_cache_len.is_some() {
        return Err("value and valueCache must both be present or both be empty".into());
    }
    if a.num_heads == 0 || a.k_head_size == 0 || a.block_size == 0 {
        return Err("num_heads, k_head_size and block_size must be positive".into());
    }
    let mut parts = vec![(0usize, a.key.len(), a.k_head_size, key_cache_len, "key")];
    if let (Some(v), Some(vc)) = (a.value, value_cache_len) {
        if a.v_head_size == 0 {
            return Err("v_head_size must be positive".into());
        }
        parts.push((1, v.len(), a.v_head_size, vc, "value"));
    }
    for (which, src_len, d, cache_len, name) in parts {
        let nd = a.num_heads * d;
        if cache_len != max * nd {
            return Err(format!(
                "{name} cache has {cache_len} elements, expected {}",
                max * nd
            ));
        }
        if a.cache_mode == CacheMode::PaNz && !nd.is_multiple_of(nz_last_dim::<T>()) {
            return Err(format!(
                "PA_NZ: {name} N·D = {nd} is not a multiple of {}",
                nz_last_dim::<T>()
            ));
        }
        if let ScatterMode::Nct { strides, .. } = a.scatter_mode {
            if a.cache_mode != CacheMode::Norm {
                return Err("Nct scatter mode requires cacheMode Norm".into());
            }
            if strides[which] == 0 {
                return Err(format!("Nct: {name} stride must be > 0"));
            }
        }
        if a.num_tokens > 0 {
            let need = a.src_start(which, a.num_tokens - 1, d) + nd;
            if src_len < need {
                return Err(format!("{name} has {src_len} elements, needs {need}"));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (t, s) in a.slot_mapping.iter().enumerate() {
        let s = s.to_i64();
        if s < 0 {
            continue;
        }
        if s as u64 >= max as u64 {
            return Err(format!("slotMapping[{t}] = {s} out of range [0, {max})"));
        }
        if !seen.insert(s) {
            return Err(format!("slotMapping[{t}] = {s} is a duplicate"));
        }
    }
    Ok(())
}

/// Writes key (and value) tokens into the caches. Tokens with a negative or out-of-range slot
/// are skipped. Assumes [`check_scatter`] passed (otherwise it may panic, never UB).
pub fn scatter_pa_kv_cache<T: Copy, I: SlotIndex>(
    a: &PlainScatterArgs<T, I>,
    key_cache: &mut [T],
    value_cache: Option<&mut [T]>,
) {
    let last = nz_last_dim::<T>();
    let max = (a.num_blocks * a.block_size) as i64;
    let mut jobs: Vec<(usize, &[T], usize, &mut [T])> = vec![(0, a.key, a.k_head_size, key_cache)];
    if let (Some(v), Some(vc)) = (a.value, value_cache) {
        jobs.push((1, v, a.v_head_size, vc));
    }
    for (which, src, d, cache) in jobs {
        for t in 0..a.num_tokens {
            let s = a.slot_mapping[t].to_i64();
            if s < 0 || s >= max {
                continue;
            }
            let start = a.src_start(which, t, d);
            for e in 0..a.num_heads * d {
                cache[a.dst(s as usize, e, d, last)] = src[start + e];
            }
        }
    }
}

/// `scatterMode` of the compressed entry point (cache `[nb, bs, 1, D]`, one slot = `D`
/// elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompressMode {
    /// For `(b, h)`: the last `c = compressLens[b·N + h]` tokens of sequence `b`, head `h`,
    /// go to slots `slot[b·N + h] + k`, `k = 0..c` (position `seqLen_b − c + k`; positions < 0
    /// are skipped, as in the kernel).
    Alibi,
    /// For `(b, h)` with `o = compressSeqOffset[b·N + h]`, `w = compressLens[b·N + h]`,
    /// `L = seqLens[b]`, `s0 = slot[b·N + h]`:
    /// positions `[0, min(o, L))` → slots `s0 + p`; the mean of positions `[o, min(o + w, L))`
    /// → slot `s0 + o` (not written if that window is empty); positions `[o + w, L)` → slots
    /// `s0 + o + 1 + k`. Spec: "partially UNCONFIRMED". The ops-transformer kernel's third
    /// step appears to re-read from position 0; the reference implements the documented
    /// intent (the tokens after the window).
    Rope,
    /// Same data movement as `Rope` in the reference (UNCONFIRMED: the spec does not
    /// distinguish them).
    Omni,
}

/// Inputs of the compressed scatter (scenarios 4 and 5): key `[num_tokens, N, Dk]`, value
/// `[num_tokens, N, Dv]` (or `None`: key only), sequence `b` occupies tokens
/// `[Σ_{b'<b} seqLens[b'], … + seqLens[b])`.
///
/// Preconditions (checked by [`check_compressed_scatter`]): `slot_mapping`, `compress_lens`
/// (and `compress_seq_offset` for Rope/Omni) have `B·N` entries, `seq_lens` has `B`, all
/// lengths/offsets non-negative, `Σ seqLens == num_tokens`; caches have `nb·bs·Dk` (`Dv`)
/// elements; every written slot is `< nb·bs` and written once; start slots are non-negative
/// (a negative start slot skips that `(b, h)`: UNCONFIRMED, the kernel does not check it).
#[derive(Clone, Copy, Debug)]
pub struct CompressedScatterArgs<'a, T, I> {
    pub key: &'a [T],
    pub value: Option<&'a [T]>,
    pub slot_mapping: &'a [I],
    pub compress_lens: &'a [I],
    pub seq_lens: &'a [I],
    pub compress_seq_offset: Option<&'a [I]>,
    pub num_heads: usize,
    pub k_head_size: usize,
    pub v_head_size: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    pub mode: CompressMode,
}

/// One planned write: target slot, and the source positions (within the sequence) whose mean
/// is written (a single position for a plain copy).
struct Write {
    slot: i64,
    from: usize,
    to: usize,
}

impl<T, I: SlotIndex> CompressedScatterArgs<'_, T, I> {
    fn batch(&self) -> usize {
        self.seq_lens.len()
    }

    /// Writes for `(b, h)`, in the order the kernel performs them.
    fn plan(&self, b: usize, h: usize) -> Vec<Write> {
        let i = b * self.num_heads + h;
        let s0 = self.slot_mapping[i].to_i64();
        let len = self.seq_lens[b].to_i64().max(0);
        let c = self.compress_lens[i].to_i64().max(0);
        let mut w = Vec::new();
        if s0 < 0 {
            return w;
        }
        match self.mode {
            CompressMode::Alibi => {
                for k in 0..c {
                    let p = len - c + k;
                    if p >= 0 {
                        w.push(Write {
                            slot: s0 + k,
                            from: p as usize,
                            to: p as usize + 1,
                        });
                    }
                }
            }
            CompressMode::Rope | CompressMode::Omni => {
                let o = self.compress_seq_offset.map_or(0, |x| x[i].to_i64()).max(0);
                for p in 0..o.min(len) {
                    w.push(Write {
                        slot: s0 + p,
                        from: p as usize,
                        to: p as usize + 1,
                    });
                }
                let end = (o + c).min(len);
                if end > o {
                    w.push(Write {
                        slot: s0 + o,
                        from: o as usize,
                        to: end as usize,
                    });
                }
                for k in 0..(len - c - o).max(0) {
                    let p = o + c + k;
                    w.push(Write {
                        slot: s0 + o + 1 + k,
                        from: p as usize,
                        to: p as usize + 1,
                    });
                }
            }
        }
        w
    }

    fn seq_start(&self, b: usize) -> usize {
        self.seq_lens[..b]
            .iter()
            .map(|x| x.to_i64().max(0) as usize)
            .sum()
    }
}

/// Validates everything [`scatter_pa_kv_cache_compressed`] reads or writes. Pure.
pub fn check_compressed_scatter<T, I: SlotIndex>(
    a: &CompressedScatterArgs<T, I>,
    key_cache_len: usize,
    value_cache_len: Option<usize>,
) -> Result<(), String> {
    let bn = a.batch() * a.num_heads;
    let max = (a.num_blocks * a.block_size) as i64;
    if a.num_heads == 0 || a.k_head_size == 0 || a.block_size == 0 {
        return Err("num_heads, k_head_size and block_size must be positive".into());
    }
    if a.slot_mapping.len() != bn || a.compress_lens.len() != bn {
        return Err(format!(
            "slotMapping and compressLens need batch·num_heads = {bn} entries"
        ));
    }
    match (a.mode, a.compress_seq_offset) {
        (CompressMode::Alibi, _) => {}
        (_, Some(o)) if o.len() == bn => {
            if o.iter().any(|x| x.to_i64() < 0) {
                return Err("compressSeqOffset must be non-negative".into());
            }
        }
        _ => {
            return Err(format!(
                "Rope/Omni need compressSeqOffset with {bn} entries"
            ))
        }
    }
    if a.seq_lens
        .iter()
        .chain(a.compress_lens)
        .any(|x| x.to_i64() < 0)
    {
        return Err("seqLens and compressLens must be non-negative".into());
    }
    let tokens: i64 = a.seq_lens.iter().map(|x| x.to_i64()).sum();
    if a.value.is_some() != value_cache_len.is_some() {
        return Err("value and valueCache must both be present or both be empty".into());
    }
    let mut parts = vec![(a.key.len(), a.k_head_size, key_cache_len, "key")];
    if let (Some(v), Some(vc)) = (a.value, value_cache_len) {
        parts.push((v.len(), a.v_head_size, vc, "value"));
    }
    for (len, d, cache_len, name) in parts {
        if len as i64 != tokens * (a.num_heads * d) as i64 {
            return Err(format!(
                "{name} has {len} elements, expected Σ seqLens · N · D = {}",
                tokens * (a.num_heads * d) as i64
            ));
        }
        if cache_len as i64 != max * d as i64 {
            return Err(format!(
                "{name} cache has {cache_len} elements, expected {}",
                max * d as i64
            ));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for b in 0..a.batch() {
        for h in 0..a.num_heads {
            for w in a.plan(b, h) {
                if w.slot >= max {
                    return Err(format!("(b {b}, h {h}) writes slot {} >= {max}", w.slot));
                }
                if !seen.insert(w.slot) {
                    return Err(format!("slot {} is written twice", w.slot));
                }
            }
        }
    }
    Ok(())
}

/// Writes compressed key (and value) into `[nb, bs, 1, D]` caches. Writes to slots
/// `>= nb·bs` are skipped (as in the kernel). Assumes [`check_compressed_scatter`] passed.
/// The Rope/Omni mean is computed in f64 and rounded nearest-even to `T` (the kernel
/// accumulates in f32 for floating types, UNCONFIRMED for integer types).
pub fn scatter_pa_kv_cache_compressed<T: RefElem, I: SlotIndex>(
    a: &CompressedScatterArgs<T, I>,
    key_cache: &mut [T],
    value_cache: Option<&mut [T]>,
) {
    let max = (a.num_blocks * a.block_size) as i64;
    let n = a.num_heads;
    let mut jobs: Vec<(&[T], usize, &mut [T])> = vec![(a.key, a.k_head_size, key_cache)];
    if let (Some(v), Some(vc)) = (a.value, value_cache) {
        jobs.push((v, a.v_head_size, vc));
    }
    for (src, d, cache) in jobs {
        for b in 0..a.batch() {
            let base = a.seq_start(b);
            for h in 0..n {
                for w in a.plan(b, h) {
                    if w.slot < 0 || w.slot >= max {
                        continue;
                    }
                    let count = (w.to - w.from) as f64;
                    for e in 0..d {
                        let el = |p: usize| src[((base + p) * n + h) * d + e];
                        cache[w.slot as usize * d + e] = if w.to - w.from == 1 {
                            el(w.from)
                        } else {
                            T::from_f64((w.from..w.to).map(|p| el(p).to_f64()).sum::<f64>() / count)
                        };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// Distinct, exactly representable values.
    fn seq(n: usize, base: f32) -> Vec<f32> {
        (0..n).map(|i| base + i as f32).collect()
    }

    /// Reads slot `s` back from a cache as `N·D` flat elements, from first principles.
    fn read_slot<T: Copy>(
        cache: &[T],
        mode: CacheMode,
        s: usize,
        n: usize,
        d: usize,
        bs: usize,
        last: usize,
    ) -> Vec<T> {
        let (blk, off) = (s / bs, s % bs);
        (0..n * d)
            .map(|e| match mode {
                CacheMode::Norm => cache[((blk * bs + off) * n + e / d) * d + e % d],
                CacheMode::PaNz => {
                    cache[((blk * (n * d / last) + e / last) * bs + off) * last + e % last]
                }
                CacheMode::Nhsd => cache[((blk * n + e / d) * bs + off) * d + e % d],
            })
            .collect()
    }

    fn args<'a>(
        key: &'a [f32],
        value: Option<&'a [f32]>,
        slots: &'a [i32],
        mode: CacheMode,
    ) -> PlainScatterArgs<'a, f32, i32> {
        PlainScatterArgs {
            key,
            value,
            slot_mapping: slots,
            num_tokens: slots.len(),
            num_heads: 2,
            k_head_size: 4,
            v_head_size: 8,
            num_blocks: 3,
            block_size: 4,
            cache_mode: mode,
            scatter_mode: ScatterMode::None,
        }
    }

    #[test]
    fn round_trip_norm_nz_nhsd_with_negative_slot_skipped() {
        let slots = [5i32, -1, 0, 11];
        let key = seq(4 * 8, 1.0);
        let value = seq(4 * 16, 1000.0);
        for mode in [CacheMode::Norm, CacheMode::PaNz, CacheMode::Nhsd] {
            let a = args(&key, Some(&value), &slots, mode);
            let mut kc = vec![0.0f32; 12 * 8];
            let mut vc = vec![0.0f32; 12 * 16];
            check_scatter(&a, kc.len(), Some(vc.len())).unwrap();
            scatter_pa_kv_cache(&a, &mut kc, Some(&mut vc));
            let last = nz_last_dim::<f32>();
            assert_eq!(last, 8);
            for (t, &s) in slots.iter().enumerate() {
                if s < 0 {
                    continue;
                }
                assert_eq!(
                    read_slot(&kc, mode, s as usize, 2, 4, 4, last),
                    &key[t * 8..t * 8 + 8],
                    "{mode:?} key t={t}"
                );
                assert_eq!(
                    read_slot(&vc, mode, s as usize, 2, 8, 4, last),
                    &value[t * 16..t * 16 + 16],
                    "{mode:?} value t={t}"
                );
            }
            // Token 1 (slot −1) is nowhere: exactly 3 tokens' worth of non-zero elements.
            assert_eq!(kc.iter().filter(|&&x| x != 0.0).count(), 3 * 8);
            assert!(!kc.contains(&key[8]));
        }
    }

    #[test]
    fn pa_nz_layout_by_hand_f16() {
        // f16: last = 16. N·D = 32 → cache [nb, 2, bs, 16]. Slot 1 (blk 0, off 1) gets token 0:
        // element e goes to [0, e / 16, 1, e % 16].
        assert_eq!(nz_last_dim::<f16>(), 16);
        assert_eq!(nz_last_dim::<i8>(), 32);
        let key: Vec<f16> = (0..32).map(|i| f16::from_f32(i as f32)).collect();
        let slots = [1i64];
        let a = PlainScatterArgs {
            key: &key,
            value: None,
            slot_mapping: &slots[..],
            num_tokens: 1,
            num_heads: 2,
            k_head_size: 16,
            v_head_size: 0,
            num_blocks: 1,
            block_size: 2,
            cache_mode: CacheMode::PaNz,
            scatter_mode: ScatterMode::None,
        };
        let mut kc = vec![f16::ZERO; 2 * 2 * 16];
        check_scatter(&a, kc.len(), None).unwrap();
        scatter_pa_kv_cache(&a, &mut kc, None);
        // [0, c, 1, e]: index (c·2 + 1)·16 + e.
        assert_eq!(kc[16 + 3], f16::from_f32(3.0));
        assert_eq!(kc[(2 + 1) * 16 + 5], f16::from_f32(21.0));
        assert_eq!(kc[0], f16::ZERO);
    }

    #[test]
    fn nct_strided_source_and_key_only() {
        // Key token t lives at t·20 + 3 (N·Dk = 8 contiguous elements).
        let (stride, offset) = (20usize, 3usize);
        let slots = [2i32, 7];
        let mut strided = vec![-9.0f32; stride * 2 + offset + 8];
        for t in 0..2 {
            for e in 0..8 {
                strided[t * stride + offset + e] = (t * 100 + e) as f32;
            }
        }
        let mut a = args(&strided, None, &slots, CacheMode::Norm);
        a.scatter_mode = ScatterMode::Nct {
            strides: [stride, 1],
            offsets: [offset, 0],
        };
        let mut kc = vec![0.0f32; 12 * 8];
        check_scatter(&a, kc.len(), None).unwrap();
        scatter_pa_kv_cache(&a, &mut kc, None);
        for (t, &s) in slots.iter().enumerate() {
            let expect: Vec<f32> = (0..8).map(|e| (t * 100 + e) as f32).collect();
            assert_eq!(
                read_slot(&kc, CacheMode::Norm, s as usize, 2, 4, 4, 8),
                expect
            );
        }
        assert!(!kc.contains(&-9.0));
        // Nct with PA_NZ is rejected.
        a.cache_mode = CacheMode::PaNz;
        assert!(check_scatter(&a, kc.len(), None).is_err());
    }

    #[test]
    fn check_rejects_bad_slots_and_shapes() {
        let key = seq(3 * 8, 1.0);
        let kc_len = 12 * 8;
        assert!(check_scatter(
            &args(&key, None, &[0, 12, 1], CacheMode::Norm),
            kc_len,
            None
        )
        .is_err());
        assert!(
            check_scatter(&args(&key, None, &[4, 4, 1], CacheMode::Norm), kc_len, None).is_err()
        );
        assert!(check_scatter(
            &args(&key, None, &[-1, -1, 1], CacheMode::Norm),
            kc_len,
            None
        )
        .is_ok());
        assert!(check_scatter(&args(&key, None, &[0, 1], CacheMode::Norm), kc_len, None).is_ok());
        assert!(check_scatter(
            &args(&key, None, &[0, 1, 2], CacheMode::Norm),
            kc_len - 1,
            None
        )
        .is_err());
        assert!(check_scatter(
            &args(&key, None, &[0, 1, 2], CacheMode::Norm),
            kc_len,
            Some(kc_len)
        )
        .is_err());
        // Out-of-range slots are also skipped by the write path (no panic, nothing written).
        let a = args(&key, None, &[12, 0, 1], CacheMode::Norm);
        let mut kc = vec![0.0f32; kc_len];
        scatter_pa_kv_cache(&a, &mut kc, None);
        assert_eq!(kc.iter().filter(|&&x| x != 0.0).count(), 2 * 8);
    }

    fn compressed<'a>(
        key: &'a [f32],
        slots: &'a [i32],
        clens: &'a [i32],
        seq_lens: &'a [i32],
        offsets: Option<&'a [i32]>,
        mode: CompressMode,
    ) -> CompressedScatterArgs<'a, f32, i32> {
        CompressedScatterArgs {
            key,
            value: None,
            slot_mapping: slots,
            compress_lens: clens,
            seq_lens,
            compress_seq_offset: offsets,
            num_heads: 2,
            k_head_size: 1,
            v_head_size: 1,
            num_blocks: 2,
            block_size: 8,
            mode,
        }
    }

    /// key[t, h, 0] = 10·t + h for sequences of lengths `lens`.
    fn tokens(total: usize) -> Vec<f32> {
        (0..total)
            .flat_map(|t| [10.0 * t as f32, 10.0 * t as f32 + 1.0])
            .collect()
    }

    #[test]
    fn alibi_copies_last_compress_lens_tokens() {
        // B = 2, N = 2, seqLens = [4, 3]: batch 1 starts at token 4.
        let key = tokens(7);
        let seq_lens = [4, 3];
        let slots = [0, 4, 8, 11];
        let clens = [2, 1, 3, 5]; // (1, 1) asks for 5 > 3: positions −2, −1 are skipped.
        let a = compressed(&key, &slots, &clens, &seq_lens, None, CompressMode::Alibi);
        let mut kc = vec![-1.0f32; 16];
        check_compressed_scatter(&a, kc.len(), None).unwrap();
        scatter_pa_kv_cache_compressed(&a, &mut kc, None);
        // (0,0): positions 2, 3 → slots 0, 1: tokens 2, 3 head 0.
        assert_eq!(&kc[0..3], &[20.0, 30.0, -1.0]);
        // (0,1): position 3 → slot 4.
        assert_eq!(&kc[4..6], &[31.0, -1.0]);
        // (1,0): positions 0, 1, 2 of batch 1 = tokens 4, 5, 6 → slots 8, 9, 10.
        assert_eq!(&kc[8..11], &[40.0, 50.0, 60.0]);
        // (1,1): k = 0, 1 skipped (negative positions, slots 11, 12 untouched);
        // k = 2, 3, 4 → positions 0, 1, 2 → slots 13, 14, 15.
        assert_eq!(&kc[11..16], &[-1.0, -1.0, 41.0, 51.0, 61.0]);
    }

    #[test]
    fn rope_copies_prefix_means_window_copies_rest() {
        // One batch, N = 2, L = 6, head 0: offset 2, window 3 → slots s0+0, s0+1 ← p0, p1;
        // s0+2 ← mean(p2, p3, p4); s0+3 ← p5. Head 1: offset 0, window 2 → mean(p0, p1), then p2..p5.
        let key = tokens(6);
        let seq_lens = [6];
        let slots = [0, 8];
        let clens = [3, 2];
        let offs = [2, 0];
        for mode in [CompressMode::Rope, CompressMode::Omni] {
            let a = compressed(&key, &slots, &clens, &seq_lens, Some(&offs), mode);
            let mut kc = vec![-1.0f32; 16];
            check_compressed_scatter(&a, kc.len(), None).unwrap();
            scatter_pa_kv_cache_compressed(&a, &mut kc, None);
            assert_eq!(&kc[0..5], &[0.0, 10.0, 30.0, 50.0, -1.0]);
            assert_eq!(&kc[8..14], &[6.0, 21.0, 31.0, 41.0, 51.0, -1.0]);
        }
        // Rope without compressSeqOffset is rejected.
        let a = compressed(&key, &slots, &clens, &seq_lens, None, CompressMode::Rope);
        assert!(check_compressed_scatter(&a, 16, None).is_err());
    }

    #[test]
    fn compressed_check_rejects_overlaps_and_range() {
        let key = tokens(4);
        let seq_lens = [4];
        // Head 0 writes slots 0..2, head 1 writes 1..3: overlap.
        let a = compressed(&key, &[0, 1], &[2, 2], &seq_lens, None, CompressMode::Alibi);
        assert!(check_compressed_scatter(&a, 16, None).is_err());
        // Slot 15 + 1 = 16 is out of range.
        let a = compressed(
            &key,
            &[0, 15],
            &[2, 2],
            &seq_lens,
            None,
            CompressMode::Alibi,
        );
        assert!(check_compressed_scatter(&a, 16, None).is_err());
        let a = compressed(
            &key,
            &[0, 14],
            &[2, 2],
            &seq_lens,
            None,
            CompressMode::Alibi,
        );
        assert!(check_compressed_scatter(&a, 16, None).is_ok());
        // Wrong key length (Σ seqLens · N · D).
        let a = compressed(
            &key[..7],
            &[0, 14],
            &[2, 2],
            &seq_lens,
            None,
            CompressMode::Alibi,
        );
        assert!(check_compressed_scatter(&a, 16, None).is_err());
    }
}
