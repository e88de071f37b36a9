//! Fine-tuning on instruction data and serving with a chat template: a
//! pretrained fixture (`model/tests/fixtures/hf/qwen3`, vocabulary 96) with the chat fixture's
//! tokenizer and Qwen2-style template (`model/tests/fixtures/chat`, made by
//! `tools/fixtures/gen_chat_fixtures.py`; the renderings and masks are checked against
//! transformers in the model crate's `chat::tests`). The loss is checked against one computed
//! here in f64 from the logits, over the assistant's tokens only.

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend_model::load::chat::instruct::{chat_stop_ids, prompt_ids};
use burn_ascend_model::load::data::training_packer;
use burn_ascend_model::train::{init_model, train, Init, TrainOptions};
use burn_ascend_model::{ChatTemplate, Tokenizer};

const CHAT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/chat");
const HF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf");

/// A checkpoint folder as the Hub has one: qwen3's weights and config, the chat tokenizer and
/// the qwen2-style `tokenizer_config.json` (with its `chat_template`).
fn chat_checkpoint() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(Path::new(HF).join("qwen3").join(f), dir.path().join(f)).unwrap();
    }
    std::fs::copy(
        Path::new(CHAT).join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    std::fs::copy(
        Path::new(CHAT).join("qwen2/tokenizer_config.json"),
        dir.path().join("tokenizer_config.json"),
    )
    .unwrap();
    dir
}

fn data() -> PathBuf {
    Path::new(CHAT).join("chat.jsonl")
}

#[test]
fn chat_finetuning_starts_at_the_assistant_only_loss_of_the_pretrained_weights_and_lowers_it() {
    type A = Autodiff<NdArray>;
    let ck = chat_checkpoint();
    let tokenizer = Tokenizer::from_file(&ck.path().join("tokenizer.json")).unwrap();
    let packer = || training_packer(Some(&data()), Some(ck.path()), &tokenizer, 96, 64, 5).unwrap();
    let device = Default::default();
    let out = tempfile::tempdir().unwrap();
    let (model, state) =
        init_model::<A>(&Init::Checkpoint(ck.path().into()), out.path(), &device).unwrap();

    // The first batch's loss, from the logits in f64: the mean over the targets that are the
    // assistant's tokens, and (to show the mask matters) over all targets.
    let batch = packer().next_batch();
    let mask = batch
        .loss_mask
        .clone()
        .expect("chat batches carry a loss mask");
    let kept = mask.iter().filter(|&&m| m).count();
    assert!(kept > 0 && kept < mask.len(), "{kept} of {}", mask.len());
    let t = batch.tokens.len();
    let tokens =
        Tensor::<A, 1, Int>::from_data(TensorData::new(batch.tokens.clone(), [t]), &device);
    let logits: Vec<f32> = model
        .forward_packed(tokens, &batch.cu_seqlens)
        .unwrap()
        .into_data()
        .to_vec()
        .unwrap();
    let v = logits.len() / t;
    let nll: Vec<f64> = (0..t)
        .map(|i| {
            let row = &logits[i * v..(i + 1) * v];
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
            let lse = max
                + row
                    .iter()
                    .map(|&x| (x as f64 - max).exp())
                    .sum::<f64>()
                    .ln();
            lse - row[batch.targets[i] as usize] as f64
        })
        .collect();
    let assistant_only = nll
        .iter()
        .zip(&mask)
        .filter(|(_, &m)| m)
        .map(|(l, _)| l)
        .sum::<f64>()
        / kept as f64;
    let every_token = nll.iter().sum::<f64>() / t as f64;

    let opts = TrainOptions {
        warmup_steps: None,
        total_steps: 10,
        stop_after: None,
        lr: 1e-2,
        weight_decay: 0.0,
        clip_norm: 1.0,
        seed: 5,
        out: out.path().into(),
        save_every: 100,
    };
    let (_, run) = train(model, state, false, &mut packer(), &opts, |_| {}).unwrap();
    let l = &run.losses;
    eprintln!(
        "chat finetune: assistant-only {assistant_only}, every token {every_token}, run {l:?}"
    );
    assert!(
        (l[0] as f64 - assistant_only).abs() <= 1e-5,
        "{} vs {assistant_only}",
        l[0]
    );
    assert!(
        (l[0] as f64 - every_token).abs() > 1e-2,
        "{} vs the every-token mean {every_token}",
        l[0]
    );
    let tail = l[l.len() - 3..].iter().sum::<f32>() / 3.0;
    assert!(tail < l[0] - 1.0, "{l:?}");
}

