//! Throughput of the fast CPU varlen kernels (`burn_ascend_kernels::cpu`), relative to a
//! same-run sgemm through the same `gemm` crate.
//!
//! ```text
//! cargo run --release -p burn-ascend-kernels --example bench_varlen -- [--quick] [--json PATH]
//!     [--filter SUBSTRING]
//! ```
//!
//! `--filter` keeps the cases whose label (`full D=64`, `causal D=128`, …) contains the
//! substring.
//!
//! - sgemm: 2048³ f32, row-major, split into one row band per rayon thread (each a
//!   single-threaded `gemm` call, as the attention kernels use it); GFLOP/s = 2·n³ / time.
//! - copy: `copy_from_slice` of a 256 MiB f32 buffer (64 MiB with `--quick`); GB/s = bytes
//!   copied / time (each byte is read once and written once).
//! - cases: varlen forward and forward+backward, full and causal (mode 3, compressed mask),
//!   D = 64 and 128, 4096 packed tokens as [512, 1024, 2048, 512], N = 8, Nkv = 2, with sinks.
//!   FLOPs: 4·D per unmasked (query, key) pair per head forward (4·Sq·Skv·D when full), 2.5×
//!   that for the backward, so forward+backward counts 3.5×.
//!
//! Every figure is the best of several timed repetitions after one warm-up run.

use std::time::Instant;

use burn_ascend_kernels::cpu;
use burn_ascend_kernels::varlen::{AttenMask, SparseMode, VarlenAttrs, VarlenDims, VarlenProblem};

struct Lcg(u64);

impl Lcg {
    fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }
}

/// CPU time (seconds) consumed so far by all threads of this process, from
/// `/proc/self/task/*/schedstat` (Linux; `None` elsewhere). Unlike wall time it does not grow
/// when other processes compete for the cores, so it gives a steadier efficiency figure on a
/// shared machine.
fn cpu_seconds() -> Option<f64> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total as f64 * 1e-9)
}

/// (best wall time, best CPU time / threads) of `reps` runs after one warm-up.
fn best_of<R>(reps: usize, mut f: impl FnMut() -> R) -> (f64, f64) {
    std::hint::black_box(f());
    let threads = rayon::current_num_threads() as f64;
    let (mut wall, mut cpu) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps {
        let c = cpu_seconds();
        let t = Instant::now();
        std::hint::black_box(f());
        wall = wall.min(t.elapsed().as_secs_f64());
        if let (Some(c0), Some(c1)) = (c, cpu_seconds()) {
            cpu = cpu.min((c1 - c0) / threads);
        }
    }
    (wall, cpu)
}

struct CaseResult {
    name: String,
    kind: &'static str,
    causal: bool,
    tokens: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    seconds: f64,
    gflops: f64,
    cpu_gflops: f64,
}

