//! Chat templates against transformers: the fixtures in `model/tests/fixtures/chat/` (made by
//! `tools/fixtures/gen_chat_fixtures.py` with transformers 5.24 and jinja2 3.1) hold
//! `apply_chat_template`'s renderings, token ids and assistant masks for three templates, and
//! jinja2's output for the engine features templates use. Comparisons are exact.

use std::path::{Path, PathBuf};

use super::instruct::{assistant_spans, parse_chat_jsonl, prefix_spans, prompt_ids, tokenize_chat};
use super::strftime::strftime;
use super::*;
use crate::load::tokenizer::Tokenizer;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat")
}

fn expected() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_file(&fixtures().join("tokenizer.json")).unwrap()
}

fn messages(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v.as_array().unwrap().clone()
}

fn u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn bools(v: &serde_json::Value) -> Vec<bool> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() == 1)
        .collect()
}

const CASES: [&str; 3] = ["llama3", "qwen2", "generation"];

#[test]
fn renderings_and_token_ids_equal_transformers_apply_chat_template() {
    let e = expected();
    let tok = tokenizer();
    let mut n = 0;
    for case in CASES {
        let t = ChatTemplate::from_dir(&fixtures().join(case)).unwrap();
        for conv in e["cases"][case]["conversations"].as_array().unwrap() {
            let m = messages(&conv["messages"]);
            assert_eq!(t.render(&m, false).unwrap(), conv["text"], "{case}");
            assert_eq!(
                t.render(&m, true).unwrap(),
                conv["text_generation_prompt"],
                "{case}"
            );
            let ex = tokenize_chat(&t, &tok, &m).unwrap();
            assert_eq!(ex.ids, u32s(&conv["ids"]), "{case}");
            n += 1;
        }
    }
    assert_eq!(n, 10);
}

#[test]
fn templates_load_from_tokenizer_config_and_from_chat_template_jinja() {
    let llama = ChatTemplate::from_dir(&fixtures().join("llama3")).unwrap();
    assert!(llama
        .origin()
        .ends_with("tokenizer_config.json (key \"chat_template\")"));
    assert_eq!(llama.special_token("bos_token"), Some("<|begin_of_text|>"));
    assert_eq!(llama.special_token("eos_token"), Some("<|eot_id|>"));
    assert!(!llama.has_generation_tags());
    let generation = ChatTemplate::from_dir(&fixtures().join("generation")).unwrap();
    assert!(generation.origin().ends_with("chat_template.jinja"));
    assert!(generation.has_generation_tags());
    assert_eq!(generation.special_token("bos_token"), None);
}

#[test]
fn assistant_masks_equal_transformers_and_the_prefix_rule() {
    let e = expected();
    let tok = tokenizer();
    for case in CASES {
        let t = ChatTemplate::from_dir(&fixtures().join(case)).unwrap();
        for conv in e["cases"][case]["conversations"].as_array().unwrap() {
            let m = messages(&conv["messages"]);
            let ex = tokenize_chat(&t, &tok, &m).unwrap();
            assert_eq!(ex.assistant, bools(&conv["assistant_mask"]), "{case}");
            // The renderings are ASCII: Python's character spans are byte spans.
            let (_, spans) = assistant_spans(&t, &m).unwrap();
            let want: Vec<Range<usize>> = conv["assistant_spans"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s[0].as_u64().unwrap() as usize..s[1].as_u64().unwrap() as usize)
                .collect();
            assert_eq!(spans, want, "{case}");
        }
    }
}

#[test]
fn generation_blocks_and_rendered_prefixes_find_the_same_assistant_text() {
    // transformers' return_assistant_tokens_mask is the generation case's mask (checked by the
    // script); here the two ways of finding the replies agree on the same template.
    let t = ChatTemplate::from_dir(&fixtures().join("generation")).unwrap();
    for conv in expected()["cases"]["generation"]["conversations"]
        .as_array()
        .unwrap()
    {
        let m = messages(&conv["messages"]);
        let tagged = t.render_generation_spans(&m, false).unwrap();
        assert!(!tagged.1.is_empty());
        assert_eq!(tagged, prefix_spans(&t, &m).unwrap());
    }
}

