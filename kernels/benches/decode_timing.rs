//! Timing harnesses for the int8 decode (a bench target, not a test of correctness, so `cargo
//! test` does not build it): the bench's decode case (paged BSH cache, block 128, B = 8, KV length 4096, N = 32,
//! Nkv = 8, D = 128, int8 KV with per-channel antiquant) timed per (token, kv head) in this
//! thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, so other processes' load on the shared
//! cores does not count), converted to core cycles at the frequency of a dependent `imul`
//! chain measured in the same run (under AVX-512 load the cores may run slower, so the
//! cycles are an upper bound; compare runs, not against instruction counts).
//!
//! ```sh
//! cargo bench -p burn-ascend-kernels --bench decode_timing                    # all three
//! cargo bench -p burn-ascend-kernels --bench decode_timing -- prefetch_overlap # by name
//! ```
//!
//! Each harness runs when its name contains one of the arguments (all of them without one):
//! `decode_timing_int8_bench_case`, `decode_profile_l2`, `prefetch_overlap`.
//!
//! Modes, best of `BA_REPS` (default 8) alternating rounds: one thread with the cache in L2
//! (one sequence of 512 tokens: 1 MiB of K + V), warm (the whole 64 MiB cache, last touched
//! by the previous call), cold (a 512 MiB write sweep before each call, like `burn-ascend
//! bench`), and the two-thread cold wall time against a two-thread cold read of 256 MiB in
//! the same run (the bench's `fraction_of_read_bandwidth`). `decode_profile_l2` loops the L2
//! case for `perf record -e cpu-clock`; `prefetch_overlap` measures how much of the software
//! prefetch's memory time AVX-512 arithmetic hides on this CPU (the decode's other half).

use burn_ascend_contract::incre::{
    Antiquant, IfaLayout, IncreFlashAttentionArgs, KvInput, PagedLayout,
};
use burn_ascend_kernels::cpu;
use burn_ascend_test_support::Rng;
use std::time::Instant;

/// The harnesses by name, in the order they run.
const HARNESSES: [(&str, fn()); 3] = [
    (
        "decode_timing_int8_bench_case",
        decode_timing_int8_bench_case,
    ),
    ("decode_profile_l2", decode_profile_l2),
    ("prefetch_overlap", prefetch_overlap),
];

/// Runs each harness whose name contains one of the arguments, or all of them without one.
/// Flags are skipped: `cargo bench` passes `--bench` to a target without the libtest harness.
fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, harness) in HARNESSES {
        if filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())) {
            println!("{name}:");
            harness();
        }
    }
}

const BLOCK: usize = 128;
const N: usize = 32;
const NKV: usize = 8;
const D: usize = 128;

/// `struct timespec` of 64-bit Linux.
#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// This thread's CPU time in ns (`CLOCK_THREAD_CPUTIME_ID`: time other processes hold the
/// shared cores does not count).
fn thread_cpu_ns() -> u64 {
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: libc's `clock_gettime` (std links libc) writes one `timespec` to a valid,
    // exclusively borrowed pointer.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.sec as u64 * 1_000_000_000 + ts.nsec as u64
}

/// Core cycles per ns: a chain of dependent `imul`s (3 cycles each; dependent `add`s with an
/// immediate can be folded by the renamer on this CPU).
fn core_ghz() -> f64 {
    let iters = 60_000_000u64;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t0 = thread_cpu_ns();
        let mut x = std::hint::black_box(3u64);
        // SAFETY: register-only arithmetic on the named registers; no memory or stack use.
        unsafe {
            std::arch::asm!(
                "2:",
                "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}",
                "sub {n}, 4",
                "jnz 2b",
                x = inout(reg) x,
                n = inout(reg) iters => _,
                options(nomem, nostack),
            );
        }
        std::hint::black_box(x);
        best = best.min((thread_cpu_ns() - t0) as f64);
    }
    3.0 * iters as f64 / best
}

struct Cache {
    q: Vec<f32>,
    k: Vec<i8>,
    v: Vec<i8>,
    table: Vec<i32>,
    scale: Vec<f32>,
    offset: Vec<f32>,
    batch: usize,
    kv_len: usize,
    lens: Vec<i64>,
}

