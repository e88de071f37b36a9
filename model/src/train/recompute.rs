//! Per-block activation checkpointing: a training step that keeps only each
//! transformer block's input through the forward pass and, in backward, recomputes one block
//! at a time and differentiates it.
//!
//! How: the forward pass runs the blocks on the inner backend (no tape: nothing kept but the
//! block inputs); the final norm, head and loss run under `Autodiff` on a leaf holding the
//! last block's output. Backward is then a chain of small backward passes, last block first:
//! block `i` is run again under `Autodiff` on a leaf holding its saved input, with its own
//! parameters (so their gradients land under their ids), and `sum(y · dy)` is
//! differentiated, `dy` being the gradient of its output that the block after it produced:
//! that gives the block's parameter gradients and `dx`, its input's gradient, which becomes
//! the `dy` of the block before. The embedding last, on `dx` of block 0 (looked up again:
//! Burn's embedding backward keeps the whole table).
//!
//! The chain is also the hook ZeRO-3 needs to shard the weights per block (FSDP):
//! [`loss_and_grads_with`] calls [`PartHooks`] before each part runs (gather its weights) and
//! once its gradients are complete (reduce-scatter them); see `crate::parallel::zero`.
//!
//! Why not one node in the ordinary graph whose backward recomputes the block (the usual
//! design): Burn 0.21's autodiff runs a backward pass holding its graph's mutex, and every
//! backward pass ends by locking every registered graph to drop orphaned nodes
//! (`GraphCleaner::cleanup_orphaned_entries`, burn-autodiff `runtime/graph.rs`), so a
//! backward pass run from inside another's step deadlocks. Nor Burn's checkpointing
//! strategies: they recompute individual memory-bound ops, while matmuls always keep their
//! inputs, so they cannot drop a block's internals (and `BalancedCheckpointing` raises this
//! model's peak, see `docs/lora-and-plan.md`).
//!
//! The arithmetic is the same as keeping everything (the same kernels on the same inputs; the
//! gradient entering a block is `1 · dy`); only the order in which Burn adds the
//! contributions to one gradient may differ, so gradients agree to rounding (the tests state
//! the tolerance).

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor};
use burn_ascend::{AttnError, TrainingBackend};

use crate::model::lora;
use crate::model::rope::Rope;
use crate::model::transformer::{cross_entropy_fused, packed_positions_of, Transformer};
use crate::train::loss::masked_cross_entropy;

/// A part of the model that backward's chain handles as one piece: FSDP's units (ZeRO-3
/// gathers each one's weights just before it runs and reduce-scatters its gradients as soon
/// as they are complete, see [`PartHooks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The token embedding.
    Embedding,
    /// Transformer block `i`.
    Block(usize),
    /// The final norm and the output head.
    Head,
}

/// What the chain of per-block passes calls around each part: nothing on one device or
/// with replicated weights ([`Replicated`]); ZeRO-3's per-block gather and reduce-scatter
/// (`crate::parallel::zero::Zero`). Every rank calls them in the same order (they run collectives).
pub trait PartHooks<B: AutodiffBackend> {
    /// `model` with the whole weights of `parts` (`None`: `model` holds them already). The
    /// returned model is dropped as soon as the part has run, which frees what was gathered.
    fn gather(
        &mut self,
        model: &Transformer<B>,
        parts: &[Part],
    ) -> Result<Option<Transformer<B>>, AttnError>;
    /// Takes `part`'s gradients, complete from here on, out of `grads` (ZeRO-3: reduced into
    /// this rank's shard at once); leaving them is what a replicated run does.
    fn reduce(
        &mut self,
        model: &Transformer<B>,
        part: Part,
        grads: &mut GradientsParams,
    ) -> Result<(), AttnError>;
}

/// The hooks of weights every rank holds whole: gather and reduce do nothing.
pub struct Replicated;

impl<B: AutodiffBackend> PartHooks<B> for Replicated {
    fn gather(
        &mut self,
        _model: &Transformer<B>,
        _parts: &[Part],
    ) -> Result<Option<Transformer<B>>, AttnError> {
        Ok(None)
    }

