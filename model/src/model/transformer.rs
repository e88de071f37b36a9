//! The decoder: token embedding, pre-norm blocks of RMSNorm → GQA attention with learned sinks
//! (sliding-window or full causal per layer) → RMSNorm → SwiGLU MLP, a final RMSNorm and the output
//! head (gpt-oss, Qwen3-MoE: a mixture of experts in place of SwiGLU, see `moe.rs`) — with the switches
//! Hugging Face's Llama-family checkpoints need: q/k/v and o biases, MLP biases, Qwen3's q/k
//! RMSNorm before RoPE, tied embeddings (see `load/config/`).
//!
//! Training runs on packed batches: `tokens [T]` holding several sequences back to back,
//! delimited by flash-attn style `cu_seqlens`, through this crate's varlen op (one fused
//! backward under `Autodiff`). [`Transformer::forward_padded`] runs the same model on a padded
//! `[B, S]` batch through attention composed of plain Burn ops; the two must agree, which the
//! tests check on gradients.

use burn::module::{Module, Param};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig, RmsNorm, RmsNormConfig};
use burn::tensor::activation::{log_softmax, silu, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, FloatDType, Int, Tensor, TensorData};

use crate::load::config::ModelConfig;
use crate::model::lora_adapter::{adapted, AttentionAdapters, LoraAdapter, MlpAdapters};
use crate::model::moe::Moe;
use crate::model::rope::Rope;
use burn_ascend::{
    flash_attention_varlen, AttnError, FlashAttnOptions, FusedBackend, GroupedMatmulBackend,
    LinearBackend, MoeGatingBackend, TrainingBackend, ViewBackend, WeightLayout,
};

/// Grouped-query attention with optional learned per-head sinks.
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    /// `[hidden, N·D]`.
    pub q_proj: Linear<B>,
    /// `[hidden, Nkv·D]`.
    pub k_proj: Linear<B>,
    /// `[hidden, Nkv·D]`.
    pub v_proj: Linear<B>,
    /// `[N·D, hidden]`.
    pub o_proj: Linear<B>,
    /// Sink logits `[N]` (unscaled; an extra term `exp(sink)` in each softmax denominator).
    pub sinks: Option<Param<Tensor<B, 1>>>,
    /// Qwen3's per-head RMSNorm of q over `head_dim`, before RoPE.
    pub q_norm: Option<RmsNorm<B>>,
    /// Qwen3's per-head RMSNorm of k over `head_dim`, before RoPE.
    pub k_norm: Option<RmsNorm<B>>,
    /// LoRA adapters on the projections (`lora_adapter.rs`); `None` unless attached (an `Option` so
    /// that records saved before LoRA existed still load).
    pub lora: Option<AttentionAdapters<B>>,
}

/// SwiGLU: `down(silu(gate(x)) · up(x))`.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// `[hidden, inter]`.
    pub gate_proj: Linear<B>,
    /// `[hidden, inter]`.
    pub up_proj: Linear<B>,
    /// `[inter, hidden]`.
    pub down_proj: Linear<B>,
    /// LoRA adapters on the projections (`lora_adapter.rs`); `None` unless attached (see
    /// [`Attention::lora`]).
    pub lora: Option<MlpAdapters<B>>,
}

/// A block's feed-forward part: SwiGLU, or gpt-oss's / Qwen3-MoE's mixture of experts.
// The dense variant is the larger since it carries its LoRA slots; a block holds one, built
// once, so boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Ffn<B: Backend> {
    /// The dense SwiGLU MLP (Llama, Qwen, Mistral, ours).
    Dense(Mlp<B>),
    /// Routed experts (gpt-oss's `GptOssMLP`, Qwen3-MoE's `Qwen3MoeSparseMoeBlock`).
    Experts(Moe<B>),
}

impl<B: Backend> Ffn<B> {
    /// The dense MLP, if this is one.
    pub fn dense(&self) -> Option<&Mlp<B>> {
        match self {
            Self::Dense(m) => Some(m),
            Self::Experts(_) => None,
        }
    }

