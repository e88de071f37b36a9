//! The Jinja environment chat templates run in, set up as transformers sets up its own
//! (`_compile_jinja_template` in `transformers/utils/chat_template_utils.py`): `trim_blocks` and
//! `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`, a `tojson` that is
//! Python's `json.dumps` (not Jinja's HTML-safe one), and the `{% generation %}` block that
//! marks the assistant's text. Values print as Python's `str()` prints them (`None`, `True`,
//! `['a', 1]`), which is what jinja2 writes for `{{ value }}`.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State, Value};

use super::strftime::strftime;

/// The template's name inside its environment.
pub(super) const NAME: &str = "chat_template";
/// Context key that turns on the generation markers (set only by span rendering).
pub(super) const TRACK: &str = "__burn_ascend_track_generation";
/// Marks the start / end of a `{% generation %}` block's output while tracking: Unicode
/// noncharacters, which no message may contain (checked before rendering).
pub(super) const GEN_START: char = '\u{FDD0}';
pub(super) const GEN_END: char = '\u{FDD1}';
/// The function a `{% generation %}` block becomes (a `{% call %}` block of it).
const GENERATION_FN: &str = "burn_ascend_generation";

/// An environment holding `source` (after [`rewrite_generation_tags`]) under [`NAME`].
pub(super) fn environment(source: &str) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()?,
    );
    env.set_unknown_method_callback(python_method);
    env.set_formatter(|out, _state, value| {
        let mut s = String::new();
        write_str_of(&mut s, value)?;
        out.write_str(&s).map_err(Error::from)
    });
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_function(GENERATION_FN, generation_block);
    env.add_filter("tojson", tojson);
    env.add_template_owned(NAME, rewrite_generation_tags(source))?;
    Ok(env)
}

/// Python's `str` / `dict` / `list` methods (contrib's pycompat), with `str.title()` as Python
/// has it: pycompat's is Jinja's `|title` filter, which starts words only after whitespace and
/// brackets, where Python starts one after any character that is not a letter (`"a,b".title()`
/// is `"A,B"`).
fn python_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let (Some(s), "title", []) = (value.as_str(), method, args) {
        let mut out = String::with_capacity(s.len());
        let mut after_cased = false;
        for c in s.chars() {
            if after_cased {
                out.extend(c.to_lowercase());
            } else {
                out.extend(c.to_uppercase());
            }
            after_cased = c.is_lowercase() || c.is_uppercase();
        }
        return Ok(Value::from(out));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Whether `source` has `{% generation %}` blocks (transformers' test:
/// `\{\%-?\s*generation\s*-?\%\}`).
pub(super) fn has_generation_tags(source: &str) -> bool {
    block_tags(source).any(|t| t.name == "generation")
}

/// A `{% name %}` tag: its byte range and whitespace-control marks.
struct BlockTag<'a> {
    start: usize,
    end: usize,
    open: &'a str,
    name: &'a str,
    close: &'a str,
}

/// The `{% generation %}` / `{% endgeneration %}` tags of `source`, in order.
fn block_tags(source: &str) -> impl Iterator<Item = BlockTag<'_>> {
    let mut from = 0;
    std::iter::from_fn(move || loop {
        let start = from + source[from..].find("{%")?;
        from = start + 2;
        let rest = &source[start + 2..];
        let open_len = usize::from(rest.starts_with(['-', '+']));
        let body = rest[open_len..].trim_start();
        let name_len = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let name = &body[..name_len];
        if name != "generation" && name != "endgeneration" {
            continue;
        }
        let after = body[name_len..].trim_start();
        let close_len = usize::from(after.starts_with(['-', '+']));
        if !after[close_len..].starts_with("%}") {
            continue;
        }
        let end = source.len() - after.len() + close_len + 2;
        from = end;
        return Some(BlockTag {
            start,
            end,
            open: &rest[..open_len],
            name,
            close: &after[..close_len],
        });
    })
}

/// `{% generation %}…{% endgeneration %}` (transformers' jinja2 extension) as a call block of
/// [`generation_block`], whitespace-control marks kept, so that trimming is unchanged.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 64);
    let mut last = 0;
    for t in block_tags(source) {
        out.push_str(&source[last..t.start]);
        let (open, close) = (t.open, t.close);
        if t.name == "generation" {
            write!(out, "{{%{open} call {GENERATION_FN}() {close}%}}").expect("string");
        } else {
            write!(out, "{{%{open} endcall {close}%}}").expect("string");
        }
        last = t.end;
    }
    out.push_str(&source[last..]);
    out
}

/// The body of a `{% generation %}` block, between markers when spans are being tracked.
fn generation_block(state: &mut State, kwargs: Kwargs) -> Result<Value, Error> {
    let caller: Value = kwargs.get("caller")?;
    kwargs.assert_all_used()?;
    let body = caller.call(state, &[])?;
    let text = body
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string());
    let track = state.lookup(TRACK).is_some_and(|v| v.is_true());
    Ok(Value::from_safe_string(if track {
        format!("{GEN_START}{text}{GEN_END}")
    } else {
        text
    }))
}

/// transformers' `raise_exception(message)`: the template refuses its input.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `strftime_now(format)`: the current time (here in UTC; transformers uses the
/// machine's local time, which is UTC on a server without a time zone).
fn strftime_now(format: String) -> Result<Value, Error> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(now, &format)
        .map(Value::from)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e))
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, so `{"a": 1, "b": [1, 2]}` with Python's spacing and no HTML escaping.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match (v.as_i64(), v.as_str()) {
            (Some(n), _) => Some(" ".repeat(n.max(0) as usize)),
            (None, Some(s)) => Some(s.to_owned()),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer, a string or none",
                ))
            }
        },
    };
    let (item, key) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be two strings",
            ))
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let mut w = JsonWriter {
        out: String::new(),
        indent,
        item,
        key,
        ensure_ascii: ensure_ascii.unwrap_or(false),
        sort_keys: sort_keys.unwrap_or(false),
    };
    w.value(value, 0)?;
    Ok(Value::from_safe_string(w.out))
}

