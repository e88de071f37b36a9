//! `burn-ascend bench [--quick] [--json PATH] [--filter SUBSTRING]`: throughput of the fast
//! CPU kernels against a same-run sgemm and memory copy, and against the composite Burn path
//! on `NdArray`, with peak heap use.
//!
//! - `sgemm_gflops`: a 2048³ f32 row-major GEMM through the `gemm` crate, split into one row
//!   band per thread (how the attention kernels use it), measured before the cases, between
//!   the varlen and the decode cases, and after them; the best figure is reported.
//!   GFLOP/s = 2·n³ / time.
//! - `copy_gbps`: a copy of a 256 MiB f32 buffer (64 MiB with `--quick`), counting
//!   **read + write**: 2 × buffer bytes / time; the better of a one-thread `copy_from_slice`
//!   and the same split over all threads (both printed), with the caches flushed before each
//!   repetition.
//! - `read_gbps`: a multi-threaded sum over the same buffer, caches flushed before each
//!   repetition, counting **read** bytes only: buffer bytes / time. Decode reads its caches and
//!   writes almost nothing, so `fraction_of_read_bandwidth` (decode GB/s / `read_gbps`) is its
//!   honest denominator; against `copy_gbps` (read + write) a decode at full read bandwidth
//!   would score about 0.5. The probe runs before the cases and again before every timed
//!   decode repetition (each after its own flush), because on a shared machine the bandwidth
//!   other tenants leave moves from second to second: `read_gbps` is the best of all of them
//!   (the run's best, so a probe that happened to land in a burst of other traffic cannot
//!   inflate a fraction), and each decode case also reports `read_gbps_adjacent`, the best of
//!   the probes interleaved with its own repetitions, and its fraction of that.
//! - varlen cases: forward (`varlen-fwd`) and forward + backward (`varlen-fwdbwd`), full and
//!   causal (sparse mode 3, compressed mask), D = 64 and 128, 4096 packed tokens as
//!   [512, 1024, 2048, 512], N = 8, Nkv = 2, with sinks, f32. FLOPs: 4·D per unmasked
//!   (query, key) pair per head forward (4·Sq·Skv·D when full), backward 2.5× that, so
//!   forward + backward counts 3.5×.
//! - decode cases: incremental attention over a paged cache (BSH layout, block 128, blocks
//!   shuffled), B = 8, KV length 4096, N = 32, Nkv = 8, D = 128, f32 and int8 KV (per-channel
//!   antiquant with offset). FLOPs 4·Skv·D per head; bandwidth = bytes of K + V read / time,
//!   reported as fractions of `read_gbps` and of `copy_gbps`; timed with the caches flushed before each
//!   repetition (the int8 cache, 64 MiB, would otherwise sit in a large L3). `tokens` is the
//!   number of cached tokens read (B × KV length).
//! - `speedup_vs_composite`: composite time / fast time on the same inputs, the composite
//!   being `burn_ascend_ops::varlen::composite` (forward; forward then backward) and
//!   `burn_ascend_ops::incre::composite` on `NdArray`.
//! - `peak_extra_bytes` / `composite_peak_extra_bytes`: the highest heap level during one call
//!   minus the level before it (inputs excluded, outputs included), from the counting global
//!   allocator of the `burn-ascend` binary ([`super::host_alloc`]); `null` where no counting
//!   allocator is installed. Measured after the timed repetitions, so buffers a kernel keeps
//!   per thread between calls (the forward's tiles, the decode's scratch) are not in it.
//!
//! - `dispatch`: the host side of the `Ascend` backend's dispatch, `host_us_per_launch` and
//!   the `finetune` model's `launches_per_step` (with syncs and host fallbacks), measured on
//!   the simulation with its kernels off ([`super::bench_dispatch`]); `null` when filtered out.
//!
//! Times are the best of 10 repetitions after a warm-up (the composite: 2; `--quick`: 3, the
//! composite once without warm-up) — the best, so that a shared machine's quiet moments are
//! what is reported. The fast kernels' repetitions run in two groups, each after a warm-up,
//! before and after the composite's timing. The table also shows a CPU-time fraction (from
//! `/proc/self/task/*/schedstat`), which varies less than wall time on a shared machine.

use burn::backend::NdArray;
use burn::tensor::ops::FloatTensor;
use serde::Serialize;

