//! Generation through the paged KV cache: one [`PagedKvCache`] per layer; a prompt is
//! prefilled with prompt attention (its keys and values scattered into the cache first), then
//! every step decodes one token per sequence with incremental attention on the paged cache.
//! A model with sinks or sliding windows runs fused inference attention
//! (`aclnnFusedInferAttentionScoreV4`) on the paged caches for both, the sinks as its
//! `learnableSink` ([`AttendPath::Fused`]); where CANN's FIA cannot take the sinks (head dims
//! other than 64 and 128, or a CANN without V4) the sinks ride on a zero placeholder token
//! whose `pseShift` is the sink logit, through prompt / incremental attention
//! ([`AttendPath::PromptIncre`]). [`Generator::attend_path`] says which one a generator runs.

use burn::tensor::{DType, FloatDType, Int, Tensor, TensorData};

use crate::load::data::SplitMix;
use crate::model::rope::Rope;
use crate::model::transformer::{fused_rms_norm, Qkv, Transformer};
use burn_ascend::{AttendOptions, AttendPath, AttnError, PagedKvCache, SeqId, TrainingBackend};

/// A model with its per-layer paged caches and the sequences being generated.
#[derive(Debug)]
pub struct Generator<B: TrainingBackend> {
    pub(crate) model: Transformer<B>,
    pub(crate) caches: Vec<PagedKvCache<B>>,
    /// Per sequence: its id in each layer's cache and its token count (without the sink slot).
    pub(crate) seqs: Vec<(Vec<SeqId>, usize)>,
    /// How windows and sinks reach the attention ops.
    pub(crate) path: AttendPath,
    /// The dtype the caches hold and attention computes in (`None`: the model's). CANN's
    /// attention ops take F16 / BF16 queries, not F32, so a model served on an NPU keeps its
    /// projections where they are and attends in half precision.
    pub(crate) attention_dtype: Option<FloatDType>,
}

impl<B: TrainingBackend> Generator<B> {
    /// Caches of `num_blocks` blocks of `block_size` tokens per layer.
    pub fn new(
        model: Transformer<B>,
        num_blocks: usize,
        block_size: usize,
        device: &B::Device,
    ) -> Result<Self, AttnError> {
        let c = &model.config;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let caches = (0..c.num_hidden_layers)
            .map(|_| {
                PagedKvCache::new(
                    num_blocks,
                    block_size,
                    c.num_attention_heads,
                    c.num_key_value_heads,
                    c.head_dim,
                    scale,
                    device,
                )
            })
            .collect::<Result<_, _>>()?;
        // CANN's FIA takes a learnableSink for head dims 64 and 128 only, and pages of
        // other head dims in prefill only in multiples of 128 tokens.
        let fia_dim = matches!(c.head_dim, 64 | 128);
        let fused = B::fia_sink_available(device)
            && (fia_dim || (!c.attention_sinks && block_size.is_multiple_of(128)));
        Ok(Self {
            model,
            caches,
            seqs: Vec::new(),
            path: if fused {
                AttendPath::Fused
            } else {
                AttendPath::PromptIncre
            },
            attention_dtype: None,
        })
    }

    /// Keys, values and queries in `dtype` in the caches and the attention ops (F16 / BF16
    /// serving), the attention's output cast back to the model's dtype; only before the first
    /// sequence. FIA then gets the sinks in the dtype its path reads on the device's CANN
    /// release: BF16 for every layout with an F16 or BF16 query up to CANN 8.5.0.
    pub fn with_attention_dtype(mut self, dtype: FloatDType) -> Result<Self, AttnError> {
        if !self.seqs.is_empty() {
            return Err(AttnError::invalid(
                "dtype",
                "the attention dtype can only change before the first sequence is added",
            ));
        }
        self.caches = self
            .caches
            .into_iter()
            .map(|c| c.with_dtype(dtype.into()))
            .collect::<Result<_, _>>()?;
        self.attention_dtype = Some(dtype);
        Ok(self)
    }

