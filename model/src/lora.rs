//! LoRA adapters (Hu et al., 2021) as PEFT implements them for `nn.Linear`: a chosen
//! projection `y = x·Wᵀ + b` becomes `y + scaling · B(A(dropout(x)))` with `A [r, in]`,
//! `B [out, r]`, `scaling = lora_alpha / r`; A starts kaiming-uniform (PEFT's
//! `kaiming_uniform_(a=√5)`: U(±1/√in)), B at zero, so the adapted model starts equal to the
//! base. Dropout acts on the adapter's input only, and only while training (Burn's `Dropout`
//! is the identity off `Autodiff`).
//!
//! Training with adapters ([`freeze_base`]) freezes every base parameter: none requires a
//! gradient, so backward produces gradients only for the adapters, Burn's optimizers (which
//! update and keep state only for parameters with a gradient) hold state only for them, and
//! data parallelism all-reduces only them. The base's matrices (the blocks' projections and
//! experts, the output head) are stored in bf16 where the backend has it (`Ascend`); on
//! `NdArray`, which has no half types, they stay f32 tensors holding bf16-rounded values, so
//! both backends train against the same base numbers. The embedding table, norms, biases and
//! sinks (a few percent of a model's bytes) stay f32: the residual stream takes the
//! embedding's dtype.
//!
//! The adapters' parameter ids are derived from their place (layer, projection, A or B), so a
//! resumed run's adapters, read back from `adapter_model.safetensors`, meet their optimizer
//! state again. The PEFT file format is in `peft.rs`.

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use half::bf16;

use super::data::SplitMix;
use super::transformer::{Ffn, Transformer};
use burn_ascend::AttnError;

/// A projection LoRA can adapt, by PEFT's `target_modules` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LoraTarget {
    /// `self_attn.q_proj`.
    QProj,
    /// `self_attn.k_proj`.
    KProj,
    /// `self_attn.v_proj`.
    VProj,
    /// `self_attn.o_proj`.
    OProj,
    /// `mlp.gate_proj`.
    GateProj,
    /// `mlp.up_proj`.
    UpProj,
    /// `mlp.down_proj`.
    DownProj,
}

impl LoraTarget {
    /// Every target, in module order.
    pub const ALL: [Self; 7] = [
        Self::QProj,
        Self::KProj,
        Self::VProj,
        Self::OProj,
        Self::GateProj,
        Self::UpProj,
        Self::DownProj,
    ];