use super::args::BenchArgs;
use super::bench_timing::{
    parallel_copy, time, time_around, time_cold, time_paired, Flusher, ReadProbe, Timing,
};
use super::host_alloc::peak_extra;
use super::CliError;
use burn_ascend::contract::incre::{Antiquant, IncreFlashAttentionArgs, KvInput, PagedLayout};
use burn_ascend::contract::Element;
use burn_ascend::kernels::cpu;
use burn_ascend::ops::backend::{IncreInputs, IncreKv, VarlenGradInputs, VarlenInputs};
use burn_ascend::ops::host::from_vec;
use burn_ascend::ops::incre::{BlockTable, IfaLayout, IncreKvShapes, IncreShapes};
use burn_ascend::ops::varlen::{MaskSpec, VarlenShapes, VarlenSpec};
use burn_ascend::ops::{IncreSpec, SparseMode};

/// How much to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    Full,
    Quick,
    /// Tiny shapes, one repetition: exercises every code path in a test in a second.
    Smoke,
}

impl Size {
    fn of(args: &BenchArgs) -> Self {
        if args.smoke {
            Self::Smoke
        } else if args.quick {
            Self::Quick
        } else {
            Self::Full
        }
    }
}

/// Forward FLOPs of varlen attention: 4·D per unmasked (query, key) pair per head; `causal`
/// is the lower triangle with the diagonal of square sequences.
pub fn varlen_fwd_flops(seqs: &[usize], heads: usize, head_dim: usize, causal: bool) -> f64 {
    let pairs: usize = seqs
        .iter()
        .map(|&s| if causal { s * (s + 1) / 2 } else { s * s })
        .sum();
    4.0 * pairs as f64 * head_dim as f64 * heads as f64
}

/// Forward + backward FLOPs: the backward counts 2.5× the forward.
pub fn varlen_fwdbwd_flops(seqs: &[usize], heads: usize, head_dim: usize, causal: bool) -> f64 {
    3.5 * varlen_fwd_flops(seqs, heads, head_dim, causal)
}

/// Decode FLOPs: 4·Skv·D per head and batch.
pub fn decode_flops(batch: usize, kv_len: usize, heads: usize, head_dim: usize) -> f64 {
    4.0 * (batch * kv_len * heads * head_dim) as f64
}

/// Bytes of K and V a decode call reads.
pub fn decode_bytes(
    batch: usize,
    kv_len: usize,
    kv_heads: usize,
    head_dim: usize,
    elem_bytes: usize,
) -> f64 {
    2.0 * (batch * kv_len * kv_heads * head_dim * elem_bytes) as f64
}

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    /// Uniform in [−1, 1).
    fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| (self.next() as f32 / (1u64 << 31) as f32) * 2.0 - 1.0)
            .collect()
    }
    fn i8s(&mut self, len: usize) -> Vec<i8> {
        (0..len).map(|_| (self.next() % 256) as i64 as i8).collect()
    }
}

/// One more call of `f`: its result and its peak extra heap bytes.
fn peak_of<R>(f: impl FnOnce() -> Result<R, CliError>) -> Result<(R, Option<usize>), CliError> {
    let (r, peak) = peak_extra(f);
    Ok((r?, peak))
}

/// What a case is: the figures that name it in the table and lead its JSON entry.
#[derive(Debug, Clone, Serialize)]
struct CaseShape {
    name: String,
    kind: &'static str,
    causal: bool,
    tokens: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

/// One measured case.
#[derive(Debug, Clone)]
struct CaseResult {
    shape: CaseShape,
    flops: f64,
    /// Bytes of K + V read (decode only).
    bytes: Option<f64>,
    fast: Timing,
    composite: Timing,
    peak: Option<usize>,
    composite_peak: Option<usize>,
    /// max |fast − composite| over the outputs compared.
    max_diff: f64,
    /// Best read-probe GB/s of the probes interleaved with the timed repetitions (decode).
    read_adjacent: Option<f64>,
}

impl CaseResult {
    /// `shape`, of `flops` (and `bytes` read), before anything is measured.
    fn new(shape: CaseShape, flops: f64, bytes: Option<f64>) -> Self {
        let unmeasured = Timing {
            wall: f64::NAN,
            cpu: None,
        };
        Self {
            shape,
            flops,
            bytes,
            fast: unmeasured,
            composite: unmeasured,
            peak: None,
            composite_peak: None,
            max_diff: f64::NAN,
            read_adjacent: None,
        }
    }