    fn reduce(
        &mut self,
        _model: &Transformer<B>,
        _part: Part,
        _grads: &mut GradientsParams,
    ) -> Result<(), AttnError> {
        Ok(())
    }
}

/// The loss of packed `tokens` against `targets` (the fused cross-entropy, or the masked one
/// when `loss_mask` is given, as [`crate::train::eager`] computes it) and the gradients of every
/// trained parameter of `model`, with per-block activation checkpointing (module docs).
/// Returns the loss on the inner backend.
pub fn loss_and_grads<B>(
    model: &Transformer<B>,
    tokens: Tensor<B, 1, Int>,
    cu_seqlens: &[i64],
    targets: Tensor<B, 1, Int>,
    loss_mask: Option<&[bool]>,
) -> Result<(Tensor<B::InnerBackend, 1>, GradientsParams), AttnError>
where
    B: AutodiffBackend + TrainingBackend,
    B::InnerBackend: TrainingBackend,
{
    loss_and_grads_with(
        model,
        tokens,
        cu_seqlens,
        targets,
        loss_mask,
        &mut Replicated,
    )
}

/// [`loss_and_grads`] calling `hooks` around each part: before the embedding's, each
/// block's and the head's forward, and again before each one's backward (the block
/// recomputed), then [`PartHooks::reduce`] once a part's gradients are complete (the head's
/// after its backward, block `i`'s after its own, the embedding's last). The gradients
/// `hooks` reduce are not in the returned ones.
pub fn loss_and_grads_with<B>(
    model: &Transformer<B>,
    tokens: Tensor<B, 1, Int>,
    cu_seqlens: &[i64],
    targets: Tensor<B, 1, Int>,
    loss_mask: Option<&[bool]>,
    hooks: &mut dyn PartHooks<B>,
) -> Result<(Tensor<B::InnerBackend, 1>, GradientsParams), AttnError>
where
    B: AutodiffBackend + TrainingBackend,
    B::InnerBackend: TrainingBackend,
{
    check(model)?;
    let positions = packed_positions_of(cu_seqlens, tokens.dims()[0])?;
    let c = &model.config;
    // A tied output head reads the embedding's table.
    let head_parts: &[Part] = if model.lm_head.is_none() {
        &[Part::Head, Part::Embedding]
    } else {
        &[Part::Head]
    };
    let rope = Rope::<B>::new(&positions, c, &tokens.device());
    // Forward without a tape, keeping each block's input only; the embedding is looked up
    // again in backward (its backward reads the table's shape from the table itself, which
    // would keep a gathered table alive through the step).
    let mut x = {
        let gathered = hooks.gather(model, &[Part::Embedding])?;
        let m = gathered.as_ref().unwrap_or(model);
        m.valid().embed(tokens.clone().inner())
    };
    let rope_inner = Rope::new(&positions, c, &x.device());
    let mut inputs = Vec::with_capacity(model.layers.len());
    for i in 0..model.layers.len() {
        let gathered = hooks.gather(model, &[Part::Block(i)])?;
        let m = gathered.as_ref().unwrap_or(model);
        let window = c.layer_window(i);
        let y = m.layers[i].valid().forward_packed(
            x.clone(),
            &rope_inner,
            cu_seqlens,
            window,
            model,
            |_| {},
        )?;
        inputs.push(x);
        x = y;
    }
    // The head and the loss, under Autodiff from the last block's output.
    let last = Tensor::<B, 2>::from_inner(x).require_grad();
    let mut grads = GradientsParams::new();
    let (loss_inner, mut dy) = {
        let gathered = hooks.gather(model, head_parts)?;
        let m = gathered.as_ref().unwrap_or(model);
        let logits = m.head_packed(last.clone())?;
        let loss = match loss_mask {
            None => cross_entropy_fused(logits, targets)?,
            Some(mask) => masked_cross_entropy(logits, targets, mask),
        };
        let loss_inner = loss.clone().inner();
        let mut tape = loss.backward();
        collect(m, &mut tape, &mut grads);
        (
            loss_inner,
            last.grad_remove(&mut tape).ok_or_else(no_gradient)?,
        )
    };
    hooks.reduce(model, Part::Head, &mut grads)?;
    // Backward, one block at a time from the last.
    let embedding_trains = model.embed_tokens.weight.val().is_require_grad();
    for i in (0..model.layers.len()).rev() {
        let input = inputs.pop().expect("one input per block");
        // Block 0's input needs no gradient when the embedding is frozen (LoRA).
        let needs_dx = i > 0 || embedding_trains;
        let leaf = Tensor::<B, 2>::from_inner(input);
        let leaf = if needs_dx { leaf.require_grad() } else { leaf };
        let window = c.layer_window(i);
        if !needs_dx && !trains(&model.layers[i]) {
            // Nothing from here down trains.
            return Ok((loss_inner, grads));
        }
        let gathered = hooks.gather(model, &[Part::Block(i)])?;
        let layer = &gathered.as_ref().unwrap_or(model).layers[i];
        let y = layer.forward_packed(leaf.clone(), &rope, cu_seqlens, window, model, |_| {})?;
        let seeded = (y * Tensor::from_inner(dy)).sum();
        let mut tape = seeded.backward();
        collect(layer, &mut tape, &mut grads);
        drop(gathered);
        hooks.reduce(model, Part::Block(i), &mut grads)?;
        if !needs_dx {
            return Ok((loss_inner, grads));
        }
        dy = leaf.grad_remove(&mut tape).ok_or_else(no_gradient)?;
    }
    if embedding_trains {
        let gathered = hooks.gather(model, &[Part::Embedding])?;
        let m = gathered.as_ref().unwrap_or(model);
        let mut tape = (m.embed(tokens) * Tensor::from_inner(dy)).sum().backward();
        collect(m, &mut tape, &mut grads);
        drop(gathered);
        hooks.reduce(model, Part::Embedding, &mut grads)?;
    }
    Ok((loss_inner, grads))
}

