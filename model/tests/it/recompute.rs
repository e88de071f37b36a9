//! Per-block activation checkpointing (`model/src/train/recompute.rs`): the
//! same loss and gradients as keeping every activation, on NdArray and on the Ascend
//! simulation, and the memory it saves measured on the simulation's pool.

use burn::backend::{Autodiff, NdArray};
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, FloatDType, Int, Tensor, TensorData};

use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::TrainingBackend;
use burn_ascend_model::load::config::{LayerType, RopeScaling};
use burn_ascend_model::model::lora::{attach, freeze_base, LoraSettings, LoraTarget};
use burn_ascend_model::train::recompute::loss_and_grads;
use burn_ascend_model::{cross_entropy_fused, ModelConfig, Transformer};

/// Sinks, a sliding-window layer, q/k norms, biases and tied embeddings: every kind of
/// parameter a block or the head has.
fn config(layers: usize, tied: bool) -> ModelConfig {
    ModelConfig {
        vocab_size: 64,
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: layers,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        sliding_window: Some(5),
        layer_types: LayerType::alternating(layers),
        attention_sinks: true,
        attention_bias: true,
        attention_output_bias: false,
        mlp_bias: true,
        qk_norm: true,
        rope_theta: 10_000.0,
        rope_scaling: RopeScaling::Default,
        rms_norm_eps: 1e-5,
        tie_word_embeddings: tied,
        attention_dropout: 0.0,
        moe: None,
    }
}

/// Each parameter's gradient as host values, by id.
struct Grads<'a, I: Backend> {
    grads: &'a GradientsParams,
    out: Vec<(ParamId, Option<Vec<f32>>)>,
    _inner: std::marker::PhantomData<I>,
}

impl<A: AutodiffBackend> ModuleVisitor<A> for Grads<'_, A::InnerBackend> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<A, D>>) {
        let g = self
            .grads
            .get::<A::InnerBackend, D>(param.id)
            .map(|g| g.into_data().convert::<f32>().to_vec::<f32>().expect("f32"));
        self.out.push((param.id, g));
    }
}

fn grads_of<A: AutodiffBackend>(
    model: &Transformer<A>,
    grads: &GradientsParams,
) -> Vec<(ParamId, Option<Vec<f32>>)> {
    let mut v = Grads::<A::InnerBackend> {
        grads,
        out: Vec::new(),
        _inner: std::marker::PhantomData,
    };
    model.visit(&mut v);
    v.out
}

/// The loss and every trained parameter's gradient of one packed batch, keeping every
/// activation and with per-block checkpointing; returns the largest gradient difference
/// relative to that parameter's largest gradient, and the two losses.
fn compare<A>(model: &Transformer<A>, device: &A::Device) -> (f32, f32, f32, usize)
where
    A: AutodiffBackend + TrainingBackend,
    A::InnerBackend: TrainingBackend,
{
    let v = model.config.vocab_size as i64;
    let cu = [0i64, 7, 19, 24];
    let ids: Vec<i64> = (0..24).map(|i| (i * 37 + 11) % v).collect();
    let targets: Vec<i64> = ids.iter().map(|i| (i * 5 + 3) % v).collect();
    let tokens = Tensor::<A, 1, Int>::from_data(TensorData::new(ids, [24]), device);
    let targets = Tensor::<A, 1, Int>::from_data(TensorData::new(targets, [24]), device);
    let logits = model.forward_packed(tokens.clone(), &cu).unwrap();
    let loss = cross_entropy_fused(logits, targets.clone()).unwrap();
    let kept_loss: f32 = loss.clone().into_scalar().elem();
    let kept = GradientsParams::from_grads(loss.backward(), model);
    let (loss, checkpointed) = loss_and_grads(model, tokens, &cu, targets, None).unwrap();
    let checkpointed_loss: f32 = loss.into_scalar().elem();
    let (a, b) = (grads_of(model, &kept), grads_of(model, &checkpointed));
    let mut worst = 0f32;
    let mut trained = 0;
    for ((id, ka), (_, kb)) in a.into_iter().zip(b) {
        match (ka, kb) {
            (None, None) => {}
            (Some(x), Some(y)) => {
                trained += 1;
                let scale = x.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
                let diff = x
                    .iter()
                    .zip(&y)
                    .fold(0f32, |m, (p, q)| m.max((p - q).abs()));
                worst = worst.max(diff / scale);
            }
            (x, y) => panic!(
                "parameter {id}: gradient kept {} / checkpointed {}",
                x.is_some(),
                y.is_some()
            ),
        }
    }
    (worst, kept_loss, checkpointed_loss, trained)
}

