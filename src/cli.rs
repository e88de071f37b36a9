//! Op-replay CLI (see `run`).