    /// One more call each of `fast` and `composite`, after the timed repetitions: their peak
    /// extra heap bytes, and `diff` of their outputs (max |fast − composite|).
    fn compare<F, C>(
        &mut self,
        fast: impl FnOnce() -> Result<F, CliError>,
        composite: impl FnOnce() -> Result<C, CliError>,
        diff: impl FnOnce(F, C) -> f64,
    ) -> Result<(), CliError> {
        let (a, peak) = peak_of(fast)?;
        let (b, composite_peak) = peak_of(composite)?;
        (self.peak, self.composite_peak) = (peak, composite_peak);
        self.max_diff = diff(a, b);
        Ok(())
    }

    fn gflops(&self) -> f64 {
        self.flops / self.fast.wall / 1e9
    }
    fn gbps(&self) -> Option<f64> {
        self.bytes.map(|b| b / self.fast.wall / 1e9)
    }
    /// The case's entry in the JSON's `cases`, its fractions against this run's sgemm, copy
    /// and read figures.
    fn json(&self, sgemm: f64, copy: f64, read: f64) -> CaseJson<'_> {
        CaseJson {
            shape: &self.shape,
            gflops: self.gflops(),
            fraction_of_sgemm: self.gflops() / sgemm,
            fraction_of_copy_bandwidth: self.gbps().map(|g| g / copy),
            fraction_of_read_bandwidth: self.gbps().map(|g| g / read),
            read_gbps_adjacent: self.read_adjacent,
            fraction_of_adjacent_read_bandwidth: self
                .gbps()
                .zip(self.read_adjacent)
                .map(|(g, r)| g / r),
            speedup_vs_composite: self.composite.wall / self.fast.wall,
            peak_extra_bytes: self.peak,
            composite_peak_extra_bytes: self.composite_peak,
        }
    }
}

/// The `--json` document. serde_json writes a non-finite float as `null`.
#[derive(Debug, Serialize)]
struct BenchJson<'a> {
    /// `null` when filtered out.
    dispatch: Option<super::bench_dispatch::Dispatch>,
    sgemm_gflops: f64,
    copy_gbps: f64,
    read_gbps: f64,
    cases: Vec<CaseJson<'a>>,
}

/// One case of the `--json` document (the module's documentation says what each figure is).
#[derive(Debug, Serialize)]
struct CaseJson<'a> {
    #[serde(flatten)]
    shape: &'a CaseShape,
    gflops: f64,
    fraction_of_sgemm: f64,
    /// `null` for the varlen cases (decode only).
    fraction_of_copy_bandwidth: Option<f64>,
    /// `null` for the varlen cases (decode only).
    fraction_of_read_bandwidth: Option<f64>,
    /// `null` for the varlen cases (decode only).
    read_gbps_adjacent: Option<f64>,
    /// `null` for the varlen cases (decode only).
    fraction_of_adjacent_read_bandwidth: Option<f64>,
    speedup_vs_composite: f64,
    /// `null` without a counting allocator.
    peak_extra_bytes: Option<usize>,
    composite_peak_extra_bytes: Option<usize>,
}

/// Run parameters of a size.
struct Plan {
    reps: usize,
    composite_reps: usize,
    composite_warm_up: bool,
    sgemm_n: usize,
    copy_len: usize,
    /// Bytes written to evict the caches before a cold repetition.
    flush_bytes: usize,
    seqs: Vec<usize>,
    heads: usize,
    kv_heads: usize,
    head_dims: Vec<usize>,
    decode: DecodeShape,
    /// Native launches per timed batch of the dispatch figures.
    dispatch_launches: usize,
}