    /// `x` in the attention dtype.
    pub(crate) fn to_attention<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self.attention_dtype {
            Some(dt) => x.cast(dt),
            None => x,
        }
    }

    /// A layer's queries, keys and values in the attention dtype, with the dtype the
    /// attention's output is cast back to (the model's).
    pub(crate) fn qkv_to_attention(&self, (q, k, v): Qkv<B>) -> (Qkv<B>, DType) {
        let dt = q.dtype();
        (
            (
                self.to_attention(q),
                self.to_attention(k),
                self.to_attention(v),
            ),
            dt,
        )
    }

    /// The embeddings `[T, hidden]` of `tokens`.
    fn embed(&self, tokens: &[u32], device: &B::Device) -> Tensor<B, 2> {
        let ids: Vec<i64> = tokens.iter().map(|&t| t as i64).collect();
        self.model.embed(Tensor::<B, 1, Int>::from_data(
            TensorData::new(ids, [tokens.len()]),
            device,
        ))
    }

    /// How windows and sinks reach the attention ops: [`AttendPath::Fused`] unless the model
    /// has sinks FIA cannot take (head dim not 64 or 128), its head dim needs pages of a
    /// multiple of 128 tokens in FIA's prefill and `block_size` is not one, or the device has
    /// no FIA V4.
    pub fn attend_path(&self) -> AttendPath {
        self.path
    }

    /// Forces `path` (to compare the two, or to serve on a CANN whose FIA misbehaves). Only
    /// before the first sequence: the placeholder path lays the caches out differently.
    pub fn with_attend_path(mut self, path: AttendPath) -> Result<Self, AttnError> {
        if !self.seqs.is_empty() {
            return Err(AttnError::invalid(
                "path",
                "can only change before the first sequence is added",
            ));
        }
        self.path = path;
        Ok(self)
    }

    /// The model.
    pub fn model(&self) -> &Transformer<B> {
        &self.model
    }

    /// Tokens held for sequence `seq`.
    pub fn len(&self, seq: usize) -> usize {
        self.seqs[seq].1
    }

    /// Whether no sequence was added.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    fn options(&self, layer: usize) -> AttendOptions<B> {
        let attn = &self.model.layers[layer].self_attn;
        AttendOptions {
            // The cache's window counts the tokens before the query (it sees `p − W ..= p`);
            // the model's counts keys including the query, transformers' semantics.
            window: self.model.config.layer_window(layer).map(|w| w - 1),
            path: self.path,
            // The parameter's tensor, on the model's device: the backend casts it there to the
            // dtype FIA's path reads on the device's CANN release, with no host round trip per
            // layer and decode step.
            sinks: attn.sinks.as_ref().map(|s| s.val()),
        }
    }

    /// The decoder layers over `tokens` at `positions` (one each): the hidden states
    /// `[T, hidden]` before the head. `attend` makes each layer's attention `[.., heads, D]`
    /// from the layer's cache and index, its queries, keys and values `[T, heads, D]` in the
    /// attention dtype and its options; prefill and decode differ only there.
    fn layers(
        &mut self,
        tokens: &[u32],
        positions: &[usize],
        mut attend: impl FnMut(
            &mut PagedKvCache<B>,
            usize,
            Qkv<B>,
            &AttendOptions<B>,
        ) -> Result<Tensor<B, 4>, AttnError>,
    ) -> Result<Tensor<B, 2>, AttnError> {
        let c = &self.model.config;
        let (t, n, d) = (tokens.len(), c.num_attention_heads, c.head_dim);
        let device = self.model.embed_tokens.weight.val().device();
        let rope = Rope::new(positions, c, &device);
        let mut x = self.embed(tokens, &device);
        for (layer, block) in self.model.layers.iter().enumerate() {
            let opts = self.options(layer);
            // The fused norms and SwiGLU (one pass each on the CPU, one aclnn call each on
            // Ascend), as training runs them.
            let h = fused_rms_norm(&block.input_layernorm, x.clone())?;
            let (qkv, dt) = self.qkv_to_attention(block.self_attn.qkv_fused(h, &rope, c)?);
            let o = attend(&mut self.caches[layer], layer, qkv, &opts)?.cast(dt);
            x = x + block.self_attn.out(o.reshape([t, n, d]));
            let h = fused_rms_norm(&block.post_attention_layernorm, x.clone())?;
            x = x + block.mlp.forward_fused(h)?;
        }
        Ok(x)
    }

    /// Adds a sequence and prefills `prompt` (at least one token). Returns the sequence's
    /// index and the logits `[V]` of its last prompt token.
    pub fn add(&mut self, prompt: &[u32]) -> Result<(usize, Vec<f32>), AttnError> {
        if prompt.is_empty() {
            return Err(AttnError::invalid("prompt", "needs at least one token"));
        }
        let c = self.model.config.clone();
        let device = self.model.embed_tokens.weight.val().device();
        let mut ids = Vec::with_capacity(self.caches.len());
        for (layer, cache) in self.caches.iter_mut().enumerate() {
            let id = cache.add_sequence();
            if self.path == AttendPath::PromptIncre
                && self.model.layers[layer].self_attn.sinks.is_some()
            {
                let zero = Tensor::<B, 3>::zeros([1, c.num_key_value_heads, c.head_dim], &device);
                let zero = match self.attention_dtype {
                    Some(dt) => zero.cast(dt),
                    None => zero,
                };
                cache.append(id, zero.clone(), zero)?;
            }
            ids.push(id);
        }
        let l = prompt.len();
        let positions: Vec<usize> = (0..l).collect();
        let (n, d) = (c.num_attention_heads, c.head_dim);
        let x = self.layers(prompt, &positions, |cache, layer, (q, k, v), opts| {
            cache.append(ids[layer], k, v)?;
            cache.attend_with(&ids[layer..=layer], q.reshape([1, l, n, d]), opts)
        })?;
        let logits = self.model.head_packed(x.narrow(0, l - 1, 1))?;
        self.seqs.push((ids, l));
        Ok((self.seqs.len() - 1, to_vec(logits)))
    }

    /// One token per sequence, each sequence one of this generator's: what a decode step takes.
    pub(crate) fn check_step(&self, seqs: &[usize], tokens: &[u32]) -> Result<(), AttnError> {
        if seqs.len() != tokens.len() || seqs.is_empty() {
            return Err(AttnError::invalid(
                "tokens",
                format!(
                    "need one token per sequence ({}), got {}",
                    seqs.len(),
                    tokens.len()
                ),
            ));
        }
        if let Some(&bad) = seqs.iter().find(|&&s| s >= self.seqs.len()) {
            return Err(AttnError::invalid(
                "seqs",
                format!("unknown sequence {bad}"),
            ));
        }
        Ok(())
    }

    /// Appends one token to each of `seqs` and returns each one's next-token logits `[V]`.
    pub fn step(&mut self, seqs: &[usize], tokens: &[u32]) -> Result<Vec<Vec<f32>>, AttnError> {
        self.check_step(seqs, tokens)?;
        let c = &self.model.config;
        let (b, n, d) = (seqs.len(), c.num_attention_heads, c.head_dim);
        let positions: Vec<usize> = seqs.iter().map(|&s| self.seqs[s].1).collect();
        // Each layer's cache ids of `seqs`.
        let layer_ids: Vec<Vec<SeqId>> = (0..self.model.layers.len())
            .map(|layer| seqs.iter().map(|&s| self.seqs[s].0[layer]).collect())
            .collect();
        let x = self.layers(tokens, &positions, |cache, layer, (q, k, v), opts| {
            let ids = &layer_ids[layer];
            for (i, &id) in ids.iter().enumerate() {
                cache.append(id, k.clone().narrow(0, i, 1), v.clone().narrow(0, i, 1))?;
            }
            cache.attend_with(ids, q.reshape([b, 1, n, d]), opts)
        })?;
        for &s in seqs {
            self.seqs[s].1 += 1;
        }
        let logits = to_vec(self.model.head_packed(x)?);
        let v = self.model.config.vocab_size;
        Ok(logits.chunks(v).map(<[f32]>::to_vec).collect())
    }

    /// Frees every sequence's blocks.
    pub fn clear(&mut self) -> Result<(), AttnError> {
        for (ids, _) in self.seqs.drain(..) {
            for (cache, id) in self.caches.iter_mut().zip(ids) {
                cache.free(id)?;
            }
        }
        Ok(())
    }
}

