//! The bench's timing machinery: best-of timings with CPU time, the cache flusher, and the
//! copy and read probes (what `burn-ascend bench`'s fractions are taken against).

use std::path::Path;
use std::time::Instant;

use super::CliError;
use burn_ascend::kernels::cpu;

/// Writes a bench's results as pretty JSON to `path` (the `--json` flag) and says so.
pub(crate) fn write_json(path: &Path, doc: &impl serde::Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(doc)
        .map_err(|e| CliError::Io(format!("serialising the bench results: {e}")))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| CliError::Io(format!("writing {}: {e}", path.display())))?;
    println!("\nwrote {}", path.display());
    Ok(())
}

/// CPU time (seconds) consumed so far by all threads of this process (Linux; `None`
/// elsewhere).
pub(crate) fn cpu_seconds() -> Option<f64> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total as f64 * 1e-9)
}

/// Best wall time and best CPU time per thread of `reps` runs (after one warm-up run when
/// `warm_up`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) wall: f64,
    pub(crate) cpu: Option<f64>,
}

impl Timing {
    /// The better of two timings of the same thing.
    pub(crate) fn best(self, other: Timing) -> Timing {
        Timing {
            wall: self.wall.min(other.wall),
            cpu: match (self.cpu, other.cpu) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// The fast kernel's `reps` repetitions in two groups, each after a warm-up run, one before
/// and one after `between` (the composite's timing, seconds long); the compute-bound cases
/// (the memory-bound decode pairs its repetitions with the read probe: [`time_paired`]). On a
/// shared machine a burst of other processes' load
/// then spoils at most one group of the best-of. Returns the fast timing and `between`'s
/// result.
pub(crate) fn time_around<R, B>(
    reps: usize,
    mut fast: impl FnMut() -> Result<R, CliError>,
    between: impl FnOnce() -> Result<B, CliError>,
) -> Result<(Timing, B), CliError> {
    let first = time_with(reps.div_ceil(2), true, None, &mut fast)?;
    let b = between()?;
    let fast = if reps >= 2 {
        // Warmed up again: `between` ran for seconds in between.
        first.best(time_with(reps / 2, true, None, &mut fast)?)
    } else {
        first
    };
    Ok((fast, b))
}

pub(crate) fn time<R>(
    reps: usize,
    warm_up: bool,
    f: impl FnMut() -> Result<R, CliError>,
) -> Result<Timing, CliError> {
    time_with(reps, warm_up, None, f)
}

/// [`time`] with the caches flushed before each timed repetition (memory-bound cases).
pub(crate) fn time_cold<R>(
    reps: usize,
    flusher: &mut Flusher,
    f: impl FnMut() -> Result<R, CliError>,
) -> Result<Timing, CliError> {
    time_with(reps, true, Some(flusher), f)
}

pub(crate) fn time_with<R>(
    reps: usize,
    warm_up: bool,
    mut flusher: Option<&mut Flusher>,
    mut f: impl FnMut() -> Result<R, CliError>,
) -> Result<Timing, CliError> {
    if warm_up {
        std::hint::black_box(f()?);
    }
    let threads = cpu::threads() as f64;
    let (mut wall, mut cpu) = (f64::INFINITY, None::<f64>);
    for _ in 0..reps.max(1) {
        if let Some(fl) = flusher.as_deref_mut() {
            fl.flush();
        }
        let c0 = cpu_seconds();
        let t = Instant::now();
        std::hint::black_box(f()?);
        wall = wall.min(t.elapsed().as_secs_f64());
        if let (Some(c0), Some(c1)) = (c0, cpu_seconds()) {
            let per_thread = (c1 - c0) / threads;
            cpu = Some(cpu.map_or(per_thread, |c| c.min(per_thread)));
        }
    }
    Ok(Timing { wall, cpu })
}

/// Evicts the caches by writing through a buffer larger than the last-level cache (this
/// kind of machine reports a 480 MiB L3), so memory-bound measurements (copy, decode) read
/// DRAM rather than a cache left warm by the previous repetition.
pub(crate) struct Flusher {
    buf: Vec<u8>,
}

impl Flusher {
    pub(crate) fn new(bytes: usize) -> Self {
        Self {
            buf: vec![1; bytes],
        }
    }

    pub(crate) fn flush(&mut self) {
        for x in self.buf.iter_mut() {
            *x = x.wrapping_add(1);
        }
        std::hint::black_box(&self.buf);
    }
}

/// `dst = src` with `threads` scoped threads, one contiguous part each.
pub(crate) fn parallel_copy(src: &[f32], dst: &mut [f32], threads: usize) {
    let part = src.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        for (d, s) in dst.chunks_mut(part).zip(src.chunks(part)) {
            scope.spawn(move || d.copy_from_slice(s));
        }
    });
}

/// The sum of `src` with `threads` scoped threads, one contiguous part each; 16 independent
/// accumulators per thread so the loop vectorises (a read-bandwidth probe, not a numeric sum).
pub(crate) fn parallel_sum(src: &[f32], threads: usize) -> f32 {
    let part = src.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = src
            .chunks(part)
            .map(|s| {
                scope.spawn(move || {
                    let mut acc = [0.0f32; 16];
                    let blocks = s.chunks_exact(16);
                    let tail: f32 = blocks.remainder().iter().sum();
                    for b in blocks {
                        for (a, x) in acc.iter_mut().zip(b) {
                            *a += x;
                        }
                    }
                    acc.iter().sum::<f32>() + tail
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
    })
}

/// The read-bandwidth probe: [`parallel_sum`] over a buffer, after a flush.
pub(crate) struct ReadProbe {
    pub(crate) src: Vec<f32>,
    pub(crate) threads: usize,
}

impl ReadProbe {
    /// One repetition after a flush: its wall time in seconds.
    pub(crate) fn once(&self, flusher: &mut Flusher) -> f64 {
        flusher.flush();
        let t = Instant::now();
        std::hint::black_box(parallel_sum(
            std::hint::black_box(&self.src[..]),
            self.threads,
        ));
        t.elapsed().as_secs_f64()
    }

    /// GB/s of read bytes for a repetition of `wall` seconds.
    pub(crate) fn gbps(&self, wall: f64) -> f64 {
        (self.src.len() * 4) as f64 / wall / 1e9
    }
}

/// `fast`'s `reps` cold repetitions (after one warm-up call), each preceded by a read probe
/// with its own flush: the best timing of `fast` and the best probe wall time (seconds).
pub(crate) fn time_paired<R>(
    reps: usize,
    flusher: &mut Flusher,
    probe: &ReadProbe,
    mut fast: impl FnMut() -> Result<R, CliError>,
) -> Result<(Timing, f64), CliError> {
    std::hint::black_box(fast()?);
    let mut timing = Timing {
        wall: f64::INFINITY,
        cpu: None,
    };
    let mut read = f64::INFINITY;
    for _ in 0..reps.max(1) {
        read = read.min(probe.once(flusher));
        timing = timing.best(time_with(1, false, Some(&mut *flusher), &mut fast)?);
    }
    Ok((timing, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_probe_sums_every_element() {
        let v: Vec<f32> = (0..1000).map(|i| (i % 7) as f32).collect();
        let want: f32 = v.iter().sum();
        for threads in [1, 3, 8] {
            assert_eq!(parallel_sum(&v, threads), want);
        }
    }
}
