//! Weights in Hugging Face's layout: `config.json` plus `model.safetensors` with Llama's
//! tensor names (`model.layers.{i}.self_attn.q_proj.weight`, …, gpt-oss's
//! `model.layers.{i}.self_attn.sinks`), linear weights stored `[out, in]` as PyTorch does
//! (Burn's `Linear` keeps `[in, out]`, so they are transposed on the way in and out).
//! Loads f32, f16 and bf16 files, sharded or not (every `*.safetensors` in the folder).

use std::collections::HashMap;
use std::path::Path;

use burn::module::Param;
use burn::nn::{Linear, RmsNorm};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

use super::config::ModelConfig;
use super::transformer::Transformer;
use burn_ascend::AttnError;

fn io_err(path: &Path, e: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {e}", path.display()))
}

/// Host copy of a tensor: values and shape.
type HostF32 = (Vec<f32>, Vec<usize>);

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> HostF32 {
    let shape = t.dims().to_vec();
    let data = t
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("f32 after convert");
    (data, shape)
}

fn transpose((data, shape): HostF32) -> HostF32 {
    let (r, c) = (shape[0], shape[1]);
    let mut out = vec![0.0; data.len()];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = data[i * c + j];
        }
    }
    (out, vec![c, r])
}

/// All weights under their Hugging Face names.
pub fn named_weights<B: Backend>(model: &Transformer<B>) -> Vec<(String, HostF32)> {
    let mut out = Vec::new();
    let mut linear = |name: String, l: &Linear<B>| {
        out.push((format!("{name}.weight"), transpose(host(l.weight.val()))));
        if let Some(b) = &l.bias {
            out.push((format!("{name}.bias"), host(b.val())));
        }
    };
    for (i, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let a = &layer.self_attn;
        linear(format!("{p}.self_attn.q_proj"), &a.q_proj);
        linear(format!("{p}.self_attn.k_proj"), &a.k_proj);
        linear(format!("{p}.self_attn.v_proj"), &a.v_proj);
        linear(format!("{p}.self_attn.o_proj"), &a.o_proj);
        linear(format!("{p}.mlp.gate_proj"), &layer.mlp.gate_proj);
        linear(format!("{p}.mlp.up_proj"), &layer.mlp.up_proj);
        linear(format!("{p}.mlp.down_proj"), &layer.mlp.down_proj);
    }
    if let Some(head) = &model.lm_head {
        linear("lm_head".into(), head);
    }
    out.push((
        "model.embed_tokens.weight".into(),
        host(model.embed_tokens.weight.val()),
    ));
    out.push(("model.norm.weight".into(), host(model.norm.gamma.val())));
    for (i, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        out.push((
            format!("{p}.input_layernorm.weight"),
            host(layer.input_layernorm.gamma.val()),
        ));
        out.push((
            format!("{p}.post_attention_layernorm.weight"),
            host(layer.post_attention_layernorm.gamma.val()),
        ));
        if let Some(s) = &layer.self_attn.sinks {
            out.push((format!("{p}.self_attn.sinks"), host(s.val())));
        }
    }
    out
}

