//! The mixture-of-experts MLPs of gpt-oss and Qwen3-MoE as transformers computes them.
//!
//! gpt-oss (`GptOssTopKRouter`, `GptOssExperts` in
//! `transformers/models/gpt_oss/modeling_gpt_oss.py`, 5.24):
//!
//! - router logits `x Wᵀ + b` over `E` experts, the top `k` per token (`torch.topk`), and the
//!   routing weights a softmax over the *selected* logits only;
//! - per expert, the tokens routed to it: `gate_up = x_e @ W_gu + b_gu` with the fused
//!   `[H, 2I]` weight (`x @ W`, not `nn.Linear`'s `W ᵀ`), gate = even columns clamped from
//!   above at `swiglu_limit`, up = odd columns clamped to `±swiglu_limit`,
//!   `glu = gate · σ(gate · swiglu_alpha)`, `out = ((up + 1) · glu) @ W_down + b_down`;
//! - each expert's output times the token's routing weight, summed per token (`index_add_` in
//!   expert order, here `select_assign` with [`IndexingUpdateOp::Add`]).
//!
//! Qwen3-MoE (`Qwen3MoeTopKRouter`, `Qwen3MoeExperts` in `modeling_qwen3_moe.py`, 5.25):
//!
//! - router logits `x Wᵀ` (no bias), a softmax over *all* `E` experts in f32, its top `k`,
//!   divided by their sum when `norm_topk_prob`, cast back to the activations' dtype;
//! - per expert: `down(silu(gate x) · up x)` without biases or clamping; the fused weight here
//!   is `[H, 2I]` with the gate in the first `I` columns and up in the last (the file's
//!   per-expert `gate_proj` / `up_proj`, or transformers' in-memory `gate_up_proj` whose
//!   `chunk(2)` takes the gate first); combined as gpt-oss's.
//!
//! The experts' two projections are grouped matmuls ([`burn_ascend::grouped_matmul`]):
//! `aclnnGroupedMatmulV4` on `Ascend` (forward, and under `Autodiff` the backward's dx and dW
//! too), the composite on any other backend. The router is one op,
//! [`moe_gating_top_k_softmax`] (`aclnnMoeGatingTopKSoftmaxV2` on `Ascend`, its backward
//! composed of the backend's ops); the sort by expert and the weighted combine are plain Burn
//! ops on every backend, CANN's `aclnnMoeInitRoutingV2` / `aclnnMoeFinalizeRoutingV2` are not
//! used yet (see `docs/moe.md`).

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::activation::sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, FloatDType, IndexingUpdateOp, Int, Tensor, TensorData};

use burn_ascend::{
    grouped_matmul, moe_gating_top_k_softmax, AttnError, GatingOrder, GroupedMatmulBackend,
    GroupedMatmulSpec, MoeGatingBackend,
};

use crate::load::config::{MoeConfig, MoeKind};

/// The MoE block of one gpt-oss or Qwen3-MoE layer.
#[derive(Module, Debug)]
pub struct Moe<B: Backend> {
    /// The router: weight `[hidden, E]` (Burn's `Linear` layout; `[E, hidden]` in the file)
    /// and bias `[E]` (gpt-oss; Qwen3-MoE has none).
    pub router: Linear<B>,
    /// `[E, hidden, 2·I]`, used as `x @ W`: gpt-oss's gate in the even columns and up in the
    /// odd ones, Qwen3-MoE's gate in the first `I` columns and up in the last `I`.
    pub gate_up_proj: Param<Tensor<B, 3>>,
    /// `[E, 2·I]` (gpt-oss; Qwen3-MoE has none).
    pub gate_up_proj_bias: Option<Param<Tensor<B, 2>>>,
    /// `[E, I, hidden]`, used as `x @ W`.
    pub down_proj: Param<Tensor<B, 3>>,
    /// `[E, hidden]` (gpt-oss; Qwen3-MoE has none).
    pub down_proj_bias: Option<Param<Tensor<B, 2>>>,
    /// The router's and experts' arithmetic.
    #[module(skip)]
    pub kind: MoeKind,
    /// Experts per token (`num_experts_per_tok`).
    #[module(skip)]
    pub top_k: usize,
    /// gpt-oss's `swiglu_limit`.
    #[module(skip)]
    pub limit: f64,
    /// gpt-oss's `swiglu_alpha`.
    #[module(skip)]
    pub alpha: f64,
}

/// The routing of a batch of tokens: which experts each token goes to and with what weight.
pub struct Routing<B: Backend> {
    /// Expert indices `[T·k]`, row-major `[T, k]`, best first (as `torch.topk` orders them).
    pub indices: Vec<i64>,
    /// Routing weights `[T, k]` in the logits' dtype: gpt-oss's softmax over the selected router
    /// logits, Qwen3-MoE's selected probabilities (renormalised when `norm_topk_prob`);
    /// differentiable through the logits.
    pub weights: Tensor<B, 2>,
}

