//! `burn-ascend plan`: the memory plan of `burn_ascend_model::parallel::plan` for a config file, printed
//! per component, with the simulation's measured peak on request.

use burn_ascend::backend::AscendDevice;
use burn_ascend_model::model::lora::LoraTarget;
use burn_ascend_model::parallel::plan::{
    measure_peak, plan, MemoryPlan, PlanSpec, ATLAS_NPU_BYTES,
};
use burn_ascend_model::ModelConfig;

use crate::args::{ComputeDtype, PlanArgs};
use crate::CliError;

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The config `args` names (or the finetune example's model) and the spec of the plan.
pub fn spec_of(args: &PlanArgs) -> Result<(ModelConfig, PlanSpec), CliError> {
    let config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::Io(format!("{}: {e}", path.display())))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| CliError::Io(format!("{}: {e}", path.display())))?;
            ModelConfig::from_json(&v).map_err(CliError::Attn)?
        }
        None => ModelConfig::small_byte_model(),
    };
    let lora = match args.lora_rank {
        Some(r) => Some((
            r,
            LoraTarget::parse_list(&args.lora_targets, "--lora-targets").map_err(CliError::Attn)?,
        )),
        None => None,
    };
    if lora
        .as_ref()
        .is_some_and(|(_, t)| t.iter().any(|t| t.is_mlp()))
        && config.moe.is_some()
    {
        return Err(CliError::Attn(burn_ascend::AttnError::Unsupported(
            "--lora-targets gate_proj/up_proj/down_proj on a mixture of experts (attention projections only)".into(),
        )));
    }
    let spec = PlanSpec {
        tokens_per_rank: args.tokens_per_rank,
        seq_len: args.seq_len.unwrap_or(args.tokens_per_rank),
        ranks: args.ranks,
        compute_bytes: match args.dtype {
            ComputeDtype::F32 => 4,
            ComputeDtype::Bf16 | ComputeDtype::F16 => 2,
        },
        lora,
        zero: args.zero,
        checkpointing: args.checkpointing,
    };
    Ok((config, spec))
}

/// The plan as printed: one line per component, the peak, and the verdict.
pub fn format_plan(c: &ModelConfig, spec: &PlanSpec, p: &MemoryPlan) -> String {
    let what = match &spec.lora {
        Some((r, t)) => format!(
            "LoRA r {r} on {}",
            t.iter().map(|t| t.name()).collect::<Vec<_>>().join(",")
        ),
        None => "full fine-tune".into(),
    };
    format!(
        "plan: {} parameters, {what}, {} tokens per rank (sequences up to {}), {} rank(s), \
         compute {}, ZeRO {}{}\n\
         weights     {}\ngradients   {}\noptimizer   {}\nactivations {}\nworkspace   {}\n\
         peak        {} per rank: {} one Atlas A2 / A3 NPU ({})\n",
        c.num_params(),
        spec.tokens_per_rank,
        spec.seq_len,
        spec.ranks,
        if spec.compute_bytes == 4 {
            "f32"
        } else {
            "16-bit"
        },
        spec.zero,
        if spec.checkpointing {
            ", activation checkpointing"
        } else {
            ""
        },
        gib(p.weights),
        gib(p.gradients),
        gib(p.optimizer),
        gib(p.activations),
        gib(p.workspace),
        gib(p.peak),
        if p.fits_atlas() {
            "fits"
        } else {
            "does not fit"
        },
        gib(ATLAS_NPU_BYTES),
    )
}

/// `plan`.
pub fn main(args: &PlanArgs) -> Result<(), CliError> {
    let (config, spec) = spec_of(args)?;
    let p = plan(&config, &spec);
    print!("{}", format_plan(&config, &spec, &p));
    if args.measure {
        let device = AscendDevice::sim();
        let measured = measure_peak(&config, &spec, &device).map_err(CliError::Attn)?;
        println!(
            "measured    {} peak of the simulation's memory pool over a training step (plan / measured {:.3})",
            gib(measured),
            p.peak as f64 / measured as f64
        );
    }
    Ok(())
}