    /// The experts, if this is a mixture.
    pub fn experts(&self) -> Option<&Moe<B>> {
        match self {
            Self::Experts(m) => Some(m),
            Self::Dense(_) => None,
        }
    }
}

impl<B: GroupedMatmulBackend + LinearBackend + MoeGatingBackend> Ffn<B> {
    /// `x [T, hidden]` → `[T, hidden]`; the experts' grouped matmuls can refuse (typed).
    pub fn forward(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError> {
        match self {
            Self::Dense(m) => Ok(m.forward(x)),
            Self::Experts(m) => m.forward(x),
        }
    }
}

/// One pre-norm decoder block.
#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    /// Norm before attention.
    pub input_layernorm: RmsNorm<B>,
    /// Attention.
    pub self_attn: Attention<B>,
    /// Norm before the MLP.
    pub post_attention_layernorm: RmsNorm<B>,
    /// MLP: SwiGLU, or experts for gpt-oss.
    pub mlp: Ffn<B>,
}

/// The decoder-only transformer.
#[derive(Module, Debug)]
pub struct Transformer<B: Backend> {
    /// `[V, hidden]`.
    pub embed_tokens: Embedding<B>,
    /// The blocks.
    pub layers: Vec<Block<B>>,
    /// Final norm.
    pub norm: RmsNorm<B>,
    /// Output head `[hidden, V]`; `None` when tied to the embedding.
    pub lm_head: Option<Linear<B>>,
    /// Hyper-parameters (not a parameter).
    #[module(skip)]
    pub config: ModelConfig,
    /// Mixed precision: the dtype the blocks' projections, attention and MLP and the output
    /// head compute in (`None`: the parameters' own). See [`Self::with_compute_dtype`].
    #[module(skip)]
    pub compute_dtype: Option<FloatDType>,
    /// Per-block activation checkpointing in training (`train/recompute.rs`): `train` keeps
    /// only each block's input and recomputes the block in backward. The forward passes
    /// compute the same logits either way. See [`Self::with_block_checkpointing`].
    #[module(skip)]
    pub checkpoint_blocks: bool,
}

/// `x · W + b` of `l` in `x`'s dtype, through the linear op (the weight read where it lies,
/// on all cores, on the CPU): the weights are cast to `x`'s dtype when they differ (mixed
/// precision: f32 master weights, low-precision compute; the cast's backward brings the
/// gradient back to f32).
fn proj<B: LinearBackend, const D: usize>(l: &Linear<B>, x: Tensor<B, D>) -> Tensor<B, D> {
    let dt = x.dtype();
    let weight = l.weight.val().cast(dt);
    let bias = l.bias.as_ref().map(|b| b.val().cast(dt));
    // The layer's shapes were checked when the model was built or loaded and `x` is the
    // model's own activation, so a refusal here is a broken invariant, as a shape error of
    // Burn's own `linear` would be.
    burn_ascend::linear(x, weight, bias, WeightLayout::InOut)
        .unwrap_or_else(|e| panic!("linear layer: {e}"))
}

fn linear<B: Backend>(i: usize, o: usize, bias: bool, device: &B::Device) -> Linear<B> {
    LinearConfig::new(i, o).with_bias(bias).init(device)
}

