//! Weights in Hugging Face's layout: `config.json` plus `model.safetensors` with Llama's tensor
//! names (`model.layers.{i}.self_attn.q_proj.weight`, …, gpt-oss's
//! `model.layers.{i}.self_attn.sinks`), linear weights stored `[out, in]` as PyTorch does (Burn's
//! `Linear` keeps `[in, out]`, so they are transposed on the way in and out). gpt-oss's experts:
//! `mlp.router.{weight,bias}` and `mlp.experts.{gate_up_proj,down_proj}[_bias]`, f32/bf16 or MXFP4
//! (`*_blocks` / `*_scales`, dequantized on load when the config's `quantization_config` says
//! mxfp4). Qwen3-MoE's: `mlp.gate.weight` and per expert
//! `mlp.experts.{e}.{gate_proj,up_proj,down_proj}.weight` (what transformers 5's
//! `save_pretrained` writes; its in-memory fused `mlp.experts.{gate_up_proj,down_proj}` load
//! too). Loads f32, f16 and bf16 files, sharded or not (`model.safetensors` or
//! `model-*-of-*.safetensors`).

use std::collections::HashMap;
use std::path::Path;

use burn::module::Param;
use burn::nn::{Linear, RmsNorm};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use half::{bf16, f16};
use safetensors::Dtype;

use crate::load::config::{load_config, ModelConfig, MoeKind};
use crate::load::weight_file::{for_each_tensor, Header};
use crate::model::mxfp4;
use crate::model::transformer::{Ffn, Transformer};
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

