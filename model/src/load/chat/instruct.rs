//! Instruction data and chat prompts: `{"messages": [{"role", "content"}, …]}` records (the form
//! of Hugging Face's chat datasets) rendered with a checkpoint's chat template, tokenized, with
//! a mask of the assistant's tokens so that fine-tuning learns only the replies.
//!
//! How the assistant's text is found in a rendering:
//! * a template with `{% generation %}` blocks marks it itself: the blocks' output, as
//!   transformers' `return_assistant_tokens_mask` takes it;
//! * otherwise by rendering prefixes, as TRL finds completions: for each assistant message
//!   `i`, `P` = `messages[..i]` rendered with `add_generation_prompt` and `F` =
//!   `messages[..=i]` rendered without; the reply is `F[len(P)..]` (its text and the end-of-turn
//!   tokens the template writes after it, which the model must learn to stop). `P` must be a
//!   prefix of `F` and `F` of the whole conversation's rendering; a template that renders
//!   earlier turns differently once later ones follow (some drop past reasoning) is refused,
//!   naming the message, rather than trained on a guess.
//!
//! The spans are byte ranges of the rendering; a token is the assistant's when its byte range
//! overlaps one (transformers' rule, so a token straddling a boundary counts).

use std::ops::Range;
use std::path::Path;

use burn_ascend::AttnError;

use super::ChatTemplate;
use crate::load::config::eos_token_ids;
use crate::load::tokenizer::Tokenizer;

/// One conversation of a chat JSONL file.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRecord {
    /// 1-based line in the file.
    pub line: usize,
    /// The messages, as JSON objects (other keys than `role` / `content` are kept for the
    /// template, such as `tool_calls`).
    pub messages: Vec<serde_json::Value>,
}

/// A tokenized conversation: `assistant[i]` says whether `ids[i]` is the assistant's.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatExample {
    /// Token ids of the rendering.
    pub ids: Vec<u32>,
    /// The assistant's tokens.
    pub assistant: Vec<bool>,
}

fn data_err(path: &Path, line: usize, rule: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("--data", format!("{} line {line}: {rule}", path.display()))
}

/// The messages of one JSONL line, or what is wrong with it, naming the key.
pub fn parse_chat_line(line: &str) -> Result<Vec<serde_json::Value>, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or_else(|| format!("a record must be a JSON object, got {}", kind(&v)))?;
    let messages = obj.get("messages").ok_or(
        "key \"messages\": missing (records are {\"messages\": [{\"role\": …, \"content\": …}, …]})",
    )?;
    let messages = messages
        .as_array()
        .ok_or_else(|| format!("key \"messages\": must be a list, got {}", kind(messages)))?;
    if messages.is_empty() {
        return Err("key \"messages\": is empty".into());
    }
    for (i, m) in messages.iter().enumerate() {
        let m = m
            .as_object()
            .ok_or_else(|| format!("key \"messages[{i}]\": must be an object, got {}", kind(m)))?;
        match m.get("role") {
            Some(serde_json::Value::String(r)) if !r.is_empty() => {}
            Some(serde_json::Value::String(_)) => {
                return Err(format!("key \"messages[{i}].role\": is empty"))
            }
            Some(r) => {
                return Err(format!(
                    "key \"messages[{i}].role\": must be a string, got {}",
                    kind(r)
                ))
            }
            None => return Err(format!("key \"messages[{i}].role\": missing")),
        }
        match m.get("content") {
            Some(serde_json::Value::String(_)) => {}
            // An assistant turn that only calls tools has no text (`content: null`).
            Some(serde_json::Value::Null) if m.contains_key("tool_calls") => {}
            Some(c) => {
                return Err(format!(
                    "key \"messages[{i}].content\": must be a string, got {} (content lists of \
                     multimodal parts are not supported)",
                    kind(c)
                ))
            }
            None => return Err(format!("key \"messages[{i}].content\": missing")),
        }
    }
    if !messages.iter().any(|m| m["role"] == "assistant") {
        return Err(
            "key \"messages\": has no \"assistant\" message (nothing to learn from)".into(),
        );
    }
    Ok(messages.clone())
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Whether a JSONL text holds chat records: its first non-blank line is an object with a
/// `messages` key.
pub fn is_chat_jsonl(text: &str) -> bool {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .is_some_and(|v| v.get("messages").is_some())
}

