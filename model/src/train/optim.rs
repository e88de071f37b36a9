//! The training optimizer: AdamW as one backend call per parameter
//! ([`burn_ascend::OptimBackend::adamw_step`]: `aclnnApplyAdamWV2` on Ascend, one CPU pass on
//! NdArray) instead of Burn's `AdamW`, which composes a dozen elementwise launches per
//! parameter; and the global gradient-norm clip of torch's `clip_grad_norm_` (transformers'
//! Trainer, MindSpeed), computed on the device without a host read.
//!
//! [`FusedAdamW`] keeps Burn's `AdamW` record (`AdamWState` / `AdaptiveMomentumState`, the
//! same hyperparameter defaults), so checkpoints written by either load into the other.

use std::marker::PhantomData;

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{
    AdamWState, AdaptiveMomentumState, GradientsParams, LearningRate, SimpleOptimizer,
};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};

use burn_ascend::{AdamWHyper, AdamWTensors, AttnError, OptimBackend};

/// Added to the global norm before dividing (torch's `clip_grad_norm_`).
pub const CLIP_EPS: f32 = 1e-6;

/// AdamW as [`OptimBackend::adamw_step`] per parameter, for the parameters of an
/// `Autodiff<B>` model (the step runs on the inner tensors, as Burn's optimizers do).
/// Hyperparameters and defaults are Burn's `AdamWConfig`'s (β1 0.9, β2 0.999, ε 1e-5).
pub struct FusedAdamW<B> {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    weight_decay: f32,
    backend: PhantomData<fn() -> B>,
}

impl<B> Clone for FusedAdamW<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for FusedAdamW<B> {}

impl<B> std::fmt::Debug for FusedAdamW<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedAdamW")
            .field("beta_1", &self.beta_1)
            .field("beta_2", &self.beta_2)
            .field("epsilon", &self.epsilon)
            .field("weight_decay", &self.weight_decay)
            .finish()
    }
}

impl<B: AutodiffBackend + OptimBackend> FusedAdamW<B> {
    /// Burn's `AdamWConfig::new().with_weight_decay(weight_decay)`; a negative or non-finite
    /// decay is refused naming `weight_decay`.
    pub fn new(weight_decay: f32) -> Result<Self, AttnError> {
        Self::with(0.9, 0.999, 1e-5, weight_decay)
    }

    /// Every hyperparameter (Burn's names), validated as `aclnnApplyAdamWV2` does.
    pub fn with(
        beta_1: f32,
        beta_2: f32,
        epsilon: f32,
        weight_decay: f32,
    ) -> Result<Self, AttnError> {
        let o = Self {
            beta_1,
            beta_2,
            epsilon,
            weight_decay,
            backend: PhantomData,
        };
        burn_ascend::optim::validate_adamw(&[1], &[1], &[1], &[1], 1, &o.hyper(0.0)).map_err(
            |e| match e {
                AttnError::Invalid { param, rule } => AttnError::invalid(
                    match param {
                        "beta1" => "beta_1",
                        "beta2" => "beta_2",
                        "eps" => "epsilon",
                        "weightDecay" => "weight_decay",
                        p => p,
                    },
                    rule,
                ),
                e => e,
            },
        )?;
        Ok(o)
    }

    /// The optimizer over module `M`'s parameters (Burn's adaptor: records, missing
    /// gradients, devices). No clipping here: clip with [`clip_global_norm`] first.
    pub fn init<M: AutodiffModule<B>>(self) -> OptimizerAdaptor<Self, M, B> {
        OptimizerAdaptor::from(self)
    }

    /// The hyperparameters of `aclnnApplyAdamWV2` at learning rate `lr`.
    pub fn hyper_at(&self, lr: LearningRate) -> AdamWHyper {
        self.hyper(lr)
    }

    fn hyper(&self, lr: LearningRate) -> AdamWHyper {
        AdamWHyper {
            lr: lr as f32,
            beta1: self.beta_1,
            beta2: self.beta_2,
            weight_decay: self.weight_decay,
            eps: self.epsilon,
        }
    }
}

