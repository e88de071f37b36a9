//! The cache scatter's parameters (named after `aclnnScatterPaKvCache`) and their validation.
//!
//! Everything is validated — shapes, dtypes, modes, every slot's range and uniqueness — before
//! anything is written, so a refused call leaves the caches untouched. Scenario 3 (4-D key,
//! Ascend 950 only) is [`AttnError::Unsupported`].

pub mod problem;
pub mod tensors;
pub use problem::*;
pub use tensors::*;

use std::collections::HashSet;
use std::sync::Arc;

use crate::DataType;

use crate::error::{ensure, AttnError, Result};

/// `scatterMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterKind {
    /// `"None"` / null.
    None,
    /// `"Nct"`: strided key/value tokens (`strides`, `offsets`).
    Nct,
    /// `"Alibi"` (compressed).
    Alibi,
    /// `"Rope"` (compressed).
    Rope,
    /// `"Omni"` (compressed).
    Omni,
}

impl ScatterKind {
    /// The `scatterMode` attribute string.
    pub fn as_attr(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Nct => "Nct",
            Self::Alibi => "Alibi",
            Self::Rope => "Rope",
            Self::Omni => "Omni",
        }
    }

    /// The mode of a `scatterMode` string (empty = `None`, as a null attribute).
    pub fn from_attr(s: &str) -> Option<Self> {
        match s {
            "" => Some(Self::None),
            s => [Self::None, Self::Nct, Self::Alibi, Self::Rope, Self::Omni]
                .into_iter()
                .find(|m| m.as_attr() == s),
        }
    }

    /// Parses `scatterMode` (empty = None).
    pub fn parse(s: &str) -> Result<Self> {
        Self::from_attr(s).ok_or_else(|| {
            AttnError::invalid(
                "scatterMode",
                format!("must be None, Nct, Alibi, Rope or Omni, got \"{s}\""),
            )
        })
    }

    /// The compressed modes.
    pub fn compressed(self) -> Option<CompressMode> {
        match self {
            Self::Alibi => Some(CompressMode::Alibi),
            Self::Rope => Some(CompressMode::Rope),
            Self::Omni => Some(CompressMode::Omni),
            _ => None,
        }
    }
}

/// Parses `cacheMode` (empty = Norm).
pub fn parse_cache_mode(s: &str) -> Result<CacheMode> {
    CacheMode::from_attr(s).ok_or_else(|| {
        AttnError::invalid("cacheMode", format!("must be Norm or PA_NZ, got \"{s}\""))
    })
}

/// Everything of the scatter that is not key/value/caches. Index arrays are host data
/// (INT32 or INT64 on the device, widened to i64).
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterSpec {
    /// `slotMapping` values.
    pub slot_mapping: Arc<[i64]>,
    /// `slotMapping` shape.
    pub slot_mapping_shape: Vec<usize>,
    /// `cacheMode`.
    pub cache_mode: CacheMode,
    /// `scatterMode`.
    pub scatter_mode: ScatterKind,
    /// `compressLensOptional`.
    pub compress_lens: Option<Vec<i64>>,
    /// `compressSeqOffsetOptional`.
    pub compress_seq_offset: Option<Vec<i64>>,
    /// `seqLensOptional`.
    pub seq_lens: Option<Vec<i64>>,
    /// `strides` (Nct).
    pub strides: Option<Vec<i64>>,
    /// `offsets` (Nct).
    pub offsets: Option<Vec<i64>>,
}

/// Shapes and dtypes of the tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterShapes {
    /// `key` (with Nct: the strided storage).
    pub key: Vec<usize>,
    /// `value`, absent (or rank 0) for key-only.
    pub value: Option<Vec<usize>>,
    /// `keyCacheRef`.
    pub key_cache: Vec<usize>,
    /// `valueCacheRef`, absent (or rank 0) for key-only.
    pub value_cache: Option<Vec<usize>>,
    /// dtypes of key, value, keyCache, valueCache.
    pub dtypes: [Option<DataType>; 4],
}

