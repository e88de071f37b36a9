//! `burn-ascend`: replay CANN attention ops on safetensors dumps (see `burn_ascend::cli`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = burn_ascend::cli::main_with_args(&args) {
        eprintln!("error: {e}");
        std::process::exit(e.exit_code());
    }
}
