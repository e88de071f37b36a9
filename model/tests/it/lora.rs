//! LoRA: adapters against PEFT's own (tools/fixtures/gen_peft_fixture.py on the
//! tiny Llama fixture), PEFT's file format both ways, frozen bf16 base, optimizer state of the
//! adapters only, resume, data parallelism.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, NdArray};
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::{Int, Tensor, TensorData};
use burn_ascend_model::load::data::documents_from_text;
use burn_ascend_model::model::hf_checkpoint::{load_hf, named_weights};
use burn_ascend_model::model::lora::{self, LoraSettings, LoraTarget};
use burn_ascend_model::model::peft::{self, init_lora, load_adapter, save_adapter};
use burn_ascend_model::train::{train, TrainOptions, TrainState};
use burn_ascend_model::{cross_entropy, Packer, Tokenizer, Transformer};
use burn_ascend_test_support::max_abs_diff;
use safetensors::SafeTensors;

type B = NdArray;
type Ad = Autodiff<NdArray>;

/// f32 logits against PEFT's f32 logits (the base fixture's own tolerance, hf_checkpoint.rs).
const F32_LOGITS: f32 = 2e-5;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn base_dir() -> PathBuf {
    fixtures().join("hf/llama")
}

fn adapter_dir() -> PathBuf {
    fixtures().join("peft/llama_lora")
}

/// `expected.safetensors` of the PEFT fixture: input ids `[2, 12]` and the named logits.
fn expected(name: &str) -> (Vec<i64>, Vec<f32>) {
    let bytes = std::fs::read(adapter_dir().join("expected.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let ids = st.tensor("input_ids").unwrap();
    let ids = ids
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let l = st.tensor(name).unwrap();
    let l = l
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (ids, l)
}

fn logits(m: &Transformer<B>, ids: &[i64]) -> Vec<f32> {
    let device = Default::default();
    let tokens = Tensor::<B, 1, Int>::from_data(TensorData::new(ids.to_vec(), [24]), &device);
    m.forward_packed(tokens, &[0, 12, 24])
        .unwrap()
        .into_data()
        .to_vec::<f32>()
        .unwrap()
}

#[test]
fn peft_adapter_gives_peft_logits_and_merged_gives_peft_merged_logits() {
    let device = Default::default();
    let (ids, want) = expected("logits");
    let base = load_hf::<B>(&base_dir(), &device).unwrap();
    let base_gap = max_abs_diff(&logits(&base, &ids), &want);
    let adapted = load_adapter(base, &adapter_dir(), &device).unwrap();
    let gap = max_abs_diff(&logits(&adapted, &ids), &want);
    let (_, want_merged) = expected("logits_merged");
    let merged = lora::merge(adapted);
    assert!(
        lora::settings(&merged).is_none(),
        "merge removes the adapters"
    );
    let merged_gap = max_abs_diff(&logits(&merged, &ids), &want_merged);
    eprintln!(
        "PEFT logits: adapted gap {gap:.2e}, merged gap {merged_gap:.2e}, base alone {base_gap:.2}"
    );
    // The adapter must matter, or matching PEFT would prove nothing.
    assert!(
        base_gap > 1.0,
        "the adapter moves PEFT's logits by {base_gap} only"
    );
    assert!(gap <= F32_LOGITS, "adapted logits gap {gap}");
    assert!(merged_gap <= F32_LOGITS, "merged logits gap {merged_gap}");
}

#[test]
fn peft_adapter_saved_by_us_has_peft_names_shapes_values_and_config() {
    let device = Default::default();
    let base = load_hf::<B>(&base_dir(), &device).unwrap();
    let adapted = load_adapter(base, &adapter_dir(), &device).unwrap();
    let out = tempfile::tempdir().unwrap();
    save_adapter(&adapted, out.path()).unwrap();
    if let Ok(keep) = std::env::var("BURN_ASCEND_KEEP_ADAPTER") {
        // For `python tools/fixtures/gen_peft_fixture.py --check DIR` (PEFT loads ours).
        std::fs::create_dir_all(&keep).unwrap();
        for f in ["adapter_config.json", "adapter_model.safetensors"] {
            std::fs::copy(out.path().join(f), Path::new(&keep).join(f)).unwrap();
        }
    }
    let read = |dir: &Path| {
        let bytes = std::fs::read(dir.join("adapter_model.safetensors")).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        st.tensors()
            .into_iter()
            .map(|(n, v)| {
                (
                    n,
                    (
                        format!("{:?}", v.dtype()),
                        v.shape().to_vec(),
                        v.data().to_vec(),
                    ),
                )
            })
            .collect::<HashMap<_, _>>()
    };
    let (ours, theirs) = (read(out.path()), read(&adapter_dir()));
    assert_eq!(ours.len(), 2 * 7 * 2, "2 layers × 7 targets × (A, B)");
    let mut names: Vec<_> = ours.keys().collect();
    names.sort();
    assert_eq!(
        names.iter().map(|n| n.as_str()).collect::<HashSet<_>>(),
        theirs.keys().map(|n| n.as_str()).collect::<HashSet<_>>()
    );
    for (name, t) in &theirs {
        assert_eq!(&ours[name], t, "{name}: dtype, shape or bytes differ");
    }
    let json = |dir: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("adapter_config.json")).unwrap())
            .unwrap()
    };
    let (ours, theirs) = (json(out.path()), json(&adapter_dir()));
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&ours), keys(&theirs));
    // Every value PEFT wrote, ours too (the base path is the one the fixture names).
    assert_eq!(ours, theirs);
}