fn lora<A: AutodiffBackend>(model: Transformer<A>, device: &A::Device) -> Transformer<A> {
    let s = LoraSettings {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: LoraTarget::parse_list("all-linear", "--lora-targets").unwrap(),
        base_model: String::new(),
    };
    freeze_base(attach(model, &s, 3, device).unwrap())
}

/// The same kernels on the same inputs, and Burn adds the contributions to each gradient in
/// the same order (a block's graph is the same sub-graph, only its depth offset differs): every
/// trained parameter's gradient and the loss bit-identical, measured on NdArray (full with tied
/// embeddings, LoRA) and on the simulation (f32 and bf16 mixed precision). Should a Burn update
/// reorder the additions, the bound to relax to is rounding: 1e-5 of each tensor's largest.
#[test]
fn block_checkpointing_gives_every_parameter_the_gradient_of_keeping_every_activation() {
    let device = Default::default();
    type Cpu = Autodiff<NdArray>;
    for (name, model) in [
        (
            "NdArray full, tied",
            Transformer::<Cpu>::new(&config(3, true), &device).unwrap(),
        ),
        (
            "NdArray LoRA all-linear",
            lora(
                Transformer::<Cpu>::new(&config(2, false), &device).unwrap(),
                &device,
            ),
        ),
    ] {
        let (worst, kept, ckpt, trained) = compare(&model, &device);
        eprintln!("{name}: {trained} trained tensors, max relative gradient difference {worst:e}, loss {kept} / {ckpt}");
        assert_eq!(worst, 0.0, "{name}");
        assert_eq!(kept.to_bits(), ckpt.to_bits(), "{name}");
        assert!(trained > 0);
    }
    let sim = AscendDevice::sim();
    type Sim = Autodiff<Ascend>;
    for (name, dtype) in [
        ("sim full f32", None),
        ("sim full bf16", Some(FloatDType::BF16)),
    ] {
        let model = Transformer::<Sim>::new(&config(2, false), &sim)
            .unwrap()
            .with_compute_dtype(dtype);
        let (worst, kept, ckpt, trained) = compare(&model, &sim);
        eprintln!("{name}: {trained} trained tensors, max relative gradient difference {worst:e}, loss {kept} / {ckpt}");
        assert_eq!(worst, 0.0, "{name}");
        assert_eq!(kept.to_bits(), ckpt.to_bits(), "{name}");
    }
}

#[test]
fn block_checkpointing_refuses_lora_dropout_naming_the_flag() {
    let device = Default::default();
    type Cpu = Autodiff<NdArray>;
    let s = LoraSettings {
        rank: 2,
        alpha: 4.0,
        dropout: 0.1,
        targets: vec![LoraTarget::QProj],
        base_model: String::new(),
    };
    let model = freeze_base(
        attach(
            Transformer::<Cpu>::new(&config(1, false), &device).unwrap(),
            &s,
            0,
            &device,
        )
        .unwrap(),
    );
    let tokens = Tensor::<Cpu, 1, Int>::from_data(TensorData::new(vec![1i64, 2, 3], [3]), &device);
    let e = loss_and_grads(&model, tokens.clone(), &[0, 3], tokens, None).unwrap_err();
    assert!(e.to_string().contains("--lora-dropout"), "{e}");
}