#[test]
fn chat_records_are_checked_before_training_naming_the_file_line_and_key() {
    let ck = chat_checkpoint();
    let tokenizer = Tokenizer::from_file(&ck.path().join("tokenizer.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    let good = std::fs::read_to_string(data()).unwrap();
    let first = good.lines().next().unwrap();
    let packer = |text: &str, checkpoint: Option<&Path>| {
        std::fs::write(&path, text).unwrap();
        training_packer(Some(&path), checkpoint, &tokenizer, 96, 64, 5)
            .unwrap_err()
            .to_string()
    };
    let e = packer(
        &format!("{first}\n{{\"messages\": [{{\"role\": \"user\", \"content\": 3}}]}}\n"),
        Some(ck.path()),
    );
    assert!(e.starts_with("invalid --data: "), "{e}");
    assert!(
        e.contains("bad.jsonl line 2: key \"messages[0].content\": must be a string"),
        "{e}"
    );
    // A plain-text record among chat ones.
    let e = packer(
        &format!("{first}\n\n{{\"text\": \"x\"}}\n"),
        Some(ck.path()),
    );
    assert!(
        e.contains("bad.jsonl line 3: key \"messages\": missing"),
        "{e}"
    );
    // Chat records need a template.
    let e = packer(first, None);
    assert!(e.contains("pass --checkpoint DIR"), "{e}");
    // A conversation the template refuses (raise_exception), named by its line.
    std::fs::copy(
        Path::new(CHAT).join("llama3/tokenizer_config.json"),
        ck.path().join("tokenizer_config.json"),
    )
    .unwrap();
    let e = packer(
        &format!(
            "{first}\n{{\"messages\": [{{\"role\": \"user\", \"content\": \"a\"}}, {{\"role\": \"tool\", \"content\": \"b\"}}, {{\"role\": \"assistant\", \"content\": \"c\"}}]}}\n"
        ),
        Some(ck.path()),
    );
    assert!(
        e.contains("bad.jsonl line 2: invalid chat_template: "),
        "{e}"
    );
    assert!(
        e.contains("Only user and assistant roles are supported"),
        "{e}"
    );
}

#[test]
fn chat_generation_prefills_the_generation_prompt_and_stops_at_the_end_of_turn() {
    let ck = chat_checkpoint();
    let tokenizer = Tokenizer::from_file(&ck.path().join("tokenizer.json")).unwrap();
    let template = ChatTemplate::from_dir(ck.path()).unwrap();
    let ids = prompt_ids(&template, &tokenizer, "Hi there!").unwrap();
    let text = tokenizer.decode(&ids);
    assert_eq!(
        text,
        "<|im_start|>system\nYou are Qwen, a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n"
    );
    // qwen3's config has no eos_token_id: the tokenizer's eos_token (<|im_end|>, id 6) only.
    let im_end = tokenizer.token_id("<|im_end|>").unwrap();
    assert_eq!(im_end, 6);
    assert_eq!(
        chat_stop_ids(ck.path(), &template, &tokenizer).unwrap(),
        vec![im_end]
    );
    // A generation config's list comes first, without repeating the tokenizer's.
    std::fs::write(
        ck.path().join("generation_config.json"),
        r#"{"eos_token_id": [2, 6, 90]}"#,
    )
    .unwrap();
    assert_eq!(
        chat_stop_ids(ck.path(), &template, &tokenizer).unwrap(),
        vec![2, 6, 90]
    );
    std::fs::write(
        ck.path().join("generation_config.json"),
        r#"{"eos_token_id": 4}"#,
    )
    .unwrap();
    assert_eq!(
        chat_stop_ids(ck.path(), &template, &tokenizer).unwrap(),
        vec![4, im_end]
    );
}

#[test]
fn long_conversations_are_windowed_onto_assistant_tokens_and_masks_follow_concatenation() {
    use burn_ascend_model::load::data::concat_batches;
    let ck = chat_checkpoint();
    let tokenizer = Tokenizer::from_file(&ck.path().join("tokenizer.json")).unwrap();
    // Sequences of at most 8 tokens out of conversations of 40 to 90: every window must still
    // hold a target the loss counts, and the masks line up with the targets.
    let mut p = training_packer(Some(&data()), Some(ck.path()), &tokenizer, 64, 8, 3).unwrap();
    let batches: Vec<_> = (0..40).map(|_| p.next_batch()).collect();
    for b in &batches {
        let mask = b.loss_mask.as_ref().unwrap();
        assert_eq!(mask.len(), b.targets.len());
        for w in b.cu_seqlens.windows(2) {
            let (s, e) = (w[0] as usize, w[1] as usize);
            assert!(e - s <= 8);
            assert!(
                mask[s..e].iter().any(|&m| m),
                "a window without assistant tokens"
            );
        }
    }
    assert!(batches
        .iter()
        .any(|b| b.loss_mask.as_ref().unwrap().iter().any(|&m| !m)));
    let joined = concat_batches(&batches[..2]);
    let want: Vec<bool> = batches[..2]
        .iter()
        .flat_map(|b| b.loss_mask.clone().unwrap())
        .collect();
    assert_eq!(joined.loss_mask, Some(want));
    assert_eq!(joined.targets.len(), joined.loss_mask.unwrap().len());
}

/// The masked loss and its gradient w.r.t. the logits on `B`, against f64: the mean of the kept
/// targets' negative log-likelihoods; d/dlogits = (softmax − onehot) / kept on kept rows, 0 on
/// the others.
fn masked_loss_matches_f64<B: burn::tensor::backend::AutodiffBackend>(device: &B::Device) {
    use burn_ascend_model::train::masked_cross_entropy;
    let (t, v) = (6, 5);
    let mut rng = burn_ascend_model::load::data::SplitMix(11);
    let logits: Vec<f32> = (0..t * v)
        .map(|_| (rng.unit() * 6.0 - 3.0) as f32)
        .collect();
    let targets: Vec<i64> = vec![0, 4, 2, 2, 1, 3];
    let mask = [true, false, true, true, false, false];
    let x =
        Tensor::<B, 2>::from_data(TensorData::new(logits.clone(), [t, v]), device).require_grad();
    let y = Tensor::<B, 1, Int>::from_data(TensorData::new(targets.clone(), [t]), device);
    let loss = masked_cross_entropy(x.clone(), y, &mask);
    let got: f32 = loss.clone().into_data().to_vec::<f32>().unwrap()[0];
    let grads = loss.backward();
    let grad: Vec<f32> = x.grad(&grads).unwrap().into_data().to_vec().unwrap();
    let mut want = 0f64;
    for i in 0..t {
        let row: Vec<f64> = logits[i * v..(i + 1) * v]
            .iter()
            .map(|&x| x as f64)
            .collect();
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|x| (x - max).exp()).sum();
        if mask[i] {
            want += (max + z.ln() - row[targets[i] as usize]) / 3.0;
        }
        for (c, &x) in row.iter().enumerate() {
            let onehot = if c == targets[i] as usize { 1.0 } else { 0.0 };
            let g = if mask[i] {
                ((x - max).exp() / z - onehot) / 3.0
            } else {
                0.0
            };
            let d = (grad[i * v + c] as f64 - g).abs();
            assert!(d <= 1e-6, "row {i} col {c}: {} vs {g}", grad[i * v + c]);
            if !mask[i] {
                assert_eq!(grad[i * v + c], 0.0, "a masked row has a gradient");
            }
        }
    }
    assert!((got as f64 - want).abs() <= 1e-6, "{got} vs {want}");
}

#[test]
fn the_masked_loss_and_its_gradient_count_only_kept_targets_on_ndarray_and_ascend_simulation() {
    masked_loss_matches_f64::<Autodiff<NdArray>>(&Default::default());
    masked_loss_matches_f64::<Autodiff<burn_ascend::backend::Ascend>>(
        &burn_ascend::backend::AscendDevice::sim(),
    );
}