#[test]
fn unknown_lora_target_and_peft_features_we_lack_are_refused_naming_them() {
    let e = LoraTarget::parse_list("q_proj,qkv_proj", "--lora-targets").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("--lora-targets") && msg.contains("'qkv_proj'"),
        "{msg}"
    );
    assert_eq!(
        LoraTarget::parse_list("v_proj,q_proj,q_proj", "--lora-targets").unwrap(),
        vec![LoraTarget::QProj, LoraTarget::VProj]
    );
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in [
        ("use_rslora", serde_json::json!(true)),
        ("use_dora", serde_json::json!(true)),
        ("bias", serde_json::json!("all")),
        ("rank_pattern", serde_json::json!({"q_proj": 8})),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(adapter_dir().join("adapter_config.json")).unwrap(),
        )
        .unwrap();
        v[key] = value;
        std::fs::write(dir.path().join("adapter_config.json"), v.to_string()).unwrap();
        let msg = peft::read_config(dir.path()).unwrap_err().to_string();
        assert!(
            msg.starts_with("unsupported") && msg.contains(key),
            "{key}: {msg}"
        );
    }
    // A shape that does not fit the model: the loader names the tensor.
    let settings = LoraSettings {
        rank: 3,
        alpha: 6.0,
        dropout: 0.0,
        targets: vec![LoraTarget::QProj],
        base_model: String::new(),
    };
    let device = Default::default();
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(adapter_dir().join("adapter_config.json")).unwrap(),
    )
    .unwrap();
    v["r"] = serde_json::json!(settings.rank);
    std::fs::write(dir.path().join("adapter_config.json"), v.to_string()).unwrap();
    std::fs::copy(
        adapter_dir().join("adapter_model.safetensors"),
        dir.path().join("adapter_model.safetensors"),
    )
    .unwrap();
    let base = load_hf::<B>(&base_dir(), &device).unwrap();
    let msg = load_adapter(base, dir.path(), &device)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("must be [3, "), "{msg}");
}

/// The bundled text upper-cased and cut to bytes below the fixture's vocabulary of 96.
fn docs() -> Vec<String> {
    let text: String = burn_ascend_model::load::data::BUNDLED_CORPUS[..12_000]
        .to_uppercase()
        .chars()
        .map(|c| if (c as u32) < 96 { c } else { ' ' })
        .collect();
    documents_from_text(&text)
}