#[derive(Debug, Clone, Copy)]
struct DecodeShape {
    batch: usize,
    kv_len: usize,
    block: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl Plan {
    fn of(size: Size) -> Self {
        let decode = DecodeShape {
            batch: 8,
            kv_len: 4096,
            block: 128,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
        };
        let full_cases = |reps, composite_reps, composite_warm_up, copy_len| Plan {
            reps,
            composite_reps,
            composite_warm_up,
            sgemm_n: 2048,
            copy_len,
            flush_bytes: 512 << 20,
            seqs: vec![512, 1024, 2048, 512],
            heads: 8,
            kv_heads: 2,
            head_dims: vec![64, 128],
            decode,
            dispatch_launches: 20_000,
        };
        match size {
            Size::Full => full_cases(10, 2, true, 64 << 20),
            Size::Quick => full_cases(3, 1, false, 16 << 20),
            Size::Smoke => Plan {
                reps: 1,
                composite_reps: 1,
                composite_warm_up: false,
                sgemm_n: 64,
                copy_len: 1 << 16,
                flush_bytes: 1 << 20,
                seqs: vec![8, 24],
                heads: 4,
                kv_heads: 2,
                head_dims: vec![8],
                decode: DecodeShape {
                    batch: 2,
                    kv_len: 64,
                    block: 32,
                    heads: 4,
                    kv_heads: 2,
                    head_dim: 8,
                },
                dispatch_launches: 200,
            },
        }
    }
}

fn sgemm(n: usize, reps: usize, rng: &mut Lcg) -> Result<Timing, CliError> {
    let (a, b) = (rng.vec(n * n), rng.vec(n * n));
    let mut c = vec![0.0f32; n * n];
    let threads = cpu::threads();
    time(reps, true, || {
        cpu::gemm::sgemm(n, n, n, &a, &b, &mut c, threads);
        Ok(())
    })
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() as f64)
        .fold(0.0, f64::max)
}

type Nd = NdArray<f32>;

fn nd_vec(t: FloatTensor<Nd>) -> Vec<f32> {
    burn_ascend::ops::host::to_vec::<Nd>(t)
}

/// The four varlen cases (fwd, fwd+bwd) × (full, causal) of one head dim.
fn varlen_cases(
    plan: &Plan,
    causal: bool,
    d: usize,
    rng: &mut Lcg,
    keep: &dyn Fn(&str) -> bool,
) -> Result<Vec<CaseResult>, CliError> {
    let (seqs, heads, kv_heads) = (&plan.seqs, plan.heads, plan.kv_heads);
    let label = format!("{} D={d}", if causal { "causal" } else { "full" });
    let names = [
        format!("varlen-fwd {label}"),
        format!("varlen-fwdbwd {label}"),
    ];
    if !names.iter().any(|n| keep(n)) {
        return Ok(Vec::new());
    }
    let t: usize = seqs.iter().sum();
    let mut spec = VarlenSpec::from_lengths(seqs, seqs, heads, 1.0 / (d as f64).sqrt());
    if causal {
        spec.atten_mask = MaskSpec::Compressed;
        spec.attrs.sparse_mode = SparseMode::RightDownCausal;
    }
    let sink: Vec<f32> = (0..heads).map(|h| h as f32 * 0.25 - 1.0).collect();
    let (q, k, v, dy) = (
        rng.vec(t * heads * d),
        rng.vec(t * kv_heads * d),
        rng.vec(t * kv_heads * d),
        rng.vec(t * heads * d),
    );
    let dims = spec.validate_fwd(&VarlenShapes {
        query: [t, heads, d],
        key: [t, kv_heads, d],
        value: [t, kv_heads, d],
        sink: Some(heads),
        pse: None,
        atten_mask: None,
        alibi_slopes: None,
        drop_mask: None,
    })?;
    let p = spec.problem(dims, Some(&sink));

    // The composite on NdArray, on the same values.
    let device = Default::default();
    let inputs = VarlenInputs {
        query: from_vec::<Nd>(q.clone(), &[t, heads, d], &device),
        key: from_vec::<Nd>(k.clone(), &[t, kv_heads, d], &device),
        value: from_vec::<Nd>(v.clone(), &[t, kv_heads, d], &device),
        sink: Some(from_vec::<Nd>(sink.clone(), &[heads], &device)),
        pse: None,
        atten_mask: None,
        alibi_slopes: None,
        drop_mask: None,
    };
    let dy_t = from_vec::<Nd>(dy.clone(), &[t, heads, d], &device);
    let comp_fwd = || {
        burn_ascend::ops::varlen::composite::varlen_fwd::<Nd>(inputs.clone(), &spec)
            .map_err(CliError::from)
    };
    let comp_fwdbwd = || -> Result<_, CliError> {
        let f = comp_fwd()?;
        Ok(burn_ascend::ops::varlen::composite::varlen_bwd::<Nd>(
            VarlenGradInputs {
                inputs: inputs.clone(),
                dy: dy_t.clone(),
                attention_in: f.attention_out,
                softmax_max: f.softmax_max,
                softmax_sum: f.softmax_sum,
            },
            &spec,
        )?)
    };
    let fast_fwd = || Ok(cpu::varlen_fwd(&p, &q, &k, &v));
    let fast_fwdbwd = || {
        let f = cpu::varlen_fwd(&p, &q, &k, &v);
        Ok(cpu::varlen_bwd(
            &p,
            &q,
            &k,
            &v,
            &dy,
            &f.attention_out,
            &f.softmax_max,
            &f.softmax_sum,
        ))
    };

    let mut out = Vec::new();
    let flops = varlen_fwd_flops(seqs, heads, d, causal);
    let base = |name: &str, kind, flops| {
        let shape = CaseShape {
            name: name.to_string(),
            kind,
            causal,
            tokens: t,
            heads,
            kv_heads,
            head_dim: d,
        };
        CaseResult::new(shape, flops, None)
    };
    if keep(&names[0]) {
        let mut r = base(&names[0], "varlen-fwd", flops);
        (r.fast, r.composite) = time_around(plan.reps, fast_fwd, || {
            time(plan.composite_reps, plan.composite_warm_up, comp_fwd)
        })?;
        r.compare(fast_fwd, comp_fwd, |a, b| {
            max_abs_diff(&a.attention_out, &nd_vec(b.attention_out))
        })?;
        out.push(r);
    }
    if keep(&names[1]) {
        let mut r = base(&names[1], "varlen-fwdbwd", 3.5 * flops);
        (r.fast, r.composite) = time_around(plan.reps, fast_fwdbwd, || {
            time(plan.composite_reps, plan.composite_warm_up, comp_fwdbwd)
        })?;
        r.compare(fast_fwdbwd, comp_fwdbwd, |a, b| {
            max_abs_diff(&a.dq, &nd_vec(b.dq))
                .max(max_abs_diff(&a.dk, &nd_vec(b.dk)))
                .max(max_abs_diff(&a.dv, &nd_vec(b.dv)))
        })?;
        out.push(r);
    }
    Ok(out)
}