fn outer<B: AutodiffBackend, const D: usize>(
    t: Tensor<B::InnerBackend, D>,
) -> burn::tensor::ops::FloatTensor<B> {
    Tensor::<B, D>::from_inner(t).into_primitive().tensor()
}

fn inner<B: AutodiffBackend, const D: usize>(
    p: burn::tensor::ops::FloatTensor<B>,
) -> Tensor<B::InnerBackend, D> {
    Tensor::<B, D>::from_primitive(TensorPrimitive::Float(p)).inner()
}

impl<B: AutodiffBackend + OptimBackend> SimpleOptimizer<B::InnerBackend> for FusedAdamW<B> {
    type State<const D: usize> = AdamWState<B::InnerBackend, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B::InnerBackend, D>,
        grad: Tensor<B::InnerBackend, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B::InnerBackend, D>, Option<Self::State<D>>) {
        let (time, m, v) = match state {
            Some(s) => (
                s.momentum.time + 1,
                s.momentum.moment_1,
                s.momentum.moment_2,
            ),
            // Burn's first step starts the moments from zero the same way.
            None => (1, tensor.zeros_like(), tensor.zeros_like()),
        };
        let out = B::adamw_step(
            AdamWTensors {
                var: outer::<B, D>(tensor),
                m: outer::<B, D>(m),
                v: outer::<B, D>(v),
            },
            outer::<B, D>(grad),
            time as u64,
            &self.hyper(lr),
        )
        // Shapes match by construction and the hyperparameters were validated in `with`
        // (a learning rate is the schedule's, non-negative): a failure is a backend fault.
        .unwrap_or_else(|e| panic!("AdamW step failed: {e}"));
        let momentum = AdaptiveMomentumState {
            time,
            moment_1: inner::<B, D>(out.m),
            moment_2: inner::<B, D>(out.v),
            max_moment_2: None,
        };
        (inner::<B, D>(out.var), Some(AdamWState { momentum }))
    }

    fn to_device<const D: usize>(
        mut state: Self::State<D>,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) -> Self::State<D> {
        state.momentum = state.momentum.to_device(device);
        state
    }
}

/// The clip factor of a global gradient norm: `min(1, max_norm / (sqrt(squared_total) +
/// 1e-6))` (torch's `clip_grad_norm_`), `[1]`, on the device of `squared_total` (`Σ_p ‖g_p‖²`
/// over every parameter, or every shard of every rank). A non-finite total gives a
/// non-finite factor (the caller stops on the norm before stepping).
pub fn clip_scale<B: Backend>(squared_total: Tensor<B, 1>, max_norm: f32) -> Tensor<B, 1> {
    squared_total
        .sqrt()
        .add_scalar(CLIP_EPS)
        .recip()
        .mul_scalar(max_norm)
        .clamp_max(1.0)
}

/// `Σ_p ‖g_p‖²` over `module`'s parameters that have a gradient in `grads`, `[1]` on the
/// device; `None` when none has. One call of the backend's sum of squares over every gradient
/// (grouped concatenations on a device, read in place on the CPU).
pub fn grad_norm_squared<B: AutodiffBackend + OptimBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
) -> Option<Tensor<B::InnerBackend, 1>> {
    struct Gradients<'a, B: AutodiffBackend> {
        grads: &'a GradientsParams,
        all: Vec<burn::tensor::ops::FloatTensor<B>>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Gradients<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
                self.all.push(outer::<B, D>(g));
            }
        }
    }
    let mut v = Gradients::<B> {
        grads,
        all: Vec::new(),
    };
    module.visit(&mut v);
    B::squares_sum(v.all).map(inner::<B, 1>)
}