impl<B: Backend> Moe<B> {
    /// A randomly initialised block (normal, std 0.02, as `GptOssPreTrainedModel` and
    /// `Qwen3MoePreTrainedModel` initialise experts and router), each expert
    /// `moe_intermediate_size` wide.
    pub fn new(hidden: usize, c: &MoeConfig, device: &B::Device) -> Self {
        let e = c.num_local_experts;
        let intermediate = c.moe_intermediate_size;
        let biased = c.kind == MoeKind::GptOss;
        let normal = Distribution::Normal(0.0, 0.02);
        let router_weight = Tensor::random([hidden, e], normal, device);
        let zeros = |n: usize| biased.then(|| Param::from_tensor(Tensor::zeros([e, n], device)));
        Self {
            router: Linear {
                weight: Param::from_tensor(router_weight),
                bias: biased.then(|| Param::from_tensor(Tensor::zeros([e], device))),
            },
            gate_up_proj: Param::from_tensor(Tensor::random(
                [e, hidden, 2 * intermediate],
                normal,
                device,
            )),
            gate_up_proj_bias: zeros(2 * intermediate),
            down_proj: Param::from_tensor(Tensor::random(
                [e, intermediate, hidden],
                normal,
                device,
            )),
            down_proj_bias: zeros(hidden),
            kind: c.kind,
            top_k: c.num_experts_per_tok,
            limit: c.swiglu_limit,
            alpha: c.swiglu_alpha,
        }
    }

    /// Number of experts.
    pub fn num_experts(&self) -> usize {
        self.gate_up_proj.dims()[0]
    }

    /// The router's logits `[T, E]` of `x [T, hidden]`, in `x`'s dtype.
    pub fn router_logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let dt = x.dtype();
        burn::tensor::module::linear(
            x,
            self.router.weight.val().cast(dt),
            self.router.bias.as_ref().map(|b| b.val().cast(dt)),
        )
    }
}

impl<B: MoeGatingBackend> Moe<B> {
    /// The routing of `x [T, hidden]`: [`Self::route_logits`] of its router logits.
    pub fn route(&self, x: Tensor<B, 2>) -> Result<Routing<B>, AttnError> {
        self.route_logits(self.router_logits(x))
    }

    /// The routing of router logits `[T, E]`, as the block's kind routes, through the router
    /// op ([`moe_gating_top_k_softmax`]: `aclnnMoeGatingTopKSoftmaxV2` on `Ascend`, the
    /// composite elsewhere): gpt-oss's `GptOssTopKRouter.forward` is its renorm 1 (top-k of the
    /// logits, a softmax over the selected ones) on the logits as they are; Qwen3-MoE's
    /// `Qwen3MoeTopKRouter.forward` (a softmax over all experts in f32, its top-k, divided by
    /// its sum when `norm_topk_prob`, cast back to the logits' dtype) is renorm 1 on the f32
    /// logits with `norm_topk_prob` (the renormalised top-k of a softmax is the softmax of the
    /// top-k logits) and renorm 0 without. The experts come back to the host (the per-expert
    /// token lists must be there anyway), best first, ties to the lower expert index as
    /// `torch.topk` orders them; the weights' gradient flows back into the router through
    /// the op's backward, as torch's `topk` / `gather` backward sends it.
    pub fn route_logits(&self, logits: Tensor<B, 2>) -> Result<Routing<B>, AttnError> {
        let [t, _] = logits.dims();
        let dt = logits.dtype();
        let (x, order) = match self.kind {
            MoeKind::GptOss => (logits, GatingOrder::TopKThenSoftmax),
            MoeKind::Qwen3 { norm_topk_prob } => (
                logits.cast(FloatDType::F32),
                if norm_topk_prob {
                    GatingOrder::TopKThenSoftmax
                } else {
                    GatingOrder::SoftmaxThenTopK
                },
            ),
        };
        let (weights, idx) = moe_gating_top_k_softmax(x, self.top_k, order)?;
        let indices = idx
            .into_data()
            .convert::<i64>()
            .to_vec::<i64>()
            .expect("i64 after convert");
        debug_assert_eq!(indices.len(), t * self.top_k);
        Ok(Routing {
            indices,
            weights: weights.cast(dt),
        })
    }
}

