//! burn-ascend's integration tests, one binary: a module per suite. The model's suites here
//! (`model_*`) are those that run the `finetune` and `generate` examples or parse their
//! command lines; the rest of the model's are `model/tests/it`.
//!
//! The suites share one process. What is process-wide: the backend's fallback counters (read
//! only by `suite`, which assert that the
//! serving ops never fall back, and no test here makes them fall back), Burn's global random
//! generator (no test depends on its sequence: models compared across runs start from one
//! saved checkpoint) and the CLI binary's counting allocator (the bench's memory figures are
//! measured in that binary's own process, see `cli_bench`).

mod common;

mod campaign;
mod campaign_api;
mod campaign_soak;
mod cli_args;
mod cli_bad_input;
mod cli_bench;
mod cli_fia;
mod cli_prompt_incre_scatter;
mod cli_selftest;
mod cli_varlen;
mod model_campaign;
mod model_checkpointing;
mod model_cp;
mod model_examples;
mod model_graph;
mod model_kill;
mod model_plan;
mod model_profile;
mod model_refusals;
mod model_torchrun;
mod model_torchrun_sharded;
mod model_train_graph;
mod model_zero;
mod npu;
mod paged_cache;
mod prompt_incre_scatter;
mod suite;
mod varlen_burn;
