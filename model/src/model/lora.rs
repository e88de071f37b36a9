//! LoRA (Hu et al., 2021) on a whole [`Transformer`]: adapters attached to the chosen
//! projections of every layer ([`attach`]), set or listed by place ([`set_adapter`],
//! [`adapters`]), the base frozen for training ([`freeze_base`]) and the adapters merged into
//! the base ([`merge`]). The adapter layers themselves, which the transformer's projections
//! hold, are `lora_adapter.rs`'s (re-exported here); their files in PEFT's format `peft.rs`'s.

use burn::module::{Module, ModuleMapper, Param};
use burn::nn::{DropoutConfig, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use half::bf16;

use crate::load::data::SplitMix;
pub use crate::model::lora_adapter::{
    adapted, adapter_param_id, AttentionAdapters, LoraAdapter, LoraSettings, LoraTarget,
    MlpAdapters,
};
use crate::model::transformer::{Ffn, Transformer};
use burn_ascend::AttnError;

/// `(in, out)` of `target`'s projection in `l`.
fn dims<B: Backend>(l: &Linear<B>) -> (usize, usize) {
    let [i, o] = l.weight.dims();
    (i, o)
}

/// An adapter's place in the model and its projection's `(in, out)`.
type Slot<'a, B> = (&'a mut Option<LoraAdapter<B>>, (usize, usize));

/// The slot of layer `layer`'s adapter on `target`, and its projection's `(in, out)`.
fn slot<B: Backend>(
    model: &mut Transformer<B>,
    layer: usize,
    target: LoraTarget,
) -> Result<Slot<'_, B>, AttnError> {
    let block = &mut model.layers[layer];
    let a = &mut block.self_attn;
    if !target.is_mlp() {
        let slots = a.lora.get_or_insert_with(AttentionAdapters::none);
        return Ok(match target {
            LoraTarget::QProj => (&mut slots.q_proj, dims(&a.q_proj)),
            LoraTarget::KProj => (&mut slots.k_proj, dims(&a.k_proj)),
            LoraTarget::VProj => (&mut slots.v_proj, dims(&a.v_proj)),
            _ => (&mut slots.o_proj, dims(&a.o_proj)),
        });
    }
    {
        {
            let Ffn::Dense(m) = &mut block.mlp else {
                return Err(AttnError::Unsupported(format!(
                    "--lora-targets {}: the model's MLP is a mixture of experts (LoRA on attention projections only)",
                    target.name()
                )));
            };
            let slots = m.lora.get_or_insert_with(MlpAdapters::none);
            Ok(match target {
                LoraTarget::GateProj => (&mut slots.gate_proj, dims(&m.gate_proj)),
                LoraTarget::UpProj => (&mut slots.up_proj, dims(&m.up_proj)),
                _ => (&mut slots.down_proj, dims(&m.down_proj)),
            })
        }
    }
}

/// Adds fresh adapters (PEFT's init: A U(±1/√in), B zero) on `settings.targets` of every
/// layer, replacing any there. A is drawn from its own generator seeded by `seed` (not the
/// backend's, which tests and ranks share), so a run is reproducible and every data-parallel
/// rank starts from the same adapters. The base is left as it is (see [`freeze_base`]).
pub fn attach<B: Backend>(
    mut model: Transformer<B>,
    settings: &LoraSettings,
    seed: u64,
    device: &B::Device,
) -> Result<Transformer<B>, AttnError> {
    settings.validate()?;
    let r = settings.rank;
    let mut rng = SplitMix(seed ^ 0x4C6F_5241);
    for layer in 0..model.layers.len() {
        for &target in &settings.targets {
            let (slot, (d_in, d_out)) = slot(&mut model, layer, target)?;
            let bound = 1.0 / (d_in as f64).sqrt();
            let values: Vec<f32> = (0..r * d_in)
                .map(|_| {
                    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    ((2.0 * u - 1.0) * bound) as f32
                })
                .collect();
            let a = Tensor::<B, 2>::from_data(TensorData::new(values, [r, d_in]), device);
            let b = Tensor::<B, 2>::zeros([d_out, r], device);
            *slot = Some(LoraAdapter {
                lora_a: Param::initialized(
                    adapter_param_id(layer, target, false),
                    a.require_grad(),
                ),
                lora_b: Param::initialized(adapter_param_id(layer, target, true), b.require_grad()),
                dropout: DropoutConfig::new(settings.dropout).init(),
                settings: settings.clone(),
            });
        }
    }
    Ok(model)
}

/// Sets layer `layer`'s adapter on `target` to `a [r, in]` and `b [out, r]` (PEFT's layout),
/// checking the shapes against the model and the adapter's rank.
pub fn set_adapter<B: Backend>(
    model: &mut Transformer<B>,
    layer: usize,
    target: LoraTarget,
    a: Vec<f32>,
    b: Vec<f32>,
    device: &B::Device,
) -> Result<(), AttnError> {
    let (slot, (d_in, d_out)) = slot(model, layer, target)?;
    let Some(adapter) = slot.as_mut() else {
        return Err(AttnError::invalid(
            "adapter",
            format!("layer {layer} has no adapter on {}", target.name()),
        ));
    };
    let r = adapter.settings.rank;
    if a.len() != r * d_in || b.len() != d_out * r {
        return Err(AttnError::invalid(
            "adapter",
            format!(
                "layer {layer} {}: lora_A must be [{r}, {d_in}] and lora_B [{d_out}, {r}]",
                target.name()
            ),
        ));
    }
    let value = |v: Vec<f32>, shape: [usize; 2]| {
        Tensor::<B, 2>::from_data(TensorData::new(v, shape), device).require_grad()
    };
    adapter.lora_a =
        Param::initialized(adapter_param_id(layer, target, false), value(a, [r, d_in]));
    adapter.lora_b =
        Param::initialized(adapter_param_id(layer, target, true), value(b, [d_out, r]));
    Ok(())
}