#[test]
fn chat_prompts_equal_transformers_generation_prompt_ids() {
    let e = expected();
    let tok = tokenizer();
    for case in CASES {
        let t = ChatTemplate::from_dir(&fixtures().join(case)).unwrap();
        for p in e["cases"][case]["prompts"].as_array().unwrap() {
            let ids = prompt_ids(&t, &tok, p["prompt"].as_str().unwrap()).unwrap();
            assert_eq!(ids, u32s(&p["ids"]), "{case}");
        }
        let eos = &e["cases"][case]["eos"];
        assert_eq!(
            t.special_token("eos_token").and_then(|s| tok.token_id(s)),
            Some(eos["id"].as_u64().unwrap() as u32)
        );
    }
}

#[test]
fn chat_jsonl_records_tokenize_with_transformers_ids_and_masks() {
    let e = expected();
    let path = fixtures().join("chat.jsonl");
    let t = ChatTemplate::from_dir(&fixtures().join("qwen2")).unwrap();
    let examples = instruct::load_chat_examples(&path, &t, &tokenizer()).unwrap();
    let want = e["chat_jsonl_qwen2"].as_array().unwrap();
    assert_eq!(examples.len(), want.len());
    for (ex, w) in examples.iter().zip(want) {
        assert_eq!(ex.ids, u32s(&w["ids"]));
        assert_eq!(ex.assistant, bools(&w["assistant_mask"]));
    }
}

fn render_engine(source: &str, context: &serde_json::Value) -> Result<String, minijinja::Error> {
    let env = engine::environment(source)?;
    let ctx = to_value(context, &mut |_| Ok(())).unwrap();
    env.get_template(engine::NAME)?.render(ctx)
}

#[test]
fn engine_features_render_as_jinja2_renders_them_under_transformers_settings() {
    let e = expected();
    let cases = e["engine"].as_array().unwrap();
    assert_eq!(cases.len(), 11);
    for c in cases {
        let template = c["template"].as_str().unwrap();
        assert_eq!(
            render_engine(template, &c["context"]).unwrap(),
            c["output"].as_str().unwrap(),
            "{template}"
        );
    }
}

#[test]
fn raise_exception_refuses_with_the_templates_message_naming_the_file() {
    let e = expected();
    for c in e["engine_errors"].as_array().unwrap() {
        let err = render_engine(c["template"].as_str().unwrap(), &c["context"]).unwrap_err();
        assert!(
            err.to_string().contains(c["message"].as_str().unwrap()),
            "{err}"
        );
    }
    let t = ChatTemplate::from_dir(&fixtures().join("llama3")).unwrap();
    let m = [
        serde_json::json!({"role": "user", "content": "a"}),
        serde_json::json!({"role": "tool", "content": "b"}),
    ];
    let err = t.render(&m, false).unwrap_err().to_string();
    let want = e["cases"]["llama3"]["refused"].as_str().unwrap();
    assert!(err.starts_with("invalid chat_template: "), "{err}");
    assert!(
        err.contains("tokenizer_config.json (key \"chat_template\")"),
        "{err}"
    );
    assert!(err.contains(want), "{err}");
}

#[test]
fn strftime_equals_python_datetime_strftime_at_fixed_times() {
    for c in expected()["strftime"].as_array().unwrap() {
        let got = strftime(
            c["timestamp"].as_i64().unwrap(),
            c["format"].as_str().unwrap(),
        );
        assert_eq!(got.unwrap(), c["text"].as_str().unwrap());
    }
    assert_eq!(strftime(1_721_952_000, "%-d %B").unwrap(), "26 July");
    let e = strftime(0, "%Z").unwrap_err();
    assert!(
        e.starts_with("unsupported: strftime_now directive %Z"),
        "{e}"
    );
}