struct JsonWriter {
    out: String,
    indent: Option<String>,
    item: String,
    key: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

impl JsonWriter {
    fn newline(&mut self, level: usize) {
        if let Some(ind) = &self.indent {
            self.out.push('\n');
            for _ in 0..level {
                self.out.push_str(ind);
            }
        }
    }

    fn value(&mut self, v: &Value, level: usize) -> Result<(), Error> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => write_py_number(&mut self.out, v, true),
            ValueKind::String => {
                write_json_string(&mut self.out, v.as_str().unwrap_or(""), self.ensure_ascii)
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.container('[', ']', items.len(), level, |w, i, l| {
                    w.value(&items[i], l)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                let pairs: Vec<(Value, Value)> = keys
                    .into_iter()
                    .map(|k| {
                        let item = v.get_item(&k)?;
                        Ok((k, item))
                    })
                    .collect::<Result<_, Error>>()?;
                self.container('{', '}', pairs.len(), level, |w, i, l| {
                    let (k, item) = &pairs[i];
                    match k.as_str() {
                        Some(s) => write_json_string(&mut w.out, s, w.ensure_ascii),
                        None => {
                            // Python turns number / bool / None keys into strings.
                            let mut s = String::new();
                            write_str_of(&mut s, k)?;
                            write_json_string(&mut w.out, &s, w.ensure_ascii)
                        }
                    }
                    w.out.push_str(&w.key.clone());
                    w.value(item, l)
                })?;
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: a value of kind {} is not JSON", v.kind()),
                ))
            }
        }
        Ok(())
    }

    fn container(
        &mut self,
        open: char,
        close: char,
        n: usize,
        level: usize,
        mut each: impl FnMut(&mut Self, usize, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.out.push(open);
        if n == 0 {
            self.out.push(close);
            return Ok(());
        }
        for i in 0..n {
            if i > 0 {
                let sep = self.item.clone();
                self.out.push_str(&sep);
            }
            self.newline(level + 1);
            each(self, i, level + 1)?;
        }
        self.newline(level);
        self.out.push(close);
        Ok(())
    }
}

/// A JSON string as Python's `json.dumps` writes it.
fn write_json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    write!(out, "\\u{unit:04x}").expect("string");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as Python prints it: integers as they are, floats as `repr(float)` (`1.0`,
/// `1e-05`, `1e+16`); `json` is `json.dumps` (`NaN`, `Infinity`), otherwise `str()` (`nan`,
/// `inf`).
fn write_py_number(out: &mut String, v: &Value, json: bool) {
    if let Some(i) = v.as_i64().filter(|_| v.is_integer()) {
        write!(out, "{i}").expect("string");
        return;
    }
    let x = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    if x.is_nan() {
        out.push_str(if json { "NaN" } else { "nan" });
    } else if x.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        out.push_str(if x < 0.0 { "-" } else { "" });
        out.push_str(s);
    } else {
        // Rust's `{:?}` is the shortest round-trip form with Python's thresholds for the
        // exponent form (below 1e-4 or from 1e16); Python writes the exponent signed and with
        // at least two digits.
        let s = format!("{x:?}");
        match s.split_once('e') {
            Some((mantissa, exp)) => {
                let (sign, digits) = match exp.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', exp),
                };
                write!(out, "{mantissa}e{sign}{digits:0>2}").expect("string");
            }
            None => out.push_str(&s),
        }
    }
}

/// `str(value)` as Python writes it: strings as they are, the rest as `repr`.
fn write_str_of(out: &mut String, v: &Value) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => out.push_str(v.as_str().unwrap_or("")),
        _ => write_repr(out, v)?,
    }
    Ok(())
}

/// `repr(value)` as Python writes it (`None`, `True`, `'text'`, `[1, 'a']`, `{'k': 1}`).
fn write_repr(out: &mut String, v: &Value) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => write_py_number(out, v, false),
        ValueKind::String => write_repr_string(out, v.as_str().unwrap_or("")),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, k) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &k)?;
                out.push_str(": ");
                write_repr(out, &v.get_item(&k)?)?;
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
    Ok(())
}

fn write_repr_string(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                write!(out, "\\x{:02x}", c as u32).expect("string");
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_call_blocks_with_their_whitespace_marks() {
        let src = "a{%- generation %}b{% endgeneration -%}c{%generation%}d{%+ endgeneration %}";
        assert_eq!(
            rewrite_generation_tags(src),
            "a{%- call burn_ascend_generation() %}b{% endcall -%}c{% call burn_ascend_generation() %}d{%+ endcall %}"
        );
        assert!(has_generation_tags(src));
        assert!(!has_generation_tags(
            "{% if generation %}{{ generation }}{% endif %}"
        ));
    }

    #[test]
    fn python_floats_print_as_python_repr_prints_them() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e-5, "1e-05"),
            (1.5e300, "1.5e+300"),
            (0.0001, "0.0001"),
            (123456789.125, "123456789.125"),
        ];
        for (x, want) in cases {
            let mut s = String::new();
            write_py_number(&mut s, &Value::from(x), false);
            assert_eq!(s, want, "{x}");
        }
    }
}