/// A validated scatter's dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScatterDims {
    /// Tokens (`slotMapping` entries for None/Nct; key rows for compressed).
    pub num_tokens: usize,
    /// N (key heads).
    pub num_heads: usize,
    /// Dk.
    pub k_head_size: usize,
    /// Dv (0 for key-only).
    pub v_head_size: usize,
    /// num_blocks.
    pub num_blocks: usize,
    /// block_size.
    pub block_size: usize,
    /// PA_NZ inner dim `32 / sizeof(dtype)`.
    pub nz_last: usize,
    /// Nct strides / offsets.
    pub nct: Option<([usize; 2], [usize; 2])>,
    /// Whether value is scattered too.
    pub has_value: bool,
}

impl ScatterDims {
    /// First element of token `t` of key (`which = 0`) or value (`which = 1`) in its source
    /// tensor. Nct strides both by `strides[0]`: the kernel never reads the value stride
    /// (ops-transformer `scatter_pa_kv_cache_nd.h`, `startV = t·strideK_ + offsetV_`).
    /// In range for every `t < num_tokens` once [`ScatterSpec::validate`] passed.
    pub fn source_start(&self, which: usize, t: usize) -> usize {
        let d = if which == 0 {
            self.k_head_size
        } else {
            self.v_head_size
        };
        match self.nct {
            None => t * self.num_heads * d,
            Some((strides, offsets)) => t * strides[0] + offsets[which],
        }
    }

    /// The reference's non-compressed scatter mode.
    pub fn scatter_mode(&self) -> ScatterMode {
        match self.nct {
            None => ScatterMode::None,
            Some((strides, offsets)) => ScatterMode::Nct { strides, offsets },
        }
    }
}

/// One compressed write: `(batch, head, slot, from, to)` — the mean of sequence positions
/// `[from, to)` of head `head` goes to `slot`.
pub type CompressedWrite = (usize, usize, usize, usize, usize);

/// The element count of `shape`, refused when the product of its non-zero dims overflows
/// (so `[0, 2^40, 2^40]` is refused too, not read as 0 elements).
fn checked_numel(name: &'static str, shape: &[usize]) -> Result<usize> {
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d));
    ensure!(
        nonzero.is_some(),
        name,
        "shape {shape:?} has more elements than usize holds"
    );
    Ok(if shape.contains(&0) {
        0
    } else {
        nonzero.unwrap_or(0)
    })
}

/// `a · b`, or a typed error naming `name` when it overflows.
fn mul(name: &'static str, what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| AttnError::invalid(name, format!("{what} = {a}·{b} overflows")))
}

impl ScatterSpec {
    /// A Norm / None scatter with the given slots (1-D).
    pub fn new(slot_mapping: Vec<i64>) -> Self {
        let n = slot_mapping.len();
        Self {
            slot_mapping: slot_mapping.into(),
            slot_mapping_shape: vec![n],
            cache_mode: CacheMode::Norm,
            scatter_mode: ScatterKind::None,
            compress_lens: None,
            compress_seq_offset: None,
            seq_lens: None,
            strides: None,
            offsets: None,
        }
    }