fn settings(targets: &str) -> LoraSettings {
    LoraSettings {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: LoraTarget::parse_list(targets, "--lora-targets").unwrap(),
        base_model: base_dir().display().to_string(),
    }
}

fn opts(out: &Path, total: usize, stop_after: Option<usize>) -> TrainOptions {
    TrainOptions {
        warmup_steps: None,
        total_steps: total,
        stop_after,
        lr: 2e-2,
        weight_decay: 0.0,
        clip_norm: 1.0,
        seed: 5,
        out: out.into(),
        save_every: 100,
    }
}

fn base_weights(m: &Transformer<Ad>) -> Vec<(String, Vec<u32>)> {
    base_weights_on(m)
}

#[test]
fn lora_finetuning_lowers_the_loss_and_leaves_the_base_bit_identical() {
    let device = Default::default();
    let out = tempfile::tempdir().unwrap();
    let (model, state) = init_lora::<Ad>(
        &base_dir(),
        Some(&settings("all-linear")),
        1,
        out.path(),
        &device,
    )
    .unwrap();
    let before = base_weights(&model);
    // The frozen matrices hold bf16 values (NdArray has no bf16: bf16-rounded f32).
    let (_, q) = &before
        .iter()
        .find(|(n, _)| n == "model.layers.0.self_attn.q_proj.weight")
        .unwrap();
    assert!(
        q.iter().all(|b| b & 0xFFFF == 0),
        "q_proj is not bf16-rounded"
    );
    let mut packer = Packer::new(&docs(), &Tokenizer::Bytes, 96, 48, 5).unwrap();
    let (model, state) = train(
        model,
        state,
        false,
        &mut packer,
        &opts(out.path(), 8, None),
        |_| {},
    )
    .unwrap();
    let l = &state.losses;
    eprintln!("LoRA losses {l:?}");
    assert!(l[7] < 0.8 * l[0], "loss did not fall: {l:?}");
    assert_eq!(base_weights(&model), before, "a base weight changed");
    // Only the adapters were saved, in PEFT's format, in the published checkpoint (and
    // exported into the run's folder for `generate --adapter`).
    let published = burn_ascend_model::run_state::published::Published::open(out.path()).unwrap();
    for f in [
        "adapter_config.json",
        "adapter_model.safetensors",
        "optim.mpk",
        "state.json",
    ] {
        assert!(published.dir.join(f).exists(), "{f} missing");
    }
    for f in ["adapter_config.json", "adapter_model.safetensors"] {
        assert!(out.path().join(f).exists(), "{f} not exported");
    }
    assert!(!published.dir.join("model.safetensors").exists());
    assert!(!out.path().join("model.safetensors").exists());
}

#[test]
fn optimizer_state_holds_only_the_adapter_tensors() {
    let device = Default::default();
    let out = tempfile::tempdir().unwrap();
    let (model, _) = init_lora::<Ad>(
        &base_dir(),
        Some(&settings("q_proj,v_proj,down_proj")),
        1,
        out.path(),
        &device,
    )
    .unwrap();
    let adapter_ids: HashSet<String> = lora::adapters(&model)
        .iter()
        .flat_map(|(_, _, a)| [a.lora_a.id.to_string(), a.lora_b.id.to_string()])
        .collect();
    assert_eq!(adapter_ids.len(), 2 * 3 * 2);
    let mut optim = burn_ascend_model::train::optim::FusedAdamW::<Ad>::new(1e-4)
        .unwrap()
        .init::<Transformer<Ad>>();
    let ids: Vec<i64> = (0..32).map(|i| (i * 7 % 90) as i64).collect();
    let tokens =
        Tensor::<Ad, 1, Int>::from_data(TensorData::new(ids[..31].to_vec(), [31]), &device);
    let targets =
        Tensor::<Ad, 1, Int>::from_data(TensorData::new(ids[1..].to_vec(), [31]), &device);
    let loss = cross_entropy(model.forward_packed(tokens, &[0, 31]).unwrap(), targets);
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    assert_eq!(
        grads.len(),
        adapter_ids.len(),
        "gradients of frozen weights exist"
    );
    let _model = optim.step(1e-3, model, grads);
    let record = optim.to_record();
    let state_ids: HashSet<String> = record.keys().map(|id| id.to_string()).collect();
    assert_eq!(state_ids, adapter_ids);
}

