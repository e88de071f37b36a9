//! A paged KV cache manager on top of the ops: a block allocator with a free list, per-sequence
//! block tables, [`PagedKvCache::append`] (computes the slot mapping and runs the cache
//! scatter), [`PagedKvCache::attend`] (decode through incremental attention on the paged cache,
//! prefill through prompt attention on the gathered KV), [`PagedKvCache::attend_with`] (sliding
//! windows and learned sinks through fused inference attention on the paged caches, or the
//! prompt / incremental pair with a placeholder token for the sinks), [`PagedKvCache::fork`]
//! (shares blocks, copy-on-write for a shared partly filled last block) and
//! [`PagedKvCache::free`].
//!
//! The caches are `[num_blocks, block_size, Nkv, D]` (cacheMode Norm), which is IFA's paged
//! `(blocknum, blockSize, H)` layout. Float caches only: int8 KV lives on host paths.

use std::collections::HashMap;
use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use crate::backend::{AttentionBackend, FiaInputs, FiaKv, IncreInputs, IncreKv};
use crate::error::{ensure, AttnError, Result};
use crate::fia::{FiaMask, FiaSpec};
use crate::host::acl_dtype;
use crate::incre::{BlockTable, IfaLayout, IncreSpec};
use crate::prompt::{PfaLayout, PromptMaskKind, PromptSpec};
use crate::scatter::{ScatterShapes, ScatterSpec};
use crate::{
    fused_infer_attention_with, incre_flash_attention_with, prompt_flash_attention_with,
    scatter_pa_kv_cache, FiaKvFromTensors, IncreKvFromTensors,
};

/// Options of [`PagedKvCache::attend_with`].
#[derive(Debug, Clone)]
pub struct AttendOptions<B: Backend> {
    /// Sliding window `W`: the query at position `p` sees cached tokens `p − W ..= p`.
    pub window: Option<usize>,
    /// Learned per-head sinks (`[N]` logits): one more term `exp(sink_h)` in every row's
    /// softmax denominator, with no value — the varlen op's sink. A tensor on the cache's
    /// device: [`AttendPath::Fused`] hands it to FIA as is; only the placeholder path
    /// ([`AttendPath::PromptIncre`]), whose sinks ride in a host `pseShift`, reads it back.
    pub sinks: Option<Tensor<B, 1>>,
    /// Which operators run a call with a window or sinks.
    pub path: AttendPath,
}

impl<B: Backend> Default for AttendOptions<B> {
    fn default() -> Self {
        Self {
            window: None,
            sinks: None,
            path: AttendPath::default(),
        }
    }
}

/// Which aclnn operators [`PagedKvCache::attend_with`] runs when a window or sinks are given
/// (without either, prefill is prompt attention and decode incremental attention, as
/// [`PagedKvCache::attend`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AttendPath {
    /// `aclnnFusedInferAttentionScoreV4` for prefill and decode, on the paged caches: sinks as
    /// its `learnableSink` (CANN takes them for head dims 64 and 128 only), windows as band
    /// mode 4 (prefill) or a `(B, KV_S)` `attenMask` (decode, where FIA's band modes have no
    /// effect). What serving on Atlas runs.
    #[default]
    Fused,
    /// Prompt attention (prefill, on the gathered KV) and incremental attention (decode, on
    /// the paged caches), neither of which takes a sink: the window becomes a dense
    /// `attenMask`, and each sink rides on a placeholder — token 0 of every sequence must hold
    /// a zero key and zero value (append it first), and its score `scale·q·0 + pseShift` is set
    /// to the sink logit, so the softmax gains exactly the `exp(sink)` term and the placeholder
    /// adds nothing to the output. The window never masks the placeholder. For head dims FIA's
    /// sink does not take, and a CANN without FIA V4.
    PromptIncre,
}

impl<B: Backend> AttendOptions<B> {
    fn is_active(&self) -> bool {
        self.window.is_some() || self.sinks.is_some()
    }

    /// Whether the sinks ride on the placeholder token (the [`AttendPath::PromptIncre`] path).
    fn has_placeholder_sinks(&self) -> bool {
        self.sinks.is_some() && self.path == AttendPath::PromptIncre
    }