impl<B: Backend> Transformer<B> {
    /// A randomly initialised model.
    pub fn new(config: &ModelConfig, device: &B::Device) -> Result<Self, AttnError> {
        config.validate()?;
        let c = config;
        let (h, n, nkv, d) = (
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        );
        let norm_of = |size: usize| {
            RmsNormConfig::new(size)
                .with_epsilon(c.rms_norm_eps)
                .init(device)
        };
        let norm = || norm_of(h);
        let layers = (0..c.num_hidden_layers)
            .map(|i| Block {
                input_layernorm: norm(),
                self_attn: Attention {
                    q_proj: linear(h, n * d, c.attention_bias, device),
                    k_proj: linear(h, nkv * d, c.attention_bias, device),
                    v_proj: linear(h, nkv * d, c.attention_bias, device),
                    o_proj: linear(n * d, h, c.attention_output_bias, device),
                    sinks: c
                        .attention_sinks
                        .then(|| Param::from_tensor(Tensor::zeros([n], device))),
                    q_norm: c.qk_norm.then(|| norm_of(d)),
                    k_norm: c.qk_norm.then(|| norm_of(d)),
                    lora: None,
                },
                post_attention_layernorm: norm(),
                mlp: match &c.moe {
                    Some(m) if c.is_sparse_layer(i) => Ffn::Experts(Moe::new(h, m, device)),
                    _ => Ffn::Dense(Mlp {
                        gate_proj: linear(h, c.intermediate_size, c.mlp_bias, device),
                        up_proj: linear(h, c.intermediate_size, c.mlp_bias, device),
                        down_proj: linear(c.intermediate_size, h, c.mlp_bias, device),
                        lora: None,
                    }),
                },
            })
            .collect();
        Ok(Self {
            embed_tokens: EmbeddingConfig::new(c.vocab_size, h).init(device),
            layers,
            norm: norm(),
            lm_head: (!c.tie_word_embeddings).then(|| linear(h, c.vocab_size, false, device)),
            config: c.clone(),
            compute_dtype: None,
            checkpoint_blocks: false,
        })
    }

    /// Mixed precision, as torch's autocast does it for a decoder: the parameters (and so the
    /// optimizer's state and the gradients it sees) stay in their dtype, f32 for the master
    /// weights; each block's input is cast to `dtype` after its RMSNorm, so the projections,
    /// RoPE, attention and the MLP compute in `dtype` on weights cast per step, and the block's
    /// output is cast back before the residual add. The residual stream, the norms, the
    /// logits and the loss stay in the parameters' dtype.
    pub fn with_compute_dtype(mut self, dtype: Option<FloatDType>) -> Self {
        self.compute_dtype = dtype;
        self
    }

    /// Per-block activation checkpointing for training: see [`crate::train::recompute`].
    pub fn with_block_checkpointing(mut self, on: bool) -> Self {
        self.checkpoint_blocks = on;
        self
    }

    /// `x` in the compute dtype.
    pub(crate) fn low<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self.compute_dtype {
            Some(dt) => x.cast(dt),
            None => x,
        }
    }

    /// Token embeddings of `tokens [T]` → `[T, hidden]`.
    pub fn embed(&self, tokens: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        let t = tokens.dims()[0];
        self.embed_tokens
            .forward(tokens.reshape([1, t]))
            .reshape([t, self.config.hidden_size])
    }
}

impl<B: LinearBackend> Transformer<B> {
    /// Final norm and output head: `[T, hidden]` → logits `[T, V]`.
    pub fn head(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.head_of_normed(self.norm.forward(x))
    }

    /// The output head of the final norm's output `[T, hidden]` → logits `[T, V]`.
    fn head_of_normed(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let dt = x.dtype();
        let x = self.low(x);
        let logits = match &self.lm_head {
            Some(head) => proj(head, x),
            None => {
                // The tied embedding `[V, hidden]` read in place as the head's `[out, in]`.
                let w = self.embed_tokens.weight.val().cast(x.dtype());
                burn_ascend::linear(x, w, None, WeightLayout::OutIn)
                    .unwrap_or_else(|e| panic!("tied output head: {e}"))
            }
        };
        logits.cast(dt)
    }
}

impl<B: TrainingBackend> Transformer<B> {
    /// Logits `[T, V]` of packed sequences `tokens [T]` delimited by `cu_seqlens` (B + 1
    /// entries from 0): each sequence attends only to itself, positions restart at 0.
    pub fn forward_packed(
        &self,
        tokens: Tensor<B, 1, Int>,
        cu_seqlens: &[i64],
    ) -> Result<Tensor<B, 2>, AttnError> {
        self.forward_packed_observed(tokens, cu_seqlens, |_, _| {})
    }