/// The decode case's call but its caches: the query, the block table, the lengths and the
/// antiquant (int8 KV).
struct DecodeCall<'a> {
    q: &'a [f32],
    table: &'a [i32],
    lens: &'a [i64],
    shape: DecodeShape,
    antiquant: Option<Antiquant<'a>>,
}

impl<'a> DecodeCall<'a> {
    /// The kernel arguments over the paged BSH caches `k` / `v` (what `IncreSpec::args`
    /// builds, for any KV type).
    fn args<T: Element>(&self, k: &'a [T], v: &'a [T]) -> IncreFlashAttentionArgs<'a, f32, T> {
        let s = self.shape;
        let kv = KvInput::Paged {
            key_cache: k,
            value_cache: v,
            layout: PagedLayout::Bsh,
            block_table: self.table,
            max_blocks_per_seq: s.kv_len.div_ceil(s.block),
            block_size: s.block,
        };
        let mut a = IncreFlashAttentionArgs::new(
            self.q,
            kv,
            IfaLayout::Bsh,
            s.batch,
            s.heads,
            s.head_dim,
            1.0 / (s.head_dim as f64).sqrt(),
        );
        a.num_key_value_heads = s.kv_heads;
        a.actual_seq_lengths = Some(self.lens);
        a.antiquant = self.antiquant;
        a
    }
}

