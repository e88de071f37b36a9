//! `burn-ascend`: replay CANN attention ops on safetensors dumps and benchmark the CPU kernels
//! (see `burn_ascend_cli`).

/// mimalloc, keeping the memory a step frees for the next one, counting live and peak heap
/// bytes for `burn-ascend bench`'s memory figures (see `burn_ascend_cli::host_alloc`).
#[global_allocator]
static GLOBAL: burn_ascend_cli::host_alloc::CountingAlloc =
    burn_ascend_cli::host_alloc::CountingAlloc;

fn main() {
    burn_ascend_cli::host_alloc::keep_freed_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match burn_ascend_cli::main_with_args(&args) {
        Ok(()) => {}
        // clap prints its own: help and version to stdout (exit 0), a usage error to stderr
        // (exit 2).
        Err(burn_ascend_cli::CliError::Usage(e)) => e.exit(),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