/// Writes `config.json` and `model.safetensors` (f32) into `dir`.
pub fn save_hf<B: Backend>(model: &Transformer<B>, dir: &Path) -> Result<(), AttnError> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let config = serde_json::to_string_pretty(&model.config.to_json()).expect("json");
    let cfg_path = dir.join("config.json");
    std::fs::write(&cfg_path, config).map_err(|e| io_err(&cfg_path, e))?;
    let weights = named_weights(model);
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = weights
        .into_iter()
        .map(|(n, (d, s))| (n, s, d.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views = bytes
        .iter()
        .map(|(n, s, b)| {
            safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| AttnError::invalid("checkpoint", format!("{n}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let path = dir.join("model.safetensors");
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let data = safetensors::serialize(views, Some(meta)).map_err(|e| io_err(&path, e))?;
    std::fs::write(&path, data).map_err(|e| io_err(&path, e))
}

/// Reads `config.json`.
pub fn load_config(dir: &Path) -> Result<ModelConfig, AttnError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
    // Parsed straight from the text, so that a value of the wrong type is named by the file,
    // line and column; what the config's rules refuse names the key.
    let file: crate::config::HfConfigJson =
        serde_json::from_str(&text).map_err(|e| io_err(&path, e))?;
    ModelConfig::from_file(file)
}

/// Every tensor of every `*.safetensors` file in `dir`, as f32.
fn read_tensors(dir: &Path) -> Result<HashMap<String, HostF32>, AttnError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io_err(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(io_err(dir, "no *.safetensors file"));
    }
    let mut out = HashMap::new();
    for path in files {
        let bytes = std::fs::read(&path).map_err(|e| io_err(&path, e))?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| io_err(&path, e))?;
        for (name, view) in st.tensors() {
            let raw = view.data();
            let data: Vec<f32> = match view.dtype() {
                Dtype::F32 => raw
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                Dtype::F16 => raw
                    .chunks_exact(2)
                    .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                Dtype::BF16 => raw
                    .chunks_exact(2)
                    .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                other => {
                    return Err(AttnError::Unsupported(format!(
                        "unsupported: tensor {name} has dtype {other:?} (f32, f16, bf16)"
                    )))
                }
            };
            out.insert(name, (data, view.shape().to_vec()));
        }
    }
    Ok(out)
}

struct Weights(HashMap<String, HostF32>);

impl Weights {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, AttnError> {
        let (data, got) = self
            .0
            .remove(name)
            .ok_or_else(|| AttnError::invalid("checkpoint", format!("missing tensor '{name}'")))?;
        if got != shape {
            return Err(AttnError::invalid(
                "checkpoint",
                format!("tensor '{name}' must be {shape:?}, got {got:?}"),
            ));
        }
        Ok(data)
    }

    fn param<B: Backend, const D: usize>(
        &mut self,
        name: &str,
        shape: [usize; D],
        device: &B::Device,
    ) -> Result<Param<Tensor<B, D>>, AttnError> {
        let data = self.take(name, &shape)?;
        Ok(Param::from_tensor(Tensor::from_data(
            TensorData::new(data, shape),
            device,
        )))
    }

    fn linear<B: Backend>(
        &mut self,
        name: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
        device: &B::Device,
    ) -> Result<Linear<B>, AttnError> {
        let w = self.take(&format!("{name}.weight"), &[d_out, d_in])?;
        let (w, _) = transpose((w, vec![d_out, d_in]));
        let bias = if bias {
            Some(self.param(&format!("{name}.bias"), [d_out], device)?)
        } else {
            None
        };
        Ok(Linear {
            weight: Param::from_tensor(Tensor::from_data(
                TensorData::new(w, [d_in, d_out]),
                device,
            )),
            bias,
        })
    }

    fn norm<B: Backend>(
        &mut self,
        name: &str,
        template: RmsNorm<B>,
        d: usize,
        device: &B::Device,
    ) -> Result<RmsNorm<B>, AttnError> {
        Ok(RmsNorm {
            gamma: self.param(name, [d], device)?,
            ..template
        })
    }
}

/// Loads `config.json` and the safetensors weights of a checkpoint folder (ours, or a Hugging
/// Face Llama / Qwen2 one).
pub fn load_hf<B: Backend>(dir: &Path, device: &B::Device) -> Result<Transformer<B>, AttnError> {
    let config = load_config(dir)?;
    let mut w = Weights(read_tensors(dir)?);
    let template = Transformer::<B>::new(&config, device)?;
    let c = &config;
    let (h, n, nkv, d, inter) = (
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.intermediate_size,
    );
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for (i, t) in template.layers.into_iter().enumerate() {
        let p = format!("model.layers.{i}");
        let bias = c.attention_bias;
        let mut layer = t;
        layer.input_layernorm = w.norm(
            &format!("{p}.input_layernorm.weight"),
            layer.input_layernorm,
            h,
            device,
        )?;
        layer.post_attention_layernorm = w.norm(
            &format!("{p}.post_attention_layernorm.weight"),
            layer.post_attention_layernorm,
            h,
            device,
        )?;
        let a = &mut layer.self_attn;
        a.q_proj = w.linear(&format!("{p}.self_attn.q_proj"), h, n * d, bias, device)?;
        a.k_proj = w.linear(&format!("{p}.self_attn.k_proj"), h, nkv * d, bias, device)?;
        a.v_proj = w.linear(&format!("{p}.self_attn.v_proj"), h, nkv * d, bias, device)?;
        a.o_proj = w.linear(&format!("{p}.self_attn.o_proj"), n * d, h, false, device)?;
        if c.attention_sinks {
            a.sinks = Some(w.param(&format!("{p}.self_attn.sinks"), [n], device)?);
        }
        let m = &mut layer.mlp;
        m.gate_proj = w.linear(&format!("{p}.mlp.gate_proj"), h, inter, false, device)?;
        m.up_proj = w.linear(&format!("{p}.mlp.up_proj"), h, inter, false, device)?;
        m.down_proj = w.linear(&format!("{p}.mlp.down_proj"), inter, h, false, device)?;
        layers.push(layer);
    }
    let mut embed = template.embed_tokens;
    embed.weight = w.param("model.embed_tokens.weight", [c.vocab_size, h], device)?;
    let norm = w.norm("model.norm.weight", template.norm, h, device)?;
    let lm_head = if c.tie_word_embeddings {
        None
    } else {
        Some(w.linear("lm_head", h, c.vocab_size, false, device)?)
    };
    Ok(Transformer {
        embed_tokens: embed,
        layers,
        norm,
        lm_head,
        config,
        compute_dtype: None,
    })
}
