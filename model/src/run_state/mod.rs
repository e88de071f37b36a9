//! A run's state on disk: crash-consistent checkpoints (`published.rs`: written whole under a
//! step's folder, then published by one atomic rename; `durable.rs`: the fsyncs that make a
//! rename survive a crash) and the run's progress (`state.rs`: `state.json`). Below the model
//! and the loop: it stores bytes and knows neither.

pub mod durable;
pub mod published;
pub mod shards;
pub mod state;