pub(crate) fn to_vec<B: burn::tensor::backend::Backend>(t: Tensor<B, 2>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().expect("f32")
}

/// How the next token is picked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The most likely token.
    Greedy,
    /// Nucleus sampling: the smallest set of tokens whose probability reaches `top_p`, after
    /// dividing the logits by `temperature`.
    TopP {
        /// Probability mass kept.
        top_p: f64,
        /// Logit temperature.
        temperature: f64,
    },
}

/// Picks a token from `logits`.
pub fn sample(logits: &[f32], sampling: Sampling, rng: &mut SplitMix) -> u32 {
    match sampling {
        Sampling::Greedy => {
            logits
                .iter()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |best, (i, &l)| {
                    if l > best.1 {
                        (i, l)
                    } else {
                        best
                    }
                })
                .0 as u32
        }
        Sampling::TopP { top_p, temperature } => {
            let t = temperature.max(1e-6);
            let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l)) as f64;
            let mut probs: Vec<(usize, f64)> = logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (i, ((l as f64 - max) / t).exp()))
                .collect();
            let total: f64 = probs.iter().map(|p| p.1).sum();
            probs.sort_by(|a, b| b.1.total_cmp(&a.1));
            let mut kept = 0.0;
            let mut cut = probs.len();
            for (i, p) in probs.iter().enumerate() {
                kept += p.1 / total;
                if kept >= top_p {
                    cut = i + 1;
                    break;
                }
            }
            let probs = &probs[..cut];
            let mass: f64 = probs.iter().map(|p| p.1).sum();
            let mut r = rng.unit() * mass;
            for p in probs {
                r -= p.1;
                if r <= 0.0 {
                    return p.0 as u32;
                }
            }
            probs.last().map_or(0, |p| p.0 as u32)
        }
    }
}