impl Cache {
    fn new(batch: usize, kv_len: usize, seed: u64) -> Self {
        let mut r = Rng::new(seed);
        let maxb = kv_len.div_ceil(BLOCK);
        let nblocks = batch * maxb;
        let mut table: Vec<i32> = (0..nblocks as i32).collect();
        for i in (1..table.len()).rev() {
            table.swap(i, r.below(i + 1));
        }
        let len = nblocks * BLOCK * NKV * D;
        let mut i8s = |n: usize| -> Vec<i8> { (0..n).map(|_| r.below(256) as u8 as i8).collect() };
        let (k, v) = (i8s(len), i8s(len));
        let q = (0..batch * N * D).map(|_| r.sym(1.0) as f32).collect();
        let scale = (0..2 * NKV * D)
            .map(|_| 0.01 + 0.005 * r.sym(1.0) as f32)
            .collect();
        let offset = (0..2 * NKV * D)
            .map(|_| (4.0 * r.sym(1.0)).round() as f32)
            .collect();
        Self {
            q,
            k,
            v,
            table,
            scale,
            offset,
            batch,
            kv_len,
            lens: vec![kv_len as i64; batch],
        }
    }

    fn run(&self) -> Vec<f32> {
        let mut a = IncreFlashAttentionArgs::new(
            &self.q,
            KvInput::Paged {
                key_cache: &self.k,
                value_cache: &self.v,
                layout: PagedLayout::Bsh,
                block_table: &self.table,
                max_blocks_per_seq: self.kv_len.div_ceil(BLOCK),
                block_size: BLOCK,
            },
            IfaLayout::Bsh,
            self.batch,
            N,
            D,
            1.0 / (D as f64).sqrt(),
        );
        a.num_key_value_heads = NKV;
        a.actual_seq_lengths = Some(&self.lens);
        a.antiquant = Some(Antiquant {
            scale: &self.scale,
            offset: Some(&self.offset),
            per_channel: true,
        });
        cpu::incre_flash_attention(&a)
    }

    /// (token, kv head) pairs per call.
    fn pairs(&self) -> f64 {
        (self.batch * self.kv_len * NKV) as f64
    }

    fn bytes(&self) -> f64 {
        2.0 * (self.batch * self.kv_len * NKV * D) as f64
    }
}

/// A write sweep over `buf` (512 MiB: the bench's cache flush).
fn flush(buf: &mut [u8]) {
    for x in buf.iter_mut() {
        *x = x.wrapping_add(1);
    }
    std::hint::black_box(&*buf);
}