/// A parameter of the model as the walker hands it out: rank 1 or rank 2, and whether it is
/// a linear weight (stored transposed, `[out, in]`, in Hugging Face's files).
enum ParamRef<'a, B: Backend> {
    /// A vector (bias, norm weight, sinks).
    Vector(&'a Param<Tensor<B, 1>>),
    /// A matrix kept as Burn keeps it (embedding `[V, hidden]`).
    Matrix(&'a Param<Tensor<B, 2>>),
    /// A `Linear` weight `[in, out]`, transposed in the file.
    LinearWeight(&'a Param<Tensor<B, 2>>),
    /// A rank-3 tensor kept as the file has it (gpt-oss's fused expert weights).
    Tensor3(&'a Param<Tensor<B, 3>>),
    /// One expert's linear weight inside a stacked `[E, in, ·]` tensor: expert `.1`, columns
    /// `.2 .. .2 + .3` (`[in, out]`), transposed in the file (Qwen3-MoE's per-expert
    /// `gate_proj` / `up_proj` / `down_proj`).
    ExpertLinear(&'a Param<Tensor<B, 3>>, usize, usize, usize),
}

/// Expert `e`'s columns `c0 .. c0 + n` of a stacked `[E, in, out]` tensor: `[in, n]`.
fn expert_columns<B: Backend>(t: Tensor<B, 3>, e: usize, c0: usize, n: usize) -> Tensor<B, 2> {
    let d_in = t.dims()[1];
    t.narrow(0, e, 1).narrow(2, c0, n).reshape([d_in, n])
}

/// Calls `f` on every parameter with its Hugging Face name.
fn walk<B: Backend>(model: &Transformer<B>, mut f: impl FnMut(String, ParamRef<'_, B>)) {
    let linear = |f: &mut dyn FnMut(String, ParamRef<'_, B>), name: String, l: &Linear<B>| {
        f(format!("{name}.weight"), ParamRef::LinearWeight(&l.weight));
        if let Some(b) = &l.bias {
            f(format!("{name}.bias"), ParamRef::Vector(b));
        }
    };
    for (i, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let a = &layer.self_attn;
        linear(&mut f, format!("{p}.self_attn.q_proj"), &a.q_proj);
        linear(&mut f, format!("{p}.self_attn.k_proj"), &a.k_proj);
        linear(&mut f, format!("{p}.self_attn.v_proj"), &a.v_proj);
        linear(&mut f, format!("{p}.self_attn.o_proj"), &a.o_proj);
        match &layer.mlp {
            Ffn::Dense(m) => {
                linear(&mut f, format!("{p}.mlp.gate_proj"), &m.gate_proj);
                linear(&mut f, format!("{p}.mlp.up_proj"), &m.up_proj);
                linear(&mut f, format!("{p}.mlp.down_proj"), &m.down_proj);
            }
            // GptOssMLP's names: `mlp.router.{weight,bias}` (nn.Linear layout) and
            // `mlp.experts.{gate_up_proj,down_proj}[_bias]` (kept as the file has them).
            Ffn::Experts(m) if m.kind == MoeKind::GptOss => {
                linear(&mut f, format!("{p}.mlp.router"), &m.router);
                let e = format!("{p}.mlp.experts");
                f(
                    format!("{e}.gate_up_proj"),
                    ParamRef::Tensor3(&m.gate_up_proj),
                );
                if let Some(b) = &m.gate_up_proj_bias {
                    f(format!("{e}.gate_up_proj_bias"), ParamRef::Matrix(b));
                }
                f(format!("{e}.down_proj"), ParamRef::Tensor3(&m.down_proj));
                if let Some(b) = &m.down_proj_bias {
                    f(format!("{e}.down_proj_bias"), ParamRef::Matrix(b));
                }
            }
            // Qwen3MoeSparseMoeBlock's names as saved: `mlp.gate.weight` and one nn.Linear
            // weight per expert and projection.
            Ffn::Experts(m) => {
                linear(&mut f, format!("{p}.mlp.gate"), &m.router);
                let (h, inter) = (m.down_proj.dims()[2], m.down_proj.dims()[1]);
                for e in 0..m.num_experts() {
                    let x = format!("{p}.mlp.experts.{e}");
                    let gu = &m.gate_up_proj;
                    f(
                        format!("{x}.gate_proj.weight"),
                        ParamRef::ExpertLinear(gu, e, 0, inter),
                    );
                    f(
                        format!("{x}.up_proj.weight"),
                        ParamRef::ExpertLinear(gu, e, inter, inter),
                    );
                    f(
                        format!("{x}.down_proj.weight"),
                        ParamRef::ExpertLinear(&m.down_proj, e, 0, h),
                    );
                }
            }
        }
    }
    if let Some(head) = &model.lm_head {
        linear(&mut f, "lm_head".into(), head);
    }
    f(
        "model.embed_tokens.weight".into(),
        ParamRef::Matrix(&model.embed_tokens.weight),
    );
    f(
        "model.norm.weight".into(),
        ParamRef::Vector(&model.norm.gamma),
    );
    for (i, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        f(
            format!("{p}.input_layernorm.weight"),
            ParamRef::Vector(&layer.input_layernorm.gamma),
        );
        f(
            format!("{p}.post_attention_layernorm.weight"),
            ParamRef::Vector(&layer.post_attention_layernorm.gamma),
        );
        let a = &layer.self_attn;
        if let Some(s) = &a.sinks {
            f(format!("{p}.self_attn.sinks"), ParamRef::Vector(s));
        }
        if let Some(n) = &a.q_norm {
            f(
                format!("{p}.self_attn.q_norm.weight"),
                ParamRef::Vector(&n.gamma),
            );
        }
        if let Some(n) = &a.k_norm {
            f(
                format!("{p}.self_attn.k_norm.weight"),
                ParamRef::Vector(&n.gamma),
            );
        }
    }
}

/// All weights under their Hugging Face names.
pub fn named_weights<B: Backend>(model: &Transformer<B>) -> Vec<(String, HostF32)> {
    let mut out = Vec::new();
    walk(model, |name, p| {
        let t = match p {
            ParamRef::Vector(v) => host(v.val()),
            ParamRef::Matrix(m) => host(m.val()),
            ParamRef::LinearWeight(w) => transpose(host(w.val())),
            ParamRef::Tensor3(t) => host(t.val()),
            ParamRef::ExpertLinear(t, e, c0, n) => {
                transpose(host(expert_columns(t.val(), e, c0, n)))
            }
        };
        out.push((name, t));
    });
    out
}

/// The gradients in `grads` of every parameter of `model`, under the parameters' Hugging Face
/// names and in their file layout (linear weights `[out, in]`), so they compare directly with
/// PyTorch's `param.grad`. Parameters without a gradient are left out.
pub fn named_grads<B: AutodiffBackend>(
    model: &Transformer<B>,
    grads: &GradientsParams,
) -> Vec<(String, HostF32)> {
    let mut out = Vec::new();
    walk(model, |name, p| {
        let g = match p {
            ParamRef::Vector(v) => grads.get::<B::InnerBackend, 1>(v.id).map(host),
            ParamRef::Matrix(m) => grads.get::<B::InnerBackend, 2>(m.id).map(host),
            ParamRef::LinearWeight(w) => grads
                .get::<B::InnerBackend, 2>(w.id)
                .map(|g| transpose(host(g))),
            ParamRef::Tensor3(t) => grads.get::<B::InnerBackend, 3>(t.id).map(host),
            ParamRef::ExpertLinear(t, e, c0, n) => grads
                .get::<B::InnerBackend, 3>(t.id)
                .map(|g| transpose(host(expert_columns(g, e, c0, n)))),
        };
        if let Some(g) = g {
            out.push((name, g));
        }
    });
    out
}

/// Writes `config.json` and `model.safetensors` (f32) into `dir`.
pub fn save_hf<B: Backend>(model: &Transformer<B>, dir: &Path) -> Result<(), AttnError> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    for (name, bytes) in hf_files(model)? {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| io_err(&path, e))?;
    }
    Ok(())
}

/// The bytes of `config.json` and `model.safetensors` (f32, Hugging Face names) of `model`.
pub fn hf_files<B: Backend>(
    model: &Transformer<B>,
) -> Result<Vec<(&'static str, Vec<u8>)>, AttnError> {
    let config = serde_json::to_vec_pretty(&model.config.to_json()).expect("json");
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
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let data = safetensors::serialize(views, Some(meta))
        .map_err(|e| io_err(Path::new("model.safetensors"), e))?;
    Ok(vec![("config.json", config), ("model.safetensors", data)])
}

/// How [`load_hf_with`] treats what it reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Load weights holding NaN or ±inf instead of refusing them (`--allow-non-finite-weights`).
    pub allow_non_finite_weights: bool,
    /// Refuse a weight file holding tensors the architecture does not use, naming the first
    /// (`--strict`), instead of ignoring them with a warning as transformers does: a mismatch
    /// of config and weights may mean another model.
    pub strict: bool,
}

/// The weight files of a checkpoint folder, sorted: `model.safetensors`, else those a sharded
/// folder's `model.safetensors.index.json` names in its `weight_map` (as transformers loads them; a
/// named file that is missing is refused naming it), else the shards
/// `model-*-of-*.safetensors`.
fn weight_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, AttnError> {
    // transformers looks for `model.safetensors` first, then the index.
    let index = dir.join("model.safetensors.index.json");
    if !dir.join("model.safetensors").exists() && index.exists() {
        #[derive(serde::Deserialize)]
        struct Index {
            weight_map: HashMap<String, String>,
        }
        let text = std::fs::read_to_string(&index).map_err(|e| io_err(&index, e))?;
        let parsed: Index = serde_json::from_str(&text).map_err(|e| io_err(&index, e))?;
        let names: std::collections::BTreeSet<String> = parsed.weight_map.into_values().collect();
        // A shard is a file of the folder: a name with a path in it would read elsewhere.
        if let Some(bad) = names
            .iter()
            .find(|f| Path::new(f).file_name() != Some(f.as_ref()))
        {
            return Err(io_err(
                &index,
                format!("names {bad:?}, not a file name of the checkpoint folder"),
            ));
        }
        let files: Vec<_> = names.into_iter().map(|f| dir.join(f)).collect();
        if let Some(missing) = files.iter().find(|f| !f.is_file()) {
            return Err(io_err(
                missing,
                "named by model.safetensors.index.json but missing",
            ));
        }
        if files.is_empty() {
            return Err(io_err(&index, "names no weight file"));
        }
        return Ok(files);
    }
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io_err(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        // transformers' file names: `model.safetensors`, or shards
        // `model-00001-of-00002.safetensors`; other safetensors files in the folder (a
        // training state, test expectations) are not weights.
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n == "model.safetensors"
                    || (n.starts_with("model-")
                        && n.ends_with(".safetensors")
                        && n.contains("-of-"))
            })
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(io_err(
            dir,
            "no model.safetensors (or model-*-of-*.safetensors shards)",
        ));
    }
    Ok(files)
}

