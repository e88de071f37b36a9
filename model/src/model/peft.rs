//! LoRA adapters in PEFT's folder format, so PEFT loads ours and we load PEFT's:
//! `adapter_config.json` (PEFT's `LoraConfig` as `save_pretrained` writes it, every key PEFT
//! 0.21 writes, with PEFT's defaults for what this crate does not implement) and
//! `adapter_model.safetensors` with PEFT's names,
//! `base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight` (`[r, in]`) and
//! `….lora_B.weight` (`[out, r]`), f32. Reading refuses, naming the key, the PEFT features
//! this crate does not implement (rsLoRA, DoRA, per-module rank or alpha patterns, biases,
//! `fan_in_fan_out`, layer subsets, `modules_to_save`, regex targets).

use std::collections::HashMap;
use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use safetensors::{Dtype, SafeTensors};
use serde_json::{json, Value};

use crate::model::hf_checkpoint::{float_values, load_hf};
use crate::model::lora::{adapters, attach, freeze_base, set_adapter, LoraSettings, LoraTarget};
use crate::model::transformer::Transformer;
use crate::run_state::published::Published;
use crate::run_state::state::TrainState;
use burn_ascend::AttnError;

/// The PEFT version whose format this writes (its `peft_version` key).
pub const PEFT_FORMAT_VERSION: &str = "0.21.2";

fn io(path: &Path, e: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("adapter", format!("{}: {e}", path.display()))
}

/// PEFT's tensor name of layer `layer`'s adapter on `target` (`b`: lora_B).
pub fn tensor_name(layer: usize, target: LoraTarget, b: bool) -> String {
    format!(
        "base_model.model.model.layers.{layer}.{}.lora_{}.weight",
        target.path(),
        if b { "B" } else { "A" }
    )
}

/// The target names sorted by name (PEFT keeps a set; the fixture sorts it the same way).
fn target_names(s: &LoraSettings) -> Vec<&'static str> {
    let mut names: Vec<&str> = s.targets.iter().map(|t| t.name()).collect();
    names.sort_unstable();
    names
}

/// `adapter_config.json` of `s`: the keys and defaults PEFT 0.21's `LoraConfig` writes.
pub fn config_json(s: &LoraSettings) -> Value {
    json!({
        "alora_invocation_tokens": null,
        "alpha_pattern": {},
        "arrow_config": null,
        "auto_mapping": null,
        "base_model_name_or_path": s.base_model,
        "bias": "none",
        "corda_config": null,
        "ensure_weight_tying": false,
        "eva_config": null,
        "exclude_modules": null,
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "kasa_config": null,
        "layer_replication": null,
        "layers_pattern": null,
        "layers_to_transform": null,
        "loftq_config": {},
        // PEFT's `lora_alpha` is an int: written as one when it is whole.
        "lora_alpha": if s.alpha.fract() == 0.0 && s.alpha.abs() < 1e15 {
            json!(s.alpha as i64)
        } else {
            json!(s.alpha)
        },
        "lora_bias": false,
        "lora_dropout": s.dropout,
        "lora_ga_config": null,
        "megatron_config": null,
        "megatron_core": "megatron.core",
        "modules_to_save": null,
        "monteclora_config": null,
        "peft_type": "LORA",
        "peft_version": PEFT_FORMAT_VERSION,
        "qalora_group_size": 16,
        "r": s.rank,
        "rank_pattern": {},
        "revision": null,
        "target_modules": target_names(s),
        "target_parameters": null,
        "task_type": "CAUSAL_LM",
        "trainable_token_indices": null,
        "use_bdlora": null,
        "use_dora": false,
        "use_qalora": false,
        "use_rslora": false,
        "velora_config": null,
    })
}