#[test]
fn resumed_lora_run_continues_the_loss_curve_exactly() {
    let device = Default::default();
    let run = |out: &Path, stop_after: Option<usize>, resume: bool| {
        let s = settings("q_proj,k_proj,v_proj,o_proj");
        let (model, state) =
            init_lora::<Ad>(&base_dir(), (!resume).then_some(&s), 7, out, &device).unwrap();
        let mut packer = Packer::new(&docs(), &Tokenizer::Bytes, 64, 32, 9).unwrap();
        let o = TrainOptions {
            lr: 1e-2,
            ..opts(out, 5, stop_after)
        };
        train(model, state, resume, &mut packer, &o, |_| {})
            .unwrap()
            .1
    };
    let straight = tempfile::tempdir().unwrap();
    let whole: TrainState = run(straight.path(), None, false);
    let parts = tempfile::tempdir().unwrap();
    let first = run(parts.path(), Some(2), false);
    assert_eq!(first.losses.len(), 2);
    let resumed = run(parts.path(), None, true);
    assert_eq!(resumed.losses, whole.losses);
}

#[test]
fn lora_data_parallel_all_reduces_only_adapter_gradients_and_tracks_one_device() {
    use burn_ascend::backend::collective::simulate_devices;
    use burn_ascend::backend::{Ascend, AscendDevice, AscendKind};
    use burn_ascend_model::parallel::ranks::train_data_parallel;
    use burn_ascend_model::train::{train_with, Batches};
    type S = Autodiff<Ascend>;
    // The data-parallel mutation switches are process-wide: take turns with the ddp suite.
    let _guard = crate::ddp::serial();
    simulate_devices(2);
    let dev = |i| AscendDevice {
        kind: AscendKind::Simulation,
        index: i,
    };
    let s = settings("q_proj,v_proj,o_proj,up_proj");
    let out = tempfile::tempdir().unwrap();
    let models: Vec<Transformer<S>> = (0..2)
        .map(|i| {
            init_lora::<S>(&base_dir(), Some(&s), 3, out.path(), &dev(i))
                .unwrap()
                .0
        })
        .collect();
    let adapter_elems: usize = lora::adapters(&models[0])
        .iter()
        .map(|(_, _, a)| a.lora_a.shape().num_elements() + a.lora_b.shape().num_elements())
        .sum();
    let reference = init_lora::<S>(&base_dir(), Some(&s), 3, out.path(), &dev(0))
        .unwrap()
        .0;
    let before = base_weights_on(&reference);
    let packer = Packer::new(&docs(), &Tokenizer::Bytes, 48, 24, 4).unwrap();
    let o = opts(out.path(), 2, None);
    let run = train_data_parallel(
        models,
        TrainState::default(),
        false,
        &packer,
        &o,
        1 << 20,
        |_| {},
    )
    .unwrap();
    let steps = run.stats.steps as usize;
    assert_eq!(steps, 2);
    // Every gradient byte all-reduced is an adapter's (f32).
    assert_eq!(run.stats.gradient_bytes as usize, steps * 4 * adapter_elems);
    let single_dir = tempfile::tempdir().unwrap();
    let mut p = packer.clone();
    let (_, single) = train_with(
        reference,
        TrainState::default(),
        false,
        &mut Batches::global(&mut p, 2),
        &opts(single_dir.path(), 2, None),
        None,
        |_| {},
    )
    .unwrap();
    let gap = run
        .state
        .losses
        .iter()
        .zip(&single.losses)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!("LoRA 2 ranks vs 1 device: max |Δloss| {gap:.2e} over {steps} steps");
    assert!(
        gap <= 1e-5,
        "losses {:?} vs {:?}",
        run.state.losses,
        single.losses
    );
    assert_eq!(base_weights_on(&run.model), before, "a base weight changed");
}

