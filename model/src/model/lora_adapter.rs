//! LoRA adapters (Hu et al., 2021) as PEFT implements them for `nn.Linear`: a chosen
//! projection `y = x·Wᵀ + b` becomes `y + scaling · B(A(dropout(x)))` with `A [r, in]`,
//! `B [out, r]`, `scaling = lora_alpha / r`; A starts kaiming-uniform (PEFT's
//! `kaiming_uniform_(a=√5)`: U(±1/√in)), B at zero, so the adapted model starts equal to the
//! base. Dropout acts on the adapter's input only, and only while training (Burn's `Dropout`
//! is the identity off `Autodiff`).
//!
//! Training with adapters ([`crate::model::lora::freeze_base`]) freezes every base parameter: none
//! requires a gradient, so backward produces gradients only for the adapters, Burn's optimizers
//! (which update and keep state only for parameters with a gradient) hold state only for them, and
//! data parallelism all-reduces only them. The base's matrices (the blocks' projections and
//! experts, the output head) are stored in bf16 where the backend has it (`Ascend`); on `NdArray`,
//! which has no half types, they stay f32 tensors holding bf16-rounded values, so both backends
//! train against the same base numbers. The embedding table, norms, biases and sinks (a few percent
//! of a model's bytes) stay f32: the residual stream takes the embedding's dtype.
//!
//! The adapters' parameter ids are derived from their place (layer, projection, A or B), so a
//! resumed run's adapters, read back from `adapter_model.safetensors`, meet their optimizer
//! state again. The PEFT file format is in `peft.rs`; attaching adapters to a whole model,
//! freezing its base and merging are `lora.rs`'s.

use burn::module::{Module, Param, ParamId};
use burn::nn::Dropout;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor};

use burn_ascend::{AttnError, LinearBackend, WeightLayout};

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

impl<B: LinearBackend> LoraAdapter<B> {
    /// The adapter's contribution for `x [.., in]` → `[.., out]`, in `x`'s dtype: both
    /// products through the linear op, A `[r, in]` and B `[out, r]` read as they are stored.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let dt = x.dtype();
        let h = self.dropout.forward(x);
        // The shapes were checked when the adapter was made; a refusal is a broken invariant.
        let product = |x, w: Tensor<B, 2>| {
            burn_ascend::linear(x, w.cast(dt), None, WeightLayout::OutIn)
                .unwrap_or_else(|e| panic!("LoRA adapter product refused: {e}"))
        };
        // The scaling multiplies the rank-r intermediate, not the `[.., out]` product: the same
        // value up to rounding (exactly the same when it is a power of two, as alpha = 2r is),
        // for r / out of the element-wise work.
        let h = product(h, self.lora_a.val()).mul_scalar(self.settings.scaling());
        product(h, self.lora_b.val())
    }
}

impl<B: Backend> LoraAdapter<B> {
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
pub fn adapted<B: LinearBackend, const D: usize>(
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
