//! The memory plan against the simulation's memory-pool peak.

use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
use std::sync::{Mutex, MutexGuard, PoisonError};

use burn_ascend::backend::collective::simulate_devices;
use burn_ascend::backend::{AscendDevice, AscendKind};
use burn_ascend_model::load::config::{LayerType, RopeScaling};
use burn_ascend_model::model::lora::LoraTarget;
use burn_ascend_model::parallel::plan::{measure_peak, measure_peak_with, plan, PlanSpec};
use burn_ascend_model::ModelConfig;

fn cfg(hidden: usize, inter: usize, layers: usize, vocab: usize) -> ModelConfig {
    ModelConfig {
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: inter,
        num_hidden_layers: layers,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: hidden / 4,
        sliding_window: None,
        layer_types: vec![LayerType::Full; layers],
        attention_sinks: false,
        attention_bias: false,
        attention_output_bias: false,
        mlp_bias: false,
        qk_norm: false,
        rope_theta: 10_000.0,
        rope_scaling: RopeScaling::Default,
        rms_norm_eps: 1e-5,
        tie_word_embeddings: false,
        attention_dropout: 0.0,
        moe: None,
    }
}

/// A simulated device no other module's test uses, held by one test at a time, so its pool's
/// peak is that test's alone.
fn device() -> (MutexGuard<'static, ()>, AscendDevice) {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    simulate_devices(8);
    let device = AscendDevice {
        kind: AscendKind::Simulation,
        index: 7,
    };
    (guard, device)
}

/// The simulated kernels off for the launches this thread queues, until dropped (every launch
/// is still validated, allocated for and counted).
struct KernelsOff;

impl KernelsOff {
    fn new() -> Self {
        burn_ascend_model::profile::set_kernels(false);
        Self
    }
}

impl Drop for KernelsOff {
    fn drop(&mut self) {
        burn_ascend_model::profile::set_kernels(true);
    }
}

fn spec(tokens: usize, bytes: usize, lora: Option<(usize, &str)>) -> PlanSpec {
    PlanSpec {
        tokens_per_rank: tokens,
        seq_len: 128,
        ranks: 1,
        compute_bytes: bytes,
        lora: lora.map(|(r, t)| (r, LoraTarget::parse_list(t, "--lora-targets").unwrap())),
        zero: 0,
        checkpointing: false,
    }
}

/// The plan's peak against the pool's: a full fine-tune, two LoRAs (all seven projections in
/// f32, the MLP's only, where layer 0's attention keeps nothing) and a bf16 LoRA.
#[test]
fn plan_peak_is_within_ten_percent_of_the_simulated_memory_pool_peak() {
    let (_guard, d) = device();
    let _kernels = KernelsOff::new();
    for (name, c, s) in [
        ("full f32", cfg(128, 256, 2, 512), spec(512, 4, None)),
        (
            "LoRA all-linear f32",
            cfg(128, 256, 2, 512),
            spec(512, 4, Some((8, "all-linear"))),
        ),
        (
            "LoRA gate,down f32 3 layers",
            cfg(96, 320, 3, 384),
            spec(384, 4, Some((4, "gate_proj,down_proj"))),
        ),
        (
            "LoRA q,v bf16",
            cfg(128, 256, 2, 512),
            spec(512, 2, Some((8, "q_proj,v_proj"))),
        ),
    ] {
        let p = plan(&c, &s);
        let m = measure_peak(&c, &s, &d).unwrap();
        let ratio = p.peak as f64 / m as f64;
        eprintln!(
            "{name}: plan {} B, measured {m} B, plan / measured {ratio:.3}",
            p.peak
        );
        assert!(
            (0.9..=1.1).contains(&ratio),
            "{name}: plan {p:?}, measured {m}"
        );
    }
}

