//! Decoding with a **captured graph** on an Ascend device (`generate --graph`): the decode
//! step of a fixed batch is captured once (ACL graph capture, `burn_ascend::backend::graph`)
//! and replayed for every generated token as **one** launch, as vllm-ascend serves with ACL
//! graphs.
//!
//! A replay reads fixed device buffers, so everything a step takes from the host lives in
//! persistent tensors written in place before each replay (stream-ordered uploads, outside the
//! capture): the token ids, RoPE's cos / sin rows of the positions, the cache slots the new
//! keys and values go to, the block table and, on sliding-window layers, the window's mask.
//! FIA's `actualSeqLengthsKv` is no device tensor but a host array CANN bakes into the
//! recorded call (it tiles from it on the host), so each layer's attention launch is captured
//! as a **task group** and re-issued before every replay with the sequences' real lengths
//! (`update_task_group`: recorded into the graph, not run — the step stays one launch), as
//! vllm-ascend updates its graphs' attention (`update_attn_params` in
//! `vllm_ascend/compilation/acl_graph.py`: `graph_task_update_begin`,
//! `npu_fused_infer_attention_score.out(…, actual_seq_lengths_kv=seq_lens, out=…)`,
//! `graph_task_update_end`). Each token thus reads each sequence's cached keys only, not the
//! whole reserved block range; full-attention layers need no mask at all and a window's mask
//! hides only the keys before the window (CANN: the mask's width stays the table's,
//! `maxBlocks·blockSize`, and FIA's band modes do nothing at `S = 1`) — the eager step's
//! arithmetic, call for call. The re-issued call writes the captured output and reads the
//! captured sinks: it allocates and uploads nothing. Each sequence's blocks are reserved for
//! the whole generation first ([`PagedKvCache::reserve`]), so the block table never needs a
//! new column; a batch that shrinks (a sequence stopped) or outgrows the table is captured
//! again.
//!
//! Attention runs as fused inference attention (`aclnnFusedInferAttentionScoreV4`) on the
//! paged caches, whichever operator the eager step runs (incremental attention for a model
//! without sinks or windows); a generator whose sinks ride on a placeholder token
//! ([`AttendPath::PromptIncre`]) is refused, and so is f32 attention: CANN's FIA takes FLOAT16 /
//! BFLOAT16 queries only, so the graph needs [`Generator::with_attention_dtype`] BF16 or F16.
//!
//! [`PagedKvCache::reserve`]: burn_ascend::PagedKvCache::reserve

use std::sync::Arc;

use burn::tensor::{DType, FloatDType, Int, Tensor, TensorData, TensorPrimitive};
use burn_ascend::backend::attention::device_meta::{scatter_kv_slots, PagedDecodeCall};
use burn_ascend::backend::graph::{
    capture, reserve_workspace, task_group, update_task_group, write_in_place, CapturedGraph,
    GraphError,
};
use burn_ascend::backend::{reserve_small, Ascend, AscendDevice, AscendTensor};
use burn_ascend::cann::acl::{thread_launches, TaskGroup};
use burn_ascend::contract::fia::FiaMask;
use burn_ascend::contract::incre::BlockTable;
use burn_ascend::contract::prompt::PfaLayout;
use burn_ascend::{AttendPath, AttnError, FiaSpec};

use crate::load::data::SplitMix;
use crate::model::rope::Rope;
use crate::model::transformer::fused_rms_norm;
use crate::serve::generate::{generate_with, to_vec, GenerationRun, Generator, Sampling};

/// Workspace reserved before a capture (the simulation's ops ask for 1 KiB; CANN's decode
/// attention for far less than this).
const WORKSPACE_BYTES: usize = 16 << 20;
/// Pool memory reserved before the first capture attempt; doubled while a capture is refused
/// for want of it, up to [`MAX_RESERVE_BYTES`].
const FIRST_RESERVE_BYTES: usize = 4 << 20;
const MAX_RESERVE_BYTES: usize = 1 << 30;

