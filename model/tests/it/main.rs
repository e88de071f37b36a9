//! burn-ascend-model's integration tests, one binary: a module per suite. The suites that run
//! the `finetune` and `generate` examples or parse their command lines are the CLI crate's
//! (`cli/tests/it/model_*.rs`), which builds them.
//!
//! The suites share one process. What is process-wide: the backend's fallback counters (read
//! only by `generate`, which asserts that the serving ops never fall back, and no test here
//! makes them fall back), Burn's global random generator (no test depends on its sequence:
//! models compared across runs start from one saved checkpoint), the simulation's devices
//! (each suite that opens simulated devices uses indices of its own, or holds a lock), and the
//! mutation switches of `parallel::{ddp, cp}::test_hooks` (set only under `ddp::serial` / the
//! context-parallel suite's lock).

mod chat;
mod config_keys;
mod cp;
mod ddp;
mod fused;
mod generate;
mod generate_graph;
mod gpt_oss;
mod hf_checkpoint;
mod layers;
mod lora;
mod optim;
mod plan;
mod qwen3_moe;
mod recompute;
mod shards;
mod train;
mod train_graph;
mod zero;
