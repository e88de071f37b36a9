//! A run's state on disk: crash-consistent checkpoints (`published.rs`: written under a step's
//! folder, by one writer or one file per rank, then published by one atomic rename;
//! `shards.rs`: a sharded state's files and the ranges each holds; `durable.rs`: the fsyncs that
//! make a rename survive a crash) and the run's progress (`state.rs`: `state.json`). Below the
//! model and the loop: it stores bytes and f32 ranges and knows neither.

pub mod durable;
pub mod published;
pub mod shards;
pub mod state;
