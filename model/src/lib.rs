//! A small decoder-only LLM built on this crate's ops: packed varlen training with learned
//! sinks and sliding-window layers, Hugging Face style checkpoints, and generation through the
//! paged KV cache. The `finetune` and `generate` examples drive it.
//!
//! The modules are layers, each importing only the layers before it in this list (no module
//! imports one that imports it back):
//!
//! - [`load`]: configuration and input: the model's config (ours and Hugging Face's
//!   `config.json`), the tokenizer, chat templates, the training data, the memory budget;
//! - [`run_state`]: a run's crash-consistent checkpoints on disk and its `state.json`;
//! - [`model`]: the network (transformer, attention, rope, mixture of experts, LoRA adapters)
//!   and its weights in Hugging Face's and PEFT's formats (MXFP4 dequantized on load);
//! - [`train`]: the training loop (eager and captured), its optimizer, schedule and losses,
//!   activation recomputation, and the interface it asks of parallel strategies;
//! - [`parallel`]: the strategies that run the loop on several ranks: data parallelism, ZeRO,
//!   context parallelism, and the memory plan of one rank;
//! - [`serve`]: generation, eager and from a captured graph;
//! - [`profile`]: what a step costs the host (launches, syncs, fallbacks, a per-op profile).

pub mod load;
pub mod model;
pub mod parallel;
pub mod profile;
pub mod run_state;
pub mod serve;
pub mod train;

pub use load::chat::ChatTemplate;
pub use load::config::ModelConfig;
pub use load::data::{PackedBatch, Packer};
pub use load::tokenizer::Tokenizer;
pub use model::transformer::{cross_entropy, cross_entropy_fused, Transformer};
pub use serve::generate::{
    generate_batch, generate_batch_until, max_logit_gap, sample, GenerationRun, Generator, Sampling,
};
pub use serve::generate_graph::{generate_batch_graph, GraphDecodeStats};