/// Prompts served together and what came out.
#[derive(Debug, Clone, Default)]
pub struct GenerationRun {
    /// The prompts' ids.
    pub prompts: Vec<Vec<u32>>,
    /// The generated ids per prompt.
    pub generated: Vec<Vec<u32>>,
    /// Per prompt, the cached path's logits `[V]` that predicted each generated token.
    pub logits: Vec<Vec<Vec<f32>>>,
    /// Seconds spent in prefill (all prompts).
    pub prefill_secs: f64,
    /// Seconds spent decoding.
    pub decode_secs: f64,
}

impl GenerationRun {
    /// Prefill tokens per second.
    pub fn prefill_tokens_per_sec(&self) -> f64 {
        self.prompts.iter().map(Vec::len).sum::<usize>() as f64 / self.prefill_secs.max(1e-9)
    }

    /// Decode tokens per second (summed over sequences).
    pub fn decode_tokens_per_sec(&self) -> f64 {
        let steps: usize = self
            .generated
            .iter()
            .map(|g| g.len().saturating_sub(1))
            .sum();
        steps as f64 / self.decode_secs.max(1e-9)
    }
}

/// Prefills every prompt, then decodes `max_new` tokens for all of them at once (one batched
/// incremental-attention call per layer and step), sequence `i` sampled with `sampling[i]`.
pub fn generate_batch<B: TrainingBackend>(
    gen: &mut Generator<B>,
    prompts: &[Vec<u32>],
    max_new: usize,
    sampling: &[Sampling],
    rng: &mut SplitMix,
) -> Result<GenerationRun, AttnError> {
    generate_batch_until(gen, prompts, max_new, sampling, rng, &[])
}

/// [`generate_batch`] where a sequence stops after emitting one of `stop` (its end-of-sequence
/// tokens, see [`crate::load::config::eos_token_ids`]): the stop token is the last of its
/// `generated`, and later steps decode only the sequences still running. With no stop token
/// it draws from `rng` exactly as [`generate_batch`].
pub fn generate_batch_until<B: TrainingBackend>(
    gen: &mut Generator<B>,
    prompts: &[Vec<u32>],
    max_new: usize,
    sampling: &[Sampling],
    rng: &mut SplitMix,
    stop: &[u32],
) -> Result<GenerationRun, AttnError> {
    generate_with(
        gen,
        prompts,
        max_new,
        sampling,
        rng,
        stop,
        |g, seqs, tokens| g.step(seqs, tokens),
    )
}