/// Reads the settings of `adapter_config.json` in `dir`; PEFT features not implemented here
/// are refused naming their key.
pub fn read_config(dir: &Path) -> Result<LoraSettings, AttnError> {
    let path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| io(&path, e))?;
    let bad = |key: &str, rule: &str| io(&path, format!("key '{key}' {rule}"));
    let unsupported =
        |key: &str, got: &Value| AttnError::Unsupported(format!("{}: {key} {got}", path.display()));
    if v.get("peft_type").and_then(Value::as_str) != Some("LORA") {
        return Err(bad("peft_type", "must be \"LORA\""));
    }
    let rank = v
        .get("r")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("r", "must be a whole number"))? as usize;
    let alpha = v
        .get("lora_alpha")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad("lora_alpha", "must be a number"))?;
    let dropout = v.get("lora_dropout").and_then(Value::as_f64).unwrap_or(0.0);
    let targets = match v.get("target_modules") {
        Some(Value::Array(names)) => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            LoraTarget::parse_list(&names.join(","), "target_modules").map_err(|e| io(&path, e))?
        }
        Some(Value::String(s)) if s == "all-linear" => LoraTarget::ALL.to_vec(),
        other => {
            return Err(unsupported(
                "target_modules (a list of names or all-linear)",
                other.unwrap_or(&Value::Null),
            ))
        }
    };
    // Each of these keys changes what the adapter computes; only PEFT's default is implemented.
    let defaults: [(&str, Value); 9] = [
        ("bias", json!("none")),
        ("use_rslora", json!(false)),
        ("use_dora", json!(false)),
        ("fan_in_fan_out", json!(false)),
        ("lora_bias", json!(false)),
        ("rank_pattern", json!({})),
        ("alpha_pattern", json!({})),
        ("layers_to_transform", Value::Null),
        ("modules_to_save", Value::Null),
    ];
    for (key, default) in defaults {
        match v.get(key) {
            None => {}
            Some(got) if *got == default => {}
            Some(got) => return Err(unsupported(key, got)),
        }
    }
    let settings = LoraSettings {
        rank,
        alpha,
        dropout,
        targets,
        base_model: v
            .get("base_model_name_or_path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    };
    settings.validate().map_err(|e| io(&path, e))?;
    Ok(settings)
}

/// Writes `path` through a `.partial` file renamed into place (never half-written).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AttnError> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

fn host<B: Backend>(t: Tensor<B, 2>) -> (Vec<f32>, Vec<usize>) {
    let shape = t.dims().to_vec();
    let v = t.into_data().convert::<f32>().to_vec::<f32>().expect("f32");
    (v, shape)
}

/// Writes `adapter_config.json` and `adapter_model.safetensors` of `model`'s adapters into
/// `dir` (an error when it has none).
pub fn save_adapter<B: Backend>(model: &Transformer<B>, dir: &Path) -> Result<(), AttnError> {
    let files = adapter_files(model)?;
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for (name, bytes) in &files {
        write_atomic(&dir.join(name), bytes)?;
    }
    Ok(())
}

/// The files of `model`'s adapters in PEFT's format, `adapter_model.safetensors` and
/// `adapter_config.json` (an error when it has none): what a training run's checkpoint holds.
pub fn adapter_files<B: Backend>(
    model: &Transformer<B>,
) -> Result<Vec<(&'static str, Vec<u8>)>, AttnError> {
    let list = adapters(model);
    let Some((_, _, first)) = list.first() else {
        return Err(AttnError::invalid(
            "adapter",
            "the model has no LoRA adapters",
        ));
    };
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (layer, target, a) in &list {
        for (b, t) in [(false, a.lora_a.val()), (true, a.lora_b.val())] {
            let (v, shape) = host(t);
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            tensors.push((tensor_name(*layer, *target, b), shape, bytes));
        }
    }
    let views = tensors
        .iter()
        .map(|(n, s, b)| {
            safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| AttnError::invalid("adapter", format!("{n}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let data = safetensors::serialize(views, Some(meta))
        .map_err(|e| io(Path::new("adapter_model.safetensors"), e))?;
    let config = serde_json::to_string_pretty(&config_json(&first.settings)).expect("json");
    Ok(vec![
        ("adapter_model.safetensors", data),
        ("adapter_config.json", config.into_bytes()),
    ])
}

/// `model` with the adapter of folder `dir` attached (its config and weights); every tensor
/// the config implies must be in the file with its shape, and no other.
pub fn load_adapter<B: Backend>(
    model: Transformer<B>,
    dir: &Path,
    device: &B::Device,
) -> Result<Transformer<B>, AttnError> {
    let settings = read_config(dir)?;
    let mut model = attach(model, &settings, 0, device)?;
    let path = dir.join("adapter_model.safetensors");
    let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| io(&path, e))?;
    let mut tensors: HashMap<String, (Vec<f32>, Vec<usize>)> = HashMap::new();
    for (name, view) in st.tensors() {
        let Some(data) = float_values(view.dtype(), view.data()) else {
            return Err(AttnError::Unsupported(format!(
                "{}: tensor {name} has dtype {:?} (f32, f16, bf16)",
                path.display(),
                view.dtype()
            )));
        };
        tensors.insert(name, (data, view.shape().to_vec()));
    }
    let wanted: Vec<(usize, LoraTarget, [usize; 2], [usize; 2])> = adapters(&model)
        .into_iter()
        .map(|(l, t, a)| (l, t, a.lora_a.dims(), a.lora_b.dims()))
        .collect();
    for (layer, target, a_dims, b_dims) in wanted {
        let mut take = |b: bool| {
            let name = tensor_name(layer, target, b);
            let want = if b { b_dims } else { a_dims };
            let (data, shape) = tensors
                .remove(&name)
                .ok_or_else(|| io(&path, format!("missing tensor '{name}'")))?;
            if shape != want {
                return Err(io(
                    &path,
                    format!("tensor '{name}' must be {want:?}, got {shape:?}"),
                ));
            }
            Ok(data)
        };
        let (a, b) = (take(false)?, take(true)?);
        set_adapter(&mut model, layer, target, a, b, device).map_err(|e| io(&path, e))?;
    }
    if let Some(name) = tensors.keys().min() {
        return Err(io(
            &path,
            format!("tensor '{name}' is not an adapter of the configured targets and layers"),
        ));
    }
    Ok(model)
}

/// The model and state of a LoRA training run on `device`: the base checkpoint folder `base`
/// with fresh adapters of `settings`, or, when `settings` is `None`, continuing the run in
/// `out` (its adapters and `state.json`; the adapter's settings are the saved ones). The base
/// is frozen for training ([`freeze_base`]); fresh adapters are drawn from `seed`.
pub fn init_lora<B: Backend>(
    base: &Path,
    settings: Option<&LoraSettings>,
    seed: u64,
    out: &Path,
    device: &B::Device,
) -> Result<(Transformer<B>, TrainState), AttnError> {
    let model = load_hf::<B>(base, device)?;
    let (model, state) = match settings {
        Some(s) => (attach(model, s, seed, device)?, TrainState::default()),
        None => {
            // The run's published checkpoint, verified whole (sizes and checksums).
            let saved = Published::open(out)?;
            let state = saved.train_state("adapter")?;
            let model = load_adapter(model, &saved.dir, device)?;
            saved.tidy(out)?;
            (model, state)
        }
    };
    Ok((freeze_base(model), state))
}

/// The base checkpoint folder of the LoRA run in `out` (`base_model_name_or_path` of its
/// published checkpoint's adapter).
pub fn base_of_run(out: &Path) -> Result<std::path::PathBuf, AttnError> {
    base_of(&Published::open(out)?.dir)
}

/// The base checkpoint folder of the adapter in `dir` (`base_model_name_or_path`).
pub fn base_of(dir: &Path) -> Result<std::path::PathBuf, AttnError> {
    let s = read_config(dir)?;
    if s.base_model.is_empty() {
        return Err(io(
            &dir.join("adapter_config.json"),
            "key 'base_model_name_or_path' is empty; pass --checkpoint HF_DIR",
        ));
    }
    Ok(s.base_model.into())
}
