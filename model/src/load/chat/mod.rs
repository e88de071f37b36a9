//! Chat templates: a Hugging Face checkpoint's Jinja template (`chat_template.jinja`, as
//! transformers 5 saves it, or the `chat_template` key of `tokenizer_config.json`, as the Hub's
//! older checkpoints hold it) rendered as `tokenizer.apply_chat_template` renders it, and the
//! instruction data built on it ([`instruct`]).
//!
//! What the template sees is what transformers passes: `messages`, `tools` and `documents`
//! (both none), `add_generation_prompt`, and the tokenizer's special tokens by name
//! (`bos_token`, `eos_token`, …, from `tokenizer_config.json`).

mod engine;
pub mod instruct;
pub mod strftime;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use burn_ascend::AttnError;
use minijinja::Value;

/// The names under which transformers hands the special tokens to a template
/// (`special_tokens_map`).
const SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// A compiled chat template and the special tokens it is rendered with.
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    origin: String,
    special_tokens: Vec<(String, String)>,
    generation_tags: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("special_tokens", &self.special_tokens)
            .field("generation_tags", &self.generation_tags)
            .finish()
    }
}

fn err(rule: impl Into<String>) -> AttnError {
    AttnError::invalid("chat_template", rule)
}

impl ChatTemplate {
    /// The template of the checkpoint folder `dir`, as transformers 5 loads it:
    /// `chat_template.jinja` when present, else `tokenizer_config.json`'s `chat_template` (a
    /// string, or a list of `{"name", "template"}` of which the one named `default`); the
    /// special tokens from `tokenizer_config.json` when it is there.
    pub fn from_dir(dir: &Path) -> Result<Self, AttnError> {
        let config_path = dir.join("tokenizer_config.json");
        let config: Option<serde_json::Value> = if config_path.exists() {
            let text = std::fs::read_to_string(&config_path)
                .map_err(|e| err(format!("{}: {e}", config_path.display())))?;
            Some(
                serde_json::from_str(&text)
                    .map_err(|e| err(format!("{}: not JSON: {e}", config_path.display())))?,
            )
        } else {
            None
        };
        let special_tokens = match &config {
            Some(c) => special_tokens(c, &config_path)?,
            None => Vec::new(),
        };
        let jinja = dir.join("chat_template.jinja");
        let (source, origin) = if jinja.exists() {
            let text = std::fs::read_to_string(&jinja)
                .map_err(|e| err(format!("{}: {e}", jinja.display())))?;
            (text, jinja.display().to_string())
        } else {
            let origin = format!("{} (key \"chat_template\")", config_path.display());
            let value = config
                .as_ref()
                .and_then(|c| c.get("chat_template"))
                .filter(|v| !v.is_null());
            let source = match value {
                None => {
                    return Err(err(format!(
                        "{} has no chat template: neither chat_template.jinja nor a \
                         \"chat_template\" key in tokenizer_config.json",
                        dir.display()
                    )))
                }
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Array(named)) => named
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .and_then(|t| t.get("template"))
                    .and_then(|t| t.as_str())
                    .ok_or_else(|| {
                        err(format!(
                            "{origin}: a list of named templates needs one named \"default\" \
                             with a \"template\" string"
                        ))
                    })?
                    .to_owned(),
                Some(other) => {
                    return Err(err(format!(
                        "{origin}: must be a string or a list of {{\"name\", \"template\"}}, got {other}"
                    )))
                }
            };
            (source, origin)
        };
        Self::from_source(&source, origin, special_tokens)
    }

    /// Compiles `source`; `origin` names it in errors (a file, or a file and key).
    pub fn from_source(
        source: &str,
        origin: impl Into<String>,
        special_tokens: Vec<(String, String)>,
    ) -> Result<Self, AttnError> {
        let origin = origin.into();
        let env = engine::environment(source).map_err(|e| err(format!("{origin}: {e}")))?;
        Ok(Self {
            env,
            origin,
            special_tokens,
            generation_tags: engine::has_generation_tags(source),
        })
    }

    /// Where the template came from (a file, or `tokenizer_config.json (key "chat_template")`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// A special token's text (`"eos_token"` → `"<|eot_id|>"`), when the tokenizer config has it.
    pub fn special_token(&self, name: &str) -> Option<&str> {
        self.special_tokens
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }

    /// Whether the template marks the assistant's text with `{% generation %}` blocks.
    pub fn has_generation_tags(&self) -> bool {
        self.generation_tags
    }

    /// `tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=…)`.
    /// `messages` are JSON objects (`{"role": …, "content": …}`, and whatever other keys the
    /// template reads, such as `tool_calls`).
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        add_generation_prompt: bool,
    ) -> Result<String, AttnError> {
        self.render_inner(messages, add_generation_prompt, false)
    }

    /// [`Self::render`], with the byte ranges of the rendering that `{% generation %}` blocks
    /// wrote (transformers' `generation_indices`, which its `return_assistant_tokens_mask`
    /// turns into a token mask). Without generation tags, no ranges.
    pub fn render_generation_spans(
        &self,
        messages: &[serde_json::Value],
        add_generation_prompt: bool,
    ) -> Result<(String, Vec<Range<usize>>), AttnError> {
        let marked = self.render_inner(messages, add_generation_prompt, true)?;
        let mut text = String::with_capacity(marked.len());
        let mut spans = Vec::new();
        let mut open: Option<usize> = None;
        for c in marked.chars() {
            match (c, open) {
                (engine::GEN_START, None) => open = Some(text.len()),
                (engine::GEN_END, Some(start)) => {
                    spans.push(start..text.len());
                    open = None;
                }
                (engine::GEN_START | engine::GEN_END, _) => {
                    return Err(err(format!(
                        "{}: nested or unbalanced {{% generation %}} blocks",
                        self.origin
                    )))
                }
                (c, _) => text.push(c),
            }
        }
        if open.is_some() {
            return Err(err(format!(
                "{}: a {{% generation %}} block's output was cut off",
                self.origin
            )));
        }
        Ok((text, spans))
    }

    fn render_inner(
        &self,
        messages: &[serde_json::Value],
        add_generation_prompt: bool,
        track: bool,
    ) -> Result<String, AttnError> {
        if messages.is_empty() {
            // transformers: "Cannot apply chat template to an empty conversation."
            return Err(AttnError::invalid(
                "messages",
                "an empty conversation cannot be rendered",
            ));
        }
        let mut ctx: BTreeMap<String, Value> = self
            .special_tokens
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        let msgs: Vec<Value> = messages
            .iter()
            .map(|m| to_value(m, &mut |s| check_no_marker(s)))
            .collect::<Result<_, _>>()?;
        ctx.insert("messages".into(), Value::from(msgs));
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        ctx.insert(engine::TRACK.into(), Value::from(track));
        let tmpl = self
            .env
            .get_template(engine::NAME)
            .map_err(|e| err(format!("{}: {e}", self.origin)))?;
        tmpl.render(Value::from(ctx))
            .map_err(|e| err(format!("{}: {e}", self.origin)))
    }
}