/// [`generate_batch_until`] with each decode step made by `decode`.
pub(crate) fn generate_with<B: TrainingBackend>(
    gen: &mut Generator<B>,
    prompts: &[Vec<u32>],
    max_new: usize,
    sampling: &[Sampling],
    rng: &mut SplitMix,
    stop: &[u32],
    mut decode: impl FnMut(&mut Generator<B>, &[usize], &[u32]) -> Result<Vec<Vec<f32>>, AttnError>,
) -> Result<GenerationRun, AttnError> {
    if sampling.len() != prompts.len() {
        return Err(AttnError::invalid(
            "sampling",
            format!("one per prompt ({}), got {}", prompts.len(), sampling.len()),
        ));
    }
    let mut run = GenerationRun {
        prompts: prompts.to_vec(),
        ..Default::default()
    };
    let start = std::time::Instant::now();
    let mut seqs = Vec::new();
    for p in prompts {
        let (seq, logits) = gen.add(p)?;
        seqs.push(seq);
        run.logits.push(vec![logits]);
    }
    run.prefill_secs = start.elapsed().as_secs_f64();
    let start = std::time::Instant::now();
    run.generated = vec![Vec::new(); prompts.len()];
    // Indices (into `prompts`) of the sequences still generating.
    let mut running: Vec<usize> = (0..prompts.len()).collect();
    for step in 0..max_new {
        let next: Vec<u32> = running
            .iter()
            .map(|&i| sample(run.logits[i].last().expect("prefilled"), sampling[i], rng))
            .collect();
        for (&i, &t) in running.iter().zip(&next) {
            run.generated[i].push(t);
        }
        if step + 1 == max_new {
            break;
        }
        let (cont, tokens): (Vec<usize>, Vec<u32>) = running
            .iter()
            .zip(&next)
            .filter(|(_, t)| !stop.contains(t))
            .map(|(&i, &t)| (i, t))
            .unzip();
        if cont.is_empty() {
            break;
        }
        let ids: Vec<usize> = cont.iter().map(|&i| seqs[i]).collect();
        for (k, l) in decode(gen, &ids, &tokens)?.into_iter().enumerate() {
            run.logits[cont[k]].push(l);
        }
        running = cont;
    }
    run.decode_secs = start.elapsed().as_secs_f64();
    Ok(run)
}

/// Largest `|Δlogit|` between the cached path's logits in `run` and the logits of the full
/// sequences (prompt + generated) recomputed in one packed varlen forward.
pub fn max_logit_gap<B: TrainingBackend>(
    model: &Transformer<B>,
    run: &GenerationRun,
) -> Result<f32, AttnError> {
    let device = model.embed_tokens.weight.val().device();
    let mut tokens = Vec::new();
    let mut cu = vec![0i64];
    for (p, g) in run.prompts.iter().zip(&run.generated) {
        let full: Vec<i64> = p
            .iter()
            .chain(&g[..g.len().saturating_sub(1)])
            .map(|&t| t as i64)
            .collect();
        tokens.extend(full);
        cu.push(tokens.len() as i64);
    }
    let t = tokens.len();
    let logits = to_vec(model.forward_packed(
        Tensor::<B, 1, Int>::from_data(TensorData::new(tokens, [t]), &device),
        &cu,
    )?);
    let v = model.config.vocab_size;
    let mut gap = 0f32;
    for (i, cached) in run.logits.iter().enumerate() {
        let first = cu[i] as usize + run.prompts[i].len() - 1;
        for (j, row) in cached.iter().enumerate() {
            let full = &logits[(first + j) * v..(first + j + 1) * v];
            for (a, b) in row.iter().zip(full) {
                gap = gap.max((a - b).abs());
            }
        }
    }
    Ok(gap)
}
