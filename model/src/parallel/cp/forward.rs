//! One rank's forward of the transformer under context parallelism: the rank's tokens (a
//! head and a tail chunk of every long sequence, see [`CpLayout`]) go through every layer
//! locally; at each attention layer the keys and values other ranks' queries need are
//! all-gathered, each query piece attends over its keys through the varlen op, and the rest
//! of the block is per token.

use std::collections::HashMap;

use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend::{flash_attention_varlen, AttnError, FlashAttnOptions, TrainingBackend};

use super::gather::{Comm, CpBackend};
use super::plan::{CpLayout, KeyPlan};
use crate::model::rope::Rope;
use crate::model::transformer::Transformer;

/// A rank's share of one step: its layout and the key plan of every window the model uses.
#[derive(Debug, Clone)]
pub struct RankStep {
    /// The step's layout (the same on every rank).
    pub layout: CpLayout,
    /// This rank.
    pub rank: usize,
    plans: HashMap<Option<usize>, KeyPlan>,
}

impl RankStep {
    /// Rank `rank`'s share of a step of packed sequences `cu_seqlens` over `ranks` ranks, for
    /// the windows of `model`'s layers.
    pub fn new<B: burn::tensor::backend::Backend>(
        model: &Transformer<B>,
        cu_seqlens: &[i64],
        ranks: usize,
        rank: usize,
    ) -> Result<Self, AttnError> {
        let layout = CpLayout::new(cu_seqlens, ranks)?;
        let mut plans = HashMap::new();
        for l in 0..model.layers.len() {
            let w = model.config.layer_window(l);
            plans.entry(w).or_insert_with(|| layout.key_plan(w));
        }
        Ok(Self {
            layout,
            rank,
            plans,
        })
    }

    /// The packed indices of this rank's tokens.
    pub fn tokens(&self) -> Vec<usize> {
        self.layout.tokens(self.rank)
    }

    /// The plan of `window`.
    pub fn plan(&self, window: Option<usize>) -> &KeyPlan {
        &self.plans[&window]
    }
}

fn index<B: burn::tensor::backend::Backend>(v: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let data: Vec<i64> = v.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(data, [v.len()]), device)
}

/// Logits `[T_r, V]` of rank `step.rank`'s tokens `tokens [T_r]` (the step's packed tokens at
/// [`RankStep::tokens`]). Every rank of `comm` must call it for the same step.
pub fn forward_rank<B: CpBackend + TrainingBackend>(
    model: &Transformer<B>,
    tokens: Tensor<B, 1, Int>,
    step: &RankStep,
    comm: &Comm<B::InnerBackend>,
) -> Result<Tensor<B, 2>, AttnError> {
    let device = tokens.device();
    let positions = step.layout.positions(step.rank);
    let t = tokens.dims()[0];
    if positions.len() != t {
        return Err(AttnError::invalid(
            "tokens",
            format!(
                "rank {} owns {} tokens of the step, got {t}",
                step.rank,
                positions.len()
            ),
        ));
    }
    let c = &model.config;
    let rope = Rope::new(&positions, c, &device);
    let mut x = model.embed(tokens);
    let dt = x.dtype();
    for (i, layer) in model.layers.iter().enumerate() {
        let window = c.layer_window(i);
        let plan = step.plan(window);
        let h = model.low(layer.input_layernorm.forward(x.clone()));
        let attn = &layer.self_attn;
        let (q, k, v) = attn.qkv_fused(h, &rope, c)?;
        let [_, nkv, dk] = k.dims();
        let dv = v.dims()[2];
        let kv = Tensor::cat(vec![k.reshape([t, nkv * dk]), v.reshape([t, nkv * dv])], 1);
        let rows = index::<B>(&plan.key_rows[step.rank], &device);
        let keys = if plan.send_rows > 0 {
            // Keys and values in one collective: one reduce-scatter per layer in backward.
            let sent = kv
                .clone()
                .select(0, index::<B>(&plan.padded_send(step.rank), &device));
            let gathered = B::cp_all_gather(sent, comm)?;
            Tensor::cat(vec![kv, gathered], 0).select(0, rows)
        } else {
            kv.select(0, rows)
        };
        let tk = plan.key_rows[step.rank].len();
        let k = keys.clone().narrow(1, 0, nkv * dk).reshape([tk, nkv, dk]);
        let v = keys.narrow(1, nkv * dk, nkv * dv).reshape([tk, nkv, dv]);
        let opts = FlashAttnOptions {
            causal: true,
            // `w` keys including the query: `w − 1` to its left (bottom-right aligned).
            window: window.map(|w| (w as i64 - 1, 0)),
            sinks: attn.sinks.as_ref().map(|s| s.val()),
            ..Default::default()
        };
        let o =
            flash_attention_varlen(q, k, v, &plan.cu_q[step.rank], &plan.cu_k[step.rank], opts)?;
        x = x + attn.out(o).cast(dt);
        let h = model.low(layer.post_attention_layernorm.forward(x.clone()));
        x = x + layer.mlp.forward(h)?.cast(dt);
    }
    Ok(model.head(x))
}
