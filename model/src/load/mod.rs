//! Configuration and input, below the model: the model's hyper-parameters (ours and Hugging
//! Face's `config.json`), the tokenizer, chat templates (a checkpoint's, for instruction data
//! and for serving), the packed training data and the memory budget a request is checked
//! against, and the weight files read one tensor at a time.

pub mod budget;
pub mod chat;
pub mod config;
pub mod data;
pub mod tokenizer;
pub(crate) mod weight_file;