impl<B: GroupedMatmulBackend + MoeGatingBackend> Moe<B> {
    /// The block's output `[T, hidden]` for `x [T, hidden]`, in `x`'s dtype (the parameters
    /// are cast to it, as the rest of the model does under mixed precision).
    ///
    /// The experts run as two grouped matmuls (`aclnnGroupedMatmulV4` on `Ascend`, the
    /// composite elsewhere): the `T·k` (token, slot) pairs sorted by expert — stably, so each
    /// expert sees its tokens in order, as transformers' loop over `expert_hit` does — give
    /// `x` rows grouped by expert and the group list (the experts' token counts, groupListType
    /// 1); gate_up and down are then one call each with the stacked `[E, ·, ·]` weights and
    /// `[E, ·]` biases.
    ///
    /// A grouped matmul's refusal (expert weights of shapes that disagree, which loading
    /// checks first) comes back as its typed [`AttnError`].
    pub fn forward(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError> {
        let [t, h] = x.dims();
        let dt = x.dtype();
        let device = x.device();
        if t == 0 {
            return Ok(Tensor::<B, 2>::zeros([0, h], &device).cast(dt));
        }
        let routing = self.route(x.clone())?;
        let k = self.top_k;
        let e = self.num_experts();
        let inter = self.gate_up_proj.dims()[2] / 2;
        let rows = t * k;
        let (spec, tokens, slots) = expert_order(&routing.indices, k, e);
        let tokens = Tensor::<B, 1, Int>::from_data(TensorData::new(tokens, [rows]), &device);
        let slots = Tensor::<B, 1, Int>::from_data(TensorData::new(slots, [rows]), &device);
        let xs = x.select(0, tokens.clone());
        let bias = |b: &Option<Param<Tensor<B, 2>>>| b.as_ref().map(|b| b.val().cast(dt));
        let gate_up = grouped_matmul(
            xs,
            self.gate_up_proj.val().cast(dt),
            bias(&self.gate_up_proj_bias),
            &spec,
        )?;
        let act = match self.kind {
            MoeKind::GptOss => {
                let gate_up = gate_up.reshape([rows, inter, 2]);
                // `gate_up[..., ::2]`, `gate_up[..., 1::2]`: interleaved, not halves.
                let gate = gate_up
                    .clone()
                    .narrow(2, 0, 1)
                    .reshape([rows, inter])
                    .clamp_max(self.limit);
                let up = gate_up
                    .narrow(2, 1, 1)
                    .reshape([rows, inter])
                    .clamp(-self.limit, self.limit);
                let glu = gate.clone() * sigmoid_in_dtype(gate * self.alpha);
                (up + 1.0) * glu
            }
            // `gate, up = (x @ gate_up_proj[e]ᵀ).chunk(2, -1)`: halves, gate first.
            MoeKind::Qwen3 { .. } => {
                let gate = gate_up.clone().narrow(1, 0, inter);
                let up = gate_up.narrow(1, inter, inter);
                silu_in_dtype(gate) * up
            }
        };
        let y = grouped_matmul(
            act,
            self.down_proj.val().cast(dt),
            bias(&self.down_proj_bias),
            &spec,
        )?;
        let weights = routing.weights.reshape([rows]).select(0, slots);
        let y = y * weights.reshape([rows, 1]);
        Ok(Tensor::<B, 2>::zeros([t, h], &device)
            .cast(dt)
            .select_assign(0, tokens, y, IndexingUpdateOp::Add))
    }
}

/// The grouping of a routing `[T, k]` (row-major expert indices) by expert: the grouped
/// matmul's spec (each expert's token count, groupListType 1), and per sorted row its token
/// and its flat slot in the routing weights. Stable: within an expert, tokens keep their order.
pub fn expert_order(
    indices: &[i64],
    k: usize,
    experts: usize,
) -> (GroupedMatmulSpec, Vec<i64>, Vec<i64>) {
    let mut order: Vec<usize> = (0..indices.len()).collect();
    order.sort_by_key(|&s| indices[s]);
    let mut counts = vec![0usize; experts];
    for &j in indices {
        counts[j as usize] += 1;
    }
    let tokens = order.iter().map(|&s| (s / k.max(1)) as i64).collect();
    let slots = order.iter().map(|&s| s as i64).collect();
    (GroupedMatmulSpec::from_counts(&counts), tokens, slots)
}

/// `σ(z)` in `z`'s dtype. Burn's default `sigmoid` (burn-backend 0.21,
/// `ActivationOps::sigmoid`) computes in f32 whatever the dtype, which is what f32 / bf16 want
/// but would leave f64 (the finite-difference checks) with f32's precision; f64 takes
/// `1 / (1 + e^−z)` directly, `z` clamped to ±700 so `e^−z` stays finite (σ′ is below 1e-300
/// out there).
fn sigmoid_in_dtype<B: Backend, const D: usize>(z: Tensor<B, D>) -> Tensor<B, D> {
    if z.dtype() == DType::F64 {
        (z.clamp(-700.0, 700.0).neg().exp() + 1.0).recip()
    } else {
        sigmoid(z)
    }
}

/// `silu(z) = z · σ(z)` in `z`'s dtype (see [`sigmoid_in_dtype`]).
fn silu_in_dtype<B: Backend, const D: usize>(z: Tensor<B, D>) -> Tensor<B, D> {
    z.clone() * sigmoid_in_dtype(z)
}
