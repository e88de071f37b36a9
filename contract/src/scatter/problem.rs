//! The plain-data description of `aclnnScatterPaKvCache`: its layouts, modes, the argument struct of one
//! call and the addressing and masking rules every implementation shares (the f64 reference
//! in `burn-ascend-kernels`, the fast CPU kernels, the simulation, the aclnn builders).

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
    /// `t·strides[0] + offsets[0]`, value token `t` the `N·Dv` starting at
    /// `t·strides[0] + offsets[1]`: the kernel never reads `strides[1]`
    /// (ops-transformer `scatter_pa_kv_cache_nd.h`, `ProcessKVEqual` / `ProcessKVUnequalIncrement`
    /// use `strideK_` for both, and `scatter_pa_kv_cache_base.h` `CopyToCache<NCT>` starts every
    /// source at `strideK_ · t` over `src[offsetK_ | offsetV_]`). Norm only.
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
    /// Start of token `t`'s `N·D` elements in key (`which = 0`) or value (`which = 1`), `None`
    /// when it overflows. Nct strides both by `strides[0]` (see [`ScatterMode::Nct`]).
    pub fn src_start(&self, which: usize, t: usize, d: usize) -> Option<usize> {
        match self.scatter_mode {
            ScatterMode::None => t.checked_mul(self.num_heads)?.checked_mul(d),
            ScatterMode::Nct { strides, offsets } => {
                t.checked_mul(strides[0])?.checked_add(offsets[which])
            }
        }
    }

    /// Element index in a cache of head size `d` for slot `s` and flat element `e < N·d`.
    pub fn dst(&self, s: usize, e: usize, d: usize, last: usize) -> usize {
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
    // Every size below is computed with checked arithmetic: the dimensions are user input.
    let overflow = |what: &str| format!("{what} overflows usize");
    let max = a
        .num_blocks
        .checked_mul(a.block_size)
        .ok_or_else(|| overflow("num_blocks·block_size"))?;
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
        let nd = a.num_heads.checked_mul(d).ok_or_else(|| overflow("N·D"))?;
        let want = max
            .checked_mul(nd)
            .ok_or_else(|| overflow("num_blocks·block_size·N·D"))?;
        if cache_len != want {
            return Err(format!(
                "{name} cache has {cache_len} elements, expected {want}"
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
            // Only the key stride is read, for value tokens too.
            if strides[0] == 0 {
                return Err("Nct: the key stride strides[0] must be > 0".into());
            }
        }
        if a.num_tokens > 0 {
            let need = a
                .src_start(which, a.num_tokens - 1, d)
                .and_then(|s| s.checked_add(nd))
                .ok_or_else(|| overflow(&format!("{name}: (T−1)·strides[0] + offset + N·D")))?;
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

/// `scatterMode` of the compressed entry point (cache `[nb, bs, 1, D]`, one slot = `D`
/// elements). The data movement follows the ops-transformer kernels (named per mode), which
/// differ from the older spec text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompressMode {
    /// For `(b, h)`: the last `c = compressLens[b·N + h]` tokens of sequence `b`, head `h`,
    /// go to slots `slot[b·N + h] + k`, `k = 0..c` (`scatter_pa_kv_cache_compress_alibi.h`).
    /// `c ≤ seqLens[b]` is required: the kernel reads the last `c` rows before the sequence's
    /// end without a bound, so a larger `c` would read the previous sequence's tokens.
    Alibi,
    /// For `(b, h)` with `o = compressSeqOffset[b·N + h]`, `w = compressLens[b·N + h]`,
    /// `L = seqLens[b]`, `s0 = slot[b·N + h]` (`scatter_pa_kv_cache_compress_rope.h`,
    /// `Compress4Rope`, and `scatter_pa_kv_cache_base.h` `ParamSet`):
    /// - `w = 0` or `o = L` (`offsetIdx = seqLen`, `headWin = 0`): the whole sequence is copied
    ///   contiguously, position `p` → slot `s0 + p`, no gap;
    /// - otherwise (`o + w ≤ L`): PART A positions `[0, o)` → slots `s0 + p`; PART B the mean of
    ///   positions `[o, o + w)` (summed in f32 in order, divided by `w` in f32, rounded to the
    ///   element type) → slot `s0 + o`; PART C positions `[o + w, L)` → slots `s0 + o + 1 + k`.
    Rope,
    /// As `Rope`, but the window's tokens are **discarded**, not averaged (PART B only zeroes
    /// the window when `o = L`; `ComputeAvg` is commented out), and PART C goes to
    /// `s0 + o + k` (`scatter_pa_kv_cache_compress_omni.h`, `Compress4Rope` / `Copy2Cache<false>`).
    Omni,
}

/// Inputs of the compressed scatter (scenarios 4 and 5): key `[num_tokens, N, Dk]`, value
/// `[num_tokens, N, Dv]` (or `None`: key only), sequence `b` occupies tokens
/// `[Σ_{b'<b} seqLens[b'], … + seqLens[b])`.
///
/// Preconditions (checked by [`check_compressed_scatter`]): `slot_mapping`, `compress_lens`
/// (and `compress_seq_offset` for Rope/Omni) have `B·N` entries, `seq_lens` has `B`, all
/// lengths/offsets non-negative, `Σ seqLens == num_tokens`; Alibi `compressLens ≤ seqLens`;
/// Rope/Omni with a window (`w > 0`, `o ≠ L`) `o + w ≤ L`, and `o ≤ L`; caches have `nb·bs·Dk`
/// (`Dv`) elements; every written slot is `< nb·bs` and written once; a negative start slot
/// skips that `(b, h)` (UNCONFIRMED: the kernel does not check it).
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressedWrite {
    /// Target slot.
    pub slot: i64,
    /// First source position (within the sequence).
    pub from: usize,
    /// One past the last source position.
    pub to: usize,
}

/// The writes of one `(b, h)` of a compressed scatter, in the kernel's order, for a start slot
/// `s0`, sequence length `len`, window `c` and offset `o` (ignored by Alibi). Preconditions
/// (checked by [`compressed_ranges_ok`]): all non-negative, Alibi `c ≤ len`, Rope/Omni
/// `o ≤ len` and `o + c ≤ len` when the window is effective. The number of writes is at
/// most `len`.
pub fn compressed_plan(
    mode: CompressMode,
    s0: i64,
    len: i64,
    c: i64,
    o: i64,
) -> Vec<CompressedWrite> {
    let one = |slot: i64, p: i64| CompressedWrite {
        slot,
        from: p as usize,
        to: p as usize + 1,
    };
    if s0 < 0 {
        return Vec::new();
    }
    match mode {
        CompressMode::Alibi => (0..c).map(|k| one(s0 + k, len - c + k)).collect(),
        CompressMode::Rope | CompressMode::Omni => {
            // ParamSet: `offsetIdx = headWin == 0 ? seqLen : offset`; Compress4Rope:
            // `headWin = offsetIdx == seqLen ? 0 : headWin`.
            let (o, w) = if c == 0 || o == len { (len, 0) } else { (o, c) };
            let mut out: Vec<CompressedWrite> = (0..o).map(|p| one(s0 + p, p)).collect();
            if w > 0 {
                let tail = if mode == CompressMode::Rope {
                    out.push(CompressedWrite {
                        slot: s0 + o,
                        from: o as usize,
                        to: (o + w) as usize,
                    });
                    s0 + o + 1
                } else {
                    s0 + o
                };
                out.extend(
                    (o + w..len)
                        .enumerate()
                        .map(|(k, p)| one(tail + k as i64, p)),
                );
            }
            out
        }
    }
}

/// Whether `(len, c, o)` of one `(b, h)` is inside what the kernel reads: all non-negative,
/// Alibi `c ≤ len`; Rope/Omni with an effective window (`c > 0`, `o ≠ len`) `o + c ≤ len`
/// (the kernel's `uint32 seqLen − offsetIdx − headWin` would wrap), and `o ≤ len` (PART A
/// copies `o` rows). `Err` names the violated bound.
pub fn compressed_ranges_ok(mode: CompressMode, len: i64, c: i64, o: i64) -> Result<(), String> {
    if len < 0 || c < 0 || o < 0 {
        return Err(format!(
            "seqLens ({len}), compressLens ({c}) and compressSeqOffset ({o}) must be non-negative"
        ));
    }
    match mode {
        CompressMode::Alibi if c > len => Err(format!(
            "compressLens {c} exceeds the sequence's length {len}"
        )),
        CompressMode::Alibi => Ok(()),
        _ if c == 0 || o == len => Ok(()),
        _ if o > len => Err(format!(
            "compressSeqOffset {o} exceeds the sequence's length {len}"
        )),
        _ if c > len - o => Err(format!(
            "compressLens {c} after compressSeqOffset {o} exceeds the sequence's length {len}"
        )),
        _ => Ok(()),
    }
}

impl<T, I: SlotIndex> CompressedScatterArgs<'_, T, I> {
    pub fn batch(&self) -> usize {
        self.seq_lens.len()
    }

    /// Writes for `(b, h)`, in the order the kernel performs them.
    pub fn plan(&self, b: usize, h: usize) -> Vec<CompressedWrite> {
        let i = b * self.num_heads + h;
        let o = self.compress_seq_offset.map_or(0, |x| x[i].to_i64());
        compressed_plan(
            self.mode,
            self.slot_mapping[i].to_i64(),
            self.seq_lens[b].to_i64(),
            self.compress_lens[i].to_i64(),
            o,
        )
    }

    pub fn seq_start(&self, b: usize) -> usize {
        self.seq_lens[..b]
            .iter()
            .map(|x| x.to_i64().max(0) as usize)
            .sum()
    }
}

/// Validates everything [`scatter_pa_kv_cache_compressed`] reads or writes. Pure. Ranges are
/// checked before any loop over a length, and sizes with checked arithmetic, so the work is
/// bounded by the tensors' sizes whatever the index values.
pub fn check_compressed_scatter<T, I: SlotIndex>(
    a: &CompressedScatterArgs<T, I>,
    key_cache_len: usize,
    value_cache_len: Option<usize>,
) -> Result<(), String> {
    let overflow = |what: &str| format!("{what} overflows");
    if a.num_heads == 0 || a.k_head_size == 0 || a.block_size == 0 {
        return Err("num_heads, k_head_size and block_size must be positive".into());
    }
    let bn = a
        .batch()
        .checked_mul(a.num_heads)
        .ok_or_else(|| overflow("batch·num_heads"))?;
    let max = a
        .num_blocks
        .checked_mul(a.block_size)
        .ok_or_else(|| overflow("num_blocks·block_size"))?;
    if a.slot_mapping.len() != bn || a.compress_lens.len() != bn {
        return Err(format!(
            "slotMapping and compressLens need batch·num_heads = {bn} entries"
        ));
    }
    let offsets = match (a.mode, a.compress_seq_offset) {
        (CompressMode::Alibi, _) => None,
        (_, Some(o)) if o.len() == bn => Some(o),
        _ => {
            return Err(format!(
                "Rope/Omni need compressSeqOffset with {bn} entries"
            ))
        }
    };
    if a.value.is_some() != value_cache_len.is_some() {
        return Err("value and valueCache must both be present or both be empty".into());
    }
    // Σ seqLens in checked i64 (each term is checked non-negative first).
    let mut tokens: usize = 0;
    for (b, l) in a.seq_lens.iter().enumerate() {
        let l = l.to_i64();
        let l = usize::try_from(l).map_err(|_| format!("seqLens[{b}] = {l} is negative"))?;
        tokens = tokens.checked_add(l).ok_or_else(|| overflow("Σ seqLens"))?;
    }
    for b in 0..a.batch() {
        for h in 0..a.num_heads {
            let i = b * a.num_heads + h;
            let o = offsets.map_or(0, |x| x[i].to_i64());
            compressed_ranges_ok(
                a.mode,
                a.seq_lens[b].to_i64(),
                a.compress_lens[i].to_i64(),
                o,
            )
            .map_err(|e| format!("(b {b}, h {h}): {e}"))?;
        }
    }
    let mut parts = vec![(a.key.len(), a.k_head_size, key_cache_len, "key")];
    if let (Some(v), Some(vc)) = (a.value, value_cache_len) {
        parts.push((v.len(), a.v_head_size, vc, "value"));
    }
    for (len, d, cache_len, name) in parts {
        let want = tokens
            .checked_mul(a.num_heads)
            .and_then(|x| x.checked_mul(d))
            .ok_or_else(|| overflow("Σ seqLens · N · D"))?;
        if len != want {
            return Err(format!(
                "{name} has {len} elements, expected Σ seqLens · N · D = {want}"
            ));
        }
        let want = max
            .checked_mul(d)
            .ok_or_else(|| overflow("num_blocks·block_size·D"))?;
        if cache_len != want {
            return Err(format!(
                "{name} cache has {cache_len} elements, expected {want}"
            ));
        }
    }
    // Every length is now bounded by the key's size: at most Σ seqLens · N writes.
    let mut seen = std::collections::HashSet::new();
    for b in 0..a.batch() {
        for h in 0..a.num_heads {
            for w in a.plan(b, h) {
                if w.slot >= max as i64 {
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