    /// The sinks of the placeholder-token path ([`AttendPath::PromptIncre`]), as given: its
    /// `pseShift` is built from them on their device.
    fn placeholder_sinks(&self) -> Option<Tensor<B, 1>> {
        self.sinks
            .clone()
            .filter(|_| self.path == AttendPath::PromptIncre)
    }

    /// Whether cached token `t` is outside the window of the query at position `pos`
    /// (`first` = 1 when token 0 is the sink placeholder, which is never masked).
    fn masked(&self, t: usize, pos: usize, first: usize) -> bool {
        if t < first {
            return false;
        }
        self.window.is_some_and(|w| t + w < pos)
    }
}

/// `t` reshaped through [`crate::host::reshape`]: in place on `NdArray`, whose own reshape
/// copies (a layer's whole cache per call, or a prompt's gathered KV).
fn reshaped<B: Backend, const D: usize, const D2: usize>(
    t: Tensor<B, D>,
    shape: [usize; D2],
) -> Tensor<B, D2> {
    let p = t.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(crate::host::reshape::<B>(p, &shape)))
}

/// The float primitive of a Burn tensor (the carriers' tensor kind).
fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> burn::tensor::ops::FloatTensor<B> {
    t.into_primitive().tensor()
}

/// A sequence's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

#[derive(Debug, Clone)]
struct Seq {
    blocks: Vec<usize>,
    len: usize,
}

/// Paged KV cache for one attention layer.
#[derive(Debug, Clone)]
pub struct PagedKvCache<B: AttentionBackend> {
    key_cache: Tensor<B, 4>,
    value_cache: Tensor<B, 4>,
    num_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    scale: f64,
    free: Vec<usize>,
    refs: Vec<usize>,
    seqs: HashMap<SeqId, Seq>,
    next: u64,
    /// Set when a device call failed after the caches were handed to it (the scatter consumes
    /// them so that a device can update them in place): their contents are gone, so every
    /// later append or attend refuses with this error instead of running on empty caches.
    lost: Option<AttnError>,
}

impl<B: AttentionBackend> PagedKvCache<B> {
    /// Zeroed caches of `num_blocks` blocks of `block_size` tokens (a multiple of 16, at most
    /// 512, as page attention requires), for `num_heads` query heads sharing `kv_heads` kv heads
    /// of size `head_dim`; `scale` is the attention's `scaleValue`.
    pub fn new(
        num_blocks: usize,
        block_size: usize,
        num_heads: usize,
        kv_heads: usize,
        head_dim: usize,
        scale: f64,
        device: &B::Device,
    ) -> Result<Self> {
        ensure!(num_blocks > 0, "num_blocks", "must be positive");
        ensure!(
            block_size > 0 && block_size <= 512 && block_size.is_multiple_of(16),
            "blockSize",
            "must be a positive multiple of 16 up to 512, got {block_size}"
        );
        ensure!(
            kv_heads > 0 && num_heads.is_multiple_of(kv_heads),
            "numKeyValueHeads",
            "must divide numHeads {num_heads}, got {kv_heads}"
        );
        ensure!(head_dim > 0, "head_dim", "must be positive");
        let shape = [num_blocks, block_size, kv_heads, head_dim];
        Ok(Self {
            key_cache: Tensor::zeros(shape, device),
            value_cache: Tensor::zeros(shape, device),
            num_heads,
            kv_heads,
            head_dim,
            block_size,
            scale,
            free: (0..num_blocks).rev().collect(),
            refs: vec![0; num_blocks],
            seqs: HashMap::new(),
            next: 0,
            lost: None,
        })
    }

    /// The caches in `dtype` (the model's: F16 / BF16 serving), before the first sequence. FIA
    /// then gets its `learnableSink` in the dtype its path reads, whatever this one (that dtype
    /// follows the path and the CANN release: [`FiaSpec::learnable_sink_dtype`]).
    pub fn with_dtype(mut self, dtype: burn::tensor::DType) -> Result<Self> {
        ensure!(
            self.seqs.is_empty(),
            "dtype",
            "the caches' dtype can only change before the first sequence"
        );
        self.key_cache = self.key_cache.cast(dtype);
        self.value_cache = self.value_cache.cast(dtype);
        Ok(self)
    }