fn base_weights_on<Bk: burn::tensor::backend::AutodiffBackend>(
    m: &Transformer<Bk>,
) -> Vec<(String, Vec<u32>)> {
    named_weights(&m.valid())
        .into_iter()
        .map(|(n, (v, _))| (n, v.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

/// LoRA under ZeRO-2 on 2 simulated ranks: plain data parallelism's losses, the base
/// untouched, and only the adapters sharded (each rank's AdamW bytes are half the adapters'
/// moments, up to the pool's rounding). Behind `BURN_ASCEND_LONG=1` for CI's time.
#[test]
fn lora_under_zero_two_shards_only_the_adapters_and_gives_the_data_parallel_losses() {
    use burn_ascend::backend::collective::simulate_devices;
    use burn_ascend::backend::{Ascend, AscendDevice, AscendKind};
    use burn_ascend_model::parallel::ranks::{train_data_parallel, train_zero};
    use burn_ascend_model::parallel::zero::ZeroStage;
    type S = Autodiff<Ascend>;
    if std::env::var_os("BURN_ASCEND_LONG").is_none() {
        return;
    }
    let _guard = crate::ddp::serial();
    simulate_devices(2);
    let dev = |i| AscendDevice {
        kind: AscendKind::Simulation,
        index: i,
    };
    let s = settings("q_proj,v_proj,o_proj,up_proj");
    let out = tempfile::tempdir().unwrap();
    let models: Vec<Transformer<S>> = (0..2)
        .map(|i| {
            init_lora::<S>(&base_dir(), Some(&s), 3, out.path(), &dev(i))
                .unwrap()
                .0
        })
        .collect();
    let adapter_elems: u64 = lora::adapters(&models[0])
        .iter()
        .map(|(_, _, a)| a.lora_a.shape().num_elements() + a.lora_b.shape().num_elements())
        .sum::<usize>() as u64;
    let before = base_weights_on(&models[0]);
    let packer = Packer::new(&docs(), &Tokenizer::Bytes, 48, 24, 4).unwrap();
    let dp = train_data_parallel(
        models.clone(),
        TrainState::default(),
        false,
        &packer,
        &opts(&out.path().join("dp"), 3, None),
        1 << 20,
        |_| {},
    )
    .unwrap();
    let z = train_zero(
        models,
        TrainState::default(),
        false,
        &packer,
        &opts(&out.path().join("z"), 3, None),
        ZeroStage::Two,
        |_| {},
    )
    .unwrap();
    let gap = z
        .state
        .losses
        .iter()
        .zip(&dp.state.losses)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!(
        "LoRA zero 2 vs plain DP: max |Δloss| {gap:.2e}; AdamW bytes per rank {:?} for {adapter_elems} adapter parameters",
        z.optimizer_state_bytes
    );
    assert!(gap <= 1e-5, "{:?} vs {:?}", z.state.losses, dp.state.losses);
    assert_eq!(base_weights_on(&z.model), before, "a base weight changed");
    for bytes in z.optimizer_state_bytes {
        // Two f32 moments of half the adapters, each block's slice rounded up to 512 bytes.
        let half = 8 * adapter_elems / 2;
        let layers = z.model.layers.len() as u64;
        assert!(
            bytes >= half && bytes <= half + 2 * 512 * layers,
            "{bytes} B vs {half} B"
        );
    }
}
