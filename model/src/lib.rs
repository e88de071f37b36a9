//! A small decoder-only LLM built on this crate's ops: packed varlen training with learned
//! sinks and sliding-window layers, Hugging Face style checkpoints, and generation through the
//! paged KV cache. The `finetune` and `generate` examples drive it.

pub mod budget;
pub mod chat;
pub mod checkpoint;
pub mod checkpointing;
pub mod config;
pub mod cp;
pub mod data;
pub mod ddp;
pub mod dispatch;
pub mod durable;
pub mod generate;
pub mod generate_graph;
pub mod lora;
pub mod moe;
pub mod mxfp4;
pub mod optim;
pub mod peft;
pub mod plan;
pub mod rope;
pub mod run_checkpoint;
pub mod schedule;
pub mod tokenizer;
pub mod train;
pub mod train_graph;
pub mod transformer;
pub mod zero;

pub use chat::ChatTemplate;
pub use config::ModelConfig;
pub use data::{PackedBatch, Packer};
pub use generate::{
    generate_batch, generate_batch_until, max_logit_gap, sample, GenerationRun, Generator, Sampling,
};
pub use generate_graph::{generate_batch_graph, GraphDecodeStats};
pub use tokenizer::Tokenizer;
pub use transformer::{cross_entropy, cross_entropy_fused, Transformer};
