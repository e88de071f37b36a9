//! What a checkpoint folder's JSON files say besides the weights: its `config.json` read into
//! a [`ModelConfig`] and the end-of-sequence ids `generate` stops at (`generation_config.json`
//! or `config.json`). Here and not with the weights because the chat templates and the data
//! read them too, below the model.

use std::path::Path;

use burn_ascend::AttnError;

use super::model_config::ModelConfig;

fn io_err(path: &Path, e: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {e}", path.display()))
}

/// Reads `config.json`.
pub fn load_config(dir: &Path) -> Result<ModelConfig, AttnError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| io_err(&path, e))?;
    ModelConfig::from_json(&v)
}

/// The end-of-sequence token ids of a checkpoint, as transformers' `generate` takes them:
/// `eos_token_id` of `generation_config.json` when the folder has one, else of `config.json`;
/// an id, a list of ids, or null / missing (none: generation runs to its length).
pub fn eos_token_ids(dir: &Path) -> Result<Vec<u32>, AttnError> {
    #[derive(serde::Deserialize)]
    struct Eos {
        #[serde(default)]
        eos_token_id: Option<OneOrMany>,
    }
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(u32),
        Many(Vec<u32>),
    }
    let generation = dir.join("generation_config.json");
    let path = if generation.exists() {
        generation
    } else {
        dir.join("config.json")
    };
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| io_err(&path, e))?;
    let eos: Eos =
        serde_json::from_value(v).map_err(|e| io_err(&path, format!("key 'eos_token_id': {e}")))?;
    Ok(match eos.eos_token_id {
        None => Vec::new(),
        Some(OneOrMany::One(id)) => vec![id],
        Some(OneOrMany::Many(ids)) => ids,
    })
}
