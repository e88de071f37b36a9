//! Timing harness for the int8 decode (ignored by default; not a test of correctness):
//! the bench's decode case (paged BSH cache, block 128, B = 8, KV length 4096, N = 32,
//! Nkv = 8, D = 128, int8 KV with per-channel antiquant) timed per (token, kv head) in this
//! thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, so other processes' load on the shared
//! cores does not count), converted to core cycles at the frequency of a dependent add
//! chain measured in the same run.
//!
//! ```sh
//! cargo test --release -p burn-ascend-kernels --test it decode_timing -- --ignored --nocapture
//! ```
//!
//! Modes: one thread with the cache in L2 (one sequence of 512 tokens: 1 MiB of K + V),
//! warm (the whole 64 MiB cache, last touched by the previous repetition), cold (a 512 MiB
//! write sweep before each repetition, like `burn-ascend bench`), and the two-thread cold wall
//! time against a two-thread cold read of 256 MiB in the same run (the bench's
//! `fraction_of_read_bandwidth`).

use burn_ascend_contract::incre::{
    Antiquant, IfaLayout, IncreFlashAttentionArgs, KvInput, PagedLayout,
};
use burn_ascend_kernels::cpu;
use burn_ascend_test_support::Rng;
use std::time::Instant;

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

/// A 512 MiB write sweep (the bench's cache flush).
fn flush(buf: &mut [u8]) {
    for x in buf.iter_mut() {
        *x = x.wrapping_add(1);
    }
    std::hint::black_box(&*buf);
}

/// The best thread-CPU ns of `reps` calls in a one-thread pool, `before` run untimed ahead of
/// each.
fn best_cpu_ns(reps: usize, mut before: impl FnMut(), f: impl Fn() -> Vec<f32> + Sync) -> f64 {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a thread pool");
    std::hint::black_box(pool.install(&f));
    let mut best = f64::MAX;
    for _ in 0..reps {
        before();
        let ns = pool.install(|| {
            let t0 = thread_cpu_ns();
            std::hint::black_box(f());
            thread_cpu_ns() - t0
        });
        best = best.min(ns as f64);
    }
    best
}

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

fn set_cfg(c: &[usize]) {
    for (k, &x) in c.iter().enumerate() {
        cpu::decode::EXP[k].store(x, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A/B: `BA_CONFIGS="tg,pf,subkib;…"` alternated per repetition, best of each.
#[test]
#[ignore = "timing harness"]
fn decode_timing_ab() {
    let cfgs: Vec<Vec<usize>> = std::env::var("BA_CONFIGS")
        .unwrap_or("0,1,0".into())
        .split(';')
        .map(|c| c.split(',').map(|x| x.parse().unwrap()).collect())
        .collect();
    let reps: usize = std::env::var("BA_REPS").ok().and_then(|x| x.parse().ok()).unwrap_or(10);
    let ghz = core_ghz();
    println!("core: {ghz:.2} GHz");
    let l2 = Cache::new(1, 512, 7);
    let big = Cache::new(8, 4096, 11);
    let mut sweep = vec![1u8; 512 << 20];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let pool2 = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let mut best = vec![[f64::MAX; 4]; cfgs.len()];
    for _ in 0..reps {
        for (ci, c) in cfgs.iter().enumerate() {
            set_cfg(c);
            let b = &mut best[ci];
            for _ in 0..5 {
                let ns = pool.install(|| {
                    let t0 = thread_cpu_ns();
                    std::hint::black_box(l2.run());
                    thread_cpu_ns() - t0
                });
                b[0] = b[0].min(ns as f64 / l2.pairs());
            }
            let ns = pool.install(|| {
                let t0 = thread_cpu_ns();
                std::hint::black_box(big.run());
                thread_cpu_ns() - t0
            });
            b[1] = b[1].min(ns as f64 / big.pairs());
            flush(&mut sweep);
            let ns = pool.install(|| {
                let t0 = thread_cpu_ns();
                std::hint::black_box(big.run());
                thread_cpu_ns() - t0
            });
            b[2] = b[2].min(ns as f64 / big.pairs());
            flush(&mut sweep);
            let t0 = Instant::now();
            std::hint::black_box(pool2.install(|| big.run()));
            b[3] = b[3].min(t0.elapsed().as_secs_f64());
        }
    }
    for (c, b) in cfgs.iter().zip(&best) {
        println!(
            "{c:?}: cycles/(token, kv head): L2 {:.1}, warm {:.1}, cold {:.1}; 2 threads cold {:.3} ms = {:.1} GB/s",
            b[0] * ghz,
            b[1] * ghz,
            b[2] * ghz,
            b[3] * 1e3,
            big.bytes() / b[3] / 1e9
        );
    }
}

#[test]
#[ignore = "timing harness: run with --ignored --nocapture in release"]
fn decode_timing_int8_bench_case() {
    let ghz = core_ghz();
    println!("core: {ghz:.2} GHz (dependent add chain)");
    let report = |what: &str, c: &Cache, ns: f64| {
        let per = ns / c.pairs();
        println!(
            "{what:<28} {:>8.3} ms  {per:>6.2} ns = {:>6.1} cycles per (token, kv head)  {:>5.1} GB/s",
            ns / 1e6,
            per * ghz,
            c.bytes() / ns
        );
    };
    let l2 = Cache::new(1, 512, 7);
    report("1 thread, L2", &l2, best_cpu_ns(20, || {}, || l2.run()));
    let big = Cache::new(8, 4096, 11);
    report("1 thread, warm (L3)", &big, best_cpu_ns(5, || {}, || big.run()));
    let mut sweep = vec![1u8; 512 << 20];
    report(
        "1 thread, cold",
        &big,
        best_cpu_ns(5, || flush(&mut sweep), || big.run()),
    );
    // Two threads, wall time, cold, against a two-thread cold read in the same run.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a thread pool");
    let src: Vec<f32> = (0..64 << 20).map(|i| (i % 7) as f32).collect();
    let (mut dec, mut read) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        flush(&mut sweep);
        let t0 = Instant::now();
        std::hint::black_box(pool.install(|| big.run()));
        dec = dec.min(t0.elapsed().as_secs_f64());
        flush(&mut sweep);
        let t0 = Instant::now();
        std::hint::black_box(parallel_sum(std::hint::black_box(&src)));
        read = read.min(t0.elapsed().as_secs_f64());
    }
    let (dec_gbps, read_gbps) = (big.bytes() / dec / 1e9, (src.len() * 4) as f64 / read / 1e9);
    println!(
        "2 threads, cold, wall: {:.3} ms, {dec_gbps:.1} GB/s; read {read_gbps:.1} GB/s; fraction {:.3}",
        dec * 1e3,
        dec_gbps / read_gbps
    );
}

/// For `perf record`: the L2-resident case, `BA_REPS` times in one thread.
#[test]
#[ignore = "profiling loop"]
fn decode_profile_l2() {
    let reps: usize = std::env::var("BA_REPS").ok().and_then(|x| x.parse().ok()).unwrap_or(5000);
    if let Ok(c) = std::env::var("BA_CONFIGS") {
        let c: Vec<usize> = c.split(',').map(|x| x.parse().unwrap()).collect();
        set_cfg(&c);
    }
    let l2 = Cache::new(1, 512, 7);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    pool.install(|| {
        for _ in 0..reps {
            std::hint::black_box(l2.run());
        }
    });
}