    /// Checks everything a write could touch. Pure.
    pub fn validate(&self, s: &ScatterShapes) -> Result<ScatterDims> {
        let [kd, vd, kcd, vcd] = s.dtypes;
        let kd = kd.ok_or_else(|| AttnError::invalid("key", "dtype unknown"))?;
        ensure!(
            matches!(
                kd,
                DataType::Float16 | DataType::Bf16 | DataType::Int8 | DataType::Float
            ),
            "key",
            "dtype must be FLOAT16, BFLOAT16 or INT8 (FLOAT32 on the host), got {kd:?}"
        );
        // `op_kernel/scatter_pa_kv_cache.cpp` instantiates the Nct (strided), Rope and Omni
        // kernels for FLOAT16 / BFLOAT16 only: an INT8 call has no tiling key to run.
        ensure!(
            !(kd == DataType::Int8
                && matches!(
                    self.scatter_mode,
                    ScatterKind::Nct | ScatterKind::Rope | ScatterKind::Omni
                )),
            "scatterMode",
            "{} has no INT8 kernel in CANN (FLOAT16 / BFLOAT16 only)",
            self.scatter_mode.as_attr()
        );
        ensure!(
            s.key.len() == 3 || s.key.len() == 4,
            "key",
            "must be rank 3 or 4, got shape {:?}",
            s.key
        );
        if s.key.len() == 4 {
            return Err(AttnError::Unsupported(
                "scatter scenario 3 (4-D key) exists only on Ascend 950".into(),
            ));
        }
        let value = s.value.as_ref().filter(|v| !v.is_empty());
        let value_cache = s.value_cache.as_ref().filter(|v| !v.is_empty());
        ensure!(
            value.is_some() == value_cache.is_some(),
            "valueCache",
            "value and valueCache must both be given or both be empty"
        );
        ensure!(
            kcd == Some(kd),
            "keyCache",
            "dtype must equal key's {kd:?}, got {kcd:?}"
        );
        if value.is_some() {
            ensure!(
                vd == Some(kd),
                "value",
                "dtype must equal key's {kd:?}, got {vd:?}"
            );
            ensure!(
                vcd == Some(kd),
                "valueCache",
                "dtype must equal key's {kd:?}, got {vcd:?}"
            );
        }
        let kc = &s.key_cache;
        ensure!(
            kc.len() == 4,
            "keyCache",
            "must be rank 4, got shape {kc:?}"
        );
        if let Some(vc) = value_cache {
            ensure!(
                vc.len() == 4,
                "valueCache",
                "must be rank 4, got shape {vc:?}"
            );
        }
        // Every product below is of dims that fit together.
        checked_numel("key", &s.key)?;
        checked_numel("keyCache", kc)?;
        if let Some(v) = value {
            checked_numel("value", v)?;
        }
        if let Some(vc) = value_cache {
            checked_numel("valueCache", vc)?;
        }
        let elem = kd.size();
        let nz_last = 32 / elem;
        if let Some(mode) = self.scatter_mode.compressed() {
            return self.validate_compressed(s, value, value_cache, mode, nz_last);
        }
        for (name, v) in [
            ("compressLens", &self.compress_lens),
            ("compressSeqOffset", &self.compress_seq_offset),
            ("seqLens", &self.seq_lens),
        ] {
            ensure!(
                v.is_none(),
                name,
                "only with scatterMode Alibi, Rope or Omni"
            );
        }
        let nct = self.scatter_mode == ScatterKind::Nct;
        if nct {
            ensure!(
                self.cache_mode == CacheMode::Norm,
                "scatterMode",
                "Nct needs cacheMode Norm"
            );
        }
        let [nb, a1, a2, a3] = [kc[0], kc[1], kc[2], kc[3]];
        // (block_size, N, Dk) from the key cache.
        let (bs, n, dk) = match self.cache_mode {
            CacheMode::Norm => (a1, a2, a3),
            _ => {
                ensure!(
                    a3 == nz_last,
                    "keyCache",
                    "PA_NZ cache last dim must be 32 / sizeof(dtype) = {nz_last}, got {kc:?}"
                );
                let (kn, kdk) = if nct { (0, 0) } else { (s.key[1], s.key[2]) };
                let nd = mul("key", "N·D", kn, kdk)?;
                ensure!(
                    a1.checked_mul(nz_last) == Some(nd),
                    "keyCache",
                    "PA_NZ cache must be [nb, N·D/{nz_last}, bs, {nz_last}] with N·D = {nd}, got {kc:?}"
                );
                (a2, kn, kdk)
            }
        };
        ensure!(
            nb > 0 && bs > 0 && n > 0 && dk > 0,
            "keyCache",
            "dims must be positive, got {kc:?}"
        );
        let t = self.slot_mapping.len();
        let max = mul("keyCache", "num_blocks·block_size", nb, bs)?;
        // scatter_pa_kv_cache_tiling.cpp (CheckInputDimUpdate): numBlocks·blockSize >= numTokens.
        ensure!(
            max >= t,
            "keyCache",
            "num_blocks·block_size = {max} must hold the {t} tokens"
        );
        ensure!(
            self.slot_mapping_shape.as_slice() == [t],
            "slotMapping",
            "must be 1-D with one entry per token, got shape {:?}",
            self.slot_mapping_shape
        );
        let mut strides_offsets = None;
        if nct {
            // The Nct key is its token storage, rank 3 `[rows, N, Dk]`: CANN's tiling takes N
            // and Dk from the key's dims 1 and 2 (scatter_pa_kv_cache_tiling.cpp,
            // CheckInputDimUpdate), so they must be the cache's. The backend describes it to
            // aclnn as the view `[T, N, Dk]` with row stride `strides[0]`.
            ensure!(
                s.key[1] == n && s.key[2] == dk,
                "key",
                "Nct key storage must be [rows, N, Dk] with the cache's N, Dk = [{n}, {dk}], got {:?}",
                s.key
            );
            let two = |name: &'static str, v: &Option<Vec<i64>>, min: i64| -> Result<[usize; 2]> {
                let Some(v) = v else {
                    return Err(AttnError::invalid(name, "required with scatterMode Nct"));
                };
                ensure!(
                    v.len() == 2 && v.iter().all(|&x| x >= min),
                    name,
                    "must hold 2 values (K, V) >= {min}, got {v:?}"
                );
                Ok([v[0] as usize, v[1] as usize])
            };
            strides_offsets = Some((
                two("strides", &self.strides, 1)?,
                two("offsets", &self.offsets, 0)?,
            ));
        } else {
            ensure!(
                s.key[0] == t,
                "slotMapping",
                "must have one entry per key token ({}), got {t}",
                s.key[0]
            );
            ensure!(
                s.key[1] == n && s.key[2] == dk,
                "keyCache",
                "N, D must match key's [{}, {}], got cache {kc:?}",
                s.key[1],
                s.key[2]
            );
        }
        let ndk = mul("key", "N·Dk", n, dk)?;
        ensure!(
            ndk.checked_mul(elem).is_some_and(|b| b % 32 == 0)
                || self.cache_mode == CacheMode::Norm,
            "key",
            "PA_NZ needs N·D·sizeof(dtype) to be a multiple of 32, got {ndk}·{elem}"
        );
        let mut dv = 0;
        if let (Some(v), Some(vc)) = (value, value_cache) {
            ensure!(v.len() == 3, "value", "must be rank 3 like key, got {v:?}");
            if !nct {
                ensure!(
                    v[0] == s.key[0] && v[1] == s.key[1],
                    "value",
                    "first two dims must equal key's, got {v:?} vs {:?}",
                    s.key
                );
            }
            dv = match self.cache_mode {
                CacheMode::Norm => {
                    ensure!(
                        vc[..3] == kc[..3],
                        "valueCache",
                        "must be [nb, bs, N, Dv] with keyCache's [nb, bs, N] = {:?}, got {vc:?}",
                        &kc[..3]
                    );
                    vc[3]
                }
                _ => {
                    let ndv = mul("value", "N·Dv", v[1], v[2])?;
                    ensure!(
                        vc[0] == nb
                            && vc[2] == bs
                            && vc[3] == nz_last
                            && vc[1].checked_mul(nz_last) == Some(ndv),
                        "valueCache",
                        "PA_NZ cache must be [{nb}, N·Dv/{nz_last}, {bs}, {nz_last}], got {vc:?}"
                    );
                    ensure!(
                        mul("value", "N·Dv", n, v[2])?
                            .checked_mul(elem)
                            .is_some_and(|b| b % 32 == 0),
                        "value",
                        "PA_NZ needs N·D·sizeof(dtype) to be a multiple of 32"
                    );
                    v[2]
                }
            };
            if nct {
                ensure!(
                    v[1] == n && v[2] == dv,
                    "value",
                    "Nct value storage must be [rows, N, Dv] with the cache's N, Dv = [{n}, {dv}], got {v:?}"
                );
            }
            ensure!(dv > 0, "valueCache", "head size must be positive");
            if !nct {
                ensure!(
                    v[2] == dv,
                    "valueCache",
                    "D must equal value's {}, got {dv}",
                    v[2]
                );
            }
        }
        let dims = ScatterDims {
            num_tokens: t,
            num_heads: n,
            k_head_size: dk,
            v_head_size: dv,
            num_blocks: nb,
            block_size: bs,
            nz_last,
            nct: strides_offsets,
            has_value: value.is_some(),
        };
        if let Some((strides, offsets)) = strides_offsets {
            if t > 0 {
                let mut parts = vec![("key", &s.key, 0, dk)];
                if let Some(v) = value {
                    parts.push(("value", v, 1, dv));
                }
                for (name, shape, w, d) in parts {
                    // Both are strided by strides[0] (see ScatterDims::source_start).
                    let need = (t - 1)
                        .checked_mul(strides[0])
                        .and_then(|x| x.checked_add(offsets[w]))
                        .and_then(|x| x.checked_add(n.checked_mul(d)?));
                    let have = checked_numel(name, shape)?;
                    ensure!(
                        need.is_some_and(|need| have >= need),
                        name,
                        "Nct storage has {have} elements, (T−1)·strides[0] + offsets[{w}] + N·D = ({t}−1)·{} + {} + {n}·{d} needs {}",
                        strides[0],
                        offsets[w],
                        need.map_or("more than usize holds".to_string(), |x| x.to_string())
                    );
                }
            }
        }
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let mut seen = HashSet::new();
        for (i, &slot) in self.slot_mapping.iter().enumerate() {
            if slot < 0 {
                continue; // skipped token
            }
            ensure!(
                slot < max,
                "slotMapping",
                "[{i}] = {slot} out of range [0, num_blocks·block_size = {max})"
            );
            ensure!(
                seen.insert(slot),
                "slotMapping",
                "[{i}] = {slot} is a duplicate"
            );
        }
        Ok(dims)
    }

    fn validate_compressed(
        &self,
        s: &ScatterShapes,
        value: Option<&Vec<usize>>,
        value_cache: Option<&Vec<usize>>,
        mode: CompressMode,
        nz_last: usize,
    ) -> Result<ScatterDims> {
        ensure!(
            self.cache_mode == CacheMode::Norm,
            "cacheMode",
            "compressed scatter (Alibi/Rope/Omni) needs Norm"
        );
        let (t, n, dk) = (s.key[0], s.key[1], s.key[2]);
        let kc = &s.key_cache;
        ensure!(
            kc[2] == 1 && kc[3] == dk && kc[0] > 0 && kc[1] > 0 && n > 0 && dk > 0,
            "keyCache",
            "compressed cache must be [nb, bs, 1, {dk}] with positive dims (key N = {n}), got {kc:?}"
        );
        let (nb, bs) = (kc[0], kc[1]);
        let max = mul("keyCache", "num_blocks·block_size", nb, bs)?;
        // scatter_pa_kv_cache_tiling.cpp (CheckInputDimUpdate): numBlocks·blockSize >= numTokens.
        ensure!(
            max >= t,
            "keyCache",
            "num_blocks·block_size = {max} must hold the key's {t} tokens"
        );
        let mut dv = 0;
        if let (Some(v), Some(vc)) = (value, value_cache) {
            ensure!(
                v.len() == 3 && v[0] == t && v[1] == n,
                "value",
                "must be [{t}, {n}, Dv] like key, got {v:?}"
            );
            ensure!(
                vc[0] == nb && vc[1] == bs && vc[2] == 1 && vc[3] == v[2],
                "valueCache",
                "compressed cache must be [{nb}, {bs}, 1, {}], got {vc:?}",
                v[2]
            );
            dv = v[2];
        }
        let Some(seq_lens) = &self.seq_lens else {
            return Err(AttnError::Unsupported(
                "compressed scatter without seqLens (the sequence split is unknown)".into(),
            ));
        };
        let batch = seq_lens.len();
        let bn = mul("seqLens", "B·N", batch, n)?;
        ensure!(
            seq_lens.iter().all(|&x| x >= 0),
            "seqLens",
            "must be non-negative, got {seq_lens:?}"
        );
        let total = seq_lens.iter().try_fold(0i64, |acc, &x| acc.checked_add(x));
        ensure!(
            total == i64::try_from(t).ok(),
            "seqLens",
            "must sum to the key's token count {t}, sums to {}",
            total.map_or("more than i64 holds".to_string(), |x| x.to_string())
        );
        ensure!(
            self.slot_mapping.len() == bn,
            "slotMapping",
            "compressed scatter needs B·N = {bn} start slots, got {}",
            self.slot_mapping.len()
        );
        let Some(clens) = &self.compress_lens else {
            return Err(AttnError::invalid(
                "compressLens",
                "required with scatterMode Alibi, Rope or Omni",
            ));
        };
        ensure!(
            clens.len() == bn && clens.iter().all(|&x| x >= 0),
            "compressLens",
            "needs B·N = {bn} non-negative entries, got {clens:?}"
        );
        match (mode, &self.compress_seq_offset) {
            (CompressMode::Alibi, Some(_)) => {
                return Err(AttnError::invalid(
                    "compressSeqOffset",
                    "not used with scatterMode Alibi",
                ))
            }
            (CompressMode::Alibi, None) => {}
            (_, None) => {
                return Err(AttnError::invalid(
                    "compressSeqOffset",
                    "required with scatterMode Rope/Omni",
                ))
            }
            (_, Some(o)) => ensure!(
                o.len() == bn && o.iter().all(|&x| x >= 0),
                "compressSeqOffset",
                "needs B·N = {bn} non-negative entries, got {o:?}"
            ),
        }
        // Every window inside its sequence, before any loop over a length (the kernel's uint32
        // arithmetic would wrap otherwise; see the reference's CompressMode).
        for (i, &c) in clens.iter().enumerate() {
            let len = seq_lens[i / n];
            let o = self.compress_seq_offset.as_ref().map_or(0, |x| x[i]);
            if let Err(e) = compressed_ranges_ok(mode, len, c, o) {
                let name = if e.starts_with("compressSeqOffset") {
                    "compressSeqOffset"
                } else {
                    "compressLens"
                };
                return Err(AttnError::invalid(
                    name,
                    format!("(batch {}, head {}): {e}", i / n, i % n),
                ));
            }
        }
        let dims = ScatterDims {
            num_tokens: t,
            num_heads: n,
            k_head_size: dk,
            v_head_size: dv,
            num_blocks: nb,
            block_size: bs,
            nz_last,
            nct: None,
            has_value: value.is_some(),
        };
        let mut seen = HashSet::new();
        for (b, h, slot, _, _) in self.compressed_writes(&dims) {
            ensure!(
                slot < max,
                "slotMapping",
                "(batch {b}, head {h}) writes slot {slot} >= num_blocks·block_size = {max}"
            );
            ensure!(
                seen.insert(slot),
                "slotMapping",
                "slot {slot} is written twice (batch {b}, head {h})"
            );
        }
        Ok(dims)
    }

    /// The writes of a compressed scatter, in the kernel's order (see the reference's
    /// `CompressMode` docs: Omni discards its window, Rope averages it; without a window the
    /// sequence is copied contiguously). Negative start slots skip their `(b, h)`. Bounded by
    /// `Σ seqLens · N` writes once [`Self::validate`] passed.
    pub fn compressed_writes(&self, dims: &ScatterDims) -> Vec<CompressedWrite> {
        let n = dims.num_heads;
        let Some(mode) = self.scatter_mode.compressed() else {
            return Vec::new();
        };
        let seq_lens = self.seq_lens.as_deref().unwrap_or(&[]);
        let clens = self.compress_lens.as_deref().unwrap_or(&[]);
        let mut w = Vec::new();
        for (b, &len) in seq_lens.iter().enumerate() {
            for h in 0..n {
                let i = b * n + h;
                let o = self.compress_seq_offset.as_ref().map_or(0, |x| x[i]);
                w.extend(
                    compressed_plan(mode, self.slot_mapping[i], len, clens[i], o)
                        .into_iter()
                        .map(|x| (b, h, x.slot as usize, x.from, x.to)),
                );
            }
        }
        w
    }

    /// First token row of each sequence (compressed modes).
    pub fn seq_starts(&self) -> Vec<usize> {
        let mut acc = 0usize;
        self.seq_lens
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .map(|&l| {
                let s = acc;
                acc += l.max(0) as usize;
                s
            })
            .collect()
    }
}