/// Whether `model` can train with per-block checkpointing: not with LoRA dropout (the forward
/// pass without a tape applies none and the recomputation would draw a new mask, so the
/// gradients would not be those of the loss).
pub fn check<B: Backend>(model: &Transformer<B>) -> Result<(), AttnError> {
    match lora::settings(model).filter(|s| s.dropout > 0.0) {
        Some(s) => Err(AttnError::Unsupported(format!(
            "--checkpointing with --lora-dropout {} (per-block checkpointing recomputes each \
             block, which would draw another dropout mask; use --lora-dropout 0)",
            s.dropout
        ))),
        None => Ok(()),
    }
}

fn no_gradient() -> AttnError {
    AttnError::Unsupported(
        "per-block checkpointing: a block's input got no gradient (a block that ignores its \
         input)"
            .into(),
    )
}

/// Whether any of `module`'s parameters trains (LoRA freezes the base).
fn trains<B: AutodiffBackend, M: Module<B>>(module: &M) -> bool {
    struct Trains(bool);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Trains {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0 |= param.val().is_require_grad();
        }
    }
    let mut v = Trains(false);
    module.visit(&mut v);
    v.0
}

/// Moves the gradients `tape` holds for `module`'s parameters into `into`, adding them to
/// what is there already (a tied embedding gets one from the head and one from the lookup).
fn collect<B: AutodiffBackend, M: Module<B>>(
    module: &M,
    tape: &mut B::Gradients,
    into: &mut GradientsParams,
) {
    module.visit(&mut Collect::<B> { tape, into });
}

struct Collect<'a, B: AutodiffBackend> {
    tape: &'a mut B::Gradients,
    into: &'a mut GradientsParams,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(grad) = param.val().grad_remove(self.tape) else {
            return;
        };
        let grad = match self.into.remove::<B::InnerBackend, D>(param.id) {
            Some(earlier) => earlier + grad,
            None => grad,
        };
        self.into.register::<B::InnerBackend, D>(param.id, grad);
    }
}
