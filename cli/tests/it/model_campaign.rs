//! The model side's bad-input campaign, as the ops' one (`campaign.rs`): a valid tiny
//! checkpoint, corpus and command line, mutated at random — `config.json` values and types,
//! the weight file (truncated, a byte of its header changed, a tensor of another dtype, of
//! another shape, dropped, added, holding NaN / ±inf), `tokenizer.json`, the `--data` file and
//! the flags — and run through the real `finetune` and `generate` (child processes of this
//! binary, see `model_examples`) under a time limit. Asserted for every case: exit 0 or exit 2
//! with stderr naming the culprit (the key, tensor, file or flag mutated); never a
//! panic (101), a signal (abort) or a hang; exit 0 only where the mutation leaves a usable
//! input (a refused-only mutation accepted is a silent acceptance).
//!
//! Replayable: each case's mutation comes from `seed + case`; a failure prints both.
//! `cargo test` runs 10 cases; `BURN_ASCEND_LONG=1` runs 300 (`BURN_ASCEND_MODEL_CAMPAIGN_CASES`
//! and `BURN_ASCEND_MODEL_CAMPAIGN_SEED` override both).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::Rng;
use crate::model_examples::{patch_config, patch_tensor, run_example, tiny_checkpoint};

const LIMIT: Duration = Duration::from_secs(60);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[(rng.next_u64() % items.len() as u64) as usize]
}

/// One mutation: what it did, whether only a refusal is correct, and what a refusal must name.
struct Mutation {
    what: String,
    must_refuse: bool,
    culprits: Vec<String>,
}

const KEYS: [&str; 12] = [
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "tie_word_embeddings",
    "model_type",
    "max_position_embeddings",
];
const TENSORS: [&str; 4] = [
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.mlp.down_proj.weight",
    "model.norm.weight",
];