    /// A new empty sequence.
    pub fn add_sequence(&mut self) -> SeqId {
        let id = SeqId(self.next);
        self.next += 1;
        self.seqs.insert(
            id,
            Seq {
                blocks: Vec::new(),
                len: 0,
            },
        );
        id
    }

    fn seq(&self, id: SeqId) -> Result<&Seq> {
        self.seqs
            .get(&id)
            .ok_or_else(|| AttnError::invalid("seq", format!("unknown sequence {id:?}")))
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Tokens stored for `id`.
    pub fn len(&self, id: SeqId) -> Result<usize> {
        Ok(self.seq(id)?.len)
    }

    /// The block table of `id`.
    pub fn block_table(&self, id: SeqId) -> Result<&[usize]> {
        Ok(&self.seq(id)?.blocks)
    }

    /// The caches `[num_blocks, block_size, Nkv, D]`.
    pub fn caches(&self) -> (&Tensor<B, 4>, &Tensor<B, 4>) {
        (&self.key_cache, &self.value_cache)
    }

    /// Appends `T` tokens: key and value `[T, Nkv, D]`. Allocates blocks (copying a shared,
    /// partly filled last block first); fails with [`AttnError::OutOfBlocks`] before changing
    /// anything when too few are free.
    pub fn append(&mut self, id: SeqId, key: Tensor<B, 3>, value: Tensor<B, 3>) -> Result<()> {
        self.ensure_intact()?;
        let [t, nkv, d] = key.dims();
        ensure!(
            nkv == self.kv_heads && d == self.head_dim,
            "key",
            "must be [T, {}, {}], got {:?}",
            self.kv_heads,
            self.head_dim,
            key.dims()
        );
        ensure!(
            value.dims() == key.dims(),
            "value",
            "must have the key's shape {:?}, got {:?}",
            key.dims(),
            value.dims()
        );
        // Everything the scatter checks is checked here, before any block is allocated or the
        // caches are moved into the op below (leaving empty placeholders there, so that no
        // second handle keeps their buffers alive and a backend can update them where they lie
        // — Ascend does — instead of copying the whole cache per token): slots 0..T stand for
        // the real ones, which are distinct and in range by construction. (More tokens than
        // the cache holds fail below with `OutOfBlocks` before anything changes.)
        let cache_dims = self.key_cache.dims().to_vec();
        let capacity = cache_dims[0] * cache_dims[1];
        let probe_tokens = t.min(capacity);
        ScatterSpec::new((0..probe_tokens as i64).collect()).validate(&ScatterShapes {
            key: vec![probe_tokens, nkv, d],
            value: Some(vec![probe_tokens, nkv, d]),
            key_cache: cache_dims.clone(),
            value_cache: Some(cache_dims),
            dtypes: [
                acl_dtype(key.dtype()),
                acl_dtype(value.dtype()),
                acl_dtype(self.key_cache.dtype()),
                acl_dtype(self.value_cache.dtype()),
            ],
        })?;
        let device = self.key_cache.device();
        ensure!(
            key.device() == device && value.device() == device,
            "key",
            "must be on the cache's device {device:?}"
        );
        ensure!(
            key.dtype() == self.key_cache.dtype() && value.dtype() == self.key_cache.dtype(),
            "key",
            "dtype must be the cache's {:?}, got {:?} / {:?}",
            self.key_cache.dtype(),
            key.dtype(),
            value.dtype()
        );
        let bs = self.block_size;
        let seq = self.seq(id)?.clone();
        let cow = seq.len % bs != 0 && self.refs[*seq.blocks.last().expect("len > 0")] > 1;
        let needed = (seq.len + t).div_ceil(bs) - seq.blocks.len() + cow as usize;
        if needed > self.free.len() {
            return Err(AttnError::OutOfBlocks {
                needed,
                free: self.free.len(),
            });
        }
        let mut blocks = seq.blocks;
        if cow {
            let old = blocks.pop().expect("len > 0");
            let new = self.alloc();
            self.refs[old] -= 1;
            let copy = |c: Tensor<B, 4>| {
                let src = c.clone().narrow(0, old, 1);
                c.slice_assign([new..new + 1, 0..bs, 0..nkv, 0..d], src)
            };
            self.key_cache = copy(self.key_cache.clone());
            self.value_cache = copy(self.value_cache.clone());
            blocks.push(new);
        }
        while blocks.len() * bs < seq.len + t {
            blocks.push(self.alloc());
        }
        let slots: Vec<i64> = (seq.len..seq.len + t)
            .map(|p| (blocks[p / bs] * bs + p % bs) as i64)
            .collect();
        let spec = ScatterSpec::new(slots);
        let empty = || Tensor::<B, 4>::empty([0, bs, nkv, d], &device);
        let kc = std::mem::replace(&mut self.key_cache, empty());
        let vc = std::mem::replace(&mut self.value_cache, empty());
        let (kc, vc) = match scatter_pa_kv_cache(key, Some(value), kc, Some(vc), &spec) {
            Ok(caches) => caches,
            Err(e) => {
                // Validated above, so this is the device failing (AttnError::Device): the
                // caches went into the call and are lost. Return this append's blocks and
                // refuse from now on.
                let keep = self.seqs[&id].blocks.len() - usize::from(cow);
                for &b in &blocks[keep..] {
                    self.refs[b] -= 1;
                    if self.refs[b] == 0 {
                        self.free.push(b);
                    }
                }
                if cow {
                    let old = *self.seqs[&id].blocks.last().expect("len > 0");
                    self.refs[old] += 1;
                }
                self.lost = Some(AttnError::Device {
                    op: "PagedKvCache".into(),
                    call: "scatter_pa_kv_cache".into(),
                    status: None,
                    message: format!("the caches were lost when an append failed: {e}"),
                });
                return Err(e);
            }
        };
        self.key_cache = kc;
        self.value_cache = vc.expect("value cache");
        self.seqs.insert(
            id,
            Seq {
                blocks,
                len: seq.len + t,
            },
        );
        Ok(())
    }

    /// Allocates blocks so that sequence `id` can grow by `tokens` without allocating (a
    /// captured decode step's block table is fixed); its length is unchanged. Fails with
    /// [`AttnError::OutOfBlocks`] before changing anything when too few are free, and refuses a
    /// sequence whose partly filled last block is shared (append to it first).
    pub fn reserve(&mut self, id: SeqId, tokens: usize) -> Result<()> {
        self.ensure_intact()?;
        let bs = self.block_size;
        let seq = self.seq(id)?.clone();
        ensure!(
            seq.len % bs == 0 || self.refs[*seq.blocks.last().expect("len > 0")] == 1,
            "id",
            "sequence {id:?} shares its partly filled last block (append to it first)"
        );
        let needed = (seq.len + tokens)
            .div_ceil(bs)
            .saturating_sub(seq.blocks.len());
        if needed > self.free.len() {
            return Err(AttnError::OutOfBlocks {
                needed,
                free: self.free.len(),
            });
        }
        let mut blocks = seq.blocks;
        for _ in 0..needed {
            blocks.push(self.alloc());
        }
        self.seqs.insert(
            id,
            Seq {
                blocks,
                len: seq.len,
            },
        );
        Ok(())
    }

    /// Marks `tokens` more tokens of sequence `id` as written: a device call wrote them into
    /// its reserved blocks ([`Self::reserve`]) at the slots [`Self::slot`] gives.
    pub fn advance(&mut self, id: SeqId, tokens: usize) -> Result<()> {
        self.ensure_intact()?;
        let bs = self.block_size;
        let seq = self
            .seqs
            .get_mut(&id)
            .ok_or_else(|| AttnError::invalid("id", format!("unknown sequence {id:?}")))?;
        ensure!(
            seq.len + tokens <= seq.blocks.len() * bs,
            "tokens",
            "sequence {id:?} has room for {} more tokens in its blocks, not {tokens} (reserve first)",
            seq.blocks.len() * bs - seq.len
        );
        seq.len += tokens;
        Ok(())
    }

    /// The cache slot (`block · blockSize + offset`) of token `pos` of sequence `id`, if its
    /// block is allocated.
    pub fn slot(&self, id: SeqId, pos: usize) -> Result<Option<usize>> {
        let bs = self.block_size;
        Ok(self
            .seq(id)?
            .blocks
            .get(pos / bs)
            .map(|&b| b * bs + pos % bs))
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    fn ensure_intact(&self) -> Result<()> {
        match &self.lost {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn alloc(&mut self) -> usize {
        let b = self.free.pop().expect("checked");
        self.refs[b] = 1;
        b
    }

    /// A new sequence sharing `id`'s blocks (no copy until one of them appends into a shared
    /// partly filled block).
    pub fn fork(&mut self, id: SeqId) -> Result<SeqId> {
        let seq = self.seq(id)?.clone();
        for &b in &seq.blocks {
            self.refs[b] += 1;
        }
        let new = SeqId(self.next);
        self.next += 1;
        self.seqs.insert(new, seq);
        Ok(new)
    }

    /// Drops `id`, returning blocks no other sequence uses to the free list.
    pub fn free(&mut self, id: SeqId) -> Result<()> {
        let seq = self
            .seqs
            .remove(&id)
            .ok_or_else(|| AttnError::invalid("seq", format!("unknown sequence {id:?}")))?;
        for b in seq.blocks {
            self.refs[b] -= 1;
            if self.refs[b] == 0 {
                self.free.push(b);
            }
        }
        Ok(())
    }

    /// Attention of `query` `[B, S, N, D]` (BSND: the last `S` tokens of each sequence, already
    /// appended) over each sequence's cached KV. `S = 1` decodes through incremental attention
    /// on the paged cache; `S > 1` runs prompt attention (causal, bottom-right aligned: sparse
    /// mode 3) over the gathered KV. Returns `[B, S, N, D]`.
    pub fn attend(&self, ids: &[SeqId], query: Tensor<B, 4>) -> Result<Tensor<B, 4>> {
        self.attend_with(ids, query, &AttendOptions::default())
    }

    /// [`Self::attend`] with a sliding window and/or learned sinks (see [`AttendOptions`]):
    /// fused inference attention on the paged caches for prefill and decode (the default
    /// [`AttendPath::Fused`]), or prompt / incremental attention with a placeholder token for
    /// the sinks ([`AttendPath::PromptIncre`]).
    pub fn attend_with(
        &self,
        ids: &[SeqId],
        query: Tensor<B, 4>,
        opts: &AttendOptions<B>,
    ) -> Result<Tensor<B, 4>> {
        self.ensure_intact()?;
        let [b, s, n, d] = query.dims();
        ensure!(
            b == ids.len() && n == self.num_heads && d == self.head_dim,
            "query",
            "must be [{}, S, {}, {}], got {:?}",
            ids.len(),
            self.num_heads,
            self.head_dim,
            query.dims()
        );
        if let Some(sinks) = &opts.sinks {
            ensure!(
                sinks.dims() == [n],
                "sinks",
                "must hold one logit per query head ({n}), got shape {:?}",
                sinks.dims()
            );
        }
        let seqs: Vec<&Seq> = ids.iter().map(|&i| self.seq(i)).collect::<Result<_>>()?;
        let first = usize::from(opts.has_placeholder_sinks());
        for (i, sq) in seqs.iter().enumerate() {
            ensure!(
                sq.len >= s + first,
                "query",
                "sequence {i} holds {} tokens, fewer than the query's S = {s}{}",
                sq.len,
                if first == 1 {
                    " plus the sink slot"
                } else {
                    ""
                }
            );
        }
        let lens: Vec<i64> = seqs.iter().map(|q| q.len as i64).collect();
        let nkv_heads = if self.kv_heads == n { 0 } else { self.kv_heads };
        if opts.is_active() && opts.path == AttendPath::Fused {
            return self.attend_fused(&seqs, query, opts);
        }
        if s == 1 {
            let (table, max_blocks) = Self::table_of(&seqs);
            let mut spec = IncreSpec::new(n, self.scale, IfaLayout::Bsnd);
            spec.num_key_value_heads = nkv_heads;
            spec.block_size = self.block_size;
            spec.actual_seq_lengths = Some(lens);
            spec.block_table = Some(table);
            let (kc, vc) = self.paged_caches();
            let mut inputs = IncreInputs::new(prim(query), IncreKv::paged(kc, vc));
            if opts.is_active() {
                let cols = max_blocks * self.block_size;
                let device = self.key_cache.device();
                let masked = |t, p| opts.masked(t, p, first);
                let mask = Self::decode_mask(&seqs, cols, &device, masked);
                inputs.atten_mask = Some(prim(mask));
                if let Some(sinks) = opts.placeholder_sinks() {
                    // The sink slot's pseShift is the sink logit, built where the sinks are
                    // (never read back to the host): `[1, N, 1, cols]`, the logits in column 0.
                    let logits = sinks.reshape([1, n, 1, 1]);
                    let pse = if cols > 1 {
                        let rest = Tensor::<B, 4>::zeros([1, n, 1, cols - 1], &device)
                            .cast(logits.dtype());
                        Tensor::cat(vec![logits, rest], 3)
                    } else {
                        logits
                    };
                    inputs.pse_shift = Some(prim(pse));
                }
            }
            return incre_flash_attention_with(inputs, &spec);
        }
        // Prefill: gather each sequence's KV into [B, Skv_max, Nkv, D] (zero padded).
        let max_len = seqs.iter().map(|q| q.len).max().unwrap_or(0);
        let device = query.device();
        let gather = |cache: &Tensor<B, 4>, q: &Seq| -> Tensor<B, 3> {
            let [_, bs, nkv, dh] = cache.dims();
            let ids: Vec<i64> = q.blocks.iter().map(|&x| x as i64).collect();
            let idx =
                Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [q.blocks.len()]), &device);
            let blocks = cache.clone().select(0, idx);
            let rows = reshaped(blocks, [q.blocks.len() * bs, nkv, dh]).narrow(0, 0, q.len);
            if q.len < max_len {
                Tensor::cat(
                    vec![rows, Tensor::zeros([max_len - q.len, nkv, dh], &device)],
                    0,
                )
            } else {
                rows
            }
        };
        // One sequence (a prompt's prefill) needs no stacking: a leading axis of 1.
        let batch = |cache: &Tensor<B, 4>| -> Tensor<B, 4> {
            match seqs.as_slice() {
                [q] => {
                    let rows = gather(cache, q);
                    let [t, nkv, dh] = rows.dims();
                    reshaped(rows, [1, t, nkv, dh])
                }
                _ => Tensor::stack::<4>(seqs.iter().map(|q| gather(cache, q)).collect(), 0),
            }
        };
        let (k, v) = (batch(&self.key_cache), batch(&self.value_cache));
        let mut spec = PromptSpec::new(n, self.scale, PfaLayout::Bsnd);
        spec.num_key_value_heads = nkv_heads;
        spec.actual_seq_lengths_kv = Some(lens);
        let (mut mask_t, mut pse_t) = (None, None);
        if opts.is_active() {
            // A dense mask (sparse mode 0): causal, bottom-right aligned, windowed, with the
            // sink slot always visible; the sink logit enters as the slot's pseShift.
            let mut mask = vec![0f32; b * s * max_len];
            for (bi, q) in seqs.iter().enumerate() {
                for i in 0..s {
                    let pos = q.len - s + i;
                    let row = &mut mask[(bi * s + i) * max_len..(bi * s + i + 1) * max_len];
                    for (j, m) in row.iter_mut().enumerate() {
                        *m = f32::from(u8::from(j > pos || opts.masked(j, pos, first)));
                    }
                }
            }
            spec.sparse_mode = 0;
            // Mode 0 also applies pre/nextTokens (top-left aligned, next defaults to 0); the
            // dense mask already says everything, so open the band fully.
            spec.pre_tokens = crate::prompt::INT_MAX_TOKENS;
            spec.next_tokens = crate::prompt::INT_MAX_TOKENS;
            spec.atten_mask = PromptMaskKind::Dense;
            mask_t = Some(Tensor::<B, 3>::from_data(
                TensorData::new(mask, [b, s, max_len]),
                &device,
            ));
            if let Some(sinks) = opts.placeholder_sinks() {
                // The sink slot's pseShift is the sink logit for every query row, built where
                // the sinks are (never read back to the host): `[1, N, S, max_len]`, the
                // logits in column 0.
                let logits = sinks.reshape([1, n, 1, 1]).repeat_dim(2, s);
                let pse = if max_len > 1 {
                    let rest =
                        Tensor::<B, 4>::zeros([1, n, s, max_len - 1], &device).cast(logits.dtype());
                    Tensor::cat(vec![logits, rest], 3)
                } else {
                    logits
                };
                pse_t = Some(pse);
            }
        } else {
            spec.sparse_mode = 3;
            spec.atten_mask = PromptMaskKind::Compressed;
        }
        prompt_flash_attention_with(query, k, v, mask_t, pse_t, &spec)
    }
    /// The caches as the ops' paged key and value, `(blocknum, blockSize, H)`.
    fn paged_caches(&self) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let [nb, bs, nkv, dh] = self.key_cache.dims();
        let paged = |c: &Tensor<B, 4>| reshaped(c.clone(), [nb, bs, nkv * dh]);
        (paged(&self.key_cache), paged(&self.value_cache))
    }

    /// A decode step's dense window mask `[B, cols]` on the caches' device: 1 where
    /// `masked(t, p)` for token `t` of a sequence whose query sits at position `p`. It follows
    /// from the sequences' lengths (host facts) and goes to the op as a tensor like the query.
    fn decode_mask(
        seqs: &[&Seq],
        cols: usize,
        device: &B::Device,
        masked: impl Fn(usize, usize) -> bool,
    ) -> Tensor<B, 2> {
        let mut mask = vec![0f32; seqs.len() * cols];
        for (i, q) in seqs.iter().enumerate() {
            for (t, m) in mask[i * cols..(i + 1) * cols].iter_mut().enumerate() {
                *m = f32::from(u8::from(masked(t, q.len - 1)));
            }
        }
        Tensor::from_data(TensorData::new(mask, [seqs.len(), cols]), device)
    }

    /// The block table `[B, max blocks]` of `seqs` (unused entries 0) and its width.
    fn table_of(seqs: &[&Seq]) -> (BlockTable, usize) {
        let b = seqs.len();
        let max_blocks = seqs
            .iter()
            .map(|q| q.blocks.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut table = vec![0i32; b * max_blocks];
        for (i, q) in seqs.iter().enumerate() {
            for (j, &blk) in q.blocks.iter().enumerate() {
                table[i * max_blocks + j] = blk as i32;
            }
        }
        let table = BlockTable {
            data: Arc::from(table),
            shape: vec![b, max_blocks],
        };
        (table, max_blocks)
    }

    /// [`AttendPath::Fused`]: FIA over the paged caches, prefill and decode alike (query BSND,
    /// caches as `(blocknum, blockSize, H)`), with the sinks as `learnableSink`. A prefill
    /// window is band mode 4 from the bottom-right corner (`preTokens = W`, `nextTokens = 0`:
    /// query `i` of a sequence of `Skv` tokens sees `p − W ..= p`, `p = Skv − S + i`), without
    /// a window causal mode 3; both take CANN's compressed mask. Decode has FIA's band modes
    /// without effect, so a window is a dense `(B, KV_S)` mask (mode 0).
    fn attend_fused(
        &self,
        seqs: &[&Seq],
        query: Tensor<B, 4>,
        opts: &AttendOptions<B>,
    ) -> Result<Tensor<B, 4>> {
        let [_, s, n, _] = query.dims();
        let (table, max_blocks) = Self::table_of(seqs);
        let mut spec = FiaSpec::new(n, self.scale, PfaLayout::Bsnd);
        spec.num_key_value_heads = if self.kv_heads == n { 0 } else { self.kv_heads };
        spec.block_size = self.block_size;
        spec.block_table = Some(table);
        spec.actual_seq_lengths_kv = Some(seqs.iter().map(|q| q.len as i64).collect());
        let (kc, vc) = self.paged_caches();
        let mut inputs = FiaInputs::new(
            prim(query),
            FiaKv::paged(kc, vc),
            opts.sinks.clone().map(prim),
        );
        if s == 1 {
            if let Some(w) = opts.window {
                let cols = max_blocks * self.block_size;
                let device = self.key_cache.device();
                let mask = Self::decode_mask(seqs, cols, &device, |t, p| t + w < p);
                spec.atten_mask = FiaMask::Dense;
                inputs.atten_mask = Some(prim(mask));
            }
        } else {
            spec.atten_mask = FiaMask::Compressed;
            match opts.window {
                Some(w) => {
                    spec.sparse_mode = 4;
                    spec.pre_tokens = w as i64;
                    spec.next_tokens = 0;
                }
                None => spec.sparse_mode = 3,
            }
        }
        let (out, _) = fused_infer_attention_with::<B, 4, 4>(inputs, &spec)?;
        Ok(out)
    }
}