    /// [`Self::forward_packed`], handing `observe` each layer's MLP input `[T, hidden]` (in
    /// the compute dtype) with the layer's index: what gpt-oss's router sees, so tests can
    /// tell which tokens a low-precision run routes to other experts than an f32 one.
    pub fn forward_packed_observed(
        &self,
        tokens: Tensor<B, 1, Int>,
        cu_seqlens: &[i64],
        observe: impl FnMut(usize, &Tensor<B, 2>),
    ) -> Result<Tensor<B, 2>, AttnError> {
        let device = tokens.device();
        let positions = packed_positions_of(cu_seqlens, tokens.dims()[0])?;
        let rope = Rope::new(&positions, &self.config, &device);
        self.forward_packed_rope(tokens, cu_seqlens, &rope, observe)
    }

    /// [`Self::forward_packed_observed`] over RoPE tables already on the device (those of
    /// [`packed_positions`] of `cu_seqlens`): nothing uploaded, as a captured training step
    /// needs.
    pub fn forward_packed_rope(
        &self,
        tokens: Tensor<B, 1, Int>,
        cu_seqlens: &[i64],
        rope: &Rope<B>,
        mut observe: impl FnMut(usize, &Tensor<B, 2>),
    ) -> Result<Tensor<B, 2>, AttnError> {
        let mut x = self.embed(tokens);
        for (i, layer) in self.layers.iter().enumerate() {
            let window = self.config.layer_window(i);
            x = layer.forward_packed(x, rope, cu_seqlens, window, self, |h| observe(i, h))?;
        }
        self.head_packed(x)
    }

    /// The final norm (fused) and the output head of the last block's output `[T, hidden]`.
    pub(crate) fn head_packed(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError> {
        Ok(self.head_of_normed(fused_rms_norm(&self.norm, x)?))
    }
}

impl<B: TrainingBackend> Block<B> {
    /// The block on packed `x [T, hidden]` (residual stream, in the parameters' dtype) with
    /// `model`'s config and compute dtype (`model` may be on another backend: per-block
    /// checkpointing runs the block on the inner one); `observe` sees the MLP's input.
    pub(crate) fn forward_packed<M: Backend>(
        &self,
        x: Tensor<B, 2>,
        rope: &Rope<B>,
        cu_seqlens: &[i64],
        window: Option<usize>,
        model: &Transformer<M>,
        mut observe: impl FnMut(&Tensor<B, 2>),
    ) -> Result<Tensor<B, 2>, AttnError> {
        let dt = x.dtype();
        let low = |x: Tensor<B, 2>| match model.compute_dtype {
            Some(dt) => x.cast(dt),
            None => x,
        };
        let h = low(fused_rms_norm(&self.input_layernorm, x.clone())?);
        let a = self
            .self_attn
            .forward_packed(h, rope, cu_seqlens, window, &model.config)?;
        let x = x + a.cast(dt);
        let h = low(fused_rms_norm(&self.post_attention_layernorm, x.clone())?);
        observe(&h);
        Ok(x + self.mlp.forward_fused(h)?.cast(dt))
    }
}

impl<B: GroupedMatmulBackend + LinearBackend + MoeGatingBackend> Transformer<B> {
    /// Logits `[B, S, V]` of a padded batch `tokens [B, S]` whose row `b` holds `lengths[b]`
    /// real tokens, attention composed of Burn ops (matmul, mask, softmax with the sink as an
    /// extra column). Rows past a length produce unspecified logits.
    pub fn forward_padded(&self, tokens: Tensor<B, 2, Int>, lengths: &[usize]) -> Tensor<B, 3> {
        let [b, s] = tokens.dims();
        let device = tokens.device();
        let c = &self.config;
        let positions: Vec<usize> = (0..b).flat_map(|_| 0..s).collect();
        let rope = Rope::new(&positions, c, &device);
        let mut x = self
            .embed(tokens.reshape([b * s]))
            .reshape([b, s, c.hidden_size]);
        for (i, layer) in self.layers.iter().enumerate() {
            let mask = padded_mask::<B>(lengths, s, c.layer_window(i), &device);
            let h = layer.input_layernorm.forward(x.clone());
            x = x + layer.self_attn.forward_padded(h, &rope, mask, c);
            let h = layer.post_attention_layernorm.forward(x.clone());
            let h = h.reshape([b * s, c.hidden_size]);
            // The padded composite has no error channel; the experts' shapes were checked when
            // the model was built or loaded, so a refusal here is a broken invariant.
            let y = layer
                .mlp
                .forward(h)
                .unwrap_or_else(|e| panic!("forward_padded: the MLP refused: {e}"));
            x = x + y.reshape([b, s, c.hidden_size]);
        }
        self.head(x.reshape([b * s, c.hidden_size]))
            .reshape([b, s, c.vocab_size])
    }
}

impl<B: LinearBackend> Mlp<B> {
    /// SwiGLU.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let l = |f: fn(&MlpAdapters<B>) -> &Option<LoraAdapter<B>>| {
            self.lora.as_ref().and_then(|a| f(a).as_ref())
        };
        let gate = |x| proj(&self.gate_proj, x);
        let up = |x| proj(&self.up_proj, x);
        let down = |x| proj(&self.down_proj, x);
        let g = silu(adapted(gate, l(|a| &a.gate_proj), x.clone()));
        adapted(
            down,
            l(|a| &a.down_proj),
            g * adapted(up, l(|a| &a.up_proj), x),
        )
    }
}