/// Applies one random mutation to the case's checkpoint `ckpt`, corpus `data` or `args`.
fn mutate(rng: &mut Rng, ckpt: &Path, data: &Path, args: &mut Vec<String>) -> Mutation {
    let refuse = |what: String, culprits: &[&str]| Mutation {
        what,
        must_refuse: true,
        culprits: culprits.iter().map(|s| s.to_string()).collect(),
    };
    match rng.next_u64() % 12 {
        // config.json: a key set to a value of another size or type, or removed.
        0..=2 => {
            let key = *pick(rng, &KEYS);
            let values = [
                serde_json::json!(0),
                serde_json::json!(-1),
                serde_json::json!(1.5),
                serde_json::json!(1e12),
                serde_json::json!(u64::MAX),
                serde_json::json!(1e308),
                serde_json::json!("x"),
                serde_json::json!(null),
                serde_json::json!(true),
                serde_json::json!([]),
                serde_json::json!({}),
            ];
            let remove = rng.next_u64().is_multiple_of(6);
            let value = pick(rng, &values).clone();
            patch_config(ckpt, |v| {
                if remove {
                    v.as_object_mut().unwrap().remove(key);
                } else {
                    v[key] = value.clone();
                }
            });
            Mutation {
                what: if remove {
                    format!("config.json: {key} removed")
                } else {
                    format!("config.json: {key} = {value}")
                },
                // Some values stay usable (a larger rope_theta, a removed optional key).
                must_refuse: false,
                // tie_word_embeddings decides whether lm_head.weight must be present.
                culprits: vec![
                    key.into(),
                    "config".into(),
                    "layer_types".into(),
                    "lm_head".into(),
                ],
            }
        }
        // The weight file truncated.
        3 => {
            let path = ckpt.join("model.safetensors");
            let bytes = std::fs::read(&path).unwrap();
            let keep = (rng.next_u64() % bytes.len() as u64) as usize;
            std::fs::write(&path, &bytes[..keep]).unwrap();
            refuse(
                format!(
                    "model.safetensors truncated to {keep} of {} bytes",
                    bytes.len()
                ),
                &["model.safetensors"],
            )
        }
        // A byte of the weight file's header changed.
        4 => {
            let path = ckpt.join("model.safetensors");
            let mut bytes = std::fs::read(&path).unwrap();
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let at = (rng.next_u64() % (n as u64 + 8)) as usize;
            let to = (rng.next_u64() % 256) as u8;
            let was = bytes[at];
            bytes[at] = to;
            std::fs::write(&path, &bytes).unwrap();
            Mutation {
                what: format!("model.safetensors byte {at}: {was} -> {to}"),
                // A digit of a shape or offset may change into another valid one, caught by
                // the shape checks, or a name into another; a space into a space is harmless.
                must_refuse: false,
                culprits: vec![
                    "model.safetensors".into(),
                    "tensor".into(),
                    "config".into(),
                    "checkpoint".into(),
                ],
            }
        }
        // A tensor holding NaN or ±inf.
        5 => {
            let name = *pick(rng, &TENSORS);
            let bad = *pick(rng, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
            let at = rng.next_u64();
            patch_tensor(ckpt, name, |v| {
                let i = (at % v.len() as u64) as usize;
                v[i] = bad;
            });
            refuse(format!("{name} holds {bad}"), &[name])
        }
        // A tensor of another shape, dropped, or one added.
        6 => {
            let name = *pick(rng, &TENSORS);
            let kind = rng.next_u64() % 3;
            rewrite(ckpt, |tensors| match kind {
                0 => {
                    let t = tensors.iter_mut().find(|t| t.0 == name).unwrap();
                    let last = t.1.len() - 1;
                    t.1[last] -= 1;
                    let keep = t.1.iter().product::<usize>() * 4;
                    t.2.truncate(keep);
                }
                1 => tensors.retain(|t| t.0 != name),
                _ => tensors.push((format!("{name}.extra"), vec![2], vec![0; 8], "F32")),
            });
            // A tensor the model does not use loads with a warning, as transformers loads it;
            // `--strict` refuses it, which is what the campaign checks.
            if kind == 2 {
                args.push("--strict".into());
            }
            let what = [
                "shape - 1 in its last dim",
                "dropped",
                "with an extra tensor beside it (--strict)",
            ];
            refuse(format!("{name} {}", what[kind as usize]), &[name, "config"])
        }
        // A tensor stored as another dtype (its bytes reinterpreted).
        7 => {
            let name = *pick(rng, &TENSORS);
            let dtype = *pick(rng, &["F16", "BF16", "F64", "I32", "U8", "BOOL"]);
            rewrite(ckpt, |tensors| {
                let t = tensors.iter_mut().find(|t| t.0 == name).unwrap();
                let elem = match dtype {
                    "F16" | "BF16" => 2,
                    "F64" => 8,
                    _ => 4,
                };
                let count: usize = t.1.iter().product();
                t.2.resize(count * elem, 0x3c);
                if dtype == "U8" || dtype == "BOOL" {
                    t.2.truncate(count);
                }
                t.3 = dtype;
            });
            Mutation {
                what: format!("{name} stored as {dtype}"),
                // f16 / bf16 are loaded (converted): then a correct run.
                must_refuse: !matches!(dtype, "F16" | "BF16"),
                // Reinterpreted bytes may be huge: training then stops at its first step.
                culprits: vec![name.into(), "dtype".into(), "at step 0".into()],
            }
        }
        // tokenizer.json.
        8 => {
            let text = *pick(
                rng,
                &["", "{", "[]", "{\"model\": 3}", "null", "\u{0}\u{1}garbage"],
            );
            std::fs::write(ckpt.join("tokenizer.json"), text).unwrap();
            refuse(format!("tokenizer.json = {text:?}"), &["tokenizer.json"])
        }
        // The corpus.
        9 => {
            // (name, content, usable): one byte is a document of 3 tokens with its
            // separators, enough for a step.
            let (name, text, usable) = *pick(
                rng,
                &[
                    ("data.txt", "", false),
                    ("data.txt", "x", true),
                    ("data.jsonl", "{\"body\": 1}\n", false),
                    ("data.jsonl", "not json\n", false),
                    ("data.jsonl", "{\"text\": 3}\n", false),
                    ("data.jsonl", "[]\n", false),
                ],
            );
            let path = data.with_file_name(name);
            std::fs::write(&path, text).unwrap();
            let at = args.iter().position(|a| a == "--data");
            match at {
                Some(i) => args[i + 1] = path.to_str().unwrap().into(),
                None => {
                    args.push("--data".into());
                    args.push(path.to_str().unwrap().into());
                }
            }
            Mutation {
                what: format!("--data {name} = {text:?}"),
                must_refuse: !usable,
                culprits: vec!["--data".into()],
            }
        }
        // A flag set to a bad value.
        _ => {
            let (flag, value) = *pick(
                rng,
                &[
                    ("--seq-len", "0"),
                    ("--batch-tokens", "0"),
                    ("--steps", "2.5"),
                    ("--lr", "nan"),
                    ("--lr", "-1"),
                    ("--save-every", "0"),
                    ("--memory-budget", "0"),
                    ("--memory-budget", "lots"),
                    ("--seed", "-3"),
                ],
            );
            args.push(flag.into());
            args.push(value.into());
            refuse(format!("{flag} {value}"), &[flag])
        }
    }
}

type Tensors = Vec<(String, Vec<usize>, Vec<u8>, &'static str)>;

/// Rewrites `ckpt/model.safetensors` through `edit` of its (name, shape, bytes, dtype) list.
fn rewrite(ckpt: &Path, edit: impl FnOnce(&mut Tensors)) {
    use safetensors::{tensor::TensorView, Dtype, SafeTensors};
    let path = ckpt.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Tensors = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec(), "F32"))
        .collect();
    edit(&mut tensors);
    let dtype = |d: &str| match d {
        "F16" => Dtype::F16,
        "BF16" => Dtype::BF16,
        "F64" => Dtype::F64,
        "I32" => Dtype::I32,
        "U8" => Dtype::U8,
        "BOOL" => Dtype::BOOL,
        _ => Dtype::F32,
    };
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, b, d)| (n.clone(), TensorView::new(dtype(d), s.clone(), b).unwrap()))
        .collect();
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn mutated_checkpoints_configs_data_and_flags_never_panic_abort_hang_or_pass_silently() {
    let long = std::env::var_os("BURN_ASCEND_LONG").is_some();
    let cases = env_or(
        "BURN_ASCEND_MODEL_CAMPAIGN_CASES",
        if long { 300 } else { 10 },
    );
    let seed = env_or("BURN_ASCEND_MODEL_CAMPAIGN_SEED", 0x6d6f_64656c);
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    tiny_checkpoint(&base);
    let corpus = &burn_ascend_model::load::data::BUNDLED_CORPUS[..2000];
    let (mut accepted, mut refused) = (0, 0);
    let mut failures = Vec::new();
    for case in 0..cases {
        let mut rng = Rng(seed.wrapping_add(case));
        let dir = tmp.path().join(format!("case{case}"));
        let ckpt = dir.join("ckpt");
        std::fs::create_dir_all(&ckpt).unwrap();
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(base.join(f), ckpt.join(f)).unwrap();
        }
        let data = dir.join("data.txt");
        std::fs::write(&data, corpus).unwrap();
        let finetune = rng.next_u64().is_multiple_of(2);
        let mut args: Vec<String> = if finetune {
            let out = dir.join("out");
            [
                "--checkpoint",
                ckpt.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--data",
                data.to_str().unwrap(),
                "--steps",
                "1",
                "--batch-tokens",
                "32",
                "--seq-len",
                "16",
                "--no-samples",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        } else {
            ["--checkpoint", ckpt.to_str().unwrap(), "--max-new", "3"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        };
        let m = mutate(&mut rng, &ckpt, &data, &mut args);
        let which = if finetune { "finetune" } else { "generate" };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run_example(which, &argv, &[], LIMIT, false);
        let verdict = match (r.status, r.code()) {
            (None, _) => Some("hang".to_string()),
            (_, Some(0)) if m.must_refuse => Some("silent acceptance".into()),
            (_, Some(0)) => {
                accepted += 1;
                None
            }
            // (clap's usage errors take several lines, the examples' one.)
            (_, Some(2)) if m.culprits.iter().any(|c| r.stderr.contains(c.as_str())) => {
                refused += 1;
                None
            }
            (_, Some(2)) => Some(format!("refused without naming {:?}", m.culprits)),
            (_, Some(101)) => Some("panic".into()),
            (_, Some(c)) => Some(format!("exit {c}")),
            (_, None) => Some(format!("signal {:?}", r.signal())),
        };
        if let Some(v) = verdict {
            failures.push(format!(
                "seed {seed} case {case} ({which}, {}): {v}\n{}",
                m.what,
                r.tail()
            ));
        }
    }
    eprintln!(
        "model campaign: seed {seed}, {cases} cases: {accepted} accepted, {refused} refused \
         naming the culprit, {} failures; {:.1} s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
