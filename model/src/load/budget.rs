//! The memory a request implies, checked against a stated budget before anything is allocated:
//! the KV cache `generate --max-new` asks for, the activations a training batch keeps for the
//! backward pass. The budget is `--memory-budget`, by default the host memory the system
//! reports available (`MemAvailable` of `/proc/meminfo`; 16 GiB where there is none).

use burn_ascend::AttnError;

use crate::load::config::ModelConfig;

/// The budget when none is given and the system reports no available memory.
pub const FALLBACK_BUDGET: u64 = 16 << 30;

/// The default budget: `MemAvailable` of `/proc/meminfo`, else [`FALLBACK_BUDGET`].
pub fn default_budget() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .unwrap_or(FALLBACK_BUDGET)
}

/// `bytes` in the largest binary unit that keeps it above 1.
pub fn human(bytes: u128) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut x = bytes as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    format!("{x:.1} {}", units[u])
}

fn refuse(flag: &'static str, what: String, bytes: u128, budget: u64) -> AttnError {
    AttnError::invalid(
        flag,
        format!(
            "{what} needs {} ({bytes} bytes), above the memory budget of {} (--memory-budget, \
             by default the available host memory)",
            human(bytes),
            human(budget as u128)
        ),
    )
}

/// The KV cache blocks a serving run needs (`sequences` prompts of at most `longest_prompt`
/// tokens, each growing by `max_new`, in pages of `block_size` tokens, plus one spare block),
/// after checking its bytes (f32 keys and values of every layer) against `budget`;
/// refused naming `--max-new`.
pub fn serving_blocks(
    config: &ModelConfig,
    longest_prompt: usize,
    sequences: usize,
    max_new: usize,
    block_size: usize,
    budget: u64,
) -> Result<usize, AttnError> {
    let tokens = longest_prompt as u128 + max_new as u128 + 1;
    let per_seq = tokens.div_ceil(block_size.max(1) as u128);
    let blocks = per_seq * sequences as u128 + 1;
    let per_token = 2
        * 4
        * config.num_hidden_layers as u128
        * config.num_key_value_heads as u128
        * config.head_dim as u128;
    let bytes = blocks * block_size as u128 * per_token;
    if bytes > budget as u128 {
        return Err(refuse(
            "--max-new",
            format!(
                "{max_new} new tokens for {sequences} sequence(s) (KV cache of {blocks} blocks of \
                 {block_size} tokens)"
            ),
            bytes,
            budget,
        ));
    }
    usize::try_from(blocks).map_err(|_| refuse("--max-new", "the KV cache".into(), bytes, budget))
}

/// The bytes a training step of `batch_tokens` tokens needs at least: the weights, their
/// gradients and AdamW's two moments (16 bytes per parameter), the logits with their softmax
/// and gradient (3 × tokens × vocab f32) and, per layer, the activations kept for the backward
/// pass (about 8 × hidden + 3 × intermediate f32 per token).
pub fn training_bytes(config: &ModelConfig, batch_tokens: usize) -> u128 {
    let c = config;
    let t = batch_tokens as u128;
    let params = 16 * c.num_params() as u128;
    let logits = 3 * 4 * t * c.vocab_size as u128;
    let layers = 4
        * t
        * c.num_hidden_layers as u128
        * (8 * c.hidden_size as u128 + 3 * c.intermediate_size as u128);
    params + logits + layers
}

/// Checks [`training_bytes`] against `budget`, refused naming `--batch-tokens`.
pub fn check_training(
    config: &ModelConfig,
    batch_tokens: usize,
    budget: u64,
) -> Result<(), AttnError> {
    let bytes = training_bytes(config, batch_tokens);
    if bytes > budget as u128 {
        return Err(refuse(
            "--batch-tokens",
            format!("a training step of {batch_tokens} tokens"),
            bytes,
            budget,
        ));
    }
    Ok(())
}