/// Every record of a chat JSONL text (blank lines skipped); the first bad one is an error naming
/// `path`, its line and the key.
pub fn parse_chat_jsonl(path: &Path, text: &str) -> Result<Vec<ChatRecord>, AttnError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let messages = parse_chat_line(line).map_err(|e| data_err(path, i + 1, e))?;
        out.push(ChatRecord {
            line: i + 1,
            messages,
        });
    }
    if out.is_empty() {
        return Err(AttnError::invalid(
            "--data",
            format!("{}: holds no record", path.display()),
        ));
    }
    Ok(out)
}

/// The rendering of `messages` and the byte ranges of the assistant's text in it (see the
/// module's doc for how they are found).
pub fn assistant_spans(
    template: &ChatTemplate,
    messages: &[serde_json::Value],
) -> Result<(String, Vec<Range<usize>>), AttnError> {
    if template.has_generation_tags() {
        return template.render_generation_spans(messages, false);
    }
    prefix_spans(template, messages)
}

/// The assistant's text found by rendering prefixes (the rule for templates without
/// `{% generation %}` blocks, see the module's doc).
pub fn prefix_spans(
    template: &ChatTemplate,
    messages: &[serde_json::Value],
) -> Result<(String, Vec<Range<usize>>), AttnError> {
    let full = template.render(messages, false)?;
    let mut spans = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if m["role"] != "assistant" {
            continue;
        }
        let prefix = if i == 0 {
            String::new()
        } else {
            template.render(&messages[..i], true)?
        };
        let upto = template.render(&messages[..=i], false)?;
        if !upto.starts_with(&prefix) || !full.starts_with(&upto) {
            return Err(AttnError::Unsupported(format!(
                "{}: the chat template renders messages[..{i}] differently once messages[{i}] \
                 (an assistant reply) or later ones follow, so the reply's tokens cannot be found \
                 by rendering prefixes; a template with {{% generation %}} blocks around the \
                 replies can be used instead",
                template.origin()
            )));
        }
        if upto.len() > prefix.len() {
            spans.push(prefix.len()..upto.len());
        }
    }
    Ok((full, spans))
}

/// `messages` rendered, tokenized (no special tokens added: the template writes them), and the
/// assistant's tokens.
pub fn tokenize_chat(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[serde_json::Value],
) -> Result<ChatExample, AttnError> {
    let (text, spans) = assistant_spans(template, messages)?;
    let (ids, offsets) = tokenizer.encode_with_offsets(&text)?;
    let assistant = offsets
        .iter()
        .map(|&(s, e)| spans.iter().any(|r| e > r.start && s < r.end))
        .collect();
    Ok(ChatExample { ids, assistant })
}

/// The examples of a chat JSONL file for fine-tuning: every record parsed, rendered and
/// tokenized before training starts; the first record that fails (a broken line, a template
/// that refuses the conversation, a rendering with no assistant token to predict) is an error
/// naming the file and line.
pub fn load_chat_examples(
    path: &Path,
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
) -> Result<Vec<ChatExample>, AttnError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| AttnError::invalid("--data", format!("{}: {e}", path.display())))?;
    let records = parse_chat_jsonl(path, &text)?;
    let mut out = Vec::with_capacity(records.len());
    for r in &records {
        let ex = tokenize_chat(template, tokenizer, &r.messages)
            .map_err(|e| data_err(path, r.line, e))?;
        // A target is the token after an input, so the first token is never predicted.
        if !ex.assistant.iter().skip(1).any(|&a| a) {
            return Err(data_err(
                path,
                r.line,
                format!(
                    "the chat template ({}) renders no assistant token to learn",
                    template.origin()
                ),
            ));
        }
        out.push(ex);
    }
    Ok(out)
}

/// The ids of `prompt` as a user's message, rendered with `add_generation_prompt` (what
/// `generate --chat` prefills).
pub fn prompt_ids(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    prompt: &str,
) -> Result<Vec<u32>, AttnError> {
    let messages = [serde_json::json!({"role": "user", "content": prompt})];
    tokenizer.encode(&template.render(&messages, true)?)
}

/// The ids generation stops at for a chat: the checkpoint's `eos_token_id` (one or a list, from
/// `generation_config.json`, else `config.json`) and the tokenizer's `eos_token` (an instruct
/// model's end of turn, such as `<|eot_id|>` or `<|im_end|>`), without repeats.
pub fn chat_stop_ids(
    dir: &Path,
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
) -> Result<Vec<u32>, AttnError> {
    let mut ids = eos_token_ids(dir)?;
    if let Some(id) = template
        .special_token("eos_token")
        .and_then(|t| tokenizer.token_id(t))
    {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}
