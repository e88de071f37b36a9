//! The model side refuses what it cannot use, before using it, exiting 2 with one line that
//! names the culprit: non-finite weights (unless `--allow-non-finite-weights`), a training
//! step whose loss or gradient norm is not finite (the last published checkpoint kept), a
//! config.json whose sizes disagree with the tensors present (before the model of that size is
//! allocated), and requests above the memory budget (`--max-new`, `--batch-tokens`). The
//! examples run as child processes (see `model_examples`).

use std::path::Path;
use std::time::Duration;

use crate::model_examples::{patch_config, patch_tensor, run_example, tiny_checkpoint, ExampleRun};
use burn_ascend_model::run_state::published::Published;

const LIMIT: Duration = Duration::from_secs(60);

fn generate(ckpt: &Path, extra: &[&str]) -> ExampleRun {
    let c = ckpt.to_str().unwrap();
    let mut args = vec!["--checkpoint", c, "--greedy"];
    if !extra.contains(&"--max-new") {
        args.extend(["--max-new", "3"]);
    }
    args.extend_from_slice(extra);
    run_example("generate", &args, &[], LIMIT, false)
}

fn finetune(ckpt: &Path, out: &Path, extra: &[&str]) -> ExampleRun {
    let data = out.with_extension("txt");
    std::fs::write(
        &data,
        &burn_ascend_model::load::data::BUNDLED_CORPUS[..3000],
    )
    .unwrap();
    let (c, o, d) = (
        ckpt.to_str().unwrap(),
        out.to_str().unwrap(),
        data.to_str().unwrap(),
    );
    let mut args = vec![
        "--checkpoint",
        c,
        "--out",
        o,
        "--data",
        d,
        "--steps",
        "2",
        "--seq-len",
        "16",
        "--no-samples",
    ];
    if !extra.contains(&"--batch-tokens") {
        args.extend(["--batch-tokens", "32"]);
    }
    args.extend_from_slice(extra);
    run_example("finetune", &args, &[], LIMIT, false)
}

/// Exit 2 and one stderr line holding `needle`.
fn refused(r: &ExampleRun, needle: &str) {
    assert_eq!(r.code(), Some(2), "{}", r.tail());
    assert!(
        r.stderr.lines().any(|l| l.contains(needle)),
        "wanted {needle:?}:\n{}",
        r.tail()
    );
}

#[test]
fn non_finite_weights_are_refused_naming_the_tensor_and_index_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("nan");
    tiny_checkpoint(&ckpt);
    let name = "model.layers.0.mlp.up_proj.weight";
    // [24, 16]: flat 37 is row 2, column 5.
    patch_tensor(&ckpt, name, |v| v[37] = f32::NAN);
    let msg = format!("tensor '{name}' holds NaN at index [2, 5]");
    refused(&generate(&ckpt, &[]), &msg);
    let out = tmp.path().join("out");
    refused(&finetune(&ckpt, &out, &[]), &msg);
    // The opt-out loads them; training then stops at its first step, publishing nothing.
    let r = generate(&ckpt, &["--allow-non-finite-weights"]);
    assert!(r.ok(), "{}", r.tail());
    let r = finetune(&ckpt, &out, &["--allow-non-finite-weights"]);
    refused(&r, "the loss became NaN at step 0");
    assert!(Published::open(&out).is_err());
    // An infinity, in the embedding ([256, 16]: flat 16 · 3 + 1 is row 3, column 1).
    let ckpt = tmp.path().join("inf");
    tiny_checkpoint(&ckpt);
    patch_tensor(&ckpt, "model.embed_tokens.weight", |v| {
        v[49] = f32::NEG_INFINITY
    });
    refused(
        &generate(&ckpt, &[]),
        "tensor 'model.embed_tokens.weight' holds -inf at index [3, 1]",
    );
}

#[test]
fn a_diverging_run_stops_at_the_step_whose_loss_is_not_finite_keeping_the_last_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("start");
    tiny_checkpoint(&ckpt);
    let out = tmp.path().join("out");
    // AdamW moves every weight by about lr on the first step: 1e30 makes them all huge.
    let r = finetune(&ckpt, &out, &["--lr", "1e30", "--save-every", "1"]);
    refused(&r, "became");
    let line = r.stderr.lines().find(|l| l.contains("became")).unwrap();
    let step: usize = line
        .split(" at step ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no step in {line:?}"));
    assert!(step >= 1, "{line}");
    // The checkpoint of the last finished step is published, whole.
    assert_eq!(Published::open(&out).unwrap().step(), step, "{line}");
}

