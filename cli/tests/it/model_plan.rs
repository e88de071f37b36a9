//! `burn-ascend plan`: the subcommand prints each component of the memory plan and refuses a
//! bad ZeRO stage naming it. The plan against the simulation's memory-pool peak is tested in
//! `model/tests/it/plan.rs`.

use burn_ascend_model::parallel::plan::plan;

#[test]
fn plan_subcommand_prints_each_component_and_refuses_a_bad_zero_stage_naming_it() {
    use burn_ascend_cli::args::{Cli, Command};
    use clap::Parser;
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../model/tests/fixtures/plan/qwen2.5-7b.config.json");
    let cli = Cli::try_parse_from([
        "burn-ascend",
        "plan",
        "--config",
        cfg.to_str().unwrap(),
        "--ranks",
        "8",
        "--lora-rank",
        "16",
        "--lora-targets",
        "all-linear",
    ])
    .unwrap();
    let Command::Plan(args) = cli.command else {
        panic!("not plan")
    };
    let (c, s) = burn_ascend_cli::plan::spec_of(&args).unwrap();
    let text = burn_ascend_cli::plan::format_plan(&c, &s, &plan(&c, &s));
    for word in [
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "workspace",
        "fits one Atlas",
    ] {
        assert!(text.contains(word), "{word} missing from:\n{text}");
    }
    let e = Cli::try_parse_from(["burn-ascend", "plan", "--zero", "4"]).unwrap_err();
    assert!(e.to_string().contains("--zero"), "{e}");
    let e = Cli::try_parse_from([
        "burn-ascend",
        "plan",
        "--lora-rank",
        "4",
        "--lora-targets",
        "wq",
    ])
    .map(|c| match c.command {
        Command::Plan(a) => burn_ascend_cli::plan::spec_of(&a).map(drop),
        _ => unreachable!(),
    })
    .unwrap()
    .unwrap_err();
    assert!(
        e.to_string().contains("--lora-targets") && e.to_string().contains("'wq'"),
        "{e}"
    );
}