impl<B: FusedBackend + LinearBackend> Mlp<B> {
    /// SwiGLU through the fused op: the gate and up projections (each with its LoRA adapter,
    /// when it has one) as the gate and up halves of `aclnnSwiGlu`, one node under `Autodiff`.
    /// The halves go in apart: a device backend concatenates them for the aclnn call, the CPU
    /// reads them where they lie (the concatenation was a tenth of a CPU training step).
    pub fn forward_fused(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError> {
        let l = |f: fn(&MlpAdapters<B>) -> &Option<LoraAdapter<B>>| {
            self.lora.as_ref().and_then(|a| f(a).as_ref())
        };
        let gate = |x| proj(&self.gate_proj, x);
        let up = |x| proj(&self.up_proj, x);
        let down = |x| proj(&self.down_proj, x);
        let h = burn_ascend::swiglu_pair(
            adapted(gate, l(|a| &a.gate_proj), x.clone()),
            adapted(up, l(|a| &a.up_proj), x),
        )?;
        Ok(adapted(down, l(|a| &a.down_proj), h))
    }
}

impl<B: FusedBackend + GroupedMatmulBackend + LinearBackend + MoeGatingBackend> Ffn<B> {
    /// [`Ffn::forward`] with the dense MLP's SwiGLU fused ([`Mlp::forward_fused`]).
    pub fn forward_fused(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError> {
        match self {
            Self::Dense(m) => m.forward_fused(x),
            Self::Experts(m) => m.forward(x),
        }
    }
}

/// `(q [T, N, D], k [T, Nkv, D], v [T, Nkv, D])`.
pub type Qkv<B> = (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>);

impl<B: LinearBackend> Attention<B> {
    /// Projections of `x [T, hidden]` with RoPE applied by the composite ([`Rope::apply`]):
    /// `q [T, N, D]`, `k, v [T, Nkv, D]`. [`Attention::qkv_fused`] is the same through the
    /// fused op.
    pub fn qkv(&self, x: Tensor<B, 2>, rope: &Rope<B>, c: &ModelConfig) -> Qkv<B> {
        let (q, k, v) = self.projections(x, c);
        (rope.apply(q), rope.apply(k), v)
    }