#[test]
fn a_gradient_norm_that_overflows_stops_training_before_the_optimizer_step() {
    use burn::backend::{Autodiff, NdArray};
    use burn_ascend_model::train::{init_model, train, Init, TrainOptions};
    use burn_ascend_model::{load::data::documents_from_text, Packer, Tokenizer};
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("start");
    tiny_checkpoint(&ckpt);
    // up × 1e25 then down × 1e-25: the forward (and the loss) is unchanged, the gradient of
    // down_proj is about 1e25 times larger, its square past f32's range.
    patch_tensor(&ckpt, "model.layers.0.mlp.up_proj.weight", |v| {
        v.iter_mut().for_each(|x| *x *= 1e25)
    });
    patch_tensor(&ckpt, "model.layers.0.mlp.down_proj.weight", |v| {
        v.iter_mut().for_each(|x| *x *= 1e-25)
    });
    let out = tmp.path().join("out");
    let device = Default::default();
    let (model, state) =
        init_model::<Autodiff<NdArray>>(&Init::Checkpoint(ckpt), &out, &device).unwrap();
    let docs = documents_from_text(&burn_ascend_model::load::data::BUNDLED_CORPUS[..3000]);
    let mut packer = Packer::new(&docs, &Tokenizer::Bytes, 32, 16, 1).unwrap();
    let opts = TrainOptions {
        warmup_steps: None,
        total_steps: 2,
        stop_after: None,
        lr: 1e-3,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: 1,
        out: out.clone(),
        save_every: 1,
    };
    let mut losses = Vec::new();
    let e = train(model, state, false, &mut packer, &opts, |r| {
        losses.push(r.loss)
    })
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("the gradient norm became inf at step 0 (loss "),
        "{e}"
    );
    assert!(losses.is_empty(), "a step was taken: {losses:?}");
    assert!(Published::open(&out).is_err(), "a checkpoint was published");
}

#[test]
fn a_config_whose_sizes_disagree_with_the_tensors_is_refused_before_allocating() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, u64, &str); 4] = [
        (
            "hidden_size",
            10_000_000_000,
            "key 'hidden_size' is 10000000000 but tensor 'model.embed_tokens.weight' has shape [256, 16]",
        ),
        (
            "vocab_size",
            1_000_000_000,
            "key 'vocab_size' is 1000000000 but tensor 'model.embed_tokens.weight'",
        ),
        (
            "intermediate_size",
            100_000_000_000,
            "key 'intermediate_size' is 100000000000 but tensor 'model.layers.0.mlp.gate_proj.weight' has shape [24, 16]",
        ),
        (
            "num_hidden_layers",
            1_000_000,
            "no tensor 'model.layers.999999.input_layernorm.weight', which config.json implies (num_hidden_layers 1000000)",
        ),
    ];
    for (key, value, needle) in cases {
        let ckpt = tmp.path().join(key);
        tiny_checkpoint(&ckpt);
        patch_config(&ckpt, |v| {
            v[key] = serde_json::json!(value);
            // Else refused first for its one layer type per layer.
            v.as_object_mut().unwrap().remove("layer_types");
        });
        refused(&generate(&ckpt, &[]), needle);
        refused(&finetune(&ckpt, &tmp.path().join("out"), &[]), needle);
    }
}

#[test]
fn requests_above_the_memory_budget_are_refused_naming_the_flag_and_the_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("start");
    tiny_checkpoint(&ckpt);
    // 1e11 tokens of a 1-layer cache with 1 KV head of 8: 6.4e12 bytes per sequence.
    let r = generate(&ckpt, &["--max-new", "100000000000"]);
    refused(
        &r,
        "invalid --max-new: 100000000000 new tokens for 4 sequence(s)",
    );
    refused(&r, "above the memory budget of");
    // A stated budget: 64 new tokens of 4 prompts take 5+ blocks of 16 × 64 bytes.
    refused(
        &generate(&ckpt, &["--max-new", "64", "--memory-budget", "1KiB"]),
        "above the memory budget of 1.0 KiB",
    );
    let r = generate(&ckpt, &["--max-new", "64", "--memory-budget", "64MiB"]);
    assert!(r.ok(), "{}", r.tail());
    let out = tmp.path().join("out");
    refused(
        &finetune(&ckpt, &out, &["--batch-tokens", "1000000000000"]),
        "invalid --batch-tokens: a training step of 1000000000000 tokens needs",
    );
    refused(
        &finetune(&ckpt, &out, &["--memory-budget", "12 parsecs"]),
        "unknown unit",
    );
}

/// `dir/model.safetensors` with one more f32 tensor, `name` of `shape`.
fn add_tensor(dir: &Path, name: &str, shape: &[usize]) {
    use safetensors::{tensor::TensorView, Dtype, SafeTensors};
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let extra: Vec<u8> = vec![0u8; 4 * shape.iter().product::<usize>()];
    let mut views: Vec<(String, TensorView<'_>)> = st.tensors();
    views.push((
        name.to_string(),
        TensorView::new(Dtype::F32, shape.to_vec(), &extra).unwrap(),
    ));
    let out = safetensors::serialize(views, None).unwrap();
    std::fs::write(&path, out).unwrap();
}

#[test]
fn a_tensor_the_model_does_not_use_is_ignored_with_a_warning_and_refused_under_strict() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("extra");
    tiny_checkpoint(&ckpt);
    add_tensor(&ckpt, "model.layers.0.mlp.extra.weight", &[2, 3]);
    // As transformers loads it: one warning line naming how many and which.
    let r = generate(&ckpt, &[]);
    assert!(r.ok(), "{}", r.tail());
    let warned = "warning: checkpoint: ignored 1 tensor(s) not used by the architecture \
                  config.json describes: model.layers.0.mlp.extra.weight";
    assert!(r.stderr.lines().any(|l| l == warned), "{}", r.tail());
    // `--strict` refuses it, naming it, before anything runs.
    refused(
        &generate(&ckpt, &["--strict"]),
        "tensor model.layers.0.mlp.extra.weight (not part of the architecture",
    );
    let out = tmp.path().join("out");
    refused(
        &finetune(&ckpt, &out, &["--strict"]),
        "tensor model.layers.0.mlp.extra.weight (not part of the architecture",
    );
}