fn fixture(name: &str) -> ModelConfig {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plan")
        .join(name);
    ModelConfig::from_json(&serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
        .unwrap()
}

#[test]
fn zero_stages_partition_what_they_name_and_big_models_fit_only_as_the_readme_says() {
    let qwen = fixture("qwen2.5-7b.config.json");
    // The Hub's 7.6 B parameters (76.1 亿).
    assert!(
        (7.60e9..7.63e9).contains(&(qwen.num_params() as f64)),
        "{}",
        qwen.num_params()
    );
    let at = |zero: u8, ranks: usize, lora: Option<(usize, &str)>, tokens: usize| {
        plan(
            &qwen,
            &PlanSpec {
                zero,
                ranks,
                ..spec(tokens, 2, lora)
            },
        )
    };
    let z0 = at(0, 8, None, 4096);
    let (z1, z2, z3) = (
        at(1, 8, None, 4096),
        at(2, 8, None, 4096),
        at(3, 8, None, 4096),
    );
    assert_eq!(z1.optimizer, z0.optimizer.div_ceil(8));
    assert_eq!((z1.gradients, z1.weights), (z0.gradients, z0.weights));
    assert_eq!(z2.gradients, z0.gradients.div_ceil(8));
    assert_eq!(z3.weights, z0.weights.div_ceil(8));
    assert_eq!(
        z0.optimizer,
        2 * z0.weights,
        "AdamW: two f32 moments per f32 weight"
    );
    assert!(!z0.fits_atlas() && !z1.fits_atlas());
    // ZeRO-3 without checkpointing gathers the whole model's f32 weights for the step (30 GB):
    // only per-block gathering (with per-block checkpointing) fits.
    assert!(!z3.fits_atlas(), "{z3:?}");
    let z3_blocks = plan(
        &qwen,
        &PlanSpec {
            zero: 3,
            ranks: 8,
            checkpointing: true,
            ..spec(4096, 2, None)
        },
    );
    assert!(z3_blocks.fits_atlas(), "{z3_blocks:?}");
    assert!(at(0, 8, Some((16, "all-linear")), 4096).fits_atlas());
    let gpt_oss = fixture("gpt-oss-20b.config.json");
    assert!(
        (20.9e9..21.0e9).contains(&(gpt_oss.num_params() as f64)),
        "{}",
        gpt_oss.num_params()
    );
}

/// docs/lora-and-plan.md's table of Qwen2.5-7B and gpt-oss-20b on 8 ranks is what the plan
/// computes, row for row (`BURN_ASCEND_PLAN_TABLE=1` prints the rows, to paste after a change).
#[test]
fn the_docs_plan_table_is_what_the_plan_computes() {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/lora-and-plan.md"),
    )
    .unwrap();
    let print = std::env::var_os("BURN_ASCEND_PLAN_TABLE").is_some();
    let mut missing = Vec::new();
    for (name, file, lora) in [
        (
            "Qwen2.5-7B",
            "qwen2.5-7b.config.json",
            "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        ),
        (
            "gpt-oss-20b",
            "gpt-oss-20b.config.json",
            "q_proj,k_proj,v_proj,o_proj",
        ),
    ] {
        let c = fixture(file);
        for tokens in [4096, 32768] {
            for (what, l, zero, checkpointing) in [
                ("full", None, 0u8, false),
                ("full", None, 1, false),
                ("full", None, 2, false),
                ("full", None, 3, false),
                ("full + checkpointing", None, 3, true),
                ("LoRA r16", Some((16usize, lora)), 0, false),
                ("LoRA r16 + checkpointing", Some((16usize, lora)), 0, true),
            ] {
                let p = plan(
                    &c,
                    &PlanSpec {
                        ranks: 8,
                        zero,
                        checkpointing,
                        ..spec(tokens, 2, l)
                    },
                );
                let g = |b: u64| b as f64 / (1u64 << 30) as f64;
                let row = format!(
                    "| {name} | {tokens} | {what} | {zero} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | **{:.1}** | {} |",
                    g(p.weights), g(p.gradients), g(p.optimizer), g(p.activations), g(p.workspace), g(p.peak),
                    if p.fits_atlas() { "yes" } else { "no" }
                );
                if print {
                    println!("{row}");
                }
                if !docs.lines().any(|l| l.trim() == row) {
                    missing.push(row);
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/lora-and-plan.md lacks these rows of the plan:\n{}",
        missing.join("\n")
    );
}

/// Per-block activation checkpointing (`model/src/train/recompute.rs`) against keeping every
/// activation, on the simulation's pool: it lowers the peak, more the deeper the model, and the
/// plan's checkpointing formula is within 10 % of the measured peak. Burn's `BalancedCheckpointing`
/// over the whole model is measured beside it on the first config: before the fused ops (RMSNorm,
/// SwiGLU, the loss) it lowered a full fine-tune's peak by 27 %; with them the model keeps less
/// (the fused RMSNorm keeps `rstd`, the fused SwiGLU its input, the fused cross-entropy one `[T,
/// V]`) and the balanced strategy, which cannot see into the fused nodes, raises it (by 23 %, full
/// f32). Asserted in that direction, so a change that makes it pay again fails here and the docs
/// get updated.
#[test]
fn per_block_checkpointing_lowers_the_pool_peak_and_the_plan_follows_it() {
    let (_guard, d) = device();
    // The pool's peak is host-side bookkeeping: the simulated kernels add nothing to it, and
    // ~20 s of their queued work used to delay the next test on this device.
    let _kernels = KernelsOff::new();
    // The least saving asserted (measured: 23.8 %, 42.5 %, 58.6 %; the pool is deterministic).
    let cases = [
        (
            "full f32 2 layers",
            cfg(128, 256, 2, 512),
            spec(512, 4, None),
            0.2,
        ),
        (
            "full f32 6 layers",
            cfg(128, 256, 6, 512),
            spec(512, 4, None),
            0.4,
        ),
        (
            "LoRA all-linear f32 4 layers",
            cfg(128, 256, 4, 512),
            spec(512, 4, Some((8, "all-linear"))),
            0.55,
        ),
    ];
    // More configs with BURN_ASCEND_LONG=1 (CI's time budget): plan / measured 1.013, 1.006,
    // 0.971, 0.999, 0.993, 1.007, 1.011 when the formula was derived.
    let long = std::env::var("BURN_ASCEND_LONG").is_ok_and(|v| v == "1");
    let more = [
        (
            "full bf16 2 layers",
            cfg(128, 256, 2, 512),
            spec(512, 2, None),
            0.0,
        ),
        (
            "full bf16 6 layers",
            cfg(128, 256, 6, 512),
            spec(512, 2, None),
            0.0,
        ),
        (
            "full f32 4 layers 1024 tokens",
            cfg(128, 256, 4, 512),
            spec(1024, 4, None),
            0.0,
        ),
        (
            "LoRA all-linear f32 2 layers",
            cfg(128, 256, 2, 512),
            spec(512, 4, Some((8, "all-linear"))),
            0.0,
        ),
        (
            "LoRA all-linear f32 6 layers 1024 tokens",
            cfg(128, 256, 6, 512),
            spec(1024, 4, Some((8, "all-linear"))),
            0.0,
        ),
        (
            "LoRA gate,down f32 3 layers",
            cfg(96, 320, 3, 384),
            spec(384, 4, Some((4, "gate_proj,down_proj"))),
            0.0,
        ),
        (
            "LoRA q,v bf16 2 layers",
            cfg(128, 256, 2, 512),
            spec(512, 2, Some((8, "q_proj,v_proj"))),
            0.0,
        ),
    ];
    let cases = cases.into_iter().chain(more.into_iter().filter(|_| long));
    for (k, (name, c, s, least)) in cases.enumerate() {
        let kept = measure_peak(&c, &s, &d).unwrap();
        let ck = PlanSpec {
            checkpointing: true,
            ..s.clone()
        };
        let block = measure_peak(&c, &ck, &d).unwrap();
        let p = plan(&c, &ck);
        let saved = 1.0 - block as f64 / kept as f64;
        let ratio = p.peak as f64 / block as f64;
        eprintln!(
            "{name}: peak {kept} B keeping every activation, {block} B with per-block \
             checkpointing ({:.1} % less); plan {} B, plan / measured {ratio:.3} (plan without: {})",
            100.0 * saved,
            p.peak,
            plan(&c, &s).peak,
        );
        if k == 0 {
            let balanced = measure_peak_with::<BalancedCheckpointing>(&c, &s, &d).unwrap();
            eprintln!(
                "{name}: {balanced} B with Burn's BalancedCheckpointing ({:.1} % more)",
                100.0 * (balanced as f64 / kept as f64 - 1.0)
            );
            assert!(balanced > kept, "{name}: {balanced} vs {kept}");
        }
        assert!(saved >= least && block < kept, "{name}: {block} vs {kept}");
        assert!(
            (0.9..=1.1).contains(&ratio),
            "{name}: plan {p:?}, measured {block}"
        );
    }
}

/// ZeRO-3 with per-block checkpointing on two simulated ranks: the plan's per-rank peak
/// against rank 0's pool peak. With `BURN_ASCEND_LONG=1` also on a larger config, with the
/// peaks of plain data parallelism and of ZeRO-3 without checkpointing (which gathers the whole
/// model for the step) beside it, each against its plan.
#[test]
fn zero_three_with_per_block_checkpointing_plan_peak_is_within_ten_percent_of_rank_zero_pool_peak()
{
    let (_guard, d) = device();
    let long = std::env::var_os("BURN_ASCEND_LONG").is_some();
    let at = |tokens: usize, zero: u8, checkpointing: bool| PlanSpec {
        ranks: 2,
        zero,
        checkpointing,
        ..spec(tokens, 4, None)
    };
    let mut cases = vec![("2 layers", cfg(64, 128, 2, 256), 256, true)];
    if long {
        cases.push(("4 layers", cfg(128, 256, 4, 512), 512, false));
    }
    for (size, c, tokens, per_block_only) in cases {
        let mut peaks = Vec::new();
        for (name, zero, ck) in [
            ("ZeRO-3 per block", 3, true),
            ("plain DP", 0, false),
            ("ZeRO-3", 3, false),
        ] {
            if per_block_only && !ck {
                continue;
            }
            let s = at(tokens, zero, ck);
            let p = plan(&c, &s);
            let m = measure_peak(&c, &s, &d).unwrap();
            let ratio = p.peak as f64 / m as f64;
            eprintln!(
                "{size}, {name}, 2 ranks: rank 0 peak {m} B, plan {} B, plan / measured \
                 {ratio:.3}",
                p.peak
            );
            assert!(
                (0.9..=1.1).contains(&ratio),
                "{size}, {name}: plan {p:?}, measured {m}"
            );
            peaks.push(m);
        }
        if let [blocks, dp, whole] = peaks[..] {
            assert!(blocks < whole && whole < dp, "{peaks:?}");
        }
    }
}