    /// PEFT's name (`q_proj`).
    pub fn name(self) -> &'static str {
        match self {
            Self::QProj => "q_proj",
            Self::KProj => "k_proj",
            Self::VProj => "v_proj",
            Self::OProj => "o_proj",
            Self::GateProj => "gate_proj",
            Self::UpProj => "up_proj",
            Self::DownProj => "down_proj",
        }
    }

    /// The module's path inside a decoder layer (`self_attn.q_proj`).
    pub fn path(self) -> &'static str {
        match self {
            Self::QProj => "self_attn.q_proj",
            Self::KProj => "self_attn.k_proj",
            Self::VProj => "self_attn.v_proj",
            Self::OProj => "self_attn.o_proj",
            Self::GateProj => "mlp.gate_proj",
            Self::UpProj => "mlp.up_proj",
            Self::DownProj => "mlp.down_proj",
        }
    }

    /// Whether the target is one of the dense MLP's projections.
    pub fn is_mlp(self) -> bool {
        matches!(self, Self::GateProj | Self::UpProj | Self::DownProj)
    }

    /// A comma-separated list (`q_proj,v_proj`; PEFT's `all-linear` is every target), sorted
    /// and without repeats; an unknown name is an error naming `flag` and the name.
    pub fn parse_list(list: &str, flag: &'static str) -> Result<Vec<Self>, AttnError> {
        let mut out = Vec::new();
        for name in list.split(',').map(str::trim) {
            if name == "all-linear" {
                out.extend(Self::ALL);
                continue;
            }
            let t = Self::ALL
                .into_iter()
                .find(|t| t.name() == name)
                .ok_or_else(|| {
                    AttnError::invalid(
                        flag,
                        format!(
                            "'{name}' names no module LoRA can adapt (one of {}, or all-linear)",
                            Self::ALL.map(Self::name).join(", ")
                        ),
                    )
                })?;
            out.push(t);
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// What a LoRA is: PEFT's `LoraConfig` fields this crate implements.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSettings {
    /// `r`: the adapters' rank.
    pub rank: usize,
    /// `lora_alpha`: the adapter's output is scaled by `alpha / rank`.
    pub alpha: f64,
    /// `lora_dropout`: dropout probability on the adapter's input while training.
    pub dropout: f64,
    /// `target_modules`, sorted.
    pub targets: Vec<LoraTarget>,
    /// `base_model_name_or_path`: the base checkpoint the adapter belongs to.
    pub base_model: String,
}

impl LoraSettings {
    /// PEFT's scaling `lora_alpha / r` (rsLoRA's `/√r` is not implemented).
    pub fn scaling(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// Rank at least 1, alpha finite and above 0, dropout in [0, 1), at least one target;
    /// each refusal names its flag.
    pub fn validate(&self) -> Result<(), AttnError> {
        if self.rank == 0 {
            return Err(AttnError::invalid(
                "--lora-rank",
                "must be at least 1, got 0",
            ));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(AttnError::invalid(
                "--lora-alpha",
                format!("must be finite and above 0, got {}", self.alpha),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(AttnError::invalid(
                "--lora-dropout",
                format!("must be in [0, 1), got {}", self.dropout),
            ));
        }
        if self.targets.is_empty() {
            return Err(AttnError::invalid("--lora-targets", "names no module"));
        }
        Ok(())
    }
}

/// One adapter: `scaling · B(A(dropout(x)))`, PEFT's layout (`A [r, in]`, `B [out, r]`).
#[derive(Module, Debug)]
pub struct LoraAdapter<B: Backend> {
    /// `lora_A.weight` `[r, in]`.
    pub lora_a: Param<Tensor<B, 2>>,
    /// `lora_B.weight` `[out, r]`.
    pub lora_b: Param<Tensor<B, 2>>,
    /// Dropout on the adapter's input (training only).
    pub dropout: Dropout,
    /// The settings it was made with (not a parameter).
    #[module(skip)]
    pub settings: LoraSettings,
}

impl<B: Backend> LoraAdapter<B> {
    /// The adapter's contribution for `x [.., in]` → `[.., out]`, in `x`'s dtype.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let dt = x.dtype();
        let h = self.dropout.forward(x);
        let h = burn::tensor::module::linear(h, self.lora_a.val().cast(dt).transpose(), None);
        burn::tensor::module::linear(h, self.lora_b.val().cast(dt).transpose(), None)
            .mul_scalar(self.settings.scaling())
    }

    /// `scaling · (B·A)ᵀ`, `[in, out]` in f32: what merging adds to Burn's `Linear` weight.
    pub fn delta(&self) -> Tensor<B, 2> {
        let a = self.lora_a.val().cast(FloatDType::F32);
        let b = self.lora_b.val().cast(FloatDType::F32);
        b.matmul(a).transpose().mul_scalar(self.settings.scaling())
    }
}

/// The adapters of a block's attention projections (each `None` when not a target).
#[derive(Module, Debug)]
pub struct AttentionAdapters<B: Backend> {
    /// On `q_proj`.
    pub q_proj: Option<LoraAdapter<B>>,
    /// On `k_proj`.
    pub k_proj: Option<LoraAdapter<B>>,
    /// On `v_proj`.
    pub v_proj: Option<LoraAdapter<B>>,
    /// On `o_proj`.
    pub o_proj: Option<LoraAdapter<B>>,
}

impl<B: Backend> AttentionAdapters<B> {
    /// No adapters.
    pub fn none() -> Self {
        Self {
            q_proj: None,
            k_proj: None,
            v_proj: None,
            o_proj: None,
        }
    }
}

/// The adapters of a dense MLP's projections.
#[derive(Module, Debug)]
pub struct MlpAdapters<B: Backend> {
    /// On `gate_proj`.
    pub gate_proj: Option<LoraAdapter<B>>,
    /// On `up_proj`.
    pub up_proj: Option<LoraAdapter<B>>,
    /// On `down_proj`.
    pub down_proj: Option<LoraAdapter<B>>,
}

impl<B: Backend> MlpAdapters<B> {
    /// No adapters.
    pub fn none() -> Self {
        Self {
            gate_proj: None,
            up_proj: None,
            down_proj: None,
        }
    }
}

/// `x · Wᵀ + b` through `base` (by `proj`, the model's projection) plus the adapter's term
/// when there is one.
pub fn adapted<B: Backend, const D: usize>(
    base: impl FnOnce(Tensor<B, D>) -> Tensor<B, D>,
    adapter: Option<&LoraAdapter<B>>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    match adapter {
        None => base(x),
        Some(a) => base(x.clone()) + a.forward(x),
    }
}

/// The fixed parameter id of layer `layer`'s adapter on `target` (`b`: its B matrix): the
/// same on every run, so a resumed run's optimizer state finds its adapters.
pub fn adapter_param_id(layer: usize, target: LoraTarget, b: bool) -> ParamId {
    // "LoRA" in the high bytes keeps the ids away from Burn's random ones in practice.
    const TAG: u64 = 0x4C6F_5241 << 32;
    ParamId::from(TAG | ((layer as u64) << 8) | ((target as u64) << 1) | b as u64)
}

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