/// The shape of every tensor of the weight files in `dir`, from their headers alone (the
/// first 8 + n bytes of each file, checked as the loader reads them): what the config is
/// checked against before anything of the model's size is allocated.
fn tensor_shapes(dir: &Path) -> Result<HashMap<String, Vec<usize>>, AttnError> {
    let mut out = HashMap::new();
    for path in weight_files(dir)? {
        let header = Header::read(&path)?;
        out.extend(header.shapes().map(|(n, s)| (n.to_string(), s.to_vec())));
    }
    Ok(out)
}

/// Checks the sizes `config` gives against the shapes of the tensors in the files, naming the
/// key and the tensor that disagree, so that an absurd size is refused before the model of that
/// size is allocated.
fn check_config_against(
    config: &ModelConfig,
    shapes: &HashMap<String, Vec<usize>>,
) -> Result<(), AttnError> {
    let c = config;
    let (h, n, nkv, d) = (
        c.hidden_size as u128,
        c.num_attention_heads as u128,
        c.num_key_value_heads as u128,
        c.head_dim as u128,
    );
    // (tensor, [(key naming this dimension, its expected size)]).
    let mut checks: Vec<(String, Vec<(&str, u128)>)> = vec![(
        "model.embed_tokens.weight".into(),
        vec![("vocab_size", c.vocab_size as u128), ("hidden_size", h)],
    )];
    let last = c.num_hidden_layers.saturating_sub(1);
    checks.push((
        format!("model.layers.{last}.input_layernorm.weight"),
        vec![("hidden_size", h)],
    ));
    let p = "model.layers.0";
    checks.push((
        format!("{p}.self_attn.q_proj.weight"),
        vec![
            ("num_attention_heads × head_dim", n * d),
            ("hidden_size", h),
        ],
    ));
    checks.push((
        format!("{p}.self_attn.k_proj.weight"),
        vec![
            ("num_key_value_heads × head_dim", nkv * d),
            ("hidden_size", h),
        ],
    ));
    let dense = (0..c.num_hidden_layers).find(|&i| !c.is_sparse_layer(i));
    if let Some(i) = dense {
        checks.push((
            format!("model.layers.{i}.mlp.gate_proj.weight"),
            vec![
                ("intermediate_size", c.intermediate_size as u128),
                ("hidden_size", h),
            ],
        ));
    }
    let sparse = (0..c.num_hidden_layers).find(|&i| c.is_sparse_layer(i));
    if let (Some(m), Some(i)) = (&c.moe, sparse) {
        let router = match m.kind {
            MoeKind::GptOss => "router",
            MoeKind::Qwen3 { .. } => "gate",
        };
        checks.push((
            format!("model.layers.{i}.mlp.{router}.weight"),
            vec![
                ("num_local_experts", m.num_local_experts as u128),
                ("hidden_size", h),
            ],
        ));
    }
    for (name, dims) in checks {
        let Some(shape) = shapes.get(&name) else {
            let key = if name.contains(&format!(".{last}.")) && last > 0 {
                "num_hidden_layers"
            } else {
                "config"
            };
            return Err(AttnError::invalid(
                "config",
                format!(
                    "the checkpoint has no tensor '{name}', which config.json implies{}",
                    if key == "num_hidden_layers" {
                        format!(" (num_hidden_layers {})", c.num_hidden_layers)
                    } else {
                        String::new()
                    }
                ),
            ));
        };
        let expected: Vec<u128> = dims.iter().map(|&(_, e)| e).collect();
        let got: Vec<u128> = shape.iter().map(|&x| x as u128).collect();
        if got.len() != expected.len() {
            return Err(AttnError::invalid(
                "config",
                format!("tensor '{name}' has shape {shape:?}, config.json implies {expected:?}"),
            ));
        }
        for ((key, e), g) in dims.iter().zip(&got) {
            if e != g {
                return Err(AttnError::invalid(
                    "config",
                    format!(
                        "key '{key}' is {e} but tensor '{name}' has shape {shape:?} \
                         (config.json implies {expected:?})"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The first NaN or ±inf of a tensor, refused with its name and index.
fn check_finite(name: &str, data: &[f32], shape: &[usize]) -> Result<(), AttnError> {
    let Some(flat) = data.iter().position(|x| !x.is_finite()) else {
        return Ok(());
    };
    let mut index = vec![0; shape.len()];
    let mut rest = flat;
    for (i, &dim) in shape.iter().enumerate().rev() {
        index[i] = rest % dim.max(1);
        rest /= dim.max(1);
    }
    Err(AttnError::invalid(
        "checkpoint",
        format!(
            "tensor '{name}' holds {} at index {index:?} (pass --allow-non-finite-weights to \
             load it anyway)",
            data[flat]
        ),
    ))
}

/// Every tensor of the weight files in `dir`, as f32; with `mxfp4`, each u8 pair
/// `<name>_blocks` / `<name>_scales` is dequantized into `<name>` (see [`mxfp4::dequantize`]).
/// A NaN or ±inf is refused unless `opts` allows it.
/// A safetensors tensor's little-endian values of a float `dtype` as f32 (`None` for other
/// dtypes): the one decoding of weights and adapters.
pub(crate) fn float_values(dtype: Dtype, raw: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
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
        _ => return None,
    })
}

fn read_tensors(
    dir: &Path,
    mxfp4: bool,
    opts: LoadOptions,
) -> Result<HashMap<String, HostF32>, AttnError> {
    let mut out = HashMap::new();
    let mut bytes_of: HashMap<String, (Vec<u8>, Vec<usize>)> = HashMap::new();
    for path in weight_files(dir)? {
        // One tensor at a time: the file's bytes are never held beside the converted values.
        for_each_tensor(&path, |name, dtype, shape, raw| {
            let data: Vec<f32> = match dtype {
                d @ (Dtype::F32 | Dtype::F16 | Dtype::BF16) => {
                    float_values(d, raw).expect("a float dtype")
                }
                Dtype::U8 if mxfp4 => {
                    bytes_of.insert(name, (raw.to_vec(), shape));
                    return Ok(());
                }
                other => {
                    return Err(AttnError::Unsupported(format!(
                        "tensor {name} has dtype {other:?} (f32, f16, bf16)"
                    )))
                }
            };
            if !opts.allow_non_finite_weights {
                check_finite(&name, &data, &shape)?;
            }
            out.insert(name, (data, shape));
            Ok(())
        })?;
    }
    let mut names: Vec<String> = bytes_of.keys().cloned().collect();
    names.sort();
    for name in names {
        let Some(base) = name.strip_suffix("_blocks") else {
            continue;
        };
        let scales_name = format!("{base}_scales");
        let (Some((blocks, bshape)), Some((scales, sshape))) =
            (bytes_of.remove(&name), bytes_of.remove(&scales_name))
        else {
            return Err(AttnError::invalid(
                "checkpoint",
                format!("tensor '{name}' has no '{scales_name}' beside it"),
            ));
        };
        let (data, shape) = mxfp4::dequantize(base, &blocks, &bshape, &scales, &sshape)?;
        if !opts.allow_non_finite_weights {
            check_finite(base, &data, &shape)?;
        }
        out.insert(base.to_string(), (data, shape));
    }
    if let Some(name) = bytes_of.keys().min() {
        return Err(AttnError::Unsupported(format!(
            "tensor {name} has dtype U8 outside an MXFP4 _blocks / _scales pair"
        )));
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
    load_hf_with(dir, device, LoadOptions::default())
}

/// [`load_hf`] with options.
pub fn load_hf_with<B: Backend>(
    dir: &Path,
    device: &B::Device,
    opts: LoadOptions,
) -> Result<Transformer<B>, AttnError> {
    load_weights_with(dir, load_config(dir)?, device, opts)
}

/// Loads the safetensors weights of a checkpoint folder into the model `config` describes
/// (parsed by the caller, e.g. from another `config.json` form of the same checkpoint).
pub fn load_weights<B: Backend>(
    dir: &Path,
    config: ModelConfig,
    device: &B::Device,
) -> Result<Transformer<B>, AttnError> {
    load_weights_with(dir, config, device, LoadOptions::default())
}

/// [`load_weights`] with options. The config's sizes are checked against the tensors' shapes
/// (read from the files' headers) before anything is read or allocated. Tensors the
/// architecture does not use are ignored, as transformers ignores a checkpoint's unexpected
/// keys, with one warning line on stderr ([`unused_tensors_warning`]); missing tensors and
/// tensors of another shape are refused naming the tensor. [`LoadOptions::strict`] refuses the
/// unused ones too.
pub fn load_weights_with<B: Backend>(
    dir: &Path,
    config: ModelConfig,
    device: &B::Device,
    opts: LoadOptions,
) -> Result<Transformer<B>, AttnError> {
    load_weights_checked(dir, config, device, opts)
}

/// The one warning line for tensors a load ignored: how many and the first few (sorted), or
/// `None` when there are none.
pub fn unused_tensors_warning(names: &[String]) -> Option<String> {
    const SHOWN: usize = 5;
    let n = names.len();
    if n == 0 {
        return None;
    }
    let shown: Vec<&str> = names.iter().take(SHOWN).map(String::as_str).collect();
    let more = if n > SHOWN { ", …" } else { "" };
    Some(format!(
        "warning: checkpoint: ignored {n} tensor(s) not used by the architecture config.json describes: {}{more}",
        shown.join(", ")
    ))
}

fn load_weights_checked<B: Backend>(
    dir: &Path,
    config: ModelConfig,
    device: &B::Device,
    opts: LoadOptions,
) -> Result<Transformer<B>, AttnError> {
    let strict = opts.strict;
    config.validate()?;
    check_config_against(&config, &tensor_shapes(dir)?)?;
    let mxfp4 = config.moe.as_ref().is_some_and(|m| m.mxfp4);
    let mut w = Weights(read_tensors(dir, mxfp4, opts)?);
    let template = Transformer::<B>::new(&config, device)?;
    let c = &config;
    let (h, n, nkv, d, inter) = (
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.intermediate_size,
    );
    let expert_inter = c.moe.as_ref().map_or(inter, |m| m.moe_intermediate_size);
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
        let o_bias = c.attention_output_bias;
        a.o_proj = w.linear(&format!("{p}.self_attn.o_proj"), n * d, h, o_bias, device)?;
        if c.attention_sinks {
            a.sinks = Some(w.param(&format!("{p}.self_attn.sinks"), [n], device)?);
        }
        if let Some(norm) = a.q_norm.take() {
            a.q_norm = Some(w.norm(&format!("{p}.self_attn.q_norm.weight"), norm, d, device)?);
        }
        if let Some(norm) = a.k_norm.take() {
            a.k_norm = Some(w.norm(&format!("{p}.self_attn.k_norm.weight"), norm, d, device)?);
        }
        match &mut layer.mlp {
            Ffn::Dense(m) => {
                let mb = c.mlp_bias;
                m.gate_proj = w.linear(&format!("{p}.mlp.gate_proj"), h, inter, mb, device)?;
                m.up_proj = w.linear(&format!("{p}.mlp.up_proj"), h, inter, mb, device)?;
                m.down_proj = w.linear(&format!("{p}.mlp.down_proj"), inter, h, mb, device)?;
            }
            Ffn::Experts(m) if m.kind != MoeKind::GptOss => {
                load_qwen3_experts(&mut w, &p, m, h, expert_inter, device)?;
            }
            Ffn::Experts(m) => {
                let ne = m.num_experts();
                let e = format!("{p}.mlp.experts");
                m.router = w.linear(&format!("{p}.mlp.router"), h, ne, true, device)?;
                let inter = expert_inter;
                m.gate_up_proj =
                    w.param(&format!("{e}.gate_up_proj"), [ne, h, 2 * inter], device)?;
                m.gate_up_proj_bias =
                    Some(w.param(&format!("{e}.gate_up_proj_bias"), [ne, 2 * inter], device)?);
                m.down_proj = w.param(&format!("{e}.down_proj"), [ne, inter, h], device)?;
                m.down_proj_bias =
                    Some(w.param(&format!("{e}.down_proj_bias"), [ne, h], device)?);
            }
        }
        layers.push(layer);
    }
    let mut embed = template.embed_tokens;
    embed.weight = w.param("model.embed_tokens.weight", [c.vocab_size, h], device)?;
    let norm = w.norm("model.norm.weight", template.norm, h, device)?;
    let lm_head = if c.tie_word_embeddings {
        // transformers ties `lm_head.weight` to the embedding; a file may still hold a copy.
        w.0.remove("lm_head.weight");
        None
    } else {
        Some(w.linear("lm_head", h, c.vocab_size, false, device)?)
    };
    // A tensor the architecture has no place for: transformers ignores such unexpected keys
    // (with a warning) and so do we; strict, it may mean the config describes another model
    // (a bias, a norm, experts…) and is refused rather than computed without. RoPE's cached
    // `inv_freq` buffers (older Llama files) are recomputed from the config, silently.
    let mut left: Vec<String> =
        w.0.keys()
            .filter(|k| !k.ends_with("rotary_emb.inv_freq"))
            .cloned()
            .collect();
    left.sort();
    if strict {
        if let Some(name) = left.first() {
            return Err(AttnError::Unsupported(format!(
                "tensor {name} (not part of the architecture config.json describes; {} such tensors)",
                left.len()
            )));
        }
    } else if let Some(line) = unused_tensors_warning(&left) {
        eprintln!("{line}");
    }
    Ok(Transformer {
        embed_tokens: embed,
        layers,
        norm,
        lm_head,
        config,
        compute_dtype: None,
        checkpoint_blocks: false,
    })
}

/// Qwen3-MoE's router and experts of layer prefix `p` into `m`: the router `mlp.gate.weight`
/// `[E, H]`; the experts from transformers' fused `mlp.experts.gate_up_proj` `[E, 2I, H]` and
/// `down_proj` `[E, H, I]` when the file has them, else per expert `gate_proj` / `up_proj`
/// `[I, H]` and `down_proj` `[H, I]` (what `save_pretrained` writes). Kept as `[E, H, 2I]`
/// (gate columns first) and `[E, I, H]`, used as `x @ W`.
fn load_qwen3_experts<B: Backend>(
    w: &mut Weights,
    p: &str,
    m: &mut crate::model::moe::Moe<B>,
    h: usize,
    inter: usize,
    device: &B::Device,
) -> Result<(), AttnError> {
    let ne = m.num_experts();
    m.router = w.linear(&format!("{p}.mlp.gate"), h, ne, false, device)?;
    let x = format!("{p}.mlp.experts");
    // `[E, r, c]` → `[E, c, r]`.
    let swap = |data: Vec<f32>, r: usize, c: usize| -> Vec<f32> {
        data.chunks_exact(r * c)
            .flat_map(|one| transpose((one.to_vec(), vec![r, c])).0)
            .collect::<Vec<f32>>()
    };
    let (gate_up, down) = if w.0.contains_key(&format!("{x}.gate_up_proj")) {
        let gu = w.take(&format!("{x}.gate_up_proj"), &[ne, 2 * inter, h])?;
        let d = w.take(&format!("{x}.down_proj"), &[ne, h, inter])?;
        (swap(gu, 2 * inter, h), swap(d, h, inter))
    } else {
        let mut gu = Vec::with_capacity(ne * h * 2 * inter);
        let mut d = Vec::with_capacity(ne * inter * h);
        for e in 0..ne {
            let gate = w.take(&format!("{x}.{e}.gate_proj.weight"), &[inter, h])?;
            let up = w.take(&format!("{x}.{e}.up_proj.weight"), &[inter, h])?;
            // The rows of `[gate; up]` `[2I, H]`, transposed: `[H, 2I]`, gate columns first.
            gu.extend(swap([gate, up].concat(), 2 * inter, h));
            let down = w.take(&format!("{x}.{e}.down_proj.weight"), &[h, inter])?;
            d.extend(swap(down, h, inter));
        }
        (gu, d)
    };
    let param = |data: Vec<f32>, shape: [usize; 3]| {
        Param::from_tensor(Tensor::from_data(TensorData::new(data, shape), device))
    };
    m.gate_up_proj = param(gate_up, [ne, h, 2 * inter]);
    m.down_proj = param(down, [ne, inter, h]);
    Ok(())
}