/// The decode case with f32 (`int8 = false`) or int8 KV.
fn decode_case(
    plan: &Plan,
    int8: bool,
    rng: &mut Lcg,
    flusher: &mut Flusher,
    probe: &ReadProbe,
) -> Result<CaseResult, CliError> {
    let DecodeShape {
        batch,
        kv_len,
        block,
        heads,
        kv_heads,
        head_dim: d,
    } = plan.decode;
    let maxb = kv_len.div_ceil(block);
    let nblocks = batch * maxb;
    // Each sequence's blocks scattered over the cache (a shuffled assignment).
    let mut ids: Vec<i32> = (0..nblocks as i32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    let h = kv_heads * d;
    let cache_len = nblocks * block * h;
    let q = rng.vec(batch * heads * d);
    let (k8, v8) = if int8 {
        (rng.i8s(cache_len), rng.i8s(cache_len))
    } else {
        (Vec::new(), Vec::new())
    };
    // f32 caches: the data itself (f32 case) or the int8 values as f32 (the composite's input
    // in the int8 case: the Burn API carries int8 KV as float tensors).
    let (kf, vf): (Vec<f32>, Vec<f32>) = if int8 {
        (
            k8.iter().map(|&x| f32::from(x)).collect(),
            v8.iter().map(|&x| f32::from(x)).collect(),
        )
    } else {
        (rng.vec(cache_len), rng.vec(cache_len))
    };
    let aq_scale: Vec<f32> = rng.vec(2 * h).iter().map(|x| 0.01 + 0.005 * x).collect();
    let aq_offset: Vec<f32> = rng.vec(2 * h).iter().map(|x| (4.0 * x).round()).collect();
    let lens = vec![kv_len as i64; batch];

    // Same scale as `DecodeCall::args`.
    let mut spec = IncreSpec::new(heads, 1.0 / (d as f64).sqrt(), IfaLayout::Bsh);
    spec.num_key_value_heads = kv_heads;
    spec.block_size = block;
    spec.actual_seq_lengths = Some(lens.clone());
    spec.block_table = Some(BlockTable {
        data: ids.clone().into(),
        shape: vec![batch, maxb],
    });
    let mut shapes = IncreShapes::new(
        vec![batch, 1, heads * d],
        IncreKvShapes::Paged {
            key_cache: vec![nblocks, block, h],
            value_cache: vec![nblocks, block, h],
        },
        int8,
    );
    if int8 {
        shapes.antiquant_scale = Some(vec![2, h]);
        shapes.antiquant_offset = Some(vec![2, h]);
    }
    spec.validate(&shapes)?;
    let call = DecodeCall {
        q: &q,
        table: &ids,
        lens: &lens,
        shape: plan.decode,
        antiquant: int8.then_some(Antiquant {
            scale: &aq_scale,
            offset: Some(&aq_offset),
            per_channel: true,
        }),
    };
    let (args8, args32) = (call.args(&k8, &v8), call.args(&kf, &vf));
    let fast = || {
        Ok(if int8 {
            cpu::incre_flash_attention(&args8)
        } else {
            cpu::incre_flash_attention(&args32)
        })
    };
    let device = Default::default();
    let mut inputs = IncreInputs::<FloatTensor<Nd>>::new(
        from_vec::<Nd>(q.clone(), &[batch, 1, heads * d], &device),
        IncreKv::Paged {
            key_cache: from_vec::<Nd>(kf.clone(), &[nblocks, block, h], &device),
            value_cache: from_vec::<Nd>(vf.clone(), &[nblocks, block, h], &device),
        },
    );
    if int8 {
        inputs.antiquant_scale = Some(from_vec::<Nd>(aq_scale.clone(), &[2, h], &device));
        inputs.antiquant_offset = Some(from_vec::<Nd>(aq_offset.clone(), &[2, h], &device));
    }
    let comp = || {
        burn_ascend::ops::incre::composite::incre_fwd::<Nd>(inputs.clone(), &spec)
            .map_err(CliError::from)
    };
    let elem = if int8 { 1 } else { 4 };
    // Cold caches: the KV read is what is measured. Two groups around the composite (as
    // `time_around`), each repetition paired with a read probe.
    let (first, read_first) = time_paired(plan.reps.div_ceil(2), flusher, probe, fast)?;
    let composite = time(plan.composite_reps, plan.composite_warm_up, comp)?;
    let (fast_timing, read_wall) = if plan.reps >= 2 {
        let (second, read_second) = time_paired(plan.reps / 2, flusher, probe, fast)?;
        (first.best(second), read_first.min(read_second))
    } else {
        (first, read_first)
    };
    let shape = CaseShape {
        name: format!("decode {} KV", if int8 { "int8" } else { "f32" }),
        kind: "decode",
        causal: false,
        tokens: batch * kv_len,
        heads,
        kv_heads,
        head_dim: d,
    };
    let mut r = CaseResult::new(
        shape,
        decode_flops(batch, kv_len, heads, d),
        Some(decode_bytes(batch, kv_len, kv_heads, d, elem)),
    );
    (r.fast, r.composite) = (fast_timing, composite);
    r.read_adjacent = Some(probe.gbps(read_wall));
    r.compare(fast, comp, |a, b| max_abs_diff(&a, &nd_vec(b)))?;
    Ok(r)
}

/// Human-readable bytes.
fn mib(b: Option<usize>) -> String {
    b.map_or("n/a".into(), |b| {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    })
}

/// Runs the bench, its command line parsed.
pub fn main(opts: &BenchArgs) -> Result<(), CliError> {
    if let Some(dir) = &opts.model {
        let plan = super::bench_model::ModelPlan::of(opts.quick, opts.smoke);
        return super::bench_model::main(dir, plan, opts.json.as_deref());
    }
    let plan = Plan::of(Size::of(opts));
    let keep = |name: &str| {
        opts.filter
            .as_ref()
            .is_none_or(|f| name.contains(f.as_str()))
    };
    let threads = cpu::threads();
    let mut rng = Lcg(42);
    // As many repetitions as the cases get: the best of them is the denominator, and a
    // depressed sgemm would inflate every fraction.
    let sgemm_reps = plan.reps;
    let sgemm_before = sgemm(plan.sgemm_n, sgemm_reps, &mut rng)?;

    let mut flusher = Flusher::new(plan.flush_bytes);
    let (copy_1, copy_n, read_before, probe) = {
        let src = rng.vec(plan.copy_len);
        let mut dst = vec![0.0f32; plan.copy_len];
        let one = time_cold(plan.reps.max(3), &mut flusher, || {
            std::hint::black_box(&mut dst[..]).copy_from_slice(std::hint::black_box(&src[..]));
            Ok(())
        })?;
        let all = time_cold(plan.reps.max(3), &mut flusher, || {
            parallel_copy(&src, &mut dst, threads);
            Ok(())
        })?;
        let probe = ReadProbe { src, threads };
        // Warm-up, then the best of the repetitions.
        probe.once(&mut flusher);
        let read = (0..plan.reps.max(3))
            .map(|_| probe.once(&mut flusher))
            .fold(f64::INFINITY, f64::min);
        let gbps = |t: Timing| 2.0 * (plan.copy_len * 4) as f64 / t.wall / 1e9;
        (gbps(one), gbps(all), probe.gbps(read), probe)
    };
    // The better of a one-thread and an all-thread copy: the machine's copy bandwidth.
    let copy = copy_1.max(copy_n);

    let mut results = Vec::new();
    for causal in [false, true] {
        for &d in &plan.head_dims {
            results.extend(varlen_cases(&plan, causal, d, &mut rng, &keep)?);
        }
    }
    let sgemm_middle = sgemm(plan.sgemm_n, sgemm_reps, &mut rng)?;
    for int8 in [false, true] {
        let name = format!("decode {} KV", if int8 { "int8" } else { "f32" });
        if keep(&name) {
            results.push(decode_case(&plan, int8, &mut rng, &mut flusher, &probe)?);
        }
    }
    let sgemm_after = sgemm(plan.sgemm_n, sgemm_reps, &mut rng)?;
    let dispatch = if keep("dispatch") {
        Some(super::bench_dispatch::measure(plan.dispatch_launches)?)
    } else {
        None
    };
    let n3 = 2.0 * (plan.sgemm_n as f64).powi(3);
    let best = |t: Timing| (n3 / t.wall / 1e9, t.cpu.map(|c| n3 / c / 1e9));
    let (before, before_cpu) = best(sgemm_before);
    let (middle, middle_cpu) = best(sgemm_middle);
    let (after, after_cpu) = best(sgemm_after);
    let sgemm_gflops = before.max(middle).max(after);
    let sgemm_cpu = before_cpu
        .zip(middle_cpu)
        .zip(after_cpu)
        .map(|((a, b), c)| a.max(b).max(c));

    println!("threads: {threads}");
    println!(
        "sgemm {n}^3 f32: {sgemm_gflops:.1} GFLOP/s (before {before:.1}, middle {middle:.1}, \
         after {after:.1})",
        n = plan.sgemm_n
    );
    println!(
        "copy {} MiB (caches flushed, read + write bytes): {copy:.1} GB/s (1 thread {copy_1:.1}, \
         {threads} threads {copy_n:.1})",
        (plan.copy_len * 4) >> 20
    );
    // The run's best read, over the probes before the cases and those paired with the
    // decode repetitions.
    let read_adjacent = results
        .iter()
        .filter_map(|r| r.read_adjacent)
        .fold(f64::NAN, f64::max);
    let read_gbps = read_before.max(read_adjacent);
    println!(
        "read {} MiB (caches flushed, {threads} threads summing, read bytes): {read_gbps:.1} GB/s \
         (before the cases {read_before:.1}, paired with the decode repetitions {})",
        (plan.copy_len * 4) >> 20,
        if read_adjacent.is_nan() {
            "—".to_string()
        } else {
            format!("{read_adjacent:.1}")
        }
    );
    println!();
    println!(
        "| case | ms | GFLOP/s | × sgemm | GB/s | × read | × adjacent read | × copy | composite ms | \
         speedup | peak extra | composite peak extra | max abs diff | CPU-time × sgemm |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &results {
        let cpu_frac = r.fast.cpu.zip(sgemm_cpu).map_or("n/a".into(), |(c, s)| {
            format!("{:.3}", r.flops / c / 1e9 / s)
        });
        println!(
            "| {} | {:.1} | {:.1} | {:.3} | {} | {} | {} | {} | {:.0} | {:.1}× | {} | {} | {:.1e} | {} |",
            r.shape.name,
            r.fast.wall * 1e3,
            r.gflops(),
            r.gflops() / sgemm_gflops,
            r.gbps().map_or("—".into(), |g| format!("{g:.1}")),
            r.gbps().map_or("—".into(), |g| format!("{:.3}", g / read_gbps)),
            r.gbps()
                .zip(r.read_adjacent)
                .map_or("—".into(), |(g, a)| format!("{:.3}", g / a)),
            r.gbps().map_or("—".into(), |g| format!("{:.3}", g / copy)),
            r.composite.wall * 1e3,
            r.composite.wall / r.fast.wall,
            mib(r.peak),
            mib(r.composite_peak),
            r.max_diff,
            cpu_frac,
        );
    }
    if let Some(d) = &dispatch {
        println!(
            "\ndispatch (Ascend on the simulation, kernels off): {:.2} host µs per launch; \
             finetune step: {} launches, {} syncs, {} host fallbacks",
            d.host_us_per_launch, d.launches_per_step, d.syncs_per_step, d.fallbacks_per_step
        );
    }
    if let Some(path) = &opts.json {
        let doc = BenchJson {
            dispatch,
            sgemm_gflops,
            copy_gbps: copy,
            read_gbps,
            cases: results
                .iter()
                .map(|r| r.json(sgemm_gflops, copy, read_gbps))
                .collect(),
        };
        super::bench_timing::write_json(path, &doc)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flop_and_byte_counts() {
        // Full: 4·S²·D per head; causal: the lower triangle with the diagonal.
        assert_eq!(varlen_fwd_flops(&[2], 1, 1, false), 16.0);
        assert_eq!(varlen_fwd_flops(&[2], 1, 1, true), 12.0);
        assert_eq!(
            varlen_fwd_flops(&[512, 1024, 2048, 512], 8, 64, false),
            4.0 * (512.0 * 512.0 * 2.0 + 1024.0 * 1024.0 + 2048.0 * 2048.0) * 64.0 * 8.0
        );
        assert_eq!(
            varlen_fwdbwd_flops(&[3, 1], 2, 4, true),
            3.5 * 4.0 * (6.0 + 1.0) * 4.0 * 2.0
        );
        assert_eq!(
            decode_flops(8, 4096, 32, 128),
            4.0 * 8.0 * 4096.0 * 32.0 * 128.0
        );
        // f32 K + V of B = 8, 4096 tokens, Nkv = 8, D = 128: 256 MiB; int8: 64 MiB.
        assert_eq!(decode_bytes(8, 4096, 8, 128, 4), (256u64 << 20) as f64);
        assert_eq!(decode_bytes(8, 4096, 8, 128, 1), (64u64 << 20) as f64);
    }
}
