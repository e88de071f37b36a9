//! Serving: generation through the paged KV cache, eager ([`generate`]) and with each decode
//! step replayed from a captured graph ([`generate_graph`]).

pub mod generate;
pub mod generate_graph;