#[test]
fn a_checkpoint_without_a_chat_template_or_with_a_broken_one_is_refused_naming_the_file() {
    let dir = tempdir();
    let e = ChatTemplate::from_dir(&dir).unwrap_err().to_string();
    assert!(e.starts_with("invalid chat_template: "), "{e}");
    assert!(
        e.contains("neither chat_template.jinja nor a \"chat_template\" key"),
        "{e}"
    );

    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"chat_template": "{% for m in messages %}{{ m.content }}", "eos_token": {"content": "</s>"}}"#,
    )
    .unwrap();
    let e = ChatTemplate::from_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains("tokenizer_config.json (key \"chat_template\")"),
        "{e}"
    );
    assert!(e.contains("syntax error"), "{e}");

    std::fs::write(dir.join("tokenizer_config.json"), r#"{"chat_template": 3}"#).unwrap();
    let e = ChatTemplate::from_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("must be a string or a list"), "{e}");

    std::fs::write(dir.join("tokenizer_config.json"), r#"{"eos_token": 5}"#).unwrap();
    let e = ChatTemplate::from_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("key \"eos_token\""), "{e}");

    // Named templates: the one called "default"; AddedToken-form special tokens.
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ eos_token }}"}],
            "eos_token": {"content": "</s>", "lstrip": false}}"#,
    )
    .unwrap();
    let t = ChatTemplate::from_dir(&dir).unwrap();
    let m = [serde_json::json!({"role": "user", "content": "a"})];
    assert_eq!(t.render(&m, false).unwrap(), "</s>");
    // chat_template.jinja wins over the key, as transformers 5 loads it.
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{{ messages[0].content }}!",
    )
    .unwrap();
    let t = ChatTemplate::from_dir(&dir).unwrap();
    assert_eq!(t.render(&m, false).unwrap(), "a!");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "burn-ascend-chat-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn bad_chat_records_are_refused_naming_the_file_line_and_key() {
    let path = Path::new("data/chat.jsonl");
    let good = r#"{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}"#;
    let cases = [
        ("{not json", "not JSON"),
        ("[1, 2]", "a record must be a JSON object, got a list"),
        (r#"{"text": "plain"}"#, "key \"messages\": missing"),
        (
            r#"{"messages": "hi"}"#,
            "key \"messages\": must be a list, got a string",
        ),
        (r#"{"messages": []}"#, "key \"messages\": is empty"),
        (
            r#"{"messages": ["hi"]}"#,
            "key \"messages[0]\": must be an object",
        ),
        (
            r#"{"messages": [{"role": "user", "content": "q"}, {"role": 7, "content": "a"}]}"#,
            "key \"messages[1].role\": must be a string, got a number",
        ),
        (
            r#"{"messages": [{"content": "q"}]}"#,
            "key \"messages[0].role\": missing",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"type": "text"}]}]}"#,
            "key \"messages[0].content\": must be a string, got a list",
        ),
        (
            r#"{"messages": [{"role": "user"}]}"#,
            "key \"messages[0].content\": missing",
        ),
        (
            r#"{"messages": [{"role": "user", "content": "q"}]}"#,
            "key \"messages\": has no \"assistant\" message",
        ),
    ];
    for (bad, rule) in cases {
        // The bad record on line 3, after a good one and a blank line.
        let text = format!("{good}\n\n{bad}\n{good}\n");
        let e = parse_chat_jsonl(path, &text).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid --data: data/chat.jsonl line 3: "),
            "{bad}: {e}"
        );
        assert!(e.contains(rule), "{bad}: {e}");
    }
    assert_eq!(parse_chat_jsonl(path, good).unwrap().len(), 1);
    let e = parse_chat_jsonl(path, "\n\n").unwrap_err().to_string();
    assert!(e.contains("holds no record"), "{e}");
}

#[test]
fn a_template_that_rewrites_earlier_turns_is_refused_rather_than_guessed() {
    // Renders the last message differently from earlier ones: prefixes do not line up.
    let t = ChatTemplate::from_source(
        "{% for m in messages %}{% if loop.last %}[{{ m.content }}]{% else %}{{ m.content }}{% endif %}{% endfor %}",
        "inline",
        Vec::new(),
    )
    .unwrap();
    let m = [
        serde_json::json!({"role": "user", "content": "q"}),
        serde_json::json!({"role": "assistant", "content": "a"}),
    ];
    let e = assistant_spans(&t, &m).unwrap_err().to_string();
    assert!(e.starts_with("unsupported: inline: "), "{e}");
    assert!(e.contains("messages[1]"), "{e}");
}

#[test]
fn a_message_holding_the_reserved_generation_markers_is_refused() {
    let t = ChatTemplate::from_dir(&fixtures().join("generation")).unwrap();
    let m = [serde_json::json!({"role": "user", "content": "a\u{FDD0}b"})];
    let e = t.render(&m, false).unwrap_err().to_string();
    assert!(e.starts_with("invalid messages: "), "{e}");
    assert!(t.render(&[], false).is_err());
}
