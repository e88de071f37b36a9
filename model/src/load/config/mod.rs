//! The model's hyper-parameters, saved as `config.json` next to the weights.
//!
//! Reads our own format (`model_type: "burn-ascend"`) and Hugging Face `config.json` files of the
//! `llama`, `qwen2`, `qwen3`, `qwen3_moe`, `mistral` and `gpt_oss` model types, in the Hub's older form
//! (top-level `rope_theta`, `rope_scaling`) and in transformers 5's (`rope_parameters` holding
//! `rope_theta` and `rope_type`), the way transformers 5 reads them:
//!
//! - defaults are those of transformers' config classes (`models/*/configuration_*.py`,
//!   e.g. Qwen3's `head_dim = 128`, Mistral's `sliding_window = 4096`), used only where a key
//!   is missing;
//! - every key of the model type's transformers config class that changes the arithmetic is
//!   either honoured or refused with [`burn_ascend::AttnError::Unsupported`], whose message
//!   reads `unsupported: <key> …`;
//! - `PretrainedConfig`'s generic attributes ([`GENERIC_ATTRIBUTES`]: ids, dtype, token ids,
//!   generation defaults, …), the families' metadata keys ([`METADATA_KEYS`]) and every key
//!   beginning with `_` are accepted silently;
//! - any other key is ignored, as transformers keeps it as an inert attribute, with one
//!   warning line on stderr naming the keys ([`IgnoredKeys`]);
//! - a key of the wrong type or shape is an [`burn_ascend::AttnError::Invalid`] naming the key.
//!
//! The configuration layer: [`ModelConfig`] and its parts (`model_config.rs`), Hugging Face's
//! `config.json` read into it (`hf.rs`), and what else a checkpoint folder's JSON files say
//! (`folder.rs`: its config and end-of-sequence ids).

mod folder;
mod hf;
mod model_config;
mod moe_keys;

pub use folder::{eos_token_ids, load_config};
pub use hf::{is_metadata_key, IgnoredKeys, GENERIC_ATTRIBUTES, METADATA_KEYS};
pub use model_config::{LayerType, ModelConfig, MoeConfig, MoeKind, RopeScaling};