    /// `q [T, N, D]`, `k, v [T, Nkv, D]` before RoPE (q / k normed when the model has it).
    fn projections(&self, x: Tensor<B, 2>, c: &ModelConfig) -> Qkv<B> {
        let t = x.dims()[0];
        let (n, nkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let l = |f: fn(&AttentionAdapters<B>) -> &Option<LoraAdapter<B>>| {
            self.lora.as_ref().and_then(|a| f(a).as_ref())
        };
        let q = adapted(|x| proj(&self.q_proj, x), l(|a| &a.q_proj), x.clone());
        let k = adapted(|x| proj(&self.k_proj, x), l(|a| &a.k_proj), x.clone());
        let v = adapted(|x| proj(&self.v_proj, x), l(|a| &a.v_proj), x);
        let (q, k, v) = (
            view(q, [t, n, d]),
            view(k, [t, nkv, d]),
            view(v, [t, nkv, d]),
        );
        let q = match &self.q_norm {
            Some(norm) => rms_norm_as_hf(norm, q),
            None => q,
        };
        let k = match &self.k_norm {
            Some(norm) => rms_norm_as_hf(norm, k),
            None => k,
        };
        (q, k, v)
    }

    /// The output projection of attention output `[T, N, D]`.
    pub fn out(&self, o: Tensor<B, 3>) -> Tensor<B, 2> {
        let [t, n, d] = o.dims();
        let o = view(o, [t, n * d]);
        let adapter = self.lora.as_ref().and_then(|a| a.o_proj.as_ref());
        adapted(|o| proj(&self.o_proj, o), adapter, o)
    }

    fn forward_padded(
        &self,
        x: Tensor<B, 3>,
        rope: &Rope<B>,
        mask: Tensor<B, 3, Bool>,
        c: &ModelConfig,
    ) -> Tensor<B, 3> {
        let [b, s, h] = x.dims();
        let (n, nkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let (q, k, v) = self.qkv(x.reshape([b * s, h]), rope, c);
        let q = q.reshape([b, s, n, d]).swap_dims(1, 2); // [B, N, S, D]
        let group = n / nkv;
        // GQA: repeat each kv head for its `group` query heads.
        let expand = |t: Tensor<B, 3>| {
            t.reshape([b, s, nkv, 1, d])
                .expand([b, s, nkv, group, d])
                .reshape([b, s, n, d])
                .swap_dims(1, 2)
        };
        let (k, v) = (expand(k), expand(v));
        let scale = 1.0 / (d as f64).sqrt();
        let scores = q.matmul(k.swap_dims(2, 3)) * scale; // [B, N, S, S]
        let scores = scores.mask_fill(mask.unsqueeze_dim::<4>(1).expand([b, n, s, s]), -1e30);
        let p = match &self.sinks {
            Some(sinks) => {
                let col = sinks.val().reshape([1, n, 1, 1]).expand([b, n, s, 1]);
                softmax(Tensor::cat(vec![scores, col], 3), 3).narrow(3, 0, s)
            }
            None => softmax(scores, 3),
        };
        let o = p.matmul(v).swap_dims(1, 2).reshape([b * s, n, d]);
        self.out(o).reshape([b, s, h])
    }
}

impl<B: FusedBackend + LinearBackend> Attention<B> {
    /// [`Attention::qkv`] with q and k rotated by the fused op ([`Rope::apply_fused`]:
    /// `aclnnRotaryPositionEmbedding` on Ascend, one node each under `Autodiff`).
    pub fn qkv_fused(
        &self,
        x: Tensor<B, 2>,
        rope: &Rope<B>,
        c: &ModelConfig,
    ) -> Result<Qkv<B>, AttnError> {
        let (q, k, v) = self.projections(x, c);
        Ok((rope.apply_fused(q)?, rope.apply_fused(k)?, v))
    }
}

impl<B: TrainingBackend> Attention<B> {
    fn forward_packed(
        &self,
        x: Tensor<B, 2>,
        rope: &Rope<B>,
        cu_seqlens: &[i64],
        window: Option<usize>,
        c: &ModelConfig,
    ) -> Result<Tensor<B, 2>, AttnError> {
        let (q, k, v) = self.qkv_fused(x, rope, c)?;
        let opts = FlashAttnOptions {
            causal: true,
            // `w` keys including the query: `w − 1` to its left.
            window: window.map(|w| (w as i64 - 1, 0)),
            sinks: self.sinks.as_ref().map(|s| s.val()),
            ..Default::default()
        };
        let o = flash_attention_varlen(q, k, v, cu_seqlens, cu_seqlens, opts)?;
        Ok(self.out(o))
    }
}

/// `t` under `shape`, a view of the same memory where the backend has one (Burn's `NdArray`
/// reshape copies). The shapes here are the config's head counts and sizes, which loading
/// checked: a refusal is a broken invariant.
fn view<B: ViewBackend, const D1: usize, const D2: usize>(
    t: Tensor<B, D1>,
    shape: [usize; D2],
) -> Tensor<B, D2> {
    burn_ascend::reshape(t, shape).unwrap_or_else(|e| panic!("attention's head split: {e}"))
}

/// RMSNorm as transformers computes it (`LlamaRMSNorm` / `Qwen3RMSNorm`): in f32, the
/// normalised value cast back to `x`'s dtype, then times the weight cast to it. Used on q and
/// k, which are in the compute dtype under mixed precision while the norm's weight stays f32.
fn rms_norm_as_hf<B: Backend, const D: usize>(norm: &RmsNorm<B>, x: Tensor<B, D>) -> Tensor<B, D> {
    let dt = x.dtype();
    let x32 = x.cast(FloatDType::F32);
    let var = x32.clone().powf_scalar(2.0).mean_dim(D - 1);
    let normed = (x32 / (var + norm.epsilon).sqrt()).cast(dt);
    let dims = normed.dims();
    let mut shape = [1usize; D];
    shape[D - 1] = dims[D - 1];
    normed * norm.gamma.val().cast(dt).reshape(shape).expand(dims)
}

/// `norm(x)` through the fused RMSNorm (`aclnnRmsNorm` on Ascend, one node under `Autodiff`):
/// Burn's `RmsNorm` in one op.
pub(crate) fn fused_rms_norm<B: FusedBackend, const D: usize>(
    norm: &RmsNorm<B>,
    x: Tensor<B, D>,
) -> Result<Tensor<B, D>, AttnError> {
    burn_ascend::rms_norm(x, norm.gamma.val(), norm.epsilon)
}

/// Position of each packed token within its sequence.
pub fn packed_positions(cu_seqlens: &[i64]) -> Vec<usize> {
    cu_seqlens
        .windows(2)
        .flat_map(|w| 0..(w[1] - w[0]).max(0) as usize)
        .collect()
}

/// [`packed_positions`] of `t` packed tokens, refused when `cu_seqlens` does not end at `t`.
pub(crate) fn packed_positions_of(cu_seqlens: &[i64], t: usize) -> Result<Vec<usize>, AttnError> {
    let positions = packed_positions(cu_seqlens);
    if positions.len() != t {
        return Err(AttnError::invalid(
            "cu_seqlens",
            format!(
                "must end at the token count {t}, ends at {:?}",
                cu_seqlens.last()
            ),
        ));
    }
    Ok(positions)
}

/// `[B, S, S]` mask (true = masked) of causal attention within each row's length, limited to
/// `window` keys including the query when given (transformers' sliding window: key `j` is
/// visible to query `i` iff `i − W < j ≤ i`).
fn padded_mask<B: Backend>(
    lengths: &[usize],
    s: usize,
    window: Option<usize>,
    device: &B::Device,
) -> Tensor<B, 3, Bool> {
    let mut m = Vec::with_capacity(lengths.len() * s * s);
    for &len in lengths {
        for i in 0..s {
            for j in 0..s {
                let outside = j > i || j >= len || window.is_some_and(|w| j + w <= i);
                // Padding query rows keep their own diagonal so no row is fully masked.
                m.push(outside && !(i >= len && i == j));
            }
        }
    }
    Tensor::from_data(TensorData::new(m, [lengths.len(), s, s]), device)
}

/// [`cross_entropy`] through the fused op (`aclnnCrossEntropyLoss`, its gradient one pass over
/// the saved log-softmax).
pub fn cross_entropy_fused<B: FusedBackend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
) -> Result<Tensor<B, 1>, AttnError> {
    burn_ascend::cross_entropy_loss(logits, targets)
}

/// Mean next-token cross-entropy of `logits [T, V]` against `targets [T]`.
pub fn cross_entropy<B: Backend>(logits: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let t = targets.dims()[0];
    let logp = log_softmax(logits, 1);
    logp.gather(1, targets.reshape([t, 1])).mean().neg()
}
