//! The command lines (clap): `--help` on every subcommand prints to stdout and exits 0; a
//! usage error exits 2 naming the flag; the examples' integers are integers. The binary is run
//! as a user runs it; the examples' parsers are tested as functions (`try_parse_from`), which
//! is what their `main` calls, without building and running each example.
//!
//! And the JSON files the model reads, typed: a `state.json` of another shape is refused, not
//! resumed as a fresh run.

use std::process::{Command, Output};

use burn_ascend_cli::args::{
    AttendPathArg, ComputeDtype, ExampleDevice, FinetuneArgs, GenerateArgs, LrSchedule,
    VarlenTrainArgs,
};
use burn_ascend_cli::{self as cli, CliError};
use burn_ascend_model::train::TrainState;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

fn burn_ascend(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_burn-ascend"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_of_every_subcommand_goes_to_stdout_with_exit_0() {
    for (args, says) in [
        (&["--help"][..], "selftest"),
        (&["run", "--help"], "actualSeqLengths"),
        (&["bench", "--help"], "--filter"),
        (&["selftest", "--help"], "--report"),
        (&["help", "run"], "--device"),
    ] {
        let out = burn_ascend(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).contains(says), "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn an_unknown_flag_exits_2_naming_it() {
    for args in [
        &["run", "varlen-fwd", "a", "b", "--frobnicate"][..],
        &["bench", "--frobnicate"],
        &["selftest", "--frobnicate"],
    ] {
        let out = burn_ascend(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--frobnicate"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stdout(&out).is_empty(), "{args:?}");
    }
}

#[test]
fn a_bad_device_exits_2_naming_the_flag_and_the_choices() {
    let out = burn_ascend(&["run", "varlen-fwd", "a", "b", "--device", "gpu"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--device") && err.contains("reference"),
        "{err}"
    );
}

#[test]
fn the_library_entry_returns_usage_errors_and_help_with_clap_s_exit_codes() {
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match cli::main_with_args(&args(&["run", "varlen-fwd", "a"])) {
        Err(e @ CliError::Usage(_)) => {
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains("out.safetensors"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    match cli::main_with_args(&args(&["selftest", "--help"])) {
        Err(e @ CliError::Usage(_)) => assert_eq!(e.exit_code(), 0),
        other => panic!("{other:?}"),
    }
}

/// The error of parsing `args` with `P`, asserting it is a usage error (exit 2).
fn refused<P: Parser + std::fmt::Debug>(args: &[&str]) -> String {
    let e = P::try_parse_from(args).expect_err("refused");
    assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
    e.to_string()
}

#[test]
fn finetune_refuses_a_negative_or_fractional_step_count_naming_steps() {
    for bad in ["-1", "2.5", "1e3", ""] {
        let e = refused::<FinetuneArgs>(&["finetune", "--steps", bad]);
        assert!(e.contains("--steps"), "--steps {bad}: {e}");
    }
    for flag in [
        "--batch-tokens",
        "--seq-len",
        "--seed",
        "--devices",
        "--stop-after",
    ] {
        let e = refused::<FinetuneArgs>(&["finetune", flag, "-3"]);
        assert!(e.contains(flag), "{flag} -3: {e}");
    }
    let e = refused::<FinetuneArgs>(&["finetune", "--dtype", "f64"]);
    assert!(e.contains("--dtype") && e.contains("bf16"), "{e}");
    let e = refused::<FinetuneArgs>(&["finetune", "--device", "npu"]);
    assert!(e.contains("--device") && e.contains("ascend"), "{e}");
}

#[test]
fn finetune_keeps_its_defaults_and_parses_integers_exactly() {
    let a = FinetuneArgs::try_parse_from(["finetune"]).unwrap();
    assert_eq!(
        (a.steps, a.batch_tokens, a.seq_len, a.seed, a.devices),
        (300, 1024, 256, 42, 1)
    );
    assert_eq!(
        a.lr_schedule(),
        LrSchedule {
            peak: 3e-3,
            warmup_steps: None
        }
    );
    assert_eq!(a.device, ExampleDevice::Cpu);
    assert_eq!(a.dtype, ComputeDtype::F32);
    assert_eq!(a.dtype.float_dtype(), None);
    assert_eq!(a.out, std::path::PathBuf::from("runs/finetune"));
    assert!(!a.resume && !a.no_samples && !a.profile && !a.check_ddp);
    assert_eq!(a.stop_after, None);

    // A seed above 2^53 keeps every bit (it went through f64 before).
    let a = FinetuneArgs::try_parse_from([
        "finetune",
        "--seed",
        "18446744073709551615",
        "--steps=7",
        "--dtype",
        "bf16",
        "--device",
        "sim",
        "--stop-after",
        "3",
        "--no-samples",
    ])
    .unwrap();
    assert_eq!(a.seed, u64::MAX);
    assert_eq!(a.steps, 7);
    assert_eq!(a.stop_after, Some(3));
    assert_eq!(a.device, ExampleDevice::Sim);
    assert_eq!(a.dtype.float_dtype(), Some(burn::tensor::FloatDType::BF16));
    assert!(a.no_samples);
}

#[test]
fn generate_and_varlen_train_parse_their_flags_as_typed_values() {
    let a = GenerateArgs::try_parse_from(["generate"]).unwrap();
    assert_eq!((a.max_new, a.seed, a.block_size), (80, 1, 16));
    assert_eq!((a.top_p, a.temperature), (0.9, 0.8));
    assert_eq!(a.device, ExampleDevice::Cpu);
    assert_eq!(a.attend_path, None);
    let a = GenerateArgs::try_parse_from(["generate", "--attend-path", "prompt-incre", "--check"])
        .unwrap();
    assert_eq!(a.attend_path, Some(AttendPathArg::PromptIncre));
    assert!(a.check);
    assert!(a.prompts.is_empty() && !a.greedy);
    let a =
        GenerateArgs::try_parse_from(["generate", "--prompt", "a", "--prompt", "b c", "--greedy"])
            .unwrap();
    assert_eq!(a.prompts, ["a", "b c"]);
    assert!(a.greedy);
    assert!(!a.chat);
    assert!(
        GenerateArgs::try_parse_from(["generate", "--chat", "--prompt", "hi"])
            .unwrap()
            .chat
    );
    let e = refused::<GenerateArgs>(&["generate", "--attend-path", "flash"]);
    assert!(e.contains("--attend-path") && e.contains("fused"), "{e}");
    let e = refused::<GenerateArgs>(&["generate", "--max-new", "-5"]);
    assert!(e.contains("--max-new"), "{e}");

    assert_eq!(
        VarlenTrainArgs::try_parse_from(["varlen_train"])
            .unwrap()
            .steps,
        300
    );
    let e = refused::<VarlenTrainArgs>(&["varlen_train", "--steps", "2.5"]);
    assert!(e.contains("--steps"), "{e}");
    // Flags it does not have are refused, not skipped over.
    let e = refused::<VarlenTrainArgs>(&["varlen_train", "--lr", "1"]);
    assert!(e.contains("--lr"), "{e}");
}

#[test]
fn the_examples_help_is_not_an_error() {
    for e in [
        FinetuneArgs::try_parse_from(["finetune", "--help"]).unwrap_err(),
        GenerateArgs::try_parse_from(["generate", "--help"]).unwrap_err(),
        VarlenTrainArgs::try_parse_from(["varlen_train", "--help"]).unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::DisplayHelp);
        assert_eq!(e.exit_code(), 0);
    }
}

#[test]
fn a_state_json_of_another_shape_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("state.json");
    for bad in [
        "[]",
        "{}",
        r#"{"step": 1, "losses": ["x"]}"#,
        r#"{"step": -1, "losses": []}"#,
    ] {
        std::fs::write(&path, bad).unwrap();
        let e = TrainState::load(dir.path()).expect_err(bad);
        assert!(e.to_string().contains("state.json"), "{bad}: {e}");
    }
    std::fs::write(&path, r#"{"step": 2, "losses": [1.5]}"#).unwrap();
    let e = TrainState::load(dir.path()).unwrap_err();
    assert!(
        e.to_string().contains("step and loss count disagree"),
        "{e}"
    );
    // Written before data parallelism: no `devices`, one device.
    std::fs::write(&path, r#"{"step": 2, "losses": [1.5, 1.25]}"#).unwrap();
    let s = TrainState::load(dir.path()).unwrap();
    assert_eq!((s.step, s.losses, s.devices), (2, vec![1.5, 1.25], 1));
}

// The op errors' messages as the hand-written `Display` wrote them before thiserror.
#[test]
fn attention_errors_keep_their_wording() {
    use burn_ascend::AttnError;
    let device = |status, message: &str| AttnError::Device {
        op: "prompt_flash_attention".into(),
        call: "aclrtMalloc".into(),
        status,
        message: message.into(),
    };
    assert_eq!(
        device(Some(207_001), "out of memory").to_string(),
        "device: prompt_flash_attention: aclrtMalloc failed with status 207001: out of memory"
    );
    assert_eq!(
        device(None, "").to_string(),
        "device: prompt_flash_attention: aclrtMalloc failed"
    );
    assert_eq!(
        AttnError::invalid("keepProb", "must be in (0, 1], got 0").to_string(),
        "invalid keepProb: must be in (0, 1], got 0"
    );
    assert_eq!(
        AttnError::OutOfBlocks { needed: 3, free: 1 }.to_string(),
        "out of KV cache blocks: need 3, 1 free"
    );
    assert_eq!(
        AttnError::Unsupported("x".into()).to_string(),
        "unsupported: x"
    );
}

#[test]
fn out_of_range_learning_rates_sampling_values_and_block_sizes_are_refused_naming_the_flag() {
    for bad in ["-0.1", "0", "nan", "inf"] {
        let e = refused::<FinetuneArgs>(&["finetune", "--lr", bad]);
        assert!(e.contains("--lr"), "--lr {bad}: {e}");
    }
    for (flag, bad) in [
        ("--top-p", "-1"),
        ("--top-p", "1.5"),
        ("--top-p", "nan"),
        ("--temperature", "nan"),
        ("--temperature", "-1"),
        ("--temperature", "0"),
        ("--block-size", "0"),
    ] {
        let e = refused::<GenerateArgs>(&["generate", flag, bad]);
        assert!(e.contains(flag), "{flag} {bad}: {e}");
    }
    let a =
        GenerateArgs::try_parse_from(["generate", "--top-p", "1", "--temperature", "0.5"]).unwrap();
    assert_eq!((a.top_p, a.temperature), (1.0, 0.5));
}

#[test]
fn memory_budgets_parse_with_binary_units_and_save_every_is_at_least_one() {
    let budget = |s: &str| {
        FinetuneArgs::try_parse_from(["finetune", "--memory-budget", s])
            .unwrap()
            .memory_budget
    };
    assert_eq!(budget("4096"), Some(4096));
    assert_eq!(budget("8GiB"), Some(8 << 30));
    assert_eq!(budget("1.5MiB"), Some(3 << 19));
    assert_eq!(budget("2k"), Some(2048));
    assert_eq!(
        GenerateArgs::try_parse_from(["generate", "--memory-budget", "1TiB"])
            .unwrap()
            .memory_budget,
        Some(1 << 40)
    );
    assert_eq!(
        FinetuneArgs::try_parse_from(["finetune"])
            .unwrap()
            .memory_budget,
        None
    );
    for bad in ["0", "lots", "8 parsecs", "-1GiB", "nanGiB", "1e400"] {
        let e = refused::<FinetuneArgs>(&["finetune", "--memory-budget", bad]);
        assert!(e.contains("--memory-budget"), "{bad}: {e}");
    }
    let a = FinetuneArgs::try_parse_from(["finetune"]).unwrap();
    assert_eq!(a.save_every, 100);
    let e = refused::<FinetuneArgs>(&["finetune", "--save-every", "0"]);
    assert!(
        e.contains("--save-every") && e.contains("at least 1"),
        "{e}"
    );
}

/// A pretrained `--checkpoint` gets a fine-tune's learning rate and warm-up unless `--lr` is
/// given: 2e-5 for a full fine-tune, 2e-4 for LoRA, a linear warm-up over 10 % of `--steps`
/// (at least one step); from scratch 3e-3 and the default warm-up, `--lr` winning everywhere.
#[test]
fn finetune_from_a_checkpoint_defaults_to_a_fine_tunes_learning_rate_and_warm_up() {
    let parse = |args: &[&str]| {
        FinetuneArgs::try_parse_from(std::iter::once("finetune").chain(args.iter().copied()))
            .unwrap()
            .lr_schedule()
    };
    let s = |peak, warmup_steps| LrSchedule { peak, warmup_steps };
    assert_eq!(parse(&["--checkpoint", "m"]), s(2e-5, Some(30)));
    assert_eq!(
        parse(&["--checkpoint", "m", "--lora-rank", "8", "--steps", "20"]),
        s(2e-4, Some(2))
    );
    assert_eq!(
        parse(&["--checkpoint", "m", "--steps", "5"]),
        s(2e-5, Some(1))
    );
    assert_eq!(
        parse(&["--checkpoint", "m", "--steps", "1"]),
        s(2e-5, Some(1))
    );
    assert_eq!(
        parse(&["--checkpoint", "m", "--lora-rank", "4", "--lr", "1e-3"]),
        s(1e-3, Some(30))
    );
    assert_eq!(parse(&["--lr", "1e-2"]), s(1e-2, None));
    assert_eq!(parse(&[]), s(3e-3, None));
    // --help states the defaults.
    let help = FinetuneArgs::command().render_long_help().to_string();
    for needle in [
        "3e-3 from scratch",
        "2e-5",
        "2e-4 with --lora-rank",
        "10 % of --steps",
    ] {
        assert!(help.contains(needle), "--help names {needle}: {help}");
    }
}

/// The examples' `--cann-release` names the release the simulation pretends to be: refused
/// with `--device cpu` (nothing there differs by release) and `ascend` (the installed CANN's),
/// and an unknown release is refused naming the flag and the releases known.
#[test]
fn the_examples_cann_release_applies_to_sim_only() {
    use burn_ascend_cli::release::{apply, apply_to_example};
    let a = FinetuneArgs::try_parse_from(["finetune", "--cann-release", "9.0"]).unwrap();
    assert_eq!(a.cann_release.as_deref(), Some("9.0"));
    let g = GenerateArgs::try_parse_from(["generate", "--cann-release", "8.5"]).unwrap();
    assert_eq!(g.cann_release.as_deref(), Some("8.5"));
    for device in [ExampleDevice::Cpu, ExampleDevice::Ascend] {
        let e = apply_to_example(Some("9.1"), device).unwrap_err();
        assert!(
            e.starts_with("invalid --cann-release:") && e.contains("--device sim"),
            "{e}"
        );
    }
    let e = apply_to_example(Some("7.0"), ExampleDevice::Sim).unwrap_err();
    assert!(
        e.contains("unknown CANN release '7.0'") && e.contains("known: 8.5.0-beta.1"),
        "{e}"
    );
    apply_to_example(None, ExampleDevice::Cpu).unwrap();
    // The newest release (the default anyway), then back to the default for the other tests.
    apply_to_example(Some("9.1.0"), ExampleDevice::Sim).unwrap();
    apply(None, burn_ascend_cli::Device::Sim).unwrap();
}