/// Every adapter of `model` with its layer and target, in module order.
pub fn adapters<B: Backend>(model: &Transformer<B>) -> Vec<(usize, LoraTarget, &LoraAdapter<B>)> {
    let mut out = Vec::new();
    for (i, block) in model.layers.iter().enumerate() {
        let mut slots = Vec::new();
        if let Some(a) = &block.self_attn.lora {
            slots.push((LoraTarget::QProj, &a.q_proj));
            slots.push((LoraTarget::KProj, &a.k_proj));
            slots.push((LoraTarget::VProj, &a.v_proj));
            slots.push((LoraTarget::OProj, &a.o_proj));
        }
        if let Ffn::Dense(m) = &block.mlp {
            if let Some(a) = &m.lora {
                slots.push((LoraTarget::GateProj, &a.gate_proj));
                slots.push((LoraTarget::UpProj, &a.up_proj));
                slots.push((LoraTarget::DownProj, &a.down_proj));
            }
        }
        out.extend(
            slots
                .into_iter()
                .filter_map(|(t, s)| s.as_ref().map(|s| (i, t, s))),
        );
    }
    out
}

/// The settings of `model`'s adapters, `None` without any.
pub fn settings<B: Backend>(model: &Transformer<B>) -> Option<LoraSettings> {
    adapters(model).first().map(|(_, _, a)| a.settings.clone())
}

/// Rounds a tensor's values to bf16: stored as bf16 where `B` has it, else as f32 values that
/// bf16 represents exactly.
fn to_bf16<B: Backend, const D: usize>(t: Tensor<B, D>) -> Tensor<B, D> {
    if B::supports_dtype(&t.device(), DType::BF16) {
        return t.cast(FloatDType::BF16);
    }
    let device = t.device();
    let shape = t.shape();
    let data = t.into_data().convert::<f32>();
    let rounded: Vec<f32> = data
        .as_slice::<f32>()
        .expect("f32 after convert")
        .iter()
        .map(|&x| bf16::from_f32(x).to_f32())
        .collect();
    Tensor::from_data(TensorData::new(rounded, shape), &device)
}

/// Freezes every parameter it visits and stores the matrices (rank ≥ 2) in bf16.
struct FreezeInBf16;

impl<B: Backend> ModuleMapper<B> for FreezeInBf16 {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let tensor = if D >= 2 { to_bf16(tensor) } else { tensor };
        Param::from_mapped_value(id, tensor.set_require_grad(false), mapper)
    }
}

/// For LoRA training: every base parameter frozen (no gradient, so no optimizer state and
/// no all-reduce), the blocks' matrices and the output head stored in bf16 (see the module
/// docs); the adapters keep requiring gradients, in f32.
pub fn freeze_base<B: Backend>(mut model: Transformer<B>) -> Transformer<B> {
    let mut layers = Vec::with_capacity(model.layers.len());
    for mut block in std::mem::take(&mut model.layers) {
        let attn = block.self_attn.lora.take();
        let mlp = match &mut block.mlp {
            Ffn::Dense(m) => m.lora.take(),
            Ffn::Experts(_) => None,
        };
        let mut block = block.map(&mut FreezeInBf16);
        block.self_attn.lora = attn;
        if let Ffn::Dense(m) = &mut block.mlp {
            m.lora = mlp;
        }
        layers.push(block);
    }
    model.layers = layers;
    model.lm_head = model.lm_head.map(|h| h.map(&mut FreezeInBf16));
    model.embed_tokens = model.embed_tokens.no_grad();
    model.norm = model.norm.no_grad();
    model
}

/// The adapters merged into the base: each adapted weight becomes `W + scaling·B·A` (PEFT's
/// `merge_and_unload`), computed in f32 and stored f32, and the adapters are removed. A model
/// without adapters comes back unchanged.
pub fn merge<B: Backend>(mut model: Transformer<B>) -> Transformer<B> {
    fn fold<B: Backend>(l: &mut Linear<B>, a: Option<LoraAdapter<B>>) {
        if let Some(a) = a {
            let w = l.weight.val().cast(FloatDType::F32) + a.delta();
            let id = l.weight.id;
            l.weight = Param::initialized(id, w);
        }
    }
    for block in &mut model.layers {
        let s = &mut block.self_attn;
        if let Some(ad) = s.lora.take() {
            fold(&mut s.q_proj, ad.q_proj);
            fold(&mut s.k_proj, ad.k_proj);
            fold(&mut s.v_proj, ad.v_proj);
            fold(&mut s.o_proj, ad.o_proj);
        }
        if let Ffn::Dense(m) = &mut block.mlp {
            if let Some(ad) = m.lora.take() {
                fold(&mut m.gate_proj, ad.gate_proj);
                fold(&mut m.up_proj, ad.up_proj);
                fold(&mut m.down_proj, ad.down_proj);
            }
        }
    }
    model
}