/// Every gradient of `module`'s parameters in `grads` multiplied by `scale` (`[1]`, on the
/// device): one multiplication per parameter ([`OptimBackend::scale_by`]: in place on the CPU).
pub fn scale_grads<B: AutodiffBackend + OptimBackend, M: AutodiffModule<B>>(
    module: &M,
    mut grads: GradientsParams,
    scale: &Tensor<B::InnerBackend, 1>,
) -> GradientsParams {
    struct Scale<'a, B: AutodiffBackend> {
        grads: &'a mut GradientsParams,
        scale: &'a Tensor<B::InnerBackend, 1>,
    }
    impl<B: AutodiffBackend + OptimBackend> ModuleVisitor<B> for Scale<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
                let g = B::scale_by(outer::<B, D>(g), outer::<B, 1>(self.scale.clone()));
                self.grads.register(param.id, inner::<B, D>(g));
            }
        }
    }
    module.visit(&mut Scale::<B> {
        grads: &mut grads,
        scale,
    });
    grads
}

/// Global gradient-norm clipping (torch's `clip_grad_norm_`): `total = sqrt(Σ_p ‖g_p‖²)`,
/// every gradient times `min(1, max_norm / (total + 1e-6))`, all on the device. Returns the
/// clipped gradients and the squared total before clipping (`[1]`, for the caller's
/// finiteness check; `None` when no parameter has a gradient).
pub fn clip_global_norm<B: AutodiffBackend + OptimBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
    max_norm: f32,
) -> (GradientsParams, Option<Tensor<B::InnerBackend, 1>>) {
    let Some(squared) = grad_norm_squared(module, &grads) else {
        return (grads, None);
    };
    let scale = clip_scale(squared.clone(), max_norm);
    (scale_grads(module, grads, &scale), Some(squared))
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, NdArray};
    use burn::module::Module;
    use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
    use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
    use burn::tensor::{Int, TensorData};

    use super::*;
    use crate::load::config::{LayerType, ModelConfig};
    use crate::model::transformer::{cross_entropy_fused, Transformer};

    type Ad = Autodiff<NdArray>;

    fn tiny() -> ModelConfig {
        ModelConfig {
            vocab_size: 64,
            hidden_size: 32,
            intermediate_size: 48,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            head_dim: 16,
            sliding_window: Some(8),
            layer_types: LayerType::alternating(2),
            ..ModelConfig::small_byte_model()
        }
    }

    fn loss_and_grads(model: &Transformer<Ad>, step: usize) -> (f32, GradientsParams) {
        let device = Default::default();
        let ids: Vec<i64> = (0..25).map(|i| ((i * 7 + step * 3) % 64) as i64).collect();
        let tokens =
            Tensor::<Ad, 1, Int>::from_data(TensorData::new(ids[..24].to_vec(), [24]), &device);
        let targets =
            Tensor::<Ad, 1, Int>::from_data(TensorData::new(ids[1..].to_vec(), [24]), &device);
        let logits = model.forward_packed(tokens, &[0, 10, 24]).unwrap();
        let loss = cross_entropy_fused(logits, targets).unwrap();
        let value = loss.clone().into_scalar();
        (value, GradientsParams::from_grads(loss.backward(), model))
    }

    fn params(model: &Transformer<Ad>) -> Vec<f32> {
        let mut out = Vec::new();
        struct Collect<'a>(&'a mut Vec<f32>);
        impl ModuleVisitor<Ad> for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<Ad, D>>) {
                self.0.extend(p.val().into_data().to_vec::<f32>().unwrap());
            }
        }
        model.visit(&mut Collect(&mut out));
        out
    }

    #[test]
    fn fused_adamw_losses_and_weights_equal_burn_adamw_over_four_steps() {
        let device = Default::default();
        let start = Transformer::<Ad>::new(&tiny(), &device).unwrap();
        // Materialise the lazily initialised weights so both copies start from the same ones.
        let _ = params(&start);
        let mut burn_opt = AdamWConfig::new()
            .with_weight_decay(0.1)
            .init::<Ad, Transformer<Ad>>();
        let mut fused = FusedAdamW::<Ad>::new(0.1)
            .unwrap()
            .init::<Transformer<Ad>>();
        let (mut a, mut b) = (start.clone(), start);
        for step in 0..4 {
            let (la, ga) = loss_and_grads(&a, step);
            let (lb, gb) = loss_and_grads(&b, step);
            // Same weights in, same loss out, to f32 rounding of a few update steps.
            assert!(
                (la - lb).abs() <= 1e-5,
                "step {step}: loss {la} (Burn) vs {lb} (fused)"
            );
            a = burn_opt.step(3e-3, a, ga);
            b = fused.step(3e-3, b, gb);
        }
        // Burn's record layout: each optimizer continues from the other's saved state.
        let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
        let burn_bytes = recorder.record(burn_opt.to_record(), ()).unwrap();
        let fused_bytes = recorder.record(fused.to_record(), ()).unwrap();
        let mut burn_opt = AdamWConfig::new()
            .with_weight_decay(0.1)
            .init::<Ad, Transformer<Ad>>()
            .load_record(recorder.load(fused_bytes, &device).unwrap());
        let mut fused = FusedAdamW::<Ad>::new(0.1)
            .unwrap()
            .init::<Transformer<Ad>>()
            .load_record(recorder.load(burn_bytes, &device).unwrap());
        let (_, ga) = loss_and_grads(&a, 4);
        let (_, gb) = loss_and_grads(&b, 4);
        a = burn_opt.step(3e-3, a, ga);
        b = fused.step(3e-3, b, gb);
        let (pa, pb) = (params(&a), params(&b));
        let worst = pa
            .iter()
            .zip(&pb)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        // Five steps of at most lr = 3e-3 each: the two differ by f32 rounding only.
        assert!(worst <= 2e-6, "largest weight difference {worst}");
    }

    #[test]
    fn global_norm_clip_scales_every_gradient_by_the_host_computed_factor() {
        let device = Default::default();
        let model = Transformer::<Ad>::new(&tiny(), &device).unwrap();
        let (_, grads) = loss_and_grads(&model, 0);
        let host = |g: &GradientsParams| {
            let mut all = Vec::new();
            struct Collect<'a>(&'a GradientsParams, &'a mut Vec<f64>);
            impl ModuleVisitor<Ad> for Collect<'_> {
                fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<Ad, D>>) {
                    let t = self
                        .0
                        .get::<NdArray, D>(p.id)
                        .expect("every weight has a gradient");
                    self.1.extend(
                        t.into_data()
                            .to_vec::<f32>()
                            .unwrap()
                            .iter()
                            .map(|&x| x as f64),
                    );
                }
            }
            model.visit(&mut Collect(g, &mut all));
            all
        };
        let before = host(&grads);
        let norm = before.iter().map(|x| x * x).sum::<f64>().sqrt();
        // A clip below the norm scales; one above it leaves the gradients as they are.
        for max_norm in [norm as f32 / 3.0, norm as f32 * 2.0] {
            let (_, grads) = loss_and_grads(&model, 0);
            let (clipped, squared) = clip_global_norm(&model, grads, max_norm);
            let squared = squared.unwrap().into_scalar() as f64;
            assert!(
                (squared - norm * norm).abs() <= 1e-5 * norm * norm,
                "squared norm {squared}"
            );
            let scale = (max_norm as f64 / (norm + 1e-6)).min(1.0);
            let after = host(&clipped);
            for (i, (b, a)) in before.iter().zip(&after).enumerate() {
                assert!(
                    (b * scale - a).abs() <= 1e-6 * b.abs().max(1e-3),
                    "gradient {i}: {a} vs {}",
                    b * scale
                );
            }
            let clipped_norm = after.iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!(
                clipped_norm <= max_norm as f64 * (1.0 + 1e-5),
                "{clipped_norm} > {max_norm}"
            );
        }
    }

    #[test]
    fn fused_adamw_refuses_bad_hyperparameters_naming_them() {
        let param = |r: Result<FusedAdamW<Ad>, AttnError>| r.unwrap_err().param().unwrap();
        assert_eq!(param(FusedAdamW::new(-0.1)), "weight_decay");
        assert_eq!(param(FusedAdamW::with(1.0, 0.999, 1e-5, 0.0)), "beta_1");
        assert_eq!(param(FusedAdamW::with(0.9, f32::NAN, 1e-5, 0.0)), "beta_2");
        assert_eq!(param(FusedAdamW::with(0.9, 0.999, 0.0, 0.0)), "epsilon");
    }
}
