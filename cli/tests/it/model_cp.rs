//! `finetune --cp N`'s flags: what the tokens or devices cannot take is refused naming the flag
//! (the example's argument parser). Context parallelism itself is tested in
//! `model/tests/it/cp.rs`.

use burn_ascend::backend::{AscendDevice, AscendKind};

#[test]
fn finetune_refuses_cp_flags_the_tokens_or_devices_cannot_take_naming_the_flag() {
    use burn_ascend_cli::args::FinetuneArgs;
    use clap::Parser;
    let args = |extra: &[&str]| {
        FinetuneArgs::try_parse_from(["finetune"].iter().chain(extra).copied()).unwrap()
    };
    let refusal = |extra: &[&str]| args(extra).cp_refusal(None).unwrap_or_default();
    assert!(refusal(&["--cp", "0"]).starts_with("--cp must be at least 1"));
    assert!(refusal(&["--check-cp"]).starts_with("--check-cp needs --cp N with N >= 2"));
    assert!(refusal(&["--cp", "2", "--check-cp", "--resume"]).contains("--check-cp"));
    // 2 · 4² = 32 tokens at least, so that every rank holds tokens of every step.
    let e = refusal(&["--cp", "4", "--batch-tokens", "31"]);
    assert!(
        e.starts_with("--cp 4 cannot split --batch-tokens 31 across 4 ranks")
            && e.contains("at least 2·4² = 32"),
        "{e}"
    );
    assert_eq!(
        args(&["--cp", "4", "--batch-tokens", "32"]).cp_refusal(None),
        None
    );
    assert_eq!(
        args(&["--cp", "2", "--devices", "2"]).cp_refusal(None),
        None
    );
    assert!(refusal(&["--cp", "2", "--devices", "2", "--check-ddp"]).contains("--check-cp"));
    // Under a launch, WORLD_SIZE must be a multiple of N (N·M: M data-parallel groups).
    let e = args(&["--cp", "2"]).cp_refusal(Some(3)).unwrap();
    assert!(
        e.starts_with("--cp 2 cannot split WORLD_SIZE=3 processes") && e.contains("N·M"),
        "{e}"
    );
    assert_eq!(args(&["--cp", "2"]).cp_refusal(Some(2)), None);
    assert_eq!(args(&["--cp", "2"]).cp_refusal(Some(4)), None);
    let e = refused_flag(&["finetune", "--cp", "-2"]);
    assert!(e.contains("--cp"), "{e}");
    // A group over devices that are not there: device 3 of a 3-device node.
    let e = args(&["--cp", "4", "--device", "sim"])
        .cp_devices(0, |d| {
            if d < 3 {
                Ok(())
            } else {
                Err(format!("no device {d}"))
            }
        })
        .unwrap_err();
    assert_eq!(
        e,
        "--cp 4 needs devices 0..4, but device 3 is not available: no device 3"
    );
    let e = args(&["--cp", "2", "--devices", "2", "--device", "sim"])
        .cp_devices(0, |d| if d < 3 { Ok(()) } else { Err("absent".into()) })
        .unwrap_err();
    assert!(
        e.starts_with("--cp 2 × --devices 2 needs devices 0..4, but device 3"),
        "{e}"
    );
    // On the simulation: the real check, a device index the simulation does not have.
    let e = args(&["--cp", "2", "--device", "sim"])
        .cp_devices(1 << 20, |d| {
            burn_ascend::backend::is_available(&AscendDevice {
                kind: AscendKind::Simulation,
                index: d,
            })
        })
        .unwrap_err();
    assert!(
        e.starts_with("--cp 2 needs devices 1048576..1048578, but device 1048576 is not available"),
        "{e}"
    );
}

fn refused_flag(argv: &[&str]) -> String {
    use burn_ascend_cli::args::FinetuneArgs;
    use clap::Parser;
    FinetuneArgs::try_parse_from(argv).unwrap_err().to_string()
}