/// sgemm 2048³: (GFLOP/s by wall time, GFLOP/s by CPU time per thread).
fn sgemm(reps: usize, threads: usize, rng: &mut Lcg) -> (f64, f64) {
    let n = 2048;
    let (a, b) = (rng.vec(n * n), rng.vec(n * n));
    let mut c = vec![0.0f32; n * n];
    let (wall, cpu) = best_of(reps, || {
        cpu::gemm::sgemm(n, n, n, &a, &b, &mut c, threads);
    });
    let flops = 2.0 * (n as f64).powi(3);
    (flops / wall / 1e9, flops / cpu / 1e9)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json = args
        .iter()
        .position(|a| a == "--json")
        .map(|i| args.get(i + 1).expect("--json needs a path").clone());
    let filter = args
        .iter()
        .position(|a| a == "--filter")
        .map(|i| args.get(i + 1).expect("--filter needs a substring").clone());
    let reps = if quick { 2 } else { 5 };
    let threads = rayon::current_num_threads();
    let mut rng = Lcg(42);

    // sgemm before the cases (and again after them: the better figure is the denominator).
    let (sgemm_before, sgemm_cpu_before) = sgemm(reps.min(3), threads, &mut rng);

    // Large copy.
    let len = if quick { 16 << 20 } else { 64 << 20 };
    let src = rng.vec(len);
    let mut dst = vec![0.0f32; len];
    let (t, _) = best_of(reps, || {
        std::hint::black_box(&mut dst[..]).copy_from_slice(std::hint::black_box(&src[..]));
    });
    let copy_gbps = (len * 4) as f64 / t / 1e9;
    drop((src, dst));

    let seqs = [512usize, 1024, 2048, 512];
    let (heads, kv_heads) = (8, 2);
    let tokens: usize = seqs.iter().sum();
    let mut results = Vec::new();
    for causal in [false, true] {
        for d in [64usize, 128] {
            let dims = VarlenDims {
                head_num: heads,
                kv_head_num: kv_heads,
                head_dim: d,
                value_dim: d,
                seq_q: seqs.to_vec(),
                seq_kv: seqs.to_vec(),
            };
            let mut attrs = VarlenAttrs::new(1.0 / (d as f64).sqrt());
            if causal {
                attrs.sparse_mode = SparseMode::RightDownCausal;
            }
            let sink: Vec<f32> = (0..heads).map(|h| h as f32 * 0.25 - 1.0).collect();
            let mut p = VarlenProblem::new(dims, attrs);
            p.sink = Some(&sink);
            if causal {
                p.atten_mask = AttenMask::Compressed;
            }
            let pairs: usize = seqs
                .iter()
                .map(|&s| if causal { s * (s + 1) / 2 } else { s * s })
                .sum();
            let fwd_flops = 4.0 * (pairs * d * heads) as f64;
            let q = rng.vec(tokens * heads * d);
            let k = rng.vec(tokens * kv_heads * d);
            let v = rng.vec(tokens * kv_heads * d);
            let dy = rng.vec(tokens * heads * d);
            let label = format!("{} D={d}", if causal { "causal" } else { "full" });
            if filter.as_ref().is_some_and(|f| !label.contains(f.as_str())) {
                continue;
            }

            let t_fwd = best_of(reps, || cpu::varlen_fwd(&p, &q, &k, &v));
            let t_all = best_of(reps, || {
                let f = cpu::varlen_fwd(&p, &q, &k, &v);
                cpu::varlen_bwd(
                    &p,
                    &q,
                    &k,
                    &v,
                    &dy,
                    &f.attention_out,
                    &f.softmax_max,
                    &f.softmax_sum,
                )
            });
            for (kind, (wall, cpu), flops) in [
                ("varlen-fwd", t_fwd, fwd_flops),
                ("varlen-fwdbwd", t_all, 3.5 * fwd_flops),
            ] {
                results.push(CaseResult {
                    name: format!("{kind} {label}"),
                    kind,
                    causal,
                    tokens,
                    heads,
                    kv_heads,
                    head_dim: d,
                    seconds: wall,
                    gflops: flops / wall / 1e9,
                    cpu_gflops: flops / cpu / 1e9,
                });
            }
        }
    }
    let (sgemm_after, sgemm_cpu_after) = sgemm(reps.min(3), threads, &mut rng);
    let sgemm_gflops = sgemm_before.max(sgemm_after);
    let sgemm_cpu_gflops = sgemm_cpu_before.max(sgemm_cpu_after);

    println!("threads: {threads}");
    println!(
        "sgemm 2048^3 f32: {sgemm_gflops:.1} GFLOP/s (before {sgemm_before:.1}, after \
         {sgemm_after:.1}); per CPU-second·thread: {sgemm_cpu_gflops:.1}"
    );
    println!("copy {} MiB: {copy_gbps:.1} GB/s", (len * 4) >> 20);
    println!();
    println!(
        "| case | ms | GFLOP/s | fraction of sgemm | GFLOP/CPU-s | CPU-time fraction |\n\
         |---|---|---|---|---|---|"
    );
    for r in &results {
        println!(
            "| {} | {:.1} | {:.1} | {:.3} | {:.1} | {:.3} |",
            r.name,
            r.seconds * 1e3,
            r.gflops,
            r.gflops / sgemm_gflops,
            r.cpu_gflops,
            r.cpu_gflops / sgemm_cpu_gflops,
        );
    }

    if let Some(path) = json {
        let cases: Vec<String> = results
            .iter()
            .map(|r| {
                format!(
                    "    {{\"name\": \"{}\", \"kind\": \"{}\", \"causal\": {}, \"tokens\": {}, \
                     \"heads\": {}, \"kv_heads\": {}, \"head_dim\": {}, \"seconds\": {:.6}, \
                     \"gflops\": {:.3}, \"fraction_of_sgemm\": {:.4}, \"cpu_gflops\": {:.3}, \
                     \"cpu_fraction_of_sgemm\": {:.4}}}",
                    r.name,
                    r.kind,
                    r.causal,
                    r.tokens,
                    r.heads,
                    r.kv_heads,
                    r.head_dim,
                    r.seconds,
                    r.gflops,
                    r.gflops / sgemm_gflops,
                    r.cpu_gflops,
                    r.cpu_gflops / sgemm_cpu_gflops,
                )
            })
            .collect();
        let text = format!(
            "{{\n  \"threads\": {threads},\n  \"sgemm_gflops\": {sgemm_gflops:.3},\n  \
             \"sgemm_cpu_gflops\": {sgemm_cpu_gflops:.3},\n  \"copy_gbps\": {copy_gbps:.3},\n  \
             \"cases\": [\n{}\n  ]\n}}\n",
            cases.join(",\n")
        );
        std::fs::write(&path, text).expect("writing the JSON report");
        println!("\nwrote {path}");
    }
}