/// What a graph-decoded generation did on the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphDecodeStats {
    /// Decode steps (each generated token of the batch after the first).
    pub steps: u64,
    /// Graphs captured (one per batch shape).
    pub captures: u64,
    /// Kernel launches queued by the decode steps (graph replays and anything else), without
    /// the input uploads.
    pub launches: u64,
    /// Host-to-device copies of the steps' inputs.
    pub uploads: u64,
    /// Tasks recorded per captured graph (the last one; known on the simulation).
    pub recorded_tasks: usize,
    /// Task-group updates: attention launches re-issued with the sequences' new
    /// `actualSeqLengthsKv` before a replay (one per layer per replayed step; recorded into
    /// the graph, not run — not in [`Self::launches`]).
    pub attention_updates: u64,
}

impl GraphDecodeStats {
    /// Kernel launches per decode step (1 when every step is a replay).
    pub fn launches_per_token(&self) -> f64 {
        self.launches as f64 / self.steps.max(1) as f64
    }

    /// Attention task-group updates per decode step.
    pub fn updates_per_token(&self) -> f64 {
        self.attention_updates as f64 / self.steps.max(1) as f64
    }
}

/// The persistent inputs of a captured decode step (written in place before each replay).
struct GraphInputs {
    /// Generator sequence indices, in batch order.
    batch: Vec<usize>,
    /// Block-table width (blocks per sequence).
    max_blocks: usize,
    ids: Tensor<Ascend, 1, Int>,
    cos: Tensor<Ascend, 3>,
    sin: Tensor<Ascend, 3>,
    slots: Tensor<Ascend, 1, Int>,
    table: Tensor<Ascend, 2, Int>,
    /// Per layer: the window's mask of a sliding-window layer.
    masks: Vec<Option<Tensor<Ascend, 2, Int>>>,
}

/// A captured decode step: the graph, its inputs and its output.
pub struct DecodeGraph {
    graph: CapturedGraph,
    inputs: GraphInputs,
    logits: Tensor<Ascend, 2>,
    /// Per layer: the attention launch's task group and its bound call.
    attention: Vec<(TaskGroup, PagedDecodeCall)>,
    /// Per layer: the attention's host attributes, with the lengths the recorded calls hold.
    specs: Vec<FiaSpec>,
}

impl DecodeGraph {
    /// The recorded attention launches' `(query, key)` lengths per sequence as the next
    /// replay runs them (known on the simulation; see
    /// [`CapturedGraph::recorded_attention`]).
    pub fn recorded_attention(&self) -> Option<Vec<Vec<(usize, usize)>>> {
        self.graph.recorded_attention()
    }
}

impl std::fmt::Debug for DecodeGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeGraph")
            .field("batch", &self.inputs.batch)
            .field("max_blocks", &self.inputs.max_blocks)
            .finish()
    }
}

fn graph_err(e: GraphError) -> AttnError {
    match e {
        GraphError::Unsupported(m) => AttnError::Unsupported(m),
        GraphError::Refused(m) => AttnError::Device {
            op: "decode graph".into(),
            call: "capture".into(),
            status: Some(burn_ascend::cann::acl::ffi::ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT),
            message: m,
        },
        GraphError::Failed(m) => AttnError::Device {
            op: "decode graph".into(),
            call: "replay".into(),
            status: None,
            message: m,
        },
    }
}