/// The special tokens of `tokenizer_config.json`, written as strings or as transformers'
/// `AddedToken` objects (`{"content": …}`); null ones are left out, as transformers'
/// `special_tokens_map` leaves them out.
fn special_tokens(
    config: &serde_json::Value,
    path: &Path,
) -> Result<Vec<(String, String)>, AttnError> {
    let mut out = Vec::new();
    for key in SPECIAL_TOKENS {
        let text = match config.get(key) {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => match v.get("content").and_then(|c| c.as_str()) {
                Some(s) => s.to_owned(),
                None => {
                    return Err(err(format!(
                        "{}: key \"{key}\" must be a string or an object with a \"content\" string, got {v}",
                        path.display()
                    )))
                }
            },
        };
        out.push((key.to_owned(), text));
    }
    Ok(out)
}

/// The generation markers are noncharacters that no text may bring in.
fn check_no_marker(s: &str) -> Result<(), AttnError> {
    if s.contains([engine::GEN_START, engine::GEN_END]) {
        return Err(AttnError::invalid(
            "messages",
            "a message holds U+FDD0 or U+FDD1 (Unicode noncharacters, reserved here to find \
             {% generation %} output)",
        ));
    }
    Ok(())
}

/// A JSON value as a template value; every string goes through `check`.
fn to_value(
    v: &serde_json::Value,
    check: &mut impl FnMut(&str) -> Result<(), AttnError>,
) -> Result<Value, AttnError> {
    Ok(match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => {
            check(s)?;
            Value::from(s.as_str())
        }
        serde_json::Value::Array(items) => Value::from(
            items
                .iter()
                .map(|i| to_value(i, check))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        serde_json::Value::Object(map) => {
            let mut pairs = BTreeMap::new();
            for (k, item) in map {
                check(k)?;
                pairs.insert(k.clone(), to_value(item, check)?);
            }
            Value::from(pairs)
        }
    })
}