/// The bench's read probe: a sum over `src`, split between two threads.
fn parallel_sum(src: &[f32]) -> f32 {
    let part = src.len().div_ceil(2);
    std::thread::scope(|scope| {
        let handles: Vec<_> = src
            .chunks(part)
            .map(|s| {
                scope.spawn(move || {
                    let mut acc = [0.0f32; 16];
                    for b in s.chunks_exact(16) {
                        for (a, x) in acc.iter_mut().zip(b) {
                            *a += x;
                        }
                    }
                    acc.iter().sum::<f32>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
    })
}

fn decode_timing_int8_bench_case() {
    let reps: usize = std::env::var("BA_REPS")
        .ok()
        .and_then(|x| x.parse().ok())
        .unwrap_or(8);
    let ghz = core_ghz();
    let l2 = Cache::new(1, 512, 7);
    let big = Cache::new(8, 4096, 11);
    let mut sweep = vec![1u8; 512 << 20];
    let src: Vec<f32> = (0..64 << 20).map(|i| (i % 7) as f32).collect();
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("a thread pool")
    };
    let (one, two) = (pool(1), pool(2));
    let cpu_ns = |c: &Cache| {
        one.install(|| {
            let t0 = thread_cpu_ns();
            std::hint::black_box(c.run());
            (thread_cpu_ns() - t0) as f64 / c.pairs()
        })
    };
    // Best of `reps` rounds, each: the L2 case 5 times, the big case warm and cold (one
    // thread, CPU time), two threads cold (wall), the two-thread cold read.
    let mut best = [f64::MAX; 5];
    for _ in 0..reps {
        for _ in 0..5 {
            best[0] = best[0].min(cpu_ns(&l2));
        }
        best[1] = best[1].min(cpu_ns(&big));
        flush(&mut sweep);
        best[2] = best[2].min(cpu_ns(&big));
        flush(&mut sweep);
        let t0 = Instant::now();
        std::hint::black_box(two.install(|| big.run()));
        best[3] = best[3].min(t0.elapsed().as_secs_f64());
        flush(&mut sweep);
        let t0 = Instant::now();
        std::hint::black_box(parallel_sum(std::hint::black_box(&src)));
        best[4] = best[4].min(t0.elapsed().as_secs_f64());
    }
    let (dec, read) = (
        big.bytes() / best[3] / 1e9,
        (src.len() * 4) as f64 / best[4] / 1e9,
    );
    println!(
        "core {ghz:.2} GHz; cycles per (token, kv head), one thread: L2 {:.1}, warm {:.1}, \
         cold {:.1}; two threads cold {:.3} ms = {dec:.1} GB/s, read {read:.1} GB/s, \
         fraction {:.3}",
        best[0] * ghz,
        best[1] * ghz,
        best[2] * ghz,
        best[3] * 1e3,
        dec / read
    );
}

/// For `perf record`: the L2-resident case, `BA_REPS` times in one thread.
fn decode_profile_l2() {
    let reps: usize = std::env::var("BA_REPS")
        .ok()
        .and_then(|x| x.parse().ok())
        .unwrap_or(5000);
    let l2 = Cache::new(1, 512, 7);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| {
        for _ in 0..reps {
            std::hint::black_box(l2.run());
        }
    });
}

/// How well software prefetch into L2 (`prefetcht1`) overlaps AVX-512 arithmetic on one
/// thread, on the bench cache's K and V in the kernel's sub-chunk order (64 KiB runs of the
/// shuffled blocks, a 512 MiB write sweep before each repetition). Per cache line, `work`
/// rounds of 16 independent FMAs (on 16 int8 values widened as the kernel does) run while the
/// line is prefetched: on a line of the previous run (in L2 by then, as in the kernel), and on
/// an L1-resident line; `prefetch only` and `arithmetic only` are the two sides alone. Cycles
/// per line at the `imul` chain's frequency, best of 3. The kernel needs about 20 cycles of
/// arithmetic per line (78 per (token, kv head) in L2, 4 lines).
fn prefetch_overlap() {
    if !is_x86_feature_detected!("avx512f") {
        println!("skipped: no AVX-512");
        return;
    }
    // SAFETY: AVX-512 F was detected above.
    unsafe { prefetch_overlap_avx512() }
}

#[target_feature(enable = "avx512f")]
fn prefetch_overlap_avx512() {
    use std::arch::x86_64::*;
    let ghz = core_ghz();
    let cache = Cache::new(8, 4096, 11);
    let mut sweep = vec![1u8; 512 << 20];
    let half = BLOCK * NKV * D / 2;
    let mut runs = Vec::new();
    for &blk in &cache.table {
        for h in 0..2 {
            let o = blk as usize * 2 * half + h * half;
            runs.push(cache.k[o..o + half].as_ptr());
            runs.push(cache.v[o..o + half].as_ptr());
        }
    }
    let l1 = vec![1i8; 4096];
    let lines = (runs.len() * half / 64) as f64;
    /// What a line's step does: prefetch it, compute on an older line (from L2 or L1), or both.
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        PrefetchOnly,
        ArithmeticOnly,
        BothL2,
        BothL1,
    }
    let modes = [
        (Mode::PrefetchOnly, "prefetch only"),
        (Mode::ArithmeticOnly, "arithmetic only"),
        (Mode::BothL2, "both, L2 data"),
        (Mode::BothL1, "both, L1 data"),
    ];
    for work in [0usize, 1, 2, 3] {
        let mut row = Vec::new();
        for (mode, name) in modes {
            let mut best = f64::MAX;
            for _ in 0..3 {
                flush(&mut sweep);
                let mut acc = [_mm512_setzero_ps(); 16];
                let t0 = thread_cpu_ns();
                let mut prev = runs[0];
                for &run in &runs {
                    for l in 0..half / 64 {
                        let line = run.wrapping_add(64 * l);
                        if mode != Mode::ArithmeticOnly {
                            _mm_prefetch::<_MM_HINT_T1>(line);
                        }
                        if mode == Mode::PrefetchOnly {
                            continue;
                        }
                        let src = if mode == Mode::BothL2 {
                            prev.wrapping_add(64 * l)
                        } else {
                            l1[(l % 64) * 64..].as_ptr()
                        };
                        // SAFETY: `src` is a line of a previous run or of `l1`: 16 bytes
                        // readable.
                        let x = unsafe { _mm_loadu_si128(src.cast()) };
                        let y = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
                        for _ in 0..work {
                            for a in acc.iter_mut() {
                                *a = _mm512_fmadd_ps(y, y, *a);
                            }
                        }
                    }
                    prev = run;
                }
                std::hint::black_box(acc);
                best = best.min((thread_cpu_ns() - t0) as f64);
            }
            row.push(format!("{name} {:.1}", best * ghz / lines));
        }
        println!("{} FMA per line: {}", 16 * work, row.join(", "));
    }
}