/// The little-endian bytes of `v`.
fn le_bytes<T: Copy, const N: usize>(v: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

fn prim<const D: usize>(t: Tensor<Ascend, D>) -> AscendTensor {
    match t.into_primitive() {
        TensorPrimitive::Float(p) => p,
        TensorPrimitive::QFloat(_) => unreachable!("the decode step's tensors are not quantized"),
    }
}

/// One step's host-side inputs.
struct StepInputs {
    ids: Vec<i64>,
    cos: Vec<f32>,
    sin: Vec<f32>,
    rope_shape: [usize; 3],
    slots: Vec<i64>,
    table: Vec<i32>,
    /// Per layer: a sliding-window layer's mask.
    masks: Vec<Option<Vec<u8>>>,
    /// Each sequence's cached tokens once the step's token is written (`actualSeqLengthsKv`).
    lengths: Vec<i64>,
}

impl Generator<Ascend> {
    /// The inputs of a step of `seqs` (tokens `tokens`) over a block table `max_blocks` wide;
    /// `None` when a sequence's next token has no reserved block or the table is too narrow.
    fn graph_inputs(
        &self,
        seqs: &[usize],
        tokens: &[u32],
        max_blocks: usize,
    ) -> Option<StepInputs> {
        let c = &self.model.config;
        let bs = self.caches[0].block_size();
        let cols = max_blocks * bs;
        let positions: Vec<usize> = seqs.iter().map(|&s| self.seqs[s].1).collect();
        let (cos, sin, rope_shape) = Rope::<Ascend>::tables(&positions, c);
        let mut slots = Vec::with_capacity(seqs.len());
        let mut table = vec![0i32; seqs.len() * max_blocks];
        for (i, &s) in seqs.iter().enumerate() {
            let id = self.seqs[s].0[0];
            // Every layer's cache allocates the same blocks (same calls in the same order).
            let blocks = self.caches[0].block_table(id).ok()?;
            if blocks.len() > max_blocks {
                return None;
            }
            slots.push(self.caches[0].slot(id, positions[i]).ok()?? as i64);
            for (j, &b) in blocks.iter().enumerate() {
                table[i * max_blocks + j] = b as i32;
            }
        }
        let masks = (0..c.num_hidden_layers)
            .map(|layer| {
                // The cache's window counts the tokens before the query (as the eager step's).
                let w = c.layer_window(layer)? - 1;
                let mut m = vec![0u8; seqs.len() * cols];
                for (i, &p) in positions.iter().enumerate() {
                    for (t, x) in m[i * cols..(i + 1) * cols].iter_mut().enumerate() {
                        // Before the window of the query at `p`; the keys after `p` are past
                        // the sequence's `actualSeqLengthsKv`.
                        *x = u8::from(t + w < p);
                    }
                }
                Some(m)
            })
            .collect();
        Some(StepInputs {
            ids: tokens.iter().map(|&t| i64::from(t)).collect(),
            cos,
            sin,
            rope_shape,
            slots,
            table,
            masks,
            lengths: positions.iter().map(|&p| p as i64 + 1).collect(),
        })
    }

    /// Each layer's FIA attributes for a batch of `b` over a table `max_blocks` wide whose
    /// sequences hold `lengths` tokens: a host placeholder of the device block table's shape
    /// (the device's is read) and, for a windowed layer, the dense mask kind (its mask is the
    /// graph's device tensor).
    fn attention_specs(&self, b: usize, max_blocks: usize, lengths: &[i64]) -> Vec<FiaSpec> {
        let c = &self.model.config;
        let (n, d) = (c.num_attention_heads, c.head_dim);
        let bs = self.caches[0].block_size();
        let mut spec = FiaSpec::new(n, 1.0 / (d as f64).sqrt(), PfaLayout::Bsnd);
        spec.num_key_value_heads = if c.num_key_value_heads == n {
            0
        } else {
            c.num_key_value_heads
        };
        spec.block_size = bs;
        spec.block_table = Some(BlockTable {
            data: Arc::from(vec![0i32; b * max_blocks]),
            shape: vec![b, max_blocks],
        });
        spec.actual_seq_lengths_kv = Some(lengths.to_vec());
        (0..c.num_hidden_layers)
            .map(|layer| {
                let mut spec = spec.clone();
                if c.layer_window(layer).is_some() {
                    // The window's mask is the graph's device tensor (UINT8 `[B, cols]`).
                    spec.atten_mask = FiaMask::Dense;
                }
                spec
            })
            .collect()
    }

    /// The decode step over the graph's persistent inputs: the ops [`Generator::step`] runs,
    /// with the cache append and attention reading their metadata from the device; each
    /// layer's attention launch (`specs`, the first step's lengths) a task group of its own.
    /// Returns the logits and each layer's group with its bound call.
    #[allow(clippy::type_complexity)]
    fn graph_step(
        &self,
        g: &GraphInputs,
        specs: &[FiaSpec],
        device: &AscendDevice,
    ) -> Result<(Tensor<Ascend, 2>, Vec<(TaskGroup, PagedDecodeCall)>), AttnError> {
        let c = &self.model.config;
        let (b, n, d) = (g.batch.len(), c.num_attention_heads, c.head_dim);
        let rope = Rope::from_tables(g.cos.clone(), g.sin.clone());
        let slots = g.slots.clone().into_primitive();
        let table = g.table.clone().into_primitive();
        let mut attention = Vec::with_capacity(self.model.layers.len());
        let mut x = self.model.embed(g.ids.clone());
        for (layer, block) in self.model.layers.iter().enumerate() {
            // The norms, SwiGLU and the head as the eager decode runs them (fused).
            let h = fused_rms_norm(&block.input_layernorm, x.clone())?;
            let ((q, k, v), dt) = self.qkv_to_attention(block.self_attn.qkv(h, &rope, c));
            let (kc, vc) = self.caches[layer].caches();
            let (kcp, vcp) = (prim(kc.clone()), prim(vc.clone()));
            scatter_kv_slots(&prim(k), &prim(v), &kcp, &vcp, &slots)?;
            let [nb, bsz, nkv, dh] = kc.dims();
            // The caches as `(blocknum, blockSize, H)`, views of the same buffers.
            let paged = |t: &Tensor<Ascend, 4>| prim(t.clone().reshape([nb, bsz, nkv * dh]));
            let sinks = block.self_attn.sinks.as_ref().map(|s| prim(s.val()));
            let mask = g.masks[layer].clone().map(Tensor::into_primitive);
            // Binding casts the sinks and allocates the output: outside the group, which
            // holds the attention launch alone (what an update re-issues).
            let call = PagedDecodeCall::new(
                &prim(q.reshape([b, 1, n, d])),
                &paged(kc),
                &paged(vc),
                sinks.as_ref(),
                &table,
                mask.as_ref(),
                &specs[layer],
            )?;
            let (group, launched) =
                task_group(device, || call.launch(&specs[layer])).map_err(graph_err)?;
            launched?;
            let o =
                Tensor::<Ascend, 4>::from_primitive(TensorPrimitive::Float(call.output().clone()))
                    .cast(dt);
            attention.push((group, call));
            x = x + block.self_attn.out(o.reshape([b, n, d]));
            let h = fused_rms_norm(&block.post_attention_layernorm, x.clone())?;
            x = x + block.mlp.forward_fused(h)?;
        }
        Ok((self.model.head_packed(x)?, attention))
    }

    /// Captures the decode step of `seqs` over persistent inputs holding `inputs`.
    fn capture_step(
        &self,
        seqs: &[usize],
        inputs: &StepInputs,
        max_blocks: usize,
        device: &AscendDevice,
    ) -> Result<DecodeGraph, AttnError> {
        let b = seqs.len();
        let cols = max_blocks * self.caches[0].block_size();
        let int =
            |v: Vec<i64>| Tensor::<Ascend, 1, Int>::from_data(TensorData::new(v, [b]), device);
        let float = |v: Vec<f32>| {
            Tensor::<Ascend, 3>::from_data(TensorData::new(v, inputs.rope_shape), device)
        };
        let g = GraphInputs {
            batch: seqs.to_vec(),
            max_blocks,
            ids: int(inputs.ids.clone()),
            cos: float(inputs.cos.clone()),
            sin: float(inputs.sin.clone()),
            slots: int(inputs.slots.clone()),
            // INT32 and UINT8 as FIA takes them (Burn's `from_data` would make them INT64).
            table: Tensor::from_primitive(AscendTensor::from_data(
                TensorData::new(inputs.table.clone(), [b, max_blocks]),
                device,
            )),
            masks: inputs
                .masks
                .iter()
                .map(|m| {
                    m.as_ref().map(|m| {
                        Tensor::from_primitive(AscendTensor::from_data(
                            TensorData::new(m.clone(), [b, cols]),
                            device,
                        ))
                    })
                })
                .collect(),
        };
        let specs = self.attention_specs(b, max_blocks, &inputs.lengths);
        reserve_workspace(device, WORKSPACE_BYTES).map_err(graph_err)?;
        let mut reserve = FIRST_RESERVE_BYTES;
        loop {
            reserve_small(device, reserve).map_err(|e| graph_err(GraphError::Failed(e)))?;
            match capture(device, || self.graph_step(&g, &specs, device)) {
                Ok((graph, step)) => {
                    let (logits, attention) = step?;
                    return Ok(DecodeGraph {
                        graph,
                        inputs: g,
                        logits,
                        attention,
                        specs,
                    });
                }
                Err(GraphError::Refused(m))
                    if m.contains("aclrtMalloc") && reserve < MAX_RESERVE_BYTES =>
                {
                    reserve *= 2;
                }
                Err(e) => return Err(graph_err(e)),
            }
        }
    }

    /// Writes a step's inputs into the graph's persistent tensors (before its replay).
    fn write_inputs(g: &GraphInputs, x: &StepInputs) -> Result<(), GraphError> {
        let int1 = |t: &Tensor<Ascend, 1, Int>| t.clone().into_primitive();
        write_in_place(&int1(&g.ids), &le_bytes(&x.ids, i64::to_le_bytes))?;
        write_in_place(&prim(g.cos.clone()), &le_bytes(&x.cos, f32::to_le_bytes))?;
        write_in_place(&prim(g.sin.clone()), &le_bytes(&x.sin, f32::to_le_bytes))?;
        write_in_place(&int1(&g.slots), &le_bytes(&x.slots, i64::to_le_bytes))?;
        write_in_place(
            &g.table.clone().into_primitive(),
            &le_bytes(&x.table, i32::to_le_bytes),
        )?;
        for (t, m) in g.masks.iter().zip(&x.masks) {
            if let (Some(t), Some(m)) = (t, m) {
                write_in_place(&t.clone().into_primitive(), m)?;
            }
        }
        Ok(())
    }

    /// Re-issues each layer's recorded attention launch with the sequences' `lengths` (a
    /// task-group update per layer, queued before the replay that reads them: recorded, not
    /// run); returns the updates issued (none when the recorded calls hold these lengths).
    fn update_attention(g: &mut DecodeGraph, lengths: &[i64]) -> Result<u64, AttnError> {
        let device = g.graph.device();
        let mut updates = 0;
        for ((group, call), spec) in g.attention.iter().zip(&mut g.specs) {
            if spec.actual_seq_lengths_kv.as_deref() == Some(lengths) {
                continue;
            }
            spec.actual_seq_lengths_kv = Some(lengths.to_vec());
            update_task_group(&device, *group, || call.launch(spec)).map_err(graph_err)??;
            updates += 1;
        }
        Ok(updates)
    }

    /// [`Generator::step`] through a captured graph: the step of the batch `seqs` is captured
    /// on its first call (and again when the batch changes or outgrows its block table, with
    /// each sequence's blocks reserved for `horizon` more tokens) and replayed as one launch;
    /// `graph` keeps it between calls and `stats` counts the device's work.
    pub fn step_graph(
        &mut self,
        graph: &mut Option<DecodeGraph>,
        stats: &mut GraphDecodeStats,
        seqs: &[usize],
        tokens: &[u32],
        horizon: usize,
    ) -> Result<Vec<Vec<f32>>, AttnError> {
        let placeholder = self.path == AttendPath::PromptIncre
            && self
                .model
                .layers
                .iter()
                .any(|l| l.self_attn.sinks.is_some());
        if placeholder {
            return Err(AttnError::Unsupported(
                "--graph decodes through fused inference attention on the paged caches; the \
                 prompt / incremental path (sinks on a placeholder token) is not captured"
                    .into(),
            ));
        }
        if self.model.config.moe.is_some() {
            // The router's top-k choices are read on the host to group the tokens by expert,
            // and a captured step may not read the device.
            return Err(AttnError::Unsupported(
                "--graph with a mixture-of-experts model: its router's expert choices are read \
                 on the host at every step, which a captured step cannot do (decode it eagerly)"
                    .into(),
            ));
        }
        // The captured step calls FIA itself (`fia_decode_paged`), and CANN's FIA takes no
        // FLOAT query (`fused_infer_attention_score_def.cpp`); eagerly, f32 attention runs the
        // backend's composite, whose host-built masks a replay could not update.
        let f32_attention = match self.attention_dtype {
            Some(dt) => dt == FloatDType::F32,
            None => self.model.embed_tokens.weight.val().dtype() == DType::F32,
        };
        if f32_attention {
            return Err(AttnError::Unsupported(
                "graph decoding with f32 attention: CANN's fused inference attention takes \
                 FLOAT16/BFLOAT16 queries (serve with Generator::with_attention_dtype(BF16))"
                    .into(),
            ));
        }
        self.check_step(seqs, tokens)?;
        let device = self.model.embed_tokens.weight.val().device();
        // This thread's launches: other threads may use the device meanwhile.
        let before = thread_launches();
        let reuse = graph
            .as_ref()
            .filter(|g| g.inputs.batch == seqs)
            .and_then(|g| self.graph_inputs(seqs, tokens, g.inputs.max_blocks));
        match reuse {
            Some(x) => {
                let g = graph.as_mut().expect("checked");
                Self::write_inputs(&g.inputs, &x).map_err(graph_err)?;
                stats.attention_updates += Self::update_attention(g, &x.lengths)?;
            }
            None => {
                *graph = None;
                for &s in seqs {
                    for (cache, &id) in self.caches.iter_mut().zip(&self.seqs[s].0) {
                        cache.reserve(id, horizon.max(1))?;
                    }
                }
                let max_blocks = seqs
                    .iter()
                    .map(|&s| {
                        self.caches[0]
                            .block_table(self.seqs[s].0[0])
                            .map(<[usize]>::len)
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .max()
                    .unwrap_or(1)
                    .max(1);
                let x = self.graph_inputs(seqs, tokens, max_blocks).ok_or_else(|| {
                    AttnError::invalid(
                        "seqs",
                        "a sequence has no block reserved for its next token",
                    )
                })?;
                let g = self.capture_step(seqs, &x, max_blocks, &device)?;
                stats.captures += 1;
                stats.recorded_tasks = g.graph.recorded_tasks();
                *graph = Some(g);
            }
        }
        let g = graph.as_ref().expect("set above");
        g.graph.replay().map_err(graph_err)?;
        let logits = to_vec(g.logits.clone());
        for &s in seqs {
            for (cache, &id) in self.caches.iter_mut().zip(&self.seqs[s].0) {
                cache.advance(id, 1)?;
            }
            self.seqs[s].1 += 1;
        }
        let after = thread_launches();
        let uploads = after.1 - before.1;
        stats.steps += 1;
        stats.uploads += uploads;
        stats.launches += after.0 - before.0 - uploads;
        let v = self.model.config.vocab_size;
        Ok(logits.chunks(v).map(<[f32]>::to_vec).collect())
    }
}

/// [`crate::generate_batch_until`] with every decode step replayed from a captured graph
/// ([`Generator::step_graph`]); also returns what the decode steps cost the device.
pub fn generate_batch_graph(
    gen: &mut Generator<Ascend>,
    prompts: &[Vec<u32>],
    max_new: usize,
    sampling: &[Sampling],
    rng: &mut SplitMix,
    stop: &[u32],
) -> Result<(GenerationRun, GraphDecodeStats), AttnError> {
    let mut graph = None;
    let mut stats = GraphDecodeStats::default();
    let mut calls = 0usize;
    let run = generate_with(
        gen,
        prompts,
        max_new,
        sampling,
        rng,
        stop,
        |g, seqs, tokens| {
            // Steps left after this one, this one included (the first token needs no step).
            let horizon = max_new.saturating_sub(1 + calls);
            calls += 1;
            g.step_graph(&mut graph, &mut stats, seqs, tokens, horizon)
        },
    )?;
    Ok((run, stats))
}
